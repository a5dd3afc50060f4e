//! The pump on an nRF52840: the store and the ledger on the chip's own flash through
//! embassy-nrf's `Nvmc`, the top 6 pages (memory.x). The gateway's log and the motor are
//! the example's fixed ones (`idem_example_dosing_pump::demo`). Built for
//! thumbv7em-none-eabihf; the host tests run the same `Controller` on a model of this
//! flash. defmt logs the boot's state and the run's end over RTT.
#![no_std]
#![no_main]

use cortex_m_rt::entry;
use defmt::{error, info};
use embassy_nrf::nvmc::Nvmc;
use idem_core::log::Received;
use idem_example_dosing_pump::Controller;
use idem_example_dosing_pump::demo::{Counter, FIRST_PAGE, LOG};
use {defmt_rtt as _, panic_probe as _};

#[entry]
fn main() -> ! {
    let p = embassy_nrf::init(Default::default());
    let mut flash = Nvmc::new(p.NVMC);
    let mut motor = Counter::default();
    let log = Received::new(&LOG, Some(LOG.len() as u64));
    match Controller::boot(&mut flash, &mut motor, FIRST_PAGE) {
        Ok(mut pump) => {
            let s = pump.state();
            info!(
                "boot: {} ml commanded, {} doses, rate {}",
                s.commanded_ml, s.doses, s.rate
            );
            match pump.run(&mut flash, &mut motor, &log) {
                Ok(()) => info!("the log done: {} ml pumped", motor.dispensed),
                Err(e) => error!("the pump stopped: {}", e),
            }
        }
        Err(e) => error!("the pump does not boot: {}", e),
    }
    loop {
        cortex_m::asm::wfi();
    }
}
