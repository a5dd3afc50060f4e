//! The receive rules: what a subscriber does with each PUBLISH and PUBREL, what it makes
//! durable first, and which acknowledgement it may send only then.
//!
//! The receiver keeps one [`Record`] in a [`Journal`]: the store's state, its count of
//! rejected messages, and the QoS 2 packet identifiers received and not yet released.
//! Each method returns only once what it decided is on flash, and returns the
//! acknowledgements that decision allows; the caller sends them after it returns, never
//! before. So a reset at any instant leaves either the old record, and the broker sends
//! the message again, or the new one, with the acknowledgement not yet sent: QoS 2 finds
//! the identifier held and applies nothing; QoS 1 applies the redelivery again unless the
//! store deduplicates it (the message-id store, by an id in the payload; the DUP flag is
//! not a dedup key, MQTT 3.1.1 §4.3.2 and §3.3.1.1).
//!
//! The rules, MQTT 3.1.1 §4.3.3 (method B, the receiver stores the identifier):
//! - the first PUBLISH of an identifier is decided and the identifier stored in the same
//!   record as the effect, before PUBREC;
//! - a PUBLISH whose identifier is held is a duplicate: PUBREC again, nothing applied;
//! - PUBREL forgets the identifier durably, and only then PUBCOMP, since after PUBCOMP
//!   the broker may give the identifier to a new message; a PUBREL of an identifier not
//!   held still gets PUBCOMP.
//!
//! With [`Release::WithNext`] the forgetting shares the record of the next message, and
//! its PUBCOMP waits for that record: one record a message, the floor. A caller that
//! takes packets in groups (every packet one read brought, their records made durable by
//! one sync before any of their acknowledgements goes out: group commit) ends each group
//! with [`Receiver::group_end`], which writes the waiting releases in the group's last
//! record when no identifier held still waits for its PUBREL: the broker then waits for
//! those PUBCOMPs before it may send more, and the group's one sync covers that record
//! too. The caller also flushes them ([`Receiver::flush`]) when the link is idle, and the
//! receiver does so itself once every place is waiting, since the broker then has nothing
//! it may send.

use embedded_storage::nor_flash::NorFlash;
use heapless::Vec;
use idem_core::MaxSize;
use idem_core::journal::{Journal, JournalError, Region};
use idem_core::log::Event;
use idem_core::store::{Outcome, Store};
use serde::{Deserialize, Serialize};

use crate::codec::{Publish, QoS};

/// What recognises a message again: CRC-32C over its topic's length (two bytes, big
/// endian, as on the wire), its topic and its payload. 32 bits, as the journal's own
/// check on each record: a CRC tells apart any two messages of one length that differ
/// within 32 consecutive bits (two payments whose ids differ in a few digits always
/// differ), and two others collide once in 2^32, a chance taken only when a broker sends
/// a PUBLISH with DUP 1 under an identifier whose tombstone is still kept. A 64-bit hash
/// would add 4 bytes to each of the record's `2 N` entries for no case a test could tell.
pub type Digest = [u8; 4];

#[cfg(target_os = "none")]
const CRC: crc::Crc<u32, crc::NoTable> = crc::Crc::<u32, crc::NoTable>::new(&crc::CRC_32_ISCSI);
#[cfg(not(target_os = "none"))]
const CRC: crc::Crc<u32, crc::Table<1>> = crc::Crc::<u32, crc::Table<1>>::new(&crc::CRC_32_ISCSI);

/// The [`Digest`] of a message on `topic` with `payload`.
pub fn digest(topic: &str, payload: &[u8]) -> Digest {
    let mut d = CRC.digest();
    // A topic is at most 65,535 bytes on the wire (MQTT 3.1.1 §1.5.3).
    d.update(&(topic.len() as u16).to_be_bytes());
    d.update(topic.as_bytes());
    d.update(payload);
    d.finalize().to_le_bytes()
}

/// A QoS 2 message in the record: held (received, not released) or a tombstone
/// (released). Encoded in 6 bytes (the identifier big endian, then the digest), not as
/// postcard's varints, so that `2 N` of them have a fixed size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Held {
    /// The packet identifier.
    pub pid: u16,
    /// Its message's topic and payload.
    pub digest: Digest,
}

// By hand, as a loop over the 6 bytes rather than serde's array (unrolled at each use),
// and out of line: the board image carries one copy for its two stores.
impl Serialize for Held {
    #[inline(never)]
    fn serialize<Z: serde::Serializer>(&self, s: Z) -> Result<Z::Ok, Z::Error> {
        use serde::ser::SerializeTuple;
        let [a, b] = self.pid.to_be_bytes();
        let [c, d, e, f] = self.digest;
        let mut t = s.serialize_tuple(6)?;
        for byte in &[a, b, c, d, e, f] {
            t.serialize_element(byte)?;
        }
        t.end()
    }
}

impl<'de> Deserialize<'de> for Held {
    #[inline(never)]
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Bytes;
        impl<'de> serde::de::Visitor<'de> for Bytes {
            type Value = Held;
            fn expecting(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                f.write_str("6 bytes")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Held, A::Error> {
                let mut b = [0u8; 6];
                for (i, byte) in b.iter_mut().enumerate() {
                    *byte = seq
                        .next_element()?
                        .ok_or_else(|| serde::de::Error::invalid_length(i, &self))?;
                }
                let [a, b, c, d, e, f] = b;
                Ok(Held {
                    pid: u16::from_be_bytes([a, b]),
                    digest: [c, d, e, f],
                })
            }
        }
        d.deserialize_tuple(6, Bytes)
    }
}

impl MaxSize for Held {
    const POSTCARD_MAX_SIZE: usize = 6;
}

/// What the receiver reads of a PUBLISH to decide it: its QoS, identifier, DUP and
/// RETAIN flags, and the [`Digest`] of its topic and payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrival {
    /// QoS.
    pub qos: QoS,
    /// The packet identifier (none at QoS 0).
    pub pid: Option<u16>,
    /// DUP.
    pub dup: bool,
    /// RETAIN.
    pub retain: bool,
    /// Its topic and payload.
    pub digest: Digest,
}

impl Arrival {
    /// What the receiver reads of `p`.
    pub fn of(p: &Publish<'_>) -> Self {
        Self {
            qos: p.qos,
            pid: p.pid,
            dup: p.dup,
            retain: p.retain,
            digest: digest(p.topic, p.payload),
        }
    }
}

/// The tag the receiver gives its journal: the caller's, with this one mixed in, which
/// names the record's encoding (the record with tombstones; a journal of the earlier
/// record is refused as another journal's, never misread).
const RECORD_TAG: u32 = 0x7B5E_0002;

/// The receiver's one durable record.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct Record<T, const N: usize> {
    /// The store's state.
    pub state: T,
    /// Messages the store applied.
    pub applied: u32,
    /// Messages the store skipped as duplicates.
    pub skipped: u32,
    /// Messages rejected: by the store, undecodable, or over the maximum size. (Kept
    /// here rather than as the store's own count, since a store that never rejects
    /// still receives payloads it cannot decode.)
    pub rejected: u32,
    /// QoS 2 messages received and not yet released by PUBREL.
    pub held: Vec<Held, N>,
    /// Tombstones: QoS 2 messages released, the oldest first, at most `N`.
    pub released: Vec<Held, N>,
    /// PUBLISHes the broker sent again after their PUBREL, over every run on the
    /// flash: a broker's violation (MQTT 3.1.1 §4.3.3), not applied.
    pub after_pubrel: u32,
}

/// What follows the state in a [`Record`].
type Tail<const N: usize> = (u32, u32, u32, Vec<Held, N>, Vec<Held, N>, u32);

// By hand: the state, then the rest read by one function out of line, which a firmware
// with two stores carries once (derived, each store's copy inlined it all).
impl<'de, T: Deserialize<'de>, const N: usize> Deserialize<'de> for Record<T, N> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Fields<T, const N: usize>(core::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>, const N: usize> serde::de::Visitor<'de> for Fields<T, N> {
            type Value = Record<T, N>;
            fn expecting(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                f.write_str("a receiver's record")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Self::Value, A::Error> {
                let missing = || serde::de::Error::invalid_length(0, &"a receiver's record");
                let state = seq.next_element()?.ok_or_else(missing)?;
                let (applied, skipped, rejected, held, released, after_pubrel) =
                    tail::<A, N>(&mut seq)?;
                Ok(Record {
                    state,
                    applied,
                    skipped,
                    rejected,
                    held,
                    released,
                    after_pubrel,
                })
            }
        }
        d.deserialize_tuple(7, Fields(core::marker::PhantomData))
    }
}

/// A [`Record`]'s fields after its state.
#[inline(never)]
fn tail<'de, A: serde::de::SeqAccess<'de>, const N: usize>(
    seq: &mut A,
) -> Result<Tail<N>, A::Error> {
    fn next<'de, A: serde::de::SeqAccess<'de>, X: Deserialize<'de>>(
        seq: &mut A,
    ) -> Result<X, A::Error> {
        let missing = || serde::de::Error::invalid_length(1, &"a receiver's record");
        seq.next_element()?.ok_or_else(missing)
    }
    Ok((
        next(seq)?,
        next(seq)?,
        next(seq)?,
        next(seq)?,
        next(seq)?,
        next(seq)?,
    ))
}

impl<T, const N: usize> Record<T, N> {
    /// Messages decided (applied, skipped or rejected): the sequence the store reads as
    /// each message's offset. MQTT has no offsets; a redelivery takes a new number.
    pub fn decided(&self) -> u64 {
        u64::from(self.applied) + u64::from(self.skipped) + u64::from(self.rejected)
    }
}

impl<T: MaxSize, const N: usize> MaxSize for Record<T, N> {
    const POSTCARD_MAX_SIZE: usize = T::POSTCARD_MAX_SIZE
        + 4 * u32::POSTCARD_MAX_SIZE
        + 2 * (idem_core::store::varint_len(N) + N * Held::POSTCARD_MAX_SIZE);
}

impl<T, const N: usize> Record<T, N> {
    /// Whether `pid` is held.
    pub fn holds(&self, pid: u16) -> bool {
        has(&self.held, pid)
    }
}

/// Holds `h`, a new message: the tombstone of its identifier is no longer its. A place
/// is free: checked by the caller, and releases only free more.
#[inline(never)]
fn admit<const N: usize>(held: &mut Vec<Held, N>, released: &mut Vec<Held, N>, h: Held) {
    released.retain(|t| t.pid != h.pid);
    let _ = held.push(h);
}

/// Whether `list` has `pid`. Out of line, and generic over nothing but `N` in its
/// caller, so that a firmware with two stores carries one copy (idem-mqtt's board image
/// is within 48 KiB by a few hundred bytes).
#[inline(never)]
fn has(list: &[Held], pid: u16) -> bool {
    list.iter().any(|h| h.pid == pid)
}

/// [`Record::release`] on its two lists: one copy for every store of one `N`.
#[inline(never)]
fn release<const N: usize>(held: &mut Vec<Held, N>, released: &mut Vec<Held, N>, pids: &[u16]) {
    for pid in pids {
        let Some(at) = held.iter().position(|h| h.pid == *pid) else {
            continue;
        };
        let gone = held.remove(at);
        released.retain(|t| t.pid != gone.pid);
        if released.is_full() {
            released.remove(0);
        }
        let _ = released.push(gone); // a place was made
    }
}

/// The record of a receiver over the store `S` with `N` places.
pub type RecordOf<S, const N: usize> = Record<<S as Store>::State, N>;

/// Where the receiver keeps the identifiers it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Keep {
    /// In the record with the effect: QoS 2 is exactly once across resets.
    Flash,
    /// In RAM only, as a client that leaves its session state to the application does:
    /// a reset forgets them, and the broker's next send of a held message is applied
    /// again.
    Ram,
}

/// When a PUBREL's forgetting reaches flash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Release {
    /// In a record of its own, then PUBCOMP: two records a QoS 2 message.
    Now,
    /// In the next message's record, then PUBCOMP: one record a message.
    WithNext,
}

/// What the receiver did with a PUBLISH.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Decided {
    /// The store applied it.
    Applied,
    /// The store skipped it as a duplicate (the message-id store: an id it holds).
    Skipped,
    /// The store rejected it, or it could not be decoded or was over the maximum size:
    /// acknowledged, so the broker stops sending it, and counted.
    Rejected,
    /// A QoS 2 identifier the receiver holds: the broker sent it again before PUBREL.
    /// PUBREC again; nothing applied, nothing written. Or, with DUP 1, a message whose
    /// identifier the receiver released, matching its tombstone: the broker sent it
    /// again after PUBREL ([`Counts::publish_after_pubrel`]); PUBREC again, nothing
    /// applied, the count written.
    Held,
    /// A retained message (RETAIN 1: sent because of a SUBSCRIBE, not a new message):
    /// acknowledged and reported, never applied.
    Retained,
}

/// The acknowledgement a PUBLISH gets once its decision is durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Ack {
    /// PUBACK for a QoS 1 identifier.
    Puback(u16),
    /// PUBREC for a QoS 2 identifier.
    Pubrec(u16),
}

/// What a call returns: its decision and what the caller may now send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply<const N: usize> {
    /// What was done with the PUBLISH (`None` for a PUBREL or a flush).
    pub decided: Option<Decided>,
    /// Identifiers whose forgetting is now durable: send PUBCOMP for each, first.
    pub completed: Vec<u16, N>,
    /// The PUBLISH's own acknowledgement, to send after those.
    pub ack: Option<Ack>,
    /// Records written for it: 0 or 1.
    pub records: u8,
}

impl<const N: usize> Reply<N> {
    const fn empty() -> Self {
        Self {
            decided: None,
            completed: Vec::new(),
            ack: None,
            records: 0,
        }
    }
}

/// Why the receiver could not take a packet. Nothing was written, and nothing may be
/// acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ReceiveError<E> {
    /// The journal, or the flash under it.
    Journal(JournalError<E>),
    /// A new QoS 2 identifier with every place taken: the broker sent more than its
    /// in-flight limit, which must equal the receiver's places.
    Full {
        /// The identifier.
        pid: u16,
        /// The places.
        places: usize,
    },
    /// A QoS 1 or 2 PUBLISH without an identifier.
    NoIdentifier,
    /// A count of decided messages would overflow (after 2^32 of one kind).
    Count,
}

impl<E> From<JournalError<E>> for ReceiveError<E> {
    fn from(e: JournalError<E>) -> Self {
        Self::Journal(e)
    }
}

/// Counts of one receiver's life since it was opened (RAM only).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Records appended.
    pub records: u64,
    /// PUBLISHes decided by the store (applied, skipped or rejected).
    pub decided: u64,
    /// PUBLISHes with DUP 1 (the broker's resends; counted, never used).
    pub redeliveries: u64,
    /// QoS 2 PUBLISHes whose identifier was held: not applied again.
    pub held_again: u64,
    /// Retained messages reported and not applied.
    pub retained: u64,
    /// PUBRELs of identifiers neither held nor released, answered with PUBCOMP.
    pub unknown_releases: u64,
    /// QoS 2 PUBLISHes the broker sent after that message's PUBREL (MQTT 3.1.1 §4.3.3
    /// forbids it): under an identifier whose release waits for its record, or, with
    /// DUP 1, matching a tombstone. Not applied.
    pub publish_after_pubrel: u64,
}

/// A subscriber's receive rules over the store `S`, with `N` places for QoS 2
/// identifiers (the broker's in-flight limit).
pub struct Receiver<S: Store, const N: usize> {
    store: S,
    journal: Journal<RecordOf<S, N>>,
    /// What the flash holds (the newest record), but for what `ram` keeps.
    record: RecordOf<S, N>,
    /// [`Keep::Ram`]: the identifiers held, never written.
    ram: Vec<u16, N>,
    /// Released identifiers whose forgetting waits for the next record.
    releasing: Vec<u16, N>,
    /// PUBLISHes after PUBREL counted and not yet in a record.
    after_pubrel: u32,
    keep: Keep,
    release: Release,
    counts: Counts,
}

impl<S: Store, const N: usize> Receiver<S, N> {
    /// Opens the receiver's journal in `region` and takes its newest record (a blank
    /// region starts from the store's default state). `tag` names the store's state;
    /// the receiver mixes in its record's own. A region written before the
    /// tombstones (a shorter record) is refused ([`JournalError::Foreign`]) and left as it is.
    pub fn open<F: NorFlash>(
        flash: &mut F,
        region: Region,
        tag: u32,
        store: S,
        keep: Keep,
        release: Release,
    ) -> Result<Self, JournalError<F::Error>> {
        const { assert!(N > 0, "a receiver needs a place for an identifier") };
        let (journal, newest) = Journal::open(flash, region, tag ^ RECORD_TAG)?;
        Ok(Self {
            store,
            journal,
            record: newest.unwrap_or_default(),
            ram: Vec::new(),
            releasing: Vec::new(),
            after_pubrel: 0,
            keep,
            release,
            counts: Counts::default(),
        })
    }

    /// Where it keeps the identifiers.
    pub fn keep(&self) -> Keep {
        self.keep
    }

    /// The durable record as the receiver sees it.
    pub fn record(&self) -> &RecordOf<S, N> {
        &self.record
    }

    /// The store's state.
    pub fn state(&self) -> &S::State {
        &self.record.state
    }

    /// The identifiers held, wherever they are kept.
    pub fn held(&self) -> Vec<u16, N> {
        match self.keep {
            Keep::Flash => self.record.held.iter().map(|h| h.pid).collect(),
            Keep::Ram => self.ram.clone(),
        }
    }

    /// Whether `pid` is held.
    pub fn holds(&self, pid: u16) -> bool {
        match self.keep {
            Keep::Flash => self.record.holds(pid),
            Keep::Ram => self.ram.contains(&pid),
        }
    }

    /// How many identifiers are held.
    pub fn held_len(&self) -> usize {
        match self.keep {
            Keep::Flash => self.record.held.len(),
            Keep::Ram => self.ram.len(),
        }
    }

    /// Whether `pid` is released and its tombstone kept: a PUBREL of it is answered
    /// with a plain PUBCOMP.
    pub fn released(&self, pid: u16) -> bool {
        !self.holds(pid) && has(&self.record.released, pid)
    }

    /// Whether `a` is a QoS 2 PUBLISH with DUP 1 that matches a tombstone: a message
    /// released, sent again after its PUBREL.
    pub fn tombstoned(&self, a: &Arrival) -> bool {
        let (Some(pid), true) = (a.pid, a.dup) else {
            return false;
        };
        let t = Held {
            pid,
            digest: a.digest,
        };
        a.qos == QoS::ExactlyOnce && !self.holds(pid) && self.record.released.contains(&t)
    }

    /// PUBLISHes the broker sent after their PUBREL, over every run on the flash: the
    /// record's count and those not yet written.
    pub fn after_pubrel(&self) -> u64 {
        u64::from(self.record.after_pubrel) + u64::from(self.after_pubrel)
    }

    /// The counts since the receiver was opened.
    pub fn counts(&self) -> Counts {
        self.counts
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// After a CONNACK: with session present 0 the broker holds nothing of the session,
    /// so the identifiers held stand for nothing and are forgotten (durably); their
    /// count is returned, since the broker lost what it had not completed (a promise
    /// broken, to report). With session present 1 nothing changes, and the caller must
    /// not SUBSCRIBE again (that would resend retained messages).
    pub fn connected<F: NorFlash>(
        &mut self,
        flash: &mut F,
        session_present: bool,
    ) -> Result<usize, ReceiveError<F::Error>> {
        self.releasing.clear();
        if session_present {
            return Ok(0);
        }
        let lost = self.held_len();
        self.ram.clear();
        if self.record.held.len() + self.record.released.len() > 0 {
            // The broker holds nothing of the session: nothing it could send again.
            self.record.held.clear();
            self.record.released.clear();
            self.write(flash)?;
        }
        Ok(lost)
    }

    /// Decides a PUBLISH whose payload the caller decoded as `payload` (`None`: it could
    /// not be decoded, or the packet was over the maximum size; it is rejected).
    pub fn publish<F: NorFlash>(
        &mut self,
        flash: &mut F,
        p: &Publish<'_>,
        payload: Option<S::Payload>,
    ) -> Result<Reply<N>, ReceiveError<F::Error>> {
        self.decide(flash, &Arrival::of(p), payload)
    }

    /// Decides a PUBLISH from what the receiver reads of it, `a`, and its payload as
    /// the caller decoded it.
    pub fn decide<F: NorFlash>(
        &mut self,
        flash: &mut F,
        a: &Arrival,
        payload: Option<S::Payload>,
    ) -> Result<Reply<N>, ReceiveError<F::Error>> {
        let (qos, pid, dup, retain) = (a.qos, a.pid, a.dup, a.retain);
        if dup {
            self.counts.redeliveries += 1;
        }
        let pid = match (qos, pid) {
            (QoS::AtMostOnce, _) => 0,
            (_, Some(pid)) => pid,
            (_, None) => return Err(ReceiveError::NoIdentifier),
        };
        let mut reply = Reply::empty();
        reply.ack = match qos {
            QoS::AtMostOnce => None,
            QoS::AtLeastOnce => Some(Ack::Puback(pid)),
            QoS::ExactlyOnce => Some(Ack::Pubrec(pid)),
        };
        if qos == QoS::ExactlyOnce && self.holds(pid) {
            self.counts.held_again += 1;
            if self.releasing.contains(&pid) {
                // Its PUBREL came: counted, and written with that release.
                self.counts.publish_after_pubrel += 1;
                self.after_pubrel = self.after_pubrel.saturating_add(1);
            }
            reply.decided = Some(Decided::Held);
            return Ok(reply);
        }
        let tombstone = Held {
            pid,
            digest: a.digest,
        };
        if qos == QoS::ExactlyOnce && dup && self.record.released.contains(&tombstone) {
            // The message released, sent again after its PUBREL: PUBREC, so that the
            // broker moves on, nothing applied; the count written first.
            self.counts.held_again += 1;
            self.counts.publish_after_pubrel += 1;
            self.after_pubrel = self.after_pubrel.saturating_add(1);
            let ack = reply.ack;
            let mut reply = self.rewrite(flash)?;
            (reply.decided, reply.ack) = (Some(Decided::Held), ack);
            return Ok(reply);
        }
        if qos == QoS::ExactlyOnce && !self.has_place() {
            return Err(ReceiveError::Full { pid, places: N });
        }
        if retain {
            // Acknowledged, and reported; nothing applied and nothing written. A reset
            // before the acknowledgement gets it again, as retained again.
            self.counts.retained += 1;
            reply.decided = Some(Decided::Retained);
            return Ok(reply);
        }
        let mut next = self.record.clone();
        let decided = self.judge(&mut next, payload);
        let count = match decided {
            Decided::Applied => &mut next.applied,
            Decided::Skipped => &mut next.skipped,
            _ => &mut next.rejected,
        };
        *count = count.checked_add(1).ok_or(ReceiveError::Count)?;
        let held = (qos == QoS::ExactlyOnce).then_some(tombstone);
        self.commit(flash, next, held)?;
        self.counts.decided += 1;
        reply.records = 1;
        reply.decided = Some(decided);
        reply.completed = core::mem::take(&mut self.releasing);
        Ok(reply)
    }

    /// What the store does with `payload` (`None`: undecodable, rejected), its effect
    /// applied to `next`.
    fn judge(&self, next: &mut RecordOf<S, N>, payload: Option<S::Payload>) -> Decided {
        let Some(payload) = payload else {
            return Decided::Rejected;
        };
        let event = Event {
            offset: next.decided(),
            payload,
        };
        // A store that cannot decide the message (an amount that would overflow the
        // total) rejects it: MQTT would send it again at every reconnect and the stream
        // would never advance.
        match self
            .store
            .check(&next.state, &event)
            .unwrap_or(Outcome::Rejected)
        {
            Outcome::Applied => {
                self.store.apply(&mut next.state, &event);
                Decided::Applied
            }
            Outcome::Skipped => Decided::Skipped,
            Outcome::Rejected => {
                self.store.remember(&mut next.state, &event);
                Decided::Rejected
            }
            // `Outcome` may grow; an outcome this receiver does not know applies nothing.
            _ => Decided::Skipped,
        }
    }

    /// Writes `next` with the releases waiting for a record, the PUBLISHes after PUBREL
    /// counted and, for a QoS 2 message, `held`; then it is the receiver's record.
    fn commit<F: NorFlash>(
        &mut self,
        flash: &mut F,
        mut next: RecordOf<S, N>,
        held: Option<Held>,
    ) -> Result<(), ReceiveError<F::Error>> {
        release(&mut next.held, &mut next.released, &self.releasing);
        next.after_pubrel = next.after_pubrel.saturating_add(self.after_pubrel);
        if let Some(h) = held.filter(|_| self.keep == Keep::Flash) {
            admit(&mut next.held, &mut next.released, h);
        }
        self.journal.append(flash, &next)?;
        self.record = next;
        self.after_pubrel = 0;
        if let Some(h) = held.filter(|_| self.keep == Keep::Ram) {
            let _ = self.ram.push(h.pid);
        }
        self.counts.records += 1;
        Ok(())
    }

    /// A PUBREL of `pid`: forgets it, durably, and allows PUBCOMP; with
    /// [`Release::WithNext`], the forgetting and the PUBCOMP wait for the next record
    /// (or [`Receiver::flush`]) unless every place is then waiting.
    pub fn pubrel<F: NorFlash>(
        &mut self,
        flash: &mut F,
        pid: u16,
    ) -> Result<Reply<N>, ReceiveError<F::Error>> {
        let mut reply = Reply::empty();
        if !self.holds(pid) {
            if !has(&self.record.released, pid) {
                self.counts.unknown_releases += 1;
            }
            let _ = reply.completed.push(pid); // N > 0: one place
            return Ok(reply);
        }
        if self.keep == Keep::Ram {
            self.ram.retain(|h| *h != pid);
            let _ = reply.completed.push(pid);
            return Ok(reply);
        }
        if !self.releasing.contains(&pid) {
            // Fewer than N: every entry is a held identifier.
            let _ = self.releasing.push(pid);
        }
        if self.release == Release::Now || self.releasing.is_full() {
            return self.flush(flash);
        }
        Ok(reply)
    }

    /// Writes the releases that wait for a record, in one record, and allows their
    /// PUBCOMPs. Nothing to do, nothing written.
    pub fn flush<F: NorFlash>(
        &mut self,
        flash: &mut F,
    ) -> Result<Reply<N>, ReceiveError<F::Error>> {
        if self.releasing.is_empty() {
            return Ok(Reply::empty());
        }
        self.rewrite(flash)
    }

    /// Writes the record again with what waits for a record (releases, counts), and
    /// allows the releases' PUBCOMPs.
    fn rewrite<F: NorFlash>(&mut self, flash: &mut F) -> Result<Reply<N>, ReceiveError<F::Error>> {
        let next = self.record.clone();
        self.commit(flash, next, None)?;
        let mut reply = Reply::empty();
        reply.records = 1;
        reply.completed = core::mem::take(&mut self.releasing);
        Ok(reply)
    }

    /// The end of a group of packets taken together, whose records the caller makes
    /// durable with one sync before it sends any of their acknowledgements: with
    /// [`Release::WithNext`], the releases waiting for a record are written now (one
    /// record, the group's last) when every identifier held is waiting for its
    /// PUBCOMP, since the broker, which has sent every PUBREL it owes, may then send
    /// nothing more until those PUBCOMPs come. Otherwise they wait for the next
    /// message's record, or for [`Receiver::flush`] when the link goes quiet.
    pub fn group_end<F: NorFlash>(
        &mut self,
        flash: &mut F,
    ) -> Result<Reply<N>, ReceiveError<F::Error>> {
        if self.keep == Keep::Flash && self.releasing.len() == self.record.held.len() {
            return self.flush(flash);
        }
        Ok(Reply::empty())
    }

    /// Whether a new QoS 2 identifier has a place (counting the places that releases
    /// waiting for a record will free). A caller whose broker sends more than its
    /// in-flight limit (Mosquitto 2.0.11 does, after a completion) holds such a PUBLISH
    /// back, unanswered, until a PUBREL frees a place.
    pub fn has_place(&self) -> bool {
        self.held_len() - self.releasing.len() < N
    }

    /// Identifiers whose PUBCOMP waits for a record.
    pub fn releasing(&self) -> &[u16] {
        &self.releasing
    }

    fn write<F: NorFlash>(&mut self, flash: &mut F) -> Result<(), JournalError<F::Error>> {
        self.journal.append(flash, &self.record)?;
        self.counts.records += 1;
        Ok(())
    }
}
