//! What a reset costs the pump on the nRF52840's flash (6 pages of 4 KiB, 4-byte units,
//! idem-core's strict test flash): the most any boot and any step asked of the flash over
//! an update from the v1 firmware, with a power cut at every unit write and erase of the
//! new firmware's run in each of the checker's models and a reset after every step
//! (`testing::cuts::sweep`). A boot migrates v1's journal (once), opens the ledger and
//! the consumer, and writes the done of a dose a reset left without one; the README
//! multiplies these counts by the NVMC's word-write and page-erase times
//! (`cargo test --release --test reset_cost -- --nocapture` prints them).
//!
//! The pump's exactness at each of these cuts is `tests/pump.rs`'s; this run only counts,
//! and checks that every trial ends with the millilitres its commands ask for.

use embedded_storage::nor_flash::{ErrorType, NorFlash, ReadNorFlash};
use idem_core::consumer::Step;
use idem_core::log::{Event, Received};
use idem_core::testing::cuts::{Plan, Seen, sweep};
use idem_example_dosing_pump::{Command, Controller, Did, Kind, Motor};

mod support;
use support::{Flash, v1_firmware};

/// What one boot or one step asked of the flash.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Cost {
    /// Read calls.
    reads: u64,
    /// Bytes read.
    read_bytes: u64,
    /// Write calls.
    writes: u64,
    /// 4-byte words programmed.
    words: u64,
    /// Pages erased.
    erases: u64,
}

impl Cost {
    /// Each count's largest of the two.
    fn max(self, o: Cost) -> Cost {
        Cost {
            reads: self.reads.max(o.reads),
            read_bytes: self.read_bytes.max(o.read_bytes),
            writes: self.writes.max(o.writes),
            words: self.words.max(o.words),
            erases: self.erases.max(o.erases),
        }
    }
}

/// The flash `F`, every call counted into `cost`.
struct Counted<'f, F> {
    flash: &'f mut F,
    cost: Cost,
}

impl<F: ErrorType> ErrorType for Counted<'_, F> {
    type Error = F::Error;
}

impl<F: ReadNorFlash> ReadNorFlash for Counted<'_, F> {
    const READ_SIZE: usize = F::READ_SIZE;
    fn read(&mut self, offset: u32, bytes: &mut [u8]) -> Result<(), Self::Error> {
        self.cost.reads += 1;
        self.cost.read_bytes += bytes.len() as u64;
        self.flash.read(offset, bytes)
    }
    fn capacity(&self) -> usize {
        self.flash.capacity()
    }
}

impl<F: NorFlash> NorFlash for Counted<'_, F> {
    const WRITE_SIZE: usize = F::WRITE_SIZE;
    const ERASE_SIZE: usize = F::ERASE_SIZE;
    fn erase(&mut self, from: u32, to: u32) -> Result<(), Self::Error> {
        self.cost.erases += u64::from((to - from) / F::ERASE_SIZE as u32);
        self.flash.erase(from, to)
    }
    fn write(&mut self, offset: u32, bytes: &[u8]) -> Result<(), Self::Error> {
        self.cost.writes += 1;
        self.cost.words += (bytes.len() / F::WRITE_SIZE) as u64;
        self.flash.write(offset, bytes)
    }
}

/// A flow meter: its count survives a reset.
#[derive(Clone, Copy, Debug, Default)]
struct Meter {
    dispensed: u64,
}

impl Motor for Meter {
    fn dispense(&mut self, ml: u16) {
        self.dispensed += u64::from(ml);
    }
    fn dispensed_ml(&self) -> u64 {
        self.dispensed
    }
    fn set_rate(&mut self, _: u16) {}
}

/// `count` commands: every seventh resends the one three before it, every tenth of the
/// others sets the rate, the rest dispense `1 + i % 4` ml; and the millilitres their
/// distinct ids ask for.
fn commands(count: u64) -> (Vec<Event<Command>>, u64) {
    let mut out: Vec<Event<Command>> = Vec::new();
    let mut ml = 0;
    for i in 0..count {
        let payload = if i % 7 == 6 {
            out[i as usize - 3].payload
        } else if i % 10 == 9 {
            Command {
                id: i,
                kind: Kind::SetRate { ml_per_min: 30 },
            }
        } else {
            ml += 1 + i % 4;
            Command {
                id: i,
                kind: Kind::Dispense {
                    ml: (1 + i % 4) as u16,
                },
            }
        };
        out.push(Event { offset: i, payload });
    }
    (out, ml)
}

/// A trial's meter, and the most its boots and its steps asked of the flash.
#[derive(Clone, Copy, Debug, Default)]
struct World {
    meter: Meter,
    boot: Cost,
    step: Cost,
}

/// Reads, bytes read, writes, words written, erases.
fn cost([reads, read_bytes, writes, words, erases]: [u64; 5]) -> Cost {
    Cost {
        reads,
        read_bytes,
        writes,
        words,
        erases,
    }
}

/// What a sweep found: the reference run's steps, unit writes and erases, the trials,
/// and the most a boot and a step asked of the flash.
#[derive(Debug, PartialEq, Eq)]
struct Worst {
    reference: [u64; 3],
    trials: u64,
    boot: Cost,
    step: Cost,
}

/// Every cut of the pump's run of `events` (asking for `ml` millilitres) from `flash`,
/// the meter at `meter`: the most a boot and a step asked of the flash.
fn every_cut(events: &[Event<Command>], ml: u64, flash: &Flash, meter: Meter) -> Worst {
    let stream = Received::new(events, Some(events.len() as u64));
    let (mut boot, mut step) = (Cost::default(), Cost::default());
    let found = sweep(
        &Plan::new(),
        || {
            let world = World {
                meter,
                ..World::default()
            };
            (flash.clone(), world)
        },
        |flash, world| {
            let mut counted = Counted {
                flash,
                cost: Cost::default(),
            };
            let booted = Controller::boot(&mut counted, &mut world.meter, 0);
            world.boot = world.boot.max(counted.cost);
            booted
        },
        |pump, flash, world| {
            let mut counted = Counted {
                flash,
                cost: Cost::default(),
            };
            let did = pump.step(&mut counted, &mut world.meter, &stream);
            world.step = world.step.max(counted.cost);
            Ok((did? != Did::Consumed(Step::Done)).then_some(()))
        },
        |_, world, seen| {
            (boot, step) = (boot.max(world.boot), step.max(world.step));
            match seen {
                Seen::Ended if world.meter.dispensed != ml => {
                    Err(format!("{} ml pumped, {ml} asked", world.meter.dispensed))
                }
                Seen::Failed(e) => Err(format!("{e:?}")),
                Seen::Stuck => Err("stuck".into()),
                _ => Ok(()),
            }
        },
    );
    found.assert_all_right();
    let r = found.reference;
    let worst = Worst {
        reference: [r.steps, r.unit_writes, r.erases],
        trials: found.trials(),
        boot,
        step,
    };
    println!("{worst:?}");
    worst
}

/// The update: v1 ran 150 of 200 commands; the new firmware's first boot migrates its
/// journal, and a cut in the migration makes the next boot migrate again.
#[test]
fn the_updates_boots_ask_this_much_of_the_flash_at_every_cut() {
    let (events, ml) = commands(200);
    let (v1_flash, v1_meter) = v1_firmware(&events, 150);
    let worst = every_cut(&events, ml, &v1_flash, v1_meter);
    assert_eq!(
        worst,
        Worst {
            // Journal format 3 (format 2: [388, 2_226, 5], 4_856 trials, boot [2_074,
            // 103_768, 36, 251, 3], step [66, 4_156, 4, 20, 1]). A boot reads a page 512
            // bytes at a time: fewer reads, more bytes.
            reference: [388, 1_144, 4],
            trials: 2_689,
            boot: cost([1_486, 249_936, 36, 103, 3]),
            step: cost([65, 4_096, 4, 8, 1]),
        }
    );
}

/// The pump from a blank flash, no v1 journal to migrate: what a boot of the firmware
/// in the field costs once its update is behind it.
#[test]
fn the_pumps_boots_ask_this_much_of_the_flash_at_every_cut() {
    let (events, ml) = commands(200);
    let worst = every_cut(&events, ml, &Flash::new(), Meter::default());
    assert_eq!(
        worst,
        Worst {
            // Journal format 3 (format 2: [579, 3_063, 5], 6_721 trials, boot [2_016,
            // 106_496, 4, 7, 1], step [66, 4_156, 4, 20, 1]).
            reference: [579, 1_605, 4],
            trials: 3_802,
            boot: cost([1_690, 143_416, 4, 8, 1]),
            step: cost([68, 4_252, 4, 12, 1]),
        }
    );
}
