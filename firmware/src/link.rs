//! The host's link, as both receiving images use it: frames out over the UART, the next
//! frame in, and a pull after every silence of the feed's timing policy
//! (`idem_board::timing::DEVICE_SILENCE_MS`, counted by TIMER0 from every byte heard
//! and from every wait's start). What a frame means is the image's: this module only
//! moves bytes and keeps time.

use idem_board::timing::DEVICE_SILENCE_MS;
use idem_board::wire::{Reader, WireError};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::timer::Timer;
use crate::uart::Uart;

/// The function that frames a message in its protocol's domain
/// (`idem_board::feed::encode`, `idem_board::modem::encode`).
pub type Encode<T> = for<'a> fn(&T, &mut [u8], &'a mut [u8]) -> Result<&'a [u8], WireError>;

/// Sends `msg` framed by `encode`, with `S` bytes of scratch for its body and `E` for
/// the frame (a message that does not fit is not sent).
pub fn send<T: Serialize, const S: usize, const E: usize>(
    uart: &mut Uart,
    encode: Encode<T>,
    msg: &T,
) {
    let mut scratch = [0u8; S];
    let mut out = [0u8; E];
    if let Ok(bytes) = encode(msg, &mut scratch, &mut out) {
        uart.write(bytes);
    }
}

/// Waits for the host's next frame: the message, or why the frame was skipped. After
/// each silence of `DEVICE_SILENCE_MS`, `on_silence` may send a pull; it returns
/// whether it did, and then the partly received frame before it is forgotten.
pub fn receive<T: DeserializeOwned, const N: usize>(
    uart: &mut Uart,
    timer: &Timer,
    reader: &mut Reader<T, N>,
    mut on_silence: impl FnMut(&mut Uart) -> bool,
) -> Result<T, WireError> {
    timer.start_ms(DEVICE_SILENCE_MS);
    loop {
        let Some(byte) = uart.read() else {
            if timer.expired() {
                if on_silence(uart) {
                    reader.reset();
                }
                timer.start_ms(DEVICE_SILENCE_MS);
            }
            continue;
        };
        timer.start_ms(DEVICE_SILENCE_MS);
        if let Some(frame) = reader.push(byte) {
            return frame;
        }
    }
}

/// Stopped for good (storage failed): waits for a reset.
pub fn halt() -> ! {
    loop {
        cortex_m::asm::wfi();
    }
}
