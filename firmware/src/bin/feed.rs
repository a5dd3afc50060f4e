//! idem on a BBC micro:bit as the consumer of a stream the host feeds it (`idem device
//! feed`). The host configures the store and the checkpoint interval; the board announces
//! where its flash says it resumes, pulls batches of events, applies them with the core's
//! `Consumer`, checkpoints, and acknowledges. A reset is the crash: the board boots, reads
//! its flash, and announces its position again. At the first boot of its storage it draws
//! its id key from the RNG; the key stays in flash with its boot counter and goes out in
//! every boot frame, and the host keys the message ids it sends under it. Every rule is
//! `idem_board::feed::Device`'s, and its silence is the feed's timing policy's
//! (`idem_board::timing`): TIMER0 counts `DEVICE_SILENCE_MS` from every byte heard and
//! every wait's start, the policy's `DeviceTimer` in hardware, in the firmware library's
//! receive loop (`idem_firmware::link`). This is board glue: the NVMC driver, the UART,
//! the timer, the RNG and the reset.
#![no_std]
#![no_main]

use cortex_m_rt::entry;
use idem_board::feed::{
    DOMAIN, Device, DeviceReader, FROM_DEVICE_ENCODED, FROM_DEVICE_MAX, FeedLayout, FromDevice,
    encode,
};
use idem_board::timing::QEMU_EFFECT_MS;
use idem_core::log::IdKey;
use idem_firmware::{IMAGE_ID, link, nvmc, rng, stack, timer, uart};
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
    link::send::<_, { FROM_DEVICE_MAX + 4 }, FROM_DEVICE_ENCODED>(uart, encode, msg);
}

#[entry]
fn main() -> ! {
    stack::paint();
    let mut uart = uart::Uart::init();
    uart.start_rx();
    let timer = timer::Timer::init();
    let Some(mut flash) = nvmc::Nvmc::take() else {
        link::halt()
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
            link::halt()
        }
    };
    let mut reader = DeviceReader::in_domain(DOMAIN);
    loop {
        let pulled = link::receive(&mut uart, &timer, &mut reader, |uart| {
            device.on_silence().map(|pull| send(uart, &pull)).is_some()
        });
        let Ok(msg) = pulled else {
            device.garbled += 1;
            continue;
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
            }
            Err(e) => {
                send(&mut uart, &FromDevice::Failed(e.failure()));
                link::halt()
            }
        }
    }
}
