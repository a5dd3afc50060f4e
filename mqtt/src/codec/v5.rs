//! MQTT 5.0 packets in and out of a byte buffer, written by hand: only what a subscriber
//! that keeps its session durable, and idem's publisher, need of them.
//!
//! No maintained `no_std`, no-alloc MQTT 5 codec could be used (checked December 2026):
//! rust-mqtt 0.6.0 and minimq 0.13.5 speak MQTT 5 but keep their packet modules private
//! behind an async client with its own session state (`mod packet;`, `mod packets;` in
//! their lib.rs); mountain-mqtt 0.2.0's packets are public, but it reads a QoS 2
//! PUBLISH as QoS 1 (its `packets/publish.rs`); mqute-codec 0.4.2 needs `bytes` and
//! `tokio-util`; gmqtt 0.1.1 has had no release since 2021. mqttrs 0.4.1, which idem uses for MQTT 3.1.1, has no MQTT 5.
//!
//! What is here (MQTT 5.0 OASIS Standard, 7 March 2019, section by section):
//! - CONNECT with Clean Start, the Session Expiry Interval, Receive Maximum and Maximum
//!   Packet Size (§3.1.2.4, §3.1.2.11.2 to .4); CONNACK with its reason code and the
//!   properties a subscriber or publisher honours (§3.2.2.2, §3.2.2.3);
//! - PUBLISH with its property section, read and skipped; idem sends none (§3.3.2.3);
//! - PUBACK, PUBREC, PUBREL, PUBCOMP with a reason code, left out when it is 0x00 and
//!   there are no properties (§3.4.2.1, §3.5.2.1, §3.6.2.1, §3.7.2.1);
//! - SUBSCRIBE with its subscription options (§3.8.3.1); SUBACK's reason codes
//!   (§3.9.3); UNSUBACK; PINGREQ and PINGRESP;
//! - DISCONNECT with a reason code, both ways (§3.14.2.1).
//!
//! Every property of §2.2.2.2's table is read by its type and checked to end inside its
//! section; an identifier not in the table is a malformed packet. A packet longer than
//! the Maximum Packet Size the client announced is a protocol error (§3.1.2.11.4), named
//! [`DecodeError::PastMaximum`]: the client closes with DISCONNECT 0x95.

use super::{
    ConnackProperties, DecodeError, EncodeError, Frame, Incoming, Outgoing, Publish, QoS, past_max,
    remaining_length,
};

/// DISCONNECT's and PUBCOMP's reason codes idem sends or names (MQTT 5 §2.4).
pub mod reason {
    /// Normal disconnection, or success.
    pub const SUCCESS: u8 = 0x00;
    /// PUBCOMP: the PUBREL's packet identifier is not held (§3.7.2.1).
    pub const PACKET_IDENTIFIER_NOT_FOUND: u8 = 0x92;
    /// DISCONNECT: more QoS 1 and 2 PUBLISHes unacknowledged than the Receive Maximum
    /// announced (§3.3.4, §4.9).
    pub const RECEIVE_MAXIMUM_EXCEEDED: u8 = 0x93;
    /// DISCONNECT: a packet longer than the Maximum Packet Size announced (§3.1.2.11.4).
    pub const PACKET_TOO_LARGE: u8 = 0x95;
    /// DISCONNECT: a packet that breaks the protocol (§4.13).
    pub const PROTOCOL_ERROR: u8 = 0x82;
}

/// A reason code in words, as MQTT 5 §2.4 names it (every code of its Table 2-6; 0x00 by
/// its first name).
pub fn reason_name(code: u8) -> &'static str {
    match code {
        0x00 => "Success",
        0x01 => "Granted QoS 1",
        0x02 => "Granted QoS 2",
        0x04 => "Disconnect with Will Message",
        0x10 => "No matching subscribers",
        0x11 => "No subscription existed",
        0x18 => "Continue authentication",
        0x19 => "Re-authenticate",
        0x80 => "Unspecified error",
        0x81 => "Malformed Packet",
        0x82 => "Protocol Error",
        0x83 => "Implementation specific error",
        0x84 => "Unsupported Protocol Version",
        0x85 => "Client Identifier not valid",
        0x86 => "Bad User Name or Password",
        0x87 => "Not authorized",
        0x88 => "Server unavailable",
        0x89 => "Server busy",
        0x8A => "Banned",
        0x8B => "Server shutting down",
        0x8C => "Bad authentication method",
        0x8D => "Keep Alive timeout",
        0x8E => "Session taken over",
        0x8F => "Topic Filter invalid",
        0x90 => "Topic Name invalid",
        0x91 => "Packet Identifier in use",
        0x92 => "Packet Identifier not found",
        0x93 => "Receive Maximum exceeded",
        0x94 => "Topic Alias invalid",
        0x95 => "Packet too large",
        0x96 => "Message rate too high",
        0x97 => "Quota exceeded",
        0x98 => "Administrative action",
        0x99 => "Payload format invalid",
        0x9A => "Retain not supported",
        0x9B => "QoS not supported",
        0x9C => "Use another server",
        0x9D => "Server moved",
        0x9E => "Shared Subscriptions not supported",
        0x9F => "Connection rate exceeded",
        0xA0 => "Maximum connect time",
        0xA1 => "Subscription Identifiers not supported",
        0xA2 => "Wildcard Subscriptions not supported",
        _ => "a reason code MQTT 5 does not define",
    }
}

/// A reader over one packet's body: every read checked against its end.
struct Body<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Body<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let out = self.bytes.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(out)
    }

    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }

    fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|b| u16::from_be_bytes([b[0], b[1]]))
    }

    fn u32(&mut self) -> Option<u32> {
        self.take(4)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A Variable Byte Integer (§1.5.5).
    fn varint(&mut self) -> Option<usize> {
        let mut value = 0usize;
        for i in 0..4 {
            let byte = self.u8()?;
            value |= usize::from(byte & 0x7F) << (7 * i);
            if byte & 0x80 == 0 {
                return Some(value);
            }
        }
        None
    }

    /// A UTF-8 Encoded String (§1.5.4).
    fn string(&mut self) -> Option<&'a str> {
        let n = usize::from(self.u16()?);
        core::str::from_utf8(self.take(n)?).ok()
    }

    fn rest(&mut self) -> &'a [u8] {
        let out = self.bytes.get(self.at..).unwrap_or(&[]);
        self.at = self.bytes.len();
        out
    }

    fn done(&self) -> bool {
        self.at == self.bytes.len()
    }

    /// A property section (§2.2.2): its properties read by type, the CONNACK's that
    /// idem honours kept in `into`.
    fn properties(&mut self, into: &mut ConnackProperties) -> Option<()> {
        let len = self.varint()?;
        let mut section = Body {
            bytes: self.take(len)?,
            at: 0,
        };
        while !section.done() {
            let id = section.varint()?;
            match id {
                0x01 | 0x17 | 0x19 | 0x25 | 0x28 | 0x29 | 0x2A => {
                    section.u8()?;
                }
                0x24 => into.maximum_qos = Some(section.u8()?),
                0x13 | 0x22 | 0x23 => {
                    section.u16()?;
                }
                0x21 => into.receive_maximum = Some(section.u16()?),
                0x02 | 0x18 => {
                    section.u32()?;
                }
                0x11 => into.session_expiry = Some(section.u32()?),
                0x27 => into.maximum_packet_size = Some(section.u32()?),
                0x0B => {
                    section.varint()?;
                }
                0x03 | 0x08 | 0x12 | 0x15 | 0x1A | 0x1C | 0x1F => {
                    section.string()?;
                }
                0x09 | 0x16 => {
                    let n = usize::from(section.u16()?);
                    section.take(n)?;
                }
                0x26 => {
                    section.string()?;
                    section.string()?;
                }
                _ => return None,
            }
        }
        Some(())
    }

    /// A property section whose values nothing here needs.
    fn skip_properties(&mut self) -> Option<()> {
        self.properties(&mut ConnackProperties::default())
    }
}

/// The first packet in `buf` at MQTT 5, or `Ok(None)` until it has all arrived. `max` is
/// the largest packet the caller takes whole (a PUBLISH over it is
/// [`Frame::Oversized`], acknowledged and rejected); `limit` is the Maximum Packet Size
/// the client announced in CONNECT, past which a packet is a protocol error.
pub fn next(buf: &[u8], max: usize, limit: usize) -> Result<Option<Frame<'_>>, DecodeError> {
    let Some(&first) = buf.first() else {
        return Ok(None);
    };
    let (kind, flags) = (first >> 4, first & 0x0F);
    // The packets a server sends a client (§2.1.2) and their fixed flags (§2.1.3).
    let want_flags = match kind {
        2 | 4 | 5 | 7 | 9 | 11 | 13 | 14 => Some(0),
        6 => Some(0b0010),
        3 => None,
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
    if len > limit {
        return Err(DecodeError::PastMaximum(len));
    }
    match past_max(kind, flags, &buf[header..], body_len, len, max)? {
        None => return Ok(None),
        Some(Some(oversized)) => return Ok(Some(oversized)),
        Some(None) => {}
    }
    let Some(packet) = buf.get(header..len) else {
        return Ok(None);
    };
    let mut body = Body {
        bytes: packet,
        at: 0,
    };
    let packet = decode(kind, flags, &mut body)
        .filter(|_| body.done())
        .ok_or(DecodeError::Malformed(kind))?;
    Ok(Some(Frame::Packet { packet, len }))
}

fn decode<'a>(kind: u8, flags: u8, body: &mut Body<'a>) -> Option<Incoming<'a>> {
    Some(match kind {
        2 => {
            let ack_flags = body.u8()?;
            if ack_flags & 0xFE != 0 {
                return None;
            }
            let code = body.u8()?;
            let mut properties = ConnackProperties::default();
            // A CONNACK of two bytes is an MQTT 3.1.1 server's (its refusal of level 5
            // is return code 1, MQTT 3.1.1 §3.2.2.3): read, so that it can be named.
            if !body.done() {
                body.properties(&mut properties)?;
            }
            Incoming::Connack {
                session_present: ack_flags & 1 == 1,
                code,
                properties,
            }
        }
        3 => Incoming::Publish(publish(flags, body)?),
        4..=7 => {
            let pid = body.u16().filter(|p| *p != 0)?;
            let reason = if body.done() { 0 } else { body.u8()? };
            if !body.done() {
                body.skip_properties()?;
            }
            match (kind, reason) {
                (6, _) => Incoming::Pubrel(pid),
                (_, 0x80..) => Incoming::AckRefused { kind, pid, reason },
                (4, _) => Incoming::Puback(pid),
                (5, _) => Incoming::Pubrec(pid),
                _ => Incoming::Pubcomp(pid),
            }
        }
        9 | 11 => {
            let pid = body.u16().filter(|p| *p != 0)?;
            body.skip_properties()?;
            let codes = body.rest();
            let first = *codes.first()?;
            if kind == 11 {
                return Some(Incoming::Unsuback(pid));
            }
            let granted = match first {
                0x80.. => None,
                level => Some(QoS::from_level(level)?),
            };
            Incoming::Suback {
                pid,
                granted,
                reason: first,
            }
        }
        13 => Incoming::Pingresp,
        _ => {
            let reason = if body.done() { 0 } else { body.u8()? };
            if !body.done() {
                body.skip_properties()?;
            }
            Incoming::Disconnect(reason)
        }
    })
}

fn publish<'a>(flags: u8, body: &mut Body<'a>) -> Option<Publish<'a>> {
    let qos = QoS::from_level((flags >> 1) & 3)?;
    let topic = body.string()?;
    // A topic of no characters stands for a Topic Alias (§3.3.2.3.4), which a client
    // that announced no Topic Alias Maximum never receives (§3.1.2.11.5).
    if topic.is_empty() {
        return None;
    }
    let pid = match qos {
        QoS::AtMostOnce => None,
        _ => Some(body.u16().filter(|p| *p != 0)?),
    };
    body.skip_properties()?;
    Some(Publish {
        dup: flags & 0b1000 != 0,
        qos,
        pid,
        retain: flags & 1 == 1,
        topic,
        payload: body.rest(),
    })
}

/// The bytes a Variable Byte Integer of `n` takes.
const fn varint_len(n: usize) -> usize {
    super::length_bytes(n)
}

/// The body's length of `p` at MQTT 5, or `None` for a packet MQTT 5 does not send so.
fn body_len(p: &Outgoing<'_>) -> Option<usize> {
    Some(match p {
        Outgoing::Connect5 {
            client_id,
            session_expiry,
            ..
        } => {
            let props = if *session_expiry > 0 { 5 } else { 0 } + 3 + 5;
            10 + varint_len(props) + props + 2 + client_id.len()
        }
        Outgoing::Subscribe { filter, .. } => 2 + 1 + 2 + filter.len() + 1,
        Outgoing::Publish(p) => {
            let pid = if p.qos == QoS::AtMostOnce { 0 } else { 2 };
            2 + p.topic.len() + pid + 1 + p.payload.len()
        }
        Outgoing::Puback(_) | Outgoing::Pubrec(_) | Outgoing::Pubrel(_) | Outgoing::Pubcomp(_) => 2,
        Outgoing::PubcompReason(_, 0) => 2,
        Outgoing::PubcompReason(..) => 3,
        Outgoing::Pingreq | Outgoing::Disconnect | Outgoing::DisconnectReason(0) => 0,
        Outgoing::DisconnectReason(_) => 1,
        Outgoing::Connect { .. } => return None,
    })
}

/// The encoded length of `p` at MQTT 5, header included (0 for [`Outgoing::Connect`],
/// MQTT 3.1.1's; [`Outgoing::Disconnect`] is DISCONNECT 0x00).
pub fn encoded_len(p: &Outgoing<'_>) -> usize {
    body_len(p).map_or(0, |n| 1 + varint_len(n) + n)
}

/// A writer over the caller's buffer, its length checked before it is made.
struct Out<'a> {
    buf: &'a mut [u8],
    at: usize,
}

impl Out<'_> {
    fn bytes(&mut self, b: &[u8]) {
        self.buf[self.at..self.at + b.len()].copy_from_slice(b);
        self.at += b.len();
    }

    fn varint(&mut self, mut n: usize) {
        loop {
            let byte = (n % 128) as u8;
            n /= 128;
            self.bytes(&[byte | if n > 0 { 0x80 } else { 0 }]);
            if n == 0 {
                return;
            }
        }
    }

    fn string(&mut self, s: &str) {
        self.bytes(&(s.len() as u16).to_be_bytes());
        self.bytes(s.as_bytes());
    }
}

/// CONNECT's body (§3.1.2, §3.1.3): the protocol name and level, Clean Start, Keep
/// Alive, the properties, the client identifier.
fn connect(p: &Outgoing<'_>, out: &mut Out<'_>) -> Result<(), EncodeError> {
    let Outgoing::Connect5 {
        client_id,
        keep_alive,
        clean_start,
        session_expiry,
        receive_maximum,
        maximum_packet_size,
    } = *p
    else {
        return Err(EncodeError::Invalid);
    };
    if client_id.len() > usize::from(u16::MAX) || receive_maximum == 0 || maximum_packet_size == 0 {
        return Err(EncodeError::Invalid);
    }
    out.string("MQTT");
    out.bytes(&[5, u8::from(clean_start) << 1]);
    out.bytes(&keep_alive.to_be_bytes());
    out.varint(if session_expiry > 0 { 5 } else { 0 } + 3 + 5);
    if session_expiry > 0 {
        out.bytes(&[0x11]);
        out.bytes(&session_expiry.to_be_bytes());
    }
    out.bytes(&[0x21]);
    out.bytes(&receive_maximum.to_be_bytes());
    out.bytes(&[0x27]);
    out.bytes(&maximum_packet_size.to_be_bytes());
    out.string(client_id);
    Ok(())
}

/// Encodes `p` at MQTT 5 at the start of `buf`; its length.
pub fn encode(p: &Outgoing<'_>, buf: &mut [u8]) -> Result<usize, EncodeError> {
    let body = body_len(p).ok_or(EncodeError::Invalid)?;
    let needed = 1 + varint_len(body) + body;
    if buf.len() < needed {
        return Err(EncodeError::Buffer { needed });
    }
    let pid = |n: u16| {
        if n == 0 {
            Err(EncodeError::Invalid)
        } else {
            Ok(n.to_be_bytes())
        }
    };
    let long = |s: &str| s.len() > usize::from(u16::MAX);
    let first: u8 = match p {
        Outgoing::Connect5 { .. } => 0x10,
        Outgoing::Subscribe { .. } => 0x82,
        Outgoing::Publish(p) => {
            0x30 | u8::from(p.dup) << 3 | p.qos.level() << 1 | u8::from(p.retain)
        }
        Outgoing::Puback(_) => 0x40,
        Outgoing::Pubrec(_) => 0x50,
        Outgoing::Pubrel(_) => 0x62,
        Outgoing::Pubcomp(_) | Outgoing::PubcompReason(..) => 0x70,
        Outgoing::Pingreq => 0xC0,
        _ => 0xE0,
    };
    let mut out = Out { buf, at: 0 };
    out.bytes(&[first]);
    out.varint(body);
    match *p {
        Outgoing::Connect5 { .. } => connect(p, &mut out)?,
        Outgoing::Subscribe {
            pid: n,
            filter,
            qos,
        } => {
            if long(filter) {
                return Err(EncodeError::Invalid);
            }
            out.bytes(&pid(n)?);
            out.bytes(&[0]);
            out.string(filter);
            // Subscription options (§3.8.3.1): the QoS; No Local 0, Retain As Published
            // 0, Retain Handling 0 (retained messages sent at subscribe).
            out.bytes(&[qos.level()]);
        }
        Outgoing::Publish(ref p) => {
            if long(p.topic) {
                return Err(EncodeError::Invalid);
            }
            out.string(p.topic);
            match (p.qos, p.pid) {
                (QoS::AtMostOnce, _) => {}
                (_, Some(n)) => out.bytes(&pid(n)?),
                (_, None) => return Err(EncodeError::Invalid),
            }
            out.bytes(&[0]);
            out.bytes(p.payload);
        }
        Outgoing::Puback(n) | Outgoing::Pubrec(n) | Outgoing::Pubrel(n) | Outgoing::Pubcomp(n) => {
            out.bytes(&pid(n)?)
        }
        Outgoing::PubcompReason(n, r) => {
            out.bytes(&pid(n)?);
            if r != 0 {
                out.bytes(&[r]);
            }
        }
        Outgoing::DisconnectReason(r) if r != 0 => out.bytes(&[r]),
        _ => {}
    }
    Ok(out.at)
}
