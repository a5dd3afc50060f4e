//! A connection's bytes from the broker, cut into packets: the buffer that holds a
//! packet until it has all arrived, [`super::next`] or [`super::v5::next`] by the
//! protocol spoken, and the bytes of a PUBLISH too long for the buffer skipped as they
//! arrive (it is acknowledged and rejected from its first bytes, [`Frame::Oversized`]).
//!
//! The buffer is the caller's (`B`): an array on a board, a boxed slice on a host, as
//! [`crate::client::Client::with_waiting`]'s slots are. It does not read the socket and
//! does not decide anything: [`crate::client::Client::feed`] hands what it frames to the
//! client; a reader that only looks (a host carrying a board's bytes) calls
//! [`Framer::next`] itself.

use super::{DecodeError, Frame, Protocol, next, v5};

/// Why the bytes at the head of the buffer cannot be framed. The connection is closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum FrameError {
    /// Bytes that are no packet a client takes ([`DecodeError`]).
    Decode(DecodeError),
    /// A PUBLISH whose topic runs past the buffer's `capacity` bytes, so that its
    /// packet identifier never arrives and it cannot even be acknowledged (a filter
    /// with `+` or `#` matches topics longer than itself).
    TooLong {
        /// The buffer's bytes.
        capacity: usize,
    },
}

impl From<DecodeError> for FrameError {
    fn from(e: DecodeError) -> Self {
        Self::Decode(e)
    }
}

impl core::fmt::Display for FrameError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Decode(e) => e.fmt(f),
            Self::TooLong { capacity } => write!(
                f,
                "a PUBLISH whose topic runs past the {capacity}-byte packet buffer"
            ),
        }
    }
}

/// Packets out of a connection's bytes, in a buffer of the caller's.
pub struct Framer<B> {
    buf: B,
    len: usize,
    /// Bytes of an oversized PUBLISH still to skip as they arrive.
    skip: usize,
    protocol: Protocol,
    max: usize,
    limit: usize,
}

impl<B: AsRef<[u8]> + AsMut<[u8]>> Framer<B> {
    /// A framer over `buf` (its length is the room) at `protocol`. `max` is the largest
    /// packet taken whole, header included; a PUBLISH is taken whole up to the largest
    /// that its own topic calls for ([`crate::max_packet_at`]) when that is more, and
    /// never past the buffer. At MQTT 5, `limit` is the Maximum Packet Size the client
    /// announced: a longer packet is a protocol error ([`DecodeError::PastMaximum`]).
    pub fn new(buf: B, protocol: Protocol, max: usize, limit: usize) -> Self {
        Self {
            buf,
            len: 0,
            skip: 0,
            protocol,
            max,
            limit,
        }
    }

    /// Speaks `protocol` from now on, `limit` its Maximum Packet Size at MQTT 5.
    pub fn speak(&mut self, protocol: Protocol, limit: usize) {
        self.protocol = protocol;
        self.limit = limit;
    }

    /// The protocol spoken.
    pub fn protocol(&self) -> Protocol {
        self.protocol
    }

    /// A new connection: what the old one left is dropped.
    pub fn clear(&mut self) {
        self.len = 0;
        self.skip = 0;
    }

    /// The buffer's bytes.
    pub fn capacity(&self) -> usize {
        self.buf.as_ref().len()
    }

    /// Bytes [`Framer::push`] takes now (past those it skips).
    pub fn room(&self) -> usize {
        self.capacity() - self.len
    }

    /// The bytes held, not yet a whole packet taken.
    pub fn held(&self) -> &[u8] {
        &self.buf.as_ref()[..self.len]
    }

    /// Takes bytes received, in order: those of an oversized PUBLISH are skipped, then
    /// as many as there is room for. Returns how many of `bytes` it took (skipped or
    /// held); the caller gives the rest again once packets have made room.
    pub fn push(&mut self, bytes: &[u8]) -> usize {
        let skipped = self.skip.min(bytes.len());
        self.skip -= skipped;
        let rest = &bytes[skipped..];
        let take = rest.len().min(self.room());
        self.buf.as_mut()[self.len..self.len + take].copy_from_slice(&rest[..take]);
        self.len += take;
        skipped + take
    }

    /// Hands the first whole packet held to `f`, then drops its bytes; `Ok(None)` until
    /// one has all arrived. An oversized PUBLISH is handed over as soon as its packet
    /// identifier has arrived, and its bytes still to come are skipped by
    /// [`Framer::push`].
    pub fn next<R>(&mut self, f: impl FnOnce(Frame<'_>) -> R) -> Result<Option<R>, FrameError> {
        let held = &self.buf.as_ref()[..self.len];
        let max = largest(held, self.max, self.protocol).min(self.capacity());
        let frame = match self.protocol {
            Protocol::V311 => next(held, max),
            Protocol::V5 => v5::next(held, max, self.limit),
        }?;
        let Some(frame) = frame else {
            if self.len == self.capacity() {
                return Err(FrameError::TooLong {
                    capacity: self.capacity(),
                });
            }
            return Ok(None);
        };
        let len = match frame {
            Frame::Packet { len, .. } | Frame::Oversized { len, .. } => len,
        };
        let r = f(frame);
        let dropped = len.min(self.len);
        self.buf.as_mut().copy_within(dropped..self.len, 0);
        self.len -= dropped;
        self.skip = len - dropped;
        Ok(Some(r))
    }
}

/// The largest packet taken whole at the head of `held`: `max`, or for a PUBLISH the
/// largest its topic calls for when that is more: a filter with `#` or `+` matches
/// topics longer than itself (MQTT 3.1.1 §4.7.1), and a payload the receiver takes
/// must not be refused for its topic's length. Until the topic's length has arrived,
/// `max`: `next` decides nothing of a PUBLISH's size before it has (and names a
/// malformed head at once).
fn largest(held: &[u8], max: usize, protocol: Protocol) -> usize {
    if held.first().is_none_or(|b| b >> 4 != 3) {
        return max;
    }
    let Ok(Some((_, bytes))) = super::remaining_length(held) else {
        return max;
    };
    match (held.get(1 + bytes), held.get(2 + bytes)) {
        (Some(&hi), Some(&lo)) => {
            let topic = usize::from(u16::from_be_bytes([hi, lo]));
            crate::max_packet_at(topic, protocol).max(max)
        }
        _ => max,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{Incoming, QoS};

    /// A QoS 2 PUBLISH to `t` under identifier `pid` with `payload`.
    fn publish(pid: u8, payload: &[u8]) -> std::vec::Vec<u8> {
        let mut p = std::vec![0x34, (1 + 2 + 2 + payload.len()) as u8, 0, 1, b't', 0, pid];
        p.extend_from_slice(payload);
        p
    }

    #[test]
    fn packets_split_and_joined_across_pushes_come_out_whole_and_in_order() {
        let mut f = Framer::new([0u8; 64], Protocol::V311, 64, usize::MAX);
        let mut bytes = publish(1, b"ab");
        bytes.extend_from_slice(&[0x62, 2, 0, 1]); // PUBREL 1
        assert_eq!(f.push(&bytes[..5]), 5);
        assert_eq!(f.next(|_| ()), Ok(None));
        assert_eq!(f.push(&bytes[5..]), 8);
        let pid = |fr: Frame<'_>| match fr {
            Frame::Packet {
                packet: Incoming::Publish(p),
                ..
            } => p.pid,
            Frame::Packet {
                packet: Incoming::Pubrel(pid),
                ..
            } => Some(pid),
            _ => None,
        };
        assert_eq!(f.next(pid), Ok(Some(Some(1))));
        assert_eq!(f.next(pid), Ok(Some(Some(1))));
        assert_eq!((f.next(pid), f.held().len()), (Ok(None), 0));
    }

    #[test]
    fn an_oversized_publish_is_named_from_its_head_and_its_tail_skipped() {
        let mut f = Framer::new([0u8; 16], Protocol::V311, 16, usize::MAX);
        let big = publish(7, &[b'x'; 40]);
        // Takes 16 bytes: enough for the PUBLISH's head.
        assert_eq!(f.push(&big), 16);
        let seen = f.next(|fr| match fr {
            Frame::Oversized { qos, pid, len } => Some((qos, pid, len)),
            _ => None,
        });
        assert_eq!(seen, Ok(Some(Some((QoS::ExactlyOnce, Some(7), 47)))));
        // The 31 bytes still to come are skipped, then a PINGRESP is whole.
        let mut rest = big[16..].to_vec();
        rest.extend_from_slice(&[0xD0, 0]);
        assert_eq!(f.push(&rest), 33);
        assert_eq!(f.held(), &[0xD0, 0]);
        let ping = f.next(|fr| {
            matches!(
                fr,
                Frame::Packet {
                    packet: Incoming::Pingresp,
                    len: 2
                }
            )
        });
        assert_eq!(ping, Ok(Some(true)));
    }

    #[test]
    fn a_topic_past_the_buffer_is_too_long_and_a_full_buffer_takes_nothing_more() {
        let mut f = Framer::new([0u8; 8], Protocol::V311, 8, usize::MAX);
        // A PUBLISH whose 100-byte topic never fits 8 bytes.
        let head = [0x34, 110, 0, 100, b'a', b'a', b'a', b'a', b'a'];
        assert_eq!(f.push(&head), 8);
        assert_eq!(f.room(), 0);
        assert_eq!(f.next(|_| ()), Err(FrameError::TooLong { capacity: 8 }));
        // Bytes that are no packet a client takes (CONNECT, type 1).
        f.clear();
        f.push(&[0x10, 0]);
        assert_eq!(
            f.next(|_| ()),
            Err(FrameError::Decode(DecodeError::Unexpected(1)))
        );
    }

    #[test]
    fn a_publish_is_taken_whole_up_to_what_its_own_topic_calls_for() {
        // `max` 20 (a short filter's): a 10-byte payload on a 40-byte topic is whole,
        // since its topic calls for more; at MQTT 5 past `limit`, a protocol error.
        let mut topic = std::vec![0x30, 52, 0, 40];
        topic.extend_from_slice(&[b'a'; 40]);
        topic.extend_from_slice(&[b'p'; 10]);
        let mut f = Framer::new(std::vec![0u8; 512], Protocol::V311, 20, usize::MAX);
        f.push(&topic);
        let whole = f.next(|fr| matches!(fr, Frame::Packet { len: 54, .. }));
        assert_eq!(whole, Ok(Some(true)));
        let mut f = Framer::new(std::vec![0u8; 512], Protocol::V5, 20, 50);
        f.push(&[0x30, 52, 0, 40]);
        assert_eq!(
            f.next(|_| ()),
            Err(FrameError::Decode(DecodeError::PastMaximum(54)))
        );
    }
}
