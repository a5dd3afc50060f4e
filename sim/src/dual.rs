//! Dual writes: one fact written to two views, a total and a per-payer index, with and
//! without a shared record. Each fix is a set of sinks that the consumer drives like any
//! store, so a dual-write run is simulated, crashed, swept and checked as every other.
//!
//! The consumer applies each payment to both views and commits its position every K
//! events, after the effects (at-least-once).
//!
//! - No fix: two records, written one after the other
//!   (`Pair::views(Naive, PayerIndex)`), each a plain running sum, as a second system
//!   without offsets keeps it. A crash between the two writes
//!   (`crash@between:O`) leaves the total one payment ahead of the index; the replay adds
//!   the batch to both again, so the gap stays: they diverge for good, and both
//!   over-count. The checker names it `diverged`.
//! - The atomic fix: one record holds the total, the index and an offset stamp
//!   ([`StampedViews`]). There is nothing between two writes to crash in.
//! - The derive fix: only the index (with its offset stamp) is written; the total is
//!   derived from it, in RAM and again on recovery ([`DerivedTotal`]).
//! - The split fix: still two records, but the total keeps its position with it (an
//!   offset stamp), so the total is exact and only the index shows the damage
//!   ([`split_records`]): the lesson's divergence with no over-count around it.

use postcard::experimental::max_size::MaxSize;
use serde::{Deserialize, Serialize};

use idem_core::log::Offset;
use idem_core::persist::{EachEffect, Pair};
use idem_core::store::{Outcome, Store};
use idem_payments::stores::{Naive, OffsetStamped, StoreError, add_amount};
use idem_payments::{Message, Payment, Sum};

/// How many payers the index holds.
pub const PAYERS: usize = 4;

/// Where the dual-write scenario crashes by default: between the two writes of this
/// offset (for the fixes, which write once, right after that write).
pub const DUAL_CRASH: Offset = 25;

/// The sinks without a fix: the total view, then the index view.
pub type TwoRecords = Pair<Naive, PayerIndex>;

/// The sinks without a fix, as two views of one fact.
pub const fn two_records() -> TwoRecords {
    Pair::views(Naive, PayerIndex)
}

/// The split fix's sinks: the total keeps its position with it (an offset stamp, so a
/// replay cannot move it), the index is still a second plain record.
pub type SplitRecords = Pair<OffsetStamped, PayerIndex>;

/// The split fix: the total is exact whatever the crash, so what remains is the index's
/// disagreement alone (a crash between the two writes, then the replay, both land on the
/// index only).
pub const fn split_records() -> SplitRecords {
    Pair::views(OffsetStamped, PayerIndex)
}

/// A per-payer index: the payer (the producer id) and the sum of its payments.
pub type Index = heapless::Vec<(u32, i64), PAYERS>;

const INDEX_MAX: usize = 1 + PAYERS * (u32::POSTCARD_MAX_SIZE + i64::POSTCARD_MAX_SIZE);

/// Whether `event` can be added to the index: applied, or a full index or an overflow.
fn addable(index: &Index, event: &Payment) -> Result<Outcome, StoreError> {
    let m = &event.payload;
    match index.iter().find(|(p, _)| *p == m.producer) {
        Some((_, v)) => add_amount(*v, m.amount, event.offset).map(|_| Outcome::Applied),
        None if index.is_full() => Err(StoreError::Payers { capacity: PAYERS }),
        None => Ok(Outcome::Applied),
    }
}

/// Adds `event`, which [`addable`] checked, to the index.
fn add(index: &mut Index, event: &Payment) {
    let m = &event.payload;
    match index.iter_mut().find(|(p, _)| *p == m.producer) {
        Some((_, v)) => *v = v.saturating_add(m.amount),
        None => {
            // Cannot fail: `addable` saw room.
            let _ = index.push((m.producer, m.amount));
        }
    }
}

fn sum(index: &Index) -> i64 {
    // The total sink adds the same amounts with checked arithmetic and stops first.
    index.iter().fold(0, |s, (_, v)| s.saturating_add(*v))
}

/// The index view alone, a plain per-payer sum with no memory of what it applied.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PayerIndex;

/// [`PayerIndex`]'s record.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexState {
    /// Per payer: the sum of its payments.
    pub index: Index,
}

impl MaxSize for IndexState {
    const POSTCARD_MAX_SIZE: usize = INDEX_MAX;
}

impl Store for PayerIndex {
    type Payload = Message;
    type State = IndexState;
    type Error = StoreError;
    type Rejections = ();
    type Persist = EachEffect<Self>;
    const TAG: u32 = 0xD0A1_0003;

    fn check(&self, state: &IndexState, event: &Payment) -> Result<Outcome, StoreError> {
        addable(&state.index, event)
    }

    fn apply(&self, state: &mut IndexState, event: &Payment) {
        add(&mut state.index, event);
    }
}

impl Sum for PayerIndex {
    const IDEMPOTENT: bool = false;

    fn total(state: &IndexState) -> i64 {
        sum(&state.index)
    }
}

/// The atomic fix: both views and an offset stamp in one record.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StampedViews;

/// [`StampedViews`]'s record: the total view beside the stamped index.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ViewsState {
    /// The total view.
    pub total: i64,
    /// The index view and the highest offset applied.
    pub indexed: StampedIndex,
}

impl MaxSize for ViewsState {
    const POSTCARD_MAX_SIZE: usize = i64::POSTCARD_MAX_SIZE + StampedIndex::POSTCARD_MAX_SIZE;
}

impl Store for StampedViews {
    type Payload = Message;
    type State = ViewsState;
    type Error = StoreError;
    type Rejections = ();
    type Persist = EachEffect<Self>;
    const TAG: u32 = 0xD0A1_0002;

    /// The index's stamped rule, and the total beside it.
    fn check(&self, state: &ViewsState, event: &Payment) -> Result<Outcome, StoreError> {
        let outcome = DerivedTotal.check(&state.indexed, event)?;
        if outcome == Outcome::Applied {
            add_amount(state.total, event.payload.amount, event.offset)?;
        }
        Ok(outcome)
    }

    fn apply(&self, state: &mut ViewsState, event: &Payment) {
        DerivedTotal.apply(&mut state.indexed, event);
        state.total = state.total.saturating_add(event.payload.amount);
    }
}

impl Sum for StampedViews {
    fn total(state: &ViewsState) -> i64 {
        state.total
    }

    fn views(state: &ViewsState) -> Option<(i64, i64)> {
        Some((state.total, sum(&state.indexed.index)))
    }
}

/// The derive fix: only the index and an offset stamp are written; the total is the
/// index's sum.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DerivedTotal;

/// [`DerivedTotal`]'s record.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StampedIndex {
    /// The index view.
    pub index: Index,
    /// The highest offset applied.
    pub stamp: Option<Offset>,
}

impl MaxSize for StampedIndex {
    const POSTCARD_MAX_SIZE: usize = INDEX_MAX + Option::<Offset>::POSTCARD_MAX_SIZE;
}

impl Store for DerivedTotal {
    type Payload = Message;
    type State = StampedIndex;
    type Error = StoreError;
    type Rejections = ();
    type Persist = EachEffect<Self>;
    const TAG: u32 = 0xD0A1_0004;

    fn check(&self, state: &StampedIndex, event: &Payment) -> Result<Outcome, StoreError> {
        if state.stamp.is_some_and(|s| event.offset <= s) {
            return Ok(Outcome::Skipped);
        }
        addable(&state.index, event)
    }

    fn apply(&self, state: &mut StampedIndex, event: &Payment) {
        add(&mut state.index, event);
        state.stamp = Some(event.offset);
    }
}

impl Sum for DerivedTotal {
    fn total(state: &StampedIndex) -> i64 {
        sum(&state.index)
    }

    fn views(state: &StampedIndex) -> Option<(i64, i64)> {
        let total = sum(&state.index);
        Some((total, total))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::{Quiet, run};
    use crate::scenario;
    use idem_payments::Truth;
    use idem_payments::crash::{At, CrashPoint};

    #[test]
    fn a_crash_between_two_writes_diverges_and_the_fixes_do_not() {
        let clean = scenario::dual_write().unwrap();
        let truth = clean.log.true_total();
        let amount = |i: u64| (i % 5 + 1) as i64;
        let between = clean
            .clone()
            .with_crashes(&[CrashPoint::new(At::Between(DUAL_CRASH))])
            .unwrap();
        let none = run(&between, two_records(), &mut Quiet).unwrap();
        // Offset 25 reached the total, not the index; the replay of 20..25 went to both
        // again.
        let replay: i64 = (20..=25).map(amount).sum();
        assert_eq!(none.views, Some((truth + replay, truth + replay - 1)));
        assert_eq!(
            none.diverged_at_recovery,
            Some((
                clean.log.true_total_before(26),
                clean.log.true_total_before(25)
            ))
        );
        assert_eq!(
            (none.anomalies.diverged, none.anomalies.first_diverged),
            (1, Some(20))
        );
        // Per event two records, one commit per 10 events, and the replay of 20..25.
        assert_eq!(none.flash.writes, 2 * 30 + 3 + 2 * 6 - 1);
        let after = clean
            .with_crashes(&[CrashPoint::after_effect(DUAL_CRASH)])
            .unwrap();
        let atomic = run(&after, StampedViews, &mut Quiet).unwrap();
        let derive = run(&after, DerivedTotal, &mut Quiet).unwrap();
        for r in [atomic, derive] {
            assert_eq!(
                (r.views, r.diverged_at_recovery, r.anomalies.is_empty()),
                (Some((truth, truth)), None, true)
            );
            assert_eq!(r.flash.writes, 30 + 3);
        }
    }
}
