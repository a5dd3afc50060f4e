//! The application every chip's example runs (examples/setpoints-rp2040, -stm32 and
//! -esp32c3): the setpoint table on the chip's own flash through its HAL's blocking
//! `NorFlash` driver, logged with defmt (feature `defmt`). The commands are a fixed list
//! (a transport is the application's): two set actuators, one is rejected, one is a resend.
//! Each boot resumes where the last one stopped; a boot after the end applies nothing.

use embedded_storage::nor_flash::NorFlash;
use idem_core::consumer::{CheckpointEvery, Consumer, ConsumerConfig, ErrorOf, Step};
use idem_core::journal::{Journal, MAX_WRITE_SIZE, header_size, write_unit};
use idem_core::log::{Event, Received};
use idem_core::persist::{EachRecord, Layout};
use idem_core::store::Outcome;

use crate::{ACTUATORS, Command, Exactly, outputs, store};

#[cfg(feature = "map")]
pub mod map;

/// The journals' tag on every chip.
pub const TAG: u32 = 0x0001;
/// Pages of the flash the application takes, the fewest two journals can have: two for
/// the position, two for the table (on an STM32H7, four sectors of 128 KiB).
pub const PAGES: u32 = 4;

/// What a chip's example logs (defmt's `info!`).
#[cfg(feature = "defmt")]
macro_rules! info {
    ($($t:tt)*) => { defmt::info!($($t)*) };
}
/// Without the feature `defmt`, nothing is logged (the arguments are only borrowed).
#[cfg(not(feature = "defmt"))]
macro_rules! info {
    ($fmt:literal $(, $arg:expr)* $(,)?) => {{ let _ = ($fmt, $(&$arg),*); }};
}

/// The commands: actuator 0 and 1 set, actuator 9 (no such actuator) rejected, the first
/// command resent.
pub const LOG: [Event<Command>; 4] = [
    event(0, 1, 0, 250),
    event(1, 2, 1, -40),
    event(2, 3, 9, 10),
    event(3, 1, 0, 250),
];

const fn event(offset: u64, id: u64, actuator: u8, setpoint: i16) -> Event<Command> {
    Event {
        offset,
        payload: Command {
            id,
            actuator,
            setpoint,
        },
    }
}

/// The two journals in the [`PAGES`] pages of `F` from page `first` on.
pub const fn layout<F: NorFlash>(first: u32) -> Layout {
    Layout::from_pages::<F>(first, 2, PAGES - 2, TAG)
}

/// A checkpoint of the position every 8 commands.
pub const fn config() -> ConsumerConfig {
    ConsumerConfig::every(CheckpointEvery::new(8).unwrap())
}

/// Whether the journals' geometry rules hold on the flash `F`: a write unit of 1 to 32
/// bytes, a power of two, pages of whole units, and a page that holds its header and a
/// record of the table. A chip's example asserts it in a `const` with a sentence naming
/// its flash and unit, so a chip whose flash breaks them is refused when it is built.
pub const fn fits<F: NorFlash>() -> bool {
    let slot = Journal::<EachRecord<Exactly>>::slot_on::<F>();
    F::WRITE_SIZE.is_power_of_two()
        && F::WRITE_SIZE <= MAX_WRITE_SIZE
        && F::ERASE_SIZE.is_multiple_of(write_unit(F::WRITE_SIZE))
        && header_size(F::WRITE_SIZE) + slot <= F::ERASE_SIZE
}

/// Recovers the table from the pages from `first` on and applies the rest of [`LOG`]:
/// the setpoints to drive the outputs with, or the flash's error.
pub fn run<F: NorFlash>(
    flash: &mut F,
    first: u32,
) -> Result<[i16; ACTUATORS], ErrorOf<F, Exactly>> {
    let mut c = Consumer::open(flash, layout::<F>(first), store(), config())?;
    info!(
        "recovered: resumes at {}, setpoints {}",
        c.resume_at(),
        outputs(c.state())
    );
    let log = Received::new(&LOG, Some(LOG.len() as u64));
    loop {
        match c.step(flash, &log)? {
            Step::Effect(e, Outcome::Applied) => {
                info!(
                    "{}: actuator {} set to {}",
                    e.offset, e.payload.actuator, e.payload.setpoint
                );
            }
            Step::Effect(e, outcome) => info!("{}: {}", e.offset, outcome),
            Step::Done => break,
            _ => {}
        }
    }
    info!(
        "{} records written, setpoints {}",
        c.records_written(),
        outputs(c.state())
    );
    Ok(outputs(c.state()))
}
