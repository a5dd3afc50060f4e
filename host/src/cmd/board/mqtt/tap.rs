//! What the host reads of the packets it carries for the board: each PUBLISH's message
//! id, the board's acknowledgements, and the CONNACKs, SUBACKs and QoS the broker sent
//! over every boot.

use std::collections::{HashMap, HashSet};

use idem_mqtt::codec::{self, Frame, Incoming};

/// What the host reads of the packets it carries.
#[derive(Default)]
pub(super) struct Tap {
    /// Broker bytes carried to the board and not yet a whole packet.
    pub(super) buf: Vec<u8>,
    /// The message id of each packet identifier's latest PUBLISH.
    pub(super) ids: HashMap<u16, String>,
    /// Ids whose PUBLISH the board acknowledged (PUBACK or PUBREC).
    pub(super) acknowledged: HashSet<String>,
    pub(super) publishes: u64,
    pub(super) dups: u64,
    pub(super) subscribed: bool,
    /// The QoS subscribed at.
    pub(super) asked: u8,
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
    pub(super) fn carried(&mut self, bytes: &[u8]) -> u64 {
        self.buf.extend_from_slice(bytes);
        let mut publishes = 0;
        while let Ok(Some(Frame::Packet { packet, len })) = codec::next(&self.buf, usize::MAX) {
            match packet {
                Incoming::Publish(p) => {
                    publishes += 1;
                    self.dups += u64::from(p.dup);
                    if !p.retain && p.qos.level() < self.asked {
                        self.below += 1;
                    }
                    let id =
                        idem_mqtt::payments::id_and_amount(p.payload).map(|(id, _)| id.to_string());
                    if let (Some(pid), Ok(id)) = (p.pid, id) {
                        self.ids.insert(pid, id);
                    }
                }
                Incoming::Suback { granted, .. } => {
                    let level = granted.map(|q| q.level());
                    if let Some(g) = level.filter(|&g| g < self.asked) {
                        self.granted_below = Some(g);
                    }
                    if !self.subscribed {
                        self.subscribed = true;
                        match level {
                            Some(q) => {
                                eprintln!("device mqtt: the board subscribed (QoS {q} granted)")
                            }
                            None => eprintln!(
                                "device mqtt: the broker refused the board's subscription"
                            ),
                        }
                    }
                }
                Incoming::Connack {
                    session_present, ..
                } => {
                    // Session present 0 after this run's first connection: the broker
                    // lost the session the board had begun.
                    if self.connacks > 0 && !session_present {
                        self.sessions_lost += 1;
                    }
                    self.connacks += 1;
                }
                _ => {}
            }
            self.buf.drain(..len);
        }
        self.publishes += publishes;
        publishes
    }

    /// A packet the board sent: an acknowledgement names what it received.
    pub(super) fn sent(&mut self, packet: &[u8]) {
        if let [first, 2, hi, lo] = *packet
            && (first == 0x40 || first == 0x50)
            && let Some(id) = self.ids.get(&u16::from_be_bytes([hi, lo]))
        {
            self.acknowledged.insert(id.clone());
        }
    }

    pub(super) fn connected(&mut self) {
        self.buf.clear();
    }
}
