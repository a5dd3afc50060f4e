//! A broker's persistent session as the simulator runs it, and a device that receives
//! through [`Receiver`] and resets: the sweep's ground (feature `sim`).
//!
//! The [`Broker`] keeps one subscriber's session as MQTT 3.1.1 says (§4.4, §4.3): at
//! most `limit` QoS 1 and 2 messages in flight, each on the lowest free packet
//! identifier, reused once PUBACK or PUBCOMP frees it; PUBREL after PUBREC; at each
//! reconnect, every unacknowledged PUBLISH again with DUP 1 and every PUBREL again, in
//! order, before anything new. A QoS 0 message is sent once, with no acknowledgement and
//! so no in-flight limit (a broker's limit counts QoS 1 and 2 messages only: Mosquitto's
//! `max_inflight_messages`): the broker writes every QoS 0 message it has to the
//! connection at once, and a reset loses every one the device had not read. At QoS 1 and
//! 2 the wire carries at most `limit` packets. The session can be lost ([`Broker::lose_session`]): the next CONNACK
//! then says session present 0, and the messages in flight are gone.
//!
//! [`run`] drives one device through a whole stream, resetting it once where a
//! [`Reset`] says: in a flash operation (a power cut of the strict in-memory flash), or
//! just after a record is durable and before the acknowledgements it allowed are out.

use std::collections::VecDeque;
use std::vec::Vec;

use idem_core::journal::{JournalError, Region};
use idem_core::log::IdKey;
use idem_core::store::Store;
use idem_core::testing::flash::{FlashError, MemFlash, PowerCut};
use idem_payments::{Message, Sum};

use crate::codec::QoS;
use crate::payments;
use crate::receiver::{Ack, Keep, ReceiveError, Receiver, Release, Reply};

/// A packet the broker sends the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToDevice {
    /// PUBLISH of message `message` (its index in the stream).
    Publish {
        /// Its QoS.
        qos: QoS,
        /// Its identifier (0 for QoS 0).
        pid: u16,
        /// DUP 1: sent before.
        dup: bool,
        /// The message's index.
        message: usize,
    },
    /// PUBREL.
    Pubrel(u16),
}

#[derive(Debug, Clone, Copy)]
enum Flight {
    /// PUBLISH sent; PUBACK or PUBREC not received.
    Published { pid: u16, message: usize },
    /// PUBREL sent; PUBCOMP not received.
    Released { pid: u16 },
}

impl Flight {
    fn pid(&self) -> u16 {
        match *self {
            Self::Published { pid, .. } | Self::Released { pid } => pid,
        }
    }
}

/// One subscriber's persistent session on a broker.
#[derive(Debug, Clone)]
pub struct Broker {
    qos: QoS,
    limit: usize,
    messages: usize,
    next: usize,
    flights: Vec<Flight>,
    wire: VecDeque<ToDevice>,
    session: bool,
    /// PUBLISHes sent again with DUP 1.
    pub resent: u64,
    /// PUBRELs sent again.
    pub resent_pubrels: u64,
}

impl Broker {
    /// A session for `messages` messages at `qos` (the subscription's), `limit` in flight.
    pub fn new(qos: QoS, messages: usize, limit: usize) -> Self {
        Self {
            qos,
            limit,
            messages,
            next: 0,
            flights: Vec::new(),
            wire: VecDeque::new(),
            session: false,
            resent: 0,
            resent_pubrels: 0,
        }
    }

    /// The device connects: what was on the wire went with the old connection; session
    /// present, and the session's resends are queued first.
    pub fn connect(&mut self) -> bool {
        self.wire.clear();
        let present = self.session;
        self.session = true;
        for f in &self.flights {
            self.wire.push_back(match *f {
                Flight::Published { pid, message } => {
                    self.resent += 1;
                    ToDevice::Publish {
                        qos: self.qos,
                        pid,
                        dup: true,
                        message,
                    }
                }
                Flight::Released { pid } => {
                    self.resent_pubrels += 1;
                    ToDevice::Pubrel(pid)
                }
            });
        }
        present
    }

    /// The broker loses the session (a new data directory): what was in flight and
    /// what was queued are gone.
    pub fn lose_session(&mut self) {
        self.session = false;
        self.flights.clear();
        self.next = self.messages;
    }

    /// The next packet on the wire, after the broker has sent what its limits allow: at
    /// QoS 0, everything it has.
    pub fn take(&mut self) -> Option<ToDevice> {
        while self.next < self.messages
            && (self.qos == QoS::AtMostOnce || self.wire.len() < self.limit)
        {
            if self.qos == QoS::AtMostOnce {
                let message = self.next;
                self.wire.push_back(ToDevice::Publish {
                    qos: self.qos,
                    pid: 0,
                    dup: false,
                    message,
                });
                self.next += 1;
                continue;
            }
            if self.flights.len() >= self.limit {
                break;
            }
            let pid = (1..)
                .find(|p| self.flights.iter().all(|f| f.pid() != *p))
                .unwrap_or(1);
            let message = self.next;
            self.flights.push(Flight::Published { pid, message });
            self.wire.push_back(ToDevice::Publish {
                qos: self.qos,
                pid,
                dup: false,
                message,
            });
            self.next += 1;
        }
        self.wire.pop_front()
    }

    /// PUBACK or PUBREC from the device.
    pub fn ack(&mut self, ack: Ack) {
        match ack {
            Ack::Puback(pid) => self.flights.retain(|f| f.pid() != pid),
            Ack::Pubrec(pid) => {
                for f in &mut self.flights {
                    if matches!(*f, Flight::Published { pid: p, .. } if p == pid) {
                        *f = Flight::Released { pid };
                        self.wire.push_back(ToDevice::Pubrel(pid));
                    }
                }
            }
        }
    }

    /// PUBCOMP from the device.
    pub fn pubcomp(&mut self, pid: u16) {
        self.flights
            .retain(|f| !matches!(*f, Flight::Released { pid: p } if p == pid));
    }

    /// Every message sent and every flight completed.
    pub fn done(&self) -> bool {
        self.next == self.messages && self.flights.is_empty() && self.wire.is_empty()
    }
}

/// Message `i` of a simulated stream: id `p{i}`, amount `i % 9 + 1`.
pub fn payload(i: usize) -> Vec<u8> {
    format!(
        r#"{{"id": "p{i}", "payer": "ada", "amount": {}}}"#,
        i % 9 + 1
    )
    .into_bytes()
}

/// The true total of `messages` messages, each once.
pub fn true_total(messages: usize) -> i64 {
    (0..messages).map(|i| (i % 9 + 1) as i64).sum()
}

/// Where the device resets, once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reset {
    /// Power lost in a flash operation.
    Cut(PowerCut),
    /// Just after its `n`th record (from 1) is durable, before what it allowed is sent.
    AfterRecord(u64),
    /// Just after the record that decides message `i` (from 0) the first time, before
    /// its acknowledgement is sent.
    AfterMessage(usize),
}

/// One step of a traced run: a packet the broker sent and what the device did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step<T> {
    /// The packet (`None`: the link was quiet and the device wrote its waiting releases).
    pub packet: Option<ToDevice>,
    /// What the device did with a PUBLISH.
    pub decided: Option<crate::receiver::Decided>,
    /// Records it wrote.
    pub records: u8,
    /// Its acknowledgement, if one went out.
    pub ack: Option<Ack>,
    /// PUBCOMPs that went out.
    pub completed: usize,
    /// The device reset here, before sending anything of this step.
    pub reset: bool,
    /// For a PUBREL: whether the device held its identifier (in RAM or in flash).
    pub held: bool,
    /// The store's state after the step.
    pub state: T,
}

/// How a run was set up.
#[derive(Debug, Clone, Copy)]
pub struct Setup {
    /// The subscription's QoS.
    pub qos: QoS,
    /// Where the identifiers are kept.
    pub keep: Keep,
    /// When releases are written.
    pub release: Release,
    /// Messages in the stream.
    pub messages: usize,
    /// In-flight limit and places.
    pub limit: usize,
    /// The broker loses the session while the device is down.
    pub lose_session: bool,
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct End<T> {
    /// Identifiers the device held when the broker said session present 0.
    pub lost_identifiers: usize,
    /// The store's state.
    pub state: T,
    /// Resets that happened.
    pub resets: u32,
    /// Records written in all.
    pub records: u64,
    /// PUBLISHes the broker sent again.
    pub resent: u64,
}

impl<T> End<T> {
    /// The same end with what `f` makes of its state (the store's total, say).
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> End<U> {
        End {
            lost_identifiers: self.lost_identifiers,
            state: f(self.state),
            resets: self.resets,
            records: self.records,
            resent: self.resent,
        }
    }
}

/// The places for identifiers in the simulator's device.
pub const PLACES: usize = 4;
/// The simulator's region: 3 pages of 1 KiB.
pub const REGION: Region = Region { start: 0, pages: 3 };
/// The simulator's flash.
pub type Flash = MemFlash<3, 1024>;
const TAG: u32 = 0x4D51_0100;

/// Runs `setup`'s stream through a device with `store` on `flash`, resetting once as
/// `reset` says (`None`: never).
pub fn run<S>(flash: &mut Flash, store: S, setup: Setup, reset: Option<Reset>) -> End<S::State>
where
    S: Store<Payload = Message>,
{
    run_traced(flash, store, setup, reset, &mut |_| {})
}

/// [`run`], handing each step to `trace`.
pub fn run_traced<S>(
    flash: &mut Flash,
    store: S,
    setup: Setup,
    reset: Option<Reset>,
    trace: &mut dyn FnMut(Step<S::State>),
) -> End<S::State>
where
    S: Store<Payload = Message>,
{
    assert!(
        setup.limit <= PLACES,
        "the broker's limit is at most the device's places"
    );
    let (after, after_message) = schedule(flash, reset);
    let mut broker = Broker::new(setup.qos, setup.messages, setup.limit);
    let open = |flash: &mut Flash| {
        Receiver::<S, PLACES>::open(flash, REGION, TAG, store.clone(), setup.keep, setup.release)
            .expect("the journal opens")
    };
    let mut device = open(flash);
    let (mut resets, mut records, mut lost_identifiers) = (0u32, 0u64, 0);
    reconnect(&mut device, flash, &mut broker);
    loop {
        let before = device.counts().records;
        let packet = broker.take();
        let held = matches!(packet, Some(ToDevice::Pubrel(pid)) if device.held().contains(&pid));
        let Some(reply) = hand(&mut device, flash, packet, broker.done()) else {
            break;
        };
        records += device.counts().records - before;
        let wrote = device.counts().records > before;
        let this_message = matches!(packet, Some(ToDevice::Publish { message, .. }) if Some(message) == after_message);
        let cut_now = resets == 0 && wrote && (after.is_some_and(|n| records >= n) || this_message);
        if let Ok(r) = &reply {
            trace(Step {
                packet,
                decided: r.decided,
                records: r.records,
                ack: (!cut_now).then_some(r.ack).flatten(),
                completed: if cut_now { 0 } else { r.completed.len() },
                reset: cut_now,
                held,
                state: device.state().clone(),
            });
        }
        match reply {
            Ok(reply) if !cut_now => {
                for pid in reply.completed {
                    broker.pubcomp(pid);
                }
                if let Some(ack) = reply.ack {
                    broker.ack(ack);
                }
            }
            Ok(_) | Err(ReceiveError::Journal(JournalError::Flash(FlashError::PowerCut))) => {
                // The device is down; nothing it had not sent reached the broker. It
                // boots, recovers and reconnects to its session.
                flash.cancel_power_cut();
                flash.power_on();
                resets += 1;
                device = open(flash);
                if setup.lose_session {
                    broker.lose_session();
                }
                lost_identifiers += reconnect(&mut device, flash, &mut broker);
            }
            Err(e) => panic!("the device failed: {e:?}"),
        }
    }
    End {
        state: device.state().clone(),
        resets,
        records,
        resent: broker.resent,
        lost_identifiers,
    }
}

/// Schedules `reset` on `flash` if it is a power cut; else the record after which the
/// device resets, or the message after whose record it does.
fn schedule(flash: &mut Flash, reset: Option<Reset>) -> (Option<u64>, Option<usize>) {
    match reset {
        Some(Reset::Cut(cut)) => {
            flash.schedule_power_cut(cut);
            (None, None)
        }
        Some(Reset::AfterRecord(n)) => (Some(n), None),
        Some(Reset::AfterMessage(i)) => (None, Some(i)),
        None => (None, None),
    }
}

/// The device hands `packet` to its receiver; `None` when there is none and the broker
/// is `done`. With no packet, the releases waiting for a record are written.
fn hand<S: Store<Payload = Message>>(
    device: &mut Receiver<S, PLACES>,
    flash: &mut Flash,
    packet: Option<ToDevice>,
    done: bool,
) -> Option<Result<Reply<PLACES>, ReceiveError<FlashError>>> {
    Some(match packet {
        Some(ToDevice::Publish {
            qos,
            pid,
            dup,
            message,
        }) => {
            let pid = (qos != QoS::AtMostOnce).then_some(pid);
            let payment = payments::parse(&payload(message), &IdKey::PUBLIC).ok();
            let arrival = crate::receiver::Arrival {
                qos,
                pid,
                dup,
                retain: false,
                digest: crate::receiver::digest("payments", &payload(message)),
            };
            device.decide(flash, &arrival, payment)
        }
        Some(ToDevice::Pubrel(pid)) => device.pubrel(flash, pid),
        None if done => return None,
        None => device.flush(flash),
    })
}

/// The device connects to its session: the identifiers it held and forgot, for a
/// session the broker lost.
fn reconnect<S: Store<Payload = Message>>(
    device: &mut Receiver<S, PLACES>,
    flash: &mut Flash,
    broker: &mut Broker,
) -> usize {
    let present = broker.connect();
    device
        .connected(flash, present)
        .expect("the flash takes a record")
}

/// Every reset of a reference run of `setup`: a cut at each unit write and erase, and a
/// reset after each record. The points, for [`run`].
pub fn reset_points<S>(store: S, setup: Setup) -> Vec<Reset>
where
    S: Store<Payload = Message>,
{
    let mut reference = Flash::new();
    let before = reference.stats();
    let end = run(&mut reference, store, setup, None);
    let cuts = reference.stats().cuts_since(before).map(Reset::Cut);
    cuts.chain((1..=end.records).map(Reset::AfterRecord))
        .collect()
}

/// What a sweep found: each reset point's end against the true total.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cell {
    /// Reset points run.
    pub points: usize,
    /// Runs that ended over the true total, and by how much in all.
    pub over: (usize, i64),
    /// Runs that ended under it, and by how much in all.
    pub under: (usize, i64),
    /// Records of the reference run (no reset).
    pub records: u64,
}

impl Cell {
    /// The cell in words, at most 20 characters: `exact at 468`, `over at 30/372 +141`.
    pub fn text(&self) -> String {
        match (self.over.0, self.under.0) {
            (0, 0) => format!("exact at {}", self.points),
            (n, 0) => format!("over at {n}/{} +{}", self.points, self.over.1),
            (0, n) => format!("under at {n}/{} {}", self.points, self.under.1),
            (o, u) => format!("over {o}, under {u}/{}", self.points),
        }
    }
}

/// Runs `setup` with `store` from every reset point of its reference run
/// ([`reset_points`]), each on a fresh flash with its own seed for torn contents.
pub fn sweep<S: Sum>(store: S, setup: Setup) -> Cell {
    let truth = true_total(setup.messages);
    let points = reset_points(store.clone(), setup);
    let mut cell = Cell {
        points: points.len(),
        records: run(&mut Flash::new(), store.clone(), setup, None).records,
        ..Cell::default()
    };
    for (seed, at) in points.into_iter().enumerate() {
        let mut flash = Flash::new();
        flash.seed_noise(seed as u64);
        let end = run(&mut flash, store.clone(), setup, Some(at));
        assert_eq!(
            end.resets, 1,
            "every reset point resets the device once: {at:?}"
        );
        let d = S::total(&end.state) - truth;
        if d > 0 {
            cell.over = (cell.over.0 + 1, cell.over.1 + d);
        } else if d < 0 {
            cell.under = (cell.under.0 + 1, cell.under.1 + d);
        }
    }
    cell
}

/// The rows `idem matrix --source mqtt` prints: each QoS and where the identifiers are
/// kept, 30 messages, 4 in flight.
pub const ROWS: [(QoS, Keep, Release); 5] = [
    (QoS::AtMostOnce, Keep::Flash, Release::Now),
    (QoS::AtLeastOnce, Keep::Flash, Release::Now),
    (QoS::ExactlyOnce, Keep::Ram, Release::Now),
    (QoS::ExactlyOnce, Keep::Flash, Release::Now),
    (QoS::ExactlyOnce, Keep::Flash, Release::WithNext),
];

/// The setup of a row.
pub const fn setup(row: (QoS, Keep, Release)) -> Setup {
    Setup {
        qos: row.0,
        keep: row.1,
        release: row.2,
        messages: 30,
        limit: 4,
        lose_session: false,
    }
}
