//! The pump on an nRF52840: the store and the ledger on the chip's own flash through
//! embassy-nrf's `Nvmc`, the top 6 pages (memory.x). The gateway's log is a fixed list of
//! commands here (a transport is the application's); the motor is a counter standing in
//! for a pump and its flow meter. Built for thumbv7em-none-eabihf; the host tests run the
//! same `Controller` on a model of this flash.
#![no_std]
#![no_main]

use cortex_m_rt::entry;
use embassy_nrf::nvmc::Nvmc;
use idem_core::log::{Event, Received};
use idem_example_dosing_pump::{Command, Controller, Kind, Motor};
use panic_halt as _;

/// The first of the pump's 6 pages: 0xFA000 / 4 KiB.
const FIRST_PAGE: u32 = 250;

/// A pump whose flow meter is a counter in RAM (a real one keeps it in the meter).
struct Counter {
    dispensed: u64,
    rate: u16,
}

impl Motor for Counter {
    fn dispense(&mut self, ml: u16) {
        self.dispensed += u64::from(ml);
    }
    fn dispensed_ml(&self) -> u64 {
        self.dispensed
    }
    fn set_rate(&mut self, ml_per_min: u16) {
        self.rate = ml_per_min;
    }
}

/// The gateway's log: two doses, a rate, and the first dose resent.
const LOG: [Event<Command>; 4] = [
    Event {
        offset: 0,
        payload: Command {
            id: 1,
            kind: Kind::Dispense { ml: 5 },
        },
    },
    Event {
        offset: 1,
        payload: Command {
            id: 2,
            kind: Kind::SetRate { ml_per_min: 40 },
        },
    },
    Event {
        offset: 2,
        payload: Command {
            id: 3,
            kind: Kind::Dispense { ml: 3 },
        },
    },
    Event {
        offset: 3,
        payload: Command {
            id: 1,
            kind: Kind::Dispense { ml: 5 },
        },
    },
];

#[entry]
fn main() -> ! {
    let p = embassy_nrf::init(Default::default());
    let mut flash = Nvmc::new(p.NVMC);
    let mut motor = Counter {
        dispensed: 0,
        rate: 0,
    };
    let log = Received::new(&LOG, Some(LOG.len() as u64));
    if let Ok(mut pump) = Controller::boot(&mut flash, &mut motor, FIRST_PAGE) {
        let _ = pump.run(&mut flash, &mut motor, &log);
    }
    loop {
        cortex_m::asm::wfi();
    }
}
