//! Dual writes: one fact written to two views, a total and a per-payer index, with and
//! without a shared record.
//!
//! The consumer applies each payment to both views and commits its position every K
//! events, after the effects (at-least-once). A crash between the two writes of one
//! event leaves the views disagreeing:
//!
//! - [`DualFix::None`]: two records, each a plain running sum (what a second system
//!   without offsets does). The crash leaves the total one payment ahead of the index;
//!   the replay adds the batch to both again, so the gap stays: they diverge for good,
//!   and both over-count.
//! - [`DualFix::Atomic`]: one record holds the total, the index and an offset stamp.
//!   There is nothing between two writes to crash in: exact and consistent.
//! - [`DualFix::Derive`]: only the index (with its offset stamp) is written; the total
//!   is derived from it, in RAM and again on recovery. Exact and consistent.

use embedded_storage::nor_flash::NorFlash;
use postcard::experimental::max_size::MaxSize;
use serde::{Deserialize, Serialize};

use crate::consumer::{Position, checkpoint_after};
use crate::journal::{Journal, JournalError, Region};
use crate::log::{Log, Offset};

/// How many payers the index holds.
pub const PAYERS: usize = 4;

/// How the two views are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DualFix {
    /// Two records, written one after the other.
    None,
    /// One record for both views.
    Atomic,
    /// Only the index is written; the total is derived from it.
    Derive,
}

/// The per-payer index (and, for the atomic fix, the total beside it).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Views {
    /// The total view (unused by the derive fix).
    pub total: i64,
    /// Per payer (the producer id): the sum of its payments.
    pub index: heapless::Vec<(u32, i64), PAYERS>,
    /// The highest offset applied (unused by the `None` fix).
    pub stamp: Option<Offset>,
}

impl MaxSize for Views {
    const POSTCARD_MAX_SIZE: usize = i64::POSTCARD_MAX_SIZE
        + 1
        + PAYERS * (u32::POSTCARD_MAX_SIZE + i64::POSTCARD_MAX_SIZE)
        + 11;
}

impl Views {
    /// The sum over the index.
    pub fn index_sum(&self) -> i64 {
        self.index.iter().map(|(_, v)| v).sum()
    }

    fn add<E>(&mut self, payer: u32, amount: i64) -> Result<(), DualError<E>> {
        match self.index.iter_mut().find(|(p, _)| *p == payer) {
            Some((_, v)) => *v += amount,
            None => self
                .index
                .push((payer, amount))
                .map_err(|_| DualError::Payers { capacity: PAYERS })?,
        }
        Ok(())
    }
}

/// Where the dual-write device keeps its three journals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DualLayout {
    /// The consumer position.
    pub positions: Region,
    /// The total view's record (the atomic fix keeps both views here).
    pub total: Region,
    /// The index view's record.
    pub index: Region,
}

/// Why a dual-write run stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DualError<E = ()> {
    /// A journal failed.
    Journal(JournalError<E>),
    /// More payers than the index holds.
    Payers {
        /// How many it holds.
        capacity: usize,
    },
}

impl<E> From<JournalError<E>> for DualError<E> {
    fn from(e: JournalError<E>) -> Self {
        Self::Journal(e)
    }
}

impl<E: core::fmt::Debug> core::fmt::Display for DualError<E> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Journal(e) => e.fmt(f),
            Self::Payers { capacity } => {
                write!(f, "the per-payer index holds at most {capacity} payers")
            }
        }
    }
}

/// What a dual-write run ended with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DualReport {
    /// The total view at the end.
    pub total: i64,
    /// The sum over the index view at the end.
    pub index_sum: i64,
    /// What both should be.
    pub true_total: i64,
    /// The two views right after the crash's recovery, when they disagreed: (total, index sum).
    pub diverged_at_recovery: Option<(i64, i64)>,
    /// Journal records written.
    pub writes: u64,
}

impl DualReport {
    /// Whether the views disagree at the end.
    pub fn diverged(&self) -> bool {
        self.total != self.index_sum
    }

    /// `diverged` when the views disagree at the end, else the total's verdict.
    pub fn verdict_name(&self) -> &'static str {
        if self.diverged() {
            "diverged"
        } else {
            crate::check::Verdict::of(self.total, self.true_total).name()
        }
    }
}

/// The dual-write device's journals on a [`crate::sim::SimFlash`]: positions on pages
/// 0..2, the total view on 2..5, the index view on 5..8.
pub const DUAL_LAYOUT: DualLayout = DualLayout {
    positions: Region { start: 0, pages: 2 },
    total: Region {
        start: 2 * 1024,
        pages: 3,
    },
    index: Region {
        start: 5 * 1024,
        pages: 3,
    },
};

/// The device's RAM: the views as recovered, and the journals' cursors.
struct Device {
    views: Views,
    other: Views,
    next: Offset,
    positions: Journal<Position>,
    total_j: Journal<Views>,
    index_j: Journal<Views>,
}

impl Device {
    fn open<F: NorFlash>(
        flash: &mut F,
        layout: DualLayout,
        fix: DualFix,
    ) -> Result<Self, DualError<F::Error>> {
        let (positions, p) = Journal::<Position>::open(flash, layout.positions, 0xD0A1_0001)?;
        let (total_j, a) = Journal::<Views>::open(flash, layout.total, 0xD0A1_0002)?;
        let (index_j, b) = Journal::<Views>::open(flash, layout.index, 0xD0A1_0003)?;
        let (mut views, other) = (a.unwrap_or_default(), b.unwrap_or_default());
        if fix == DualFix::Derive {
            // The total is not stored: derive it from the index.
            views = other.clone();
            views.total = views.index_sum();
        }
        Ok(Self {
            views,
            other,
            next: p.map_or(0, |p| p.next),
            positions,
            total_j,
            index_j,
        })
    }

    /// The two views as a reader of the flash sees them now.
    fn seen(&self, fix: DualFix) -> (i64, i64) {
        match fix {
            DualFix::None => (self.views.total, self.other.index_sum()),
            DualFix::Atomic | DualFix::Derive => (self.views.total, self.views.index_sum()),
        }
    }
}

/// Runs the dual-write consumer over `log` (checkpoint every `k`), crashing once between
/// the two writes of offset `crash_between` (for the fixes, right after the one write).
pub fn run<F: NorFlash, L: Log>(
    flash: &mut F,
    layout: DualLayout,
    log: &L,
    fix: DualFix,
    k: u64,
    crash_between: Option<Offset>,
) -> Result<DualReport, DualError<F::Error>> {
    let mut dev = Device::open(flash, layout, fix)?;
    let mut writes = 0;
    let mut crash = crash_between;
    let mut diverged_at_recovery = None;
    while let Some(e) = log.get(dev.next) {
        let (o, payer, amount) = (e.offset, e.message.producer, e.message.amount);
        // The first (for the fixes, the only) write.
        match fix {
            DualFix::None => {
                dev.views.total += amount;
                dev.total_j.append(flash, &dev.views)?;
                writes += 1;
            }
            DualFix::Atomic | DualFix::Derive if dev.views.stamp.is_none_or(|s| o > s) => {
                dev.views.add(payer, amount)?;
                dev.views.stamp = Some(o);
                if fix == DualFix::Atomic {
                    dev.views.total += amount;
                    dev.total_j.append(flash, &dev.views)?;
                } else {
                    dev.views.total = dev.views.index_sum();
                    dev.index_j.append(flash, &dev.views)?;
                }
                writes += 1;
            }
            DualFix::Atomic | DualFix::Derive => {}
        }
        if crash == Some(o) {
            crash = None;
            dev = Device::open(flash, layout, fix)?;
            let (t, i) = dev.seen(fix);
            diverged_at_recovery = (t != i).then_some((t, i));
            continue;
        }
        // The second write, for the fix that has one.
        if fix == DualFix::None {
            dev.other.add(payer, amount)?;
            dev.index_j.append(flash, &dev.other)?;
            writes += 1;
        }
        dev.next = o + 1;
        if checkpoint_after(o, k, log.len()) {
            dev.positions.append(flash, &Position { next: dev.next })?;
            writes += 1;
        }
    }
    let (total, index_sum) = dev.seen(fix);
    Ok(DualReport {
        total,
        index_sum,
        true_total: log.true_total(),
        diverged_at_recovery,
        writes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flash::MemFlash;
    use crate::log::{AppendLog, Message, MessageId, VecLog};

    const LAYOUT: DualLayout = DualLayout {
        positions: Region { start: 0, pages: 2 },
        total: Region {
            start: 2048,
            pages: 3,
        },
        index: Region {
            start: 5120,
            pages: 3,
        },
    };

    fn log() -> VecLog<32> {
        let mut log = VecLog::new();
        for i in 0..30u32 {
            let m = Message {
                id: MessageId(u64::from(i)),
                producer: i % 3,
                epoch: 0,
                seq: i,
                amount: i64::from(i % 5 + 1),
            };
            log.append(m).unwrap();
        }
        log
    }

    #[test]
    fn a_crash_between_two_writes_diverges_and_the_fixes_do_not() {
        let log = log();
        let truth = log.true_total();
        let none = run(
            &mut MemFlash::<8, 1024>::new(),
            LAYOUT,
            &log,
            DualFix::None,
            10,
            Some(25),
        )
        .unwrap();
        // Offset 25 (payer 1, amount 1) reached the total, not the index; the replay of
        // 20..25 went to both again.
        let replay: i64 = (20..=25).map(|i| i64::from(i % 5 + 1)).sum();
        assert_eq!(
            (none.total, none.index_sum),
            (truth + replay, truth + replay - 1)
        );
        assert!(none.diverged());
        assert_eq!(
            none.diverged_at_recovery,
            Some((log.true_total_before(26), log.true_total_before(25)))
        );
        for fix in [DualFix::Atomic, DualFix::Derive] {
            let r = run(
                &mut MemFlash::<8, 1024>::new(),
                LAYOUT,
                &log,
                fix,
                10,
                Some(25),
            )
            .unwrap();
            assert_eq!(
                (r.total, r.index_sum, r.diverged_at_recovery),
                (truth, truth, None),
                "{fix:?}"
            );
        }
    }
}
