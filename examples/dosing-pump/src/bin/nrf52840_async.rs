//! The same pump through idem-core's async doors (`Controller::boot_async`,
//! `run_async`): `Nvmc` is blocking, so embassy-embedded-hal's `BlockingAsync` makes it
//! an async `NorFlash`, as a firmware whose other drivers are async would use it. The
//! future is polled to its end by `embassy_futures::block_on`, no executor: each flash
//! step completes when called. Log, motor and pages as the blocking binary's.
#![no_std]
#![no_main]

use cortex_m_rt::entry;
use defmt::{error, info};
use embassy_embedded_hal::adapter::BlockingAsync;
use embassy_futures::block_on;
use embassy_nrf::nvmc::Nvmc;
use idem_core::log::Received;
use idem_example_dosing_pump::Controller;
use idem_example_dosing_pump::demo::{Counter, FIRST_PAGE, LOG};
use {defmt_rtt as _, panic_probe as _};

#[entry]
fn main() -> ! {
    let p = embassy_nrf::init(Default::default());
    let mut flash = BlockingAsync::new(Nvmc::new(p.NVMC));
    let mut motor = Counter::default();
    let log = Received::new(&LOG, Some(LOG.len() as u64));
    block_on(async {
        match Controller::boot_async(&mut flash, &mut motor, FIRST_PAGE).await {
            Ok(mut pump) => {
                let s = pump.state();
                info!(
                    "boot: {} ml commanded, {} doses, rate {}",
                    s.commanded_ml, s.doses, s.rate
                );
                match pump.run_async(&mut flash, &mut motor, &log).await {
                    Ok(()) => info!("the log done: {} ml pumped", motor.dispensed),
                    Err(e) => error!("the pump stopped: {}", e),
                }
            }
            Err(e) => error!("the pump does not boot: {}", e),
        }
    });
    loop {
        cortex_m::asm::wfi();
    }
}
