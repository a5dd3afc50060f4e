//! The setpoint table on a Cortex-M0 as an async firmware has it: `setpoints` with the
//! consumer's async steps (`open_async`, `step_async`, idem-core's feature `async`) over
//! the async face of the same RAM flash, polled by `embassy_futures::block_on` where an
//! embassy firmware would run an executor (BENCHMARKS.md, "Blocking and async").
//!
//! The commands come from a fixed array and the flash is a RAM stand-in for the chip's
//! NVMC driver: this binary measures idem-core and the store, not a UART or a driver,
//! and the same stand-in serves the comparison binary.
#![no_std]
#![no_main]

use core::hint::black_box;

use cortex_m_rt::entry;
use embassy_futures::block_on;
use idem_core::consumer::{CheckpointEvery, Consumer, ConsumerConfig, Step};
use idem_core::log::{Event, Received};
use idem_core::persist::Layout;
use idem_core::store::Outcome;
use idem_example_setpoints::{Command, outputs, store};
use panic_halt as _;

#[path = "../board/ram_flash.rs"]
mod ram_flash;
use ram_flash::{PAGE, PAGES, RamFlash};

#[entry]
fn main() -> ! {
    let mut flash = RamFlash([0xFF; PAGE * PAGES]);
    let layout = Layout::from_pages::<RamFlash>(0, 2, 4, 0x0001);
    let config = ConsumerConfig::every(CheckpointEvery::new(8).unwrap());
    let commands: [Event<Command>; 4] = core::array::from_fn(|o| Event {
        offset: o as u64,
        payload: Command {
            id: black_box(o as u64 % 3),
            actuator: black_box(o as u8),
            setpoint: black_box(100 * o as i16),
        },
    });
    let stream = Received::new(&commands, None);
    block_on(async {
        let Ok(mut c) = Consumer::open_async(&mut flash, layout, store(), config).await else {
            panic!("the journals are damaged");
        };
        black_box(outputs(c.state())); // re-assert at boot
        loop {
            match c.step_async(&mut flash, &stream).await {
                Ok(Step::Effect(_, Outcome::Applied)) => {
                    black_box(outputs(c.state()));
                }
                Ok(Step::Done) => cortex_m::asm::wfi(),
                Ok(_) => {}
                Err(_) => panic!("the flash failed"),
            }
        }
    })
}
