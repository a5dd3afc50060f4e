//! MQTT 3.1.1 packets in and out of a byte buffer, through mqttrs's `decode_slice` and
//! `encode_slice`; MQTT 5's, by hand, in [`v5`].
//!
//! mqttrs indexes its input without bounds checks in places (a packet identifier after
//! a topic that used up the packet, a CONNACK shorter than two bytes) and reads a packet
//! from a buffer that holds more than one. So [`next`] frames each packet first: it reads
//! the fixed header and the remaining length itself, checks each fixed length and each
//! PUBLISH's topic length against the packet's own bytes, and only then hands mqttrs a
//! slice that ends where the packet ends. A client receives only some packet types; any
//! other is [`DecodeError::Unexpected`]. The packet types here are idem's own, so that
//! mqttrs stays a detail of this module.

use mqttrs::{Packet, Pid, QosPid};

mod framer;
pub mod v5;

pub use framer::{FrameError, Framer};

/// The protocol a session speaks: MQTT 3.1.1 (protocol level 4) or MQTT 5.0 (level 5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Protocol {
    /// MQTT 3.1.1, OASIS Standard 29 October 2014.
    #[default]
    V311,
    /// MQTT 5.0, OASIS Standard 7 March 2019.
    V5,
}

impl Protocol {
    /// As the protocol is named: `3.1.1` or `5`.
    pub const fn name(self) -> &'static str {
        match self {
            Self::V311 => "3.1.1",
            Self::V5 => "5",
        }
    }
}

/// What an MQTT 5 CONNACK tells the client of the server's limits (§3.2.2.3); all
/// `None` at MQTT 3.1.1, and for a property the CONNACK leaves out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ConnackProperties {
    /// The QoS 1 and 2 PUBLISHes the server takes unacknowledged from this client
    /// (§3.2.2.3.3); absent means 65,535.
    pub receive_maximum: Option<u16>,
    /// The largest packet the server takes (§3.2.2.3.6); absent means no limit beyond
    /// the protocol's.
    pub maximum_packet_size: Option<u32>,
    /// The Session Expiry Interval the server uses instead of the client's
    /// (§3.2.2.3.2).
    pub session_expiry: Option<u32>,
    /// The highest QoS the server supports (§3.2.2.3.4); absent means 2.
    pub maximum_qos: Option<u8>,
}

/// A PUBLISH's quality of service (MQTT 3.1.1 §4.3).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum QoS {
    /// At most once: no acknowledgement.
    AtMostOnce,
    /// At least once: PUBACK.
    AtLeastOnce,
    /// Exactly once: PUBREC, PUBREL, PUBCOMP.
    ExactlyOnce,
}

impl QoS {
    /// The level as the protocol numbers it, 0 to 2.
    pub const fn level(self) -> u8 {
        match self {
            Self::AtMostOnce => 0,
            Self::AtLeastOnce => 1,
            Self::ExactlyOnce => 2,
        }
    }

    /// The level numbered `n`, if it is one.
    pub const fn from_level(n: u8) -> Option<Self> {
        match n {
            0 => Some(Self::AtMostOnce),
            1 => Some(Self::AtLeastOnce),
            2 => Some(Self::ExactlyOnce),
            _ => None,
        }
    }

    fn mqttrs(self) -> mqttrs::QoS {
        match self {
            Self::AtMostOnce => mqttrs::QoS::AtMostOnce,
            Self::AtLeastOnce => mqttrs::QoS::AtLeastOnce,
            Self::ExactlyOnce => mqttrs::QoS::ExactlyOnce,
        }
    }
}

/// A PUBLISH as received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Publish<'a> {
    /// The DUP flag: the sender may have sent it before. Never a dedup key: a receiver
    /// must not rely on it (MQTT 3.1.1 §3.3.1.1).
    pub dup: bool,
    /// Its quality of service.
    pub qos: QoS,
    /// Its packet identifier (1 to 65,535), for QoS 1 and 2.
    pub pid: Option<u16>,
    /// The RETAIN flag: to a subscriber, a retained message sent because it subscribed,
    /// not a new one (§3.3.1.3).
    pub retain: bool,
    /// Its topic.
    pub topic: &'a str,
    /// Its application message.
    pub payload: &'a [u8],
}

/// A packet a client receives from its broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Incoming<'a> {
    /// CONNACK: whether the broker holds a session for the client id, and its return
    /// code (0 accepted, 1 to 5 refused, §3.2.2.3; at MQTT 5 a reason code, 0x80 and
    /// above refused, MQTT 5 §3.2.2.2).
    Connack {
        /// Session present (§3.2.2.2).
        session_present: bool,
        /// The return code.
        code: u8,
        /// At MQTT 5, the server's limits.
        properties: ConnackProperties,
    },
    /// PUBLISH.
    Publish(Publish<'a>),
    /// PUBACK, for a QoS 1 PUBLISH the client sent.
    Puback(u16),
    /// PUBREC, for a QoS 2 PUBLISH the client sent.
    Pubrec(u16),
    /// PUBREL: the broker releases a QoS 2 identifier the client received.
    Pubrel(u16),
    /// PUBCOMP, the end of a QoS 2 PUBLISH the client sent.
    Pubcomp(u16),
    /// SUBACK: the identifier of the SUBSCRIBE and what the broker answered for its
    /// first topic filter.
    Suback {
        /// The SUBSCRIBE's packet identifier.
        pid: u16,
        /// The QoS granted, or `None` for a refusal (a code of 0x80 or more).
        granted: Option<QoS>,
        /// The return code as sent: 0 to 2 the QoS granted, 0x80 Failure at MQTT 3.1.1
        /// (§3.9.3); at MQTT 5 a reason code, 0x80 and above a refusal
        /// (MQTT 5 §3.9.3, [`v5::reason_name`]).
        reason: u8,
    },
    /// UNSUBACK.
    Unsuback(u16),
    /// PINGRESP.
    Pingresp,
    /// DISCONNECT from the server, with its reason code (MQTT 5 only, §3.14).
    Disconnect(u8),
    /// PUBACK, PUBREC or PUBCOMP with a reason code of 0x80 or more (MQTT 5 only,
    /// §3.4.2.1, §3.5.2.1, §3.7.2.1): the server did not take the PUBLISH.
    AckRefused {
        /// The packet type: 4 PUBACK, 5 PUBREC, 7 PUBCOMP.
        kind: u8,
        /// The PUBLISH's packet identifier.
        pid: u16,
        /// The reason code.
        reason: u8,
    },
}

/// SUBACK's return code for a refused subscription at MQTT 3.1.1 (§3.9.3).
pub const SUBACK_FAILURE: u8 = 0x80;

/// MQTT 3.1.1's CONNACK return code in words, as §3.2.2.3 (Table 3.1) names it: 0
/// accepted, 1 to 5 refused.
pub fn connack_name(code: u8) -> &'static str {
    match code {
        0 => "Connection Accepted",
        1 => "Connection Refused, unacceptable protocol version",
        2 => "Connection Refused, identifier rejected",
        3 => "Connection Refused, Server unavailable",
        4 => "Connection Refused, bad user name or password",
        5 => "Connection Refused, not authorized",
        _ => "a return code MQTT 3.1.1 does not define",
    }
}

/// CONNACK's return or reason code in words at `protocol`: MQTT 3.1.1's names
/// ([`connack_name`]), MQTT 5's ([`v5::reason_name`], §3.2.2.2). A CONNACK of 1 to 5
/// to an MQTT 5 CONNECT is an MQTT 3.1.1 server's (below 0x80, MQTT 5 has only 0x00
/// Success), named as MQTT 3.1.1 names it: 1 says the server does not take level 5.
pub fn connack_name_at(code: u8, protocol: Protocol) -> &'static str {
    match (protocol, code) {
        (Protocol::V311, _) | (Protocol::V5, 1..=5) => connack_name(code),
        (Protocol::V5, _) => v5::reason_name(code),
    }
}

/// SUBACK's return code in words at `protocol`: at MQTT 3.1.1 the QoS granted or
/// Failure (§3.9.3), at MQTT 5 its reason code's name.
pub fn suback_name_at(code: u8, protocol: Protocol) -> &'static str {
    match (protocol, code) {
        (Protocol::V311, 0) => "Success - Maximum QoS 0",
        (Protocol::V311, 1) => "Success - Maximum QoS 1",
        (Protocol::V311, 2) => "Success - Maximum QoS 2",
        (Protocol::V311, SUBACK_FAILURE) => "Failure",
        (Protocol::V311, _) => "a return code MQTT 3.1.1 does not define",
        (Protocol::V5, 0) => "Granted QoS 0",
        (Protocol::V5, _) => v5::reason_name(code),
    }
}

/// What [`next`] found at the start of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame<'a> {
    /// A whole packet, `len` bytes long.
    Packet {
        /// The packet.
        packet: Incoming<'a>,
        /// Its length in bytes, header included.
        len: usize,
    },
    /// A PUBLISH longer than the caller's maximum packet size: its QoS and identifier,
    /// read from its first bytes, so that it can be acknowledged and rejected; the
    /// caller discards `len` bytes, more than its buffer holds.
    Oversized {
        /// Its QoS.
        qos: QoS,
        /// Its packet identifier, for QoS 1 and 2.
        pid: Option<u16>,
        /// Its length in bytes, header included.
        len: usize,
    },
}

/// Why bytes from the broker are not a packet a client can take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum DecodeError {
    /// The remaining length runs over four bytes (§2.2.3).
    Length,
    /// A packet type a server never sends to a client (CONNECT, SUBSCRIBE, UNSUBSCRIBE,
    /// PINGREQ, DISCONNECT) or the reserved types 0 and 15.
    Unexpected(u8),
    /// The fixed header's flags or the packet's body are malformed for its type.
    Malformed(u8),
    /// A packet other than a PUBLISH longer than the maximum packet size.
    Oversized(usize),
    /// At MQTT 5, a packet longer than the Maximum Packet Size the client announced: a
    /// protocol error, answered with DISCONNECT 0x95 (MQTT 5 §3.1.2.11.4).
    PastMaximum(usize),
}

impl core::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            Self::Length => write!(f, "a remaining length longer than four bytes"),
            Self::Unexpected(t) => {
                write!(f, "a packet of type {t}, which no broker sends a client")
            }
            Self::Malformed(t) => write!(f, "a malformed packet of type {t}"),
            Self::Oversized(n) => write!(f, "a {n}-byte packet over the maximum size"),
            Self::PastMaximum(n) => write!(
                f,
                "a {n}-byte packet past the Maximum Packet Size announced, a protocol error (MQTT 5 §3.1.2.11.4)"
            ),
        }
    }
}

/// The remaining length at `buf[1..]`: `(value, bytes it took)`, or `None` if `buf` ends
/// inside it.
fn remaining_length(buf: &[u8]) -> Result<Option<(usize, usize)>, DecodeError> {
    let mut value = 0usize;
    for i in 0..4 {
        let Some(&byte) = buf.get(1 + i) else {
            return Ok(None);
        };
        value |= usize::from(byte & 0x7F) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok(Some((value, i + 1)));
        }
    }
    Err(DecodeError::Length)
}

/// The PUBLISH's QoS and identifier from its first bytes (`body` starts after the fixed
/// header), `Ok(None)` while they have not all arrived.
fn publish_head(
    flags: u8,
    body: &[u8],
    len: usize,
) -> Result<Option<(QoS, Option<u16>)>, DecodeError> {
    let malformed = DecodeError::Malformed(3);
    let qos = QoS::from_level((flags >> 1) & 3).ok_or(malformed)?;
    let Some(topic) = body.get(..2) else {
        return Ok(None);
    };
    let topic = usize::from(u16::from_be_bytes([topic[0], topic[1]]));
    let head = 2 + topic + if qos == QoS::AtMostOnce { 0 } else { 2 };
    if head > len {
        return Err(malformed);
    }
    if qos == QoS::AtMostOnce {
        return Ok(Some((qos, None)));
    }
    let Some(pid) = body.get(2 + topic..head) else {
        return Ok(None);
    };
    match u16::from_be_bytes([pid[0], pid[1]]) {
        0 => Err(malformed),
        pid => Ok(Some((qos, Some(pid)))),
    }
}

/// A packet of `len` bytes (kind `kind`, `body` after its fixed header) against the
/// caller's largest, `max`: a PUBLISH past it is [`Frame::Oversized`], named by its QoS
/// and identifier so that it can be answered, as soon as they have arrived; any other
/// packet past it is an error. `Ok(Some(None))`: it fits; `Ok(None)`: the PUBLISH's head
/// has not all arrived.
fn past_max(
    kind: u8,
    flags: u8,
    body: &[u8],
    body_len: usize,
    len: usize,
    max: usize,
) -> Result<Option<Option<Frame<'static>>>, DecodeError> {
    if kind == 3 {
        let Some((qos, pid)) = publish_head(flags, body, body_len)? else {
            return Ok(None);
        };
        if len > max {
            return Ok(Some(Some(Frame::Oversized { qos, pid, len })));
        }
    } else if len > max {
        return Err(DecodeError::Oversized(len));
    }
    Ok(Some(None))
}

/// The first packet in `buf`, or `Ok(None)` until it has all arrived. `max` is the
/// largest packet the caller takes, header included; a PUBLISH over it is
/// [`Frame::Oversized`] as soon as its identifier has arrived.
pub fn next(buf: &[u8], max: usize) -> Result<Option<Frame<'_>>, DecodeError> {
    let Some(&first) = buf.first() else {
        return Ok(None);
    };
    let (kind, flags) = (first >> 4, first & 0x0F);
    // The body lengths a client's packets must have, and the flags each must carry
    // (§2.2.2): PUBREL's are 0b0010, PUBLISH's are its own, the rest 0.
    let (fixed, want_flags): (Option<usize>, Option<u8>) = match kind {
        2 | 4 | 5 | 7 | 11 => (Some(2), Some(0)),
        6 => (Some(2), Some(0b0010)),
        13 => (Some(0), Some(0)),
        9 => (None, Some(0)),
        3 => (None, None),
        other => return Err(DecodeError::Unexpected(other)),
    };
    if want_flags.is_some_and(|f| f != flags) {
        return Err(DecodeError::Malformed(kind));
    }
    let Some((body_len, len_bytes)) = remaining_length(buf)? else {
        return Ok(None);
    };
    let header = 1 + len_bytes;
    let len = header + body_len;
    if fixed.is_some_and(|n| n != body_len) || (kind == 9 && body_len < 3) {
        return Err(DecodeError::Malformed(kind));
    }
    let body = &buf[header..];
    match past_max(kind, flags, body, body_len, len, max)? {
        None => return Ok(None),
        Some(Some(oversized)) => return Ok(Some(oversized)),
        Some(None) => {}
    }
    let Some(packet) = buf.get(..len) else {
        return Ok(None);
    };
    let malformed = DecodeError::Malformed(kind);
    let packet = match mqttrs::decode_slice(packet) {
        Ok(Some(p)) => convert(p).ok_or(malformed)?,
        _ => return Err(malformed),
    };
    Ok(Some(Frame::Packet { packet, len }))
}

fn convert(p: Packet<'_>) -> Option<Incoming<'_>> {
    Some(match p {
        Packet::Connack(c) => Incoming::Connack {
            properties: ConnackProperties::default(),
            session_present: c.session_present,
            code: match c.code {
                mqttrs::ConnectReturnCode::Accepted => 0,
                mqttrs::ConnectReturnCode::RefusedProtocolVersion => 1,
                mqttrs::ConnectReturnCode::RefusedIdentifierRejected => 2,
                mqttrs::ConnectReturnCode::ServerUnavailable => 3,
                mqttrs::ConnectReturnCode::BadUsernamePassword => 4,
                mqttrs::ConnectReturnCode::NotAuthorized => 5,
            },
        },
        Packet::Publish(p) => {
            let (qos, pid) = match p.qospid {
                QosPid::AtMostOnce => (QoS::AtMostOnce, None),
                QosPid::AtLeastOnce(pid) => (QoS::AtLeastOnce, Some(pid.get())),
                QosPid::ExactlyOnce(pid) => (QoS::ExactlyOnce, Some(pid.get())),
            };
            Incoming::Publish(Publish {
                dup: p.dup,
                qos,
                pid,
                retain: p.retain,
                topic: p.topic_name,
                payload: p.payload,
            })
        }
        Packet::Puback(pid) => Incoming::Puback(pid.get()),
        Packet::Pubrec(pid) => Incoming::Pubrec(pid.get()),
        Packet::Pubrel(pid) => Incoming::Pubrel(pid.get()),
        Packet::Pubcomp(pid) => Incoming::Pubcomp(pid.get()),
        Packet::Suback(s) => {
            let granted = match s.return_codes.first()? {
                mqttrs::SubscribeReturnCodes::Success(q) => Some(match q {
                    mqttrs::QoS::AtMostOnce => QoS::AtMostOnce,
                    mqttrs::QoS::AtLeastOnce => QoS::AtLeastOnce,
                    mqttrs::QoS::ExactlyOnce => QoS::ExactlyOnce,
                }),
                mqttrs::SubscribeReturnCodes::Failure => None,
            };
            Incoming::Suback {
                pid: s.pid.get(),
                granted,
                reason: granted.map_or(SUBACK_FAILURE, QoS::level),
            }
        }
        Packet::Unsuback(pid) => Incoming::Unsuback(pid.get()),
        Packet::Pingresp => Incoming::Pingresp,
        _ => return None,
    })
}

/// A packet a client sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outgoing<'a> {
    /// CONNECT with MQTT 3.1.1, no will, no user name.
    Connect {
        /// The client identifier.
        client_id: &'a str,
        /// Seconds (§3.1.2.10).
        keep_alive: u16,
        /// Clean session (§3.1.2.4): 0 keeps the session across connections.
        clean_session: bool,
    },
    /// SUBSCRIBE to one topic filter.
    Subscribe {
        /// Its packet identifier.
        pid: u16,
        /// The topic filter.
        filter: &'a str,
        /// The QoS asked for.
        qos: QoS,
    },
    /// PUBLISH, as the host's publisher sends one.
    Publish(Publish<'a>),
    /// PUBACK.
    Puback(u16),
    /// PUBREC.
    Pubrec(u16),
    /// PUBREL.
    Pubrel(u16),
    /// PUBCOMP.
    Pubcomp(u16),
    /// PINGREQ.
    Pingreq,
    /// DISCONNECT.
    Disconnect,
    /// CONNECT with MQTT 5 (encoded by [`v5::encode`] only).
    Connect5 {
        /// The client identifier.
        client_id: &'a str,
        /// Seconds (MQTT 5 §3.1.2.10).
        keep_alive: u16,
        /// Clean Start (§3.1.2.4): 0 resumes the session the server holds.
        clean_start: bool,
        /// The Session Expiry Interval in seconds (§3.1.2.11.2), left out when 0: the
        /// session then ends when the connection closes.
        session_expiry: u32,
        /// Receive Maximum (§3.1.2.11.3): QoS 1 and 2 PUBLISHes the client takes
        /// unacknowledged, 1 or more.
        receive_maximum: u16,
        /// Maximum Packet Size (§3.1.2.11.4), 1 or more.
        maximum_packet_size: u32,
    },
    /// PUBCOMP with a reason code (MQTT 5 only; 0x92: the identifier is not held).
    PubcompReason(u16, u8),
    /// DISCONNECT with a reason code (MQTT 5 only, §3.14.2.1).
    DisconnectReason(u8),
}

/// Why a packet could not be encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum EncodeError {
    /// The buffer is shorter than the packet (`needed` bytes).
    Buffer {
        /// The packet's length.
        needed: usize,
    },
    /// A packet identifier of 0, a topic filter over 256 bytes, or a string over 65,535.
    Invalid,
}

/// The bytes a remaining length of `n` takes.
const fn length_bytes(n: usize) -> usize {
    match n {
        0..128 => 1,
        128..16_384 => 2,
        16_384..2_097_152 => 3,
        _ => 4,
    }
}

/// The encoded length of `p` at MQTT 3.1.1, header included (0 for a packet only MQTT 5
/// sends).
pub fn encoded_len(p: &Outgoing<'_>) -> usize {
    let body = match p {
        Outgoing::Connect { client_id, .. } => 10 + 2 + client_id.len(),
        Outgoing::Subscribe { filter, .. } => 2 + 2 + filter.len() + 1,
        Outgoing::Publish(p) => {
            2 + p.topic.len() + if p.qos == QoS::AtMostOnce { 0 } else { 2 } + p.payload.len()
        }
        Outgoing::Puback(_) | Outgoing::Pubrec(_) | Outgoing::Pubrel(_) | Outgoing::Pubcomp(_) => 2,
        Outgoing::Pingreq | Outgoing::Disconnect => 0,
        Outgoing::Connect5 { .. } | Outgoing::PubcompReason(..) | Outgoing::DisconnectReason(_) => {
            return 0;
        }
    };
    1 + length_bytes(body) + body
}

/// Encodes `p` at MQTT 3.1.1 at the start of `buf`; its length.
pub fn encode(p: &Outgoing<'_>, buf: &mut [u8]) -> Result<usize, EncodeError> {
    let needed = encoded_len(p);
    if buf.len() < needed {
        return Err(EncodeError::Buffer { needed });
    }
    let pid = |n: u16| Pid::try_from(n).map_err(|_| EncodeError::Invalid);
    let packet: Packet<'_> = match *p {
        Outgoing::Connect {
            client_id,
            keep_alive,
            clean_session,
        } => Packet::Connect(mqttrs::Connect {
            protocol: mqttrs::Protocol::MQTT311,
            keep_alive,
            client_id,
            clean_session,
            last_will: None,
            username: None,
            password: None,
        }),
        Outgoing::Subscribe {
            pid: n,
            filter,
            qos,
        } => {
            // mqttrs keeps a filter in a `heapless::String<256>`, whose `From<&str>`
            // panics on a longer one.
            if filter.len() > 256 {
                return Err(EncodeError::Invalid);
            }
            let mut topics = heapless07::Vec::new();
            let topic_path = heapless07::String::from(filter);
            topics
                .push(mqttrs::SubscribeTopic {
                    topic_path,
                    qos: qos.mqttrs(),
                })
                .map_err(|_| EncodeError::Invalid)?;
            Packet::Subscribe(mqttrs::Subscribe {
                pid: pid(n)?,
                topics,
            })
        }
        Outgoing::Publish(ref p) => Packet::Publish(mqttrs::Publish {
            dup: p.dup,
            qospid: match (p.qos, p.pid) {
                (QoS::AtMostOnce, _) => QosPid::AtMostOnce,
                (QoS::AtLeastOnce, Some(n)) => QosPid::AtLeastOnce(pid(n)?),
                (QoS::ExactlyOnce, Some(n)) => QosPid::ExactlyOnce(pid(n)?),
                (_, None) => return Err(EncodeError::Invalid),
            },
            retain: p.retain,
            topic_name: p.topic,
            payload: p.payload,
        }),
        Outgoing::Puback(n) => Packet::Puback(pid(n)?),
        Outgoing::Pubrec(n) => Packet::Pubrec(pid(n)?),
        Outgoing::Pubrel(n) => Packet::Pubrel(pid(n)?),
        Outgoing::Pubcomp(n) => Packet::Pubcomp(pid(n)?),
        Outgoing::Pingreq => Packet::Pingreq,
        Outgoing::Disconnect => Packet::Disconnect,
        Outgoing::Connect5 { .. } | Outgoing::PubcompReason(..) | Outgoing::DisconnectReason(_) => {
            return Err(EncodeError::Invalid);
        }
    };
    match mqttrs::encode_slice(&packet, buf) {
        Ok(n) if n == needed => Ok(n),
        _ => Err(EncodeError::Invalid),
    }
}

/// Whether `topic` matches the topic filter `filter` (MQTT 3.1.1 §4.7): `+` matches one
/// level, a trailing `#` the parent level and every level below it. A topic that begins
/// with `$` matches no filter that begins with a wildcard (§4.7.2).
pub fn matches(filter: &str, topic: &str) -> bool {
    if topic.starts_with('$') && (filter.starts_with('+') || filter.starts_with('#')) {
        return false;
    }
    let mut f = filter.split('/');
    let mut t = topic.split('/');
    loop {
        match (f.next(), t.next()) {
            (Some("#"), _) => return f.next().is_none(),
            (Some("+"), Some(_)) => {}
            (Some(a), Some(b)) if a == b => {}
            (None, None) => return true,
            _ => return false,
        }
    }
}

/// The encoded length of `p` at `protocol`, header included.
pub fn encoded_len_at(p: &Outgoing<'_>, protocol: Protocol) -> usize {
    match protocol {
        Protocol::V311 => encoded_len(p),
        Protocol::V5 => v5::encoded_len(p),
    }
}

/// Encodes `p` at `protocol` at the start of `buf`; its length.
pub fn encode_at(
    p: &Outgoing<'_>,
    protocol: Protocol,
    buf: &mut [u8],
) -> Result<usize, EncodeError> {
    match protocol {
        Protocol::V311 => encode(p, buf),
        Protocol::V5 => v5::encode(p, buf),
    }
}
