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
    /// Bytes of this connection read into whole packets.
    pub(super) parsed: u32,
    /// This connection's PUBLISHes (not retained): where each ends in its bytes, and
    /// its QoS.
    pub(super) conn: Vec<(u32, u8)>,
    /// The PUBLISHes (not retained) at QoS 0, 1 and 2 within the bytes the board took
    /// by its last count frame on this connection.
    pub(super) taken_now: [u64; 3],
    /// The same, over this boot's earlier connections.
    pub(super) taken_boot: [u64; 3],
    /// The same, over the earlier boots.
    pub(super) taken_before: [u64; 3],
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
                    Frame::Packet { packet, len } => {
                        let publish = self.packet(packet, len);
                        self.parsed += len as u32;
                        publish
                    }
                    Frame::Oversized { len, .. } => {
                        self.parsed += len as u32;
                        true
                    }
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
    fn packet(&mut self, packet: Incoming<'_>, len: usize) -> bool {
        match packet {
            Incoming::Publish(p) => {
                if !p.retain {
                    self.conn.push((self.parsed + len as u32, p.qos.level()));
                }
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
        self.parsed = 0;
        self.conn.clear();
        add(&mut self.taken_boot, std::mem::take(&mut self.taken_now));
    }

    /// The board's count frame: its packets took `handled` bytes of this connection.
    pub(super) fn taken_through(&mut self, handled: u32) {
        let mut now = [0; 3];
        for &(_, qos) in self.conn.iter().filter(|(end, _)| *end <= handled) {
            now[usize::from(qos.min(2))] += 1;
        }
        self.taken_now = now;
    }

    /// The board booted again: what it took on its last boot is final.
    pub(super) fn booted(&mut self) {
        add(&mut self.taken_before, std::mem::take(&mut self.taken_boot));
        add(&mut self.taken_before, std::mem::take(&mut self.taken_now));
    }

    /// The PUBLISHes (not retained) at QoS 0, 1 and 2 that the host carried within the
    /// bytes the board said it took, over every boot: what the board's `received_at`,
    /// added over its boots, must be.
    pub(super) fn taken(&self) -> [u64; 3] {
        let mut all = self.taken_before;
        add(&mut all, self.taken_boot);
        add(&mut all, self.taken_now);
        all
    }
}

fn add(to: &mut [u64; 3], more: [u64; 3]) {
    for (a, b) in to.iter_mut().zip(more) {
        *a += b;
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

    /// What the board took, from its count frames: on each connection the PUBLISHes
    /// that end within the bytes its last frame names, over the boot's connections and
    /// every boot.
    #[test]
    fn the_publishes_taken_are_those_within_each_boots_last_count_frame() {
        let mut t = Tap {
            asked: 2,
            ..Tap::default()
        };
        let connack = [0x20, 2, 1, 0];
        let (p1, p2) = (publish(1, "p1", false), publish(2, "p2", true));
        t.connected();
        t.carried(&connack);
        t.carried(&p1);
        t.carried(&p2);
        // The board took the CONNACK and p1, and is reading p2.
        t.taken_through((connack.len() + p1.len() + 3) as u32);
        assert_eq!(t.taken(), [0, 0, 1]);
        t.taken_through((connack.len() + p1.len() + p2.len()) as u32);
        assert_eq!(t.taken(), [0, 0, 2]);
        // A second connection of the same boot: what the first took stays.
        t.connected();
        t.carried(&connack);
        t.carried(&publish(3, "p3", false));
        assert_eq!(t.taken(), [0, 0, 2]);
        // A reset before the board's next frame: p3 was never counted as taken.
        t.booted();
        t.connected();
        t.carried(&connack);
        t.carried(&publish(3, "p3", true));
        t.taken_through(connack.len() as u32);
        assert_eq!(t.taken(), [0, 0, 2]);
        t.taken_through((connack.len() + p1.len()) as u32);
        assert_eq!(t.taken(), [0, 0, 3]);
    }
}
