//! idem on a BBC micro:bit as the consumer of a stream the host feeds it (`idem device
//! feed`). The host configures the store and the checkpoint interval; the board announces
//! where its flash says it resumes, pulls batches of events, applies them with the core's
//! `Consumer`, checkpoints, and acknowledges. A reset is the crash: the board boots, reads
//! its flash, and announces its position again. At the first boot of its storage it draws
//! its id key from the RNG; the key stays in flash with its boot counter and goes out in
//! every boot frame, and the host keys the message ids it sends under it. Every rule is
//! `idem_board::feed::Device`'s, and its silence is the feed's timing policy's
//! (`idem_board::timing`): TIMER0 counts `DEVICE_SILENCE_MS` from every byte heard and
//! every frame sent, the policy's `DeviceTimer` in hardware. This is board glue: the NVMC
//! driver, the UART, the timer, the RNG and the reset.
#![no_std]
#![no_main]

use cortex_m_rt::entry;
use idem_board::feed::{
    DOMAIN, Device, DeviceReader, FROM_DEVICE_ENCODED, FROM_DEVICE_MAX, FeedLayout, FromDevice,
    encode,
};
use idem_board::timing::{DEVICE_SILENCE_MS, QEMU_EFFECT_MS};
use idem_core::log::IdKey;
use idem_firmware::{IMAGE_ID, nvmc, rng, stack, timer, uart};
use panic_halt as _;

/// Under QEMU, the policy's pause after each effect ([`QEMU_EFFECT_MS`]), so a reset
/// can land between two effects of a batch (QEMU's flash takes no time). None on a
/// board: its flash takes its own time.
const PACE_MS: Option<u32> = if cfg!(feature = "qemu") {
    Some(QEMU_EFFECT_MS)
} else {
    None
};

/// RAM set aside for the consumer of the configured store; every store's consumer fits
/// it (the largest, message-id with a window of 32, takes about 520 bytes).
const CONSUMER_RAM: usize = 1024;

fn send(uart: &mut uart::Uart, msg: &FromDevice) {
    let mut scratch = [0u8; FROM_DEVICE_MAX + 4];
    let mut out = [0u8; FROM_DEVICE_ENCODED];
    if let Ok(bytes) = encode(msg, &mut scratch, &mut out) {
        uart.write(bytes);
    }
}

/// Stopped for good (storage failed): wait for a reset.
fn halt() -> ! {
    loop {
        cortex_m::asm::wfi();
    }
}

#[entry]
fn main() -> ! {
    stack::paint();
    let mut uart = uart::Uart::init();
    uart.start_rx();
    let timer = timer::Timer::init();
    let Some(mut flash) = nvmc::Nvmc::take() else {
        halt()
    };
    let layout = FeedLayout {
        start: 0,
        page: nvmc::PAGE as u32,
    };
    let mut device = match Device::boot(&mut flash, layout, IMAGE_ID, CONSUMER_RAM, || {
        rng::key().map(IdKey)
    }) {
        Ok((device, boot)) => {
            send(&mut uart, &boot);
            device
        }
        Err(e) => {
            send(&mut uart, &FromDevice::Failed(e.failure()));
            halt()
        }
    };
    let mut reader = DeviceReader::in_domain(DOMAIN);
    timer.start_ms(DEVICE_SILENCE_MS);
    loop {
        let Some(byte) = uart.read() else {
            if timer.expired() {
                if let Some(pull) = device.on_silence() {
                    reader.reset();
                    send(&mut uart, &pull);
                }
                timer.start_ms(DEVICE_SILENCE_MS);
            }
            continue;
        };
        timer.start_ms(DEVICE_SILENCE_MS);
        let msg = match reader.push(byte) {
            None => continue,
            Some(Ok(msg)) => msg,
            Some(Err(_)) => {
                device.garbled += 1;
                continue;
            }
        };
        let mut pace = || {
            if let Some(ms) = PACE_MS {
                timer.delay_ms(ms);
            }
        };
        match device.handle_paced(&mut flash, &msg, &mut pace) {
            Ok(reply) if reply.reset => cortex_m::peripheral::SCB::sys_reset(),
            Ok(reply) => {
                for f in &reply.send {
                    send(&mut uart, f);
                    if matches!(f, FromDevice::Done { .. }) {
                        send(&mut uart, &device.stats(stack::used()));
                    }
                }
                timer.start_ms(DEVICE_SILENCE_MS);
            }
            Err(e) => {
                send(&mut uart, &FromDevice::Failed(e.failure()));
                halt()
            }
        }
    }
}
