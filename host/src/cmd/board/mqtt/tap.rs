//! What the host reads of the packets it carries for the board: each PUBLISH's message
//! id, the board's acknowledgements, and the CONNACKs, SUBACKs and QoS the broker sent
//! over every boot.
//!
//! An id counts as acknowledged only by the PUBACK or PUBREC that answers its first
//! PUBLISH under a packet identifier the board does not hold. A QoS 2 identifier is
//! held from the board's PUBREC to its PUBCOMP (MQTT 3.1.1 §4.3.3), and the board
//! answers a PUBLISH under a held identifier with PUBREC again without applying it: for
//! a resend of the same message that is the rule, but a new message under it is a
//! broker protocol violation (the sender reuses an identifier only once its exchange
//! completed, §2.3.1), which the board drops. Such a PUBREC acknowledges nothing, and
//! the run names each one and is never exact.

use std::collections::{HashMap, HashSet};

use idem_mqtt::codec::{self, Frame, Framer, Incoming, Protocol};

/// Broker bytes carried to the board, cut into packets: room for a PUBLISH on the
/// longest topic MQTT allows.
pub(super) struct Carried(Framer<Box<[u8]>>);

impl Default for Carried {
    fn default() -> Self {
        let room = idem_mqtt::max_packet_at(usize::from(u16::MAX), Protocol::V5) + 4096;
        let buf = vec![0u8; room].into_boxed_slice();
        Self(Framer::new(buf, Protocol::V311, room, usize::MAX))
    }
}

/// What the host reads of the packets it carries.
#[derive(Default)]
pub(super) struct Tap {
    /// Broker bytes carried to the board and not yet a whole packet.
    pub(super) rx: Carried,
    /// The message id of each packet identifier's PUBLISH not yet acknowledged, first
    /// under an identifier the board did not hold.
    pub(super) ids: HashMap<u16, String>,
    /// The QoS 2 identifiers the board holds (its PUBREC sent, its PUBCOMP not yet),
    /// with the message id each was taken for.
    pub(super) held: HashMap<u16, String>,
    /// New messages the broker sent under an identifier the board held.
    pub(super) reused: u64,
    /// Ids whose PUBLISH the board acknowledged (PUBACK or PUBREC).
    pub(super) acknowledged: HashSet<String>,
    pub(super) publishes: u64,
    pub(super) dups: u64,
    pub(super) subscribed: bool,
    /// The QoS subscribed at.
    pub(super) asked: u8,
    /// The protocol the board speaks, and so the broker's packets.
    pub(super) protocol: Protocol,
    /// PUBLISHes (not retained) below it, as their publisher sent them.
    pub(super) below: u64,
    /// A lower QoS that a SUBACK granted.
    pub(super) granted_below: Option<u8>,
    /// CONNACKs carried, and those after the first that said session present 0.
    pub(super) connacks: u32,
    pub(super) sessions_lost: u32,
}

impl Tap {
    /// Broker bytes as the board got them, in order, once: the PUBLISHes among them.
    pub(super) fn carried(&mut self, mut bytes: &[u8]) -> u64 {
        // The framer is taken out while its packets are read into the rest of the tap.
        let empty = Framer::new(Box::default(), self.protocol, 0, usize::MAX);
        let mut rx = std::mem::replace(&mut self.rx.0, empty);
        rx.speak(self.protocol, usize::MAX);
        let mut publishes = 0;
        while !bytes.is_empty() {
            bytes = &bytes[rx.push(bytes)..];
            loop {
                match rx.next(|frame| match frame {
                    Frame::Packet { packet, .. } => self.packet(packet),
                    Frame::Oversized { .. } => true,
                }) {
                    Ok(Some(publish)) => publishes += u64::from(publish),
                    Ok(None) => break,
                    // Bytes the board hangs up on: nothing more of them is read.
                    Err(_) => {
                        rx.clear();
                        bytes = &[];
                        break;
                    }
                }
            }
        }
        self.rx.0 = rx;
        self.publishes += publishes;
        publishes
    }

    /// Reads one packet the board got: whether it was a PUBLISH.
    fn packet(&mut self, packet: Incoming<'_>) -> bool {
        match packet {
            Incoming::Publish(p) => {
                self.dups += u64::from(p.dup);
                if !p.retain && p.qos.level() < self.asked {
                    self.below += 1;
                }
                let id =
                    idem_mqtt::payments::id_and_amount(p.payload).map(|(id, _)| id.to_string());
                if let (Some(pid), Ok(id)) = (p.pid, id) {
                    match self.held.get(&pid) {
                        // A resend of the message held: acknowledged already.
                        Some(held) if *held == id => {}
                        Some(_) => self.reused += 1,
                        None => {
                            self.ids.insert(pid, id);
                        }
                    }
                }
                return true;
            }
            Incoming::Suback {
                granted, reason, ..
            } => self.suback(granted.map(|q| q.level()), reason),
            Incoming::Connack {
                session_present, ..
            } => {
                // A new session: the board forgets the identifiers it held.
                if !session_present {
                    self.held.clear();
                }
                // Session present 0 after this run's first connection: the broker
                // lost the session the board had begun.
                if self.connacks > 0 && !session_present {
                    self.sessions_lost += 1;
                }
                self.connacks += 1;
            }
            _ => {}
        }
        false
    }

    /// A SUBACK: the QoS granted (`None`: refused, with its return or reason code).
    fn suback(&mut self, level: Option<u8>, reason: u8) {
        if let Some(g) = level.filter(|&g| g < self.asked) {
            self.granted_below = Some(g);
        }
        if !self.subscribed {
            self.subscribed = true;
            match level {
                Some(q) => eprintln!("device mqtt: the board subscribed (QoS {q} granted)"),
                None => eprintln!(
                    "device mqtt: the broker refused the board's subscription: {} (return code 0x{reason:02X})",
                    codec::suback_name_at(reason, self.protocol)
                ),
            }
        }
    }

    /// A packet the board sent: a PUBACK or PUBREC acknowledges the PUBLISH that came
    /// first under its identifier (a PUBREC then holds it), a PUBCOMP releases it.
    pub(super) fn sent(&mut self, packet: &[u8]) {
        let [first, 2, hi, lo] = *packet else {
            return;
        };
        let pid = u16::from_be_bytes([hi, lo]);
        match first {
            0x40 | 0x50 => {
                if let Some(id) = self.ids.remove(&pid) {
                    self.acknowledged.insert(id.clone());
                    if first == 0x50 {
                        self.held.insert(pid, id);
                    }
                }
            }
            0x70 => {
                self.held.remove(&pid);
            }
            _ => {}
        }
    }

    pub(super) fn connected(&mut self) {
        self.rx.0.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn publish(pid: u8, id: &str, dup: bool) -> Vec<u8> {
        let payload = format!(r#"{{"id": "{id}", "amount": 1}}"#);
        let mut p = vec![
            0x34 | (u8::from(dup) << 3),
            (2 + 3 + 2 + payload.len()) as u8,
        ];
        p.extend_from_slice(&[0, 3, b'p', b'a', b'y', 0, pid]);
        p.extend_from_slice(payload.as_bytes());
        p
    }

    /// p1 under identifier 1, PUBREC: acknowledged and held. Its resend (DUP) and the
    /// PUBREC again acknowledge nothing new. zz under the held 1: a violation, and the
    /// board's PUBREC for it does not acknowledge zz (it was counted before). After the
    /// PUBCOMP, p2 under 1 is new and acknowledged.
    #[test]
    fn only_the_first_publish_under_an_identifier_not_held_is_acknowledged() {
        let mut t = Tap {
            asked: 2,
            ..Tap::default()
        };
        t.carried(&[0x20, 2, 1, 0]);
        t.carried(&publish(1, "p1", false));
        t.sent(&[0x50, 2, 0, 1]);
        t.carried(&publish(1, "p1", true));
        t.sent(&[0x50, 2, 0, 1]);
        assert_eq!((t.acknowledged.len(), t.reused), (1, 0));
        t.carried(&publish(1, "zz", false));
        t.sent(&[0x50, 2, 0, 1]);
        assert_eq!((t.acknowledged.len(), t.reused), (1, 1));
        assert!(!t.acknowledged.contains("zz"));
        t.sent(&[0x70, 2, 0, 1]);
        t.carried(&publish(1, "p2", false));
        t.sent(&[0x50, 2, 0, 1]);
        let mut ids: Vec<_> = t.acknowledged.iter().cloned().collect();
        ids.sort();
        assert_eq!((ids, t.reused), (vec!["p1".to_string(), "p2".into()], 1));
        // Session present 0: the board forgets what it held; p3 under 1 is new.
        t.carried(&[0x20, 2, 0, 0]);
        t.carried(&publish(1, "p3", false));
        t.sent(&[0x50, 2, 0, 1]);
        assert_eq!((t.acknowledged.len(), t.reused), (3, 1));
    }
}
