//! The sinks: where an event's effect lands, and what each one remembers to stay exact.
//!
//! A [`Store`] is a pure rule: how an event changes its durable state, which is always
//! ONE record (the value plus whatever the store dedups with), so a crash can never
//! split them. Writing that record to flash, and when, is the consumer's job
//! ([`crate::consumer`]), following the policy the store names as [`Store::Persist`]
//! ([`crate::persist`]): after every applied effect, at checkpoints together with the
//! consumer position, or at checkpoints through a two-phase commit with the consumer's
//! position journal.
//!
//! | store | rule | replay | producer retry | application resend |
//! |---|---|---|---|---|
//! | [`Naive`] | `total += amount` | no | no | no |
//! | [`OffsetStamped`] | apply only if the offset is newer than the stamp | yes | no | no |
//! | [`MessageIdWindow`] | skip ids in a bounded window of recent ids | yes | within the window | within the window |
//! | [`ProducerSeq`] | per producer, apply only if (epoch, sequence) is newer | yes | yes | no |
//! | [`Atomic`] | value and position in one record, written at checkpoints | yes | no | no |
//! | [`TwoPhase`] | prepare value and position, commit the position, then the value | yes | no | no |

use core::fmt::Debug;

use postcard::experimental::max_size::MaxSize;
use serde::{Deserialize, Serialize, de::DeserializeOwned};

use crate::log::{Event, MessageId, Offset};
use crate::persist::{Checkpoint, EachEffect, Persistence, Positioned, TwoPhaseRecord};

/// What a store did with one delivered event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// The effect changed the state.
    Applied,
    /// The store recognised a duplicate and left its state alone.
    Skipped,
}

/// A sink's rule over its durable state.
pub trait Store: Clone + Debug {
    /// The whole durable state: one journal record.
    type State: Serialize + DeserializeOwned + MaxSize + Clone + Default + PartialEq + Debug;

    /// How the consumer makes the record durable: [`EachEffect`], [`Checkpoint`] or
    /// [`crate::persist::TwoPhase`].
    type Persist: Persistence<Self>;

    /// Names the store's record in journal page headers, so one store never reads
    /// another's pages. The rule: a tag names one encoding of [`Store::State`]. Change it
    /// with every change to that encoding (a field added, removed, reordered or retyped),
    /// as a version: records of the old encoding are then refused as foreign
    /// ([`crate::journal::JournalError::Foreign`]), never decoded into the new type (a
    /// `(u8, u8)` record of the same size would read back as a `(u16,)`). Then open with
    /// [`crate::consumer::Consumer::open_or_reset`] to start over. The consumer mixes the
    /// layout's tag into it by XOR: keep the store tags of one application apart in
    /// their high half (idem's own are `0x5301_00xx`), and give the application its own
    /// layout tag.
    const TAG: u32;

    /// Whether the store promises an exact total under replay (every store here but
    /// [`Naive`]); checkers hold such a store to the true total.
    const IDEMPOTENT: bool = true;

    /// Whether applying a message again is harmless by the rule itself, with no memory of
    /// what was applied (a gauge's set and max): a checker then does not count the repeat
    /// of a replay as a duplicate.
    const NATURALLY_IDEMPOTENT: bool = false;

    /// Applies `event` to `state` in RAM. A bounded memory that is full is an error.
    fn apply(&self, state: &mut Self::State, event: &Event) -> Result<Outcome, StoreError>;

    /// The value the sink shows.
    fn total(state: &Self::State) -> i64;

    /// Entries a bounded memory forgot because it was full (message ids evicted from a
    /// window): a duplicate of one of them would slip through.
    fn evicted(_state: &Self::State) -> u64 {
        0
    }

    /// For a record that holds two views of one fact (a total and an index): both, as
    /// (total view, index view).
    fn views(_state: &Self::State) -> Option<(i64, i64)> {
        None
    }

    /// `Some(d)` when a store in state `a` behaves exactly as one in state `b` from here
    /// on, except that its total stays `d` above: equal states (`d` = 0), or, for a store
    /// whose rule never reads its total, states equal but for the total.
    fn total_shift(a: &Self::State, b: &Self::State) -> Option<i64> {
        (a == b).then_some(0)
    }
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
    type State = NaiveState;
    type Persist = EachEffect<Self>;
    const TAG: u32 = 0x5301_0001;
    const IDEMPOTENT: bool = false;

    fn apply(&self, state: &mut NaiveState, event: &Event) -> Result<Outcome, StoreError> {
        state.total = add_amount(state.total, event.message.amount, event.offset)?;
        Ok(Outcome::Applied)
    }

    fn total(state: &NaiveState) -> i64 {
        state.total
    }

    /// The rule never reads the total: any two states differ by their totals only.
    fn total_shift(a: &NaiveState, b: &NaiveState) -> Option<i64> {
        a.total.checked_sub(b.total)
    }
}

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
    type State = GaugeState;
    type Persist = EachEffect<Self>;
    const TAG: u32 = 0x5301_0007;
    const NATURALLY_IDEMPOTENT: bool = true;

    fn apply(&self, state: &mut GaugeState, event: &Event) -> Result<Outcome, StoreError> {
        state.value = Some(event.message.amount);
        Ok(Outcome::Applied)
    }

    fn total(state: &GaugeState) -> i64 {
        state.value.unwrap_or(0)
    }
}

/// `value = max(value, reading)`: idempotent and commutative, so neither a replay nor a
/// late old reading changes it (for a quantity that only grows, such as a count).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Max;

impl Store for Max {
    type State = GaugeState;
    type Persist = EachEffect<Self>;
    const TAG: u32 = 0x5301_0008;
    const NATURALLY_IDEMPOTENT: bool = true;

    fn apply(&self, state: &mut GaugeState, event: &Event) -> Result<Outcome, StoreError> {
        let reading = event.message.amount;
        if state.value.is_some_and(|v| v >= reading) {
            return Ok(Outcome::Skipped);
        }
        state.value = Some(reading);
        Ok(Outcome::Applied)
    }

    fn total(state: &GaugeState) -> i64 {
        state.value.unwrap_or(0)
    }
}

/// Set-if-newer: remembers the highest offset applied and skips anything not newer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OffsetStamped;

/// The offset-stamped store's durable state: value and stamp in one record.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, MaxSize)]
pub struct StampedState {
    /// The running total.
    pub total: i64,
    /// The highest offset applied, if any.
    pub stamp: Option<Offset>,
}

impl Store for OffsetStamped {
    type State = StampedState;
    type Persist = EachEffect<Self>;
    const TAG: u32 = 0x5301_0002;

    fn apply(&self, state: &mut StampedState, event: &Event) -> Result<Outcome, StoreError> {
        if state.stamp.is_some_and(|s| event.offset <= s) {
            return Ok(Outcome::Skipped);
        }
        state.total = add_amount(state.total, event.message.amount, event.offset)?;
        state.stamp = Some(event.offset);
        Ok(Outcome::Applied)
    }

    fn total(state: &StampedState) -> i64 {
        state.total
    }
}

/// Errors of store configuration.
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
    /// An appending store's journal region keeps `records` records beside the page it
    /// reclaims, fewer than the `needed` its state is rebuilt from.
    Region {
        /// Records the region keeps while one page is reclaimed.
        records: u32,
        /// Records the store rebuilds its state from, at most.
        needed: u32,
    },
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
            Self::Window { window, capacity } => {
                write!(
                    f,
                    "a message-id window must hold 1 to {capacity} ids, not {window}"
                )
            }
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
            Self::Region { records, needed } => write!(
                f,
                "the store's journal keeps {records} records while it reclaims a page, fewer than the {needed} its state is rebuilt from: give it more pages"
            ),
        }
    }
}

impl core::error::Error for StoreError {}

/// Dedup by message id over a window of the last `window` distinct ids applied
/// (at most `W`, the compile-time capacity).
///
/// Overflow policy: when the window is full, applying a new id evicts the oldest one,
/// and the eviction is counted in the state. A duplicate that arrives after its original
/// was evicted is no longer recognised: it is applied again. Size the window for the
/// longest gap between a message and its duplicate (a replay spans at most one
/// checkpoint interval; a producer retry, the producer's in-flight window).
///
/// With `EVICT` false it is [`UniqueKey`]: nothing is ever evicted, and a full table
/// refuses a new key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageIdWindow<const W: usize, const EVICT: bool = true> {
    window: usize,
}

/// Insert with a unique key: a table with a row for each message id applied (`INSERT
/// ... ON CONFLICT DO NOTHING` on the id), up to `N` rows. A second insert of a key is
/// a no-op, so every repeat of a message, however late, is harmless: the message-id
/// rule with a memory that never forgets. The price is a row for every key ever
/// applied: a full table refuses the next new key ([`StoreError::Keys`]), where the
/// window would forget its oldest. It holds only when the key travels with the message;
/// a key the consumer makes up at each delivery would give every repeat a new row.
pub type UniqueKey<const N: usize> = MessageIdWindow<N, false>;

impl<const W: usize, const EVICT: bool> MessageIdWindow<W, EVICT> {
    /// A store whose window holds `window` ids, `1..=W`.
    pub const fn new(window: usize) -> Result<Self, StoreError> {
        if window == 0 || window > W {
            return Err(StoreError::Window {
                window,
                capacity: W,
            });
        }
        Ok(Self { window })
    }

    /// How many ids the window holds.
    pub const fn window(&self) -> usize {
        self.window
    }
}

impl<const W: usize, const EVICT: bool> Default for MessageIdWindow<W, EVICT> {
    fn default() -> Self {
        Self { window: W }
    }
}

/// The message-id store's durable state: value and window in one record.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WindowState<const W: usize> {
    /// The running total.
    pub total: i64,
    /// The ids applied most recently, oldest first.
    pub seen: heapless::Vec<MessageId, W>,
    /// How many ids were evicted from the full window.
    pub evicted: u64,
}

impl<const W: usize> MaxSize for WindowState<W> {
    const POSTCARD_MAX_SIZE: usize = i64::POSTCARD_MAX_SIZE
        + varint_len(W)
        + W * MessageId::POSTCARD_MAX_SIZE
        + u64::POSTCARD_MAX_SIZE;
}

const fn varint_len(n: usize) -> usize {
    let mut len = 1;
    let mut n = n >> 7;
    while n > 0 {
        len += 1;
        n >>= 7;
    }
    len
}

/// What the message-id store appends for each applied effect: the id, and the scalars
/// of the state right after it. The window itself is rebuilt at recovery from the newest
/// `held` such records, so it is never rewritten whole.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, MaxSize)]
pub struct IdApplied {
    /// The id applied, as its 8 little-endian bytes (fixed size: a hash as a varint
    /// would take 10).
    pub id: [u8; 8],
    /// The total after it.
    pub total: i64,
    /// Ids evicted from the full window so far.
    pub evicted: u64,
    /// Ids the window held after it.
    pub held: u8,
}

impl<const W: usize, const EVICT: bool> crate::persist::Appendable for MessageIdWindow<W, EVICT> {
    type Delta = IdApplied;
    const MAX_NEEDED: u32 = {
        assert!(W <= 255, "a window's length is one byte in its records");
        W as u32
    };

    fn delta(state: &WindowState<W>, _: &Event, _: u32) -> IdApplied {
        IdApplied {
            id: state.seen.last().map_or(0, |id| id.0).to_le_bytes(),
            total: state.total,
            evicted: state.evicted,
            held: state.seen.len() as u8,
        }
    }

    /// The state, and how many ids its window held.
    type Rebuild = (WindowState<W>, usize);

    fn start(newest: &IdApplied) -> (Self::Rebuild, u32) {
        let state = WindowState {
            total: newest.total,
            seen: heapless::Vec::new(),
            evicted: newest.evicted,
        };
        let held = usize::from(newest.held).min(W);
        ((state, held), held as u32)
    }

    fn fold_back((state, _): &mut Self::Rebuild, older: &IdApplied) {
        // Newest first; `finish` puts them oldest first. (Pushing and reversing once,
        // rather than inserting at the front each time, keeps `memmove` out of a
        // firmware: 1.3 KB on a Cortex-M0.) Cannot fail: `start` asks for at most W.
        let _ = state.seen.push(MessageId(u64::from_le_bytes(older.id)));
    }

    // Out of line on bare metal: inlined, it was copied into several callers
    // (BENCHMARKS.md, "Firmware size").
    #[cfg_attr(target_os = "none", inline(never))]
    fn finish((mut state, held): Self::Rebuild) -> Option<WindowState<W>> {
        state.seen.reverse();
        (state.seen.len() == held).then_some(state)
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

impl<const P: usize> crate::persist::Appendable for ProducerSeq<P> {
    type Delta = SeqApplied;
    // Twice P: a torn slot the journal steps over after a write cut short takes a
    // sequence number and shifts the rotation once, and any 2P records still hold P in a
    // row.
    const MAX_NEEDED: u32 = {
        assert!(P <= 127, "a table index is one byte in its records");
        2 * P as u32
    };

    fn delta(state: &SeqState<P>, event: &Event, seq: u32) -> SeqApplied {
        let entry = |index: usize| IndexedSeq {
            index: index as u8,
            last: state.last[index],
        };
        let changed = state
            .last
            .iter()
            .position(|l| l.producer == event.message.producer)
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

impl<const W: usize, const EVICT: bool> Store for MessageIdWindow<W, EVICT> {
    type State = WindowState<W>;
    type Persist = crate::persist::Appended<Self>;
    // Another rule, another tag: a window's journal is not read as a table's.
    const TAG: u32 = if EVICT { 0x5301_0003 } else { 0x5301_0009 };

    fn apply(&self, state: &mut WindowState<W>, event: &Event) -> Result<Outcome, StoreError> {
        let id = event.message.id;
        if state.seen.contains(&id) {
            return Ok(Outcome::Skipped);
        }
        if !EVICT && state.seen.len() >= self.window {
            return Err(StoreError::Keys {
                capacity: self.window,
                offset: event.offset,
            });
        }
        while state.seen.len() >= self.window {
            // The oldest goes. On Arm by swaps: `remove(0)` would pull `memmove` into a
            // firmware (1.3 KB on a Cortex-M0); elsewhere `remove(0)` is twice as fast.
            if cfg!(target_arch = "arm") {
                for i in 1..state.seen.len() {
                    state.seen.swap(i - 1, i);
                }
                state.seen.pop();
            } else {
                state.seen.remove(0);
            }
            state.evicted += 1;
        }
        // Cannot fail: the loop above made room (window <= W).
        let _ = state.seen.push(id);
        state.total = add_amount(state.total, event.message.amount, event.offset)?;
        Ok(Outcome::Applied)
    }

    fn total(state: &WindowState<W>) -> i64 {
        state.total
    }

    fn evicted(state: &WindowState<W>) -> u64 {
        state.evicted
    }
}

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
    type State = CheckpointState;
    type Persist = Checkpoint<Self>;
    const TAG: u32 = 0x5301_0004;

    fn apply(&self, state: &mut CheckpointState, event: &Event) -> Result<Outcome, StoreError> {
        state.total = add_amount(state.total, event.message.amount, event.offset)?;
        Ok(Outcome::Applied)
    }

    fn total(state: &CheckpointState) -> i64 {
        state.total
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
        i64::POSTCARD_MAX_SIZE + varint_len(P) + P * LastSeq::POSTCARD_MAX_SIZE;
}

impl<const P: usize> Store for ProducerSeq<P> {
    type State = SeqState<P>;
    type Persist = crate::persist::Appended<Self>;
    const TAG: u32 = 0x5301_0005;

    fn apply(&self, state: &mut SeqState<P>, event: &Event) -> Result<Outcome, StoreError> {
        let m = &event.message;
        match state.last.iter_mut().find(|l| l.producer == m.producer) {
            Some(l) if (m.epoch, m.seq) <= (l.epoch, l.seq) => return Ok(Outcome::Skipped),
            Some(l) => (l.epoch, l.seq) = (m.epoch, m.seq),
            None => {
                let entry = LastSeq {
                    producer: m.producer,
                    epoch: m.epoch,
                    seq: m.seq,
                };
                state
                    .last
                    .push(entry)
                    .map_err(|_| StoreError::Producers { capacity: P })?;
            }
        }
        state.total = add_amount(state.total, m.amount, event.offset)?;
        Ok(Outcome::Applied)
    }

    fn total(state: &SeqState<P>) -> i64 {
        state.total
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
    type State = TwoPhaseState;
    type Persist = crate::persist::TwoPhase<Self>;
    const TAG: u32 = 0x5301_0006;

    fn apply(&self, state: &mut TwoPhaseState, event: &Event) -> Result<Outcome, StoreError> {
        state.total = add_amount(state.total, event.message.amount, event.offset)?;
        Ok(Outcome::Applied)
    }

    fn total(state: &TwoPhaseState) -> i64 {
        state.total
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
    use crate::log::Message;

    fn ev(offset: Offset, id: u64, amount: i64) -> Event {
        Event {
            offset,
            message: Message {
                id: MessageId(id),
                producer: 0,
                epoch: 0,
                seq: 0,
                amount,
            },
        }
    }

    #[test]
    fn offset_stamp_skips_what_is_not_newer() {
        let mut s = StampedState::default();
        assert_eq!(
            OffsetStamped.apply(&mut s, &ev(0, 0, 5)),
            Ok(Outcome::Applied)
        );
        assert_eq!(
            OffsetStamped.apply(&mut s, &ev(1, 1, 3)),
            Ok(Outcome::Applied)
        );
        assert_eq!(
            OffsetStamped.apply(&mut s, &ev(1, 1, 3)),
            Ok(Outcome::Skipped)
        );
        assert_eq!(
            OffsetStamped.apply(&mut s, &ev(0, 0, 5)),
            Ok(Outcome::Skipped)
        );
        assert_eq!(
            s,
            StampedState {
                total: 8,
                stamp: Some(1)
            }
        );
    }

    #[test]
    fn a_full_window_evicts_the_oldest_and_counts_it() {
        let store = MessageIdWindow::<4>::new(2).unwrap();
        let mut s = WindowState::default();
        for (o, id) in [1, 2, 3].into_iter().enumerate() {
            assert_eq!(
                store.apply(&mut s, &ev(o as u64, id, 1)),
                Ok(Outcome::Applied)
            );
        }
        assert_eq!(s.evicted, 1);
        assert_eq!(
            store.apply(&mut s, &ev(3, 3, 1)),
            Ok(Outcome::Skipped),
            "3 is in the window"
        );
        assert_eq!(
            store.apply(&mut s, &ev(4, 1, 1)),
            Ok(Outcome::Applied),
            "1 was evicted: it slips through"
        );
        assert_eq!(s.total, 4);
        assert_eq!(
            MessageIdWindow::<4>::new(0),
            Err(StoreError::Window {
                window: 0,
                capacity: 4
            })
        );
        assert_eq!(
            MessageIdWindow::<4>::new(5),
            Err(StoreError::Window {
                window: 5,
                capacity: 4
            })
        );
    }

    fn msg(producer: u32, epoch: u16, seq: u32, amount: i64) -> Event {
        Event {
            offset: 0,
            message: Message {
                id: MessageId(u64::from(seq)),
                producer,
                epoch,
                seq,
                amount,
            },
        }
    }

    #[test]
    fn producer_sequences_skip_retries_and_zombies_and_are_bounded() {
        let store = ProducerSeq::<2>;
        let mut s = SeqState::default();
        assert_eq!(store.apply(&mut s, &msg(1, 0, 1, 5)), Ok(Outcome::Applied));
        assert_eq!(
            store.apply(&mut s, &msg(1, 0, 1, 5)),
            Ok(Outcome::Skipped),
            "a retry"
        );
        assert_eq!(
            store.apply(&mut s, &msg(1, 1, 1, 4)),
            Ok(Outcome::Applied),
            "a new epoch"
        );
        assert_eq!(
            store.apply(&mut s, &msg(1, 0, 2, 3)),
            Ok(Outcome::Skipped),
            "a zombie"
        );
        assert_eq!(store.apply(&mut s, &msg(2, 0, 1, 1)), Ok(Outcome::Applied));
        assert_eq!(
            store.apply(&mut s, &msg(3, 0, 1, 1)),
            Err(StoreError::Producers { capacity: 2 })
        );
        assert_eq!(s.total, 10);
    }

    #[test]
    fn two_phase_resolves_forward_back_and_twice() {
        let mut s = TwoPhaseState {
            total: 7,
            next: Some(10),
            prepared: None,
            committed_total: 7,
        };
        TwoPhase.apply(&mut s, &msg(1, 0, 1, 3)).unwrap();
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
    fn max_sizes_bound_the_real_encodings() {
        let mut s = WindowState::<3> {
            total: i64::MIN,
            seen: heapless::Vec::new(),
            evicted: u64::MAX,
        };
        for _ in 0..3 {
            s.seen.push(MessageId(u64::MAX)).unwrap();
        }
        let mut buf = [0u8; 64];
        let used = postcard::to_slice(&s, &mut buf).unwrap().len();
        assert_eq!(used, WindowState::<3>::POSTCARD_MAX_SIZE);
        let c = CheckpointState {
            total: i64::MIN,
            next: Some(u64::MAX),
        };
        assert_eq!(
            postcard::to_slice(&c, &mut buf).unwrap().len(),
            CheckpointState::POSTCARD_MAX_SIZE
        );
    }
}
