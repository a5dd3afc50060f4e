//! The demo device: the DDIA workload (100 events of +1, a checkpoint every 10) applied to
//! three sinks side by side, each in its own flash partition, so one reset shows all three
//! outcomes.
//!
//! Two [`Consumer`]s run it, the same consumer the simulator and the sweeps run: one over
//! a [`Pair`] of the naive and offset-stamped stores sharing one position (in its own
//! journal, as in the DDIA exercise), one over the atomic store, which keeps its position
//! inside its record. After a reset each resumes from its own position. A boot counter
//! lives in a journal too. With a planned crash, the first boot resets itself right after
//! applying offset 49, before its checkpoint (the [`Plan`] `crash@effect:49`, matched
//! against the consumers' steps as in the simulator): naive 110, offset 100, atomic 100.
//!
//! This is the firmware's whole behaviour; the firmware only supplies the flash driver,
//! the UART, the timer and the reset. The host runs the same code on the simulated flash
//! and must see the same frames.

use embedded_storage::nor_flash::NorFlash;
use idem_payments::Total;
use postcard::experimental::max_size::MaxSize;
use serde::{Deserialize, Serialize};

use crate::storage::{self, BoardLayout, CountsBoots, RECORD_PAGES};
use crate::wire::{Frame, Totals};
use idem_core::consumer::{Consumer, ConsumerConfig, ConsumerError, Step};
use idem_core::journal::JournalError;
use idem_core::log::{Log, Offset};
use idem_core::persist::blocking::Drive;
use idem_core::persist::{Layout, Pair};
use idem_payments::crash::{CrashPoint, Plan};
use idem_payments::ddia;
use idem_payments::stores::{Atomic, Naive, OffsetStamped, StoreError};
use idem_payments::{GeneratedLog, Message, Sum, Truth};

/// Pages the demo's storage takes: the boot counter, the shared position, the pair's two
/// journals and the atomic store's journal, two pages each.
pub const DEMO_PAGES: u32 = 10;

/// Where the demo's journals live: [`DEMO_PAGES`] pages from `start`.
pub type DemoLayout = BoardLayout;

/// The boot counter's record.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, MaxSize)]
pub struct BootRecord {
    /// Boots since the storage was formatted.
    pub boots: u32,
}

impl CountsBoots for BootRecord {
    fn count_boot(&mut self) {
        self.boots += 1;
    }
}

/// What a step of the demo did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DemoStep {
    /// An event was applied: report this frame.
    Progress(Frame),
    /// The planned crash: reset now (the checkpoint after offset 49 is not written).
    PlannedCrash,
    /// Every consumer is at the end: report this frame.
    Done(Frame),
}

/// Why the demo stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum DemoError<E> {
    /// A consumer (its journals, or a store) failed.
    Consumer(ConsumerError<E, StoreError>),
}

impl<E> From<JournalError<E>> for DemoError<E> {
    fn from(e: JournalError<E>) -> Self {
        Self::Consumer(ConsumerError::Journal(e))
    }
}

impl<E> From<ConsumerError<E, StoreError>> for DemoError<E> {
    fn from(e: ConsumerError<E, StoreError>) -> Self {
        Self::Consumer(e)
    }
}

impl<E: core::fmt::Display> core::fmt::Display for DemoError<E> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Consumer(e) => write!(f, "the demo device stopped: {e}"),
        }
    }
}

impl<E: core::fmt::Display + core::fmt::Debug> core::error::Error for DemoError<E> {}

/// The naive and offset-stamped sinks, sharing one position.
type Shared = Pair<Naive, OffsetStamped>;

/// The demo device's RAM.
#[derive(Debug, Clone)]
pub struct Demo {
    boots: u32,
    plan: Plan,
    log: GeneratedLog,
    shared: Consumer<Shared>,
    atomic: Consumer<Atomic>,
}

impl Demo {
    /// Boots: recovers every journal, counts the boot, and returns the boot frame.
    /// Journals of another image (`image_id` differs) are erased first: a freshly flashed
    /// demo starts clean, a reset keeps its state.
    pub fn boot<F: NorFlash>(
        flash: &mut F,
        layout: DemoLayout,
        image_id: u32,
        planned_crash: bool,
    ) -> Result<(Self, Frame), DemoError<F::Error>> {
        let (mut journal, record) = storage::open(flash, layout, DEMO_PAGES, image_id ^ 0xB007)?;
        let mut record: BootRecord = record.unwrap_or_default();
        record.count_boot();
        journal.append(flash, &record)?;
        let boots = record.boots;
        let config = ConsumerConfig::every(ddia::CHECKPOINT_EVERY);
        let positions = layout.pages(RECORD_PAGES, 2);
        let shared = Layout {
            positions,
            sink: layout.pages(RECORD_PAGES + 2, 4),
            tag: image_id,
        };
        let atomic = Layout {
            positions,
            sink: layout.pages(RECORD_PAGES + 6, 2),
            tag: image_id,
        };
        let planned = [CrashPoint::after_effect(ddia::CRASH_AFTER)];
        let plan = if planned_crash && boots == 1 {
            Plan::new(&planned)
        } else {
            Plan::new(&[])
        };
        let demo = Self {
            boots,
            // One point always fits a plan.
            plan: plan.unwrap_or_default(),
            log: GeneratedLog {
                events: ddia::EVENTS,
                amount: 1,
            },
            shared: Consumer::open(
                flash,
                shared,
                Pair::side_by_side(Naive, OffsetStamped),
                config,
            )?,
            atomic: Consumer::open(flash, atomic, Atomic, config)?,
        };
        let frame = Frame::Boot {
            boots,
            resume: demo.shared.resume_at(),
            resume_atomic: demo.atomic.resume_at(),
            totals: demo.totals(),
        };
        Ok((demo, frame))
    }

    /// The three sinks' totals now.
    pub fn totals(&self) -> Totals {
        let (naive, offset) = self.shared.state();
        Totals {
            naive: Naive::total(naive),
            offset: OffsetStamped::total(offset),
            atomic: self.atomic.total(),
        }
    }

    /// Boots so far, this one included.
    pub fn boots(&self) -> u32 {
        self.boots
    }

    /// Applies the next event with each consumer that reads it next, and their
    /// checkpoints.
    pub fn step<F: NorFlash>(&mut self, flash: &mut F) -> Result<DemoStep, DemoError<F::Error>> {
        let o = self.shared.next_offset().min(self.atomic.next_offset());
        if self.log.get(o).is_none() {
            return Ok(DemoStep::Done(Frame::Done {
                boots: self.boots,
                totals: self.totals(),
                true_total: self.log.true_total(),
            }));
        }
        let crashed = advance(&mut self.shared, flash, &self.log, &mut self.plan, o)?
            || advance(&mut self.atomic, flash, &self.log, &mut self.plan, o)?;
        if crashed {
            return Ok(DemoStep::PlannedCrash);
        }
        Ok(DemoStep::Progress(Frame::Progress {
            offset: o,
            totals: self.totals(),
        }))
    }
}

/// Steps `c` through the effect of offset `o` (if `o` is what it reads next) and the
/// checkpoint that may follow; `true` when the plan says the device crashes at a step.
fn advance<K: Drive<Payload = Message, Error = StoreError>, F: NorFlash>(
    c: &mut Consumer<K>,
    flash: &mut F,
    log: &GeneratedLog,
    plan: &mut Plan,
    o: Offset,
) -> Result<bool, ConsumerError<F::Error, StoreError>> {
    if c.next_offset() != o {
        return Ok(false);
    }
    loop {
        let step = c.step(flash, log)?;
        if plan.on_step(&step).is_some() {
            return Ok(true);
        }
        let effect_done = !matches!(step, Step::Deliver(_) | Step::Between(_));
        if matches!(step, Step::Done) || (effect_done && c.is_idle()) {
            return Ok(false);
        }
    }
}

/// The demo on a host: boots, runs to the end, and at the planned crash resets (drops the
/// device's RAM and boots again from `flash`), reporting every frame the firmware would
/// send (all but its device statistics).
pub fn simulate<F: NorFlash>(
    flash: &mut F,
    layout: DemoLayout,
    image_id: u32,
    planned_crash: bool,
    mut on_frame: impl FnMut(Frame),
) -> Result<(), DemoError<F::Error>> {
    let (mut demo, boot) = Demo::boot(flash, layout, image_id, planned_crash)?;
    on_frame(boot);
    loop {
        match demo.step(flash)? {
            DemoStep::Progress(f) => on_frame(f),
            DemoStep::PlannedCrash => {
                let (rebooted, boot) = Demo::boot(flash, layout, image_id, planned_crash)?;
                demo = rebooted;
                on_frame(boot);
            }
            DemoStep::Done(f) => {
                on_frame(f);
                return Ok(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use idem_sim::flash::MemFlash;

    const LAYOUT: DemoLayout = DemoLayout {
        start: 0,
        page: 1024,
    };

    /// The frames of a simulated run, in order.
    fn frames(flash: &mut MemFlash<10, 1024>, planned: bool) -> std::vec::Vec<Frame> {
        let mut out = std::vec::Vec::new();
        simulate(flash, LAYOUT, 7, planned, |f| out.push(f)).unwrap();
        out
    }

    #[test]
    fn the_planned_crash_ends_at_110_100_100() {
        let mut flash = MemFlash::<10, 1024>::filled(0); // QEMU's never-written pages
        let f = frames(&mut flash, true);
        let totals = Totals {
            naive: 110,
            offset: 100,
            atomic: 100,
        };
        assert_eq!(
            f.last(),
            Some(&Frame::Done {
                boots: 2,
                totals,
                true_total: 100
            })
        );
        let second_boot = Totals {
            naive: 50,
            offset: 50,
            atomic: 40,
        };
        assert!(f.contains(&Frame::Boot {
            boots: 2,
            resume: 40,
            resume_atomic: 40,
            totals: second_boot
        }));
        // Boot, offsets 0..48 (the crash comes before 49's frame), boot, 40..99, done.
        assert_eq!(f.len(), 1 + 49 + 1 + 60 + 1);
        // A reset after the end changes nothing but the boot count.
        let again = frames(&mut flash, true);
        assert_eq!(
            again.last(),
            Some(&Frame::Done {
                boots: 3,
                totals,
                true_total: 100
            })
        );
    }

    #[test]
    fn another_image_starts_clean_a_reset_does_not() {
        let mut flash = MemFlash::<10, 1024>::new();
        frames(&mut flash, false);
        let (demo, _) = Demo::boot(&mut flash, LAYOUT, 7, false).unwrap();
        assert_eq!((demo.boots(), demo.totals().naive), (2, 100));
        let (demo, boot) = Demo::boot(&mut flash, LAYOUT, 8, false).unwrap();
        assert_eq!(demo.boots(), 1);
        assert_eq!(
            boot,
            Frame::Boot {
                boots: 1,
                resume: 0,
                resume_atomic: 0,
                totals: Totals::default()
            }
        );
    }
}
