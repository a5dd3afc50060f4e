//! One TCP connection to an MQTT broker: packets out, packets in (framed by
//! `idem_mqtt::codec::Framer`), a bounded reconnect, and the keep-alive's PINGREQ.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use anyhow::anyhow;
use idem_mqtt::codec::v5::reason;
use idem_mqtt::codec::{
    self, ConnackProperties, DecodeError, Frame, FrameError, Framer, Incoming, Outgoing, Protocol,
    QoS,
};

/// Connection attempts before giving up (the session's policy, `idem_mqtt::client`).
pub use idem_mqtt::client::CONNECT_TRIES as TRIES;
use idem_mqtt::client::{backoff_ms, ping_due};

/// A packet as received, owned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Got {
    /// CONNACK (at MQTT 5, with the broker's limits).
    Connack {
        session_present: bool,
        code: u8,
        properties: ConnackProperties,
    },
    /// PUBLISH.
    Publish {
        qos: QoS,
        pid: Option<u16>,
        dup: bool,
        retain: bool,
        topic: String,
        payload: Vec<u8>,
    },
    /// A PUBLISH over the maximum size, already discarded.
    Oversized { qos: QoS, pid: Option<u16> },
    /// PUBREL.
    Pubrel(u16),
    /// SUBACK with the QoS granted (`None`: refused) and its return or reason code.
    Suback { granted: Option<QoS>, reason: u8 },
    /// PINGRESP.
    Pingresp,
    /// PUBACK, for a publisher.
    Puback(u16),
    /// PUBREC, for a publisher.
    Pubrec(u16),
    /// PUBCOMP, for a publisher.
    Pubcomp(u16),
    /// UNSUBACK, which nothing here asks for.
    Unsuback,
    /// DISCONNECT from the broker, with its reason code (MQTT 5).
    Disconnect(u8),
    /// PUBACK, PUBREC or PUBCOMP refusing a PUBLISH (MQTT 5, reason 0x80 or more).
    AckRefused { kind: u8, pid: u16, reason: u8 },
}

/// Why reading stopped.
#[derive(Debug)]
pub enum Broken {
    /// The broker closed the connection, or it failed.
    Closed(String),
    /// Bytes that are not a packet a client takes: the sentence.
    Garbage(String),
}

/// The most bytes one read of the socket takes.
const CHUNK: usize = 4096;

/// A connection.
pub struct Link {
    stream: TcpStream,
    /// The broker's bytes, cut into packets: room for a PUBLISH on the longest topic
    /// MQTT allows, and a read more.
    rx: Framer<Box<[u8]>>,
    protocol: Protocol,
    last_sent: Instant,
    /// Packets read.
    pub packets: u64,
    /// The CONNACK [`Link::handshake`] read, still to be taken.
    early: Option<Got>,
}

/// A number from the clock, for the backoff's jitter (no generator needed for that).
fn jitter(range: u64) -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    u64::from(nanos) % range.max(1)
}

/// A TCP connection to `addr`, tried [`TRIES`] times with a doubling wait and jitter
/// (the session's policy); then one sentence.
pub fn dial(addr: &str) -> anyhow::Result<TcpStream> {
    let mut last = String::new();
    for attempt in 1..=TRIES {
        match TcpStream::connect(addr) {
            Ok(stream) => {
                stream.set_nodelay(true)?;
                return Ok(stream);
            }
            Err(e) => last = e.to_string(),
        }
        if attempt < TRIES {
            let ms = u64::from(backoff_ms(attempt));
            std::thread::sleep(Duration::from_millis(ms + jitter(ms / 2)));
        }
    }
    Err(anyhow!(
        "no MQTT broker answered at {addr} after {TRIES} tries over about 2 s ({last})"
    ))
}

impl Link {
    /// Connects to `addr`, trying [`TRIES`] times with a doubling wait; then one
    /// sentence.
    pub fn connect(addr: &str, max: usize) -> anyhow::Result<Self> {
        let stream = dial(addr)?;
        let room = max.max(idem_mqtt::max_packet_at(
            usize::from(u16::MAX),
            Protocol::V5,
        )) + CHUNK;
        let buf = vec![0u8; room].into_boxed_slice();
        Ok(Self {
            stream,
            rx: Framer::new(buf, Protocol::V311, max, usize::MAX),
            protocol: Protocol::V311,
            last_sent: Instant::now(),
            packets: 0,
            early: None,
        })
    }

    /// Sends `connect` (a CONNECT, encoded) and waits for the broker's CONNACK, `limit`
    /// at most from the CONNECT (MQTT 3.1.1 §3.2: a client SHOULD close a connection
    /// whose CONNACK does not come in a reasonable time), whatever else the caller
    /// waits for. A CONNACK that accepts is kept for the caller's next read; no answer,
    /// a refusal, a close or bytes that are not MQTT are one sentence.
    pub fn handshake(&mut self, connect: &[u8], limit: Duration) -> anyhow::Result<()> {
        let sent = Instant::now();
        self.send_bytes(connect)?;
        while self.early.is_none() {
            let left = limit.saturating_sub(sent.elapsed());
            match self.read(left.min(Duration::from_millis(100))) {
                Ok(Some(got @ Got::Connack { code: 0, .. })) => self.early = Some(got),
                Ok(Some(Got::Connack { code, .. })) => {
                    return Err(anyhow!(
                        "the broker refused the connection: {} (return code {code})",
                        refusal_at(code, self.protocol)
                    ));
                }
                Ok(Some(_)) => return Err(anyhow!("the broker sent a packet before its CONNACK")),
                Ok(None) if left.is_zero() => {
                    return Err(anyhow!(
                        "the peer accepted the connection but did not answer CONNECT within {} s",
                        limit.as_secs()
                    ));
                }
                Ok(None) => {}
                Err(Broken::Closed(why)) => {
                    return Err(anyhow!(
                        "the broker closed the connection before its CONNACK ({why})"
                    ));
                }
                Err(Broken::Garbage(why)) => return Err(anyhow!("{why}")),
            }
        }
        Ok(())
    }

    /// Whether [`Link::handshake`] sent this connection's CONNECT.
    pub fn connected(&self) -> bool {
        self.early.is_some()
    }

    /// The link at `protocol`; at MQTT 5, `limit` is the Maximum Packet Size the client
    /// announces, past which a packet from the broker is a protocol error.
    pub fn speaking(mut self, protocol: Protocol, limit: u32) -> Self {
        self.protocol = protocol;
        self.rx.speak(protocol, limit as usize);
        self
    }

    /// Sends `p`.
    pub fn send(&mut self, p: &Outgoing<'_>) -> anyhow::Result<()> {
        let mut out = vec![0u8; codec::encoded_len_at(p, self.protocol)];
        let n = codec::encode_at(p, self.protocol, &mut out)
            .map_err(|e| anyhow!("encoding {p:?}: {e:?}"))?;
        self.stream
            .write_all(&out[..n])
            .map_err(|e| anyhow!("the broker's connection failed while sending: {e}"))?;
        self.last_sent = Instant::now();
        Ok(())
    }

    /// Sends bytes already encoded.
    pub fn send_bytes(&mut self, bytes: &[u8]) -> anyhow::Result<()> {
        self.stream
            .write_all(bytes)
            .map_err(|e| anyhow!("the broker's connection failed while sending: {e}"))?;
        self.last_sent = Instant::now();
        Ok(())
    }

    /// Sends PINGREQ if nothing was sent for half the keep-alive.
    pub fn keep_alive(&mut self) -> anyhow::Result<()> {
        if ping_due(self.last_sent.elapsed().as_millis() as u64) {
            self.send(&Outgoing::Pingreq)?;
        }
        Ok(())
    }

    /// The next packet, waiting at most `wait`; `Ok(None)` when none came.
    pub fn read(&mut self, wait: Duration) -> Result<Option<Got>, Broken> {
        if let Some(got) = self.early.take() {
            return Ok(Some(got));
        }
        let deadline = Instant::now() + wait;
        loop {
            if let Some(got) = self.take()? {
                self.packets += 1;
                return Ok(Some(got));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            let timeout = left.max(Duration::from_millis(1));
            let closed = |e: std::io::Error| Broken::Closed(e.to_string());
            self.stream
                .set_read_timeout(Some(timeout))
                .map_err(closed)?;
            let mut chunk = [0u8; CHUNK];
            let room = self.rx.room().min(CHUNK);
            match self.stream.read(&mut chunk[..room]) {
                Ok(0) => return Err(Broken::Closed("the broker closed the connection".into())),
                Ok(n) => self.push(&chunk[..n]),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return Ok(None);
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(closed(e)),
            }
        }
    }

    /// The next packet if one has already arrived: from the buffer, else from what the
    /// socket holds now, without waiting.
    pub fn ready(&mut self) -> Result<Option<Got>, Broken> {
        if let Some(got) = self.take()? {
            self.packets += 1;
            return Ok(Some(got));
        }
        let closed = |e: std::io::Error| Broken::Closed(e.to_string());
        self.stream.set_nonblocking(true).map_err(closed)?;
        let mut chunk = [0u8; CHUNK];
        let room = self.rx.room().min(CHUNK);
        let read = self.stream.read(&mut chunk[..room]);
        self.stream.set_nonblocking(false).map_err(closed)?;
        match read {
            Ok(0) => Err(Broken::Closed("the broker closed the connection".into())),
            Ok(n) => {
                self.push(&chunk[..n]);
                let got = self.take()?;
                self.packets += u64::from(got.is_some());
                Ok(got)
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {
                Ok(None)
            }
            Err(e) => Err(closed(e)),
        }
    }

    /// After DISCONNECT: waits, `limit` at most, for the broker to close the
    /// connection (MQTT 3.1.1 §3.14.4: the server SHOULD close it; the client MUST,
    /// [MQTT-3.14.4-1], as dropping the link after this wait does), discarding what it
    /// still sends, so that it has read every acknowledgement sent before the DISCONNECT
    /// when the next connection's CONNECT arrives (a CONNECT that overtakes them makes the broker close this
    /// connection as a session takeover, with those acknowledgements unread).
    pub fn wait_closed(&mut self, limit: Duration) {
        let deadline = Instant::now() + limit;
        let mut chunk = [0u8; CHUNK];
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            let _ = self
                .stream
                .set_read_timeout(Some(left.max(Duration::from_millis(1))));
            match self.stream.read(&mut chunk) {
                Ok(0) => return,
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return,
            }
        }
    }

    /// Bytes read, at most the framer's room: all taken.
    fn push(&mut self, bytes: &[u8]) {
        let taken = self.rx.push(bytes);
        debug_assert_eq!(taken, bytes.len(), "a read asks for no more than the room");
    }

    /// Why the buffer's first bytes are no packet, in a sentence.
    fn undecodable(&mut self, e: DecodeError) -> Broken {
        // A first packet that is not even a CONNACK's type: not an MQTT server.
        if self.packets == 0 && self.rx.held().first().is_some_and(|b| b >> 4 != 2) {
            Broken::Garbage(not_mqtt(self.rx.held()))
        } else if let DecodeError::PastMaximum(_) = e {
            // A protocol error: DISCONNECT 0x95 (Packet too large), then the connection
            // closes (MQTT 5 §3.1.2.11.4, §4.13).
            let _ = self.send(&Outgoing::DisconnectReason(reason::PACKET_TOO_LARGE));
            Broken::Garbage(format!(
                "the broker sent {e}; the receiver answered DISCONNECT 0x95 (Packet too large)"
            ))
        } else {
            Broken::Garbage(format!("the broker sent {e}"))
        }
    }

    /// A whole packet from the buffer, if one is there.
    fn take(&mut self) -> Result<Option<Got>, Broken> {
        let got = self.rx.next(|frame| match frame {
            Frame::Oversized { qos, pid, .. } => Got::Oversized { qos, pid },
            Frame::Packet { packet, .. } => own(packet),
        });
        match got {
            Ok(got) => Ok(got),
            Err(FrameError::Decode(e)) => Err(self.undecodable(e)),
            Err(e @ FrameError::TooLong { .. }) => {
                Err(Broken::Garbage(format!("the broker sent {e}")))
            }
        }
    }
}

/// The peer's first bytes, as a connection that does not start with a packet (an HTTP
/// server, a TLS port) shows them.
fn not_mqtt(first: &[u8]) -> String {
    let shown = &first[..first.len().min(24)];
    format!(
        "the peer does not speak MQTT: where a CONNACK belongs it sent \"{}\"",
        shown.escape_ascii()
    )
}

fn own(p: Incoming<'_>) -> Got {
    match p {
        Incoming::Connack {
            session_present,
            code,
            properties,
        } => Got::Connack {
            session_present,
            code,
            properties,
        },
        Incoming::Publish(p) => Got::Publish {
            qos: p.qos,
            pid: p.pid,
            dup: p.dup,
            retain: p.retain,
            topic: p.topic.to_owned(),
            payload: p.payload.to_vec(),
        },
        Incoming::Pubrel(pid) => Got::Pubrel(pid),
        Incoming::Suback {
            granted, reason, ..
        } => Got::Suback { granted, reason },
        Incoming::Pingresp => Got::Pingresp,
        Incoming::Puback(pid) => Got::Puback(pid),
        Incoming::Pubrec(pid) => Got::Pubrec(pid),
        Incoming::Pubcomp(pid) => Got::Pubcomp(pid),
        Incoming::Unsuback(_) => Got::Unsuback,
        Incoming::Disconnect(r) => Got::Disconnect(r),
        Incoming::AckRefused { kind, pid, reason } => Got::AckRefused { kind, pid, reason },
    }
}

/// CONNACK's refusal in words at `protocol`, as MQTT names its code
/// (`idem_mqtt::codec::connack_name_at`: MQTT 3.1.1 §3.2.2.3, MQTT 5 §3.2.2.2), with
/// what to do about an MQTT 3.1.1 server's refusal of level 5.
pub fn refusal_at(code: u8, protocol: Protocol) -> String {
    let name = codec::connack_name_at(code, protocol);
    match (protocol, code) {
        (Protocol::V5, 1) => {
            format!("{name}: it answers as an MQTT 3.1.1 server; try --protocol 3.1.1")
        }
        _ => name.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_is_named_in_the_protocol_spoken() {
        assert_eq!(
            refusal_at(5, Protocol::V311),
            "Connection Refused, not authorized"
        );
        assert_eq!(refusal_at(0x87, Protocol::V5), "Not authorized");
        assert_eq!(refusal_at(0x95, Protocol::V5), "Packet too large");
        // At MQTT 5, return code 1 is an MQTT 3.1.1 server refusing level 5.
        assert_eq!(
            refusal_at(1, Protocol::V5),
            "Connection Refused, unacceptable protocol version: it answers as an MQTT 3.1.1 server; try --protocol 3.1.1"
        );
    }
}
