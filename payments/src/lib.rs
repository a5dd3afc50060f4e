//! idem-payments: idem's own user of the engine (idem-core), what idem's firmware and its
//! MQTT receiver ship. `no_std`, no allocator.
//!
//! A [`Message`] is a payment a producer sends: its amount, the application's message id
//! and the application's own numbering of its sends; read back at an offset it is a
//! [`Payment`]. [`VecLog`] keeps appended messages in a fixed-capacity buffer (a full log
//! is [`LogError::Full`]); [`GeneratedLog`] computes a uniform workload on the fly, so a
//! million events need no storage at all. The [`stores`] sum the amounts, each with its
//! own rule for a repeated message, and [`Sum`] is what the checker reads of them; a
//! payment log's [`Truth`] is what it grades them against.
//!
//! The [`registry`] names the stores, their capacities and the sources each accepts;
//! [`crash`] points say where a run dies, and [`ddia`] holds the exercise's parameters.
//! The simulator that runs payments against those crash points, the producers and the
//! checker are idem-sim's.
#![cfg_attr(not(any(test, feature = "std")), no_std)]
#![deny(missing_docs)]

use postcard::experimental::max_size::MaxSize;
use serde::{Deserialize, Serialize};

use idem_core::log::{Event, Identified, Log, MessageId, Offset, Received};

pub mod crash;
pub mod ddia;
pub mod registry;
pub mod stores;
mod sum;
pub use sum::{Sum, SumSinks, Total};

/// A payment as read from a log, at its offset.
pub type Payment = Event<Message>;

/// What a producer sends: the payload and the ids that make duplicates recognisable.
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, MaxSize)]
pub struct Message {
    /// The application's message id.
    pub id: MessageId,
    /// The application's own numbering of its sends, carried in the payload: the
    /// sending instance. (Kafka's producer id, epoch and sequence are another thing: the
    /// producer library writes them in a record batch's header, only with idempotence or
    /// transactions on, for the broker; no application reads them; see
    /// `idem_sim::producer`.)
    pub producer: u32,
    /// The application's epoch of that instance: a restarted instance takes a higher one.
    pub epoch: u16,
    /// The application's sequence number of the send, from 0; a retry after a lost ack
    /// sends the same message again, so it reuses it.
    pub seq: u32,
    /// The amount this message adds to the total.
    pub amount: i64,
}

impl Identified for Message {
    fn id(&self) -> MessageId {
        self.id
    }
}

/// Errors of a log.
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LogError {
    /// The fixed-capacity log is full.
    Full {
        /// How many messages it holds.
        capacity: usize,
    },
    /// An idempotent log rejected a gap in a producer's sequence (Kafka's
    /// OUT_OF_ORDER_SEQUENCE_NUMBER).
    OutOfSequence {
        /// The producer.
        producer: u32,
        /// The sequence the log expected.
        expected: u32,
        /// The sequence it got.
        got: u32,
    },
    /// An idempotent log rejected a batch from a producer instance that a newer epoch
    /// replaced (a zombie; Kafka's fencing).
    Fenced {
        /// The producer.
        producer: u32,
        /// The zombie's epoch.
        epoch: u16,
        /// The current epoch.
        current: u16,
    },
    /// An idempotent log remembers a fixed number of producers; this is one more.
    Producers {
        /// How many producers it remembers.
        capacity: usize,
    },
}

impl core::fmt::Display for LogError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Full { capacity } => {
                write!(f, "the log is full: its capacity is {capacity} events")
            }
            Self::OutOfSequence {
                producer,
                expected,
                got,
            } => {
                write!(
                    f,
                    "producer id {producer} sent sequence {got} where the broker expected {expected} (sequences start at 0 for each producer id and epoch): a gap, rejected"
                )
            }
            Self::Fenced {
                producer,
                epoch,
                current,
            } => {
                write!(
                    f,
                    "producer id {producer} epoch {epoch} is fenced by epoch {current}: a zombie, rejected"
                )
            }
            Self::Producers { capacity } => {
                write!(
                    f,
                    "the idempotent log remembers at most {capacity} producers"
                )
            }
        }
    }
}

impl core::error::Error for LogError {}

/// What the simulator's checker knows of a payment log, beside what a consumer reads:
/// the true total, and which offsets hold the same message. A consumer never asks.
pub trait Truth: Log<Message> {
    /// How many events the checker judges: those before the log's end, none while a live
    /// stream's end is not known (a simulated log's always is).
    fn len(&self) -> Offset {
        self.end().unwrap_or(0)
    }

    /// The total a consumer should reach: each distinct message id counted once, with
    /// the amount of its first occurrence.
    fn true_total(&self) -> i64 {
        self.true_total_before(self.len())
    }

    /// The true total of the first `end` events: each distinct message id among them
    /// counted once.
    fn true_total_before(&self, end: Offset) -> i64 {
        (0..end.min(self.len()))
            .filter(|&o| self.canonical(o) == o)
            .filter_map(|o| self.get(o))
            .map(|e| e.payload.amount)
            // Saturates rather than wraps (a debug build would panic); a log whose
            // amounts could overflow is refused where it is read.
            .fold(0i64, i64::saturating_add)
    }

    /// Whether every message id in the log is distinct (each offset is its own
    /// message), so [`Truth::canonical`] is the identity. `false` when not known.
    fn ids_distinct(&self) -> bool {
        false
    }

    /// The offset of the first occurrence of the message at `offset`: the offset the
    /// checker knows that message by. The default scans the offsets before it (no memory,
    /// quadratic over a whole log); a log whose ids are known to be distinct returns
    /// `offset`.
    fn canonical(&self, offset: Offset) -> Offset {
        let Some(id) = self.get(offset).map(|e| e.payload.id) else {
            return offset;
        };
        (0..offset)
            .find(|&o| self.get(o).is_some_and(|e| e.payload.id == id))
            .unwrap_or(offset)
    }
}

impl<E: Copy + Into<Payment>> Truth for Received<'_, E> {
    fn ids_distinct(&self) -> bool {
        // Only the simulator's checker asks, and a live stream has none.
        true
    }
}

/// A log that messages can be appended to.
pub trait AppendLog: Truth {
    /// Appends `message` and returns its offset.
    fn append(&mut self, message: Message) -> Result<Offset, LogError>;
}

/// A log of up to `N` appended messages, kept in a fixed-capacity buffer.
#[derive(Debug, Clone, Default)]
pub struct VecLog<const N: usize> {
    messages: heapless::Vec<Message, N>,
}

impl<const N: usize> VecLog<N> {
    /// An empty log.
    pub const fn new() -> Self {
        Self {
            messages: heapless::Vec::new(),
        }
    }

    /// The messages in offset order.
    pub fn messages(&self) -> &[Message] {
        &self.messages
    }
}

impl<const N: usize> Log<Message> for VecLog<N> {
    fn end(&self) -> Option<Offset> {
        Some(self.messages.len() as u64)
    }

    fn get(&self, offset: Offset) -> Option<Payment> {
        let message = *self.messages.get(usize::try_from(offset).ok()?)?;
        Some(Event {
            offset,
            payload: message,
        })
    }
}

impl<const N: usize> Truth for VecLog<N> {}

impl<const N: usize> AppendLog for VecLog<N> {
    fn append(&mut self, message: Message) -> Result<Offset, LogError> {
        self.messages
            .push(message)
            .map_err(|_| LogError::Full { capacity: N })?;
        Ok(self.messages.len() as u64 - 1)
    }
}

/// `events` messages of `amount` each, with distinct ids, computed on demand.
///
/// Message `o` has id `o`, producer 0, epoch 0 and sequence `o`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GeneratedLog {
    /// Number of events.
    pub events: u64,
    /// Amount of every event.
    pub amount: i64,
}

impl Log<Message> for GeneratedLog {
    fn end(&self) -> Option<Offset> {
        Some(self.events)
    }

    fn get(&self, offset: Offset) -> Option<Payment> {
        (offset < self.events).then_some(Event {
            offset,
            payload: Message {
                id: MessageId(offset),
                producer: 0,
                epoch: 0,
                seq: offset as u32,
                amount: self.amount,
            },
        })
    }
}

impl Truth for GeneratedLog {
    fn true_total(&self) -> i64 {
        self.true_total_before(self.events)
    }

    fn true_total_before(&self, end: Offset) -> i64 {
        // Saturates rather than wraps; callers bound `events` so this is exact.
        let n = i64::try_from(end.min(self.events)).unwrap_or(i64::MAX);
        self.amount.saturating_mul(n)
    }

    fn ids_distinct(&self) -> bool {
        true
    }

    fn canonical(&self, offset: Offset) -> Offset {
        offset // every generated message has its own id
    }
}

/// A gauge's readings: message `o` carries the reading `o + 1` (the running count of
/// the DDIA workload, as a value rather than as +1), with id `o`. With `late` set, one
/// more message follows the last: the reading of offset `late` delivered again (the same
/// message, so the same id). The truth is the last reading, `events`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GaugeLog {
    /// Readings.
    pub events: u64,
    /// The offset whose reading arrives again after the last one.
    pub late: Option<Offset>,
}

impl Log<Message> for GaugeLog {
    fn end(&self) -> Option<Offset> {
        Some(self.events + u64::from(self.late.is_some_and(|l| l < self.events)))
    }

    fn get(&self, offset: Offset) -> Option<Payment> {
        let of = match self.late {
            Some(l) if offset == self.events && l < self.events => l,
            _ if offset < self.events => offset,
            _ => return None,
        };
        Some(Event {
            offset,
            payload: Message {
                id: MessageId(of),
                producer: 0,
                epoch: 0,
                seq: of as u32,
                amount: i64::try_from(of + 1).unwrap_or(i64::MAX),
            },
        })
    }
}

impl Truth for GaugeLog {
    /// The last reading among the first `end` events (a late old reading is not newer).
    fn true_total_before(&self, end: Offset) -> i64 {
        i64::try_from(end.min(self.events)).unwrap_or(i64::MAX)
    }

    fn ids_distinct(&self) -> bool {
        self.late.is_none()
    }

    fn canonical(&self, offset: Offset) -> Offset {
        match self.late {
            Some(l) if offset == self.events => l,
            _ => offset,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use idem_core::log::IdKey;

    fn msg(id: &str, seq: u32, amount: i64) -> Message {
        Message {
            id: MessageId::keyed(&IdKey::PUBLIC, id.as_bytes()),
            producer: 1,
            epoch: 0,
            seq,
            amount,
        }
    }

    #[test]
    fn a_full_log_is_a_typed_error() {
        let mut log = VecLog::<2>::new();
        assert_eq!(log.append(msg("a", 1, 1)), Ok(0));
        assert_eq!(log.append(msg("b", 2, 1)), Ok(1));
        assert_eq!(
            log.append(msg("c", 3, 1)),
            Err(LogError::Full { capacity: 2 })
        );
        assert_eq!(log.len(), 2);
    }

    #[test]
    fn true_total_counts_each_message_id_once() {
        let mut log = VecLog::<8>::new();
        for m in [msg("p17", 1, 5), msg("p17", 1, 5), msg("p18", 2, 3)] {
            log.append(m).unwrap();
        }
        assert_eq!(log.true_total(), 8);
        assert_eq!(
            [log.canonical(0), log.canonical(1), log.canonical(2)],
            [0, 0, 2]
        );
        assert_eq!(log.get(1).unwrap().offset, 1);
        assert_eq!(log.get(3), None);
    }

    #[test]
    fn generated_log_needs_no_storage() {
        let log = GeneratedLog {
            events: 1_000_000,
            amount: 1,
        };
        assert_eq!(log.true_total(), 1_000_000);
        assert_eq!(log.get(999_999).unwrap().payload.id, MessageId(999_999));
        assert_eq!(log.get(1_000_000), None);
        assert!(core::mem::size_of::<GeneratedLog>() <= 16);
    }
}
