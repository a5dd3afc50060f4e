//! The sinks: where an event's effect lands, and what each one remembers to stay exact.
//!
//! A [`Store`] is a pure rule: how an event changes its durable state, which is always
//! ONE record (the value plus whatever the store dedups with), so a crash can never
//! split them. Writing that record to flash, and when, is the consumer's job
//! ([`crate::consumer`]): stores whose position lives apart ([`Store::POSITION_IN_RECORD`]
//! is `false`) are persisted after every applied effect; a store that keeps the
//! consumer position inside its record is persisted only at checkpoints, value and
//! position together.
//!
//! | store | rule | survives a replay | survives a producer retry |
//! |---|---|---|---|
//! | [`Naive`] | `total += amount` | no | no |
//! | [`OffsetStamped`] | apply only if the offset is newer than the stamp | yes | no |
//! | [`MessageIdWindow`] | skip ids in a bounded window of recent ids | yes | yes, within the window |
//! | [`Atomic`] | value and position in one record, written at checkpoints | yes | no |

use core::fmt::Debug;

use postcard::experimental::max_size::MaxSize;
use serde::{Deserialize, Serialize, de::DeserializeOwned};

use crate::log::{Event, MessageId, Offset};

/// What a store did with one delivered event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The effect changed the state.
    Applied,
    /// The store recognised a duplicate and left its state alone.
    Skipped,
}

/// A sink's rule over its durable state.
pub trait Store {
    /// The whole durable state: one journal record.
    type State: Serialize + DeserializeOwned + MaxSize + Clone + Default + PartialEq + Debug;

    /// Names the store in journal page headers, so one store never reads another's pages.
    const TAG: u32;

    /// Whether the store promises an exact total under replay (every store here but
    /// [`Naive`]); checkers hold such a store to the true total.
    const IDEMPOTENT: bool = true;

    /// Whether the consumer position is kept inside [`Store::State`] (an atomic
    /// checkpoint) rather than in the consumer's own position journal.
    const POSITION_IN_RECORD: bool = false;

    /// Applies `event` to `state` in RAM.
    fn apply(&self, state: &mut Self::State, event: &Event) -> Outcome;

    /// The value the sink shows.
    fn total(state: &Self::State) -> i64;

    /// The next offset to read, for a store that keeps the position in its record.
    fn position(_state: &Self::State) -> Option<Offset> {
        None
    }

    /// Records the next offset to read, for a store that keeps the position in its record.
    fn set_position(_state: &mut Self::State, _next: Offset) {}
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
    const TAG: u32 = 0x5301_0001;
    const IDEMPOTENT: bool = false;

    fn apply(&self, state: &mut NaiveState, event: &Event) -> Outcome {
        state.total = state.total.wrapping_add(event.message.amount);
        Outcome::Applied
    }

    fn total(state: &NaiveState) -> i64 {
        state.total
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
    const TAG: u32 = 0x5301_0002;

    fn apply(&self, state: &mut StampedState, event: &Event) -> Outcome {
        if state.stamp.is_some_and(|s| event.offset <= s) {
            return Outcome::Skipped;
        }
        state.total = state.total.wrapping_add(event.message.amount);
        state.stamp = Some(event.offset);
        Outcome::Applied
    }

    fn total(state: &StampedState) -> i64 {
        state.total
    }
}

/// Errors of store configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreError {
    /// A message-id window must hold between 1 and its capacity ids.
    Window {
        /// The window asked for.
        window: usize,
        /// The compile-time capacity.
        capacity: usize,
    },
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageIdWindow<const W: usize> {
    window: usize,
}

impl<const W: usize> MessageIdWindow<W> {
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

impl<const W: usize> Default for MessageIdWindow<W> {
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

impl<const W: usize> Store for MessageIdWindow<W> {
    type State = WindowState<W>;
    const TAG: u32 = 0x5301_0003;

    fn apply(&self, state: &mut WindowState<W>, event: &Event) -> Outcome {
        let id = event.message.id;
        if state.seen.contains(&id) {
            return Outcome::Skipped;
        }
        while state.seen.len() >= self.window {
            state.seen.remove(0);
            state.evicted += 1;
        }
        // Cannot fail: the loop above made room (window <= W).
        let _ = state.seen.push(id);
        state.total = state.total.wrapping_add(event.message.amount);
        Outcome::Applied
    }

    fn total(state: &WindowState<W>) -> i64 {
        state.total
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
    const TAG: u32 = 0x5301_0004;
    const POSITION_IN_RECORD: bool = true;

    fn apply(&self, state: &mut CheckpointState, event: &Event) -> Outcome {
        state.total = state.total.wrapping_add(event.message.amount);
        Outcome::Applied
    }

    fn total(state: &CheckpointState) -> i64 {
        state.total
    }

    fn position(state: &CheckpointState) -> Option<Offset> {
        state.next
    }

    fn set_position(state: &mut CheckpointState, next: Offset) {
        state.next = Some(next);
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
        assert_eq!(OffsetStamped.apply(&mut s, &ev(0, 0, 5)), Outcome::Applied);
        assert_eq!(OffsetStamped.apply(&mut s, &ev(1, 1, 3)), Outcome::Applied);
        assert_eq!(OffsetStamped.apply(&mut s, &ev(1, 1, 3)), Outcome::Skipped);
        assert_eq!(OffsetStamped.apply(&mut s, &ev(0, 0, 5)), Outcome::Skipped);
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
            assert_eq!(store.apply(&mut s, &ev(o as u64, id, 1)), Outcome::Applied);
        }
        assert_eq!(s.evicted, 1);
        assert_eq!(
            store.apply(&mut s, &ev(3, 3, 1)),
            Outcome::Skipped,
            "3 is in the window"
        );
        assert_eq!(
            store.apply(&mut s, &ev(4, 1, 1)),
            Outcome::Applied,
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
