//! `idem mqtt consume`: the device's receiver on the host, with a file image as its
//! flash. It connects with clean session 0, subscribes only when the broker holds no
//! session, and hands each PUBLISH and PUBREL to `idem_mqtt::receiver`, whose record is
//! durable in the image (per `--sync`) before the acknowledgement it allows is sent.

use std::collections::VecDeque;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::anyhow;
use idem_core::journal::Region;
use idem_mqtt::codec::{Outgoing, QoS};
use idem_mqtt::receiver::{Ack, Keep, Receiver, Release, Reply};
use idem_sim::payment::Sum;
use idem_sim::registry::SumStoreJob;

use super::link::{self, Broken, Got, Link};
use super::{ConsumeArgs, Tally};
use crate::error::usage;
use crate::image::{Image, Meta};
use crate::select::WINDOW;

/// Identifiers the receiver holds: twice the broker's `max_inflight_messages` of 4
/// (`tests/mosquitto/idem.conf.in`), since Mosquitto 2.0.11, Debian 12's, sends up to 4
/// more once the oldest in flight completes, whatever is still unanswered (7 in flight;
/// fixed in 2.0.13).
pub const PLACES: usize = 8;
/// Pages of an `mqtt consume` image: the receiver's journal.
pub const PAGES: u32 = 4;
/// How long the link may be quiet before the releases that wait for a record are
/// written alone.
const QUIET: Duration = Duration::from_millis(5);
/// PUBLISHes held back at most while every place is taken (Mosquitto 2.0.11 was seen
/// to send 9 with a limit of 4).
const HELD_BACK: usize = 64;

/// The image's run: the session (client id and topic) and the store.
pub fn meta(a: &ConsumeArgs) -> Meta {
    Meta {
        scenario: format!("mqtt:{}@{}", a.client_id, a.topic),
        store: a.store.name().into(),
        events: 0,
        checkpoint_every: 0,
        window: WINDOW,
        pages: PAGES,
    }
}

/// Consumes with the store `S`.
pub struct Job<'a> {
    /// The arguments.
    pub args: &'a ConsumeArgs,
}

impl SumStoreJob for Job<'_> {
    type Out = anyhow::Result<Tally>;
    fn call<S: Sum + Send + Sync>(self, store: S) -> anyhow::Result<Tally> {
        Session::open(self.args, store)?.run()
    }
}

struct Session<'a, S: Sum> {
    a: &'a ConsumeArgs,
    image: Image,
    receiver: Receiver<S, PLACES>,
    tally: Tally,
    /// Records made durable by this run (for the hook).
    records: u64,
    /// PUBLISHes held back, unanswered, in order, while every place is taken: the broker
    /// sent more than its in-flight limit; the PUBRELs it sends next free places.
    waiting: VecDeque<Got>,
}

impl<'a, S: Sum> Session<'a, S> {
    fn open(a: &'a ConsumeArgs, store: S) -> anyhow::Result<Self> {
        let meta = meta(a);
        let mut image = Image::open_or_create(&a.flash, &meta)?;
        let region = Region {
            start: 0,
            pages: PAGES,
        };
        // Every record is a commit: synced before its acknowledgement goes out.
        image
            .flash
            .set_sync(a.sync, vec![crate::image::bytes(region)]);
        let keep = if a.session_ram {
            Keep::Ram
        } else {
            Keep::Flash
        };
        let release = if a.release_with_next {
            Release::WithNext
        } else {
            Release::Now
        };
        let tag = meta.tag() ^ S::TAG;
        let receiver = Receiver::open(&mut image.flash, region, tag, store, keep, release)
            .map_err(|e| journal_error(&a.flash, e))?;
        let resumed = receiver.record().decided() > 0 || !receiver.held().is_empty();
        Ok(Self {
            a,
            image,
            receiver,
            tally: Tally {
                resumed,
                idempotent: S::IDEMPOTENT,
                ..Tally::default()
            },
            records: 0,
            waiting: VecDeque::new(),
        })
    }

    fn run(mut self) -> anyhow::Result<Tally> {
        let max = idem_mqtt::max_packet(self.a.topic.len());
        let mut reconnects = 0;
        loop {
            let mut link = Link::connect(&self.a.broker, max)?;
            match self.session(&mut link) {
                Ok(()) => break,
                Err(Broken::Closed(why)) if reconnects < link::TRIES => {
                    // A connection that carried more than its CONNACK starts the count
                    // again: only a broker that keeps failing is given up on.
                    reconnects = if link.packets > 1 { 1 } else { reconnects + 1 };
                    eprintln!("mqtt consume: {why}; connecting again");
                }
                Err(Broken::Closed(why)) => {
                    return Err(anyhow!(
                        "the broker at {} went away {reconnects} times ({why}); what the image holds is kept",
                        self.a.broker
                    ));
                }
                Err(Broken::Garbage(why)) => {
                    return Err(anyhow!(
                        "{why}; the connection was closed and what the image holds is kept"
                    ));
                }
            }
        }
        let record = self.receiver.record();
        let counts = self.receiver.counts();
        let t = &mut self.tally;
        t.total = S::total(&record.state);
        (t.applied, t.skipped, t.rejected) = (record.applied, record.skipped, record.rejected);
        t.redeliveries = counts.redeliveries;
        t.held_again = counts.held_again;
        t.retained = counts.retained;
        t.records = counts.records;
        t.decided = counts.decided;
        t.syncs = self.image.flash.syncs();
        Ok(self.tally)
    }

    /// One connection, to the idle end (`Ok`) or until it breaks.
    fn session(&mut self, link: &mut Link) -> Result<(), Broken> {
        let fail = |e: anyhow::Error| Broken::Closed(format!("{e:#}"));
        link.send(&Outgoing::Connect {
            client_id: &self.a.client_id,
            keep_alive: link::KEEP_ALIVE.as_secs() as u16,
            clean_session: false,
        })
        .map_err(fail)?;
        let present = match link.read(Duration::from_secs(10))? {
            Some(Got::Connack {
                code: 0,
                session_present,
            }) => session_present,
            Some(Got::Connack { code, .. }) => {
                return Err(Broken::Garbage(format!(
                    "the broker refused the connection: {} (return code {code})",
                    link::refusal(code)
                )));
            }
            other => {
                return Err(Broken::Garbage(format!(
                    "the broker answered CONNECT with {other:?}"
                )));
            }
        };
        self.tally.session_present = present;
        let lost = self
            .receiver
            .connected(&mut self.image.flash, present)
            .map_err(fatal)?;
        self.tally.lost_identifiers += lost as u64;
        self.sync()?;
        if !present {
            // Only for a new session: SUBSCRIBE again would resend retained messages.
            let qos = QoS::from_level(self.a.qos).unwrap_or(QoS::ExactlyOnce);
            link.send(&Outgoing::Subscribe {
                pid: 1,
                filter: &self.a.topic,
                qos,
            })
            .map_err(fail)?;
        }
        let mut last_new = Instant::now();
        loop {
            match link.read(QUIET)? {
                Some(got) => {
                    if self.take(link, got)? {
                        last_new = Instant::now();
                    }
                    if self
                        .a
                        .abort_after_packets
                        .is_some_and(|n| link.packets >= n)
                    {
                        std::process::abort(); // as a SIGKILL would: no destructor
                    }
                }
                None => {
                    let reply = self.receiver.flush(&mut self.image.flash).map_err(fatal)?;
                    self.send(link, reply)?;
                    if last_new.elapsed() >= self.a.idle {
                        let _ = link.send(&Outgoing::Disconnect);
                        return Ok(());
                    }
                    link.keep_alive().map_err(fail)?;
                }
            }
        }
    }

    /// Takes one packet, or holds a PUBLISH back while every place is taken (and every
    /// PUBLISH after it, to keep their order); whether it was a PUBLISH.
    fn take(&mut self, link: &mut Link, got: Got) -> Result<bool, Broken> {
        let publish = matches!(got, Got::Publish { .. } | Got::Oversized { .. });
        if publish && (!self.waiting.is_empty() || !self.receiver.has_place()) {
            if self.waiting.len() == HELD_BACK {
                return Err(Broken::Garbage(format!(
                    "the broker sent {HELD_BACK} PUBLISHes past its in-flight limit with every one of {PLACES} places held"
                )));
            }
            self.waiting.push_back(got);
            return Ok(true);
        }
        let taken = self.take_now(link, got)?;
        while self.receiver.has_place() {
            let Some(next) = self.waiting.pop_front() else {
                break;
            };
            self.take_now(link, next)?;
        }
        Ok(taken)
    }

    fn take_now(&mut self, link: &mut Link, got: Got) -> Result<bool, Broken> {
        let key = self.image.id_key();
        let flash = &mut self.image.flash;
        let reply = match got.clone() {
            Got::Publish {
                qos,
                pid,
                dup,
                retain,
                payload,
            } => {
                let payment = idem_mqtt::payments::parse(&payload, &key).ok();
                self.receiver.decide(flash, qos, pid, dup, retain, payment)
            }
            Got::Oversized { qos, pid } => {
                self.receiver.decide(flash, qos, pid, false, false, None)
            }
            Got::Pubrel(pid) => self.receiver.pubrel(flash, pid),
            Got::Suback(Some(granted)) => {
                self.tally.granted = Some(granted.level());
                return Ok(false);
            }
            Got::Suback(None) => {
                return Err(Broken::Garbage(format!(
                    "the broker refused the subscription to {}",
                    self.a.topic
                )));
            }
            Got::Pingresp => return Ok(false),
            Got::Connack { .. } => {
                return Err(Broken::Garbage("the broker sent a second CONNACK".into()));
            }
            Got::Puback(_) | Got::Pubrec(_) | Got::Pubcomp(_) | Got::Unsuback => {
                return Err(Broken::Garbage(format!(
                    "the broker sent {got:?}, which a subscriber that publishes nothing never gets"
                )));
            }
        };
        let publish = reply.as_ref().is_ok_and(|r| r.decided.is_some());
        let reply = reply.map_err(fatal)?;
        self.send(link, reply)?;
        Ok(publish)
    }

    /// Syncs what `reply` wrote, then sends what it allows: PUBCOMPs, then its own
    /// acknowledgement.
    fn send(&mut self, link: &mut Link, reply: Reply<PLACES>) -> Result<(), Broken> {
        if reply.records > 0 {
            self.sync()?;
            self.records += 1;
            if self.a.abort_before_ack.is_some_and(|n| self.records >= n) {
                std::process::abort(); // durable, and nothing acknowledged
            }
        }
        let fail = |e: anyhow::Error| Broken::Closed(format!("{e:#}"));
        for pid in reply.completed {
            link.send(&Outgoing::Pubcomp(pid)).map_err(fail)?;
        }
        match reply.ack {
            Some(Ack::Puback(pid)) => link.send(&Outgoing::Puback(pid)).map_err(fail),
            Some(Ack::Pubrec(pid)) => link.send(&Outgoing::Pubrec(pid)).map_err(fail),
            None => Ok(()),
        }
    }

    fn sync(&mut self) -> Result<(), Broken> {
        let path = self.a.flash.display().to_string();
        self.image
            .flash
            .sync()
            .map_err(|e| Broken::Garbage(format!("syncing {path}: {e:?}")))
    }
}

fn fatal<E: core::fmt::Debug, A: core::fmt::Debug>(
    e: idem_mqtt::receiver::ReceiveError<E, A>,
) -> Broken {
    use idem_mqtt::receiver::ReceiveError as R;
    Broken::Garbage(match e {
        R::Full { pid, places } => format!(
            "the broker sent a new QoS 2 identifier {pid} with all {places} places held: its in-flight limit (max_inflight_messages) must be at most {places}"
        ),
        R::NoIdentifier => "the broker sent a QoS 1 or 2 PUBLISH without an identifier".into(),
        other => format!("the receiver stopped: {other:?}"),
    })
}

fn journal_error<E: core::fmt::Debug>(
    path: &Path,
    e: idem_core::journal::JournalError<E>,
) -> anyhow::Error {
    usage(format!(
        "{} does not hold a receiver's journal this idem reads ({e:?}); it was left untouched",
        path.display()
    ))
}

/// Refuses a QoS the receiver does not take.
pub fn qos(n: u8) -> anyhow::Result<QoS> {
    QoS::from_level(n).ok_or_else(|| usage(format!("--qos takes 0, 1 or 2, not {n}")))
}
