//! The setpoint table on a Cortex-M0 (the micro:bit v1's nRF51822), linked with
//! cortex-m-rt, to show the store builds for a firmware and what it costs in flash
//! (BENCHMARKS.md, "An adopter's store").
//!
//! The commands come from a fixed array and the flash is a RAM stand-in for the chip's
//! NVMC driver: this binary measures idem-core and the store, not a UART or a driver,
//! and the same stand-in serves the comparison binary.
#![no_std]
#![no_main]

use core::hint::black_box;

use cortex_m_rt::entry;
use idem_core::consumer::Consumer;
use idem_core::log::Received;
use idem_example_setpoints::{outputs, store};
use panic_halt as _;

#[path = "../board/common.rs"]
mod common;

#[entry]
fn main() -> ! {
    let mut flash = common::erased();
    let commands = common::commands();
    let stream = Received::new(&commands, None);
    let opened = Consumer::open(&mut flash, common::layout(), store(), common::config());
    let Ok(mut c) = opened else {
        panic!("the journals are damaged");
    };
    black_box(outputs(c.state())); // re-assert at boot
    loop {
        let step = c.step(&mut flash, &stream);
        common::after(step, c.state());
    }
}
