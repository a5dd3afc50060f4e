//! `idem mqtt consume`: the device's receiver on the host, with a file image as its
//! flash. It connects with clean session 0, subscribes only when the broker holds no
//! session, and hands each PUBLISH and PUBREL to `idem_mqtt::receiver`, whose record is
//! durable in the image (per `--sync`) before the acknowledgement it allows is sent.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::anyhow;
use idem_core::journal::Region;
use idem_mqtt::client::{Client, ClientError, Config, Outbox, Phase, Send};
use idem_mqtt::codec::{Incoming, Publish, QoS};
use idem_mqtt::receiver::{Decided, Keep, Receiver, Release};
use idem_sim::payment::Sum;
use idem_sim::registry::SumStoreJob;

use super::applied::AppliedLog;
use super::link::{self, Broken, Got, Link};
use super::{ConsumeArgs, Tally};
use crate::error::usage;
use crate::image::{Image, Meta};
use crate::select::WINDOW;
use idem_mqtt::payments::Figures;

/// Identifiers the receiver holds: room for a broker's real window (Mosquitto's
/// default `max_inflight_messages` is 20, and 2.0.11 sends past it after a completion).
/// A QoS 2 PUBLISH that finds them all taken is left unanswered and comes again at the
/// next connection (`idem_mqtt::client::Client::resend_due`). 48 is the most whose
/// record fits a journal slot (512 B) with the message-id store's window.
pub const PLACES: usize = 32;
/// The Maximum Packet Size `--protocol 5` announces (MQTT 5 §3.1.2.11.4): far above the
/// largest PUBLISH the receiver takes, since the broker discards a larger one unsent "as
/// if" delivered; one between the two arrives, and is acknowledged and rejected.
pub const MAXIMUM_PACKET: u32 = 1 << 20;
/// Pages of an `mqtt consume` image: the receiver's journal.
pub const PAGES: u32 = 4;
/// How long the link may be quiet before the releases that wait for a record are
/// written alone.
const QUIET: Duration = Duration::from_millis(5);

/// The image's run: the session (client id and topic) and the store.
pub fn meta(a: &ConsumeArgs) -> Meta {
    Meta {
        scenario: format!(
            "mqtt:{}@{} (identifiers in {})",
            a.client_id,
            a.topic,
            if a.session_ram { "RAM" } else { "flash" }
        ),
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
    fn call<S: Sum + std::marker::Send + Sync>(self, store: S) -> anyhow::Result<Tally> {
        // An image that exists is checked first; a new one is made only once the
        // broker answers, so a broker that is not there leaves no image behind, bound
        // to a session that never began.
        if std::fs::symlink_metadata(&self.args.flash).is_ok() {
            let session = Session::open(self.args, store)?;
            let link = connect(self.args)?;
            return session.run(link);
        }
        let link = connect(self.args)?;
        Session::open(self.args, store)?.run(link)
    }
}

/// A connection to the broker at `--protocol`.
fn connect(a: &ConsumeArgs) -> anyhow::Result<Link> {
    let max = idem_mqtt::max_packet_at(a.topic.len(), a.protocol);
    Ok(Link::connect(&a.broker, max)?.speaking(a.protocol, MAXIMUM_PACKET))
}

/// The report's MQTT 5 figures: the protocol, and what the broker sent past the
/// Receive Maximum.
pub fn protocol_figures(a: &ConsumeArgs, t: &Tally, asked: &mut super::Asked<'_>) {
    use serde_json::json;
    asked.extra.push(("protocol", json!(a.protocol.name())));
    if a.protocol == idem_mqtt::codec::Protocol::V5 {
        let past = t.f.past_receive_maximum;
        asked.extra.push(("past_receive_maximum", json!(past)));
        if past > 0 {
            asked.lines.push(format!(
                "MQTT 5: the broker sent {past} PUBLISHes past the Receive Maximum of {PLACES} (MQTT 5 §4.9), each left unanswered and sent again; its reconnections said DISCONNECT 0x93"
            ));
        }
    }
}

/// How a connection ended without breaking.
enum End {
    /// Nothing new for `--idle-ms`.
    Idle,
    /// Closed by the session, for the broker's resend of what it left unanswered.
    Resend,
}

struct Session<'a, S: Sum> {
    a: &'a ConsumeArgs,
    image: Image,
    client: Client<S, PLACES>,
    tally: Tally,
    /// Records made durable by this run (for the hook).
    records: u64,
    /// The ids the image applied, each line durable before the record it names.
    applied: AppliedLog,
    /// The image's applied count the log has reached.
    logged: u32,
}

impl<'a, S: Sum> Session<'a, S> {
    fn open(a: &'a ConsumeArgs, store: S) -> anyhow::Result<Self> {
        let meta = meta(a);
        let fresh = std::fs::symlink_metadata(&a.flash).is_err();
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
        let logged = receiver.record().applied;
        let sync = a.sync != crate::image::SyncMode::None;
        let applied = AppliedLog::open(&a.flash, logged, fresh, sync)?;
        Ok(Self {
            a,
            image,
            client: Client::new(receiver).with_protocol(a.protocol),
            tally: Tally::default(),
            records: 0,
            applied,
            logged,
        })
    }

    fn run(mut self, first: Link) -> anyhow::Result<Tally> {
        let mut reconnects = 0;
        let mut first = Some(first);
        loop {
            let mut link = match first.take() {
                Some(link) => link,
                None => connect(self.a)?,
            };
            match self.session(&mut link) {
                Ok(End::Idle) => break,
                // Asked for by the session: not a failure.
                Ok(End::Resend) => reconnects = 0,
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
        let asked = QoS::from_level(self.a.qos).unwrap_or(QoS::ExactlyOnce);
        self.tally.f = Figures::of(&self.client, asked);
        self.tally.syncs = self.image.flash.syncs();
        self.tally.ids = Some(match self.applied.ids() {
            Some(ids) => Ok(ids.to_vec()),
            None => Err(self.applied.lacking()),
        });
        Ok(self.tally)
    }

    /// One connection, to the idle end, to a reconnection the session asks for, or
    /// until it breaks.
    fn session(&mut self, link: &mut Link) -> Result<End, Broken> {
        let connect = self.client.connect();
        self.send(link, connect)?;
        let mut last_new = Instant::now();
        loop {
            let out = match link.read(QUIET)? {
                Some(got) => self.batch(link, got, &mut last_new)?,
                None if self.client.phase() == Phase::Connecting
                    && last_new.elapsed() >= Duration::from_secs(10) =>
                {
                    return Err(Broken::Garbage(
                        "the broker did not answer CONNECT within 10 s".into(),
                    ));
                }
                None => {
                    let out = (self.client.on_quiet(&mut self.image.flash))
                        .map_err(|e| client_error(e, &self.a.topic))?;
                    if self.client.resend_due() {
                        // Places are free for what was left unanswered: the broker
                        // sends it again at the next connection (§4.4).
                        self.deliver(link, vec![(out, None)])?;
                        let bye = self.client.resending();
                        let _ = self.send(link, bye);
                        link.wait_closed(Duration::from_secs(1));
                        return Ok(End::Resend);
                    }
                    if out.is_empty() && last_new.elapsed() >= self.a.idle {
                        let _ = self.send(link, Send::Disconnect);
                        return Ok(End::Idle);
                    }
                    if out.is_empty() {
                        link.keep_alive()
                            .map_err(|e| Broken::Closed(format!("{e:#}")))?;
                    }
                    vec![(out, None)]
                }
            };
            self.deliver(link, out)?;
        }
    }

    /// Group commit: `got` and every packet already arrived behind it, each handed to
    /// the client (its record appended), so that one sync makes all their records
    /// durable before any of their acknowledgements goes out.
    fn batch(
        &mut self,
        link: &mut Link,
        got: Got,
        last_new: &mut Instant,
    ) -> Result<Vec<Taken>, Broken> {
        let mut outs = Vec::new();
        let mut next = Some(got);
        while let Some(got) = next {
            if matches!(got, Got::Publish { .. } | Got::Oversized { .. }) {
                *last_new = Instant::now();
            }
            outs.push(self.take(got)?);
            if self
                .a
                .abort_after_packets
                .is_some_and(|n| link.packets >= n)
            {
                self.deliver(link, outs)?;
                std::process::abort(); // as a SIGKILL would: no destructor
            }
            next = link.ready()?;
        }
        Ok(outs)
    }

    /// Hands one packet to the client; with what it did, the id of the PUBLISH it took
    /// (the client decides only the PUBLISH of the call, if any).
    fn take(&mut self, got: Got) -> Result<Taken, Broken> {
        let key = self.image.id_key();
        let decode = |payload: &[u8]| idem_mqtt::payments::parse(payload, &key).ok();
        let flash = &mut self.image.flash;
        let id = match &got {
            Got::Publish { payload, .. } => idem_mqtt::payments::id_and_amount(payload)
                .ok()
                .map(|(id, _)| id.to_owned()),
            _ => None,
        };
        let out = match got {
            Got::Oversized { qos, pid } => self.client.on_oversized(flash, qos, pid),
            Got::Connack { code, .. } if code != 0 => {
                return Err(Broken::Garbage(format!(
                    "the broker refused the connection: {} (return code {code})",
                    link::refusal_at(code, self.a.protocol)
                )));
            }
            got => match incoming(&got) {
                Some(packet) => self.client.on_packet(flash, packet, &self.a.topic, decode),
                None => unreachable!("every packet but an oversized PUBLISH converts"),
            },
        };
        Ok((out.map_err(|e| client_error(e, &self.a.topic))?, id))
    }

    /// Logs the ids `outs` applied, with one sync, before the records that apply them
    /// are synced.
    fn log_applied(&mut self, outs: &[Taken]) -> Result<(), Broken> {
        let failed = |e: anyhow::Error| Broken::Garbage(format!("{e:#}"));
        let before = self.logged;
        for (_, id) in outs
            .iter()
            .filter(|(o, _)| o.decided == Some(Decided::Applied))
        {
            self.logged += 1;
            (self.applied.push(self.logged, id.as_deref())).map_err(failed)?;
        }
        if self.logged > before {
            self.applied.sync().map_err(failed)?;
            if self.a.abort_after_id_log.is_some_and(|n| self.logged >= n) {
                std::process::abort(); // the ids durable, their record not yet synced
            }
        }
        let counted = self.client.receiver().record().applied;
        if counted != self.logged {
            self.applied.out_of_step(counted.abs_diff(self.logged));
            self.logged = counted;
        }
        Ok(())
    }

    /// Logs the ids `outs` applied, makes what they wrote durable with one sync, then
    /// sends their packets.
    fn deliver(&mut self, link: &mut Link, outs: Vec<Taken>) -> Result<(), Broken> {
        self.log_applied(&outs)?;
        let records: u64 = outs.iter().map(|(o, _)| u64::from(o.records)).sum();
        if records > 0 {
            self.sync()?;
            self.records += records;
            if self.a.abort_before_ack.is_some_and(|n| self.records >= n) {
                std::process::abort(); // durable, and nothing acknowledged
            }
        }
        for send in outs.iter().flat_map(|(o, _)| o.packets()) {
            self.send(link, send)?;
        }
        Ok(())
    }

    fn send(&mut self, link: &mut Link, send: Send) -> Result<(), Broken> {
        let config = Config {
            client_id: &self.a.client_id,
            filter: &self.a.topic,
            qos: QoS::from_level(self.a.qos).unwrap_or(QoS::ExactlyOnce),
            keep_alive: idem_mqtt::client::KEEP_ALIVE_S,
            protocol: self.a.protocol,
            maximum_packet_size: MAXIMUM_PACKET,
        };
        let mut buf = [0u8; 512];
        let n = Client::<S, PLACES>::encode(&config, send, &mut buf)
            .map_err(|e| Broken::Garbage(format!("encoding {send:?}: {e:?}")))?;
        link.send_bytes(&buf[..n])
            .map_err(|e| Broken::Closed(format!("{e:#}")))
    }

    fn sync(&mut self) -> Result<(), Broken> {
        let path = self.a.flash.display().to_string();
        self.image
            .flash
            .sync()
            .map_err(|e| Broken::Garbage(format!("syncing {path}: {e:?}")))
    }
}

/// What the client did with one packet, and the id of the PUBLISH it took, if any.
type Taken = (Outbox<PLACES>, Option<String>);

/// The packet as the client takes it, borrowing from `got`.
fn incoming(got: &Got) -> Option<Incoming<'_>> {
    Some(match *got {
        Got::Connack {
            session_present,
            code,
            properties,
        } => Incoming::Connack {
            session_present,
            code,
            properties,
        },
        Got::Publish {
            qos,
            pid,
            dup,
            retain,
            ref topic,
            ref payload,
        } => Incoming::Publish(Publish {
            dup,
            qos,
            pid,
            retain,
            topic,
            payload,
        }),
        Got::Oversized { .. } => return None,
        Got::Pubrel(pid) => Incoming::Pubrel(pid),
        Got::Suback(granted) => Incoming::Suback { pid: 1, granted },
        Got::Pingresp => Incoming::Pingresp,
        Got::Puback(pid) => Incoming::Puback(pid),
        Got::Pubrec(pid) => Incoming::Pubrec(pid),
        Got::Pubcomp(pid) => Incoming::Pubcomp(pid),
        Got::Unsuback => Incoming::Unsuback(1),
        Got::Disconnect(r) => Incoming::Disconnect(r),
        Got::AckRefused { kind, pid, reason } => Incoming::AckRefused { kind, pid, reason },
    })
}

fn client_error<E: core::fmt::Debug>(e: ClientError<E>, topic: &str) -> Broken {
    Broken::Garbage(match e {
        ClientError::Receive(e) => return fatal(e),
        ClientError::Refused(code) => format!(
            "the broker refused the connection: {} (return code {code})",
            link::refusal(code)
        ),
        ClientError::SubscriptionRefused => {
            format!("the broker refused the subscription to {topic}")
        }
        ClientError::Disconnected(r) => {
            return Broken::Closed(format!(
                "the broker sent DISCONNECT {} (reason code 0x{r:02X})",
                idem_mqtt::codec::v5::reason_name(r)
            ));
        }
        ClientError::Unexpected(what) => {
            format!(
                "the broker sent {what}, which a subscriber that publishes nothing never gets here"
            )
        }
    })
}

fn fatal<E: core::fmt::Debug>(e: idem_mqtt::receiver::ReceiveError<E>) -> Broken {
    use idem_mqtt::receiver::ReceiveError as R;
    Broken::Garbage(match e {
        R::Full { pid, places } => format!(
            "the receiver was handed a new QoS 2 identifier {pid} with all {places} places held"
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
