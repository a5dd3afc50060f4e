//! What a consumer reads: events of the application's own type at consecutive offsets.
//!
//! An [`Event<P>`] is a payload `P` (a setpoint command, a meter reading, a payment) at
//! the offset where it sits. A [`Log<P>`] is read access to such events and nothing else:
//! how many there are and the one at an offset (and whether the consumer passes over
//! one). [`Received`] is a bounded window over a live stream, in a buffer the caller
//! owns. A payload that carries the application's message id is [`Identified`], which
//! the message-id rule ([`crate::store::MessageIdWindow`]) dedups by.
//!
//! A log never removes a repeated payload: two sends of one command are two events.
//! Reading and applying is [`crate::consumer`].

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
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
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

/// A payload as read from a log, at its offset. It encodes (postcard, serde) as the
/// offset followed by the payload, so a receiver can carry events as they are.
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event<P> {
    /// Where it sits in the log.
    pub offset: Offset,
    /// What was sent: the application's own type.
    pub payload: P,
}

impl<P: MaxSize> MaxSize for Event<P> {
    const POSTCARD_MAX_SIZE: usize = Offset::POSTCARD_MAX_SIZE + P::POSTCARD_MAX_SIZE;
}

/// A payload that carries the application's message id: chosen before its first send and
/// the same on every send of it, so a rule that remembers ids recognises a resend
/// ([`crate::store::MessageIdWindow`]). An offset is not such an id: a resend lands at a
/// new one.
pub trait Identified {
    /// The message id.
    fn id(&self) -> MessageId;
}

/// Read access to a log of payloads `P`: what a consumer reads, and nothing else.
pub trait Log<P> {
    /// The offset after the log's last event, where the next append lands, once it is
    /// known; `None` on a live stream whose end has not been reached.
    fn end(&self) -> Option<Offset>;

    /// Whether the log is known to hold no event.
    fn is_empty(&self) -> bool {
        self.end() == Some(0)
    }

    /// The event at `offset`, if there is one.
    fn get(&self, offset: Offset) -> Option<Event<P>>;

    /// Whether the consumer passes over the event at `offset` without giving it to its
    /// sinks: under Kafka's `read_committed`, a record of an aborted transaction. The
    /// position still moves past it. Never, by default.
    fn passed_over(&self, offset: Offset) -> bool {
        let _ = offset;
        false
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
/// `E` is the caller's event type, converted on each read into an [`Event<P>`] (idem's
/// board feed keeps its frames' events and reads them through this); an `Event<P>` needs
/// no conversion. The offsets must run on by one from the first: the receiver checks that
/// before it builds the window.
#[derive(Debug, Clone, Copy)]
pub struct Received<'a, E> {
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

impl<P, E: Copy + Into<Event<P>>> Log<P> for Received<'_, E> {
    fn end(&self) -> Option<Offset> {
        self.end
    }

    fn get(&self, offset: Offset) -> Option<Event<P>> {
        let first: Event<P> = (*self.events.first()?).into();
        let i = usize::try_from(offset.checked_sub(first.offset)?).ok()?;
        self.events.get(i).map(|&e| e.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn a_window_reads_its_events_by_offset() {
        let events = [3u8, 4, 5].map(|p| Event {
            offset: 10 + u64::from(p),
            payload: p,
        });
        let window = Received::new(&events, None);
        assert_eq!(window.end(), None, "a stream without a known end");
        assert_eq!(window.get(14).map(|e| e.payload), Some(4));
        assert_eq!((window.get(12), window.get(16)), (None, None));
        assert_eq!(Received::new(&events, Some(16)).end(), Some(16));
    }
}
