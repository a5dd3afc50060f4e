//! What the blocking and the async Cortex-M0 binaries share: the flash stand-in, the
//! layout, the checkpoint interval, the commands and what a step's result does to the
//! outputs. Only the consumer's calls differ between them (`open`, `step` against
//! `open_async(..).await`, `step_async(..).await`).

use core::hint::black_box;

use idem_core::consumer::{CheckpointEvery, ConsumerConfig, Step};
use idem_core::log::Event;
use idem_core::persist::Layout;
use idem_core::store::Outcome;
use idem_core::store::Windowed;
use idem_example_setpoints::{Command, Table, WINDOW, outputs};

#[path = "ram_flash.rs"]
mod ram_flash;
use ram_flash::{PAGE, PAGES, RamFlash};

/// The flash, erased, as a chip leaves the factory.
pub fn erased() -> RamFlash {
    RamFlash([0xFF; PAGE * PAGES])
}

/// Two pages for the position, four for the store, from page 0.
pub fn layout() -> Layout {
    Layout::from_pages::<RamFlash>(0, 2, 4, 0x0001)
}

/// A checkpoint every 8 commands.
pub fn config() -> ConsumerConfig {
    ConsumerConfig::every(CheckpointEvery::new(8).unwrap())
}

/// Four commands, opaque to the optimiser so that the store's code is kept.
pub fn commands() -> [Event<Command>; 4] {
    core::array::from_fn(|o| Event {
        offset: o as u64,
        payload: Command {
            id: black_box(o as u64 % 3),
            actuator: black_box(o as u8),
            setpoint: black_box(100 * o as i16),
        },
    })
}

/// What one step's result does: an applied command drives the outputs, the end of the
/// stream sleeps until an interrupt, a flash error stops the firmware.
pub fn after<E>(step: Result<Step<Command>, E>, state: &Windowed<Table, WINDOW>) {
    match step {
        Ok(Step::Effect(_, Outcome::Applied)) => {
            black_box(outputs(state));
        }
        Ok(Step::Done) => cortex_m::asm::wfi(),
        Ok(_) => {}
        Err(_) => panic!("the flash failed"),
    }
}
