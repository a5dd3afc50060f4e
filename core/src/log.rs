//! The append-only log: messages in the order they landed, addressed by offset.
//!
//! A [`Message`] is what a producer sends; once appended it sits at an offset and is
//! read back as an [`Event`]. [`VecLog`] keeps appended messages in a fixed-capacity
//! buffer (a full log is [`LogError::Full`]); [`GeneratedLog`] computes a uniform
//! workload on the fly, so a million events need no storage at all.
//!
//! The log never removes a repeated message: two sends of one payment are two events.
//! Producers are in `crate::producer` (feature `lab`); reading and applying is
//! [`crate::consumer`].

use postcard::experimental::max_size::MaxSize;
use serde::{Deserialize, Serialize};

/// A position in the log, counted from 0.
pub type Offset = u64;

/// The application's id of a message (a payment id such as `p17`): chosen before the
/// first send and the same on every send of that message.
///
/// An id that arrives as bytes (a Kafka record key, an `"id"` field) becomes a
/// `MessageId` through [`MessageId::keyed`], under the [`IdKey`] of the state that
/// remembers it.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, MaxSize,
)]
pub struct MessageId(pub u64);

/// The secret that keys [`MessageId::keyed`]: 16 bytes, drawn once for a device (from its
/// RNG, kept in its flash) or for a flash image (from the operating system, kept in its
/// header), and the same for as long as that state remembers ids.
///
/// A producer that does not know the key can choose two ids that share a `MessageId`
/// only by chance, as for random ids: about `n² / 2⁶⁵` for `n` distinct ids. With the
/// key known (or with [`IdKey::PUBLIC`]) a collision can be searched for.
#[derive(Clone, Copy, PartialEq, Eq, Serialize, Deserialize, MaxSize)]
pub struct IdKey(pub [u8; 16]);

impl IdKey {
    /// The key of ids that idem chooses itself (the built-in scenarios' `p17`, stream
    /// ids): public, so no defence against ids chosen to collide.
    pub const PUBLIC: Self = Self([0; 16]);
}

impl core::fmt::Debug for IdKey {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        // A secret is not printed.
        f.write_str(if *self == Self::PUBLIC {
            "IdKey(public)"
        } else {
            "IdKey(..)"
        })
    }
}

#[cfg(feature = "defmt")]
impl defmt::Format for IdKey {
    fn format(&self, f: defmt::Formatter<'_>) {
        // A secret is not logged.
        defmt::write!(f, "IdKey(..)");
    }
}

impl MessageId {
    /// The id of the bytes `id` (such as `b"p17"`) under `key`: SipHash-2-4, 64 bits.
    /// The same bytes and key give the same id on every run and machine, so a dedup
    /// window kept in flash stays valid.
    pub fn keyed(key: &IdKey, id: &[u8]) -> Self {
        use core::hash::Hasher;
        let mut h = siphasher::sip::SipHasher24::new_with_key(&key.0);
        h.write(id);
        Self(h.finish())
    }
}

/// What a producer sends: the payload and the ids that make duplicates recognisable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, MaxSize)]
pub struct Message {
    /// The application's message id.
    pub id: MessageId,
    /// The application's own numbering of its sends, carried in the payload: the
    /// sending instance. (Kafka's producer id, epoch and sequence are another thing: the
    /// producer library writes them in a record batch's header, only with idempotence or
    /// transactions on, for the broker; no application reads them; see
    /// `crate::producer`.)
    pub producer: u32,
    /// The application's epoch of that instance: a restarted instance takes a higher one.
    pub epoch: u16,
    /// The application's sequence number of the send, from 0; a retry after a lost ack
    /// sends the same message again, so it reuses it.
    pub seq: u32,
    /// The amount this message adds to the total.
    pub amount: i64,
}

/// A message as read from the log, at its offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    /// Where it sits in the log.
    pub offset: Offset,
    /// What was sent.
    pub message: Message,
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

/// Read access to a log.
pub trait Log {
    /// How many events the log holds; the next append lands at this offset.
    fn len(&self) -> u64;

    /// Whether the log is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The event at `offset`, if there is one.
    fn get(&self, offset: Offset) -> Option<Event>;

    /// The total a consumer should reach: each distinct message id counted once, with
    /// the amount of its first occurrence.
    fn true_total(&self) -> i64 {
        self.true_total_before(self.len())
    }

    /// Whether the consumer passes over the event at `offset` without giving it to its
    /// sinks: under `read_committed`, a record of an aborted transaction
    /// (`crate::txn`). The position still moves past it. Never, by default.
    fn passed_over(&self, offset: Offset) -> bool {
        let _ = offset;
        false
    }

    /// The true total of the first `end` events: each distinct message id among them
    /// counted once.
    fn true_total_before(&self, end: Offset) -> i64 {
        (0..end.min(self.len()))
            .filter(|&o| self.canonical(o) == o)
            .filter_map(|o| self.get(o))
            .map(|e| e.message.amount)
            // Saturates rather than wraps (a debug build would panic); a log whose
            // amounts could overflow is refused where it is read.
            .fold(0i64, i64::saturating_add)
    }

    /// Whether every message id in the log is distinct (each offset is its own
    /// message), so [`Log::canonical`] is the identity. `false` when not known.
    fn ids_distinct(&self) -> bool {
        false
    }

    /// The offset of the first occurrence of the message at `offset`: the offset the
    /// checker knows that message by. The default scans the offsets before it (no memory,
    /// quadratic over a whole log); a log whose ids are known to be distinct returns
    /// `offset`.
    fn canonical(&self, offset: Offset) -> Offset {
        let Some(id) = self.get(offset).map(|e| e.message.id) else {
            return offset;
        };
        (0..offset)
            .find(|&o| self.get(o).is_some_and(|e| e.message.id == id))
            .unwrap_or(offset)
    }
}

/// What a live stream has delivered so far and the consumer has not yet moved past: the
/// events, at consecutive offsets from the first, in a buffer the caller owns (a
/// `heapless::Vec` filled from the radio, the serial line or a broker session), and the
/// stream's end once it is known. The consumer steps through it like any [`Log`]; at the
/// last event received it reports [`crate::consumer::Step::Done`] (nothing left to read
/// now), and the caller refills the buffer from the consumer's next offset and steps
/// again. Without an end, batches close every K events only; with one, the last batch
/// closes at it.
///
/// `E` is the caller's event type, converted on each read (idem's board feed keeps its
/// frames' events and reads them through this). The offsets must run on by one from the
/// first: the receiver checks that before it builds the window.
#[derive(Debug, Clone, Copy)]
pub struct Received<'a, E = Event> {
    events: &'a [E],
    end: Option<Offset>,
}

impl<'a, E> Received<'a, E> {
    /// A window over `events`, received in offset order with no gap, and the stream's
    /// end (the offset after its last event) if known.
    pub const fn new(events: &'a [E], end: Option<Offset>) -> Self {
        Self { events, end }
    }
}

impl<E: Copy + Into<Event>> Log for Received<'_, E> {
    fn len(&self) -> u64 {
        self.end.unwrap_or(u64::MAX)
    }

    fn get(&self, offset: Offset) -> Option<Event> {
        let first: Event = (*self.events.first()?).into();
        let i = usize::try_from(offset.checked_sub(first.offset)?).ok()?;
        self.events.get(i).map(|&e| e.into())
    }

    fn ids_distinct(&self) -> bool {
        // Only the simulator's checker asks, and a live stream has none.
        true
    }
}

/// A log that messages can be appended to.
pub trait AppendLog: Log {
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

impl<const N: usize> Log for VecLog<N> {
    fn len(&self) -> u64 {
        self.messages.len() as u64
    }

    fn get(&self, offset: Offset) -> Option<Event> {
        let message = *self.messages.get(usize::try_from(offset).ok()?)?;
        Some(Event { offset, message })
    }
}

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

impl Log for GeneratedLog {
    fn len(&self) -> u64 {
        self.events
    }

    fn get(&self, offset: Offset) -> Option<Event> {
        (offset < self.events).then_some(Event {
            offset,
            message: Message {
                id: MessageId(offset),
                producer: 0,
                epoch: 0,
                seq: offset as u32,
                amount: self.amount,
            },
        })
    }

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

impl Log for GaugeLog {
    fn len(&self) -> u64 {
        self.events + u64::from(self.late.is_some_and(|l| l < self.events))
    }

    fn get(&self, offset: Offset) -> Option<Event> {
        let of = match self.late {
            Some(l) if offset == self.events && l < self.events => l,
            _ if offset < self.events => offset,
            _ => return None,
        };
        Some(Event {
            offset,
            message: Message {
                id: MessageId(of),
                producer: 0,
                epoch: 0,
                seq: of as u32,
                amount: i64::try_from(of + 1).unwrap_or(i64::MAX),
            },
        })
    }

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
        assert_eq!(log.get(999_999).unwrap().message.id, MessageId(999_999));
        assert_eq!(log.get(1_000_000), None);
        assert!(core::mem::size_of::<GeneratedLog>() <= 16);
    }

    #[test]
    fn message_ids_are_siphash_2_4_under_their_key() {
        // The reference vector of SipHash-2-4 (the paper's appendix A): key 00..0f, the
        // message 00..0e, 0xa129ca6149be45e5.
        let key = IdKey(core::array::from_fn(|i| i as u8));
        let msg: [u8; 15] = core::array::from_fn(|i| i as u8);
        assert_eq!(
            MessageId::keyed(&key, &msg),
            MessageId(0xa129_ca61_49be_45e5)
        );
        let p = |id: &[u8]| MessageId::keyed(&IdKey::PUBLIC, id);
        assert_ne!(p(b"p17"), p(b"p18"));
        assert_ne!(
            MessageId::keyed(&key, b"p17"),
            p(b"p17"),
            "another key, another id"
        );
        assert_eq!(format!("{key:?}"), "IdKey(..)", "the secret is not printed");
    }
}
