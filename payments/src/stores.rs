//! The payment stores: each sums amounts into a total, with its own rule for a repeated
//! message.
//!
//! | store | rule | replay | producer retry | application resend |
//! |---|---|---|---|---|
//! | [`Naive`] | `total += amount` | no | no | no |
//! | [`OffsetStamped`](type@OffsetStamped) | apply only if the offset is newer than the stamp | yes | no | no |
//! | [`MessageIdWindow`]`<Naive, W>` | skip ids in a bounded window of recent ids | yes | within the window | within the window |
//! | [`UniqueKey`]`<Naive, N>` | skip every id ever applied, up to `N` | yes | yes | yes |
//! | [`ProducerSeq`] | per producer, apply only if (epoch, sequence) is newer | yes | yes | no |
//! | [`Atomic`] | value and position in one record, written at checkpoints | yes | no | no |
//! | [`TwoPhase`] | prepare value and position, commit the position, then the value | yes | no | no |
//!
//! The offset stamp and the message-id rules are the engine's combinators
//! ([`idem_core::store`]) around [`Naive`]; their records encode exactly as the payment
//! stores that came before them did.

use postcard::experimental::max_size::MaxSize;
use serde::{Deserialize, Serialize};

use super::{Message, Payment};
use idem_core::log::Offset;
use idem_core::persist::{
    Appendable, Appended, Checkpoint, EachEffect, Positioned, TwoPhaseRecord,
};
pub use idem_core::store::{MessageIdWindow, UniqueKey};
use idem_core::store::{OffsetStamp, Outcome, Stamped, Store, TableFull, WindowSize};

/// Errors of the payment stores: a bounded memory that is full, a total past its range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum StoreError {
    /// A message-id window must hold between 1 and its capacity ids.
    Window {
        /// The window asked for.
        window: usize,
        /// The compile-time capacity.
        capacity: usize,
    },
    /// The producer-sequence table is full: one more producer than it can remember.
    Producers {
        /// How many producers it remembers.
        capacity: usize,
    },
    /// A per-payer index is full: one more payer than it holds.
    Payers {
        /// How many payers it holds.
        capacity: usize,
    },
    /// Applying the event at `offset` would take a 64-bit total past its range.
    Overflow {
        /// The event's offset.
        offset: Offset,
    },
    /// A unique-key table is full: the event at `offset` has a key it has no row for.
    Keys {
        /// How many keys the table holds.
        capacity: usize,
        /// The event's offset.
        offset: Offset,
    },
}

impl From<WindowSize> for StoreError {
    fn from(e: WindowSize) -> Self {
        Self::Window {
            window: e.window,
            capacity: e.capacity,
        }
    }
}

impl From<TableFull> for StoreError {
    fn from(e: TableFull) -> Self {
        Self::Keys {
            capacity: e.capacity,
            offset: e.offset,
        }
    }
}

/// `total + amount` for the event at `offset`, or [`StoreError::Overflow`]: a total
/// never wraps into a wrong value.
pub fn add_amount(total: i64, amount: i64, offset: Offset) -> Result<i64, StoreError> {
    total
        .checked_add(amount)
        .ok_or(StoreError::Overflow { offset })
}

impl core::fmt::Display for StoreError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Window { window, capacity } => WindowSize {
                window: *window,
                capacity: *capacity,
            }
            .fmt(f),
            Self::Producers { capacity } => {
                write!(
                    f,
                    "the producer-sequence store remembers at most {capacity} producers"
                )
            }
            Self::Payers { capacity } => {
                write!(f, "the per-payer index holds at most {capacity} payers")
            }
            Self::Overflow { offset } => write!(
                f,
                "the event at offset {offset} would take the total past the range of a 64-bit integer"
            ),
            Self::Keys { capacity, offset } => write!(
                f,
                "the unique-key table is full: it holds {capacity} keys, and the event at offset {offset} has a new one (nothing was dropped: the event is not applied)"
            ),
        }
    }
}

impl core::error::Error for StoreError {}

/// Whether the event's amount can be added to `total`: applied, or the overflow.
fn addable(total: i64, e: &Payment) -> Result<Outcome, StoreError> {
    add_amount(total, e.payload.amount, e.offset).map(|_| Outcome::Applied)
}

/// `total + amount`, which [`addable`] checked (so it does not wrap).
fn added(total: i64, e: &Payment) -> i64 {
    total.wrapping_add(e.payload.amount)
}

/// `total += amount`, with no memory of what it has applied.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Naive;

/// The naive store's durable state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, MaxSize)]
pub struct NaiveState {
    /// The running total.
    pub total: i64,
}

impl Store for Naive {
    type Payload = Message;
    type State = NaiveState;
    type Error = StoreError;
    type Rejections = ();
    type Persist = EachEffect<Self>;
    const TAG: u32 = 0x5301_0001;

    fn check(&self, state: &NaiveState, event: &Payment) -> Result<Outcome, StoreError> {
        addable(state.total, event)
    }

    fn apply(&self, state: &mut NaiveState, event: &Payment) {
        state.total = added(state.total, event);
    }
}

/// Set-if-newer: the offset stamp around [`Naive`]. Remembers the highest offset applied
/// and skips anything not newer. Its record is (total, stamp), as it always was.
pub type OffsetStamped = OffsetStamp<Naive>;

/// The offset-stamped payment store, as a value.
#[allow(non_upper_case_globals)]
pub const OffsetStamped: OffsetStamped = OffsetStamp(Naive);

/// The offset-stamped store's durable state: the total and the stamp in one record.
pub type StampedState = Stamped<NaiveState>;

/// A gauge's state: the value it shows (none before the first reading).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, MaxSize)]
pub struct GaugeState {
    /// The value; `None` before the first reading.
    pub value: Option<i64>,
}

/// `value = reading`: naturally idempotent (applying a reading twice leaves the same
/// value), so a replay is harmless with no stamp at all; but not commutative: an old
/// reading that arrives late overwrites a newer one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Set;

impl Store for Set {
    type Payload = Message;
    type State = GaugeState;
    type Error = StoreError;
    type Rejections = ();
    type Persist = EachEffect<Self>;
    const TAG: u32 = 0x5301_0007;

    fn check(&self, _: &GaugeState, _: &Payment) -> Result<Outcome, StoreError> {
        Ok(Outcome::Applied)
    }

    fn apply(&self, state: &mut GaugeState, event: &Payment) {
        state.value = Some(event.payload.amount);
    }
}

/// `value = max(value, reading)`: idempotent and commutative, so neither a replay nor a
/// late old reading changes it (for a quantity that only grows, such as a count).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Max;

impl Store for Max {
    type Payload = Message;
    type State = GaugeState;
    type Error = StoreError;
    type Rejections = ();
    type Persist = EachEffect<Self>;
    const TAG: u32 = 0x5301_0008;

    fn check(&self, state: &GaugeState, event: &Payment) -> Result<Outcome, StoreError> {
        Ok(if state.value.is_some_and(|v| v >= event.payload.amount) {
            Outcome::Skipped
        } else {
            Outcome::Applied
        })
    }

    fn apply(&self, state: &mut GaugeState, event: &Payment) {
        state.value = Some(event.payload.amount);
    }
}

/// The message-id payment store's durable state: the total and the window in one record.
pub type WindowState<const W: usize> = idem_core::store::Windowed<NaiveState, W>;

/// An atomic checkpoint: the value and the consumer position in one record, written at
/// each checkpoint. Effects since the last checkpoint live in RAM; after a crash they
/// are replayed from the position in the record, so nothing is applied twice.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Atomic;

/// The atomic store's durable state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, MaxSize)]
pub struct CheckpointState {
    /// The total as of the checkpoint (in RAM: including effects since).
    pub total: i64,
    /// The next offset to read, as of the checkpoint.
    pub next: Option<Offset>,
}

impl Store for Atomic {
    type Payload = Message;
    type State = CheckpointState;
    type Error = StoreError;
    type Rejections = ();
    type Persist = Checkpoint<Self>;
    const TAG: u32 = 0x5301_0004;

    fn check(&self, state: &CheckpointState, event: &Payment) -> Result<Outcome, StoreError> {
        addable(state.total, event)
    }

    fn apply(&self, state: &mut CheckpointState, event: &Payment) {
        state.total = added(state.total, event);
    }
}

impl Positioned for Atomic {
    fn position(state: &CheckpointState) -> Offset {
        state.next.unwrap_or(0)
    }

    fn set_position(state: &mut CheckpointState, next: Offset) {
        state.next = Some(next);
    }
}

/// Per producer, apply only if (epoch, sequence) is newer than the last applied: Kafka's
/// bounded idea on the consumer side, O(producers) memory, not O(messages). Catches a
/// producer's retry (same sequence) and a fenced zombie (older epoch); misses an
/// application's resend, which carries a new sequence. Up to `P` producers; one more is
/// [`StoreError::Producers`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProducerSeq<const P: usize>;

/// What [`ProducerSeq`] remembers of one producer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, MaxSize)]
pub struct LastSeq {
    /// The producer.
    pub producer: u32,
    /// Its newest epoch applied.
    pub epoch: u16,
    /// Its newest sequence applied in that epoch.
    pub seq: u32,
}

/// The producer-sequence store's durable state: value and table in one record.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeqState<const P: usize> {
    /// The running total.
    pub total: i64,
    /// One entry per producer seen.
    pub last: heapless::Vec<LastSeq, P>,
}

impl<const P: usize> MaxSize for SeqState<P> {
    const POSTCARD_MAX_SIZE: usize =
        i64::POSTCARD_MAX_SIZE + idem_core::store::varint_len(P) + P * LastSeq::POSTCARD_MAX_SIZE;
}

impl<const P: usize> Store for ProducerSeq<P> {
    type Payload = Message;
    type State = SeqState<P>;
    type Error = StoreError;
    type Rejections = ();
    type Persist = Appended<Self>;
    const TAG: u32 = 0x5301_0005;

    fn check(&self, state: &SeqState<P>, event: &Payment) -> Result<Outcome, StoreError> {
        let m = &event.payload;
        match state.last.iter().find(|l| l.producer == m.producer) {
            Some(l) if (m.epoch, m.seq) <= (l.epoch, l.seq) => return Ok(Outcome::Skipped),
            Some(_) => {}
            None if state.last.is_full() => return Err(StoreError::Producers { capacity: P }),
            None => {}
        }
        addable(state.total, event)
    }

    fn apply(&self, state: &mut SeqState<P>, event: &Payment) {
        let m = &event.payload;
        match state.last.iter_mut().find(|l| l.producer == m.producer) {
            Some(l) => (l.epoch, l.seq) = (m.epoch, m.seq),
            None => {
                // Cannot fail: `check` saw room for one more.
                let _ = state.last.push(LastSeq {
                    producer: m.producer,
                    epoch: m.epoch,
                    seq: m.seq,
                });
            }
        }
        state.total = added(state.total, event);
    }
}

/// An entry of the producer-sequence table, with its place in the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, MaxSize)]
pub struct IndexedSeq {
    /// Its index in the table.
    pub index: u8,
    /// The entry.
    pub last: LastSeq,
}

/// What the producer-sequence store appends for each applied effect: the entry of the
/// producer whose sequence changed, one more entry in rotation (the one at the record's
/// sequence number modulo `P`, so any `P` consecutive records carry every entry that
/// existed when they were written, and an entry added since is in the record that added
/// it), and the total. The table is rebuilt at recovery from up to the newest `2P`
/// records.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, MaxSize)]
pub struct SeqApplied {
    /// The total after it.
    pub total: i64,
    /// Producers in the table after it.
    pub known: u8,
    /// The entry that changed.
    pub changed: IndexedSeq,
    /// The entry in rotation, when it is another one.
    pub rotated: Option<IndexedSeq>,
}

impl<const P: usize> Appendable for ProducerSeq<P> {
    type Delta = SeqApplied;
    // Twice P: a torn slot the journal steps over after a write cut short takes a
    // sequence number and shifts the rotation once, and any 2P records still hold P in a
    // row.
    const MAX_NEEDED: u32 = {
        assert!(P <= 127, "a table index is one byte in its records");
        2 * P as u32
    };

    fn delta(state: &SeqState<P>, event: &Payment, seq: u32) -> SeqApplied {
        let entry = |index: usize| IndexedSeq {
            index: index as u8,
            last: state.last[index],
        };
        let changed = state
            .last
            .iter()
            .position(|l| l.producer == event.payload.producer)
            .unwrap_or(0);
        let turn = seq as usize % P;
        SeqApplied {
            total: state.total,
            known: state.last.len() as u8,
            changed: entry(changed),
            rotated: (turn < state.last.len() && turn != changed).then(|| entry(turn)),
        }
    }

    /// The total, and the table's entries as they are found.
    type Rebuild = (i64, heapless::Vec<Option<LastSeq>, P>);

    fn start(newest: &SeqApplied) -> (Self::Rebuild, u32) {
        let mut table = heapless::Vec::new();
        for _ in 0..usize::from(newest.known).min(P) {
            let _ = table.push(None);
        }
        ((newest.total, table), 2 * P as u32)
    }

    fn fold_back((_, table): &mut Self::Rebuild, older: &SeqApplied) {
        for e in core::iter::once(older.changed).chain(older.rotated) {
            // Newest first: the first value found for an entry is its newest.
            if let Some(slot @ None) = table.get_mut(usize::from(e.index)) {
                *slot = Some(e.last);
            }
        }
    }

    fn finish((total, table): Self::Rebuild) -> Option<SeqState<P>> {
        let mut last = heapless::Vec::new();
        for e in table {
            last.push(e?).ok()?;
        }
        Some(SeqState { total, last })
    }
}

/// Two-phase commit to the sink: effects accumulate in RAM; at a checkpoint the consumer
/// writes a prepared record (the new value and position, and the last committed ones),
/// commits the position in its journal (the decision), then writes the committed record.
/// Recovery resolves a prepared record by the decision; committing twice is harmless
/// ("already committed" is a success), as Flink's `Committer` contract asks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TwoPhase;

/// The two-phase store's record.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, MaxSize)]
pub struct TwoPhaseState {
    /// The value (in a prepared record: the value being committed).
    pub total: i64,
    /// The committed position (next offset to read).
    pub next: Option<Offset>,
    /// In a prepared record: the position being committed.
    pub prepared: Option<Offset>,
    /// The last committed value, restored if a prepared record is rolled back.
    pub committed_total: i64,
}

impl Store for TwoPhase {
    type Payload = Message;
    type State = TwoPhaseState;
    type Error = StoreError;
    type Rejections = ();
    type Persist = idem_core::persist::TwoPhase<Self>;
    const TAG: u32 = 0x5301_0006;

    fn check(&self, state: &TwoPhaseState, event: &Payment) -> Result<Outcome, StoreError> {
        addable(state.total, event)
    }

    fn apply(&self, state: &mut TwoPhaseState, event: &Payment) {
        state.total = added(state.total, event);
    }
}

impl TwoPhaseRecord for TwoPhase {
    fn position(state: &TwoPhaseState) -> Offset {
        state.next.unwrap_or(0)
    }

    fn prepared(state: &TwoPhaseState) -> Option<Offset> {
        state.prepared
    }

    fn prepare(state: &mut TwoPhaseState, next: Offset) {
        state.prepared = Some(next);
    }

    // Out of line on bare metal: inlined, it was copied into several callers
    // (BENCHMARKS.md, "Firmware size").
    #[cfg_attr(target_os = "none", inline(never))]
    fn resolve(state: &mut TwoPhaseState, commit: bool) {
        match (state.prepared.take(), commit) {
            (Some(next), true) => {
                state.next = Some(next);
                state.committed_total = state.total;
            }
            (Some(_), false) => state.total = state.committed_total,
            // Already committed: nothing to do, and that is a success.
            (None, _) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use idem_core::log::{Event, MessageId};

    fn msg(producer: u32, epoch: u16, seq: u32, amount: i64) -> Payment {
        Event {
            offset: 0,
            payload: Message {
                id: MessageId(u64::from(seq)),
                producer,
                epoch,
                seq,
                amount,
            },
        }
    }

    /// Check, then apply, as the consumer does.
    fn step<S: Store<Payload = Message>>(
        s: &S,
        state: &mut S::State,
        e: &Payment,
    ) -> Result<Outcome, S::Error> {
        let o = s.check(state, e)?;
        if o == Outcome::Applied {
            s.apply(state, e);
        }
        Ok(o)
    }

    #[test]
    fn producer_sequences_skip_retries_and_zombies_and_are_bounded() {
        let store = ProducerSeq::<2>;
        let mut s = SeqState::default();
        assert_eq!(step(&store, &mut s, &msg(1, 0, 1, 5)), Ok(Outcome::Applied));
        assert_eq!(
            step(&store, &mut s, &msg(1, 0, 1, 5)),
            Ok(Outcome::Skipped),
            "a retry"
        );
        assert_eq!(
            step(&store, &mut s, &msg(1, 1, 1, 4)),
            Ok(Outcome::Applied),
            "a new epoch"
        );
        assert_eq!(
            step(&store, &mut s, &msg(1, 0, 2, 3)),
            Ok(Outcome::Skipped),
            "a zombie"
        );
        assert_eq!(step(&store, &mut s, &msg(2, 0, 1, 1)), Ok(Outcome::Applied));
        assert_eq!(
            step(&store, &mut s, &msg(3, 0, 1, 1)),
            Err(StoreError::Producers { capacity: 2 })
        );
        assert_eq!(s.total, 10);
    }

    #[test]
    fn a_total_past_its_range_is_an_error_that_changes_nothing() {
        let mut s = NaiveState { total: i64::MAX };
        assert_eq!(
            step(&Naive, &mut s, &msg(1, 0, 1, 1)),
            Err(StoreError::Overflow { offset: 0 })
        );
        assert_eq!(s.total, i64::MAX);
    }

    #[test]
    fn two_phase_resolves_forward_back_and_twice() {
        let mut s = TwoPhaseState {
            total: 7,
            next: Some(10),
            prepared: None,
            committed_total: 7,
        };
        step(&TwoPhase, &mut s, &msg(1, 0, 1, 3)).unwrap();
        TwoPhase::prepare(&mut s, 20);
        let prepared = s;
        TwoPhase::resolve(&mut s, true);
        assert_eq!(
            s,
            TwoPhaseState {
                total: 10,
                next: Some(20),
                prepared: None,
                committed_total: 10
            }
        );
        TwoPhase::resolve(&mut s, true);
        assert_eq!(s.next, Some(20), "already committed is a success");
        let mut back = prepared;
        TwoPhase::resolve(&mut back, false);
        assert_eq!(
            back,
            TwoPhaseState {
                total: 7,
                next: Some(10),
                prepared: None,
                committed_total: 7
            }
        );
    }

    #[test]
    fn the_combinators_keep_the_payment_stores_tags_and_encodings() {
        assert_eq!(OffsetStamped::TAG, 0x5301_0002);
        assert_eq!(crate::registry::MessageIdStore::TAG, 0x5301_0003);
        assert_eq!(<UniqueKey<Naive, 64>>::TAG, 0x5301_0009);
        let s = StampedState {
            state: NaiveState { total: -3 },
            stamp: Some(300),
        };
        let mut buf = [0u8; 16];
        // (total, stamp): zigzag -3 = 5, then Some, then 300 as a varint.
        assert_eq!(
            postcard::to_slice(&s, &mut buf).unwrap(),
            &[5, 1, 0xAC, 0x02]
        );
        assert_eq!(StampedState::POSTCARD_MAX_SIZE, 21);
        assert_eq!(WindowState::<32>::POSTCARD_MAX_SIZE, 10 + 1 + 32 * 10 + 10);
        let c = CheckpointState {
            total: i64::MIN,
            next: Some(u64::MAX),
        };
        assert_eq!(
            postcard::to_slice(&c, &mut [0u8; 64]).unwrap().len(),
            CheckpointState::POSTCARD_MAX_SIZE
        );
    }
}
