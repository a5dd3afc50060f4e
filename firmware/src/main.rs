//! idem on a BBC micro:bit: the DDIA workload applied to three sinks (naive, offset-stamped,
//! atomic), each in its own flash partition. A reset is the crash; flash keeps what was
//! committed. Every rule is `idem_board::demo`'s (two core `Consumer`s); this is board glue: the NVMC driver, the
//! UART that carries the frames, the timer that paces the stream, and the reset.
#![no_std]
#![no_main]

use cortex_m_rt::entry;
use idem_board::demo::{Demo, DemoLayout, DemoStep};
use idem_board::wire::{self, Frame};
use idem_firmware::{IMAGE_ID, nvmc, stack, timer, uart};
use panic_halt as _;

/// Milliseconds per event: slow enough on a board for a person to press reset mid-stream.
const PACE_MS: u32 = if cfg!(feature = "qemu") { 10 } else { 300 };

fn send(uart: &mut uart::Uart, frame: &Frame) {
    let mut buf = [0u8; wire::MAX_ENCODED];
    if let Ok(bytes) = wire::encode(frame, &mut buf) {
        uart.write(bytes);
    }
}

/// The end: under QEMU, exit with `ok`; on a board, sleep until the next reset.
fn stop(ok: bool) -> ! {
    #[cfg(feature = "qemu")]
    {
        use cortex_m_semihosting::debug;
        debug::exit(if ok {
            debug::EXIT_SUCCESS
        } else {
            debug::EXIT_FAILURE
        });
    }
    let _ = ok;
    loop {
        cortex_m::asm::wfi();
    }
}

#[entry]
fn main() -> ! {
    stack::paint();
    let mut uart = uart::Uart::init();
    let timer = timer::Timer::init();
    let Some(mut flash) = nvmc::Nvmc::take() else {
        stop(false)
    };
    let layout = DemoLayout {
        start: 0,
        page: nvmc::PAGE as u32,
    };
    let Ok((mut demo, boot)) = Demo::boot(
        &mut flash,
        layout,
        IMAGE_ID,
        cfg!(feature = "planned-crash"),
    ) else {
        stop(false)
    };
    send(&mut uart, &boot);
    loop {
        match demo.step(&mut flash) {
            Ok(DemoStep::Progress(frame)) => {
                send(&mut uart, &frame);
                timer.delay_ms(PACE_MS);
            }
            Ok(DemoStep::PlannedCrash) => cortex_m::peripheral::SCB::sys_reset(),
            Ok(DemoStep::Done(frame)) => {
                send(
                    &mut uart,
                    &Frame::Stats {
                        stack_bytes: stack::used(),
                    },
                );
                send(&mut uart, &frame);
                stop(true)
            }
            Err(_) => stop(false),
        }
    }
}
