//! The setpoint table on a Cortex-M0 as an async firmware has it: `setpoints` with the
//! consumer's async steps (`open_async`, `step_async`, idem-core's feature `async`) over
//! the async face of the same RAM flash, polled by `embassy_futures::block_on` where an
//! embassy firmware would run an executor (BENCHMARKS.md, "An adopter's store").
//!
//! Everything but the consumer's calls is `setpoints`'s own (src/board/common.rs).
#![no_std]
#![no_main]

use core::hint::black_box;

use cortex_m_rt::entry;
use embassy_futures::block_on;
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
    block_on(async {
        let opened =
            Consumer::open_async(&mut flash, common::layout(), store(), common::config()).await;
        let Ok(mut c) = opened else {
            panic!("the journals are damaged");
        };
        black_box(outputs(c.state())); // re-assert at boot
        loop {
            let step = c.step_async(&mut flash, &stream).await;
            common::after(step, c.state());
        }
    })
}
