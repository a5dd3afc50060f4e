//! The same pump through idem-core's async doors (`Controller::boot_async`,
//! `run_async`): `Nvmc` is blocking, so embassy-embedded-hal's `BlockingAsync` makes it
//! an async `NorFlash`, as a firmware whose other drivers are async would use it. The
//! future is polled to its end by `embassy_futures::block_on`, no executor: each flash
//! step completes when called. Log, motor and pages as the blocking binary's.
#![no_std]
#![no_main]

use cortex_m_rt::entry;
use embassy_embedded_hal::adapter::BlockingAsync;
use embassy_futures::block_on;
use embassy_nrf::nvmc::Nvmc;
use idem_core::log::Received;
use idem_example_dosing_pump::Controller;
use idem_example_dosing_pump::demo::{Counter, FIRST_PAGE, LOG};
use panic_halt as _;

#[entry]
fn main() -> ! {
    let p = embassy_nrf::init(Default::default());
    let mut flash = BlockingAsync::new(Nvmc::new(p.NVMC));
    let mut motor = Counter::default();
    let log = Received::new(&LOG, Some(LOG.len() as u64));
    block_on(async {
        if let Ok(mut pump) = Controller::boot_async(&mut flash, &mut motor, FIRST_PAGE).await {
            let _ = pump.run_async(&mut flash, &mut motor, &log).await;
        }
    });
    loop {
        cortex_m::asm::wfi();
    }
}
