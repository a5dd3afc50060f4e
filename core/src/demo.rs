//! The demo device: the DDIA workload (100 events of +1, a checkpoint every 10) applied to
//! three sinks side by side, each in its own flash partition, so one reset shows all three
//! outcomes.
//!
//! The naive and offset-stamped sinks share one consumer position (in its own journal,
//! as in the DDIA exercise); the atomic sink keeps its position inside its record. After a
//! reset each consumer resumes from its own position. A boot counter lives in a journal
//! too. With a planned crash, the first boot resets itself right after applying offset
//! 49, before its checkpoint: naive 110, offset 100, atomic 100.
//!
//! This is the firmware's whole behaviour; the firmware only supplies the flash driver,
//! the UART, the timer and the reset. The host runs the same code on the simulated flash
//! and must see the same frames.

use embedded_storage::nor_flash::NorFlash;
use postcard::experimental::max_size::MaxSize;
use serde::{Deserialize, Serialize};

use crate::consumer::{Position, checkpoint_after};
use crate::journal::{Journal, JournalError, Region};
use crate::log::{GeneratedLog, Log, Offset};
use crate::scenario::{DDIA_CHECKPOINT_EVERY, DDIA_CRASH_AFTER, DDIA_EVENTS};
use crate::store::{
    Atomic, CheckpointState, Naive, NaiveState, OffsetStamped, StampedState, Store, StoreError,
};
use crate::wire::{Frame, Totals};

/// Pages the demo's storage takes: five journals of two pages.
pub const DEMO_PAGES: u32 = 10;

/// Where the demo's five journals live: `DEMO_PAGES` pages from `start`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DemoLayout {
    /// First byte of the storage (page-aligned).
    pub start: u32,
    /// The flash page size.
    pub page: u32,
}

impl DemoLayout {
    fn region(&self, i: u32) -> Region {
        Region {
            start: self.start + 2 * i * self.page,
            pages: 2,
        }
    }
}

/// The boot counter's record.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, MaxSize)]
pub struct BootRecord {
    /// Boots since the storage was formatted.
    pub boots: u32,
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
#[non_exhaustive]
pub enum DemoError<E> {
    /// A journal failed.
    Journal(JournalError<E>),
    /// A store refused an event.
    Store(StoreError),
}

impl<E> From<JournalError<E>> for DemoError<E> {
    fn from(e: JournalError<E>) -> Self {
        Self::Journal(e)
    }
}

impl<E> From<StoreError> for DemoError<E> {
    fn from(e: StoreError) -> Self {
        Self::Store(e)
    }
}

/// The demo device's RAM.
#[derive(Debug, Clone)]
pub struct Demo {
    boots: u32,
    planned_crash: bool,
    log: GeneratedLog,
    positions: Journal<Position>,
    naive_j: Journal<NaiveState>,
    offset_j: Journal<StampedState>,
    atomic_j: Journal<CheckpointState>,
    naive: NaiveState,
    offset: StampedState,
    atomic: CheckpointState,
    next: Offset,
    next_atomic: Offset,
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
        let (mut boot_j, boot) =
            match Journal::<BootRecord>::open(flash, layout.region(0), image_id ^ 0xB007) {
                Err(JournalError::Foreign { .. }) => {
                    let end = layout.start + DEMO_PAGES * layout.page;
                    flash
                        .erase(layout.start, end)
                        .map_err(JournalError::Flash)?;
                    Journal::open(flash, layout.region(0), image_id ^ 0xB007)?
                }
                other => other?,
            };
        let boots = boot.map_or(0, |b| b.boots) + 1;
        boot_j.append(flash, &BootRecord { boots })?;
        let (positions, p) = Journal::<Position>::open(flash, layout.region(1), image_id ^ 0x9051)?;
        let (naive_j, n) =
            Journal::<NaiveState>::open(flash, layout.region(2), image_id ^ Naive::TAG)?;
        let (offset_j, o) =
            Journal::<StampedState>::open(flash, layout.region(3), image_id ^ OffsetStamped::TAG)?;
        let (atomic_j, a) =
            Journal::<CheckpointState>::open(flash, layout.region(4), image_id ^ Atomic::TAG)?;
        let atomic = a.unwrap_or_default();
        let demo = Self {
            boots,
            planned_crash,
            log: GeneratedLog {
                events: DDIA_EVENTS,
                amount: 1,
            },
            positions,
            naive_j,
            offset_j,
            atomic_j,
            naive: n.unwrap_or_default(),
            offset: o.unwrap_or_default(),
            next: p.map_or(0, |p| p.next),
            next_atomic: Atomic::position(&atomic).unwrap_or(0),
            atomic,
        };
        let frame = demo.boot_frame();
        Ok((demo, frame))
    }

    fn boot_frame(&self) -> Frame {
        Frame::Boot {
            boots: self.boots,
            resume: self.next,
            resume_atomic: self.next_atomic,
            totals: self.totals(),
        }
    }

    /// The three sinks' totals now.
    pub fn totals(&self) -> Totals {
        Totals {
            naive: Naive::total(&self.naive),
            offset: OffsetStamped::total(&self.offset),
            atomic: Atomic::total(&self.atomic),
        }
    }

    /// Boots so far, this one included.
    pub fn boots(&self) -> u32 {
        self.boots
    }

    /// Applies the next event to each consumer that has it next, and checkpoints.
    pub fn step<F: NorFlash>(&mut self, flash: &mut F) -> Result<DemoStep, DemoError<F::Error>> {
        let len = self.log.len();
        let o = self.next.min(self.next_atomic);
        let Some(event) = self.log.get(o) else {
            let totals = self.totals();
            return Ok(DemoStep::Done(Frame::Done {
                boots: self.boots,
                totals,
                true_total: self.log.true_total(),
            }));
        };
        let shared = self.next == o;
        let atomic = self.next_atomic == o;
        if shared {
            Naive.apply(&mut self.naive, &event)?;
            self.naive_j.append(flash, &self.naive)?;
            if OffsetStamped.apply(&mut self.offset, &event)? == crate::store::Outcome::Applied {
                self.offset_j.append(flash, &self.offset)?;
            }
            self.next = o + 1;
        }
        if atomic {
            Atomic.apply(&mut self.atomic, &event)?;
            self.next_atomic = o + 1;
        }
        if self.planned_crash && self.boots == 1 && o == DDIA_CRASH_AFTER {
            return Ok(DemoStep::PlannedCrash);
        }
        if checkpoint_after(o, DDIA_CHECKPOINT_EVERY, len) {
            if shared {
                self.positions
                    .append(flash, &Position { next: self.next })?;
            }
            if atomic {
                Atomic::set_position(&mut self.atomic, self.next_atomic);
                self.atomic_j.append(flash, &self.atomic)?;
            }
        }
        Ok(DemoStep::Progress(Frame::Progress {
            offset: o,
            totals: self.totals(),
        }))
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
    use crate::flash::MemFlash;

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
