//! The subscriber's session around the [`Receiver`], without I/O: what to send after
//! CONNACK (SUBSCRIBE, at every connection), which packets a subscriber refuses, and
//! what it does with a new QoS 2 PUBLISH that finds every place for an identifier taken:
//! it waits, unanswered and undecided, in a queue whose room the caller gives
//! ([`Client::with_waiting`]), and is decided in the order it came once a PUBREL frees
//! a place ([`Client::take_waiting`]). A PUBLISH under an identifier held that arrives
//! while others wait is answered behind them: PUBRECs go out in the order their
//! PUBLISHes came (MQTT 3.1.1 §4.6 [MQTT-4.6.0-3], the same rule in MQTT 5 §4.6). With
//! the queue full, it is left unanswered and
//! unapplied ([`Left::Unanswered`]), the client reads on (the PUBRELs behind it free
//! places), and asks for a new connection once the queue is empty and a place free, at
//! which the broker sends it again (MQTT 3.1.1 §4.4). So any broker's in-flight limit is
//! taken in bounded memory. The host's
//! `idem mqtt consume` drives it over TCP; a board drives it over its link. Each call
//! returns an [`Outbox`]: the records it made durable, and then the packets the caller
//! may send, in order, once those records are durable on its flash (a host syncs its
//! file first).
//!
//! At MQTT 5 ([`Protocol::V5`]) the session says what MQTT 3.1.1 cannot: CONNECT carries
//! Clean Start 0, the Session Expiry Interval of [`Config::session_expiry`] (an absent
//! one is 0, and the server ends the session when the connection closes, MQTT 5
//! §3.1.2.11.2; [`SESSION_EXPIRY_S`] never ends it), and a Receive Maximum of the
//! receiver's places (§3.1.2.11.3). A server must not send more unacknowledged QoS 1
//! and 2 PUBLISHes than that (§4.9); one that does has each such PUBLISH counted
//! ([`Client::past_receive_maximum`]). Mosquitto
//! 2.0.11 does (tests/tests/mqtt5.rs), and resends all of them at every
//! reconnection, so closing at once with DISCONNECT 0x93 (§3.3.4) would repeat forever:
//! the client keeps the MQTT 3.1.1 rule (leave it unanswered, read on, reconnect once a
//! place is free), and that reconnection's DISCONNECT carries 0x93 (Receive Maximum
//! exceeded). A PUBREL of an identifier not held is answered PUBCOMP 0x92 (Packet
//! Identifier not found, §3.7.2.1).

use embedded_storage::nor_flash::NorFlash;
use heapless::Vec;
use idem_core::store::Store;

use crate::codec::v5::reason;
use crate::codec::{
    self, ConnackProperties, EncodeError, Frame, FrameError, Framer, Incoming, Outgoing, Protocol,
    Publish, QoS,
};
use crate::receiver::{Ack, Arrival, Counts, Decided, Digest, Keep, ReceiveError, Receiver, Reply};

/// What the caller sends: its bytes come from [`Client::encode`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Send {
    /// CONNECT, clean session 0.
    Connect,
    /// SUBSCRIBE to the filter at the QoS.
    Subscribe,
    /// A PUBLISH's acknowledgement.
    Ack(Ack),
    /// PUBCOMP of a released identifier.
    Pubcomp(u16),
    /// PUBCOMP of a PUBREL whose identifier is not held: at MQTT 5 with reason 0x92
    /// (Packet Identifier not found, §3.7.2.1).
    PubcompUnknown(u16),
    /// PINGREQ.
    Pingreq,
    /// DISCONNECT.
    Disconnect,
    /// DISCONNECT with a reason code at MQTT 5 (0x93, 0x95); a plain DISCONNECT at
    /// MQTT 3.1.1.
    DisconnectWith(u8),
}

/// The Session Expiry Interval that never ends, in seconds: 0xFFFFFFFF, "the Session
/// does not expire" (MQTT 5 §3.1.2.11.2), as clean session 0 keeps it at MQTT 3.1.1; a
/// session's choice in [`Config::session_expiry`]. An absent interval is 0: the server
/// would end the session, with what it holds in flight, when the connection closes.
pub const SESSION_EXPIRY_S: u32 = u32::MAX;

/// What a broker sends only to a client that publishes or unsubscribes, which this one
/// never does.
const NOT_A_PUBLISHERS: [&str; 4] = [
    "PUBACK, which a subscriber that publishes nothing never receives",
    "PUBREC, which a subscriber that publishes nothing never receives",
    "PUBCOMP, which a subscriber that publishes nothing never receives",
    "UNSUBACK, which a subscriber that never unsubscribes never receives",
];

/// The keep-alive a session asks for in CONNECT, in seconds: longer than the worst flash
/// stall. The caller sends PINGREQ once it has sent nothing for half of it
/// ([`ping_due`]).
pub const KEEP_ALIVE_S: u16 = 60;

/// How long a connection may stay silent after CONNECT before the caller closes it, in
/// seconds: MQTT 3.1.1 §3.1.4 leaves "a reasonable amount of time" to the application; a
/// broker on loopback answers in milliseconds.
pub const CONNACK_WAIT_S: u16 = 10;

/// Connection attempts in a row before the caller gives up, in one sentence.
pub const CONNECT_TRIES: u32 = 5;

/// The wait after the first failed attempt, in milliseconds; each next one doubles,
/// and the caller adds up to half again of jitter ([`backoff_ms`]).
pub const BACKOFF_MS: u32 = 100;

/// Whether a PINGREQ is due after `ms` milliseconds without sending.
pub const fn ping_due(ms: u64) -> bool {
    ms >= KEEP_ALIVE_S as u64 * 1000 / 2
}

/// The wait after failed attempt `n` (from 1), before jitter, in milliseconds.
pub const fn backoff_ms(n: u32) -> u32 {
    let doublings = n.saturating_sub(1);
    BACKOFF_MS << if doublings > 15 { 15 } else { doublings }
}

/// What one call did: records made durable, then the packets to send after them, in
/// order ([`Outbox::packets`]): the PUBCOMPs its records allow, then the rest.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outbox<const N: usize> {
    /// Records written (the caller makes them durable before it sends anything).
    pub records: u8,
    /// Identifiers whose forgetting is durable: PUBCOMP for each, first.
    pub completed: Vec<u16, N>,
    /// The packets after those: an acknowledgement, or SUBSCRIBE after CONNACK.
    pub send: Vec<Send, 2>,
    /// What was done with the PUBLISH this call took, if it took one.
    pub decided: Option<Decided>,
    /// The packet identifier of the PUBLISH this call decided, if it had one: from a
    /// waiting PUBLISH ([`Client::take_waiting`]), the caller's way to know which.
    pub pid: Option<u16>,
    /// What became of the PUBLISH this call took and did not decide.
    pub left: Option<Left>,
}

/// A new QoS 2 PUBLISH that found every place taken: not decided, not answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Left {
    /// It waits in the client's queue, decided in the order it came once a place is
    /// free ([`Client::take_waiting`]); one under an identifier held, answered PUBREC
    /// in its turn.
    Waiting,
    /// The queue was full: left unanswered and unapplied, counted
    /// ([`Client::unanswered`]); the broker sends it again at the next connection,
    /// which [`Client::resend_due`] asks for.
    Unanswered,
}

/// A QoS 2 PUBLISH waiting in a [`Client`]'s queue: a new one waits for a place, with
/// what deciding it takes, its payload decoded (`None`: undecodable, outside the filter
/// or over the maximum size, rejected when decided); one under an identifier held
/// ([`WaitingKind::Held`]) was decided when it came and waits only for its PUBREC's turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting<P> {
    /// Its packet identifier.
    pub pid: u16,
    /// DUP.
    pub dup: bool,
    /// Its topic and payload ([`crate::receiver::digest`]).
    pub digest: Digest,
    /// What it waits for.
    pub kind: WaitingKind,
    /// The payload, decoded.
    pub payload: Option<P>,
}

/// What a [`Waiting`] PUBLISH is (one byte: a slot is no larger than with two flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum WaitingKind {
    /// A new message (RETAIN 0), waiting for a place.
    New,
    /// A retained message (RETAIN 1), waiting for a place: reported, never applied.
    Retained,
    /// Under an identifier held when it came: a resend, decided then
    /// ([`Decided::Held`]); its PUBREC waits behind those of the PUBLISHes that came
    /// before it (MQTT 3.1.1 §4.6 [MQTT-4.6.0-3]), and it needs no place.
    Held,
}

/// The room of a client without a queue: a PUBLISH that finds every place taken is
/// left unanswered at once.
pub type NoWaiting<P> = [Option<Waiting<P>>; 0];

impl<const N: usize> Outbox<N> {
    /// The packets to send, in order: the PUBCOMPs, then the rest.
    pub fn packets(&self) -> impl Iterator<Item = Send> + '_ {
        let pubcomps = self.completed.iter().map(|pid| Send::Pubcomp(*pid));
        pubcomps.chain(self.send.iter().copied())
    }

    /// Whether there is nothing to send.
    pub fn is_empty(&self) -> bool {
        self.completed.is_empty() && self.send.is_empty()
    }

    fn take(&mut self, reply: Reply<N>) {
        self.records = self.records.saturating_add(reply.records);
        // A call takes one reply that completes anything: at most N.
        for pid in reply.completed {
            let _ = self.completed.push(pid);
        }
        if let Some(ack) = reply.ack {
            let _ = self.send.push(Send::Ack(ack));
        }
        if reply.decided.is_some() {
            self.decided = reply.decided;
        }
    }
}

/// A first-in first-out queue over the caller's slots. Written here, not heapless's
/// `Deque`, because that one refuses a capacity of 0 (a client without a queue) and
/// keeps its room inline, where a host's thousands of slots belong on its heap.
struct Queue<P, Q> {
    slots: Q,
    item: core::marker::PhantomData<fn() -> P>,
    head: usize,
    len: usize,
    /// Entries under an identifier held ([`WaitingKind::Held`]).
    held: usize,
}

impl<P, Q: AsRef<[Option<Waiting<P>>]> + AsMut<[Option<Waiting<P>>]>> Queue<P, Q> {
    fn capacity(&self) -> usize {
        self.slots.as_ref().len()
    }

    fn push(&mut self, w: Waiting<P>) -> bool {
        let cap = self.capacity();
        if self.len == cap {
            return false;
        }
        self.held += usize::from(w.kind == WaitingKind::Held);
        self.slots.as_mut()[(self.head + self.len) % cap] = Some(w);
        self.len += 1;
        true
    }

    fn front(&self) -> Option<&Waiting<P>> {
        if self.len == 0 {
            return None;
        }
        self.slots.as_ref()[self.head].as_ref()
    }

    fn pop(&mut self) -> Option<Waiting<P>> {
        if self.len == 0 {
            return None;
        }
        let cap = self.capacity();
        let w = self.slots.as_mut()[self.head].take();
        self.head = (self.head + 1) % cap;
        self.len -= 1;
        self.held -= w
            .as_ref()
            .map_or(0, |w| usize::from(w.kind == WaitingKind::Held));
        w
    }

    /// Takes the first entry under an identifier held out of the queue, wherever it
    /// is: those behind it move up one, in order.
    fn take_held(&mut self) -> Option<Waiting<P>> {
        let cap = self.capacity();
        let at = (0..self.len).find(|&i| {
            let slot = &self.slots.as_ref()[(self.head + i) % cap];
            slot.as_ref().is_some_and(|w| w.kind == WaitingKind::Held)
        })?;
        let w = self.slots.as_mut()[(self.head + at) % cap].take();
        for i in at..self.len - 1 {
            let next = self.slots.as_mut()[(self.head + i + 1) % cap].take();
            self.slots.as_mut()[(self.head + i) % cap] = next;
        }
        self.len -= 1;
        self.held -= 1;
        w
    }

    fn clear(&mut self) {
        while self.pop().is_some() {}
        self.head = 0;
    }
}

/// The session's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config<'a> {
    /// The client identifier: the broker keeps the session under it.
    pub client_id: &'a str,
    /// The topic or filter to subscribe to.
    pub filter: &'a str,
    /// The QoS to subscribe at.
    pub qos: QoS,
    /// Seconds; the caller sends PINGREQ after half of it without sending.
    pub keep_alive: u16,
    /// The protocol spoken.
    pub protocol: Protocol,
    /// At MQTT 5, the Maximum Packet Size announced in CONNECT (§3.1.2.11.4): the
    /// server discards a larger PUBLISH unsent, and a larger packet that arrives is a
    /// protocol error. At least the largest PUBLISH the receiver takes.
    pub maximum_packet_size: u32,
    /// At MQTT 5, the Session Expiry Interval asked in CONNECT, in seconds
    /// (§3.1.2.11.2). 0 leaves it out, and an absent interval is 0: the server ends the
    /// session, with the QoS 2 messages in flight, when the connection closes, so a
    /// receiver that keeps its session durable asks for more; [`SESSION_EXPIRY_S`]
    /// never ends it, as clean session 0 keeps it at MQTT 3.1.1. Not sent at MQTT 3.1.1.
    pub session_expiry: u32,
}

/// Where the session is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Phase {
    /// CONNECT sent, CONNACK awaited.
    Connecting,
    /// SUBSCRIBE sent, SUBACK awaited (the session's PUBLISHes may come first).
    Subscribing,
    /// Receiving.
    Receiving,
}

/// Why the session stops. Nothing undurable was acknowledged; the caller closes the
/// connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ClientError<E> {
    /// The receiver (its journal, its store, its places).
    Receive(ReceiveError<E>),
    /// CONNACK refused the connection with this return code (MQTT 3.1.1 §3.2.2.3).
    Refused(u8),
    /// SUBACK refused the subscription with this return code (0x80 at MQTT 3.1.1,
    /// §3.9.3; a reason code at MQTT 5, §3.9.3: [`codec::suback_name_at`] names it).
    SubscriptionRefused(u8),
    /// A packet a subscriber does not take here, in words (`a second CONNACK`).
    Unexpected(&'static str),
    /// The server sent DISCONNECT with this reason code (MQTT 5 §3.14.2.1) and closes
    /// the connection.
    Disconnected(u8),
}

impl<E> From<ReceiveError<E>> for ClientError<E> {
    fn from(e: ReceiveError<E>) -> Self {
        Self::Receive(e)
    }
}

/// A subscriber over the store `S`, with `N` places for QoS 2 identifiers and the
/// slots `Q` for new QoS 2 PUBLISHes waiting for a place (none unless given:
/// [`Client::with_waiting`]).
pub struct Client<S: Store, const N: usize, Q = NoWaiting<<S as Store>::Payload>> {
    receiver: Receiver<S, N>,
    waiting: Queue<S::Payload, Q>,
    /// New QoS 2 PUBLISHes that waited in the queue for a place, in all.
    pub waited: u64,
    /// The most that waited at once.
    pub most_waiting: usize,
    phase: Phase,
    protocol: Protocol,
    /// PUBLISHes past the Receive Maximum on this connection.
    past_receive_maximum_now: u32,
    /// At MQTT 5: new QoS 2 PUBLISHes that arrived with every place (the Receive
    /// Maximum announced) held unacknowledged, a server past its limit (§4.9), in all.
    pub past_receive_maximum: u64,
    /// At MQTT 5: the last CONNACK's properties.
    pub connack: ConnackProperties,
    /// QoS 2 PUBLISHes with DUP 0 under an identifier held whose PUBREL has not come:
    /// a new message under an identifier the broker has not freed (a sender gives a new
    /// message an unused identifier, MQTT 3.1.1 §4.3.3 [MQTT-4.3.3-1], one is freed
    /// only by its PUBCOMP, §2.3.1, MQTT 5 [MQTT-2.2.1-4]; a resend carries DUP 1,
    /// §3.3.1.1 [MQTT-3.3.1-1]), a broker's violation: taken for a resend of the
    /// message held and not applied.
    pub held_identifier_reused: u64,
    /// PUBRECs of resends under an identifier held sent ahead of a new PUBLISH that
    /// came before them and waits for a place (every place held): without them no
    /// PUBREL would come to free one ([`Client::take_waiting`]).
    pub pubrec_ahead: u64,
    /// QoS 2 PUBLISHes left unanswered on this connection, every place taken.
    unanswered_now: u32,
    /// QoS 2 PUBLISHes left unanswered, every place taken, in all: each comes again.
    pub unanswered: u64,
    /// Connections closed by the session itself so that the broker sends again what it
    /// left unanswered ([`Client::resend_due`]).
    pub resend_reconnects: u32,
    /// The last CONNACK's session present.
    pub session_present: bool,
    /// Identifiers held when a CONNACK said session present 0, in all.
    pub lost_identifiers: u64,
    /// The QoS the broker granted, once it has.
    pub granted: Option<QoS>,
    /// CONNACKs that said session present 0.
    pub new_sessions: u32,
    /// CONNACKs that said session present 0 for a session begun: on a record begun in
    /// an earlier run, or after an earlier CONNACK of this one (whatever it said).
    pub sessions_lost: u32,
    /// A CONNACK accepted this run.
    connected: bool,
    /// PUBLISHes on a topic outside the filter, rejected.
    pub foreign: u64,
    /// PUBLISHes (not retained) received at QoS 0, 1 and 2.
    pub received_at: [u64; 3],
    /// The receiver's record had begun when the session was opened (a resumed run).
    pub resumed: bool,
}

/// A way in which MQTT's promise did not hold for a session: a report names each, and
/// never grades such a run exact, whatever its total.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Broken {
    /// Session present 0 for a session already begun: the broker lost it, with what it
    /// had queued; `identifiers` the receiver held then.
    SessionLost {
        /// QoS 2 identifiers held and forgotten.
        identifiers: u64,
    },
    /// PUBLISHes on topics outside the filter (another subscription of the session),
    /// rejected.
    ForeignTopics(u64),
    /// The broker granted a lower QoS than the session asked for.
    Downgraded {
        /// The QoS granted.
        granted: QoS,
    },
    /// PUBLISHes that arrived at QoS 0 (as their publisher sent them) below the QoS
    /// asked: a reset loses any the broker had sent.
    AtQos0(u64),
    /// PUBLISHes that arrived at QoS 1 below the QoS asked, into a store that applies a
    /// resent one again.
    AtQos1(u64),
    /// QoS 2 with the identifiers in RAM, on a session that resumed after a stop.
    IdentifiersInRam,
    /// QoS 1 into a store that applies a resent message again.
    Qos1WithoutDedup,
}

impl<S: Store, const N: usize> Client<S, N> {
    /// A session around `receiver`, about to connect, without a queue.
    pub fn new(receiver: Receiver<S, N>) -> Self {
        Self::with_waiting(receiver, [])
    }
}

impl<S: Store, const N: usize, Q> Client<S, N, Q>
where
    Q: AsRef<[Option<Waiting<S::Payload>>]> + AsMut<[Option<Waiting<S::Payload>>]>,
{
    /// A session around `receiver`, about to connect, whose new QoS 2 PUBLISHes wait
    /// in `slots` (as many as it has, each empty) while every place is taken: an array
    /// on a board, a boxed slice on a host.
    pub fn with_waiting(receiver: Receiver<S, N>, slots: Q) -> Self {
        let record = receiver.record();
        let resumed = record.decided() > 0 || !record.held.is_empty() || record.after_pubrel > 0;
        Self {
            receiver,
            waiting: Queue {
                slots,
                item: core::marker::PhantomData,
                head: 0,
                len: 0,
                held: 0,
            },
            waited: 0,
            most_waiting: 0,
            phase: Phase::Connecting,
            protocol: Protocol::V311,
            past_receive_maximum_now: 0,
            past_receive_maximum: 0,
            connack: ConnackProperties::default(),
            held_identifier_reused: 0,
            pubrec_ahead: 0,
            unanswered_now: 0,
            unanswered: 0,
            resend_reconnects: 0,
            session_present: false,
            lost_identifiers: 0,
            granted: None,
            new_sessions: 0,
            sessions_lost: 0,
            connected: false,
            foreign: 0,
            received_at: [0; 3],
            resumed,
        }
    }

    /// The session at `protocol` (MQTT 3.1.1 unless asked).
    pub fn with_protocol(mut self, protocol: Protocol) -> Self {
        self.protocol = protocol;
        self
    }

    /// The protocol spoken.
    pub fn protocol(&self) -> Protocol {
        self.protocol
    }

    /// The receiver.
    pub fn receiver(&self) -> &Receiver<S, N> {
        &self.receiver
    }

    /// The receiver's counts.
    pub fn counts(&self) -> Counts {
        self.receiver.counts()
    }

    /// Where the session is.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// PUBLISHes waiting for a place now.
    pub fn waiting(&self) -> usize {
        self.waiting.len
    }

    /// The queue's room.
    pub fn waiting_room(&self) -> usize {
        self.waiting.capacity()
    }

    /// A new connection: the first packet to send. What was left unanswered or waited
    /// on the old one the broker sends again (MQTT 3.1.1 §4.4): the queue is emptied.
    pub fn connect(&mut self) -> Send {
        self.phase = Phase::Connecting;
        self.waiting.clear();
        self.unanswered_now = 0;
        self.past_receive_maximum_now = 0;
        Send::Connect
    }

    /// Whether the caller should close this connection and connect again: it left a
    /// PUBLISH unanswered, nothing waits, and a place is free now. A broker sends every unacknowledged
    /// PUBLISH again when a session resumes (MQTT 3.1.1 §4.4); MQTT 3.1.1 has no other
    /// way to ask for it. The caller asks when the link is quiet (the broker has
    /// stopped sending), sends DISCONNECT (the session is kept: clean session 0) and
    /// counts it with [`Client::resending`].
    pub fn resend_due(&self) -> bool {
        self.unanswered_now > 0 && self.waiting.len == 0 && self.receiver.has_place()
    }

    /// Decides the PUBLISH that waited longest, if one waits and a place is free: its
    /// record written, its PUBREC to send once that is durable ([`Outbox::pid`] names
    /// it). One under an identifier held needs no place: its PUBREC, its turn come. The
    /// caller calls it after each call until it returns `None`, one decision (one
    /// record) at a time.
    pub fn take_waiting<F: NorFlash>(
        &mut self,
        flash: &mut F,
    ) -> Result<Option<Outbox<N>>, ClientError<F::Error>> {
        let mut out = Outbox::default();
        let front = self.waiting.front();
        if let Some(pid) = front.filter(|w| w.kind == WaitingKind::Held).map(|w| w.pid) {
            self.waiting.pop();
            let _ = out.send.push(Send::Ack(Ack::Pubrec(pid))); // one of two
            (out.decided, out.pid) = (Some(Decided::Held), Some(pid));
            return Ok(Some(out));
        }
        if !self.receiver.has_place() {
            // The new PUBLISH first in the queue waits for a place, and a place frees
            // only at a PUBREL, which the broker sends only once it has the PUBREC of
            // an identifier held: after a reconnection, those of the resends queued
            // behind it. Their PUBRECs go out ahead of it, the only way on (§4.6's
            // order otherwise kept, [MQTT-4.6.0-3]): counted.
            let Some(w) = self.waiting.take_held() else {
                return Ok(None);
            };
            self.pubrec_ahead += 1;
            let _ = out.send.push(Send::Ack(Ack::Pubrec(w.pid))); // one of two
            (out.decided, out.pid) = (Some(Decided::Held), Some(w.pid));
            return Ok(Some(out));
        }
        let Some(w) = self.waiting.pop() else {
            return Ok(None);
        };
        let before = self.receiver.counts().records;
        let arrival = Arrival {
            qos: QoS::ExactlyOnce,
            pid: Some(w.pid),
            dup: w.dup,
            retain: w.kind == WaitingKind::Retained,
            digest: w.digest,
        };
        let reply = self.receiver.decide(flash, &arrival, w.payload)?;
        out.take(reply);
        out.pid = Some(w.pid);
        out.records = (self.receiver.counts().records - before) as u8;
        Ok(Some(out))
    }

    /// The caller closes the connection for [`Client::resend_due`]: counted. The
    /// DISCONNECT to send: at MQTT 5, with 0x93 (Receive Maximum exceeded) when the
    /// server sent past the Receive Maximum on this connection.
    pub fn resending(&mut self) -> Send {
        self.resend_reconnects = self.resend_reconnects.saturating_add(1);
        if self.past_receive_maximum_now > 0 {
            Send::DisconnectWith(reason::RECEIVE_MAXIMUM_EXCEEDED)
        } else {
            Send::Disconnect
        }
    }

    /// Encodes `send` with `config` into `buf`; its length.
    pub fn encode(config: &Config<'_>, send: Send, buf: &mut [u8]) -> Result<usize, EncodeError> {
        let v5 = config.protocol == Protocol::V5;
        let p = match send {
            Send::Connect if v5 => Outgoing::Connect5 {
                client_id: config.client_id,
                keep_alive: config.keep_alive,
                clean_start: false,
                session_expiry: config.session_expiry,
                receive_maximum: u16::try_from(N).unwrap_or(u16::MAX),
                maximum_packet_size: config.maximum_packet_size,
            },
            Send::Connect => Outgoing::Connect {
                client_id: config.client_id,
                keep_alive: config.keep_alive,
                clean_session: false,
            },
            Send::Subscribe => Outgoing::Subscribe {
                pid: 1,
                filter: config.filter,
                qos: config.qos,
            },
            Send::Ack(Ack::Puback(pid)) => Outgoing::Puback(pid),
            Send::Ack(Ack::Pubrec(pid)) => Outgoing::Pubrec(pid),
            Send::Pubcomp(pid) => Outgoing::Pubcomp(pid),
            Send::PubcompUnknown(pid) if v5 => {
                Outgoing::PubcompReason(pid, reason::PACKET_IDENTIFIER_NOT_FOUND)
            }
            Send::PubcompUnknown(pid) => Outgoing::Pubcomp(pid),
            Send::Pingreq => Outgoing::Pingreq,
            Send::Disconnect | Send::DisconnectWith(_) if v5 => match send {
                Send::DisconnectWith(r) => Outgoing::DisconnectReason(r),
                _ => Outgoing::DisconnectReason(reason::SUCCESS),
            },
            Send::Disconnect | Send::DisconnectWith(_) => Outgoing::Disconnect,
        };
        codec::encode_at(&p, config.protocol, buf)
    }

    /// Takes one packet from the broker; `decode` reads the payload of a PUBLISH whose
    /// topic matches `filter` (one that does not is rejected and counted).
    pub fn on_packet<F: NorFlash>(
        &mut self,
        flash: &mut F,
        packet: Incoming<'_>,
        filter: &str,
        decode: impl Fn(&[u8]) -> Option<S::Payload>,
    ) -> Result<Outbox<N>, ClientError<F::Error>> {
        let before = self.receiver.counts().records;
        let mut out = Outbox::default();
        match packet {
            Incoming::Connack {
                code: 0,
                session_present,
                properties,
            } if self.phase == Phase::Connecting => {
                self.session_present = session_present;
                self.connack = properties;
                if !session_present {
                    self.new_sessions += 1;
                    if self.resumed || self.connected {
                        self.sessions_lost += 1;
                    }
                }
                self.connected = true;
                self.lost_identifiers += self.receiver.connected(flash, session_present)? as u64;
                // SUBSCRIBE at every connection, the session present or not: the session
                // may hold no subscription (a connection lost before SUBACK), or one to
                // another filter or QoS. A SUBSCRIBE of the filter it holds replaces it
                // without interrupting the flow of publications, and resends the
                // topic's retained message with RETAIN 1 (MQTT 3.1.1 §3.8.4, §3.3.1.3),
                // which the receiver reports and never applies.
                self.phase = Phase::Subscribing;
                let _ = out.send.push(Send::Subscribe);
            }
            Incoming::Connack { code, .. } if self.phase == Phase::Connecting => {
                return Err(ClientError::Refused(code));
            }
            Incoming::Connack { .. } => return Err(ClientError::Unexpected("a second CONNACK")),
            _ if self.phase == Phase::Connecting => {
                return Err(ClientError::Unexpected("a packet before its CONNACK"));
            }
            Incoming::Suback {
                granted, reason, ..
            } => self.suback(granted, reason)?,
            Incoming::Publish(p) => {
                if !p.retain {
                    self.received_at[usize::from(p.qos.level())] += 1;
                }
                // A topic outside the filter: the session holds another subscription
                // (an earlier one under this client id). Acknowledged, so that the
                // broker stops sending it, and rejected: it is not this stream's.
                let payload = if codec::matches(filter, p.topic) {
                    decode(p.payload)
                } else {
                    self.foreign += 1;
                    None
                };
                self.publish(flash, &p, payload, &mut out)?;
            }
            Incoming::Pubrel(pid) => self.pubrel(flash, pid, &mut out)?,
            Incoming::Disconnect(code) => return Err(ClientError::Disconnected(code)),
            Incoming::AckRefused { kind, .. } => {
                let which = usize::from(kind).saturating_sub(4).min(2);
                return Err(ClientError::Unexpected(NOT_A_PUBLISHERS[which]));
            }
            Incoming::Pingresp => {}
            Incoming::Puback(_) => return Err(ClientError::Unexpected(NOT_A_PUBLISHERS[0])),
            Incoming::Pubrec(_) => return Err(ClientError::Unexpected(NOT_A_PUBLISHERS[1])),
            Incoming::Pubcomp(_) => return Err(ClientError::Unexpected(NOT_A_PUBLISHERS[2])),
            Incoming::Unsuback(_) => return Err(ClientError::Unexpected(NOT_A_PUBLISHERS[3])),
        }
        // Every record written, a session's forgetting at CONNACK included.
        out.records = (self.receiver.counts().records - before) as u8;
        Ok(out)
    }

    /// A PUBLISH over the maximum size, of which only its QoS and identifier were read:
    /// acknowledged and rejected, as an undecodable one.
    pub fn on_oversized<F: NorFlash>(
        &mut self,
        flash: &mut F,
        qos: QoS,
        pid: Option<u16>,
    ) -> Result<Outbox<N>, ClientError<F::Error>> {
        let mut out = Outbox::default();
        let p = Publish {
            dup: false,
            qos,
            pid,
            retain: false,
            topic: "",
            payload: &[],
        };
        self.publish(flash, &p, None, &mut out)?;
        Ok(out)
    }

    /// The link is quiet: the releases that wait for a record are written alone.
    pub fn on_quiet<F: NorFlash>(
        &mut self,
        flash: &mut F,
    ) -> Result<Outbox<N>, ClientError<F::Error>> {
        let mut out = Outbox::default();
        out.take(self.receiver.flush(flash)?);
        Ok(out)
    }

    /// The packets one read brought are all taken: the releases waiting for a record
    /// are written now if the broker waits for their PUBCOMPs
    /// ([`Receiver::group_end`]), in the group's one sync.
    pub fn on_group_end<F: NorFlash>(
        &mut self,
        flash: &mut F,
    ) -> Result<Outbox<N>, ClientError<F::Error>> {
        let mut out = Outbox::default();
        out.take(self.receiver.group_end(flash)?);
        Ok(out)
    }

    /// Where the promise did not hold for this session, asked at `asked` into a store
    /// that skips a resent message (`idempotent`) or not.
    pub fn broken(&self, asked: QoS, idempotent: bool) -> Vec<Broken, 7> {
        let mut out = Vec::new();
        let mut note = |b| {
            let _ = out.push(b); // seven kinds, seven places
        };
        // A first session on a record that had not begun is no loss.
        if self.lost_identifiers > 0 || self.sessions_lost > 0 {
            note(Broken::SessionLost {
                identifiers: self.lost_identifiers,
            });
        }
        if self.foreign > 0 {
            note(Broken::ForeignTopics(self.foreign));
        }
        if let Some(granted) = self.granted.filter(|g| *g < asked) {
            note(Broken::Downgraded { granted });
        }
        let [at0, at1, _] = self.received_at;
        if at0 > 0 && asked > QoS::AtMostOnce {
            note(Broken::AtQos0(at0));
        } else if at1 > 0 && asked == QoS::ExactlyOnce && !idempotent {
            note(Broken::AtQos1(at1));
        }
        if self.receiver.keep() == Keep::Ram && asked == QoS::ExactlyOnce && self.resumed {
            note(Broken::IdentifiersInRam);
        }
        if asked == QoS::AtLeastOnce && !idempotent {
            note(Broken::Qos1WithoutDedup);
        }
        out
    }

    /// A PUBREL: PUBCOMP once its release is durable; for an identifier released
    /// before (its tombstone kept), at once; for one neither held nor released, at once
    /// (at MQTT 5 with 0x92, §3.7.2.1).
    fn pubrel<F: NorFlash>(
        &mut self,
        flash: &mut F,
        pid: u16,
        out: &mut Outbox<N>,
    ) -> Result<(), ClientError<F::Error>> {
        let unknown = self.receiver.counts().unknown_releases;
        let reply = self.receiver.pubrel(flash, pid)?;
        if self.receiver.counts().unknown_releases == unknown {
            out.take(reply);
        } else {
            let _ = out.send.push(Send::PubcompUnknown(pid)); // the first of two
        }
        Ok(())
    }

    fn publish<F: NorFlash>(
        &mut self,
        flash: &mut F,
        p: &Publish<'_>,
        payload: Option<S::Payload>,
        out: &mut Outbox<N>,
    ) -> Result<(), ClientError<F::Error>> {
        let qos2 = p.pid.filter(|_| p.qos == QoS::ExactlyOnce);
        let arrival = Arrival::of(p);
        let held = qos2.filter(|pid| self.receiver.holds(*pid));
        if let Some(pid) = held {
            self.note_reuse(pid, p.dup);
        }
        // A message released, sent again after its PUBREL (its tombstone): answered as a
        // resend, in its turn, and needs no place; with every place held, waiting for one
        // it would stall the session.
        let again = qos2.filter(|_| held.is_none() && self.receiver.tombstoned(&arrival));
        let known = held.or(again);
        let new_qos2 = qos2.is_some() && known.is_none();
        // Every identifier of the Receive Maximum held or waiting for a place, none
        // PUBCOMPed: the server is past its limit (MQTT 5 §4.9).
        let in_flight = self.receiver.held_len() + self.waiting.len - self.waiting.held;
        if new_qos2 && self.protocol == Protocol::V5 && in_flight >= N {
            self.past_receive_maximum_now = self.past_receive_maximum_now.saturating_add(1);
            self.past_receive_maximum += 1;
        }
        let waits = self.waiting.len > 0 || (new_qos2 && !self.receiver.has_place());
        match qos2 {
            // Not answered now: a new one is not decided, nothing is written, so a reset
            // here loses nothing and the broker sends it again at the next connection
            // (§4.4); one under an identifier held is decided (Held, nothing written) and
            // its PUBREC waits behind the others' (§4.6 [MQTT-4.6.0-3]).
            Some(pid) if waits => self.wait(flash, p, pid, known.is_some(), payload, out),
            _ => {
                out.take(self.receiver.decide(flash, &arrival, payload)?);
                if out.decided.is_some() {
                    out.pid = p.pid;
                }
                Ok(())
            }
        }
    }

    /// A QoS 2 PUBLISH under an identifier held: counted as the broker's violation when
    /// it cannot be a resend of the message held (DUP 0). One after that message's
    /// PUBREL the receiver counts ([`Counts::publish_after_pubrel`]).
    fn note_reuse(&mut self, pid: u16, dup: bool) {
        if !dup && !self.receiver.releasing().contains(&pid) {
            self.held_identifier_reused += 1;
        }
    }

    /// Queues the QoS 2 PUBLISH under `pid` behind those waiting (`held`: under an
    /// identifier held, decided now); with the queue full, left unanswered.
    fn wait<F: NorFlash>(
        &mut self,
        flash: &mut F,
        p: &Publish<'_>,
        pid: u16,
        held: bool,
        payload: Option<S::Payload>,
        out: &mut Outbox<N>,
    ) -> Result<(), ClientError<F::Error>> {
        let kind = match (held, p.retain) {
            (true, _) => WaitingKind::Held,
            (false, true) => WaitingKind::Retained,
            (false, false) => WaitingKind::New,
        };
        let arrival = Arrival::of(p);
        let w = Waiting {
            pid,
            dup: p.dup,
            digest: arrival.digest,
            kind,
            payload: payload.filter(|_| !held),
        };
        if held && self.waiting.len == self.waiting.capacity() {
            // A resend under an identifier held (or released), with the queue full of
            // new PUBLISHes that wait for a place only its PUBREL can free: answered now,
            // ahead of them, the only way on (left unanswered, the session would stall).
            self.pubrec_ahead += 1;
            out.take(self.receiver.decide(flash, &arrival, None)?);
            out.pid = Some(pid);
            return Ok(());
        }
        if !self.waiting.push(w) {
            // The queue is full: `resend_due` asks for the next connection once it is
            // empty and a PUBREL frees a place.
            self.unanswered_now = self.unanswered_now.saturating_add(1);
            self.unanswered += 1;
            out.left = Some(Left::Unanswered);
            return Ok(());
        }
        if held {
            // Decided now, as a resend: counted; its PUBREC later. One matching a
            // tombstone writes its count, with the releases waiting: their PUBCOMPs now.
            let reply = self.receiver.decide(flash, &arrival, None)?;
            out.records = out.records.saturating_add(reply.records);
            for pid in reply.completed {
                let _ = out.completed.push(pid); // at most N
            }
        } else {
            self.waited += 1;
        }
        self.most_waiting = self.most_waiting.max(self.waiting.len);
        out.left = Some(Left::Waiting);
        Ok(())
    }
}

impl<S: Store, const N: usize, Q> Client<S, N, Q>
where
    Q: AsRef<[Option<Waiting<S::Payload>>]> + AsMut<[Option<Waiting<S::Payload>>]>,
{
    /// A SUBACK: the QoS granted, or a refusal with its return or reason code.
    fn suback<E>(&mut self, granted: Option<QoS>, reason: u8) -> Result<(), ClientError<E>> {
        let Some(q) = granted else {
            return Err(ClientError::SubscriptionRefused(reason));
        };
        // The lowest granted over the run: one lower grant is a downgrade.
        self.granted = Some(self.granted.map_or(q, |g| g.min(q)));
        self.phase = Phase::Receiving;
        Ok(())
    }
}

/// Why [`Client::feed`] stopped. Nothing undurable was acknowledged; the caller closes
/// the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum FeedError<E> {
    /// The client's refusal of a packet, or its receiver's error.
    Client(ClientError<E>),
    /// Bytes that could not be cut into packets.
    Frame(FrameError),
}

impl<E> From<ClientError<E>> for FeedError<E> {
    fn from(e: ClientError<E>) -> Self {
        Self::Client(e)
    }
}

impl<S: Store, const N: usize, Q> Client<S, N, Q>
where
    Q: AsRef<[Option<Waiting<S::Payload>>]> + AsMut<[Option<Waiting<S::Payload>>]>,
{
    /// The next step of a connection's bytes, framed by `rx`: the PUBLISH that waited
    /// longest, decided if a place is free for it ([`Client::take_waiting`]), else the
    /// next whole packet `rx` holds, shown to `seen` and then taken
    /// ([`Client::on_packet`]; an oversized PUBLISH, [`Client::on_oversized`]).
    /// `Ok(None)` when neither is there: the caller pushes the next bytes it reads
    /// ([`Framer::push`]). Each step's records are written when it returns; the caller
    /// makes them durable, then sends its packets ([`Outbox::packets`]), in order. A
    /// caller that syncs once for every packet of a read (group commit) calls it until
    /// `None`, then [`Client::on_group_end`], then syncs, then sends.
    pub fn feed<F: NorFlash, B: AsRef<[u8]> + AsMut<[u8]>>(
        &mut self,
        flash: &mut F,
        rx: &mut Framer<B>,
        filter: &str,
        decode: impl Fn(&[u8]) -> Option<S::Payload>,
        seen: impl FnOnce(&Incoming<'_>),
    ) -> Result<Option<Outbox<N>>, FeedError<F::Error>> {
        if let Some(out) = self.take_waiting(flash)? {
            return Ok(Some(out));
        }
        let step = rx.next(|frame| match frame {
            Frame::Packet { packet, .. } => {
                seen(&packet);
                self.on_packet(flash, packet, filter, decode)
            }
            Frame::Oversized { qos, pid, .. } => self.on_oversized(flash, qos, pid),
        });
        match step {
            Ok(Some(out)) => Ok(Some(out?)),
            Ok(None) => Ok(None),
            Err(e) => Err(FeedError::Frame(e)),
        }
    }
}
