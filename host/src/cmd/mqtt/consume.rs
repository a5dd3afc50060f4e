//! `idem mqtt consume`: the device's receiver on the host, with a file image as its
//! flash. It connects with clean session 0, subscribes only when the broker holds no
//! session, and hands each PUBLISH and PUBREL to `idem_mqtt::receiver`, whose record is
//! durable in the image (per `--sync`) before the acknowledgement it allows is sent.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::anyhow;
use idem_core::journal::Region;
use idem_core::store::Store;
use idem_mqtt::client::{Client, Config, Left, Outbox, Phase, Send, Waiting};
use idem_mqtt::codec::{Incoming, Publish, QoS};
use idem_mqtt::receiver::{Decided, Keep, Receiver, Release};
use idem_payments::Sum;
use idem_payments::registry::SumStoreJob;

use super::identity;
use super::link::{self, Broken, Got, Link};
use super::{ConsumeArgs, Tally};
use fail::{client_error, journal_error};
use idem_host::image::{Image, Pages};
use idem_host::mqtt::applied::AppliedLog;
use idem_lab::error::usage;
use idem_mqtt::payments::Figures;

mod fail;

/// Identifiers the receiver holds: room for a broker's real window (Mosquitto's
/// default `max_inflight_messages` is 20, and 2.0.11 sends past it after a completion).
/// A QoS 2 PUBLISH that finds them all taken waits ([`WAITING`]); past that, it is left
/// unanswered and comes again at the next connection
/// (`idem_mqtt::client::Client::resend_due`). 48 is the most whose
/// record fits a journal slot (512 B) with the message-id store's window.
pub const PLACES: usize = 32;
/// New QoS 2 PUBLISHes that may wait, unanswered and undecided, in the host's memory for
/// a place (the client's queue, `idem_mqtt::client::Client::with_waiting`, in slots on
/// the heap), decided in the order they came as PUBRELs free places. Mosquitto 2.0.11
/// sends a whole window (its `max_inflight_messages`) more at each PUBCOMP, whatever is
/// still unanswered, so a receiver with fewer places than its queue otherwise
/// reconnects for every [`PLACES`] messages, each time sent all that is still in
/// flight again. A waiting PUBLISH is one not yet answered: a kill loses nothing the
/// broker does not send again (§4.4). Past this many, a PUBLISH that finds every place
/// taken is left unanswered, as the board does.
pub const WAITING: usize = 16_384;
/// The Maximum Packet Size `--protocol 5` announces (MQTT 5 §3.1.2.11.4): far above the
/// largest PUBLISH the receiver takes, since the broker discards a larger one unsent "as
/// if" delivered; one between the two arrives, and is acknowledged and rejected.
pub const MAXIMUM_PACKET: u32 = 1 << 20;
/// The receiver journal's page on the host: the image's own, 64 KiB
/// ([`idem_host::image::MQTT_PAGE`], seen whole through [`Pages`]). Each page the journal
/// enters costs a sync before its erase and one after its header: at 1 KiB that was two
/// syncs every 7 records of the naive store, at 8 KiB every 63, at 64 KiB every 511
/// (its slot is 128 bytes), against one a group of up to 20.
pub const JOURNAL_PAGE: usize = idem_host::image::MQTT_PAGE;
/// The image's flash as the receiver's journal sees it.
type Flash<'a> = Pages<'a, JOURNAL_PAGE>;
/// The journal's pages (three: room for a group's records past the newest durable one).
pub const JOURNAL_PAGES: u32 = 3;
/// Pages of an `mqtt consume` image (of [`JOURNAL_PAGE`] bytes): the receiver's journal.
pub const PAGES: u32 = JOURNAL_PAGES;
/// How long the link may be quiet before the releases that wait for a record are
/// written alone.
const QUIET: Duration = Duration::from_millis(5);
/// How long a CONNACK may take, from the CONNECT (the session's policy,
/// `idem_mqtt::client::CONNACK_WAIT_S`).
const CONNACK_WAIT: Duration = Duration::from_secs(idem_mqtt::client::CONNACK_WAIT_S as u64);

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
        identity::meta(self.args, PAGES).fits()?;
        if std::fs::symlink_metadata(&self.args.flash).is_ok() {
            let session = Session::open(self.args, store)?;
            let link = connect(self.args)?;
            return session.run(link);
        }
        // No image before a CONNACK: a peer that accepts TCP and never answers, or
        // refuses, leaves none behind.
        let mut link = connect(self.args)?;
        let mut connect = [0u8; 512];
        let n = Client::<S, PLACES>::encode(&config(self.args), Send::Connect, &mut connect)
            .map_err(|e| anyhow!("encoding CONNECT: {e:?}"))?;
        link.handshake(&connect[..n], CONNACK_WAIT)
            .map_err(|e| anyhow!("{}: {e:#}; no image was made", self.args.broker))?;
        Session::open(self.args, store)?.run(link)
    }
}

/// A connection to the broker at `--protocol`.
fn connect(a: &ConsumeArgs) -> anyhow::Result<Link> {
    let max = idem_mqtt::max_packet_at(a.topic.len(), a.protocol);
    Ok(Link::connect(&a.broker, max)?.speaking(a.protocol, MAXIMUM_PACKET))
}

/// The report's figures beyond the session's: the protocol, the bytes written, the
/// median time of the image's syncs, and at MQTT 5 what the broker sent past the Receive Maximum.
pub fn protocol_figures(a: &ConsumeArgs, t: &Tally, asked: &mut super::Asked<'_>) {
    use serde_json::json;
    asked.extra.push(("protocol", json!(a.protocol.name())));
    asked.extra.push(("bytes_written", json!(t.bytes)));
    // What one sync takes bounds a durable run: a group a sync, of at most a window.
    let syncs = idem_host::image::FileFlash::process_syncs();
    asked.extra.push(("sync_median_us", json!(syncs.median_us)));
    if a.protocol == idem_mqtt::codec::Protocol::V5 {
        let past = t.f.past_receive_maximum;
        asked.extra.push(("past_receive_maximum", json!(past)));
        if past > 0 {
            asked.lines.push(format!(
                "MQTT 5: the broker sent {past} PUBLISHes past the Receive Maximum of {PLACES} (MQTT 5 §4.9); each waited, unanswered, for a place (past {WAITING} waiting, one is left unanswered and comes again after a DISCONNECT 0x93)"
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

/// The client's slots for PUBLISHes waiting for a place: [`WAITING`] of them, on the heap.
type Slots<S> = Box<[Option<Waiting<<S as Store>::Payload>>]>;

struct Session<'a, S: Sum> {
    a: &'a ConsumeArgs,
    image: Image,
    client: Client<S, PLACES, Slots<S>>,
    tally: Tally,
    /// Records made durable by this run (for the hook).
    records: u64,
    /// The ids the image applied, each line in the file before the record it names.
    applied: AppliedLog,
    /// The image's applied count the log has reached.
    logged: u32,
    /// The image's marks when it was opened: where earlier runs saw the promise break.
    kept: u32,
    /// The payment ids of the QoS 2 PUBLISHes handed to the client on this connection
    /// and not decided yet (those that wait for a place), by packet identifier.
    undecided: HashMap<u16, Option<String>>,
    /// Ids logged since the image's last sync.
    ids_unsynced: bool,
}

impl<'a, S: Sum> Session<'a, S> {
    fn open(a: &'a ConsumeArgs, store: S) -> anyhow::Result<Self> {
        let meta = identity::meta(a, PAGES);
        let mut image = Image::open_or_create(&a.flash, &meta)?;
        let region = Region {
            start: 0,
            pages: JOURNAL_PAGES,
        };
        // Every record is a commit: synced before its acknowledgement goes out.
        let journal = 0..JOURNAL_PAGES * JOURNAL_PAGE as u32;
        image.flash.set_sync(a.sync, vec![journal]);
        let keep = if a.session_ram {
            Keep::Ram
        } else {
            Keep::Flash
        };
        let release = if a.release_now {
            Release::Now
        } else {
            Release::WithNext
        };
        let tag = meta.tag() ^ S::TAG;
        let flash = &mut Flash::new(&mut image.flash);
        let receiver = Receiver::open(flash, region, tag, store, keep, release)
            .map_err(|e| journal_error(&a.flash, e))?;
        let logged = receiver.record().applied;
        let image_marks = image.flash.marks();
        let name = a.flash.display().to_string();
        let applied = AppliedLog::open(&mut image.flash, &name, logged)?;
        Ok(Self {
            a,
            image,
            client: Client::with_waiting(receiver, (0..WAITING).map(|_| None).collect())
                .with_protocol(a.protocol),
            tally: Tally::default(),
            records: 0,
            applied,
            logged,
            kept: image_marks,
            undecided: HashMap::new(),
            ids_unsynced: false,
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
        self.tally.bytes = self.image.flash.written();
        self.keep_marks().map_err(|e| anyhow!("{e:?}"))?;
        self.tally.earlier = identity::earlier(self.kept, identity::marks(&self.tally.f.broken));
        self.tally.ids = Some(match self.applied.ids() {
            Some(ids) => Ok(ids.to_vec()),
            None => Err(self.applied.lacking()),
        });
        Ok(self.tally)
    }

    /// One connection, to the idle end, to a reconnection the session asks for, or
    /// until it breaks.
    fn session(&mut self, link: &mut Link) -> Result<End, Broken> {
        // What waited on the last connection comes again on this one (§4.4): the
        // client's queue is emptied.
        self.undecided.clear();
        let connect = self.client.connect();
        if !link.connected() {
            self.send(link, connect)?;
        }
        let sent = Instant::now();
        let mut last_new = Instant::now();
        loop {
            let out = match link.read(QUIET)? {
                Some(got) => self.batch(link, got, &mut last_new)?,
                // Counted from the CONNECT, whatever --idle-ms says: no CONNACK is no
                // session, never an idle one.
                None if self.client.phase() == Phase::Connecting => {
                    if sent.elapsed() >= CONNACK_WAIT {
                        return Err(Broken::Garbage(format!(
                            "the broker did not answer CONNECT within {} s",
                            CONNACK_WAIT.as_secs()
                        )));
                    }
                    Vec::new()
                }
                None => match self.quiet(link, &mut last_new)? {
                    Ok(outs) => outs,
                    Err(end) => return Ok(end),
                },
            };
            self.deliver(link, out)?;
        }
    }

    /// The link is quiet: the releases that wait for a record, and the PUBLISHes that
    /// waited for the places they free; or the end of this connection, for the broker's
    /// resend of what was left unanswered or for `--idle-ms` without anything new.
    fn quiet(
        &mut self,
        link: &mut Link,
        last_new: &mut Instant,
    ) -> Result<Result<Vec<Taken>, End>, Broken> {
        let out = (self.client.on_quiet(&mut Flash::new(&mut self.image.flash)))
            .map_err(|e| client_error(e, &self.a.topic, self.a.protocol))?;
        let mut outs = vec![(out, None)];
        self.take_waiting(&mut outs, last_new)?;
        if self.client.resend_due() {
            // Places are free for what was left unanswered: the broker sends it again
            // at the next connection (§4.4).
            self.deliver(link, outs)?;
            let bye = self.client.resending();
            let _ = self.send(link, bye);
            link.wait_closed(Duration::from_secs(1));
            return Ok(Err(End::Resend));
        }
        let nothing = outs.iter().all(|(o, _)| o.is_empty());
        if nothing && last_new.elapsed() >= self.a.idle {
            let _ = self.send(link, Send::Disconnect);
            return Ok(Err(End::Idle));
        }
        if nothing {
            link.keep_alive()
                .map_err(|e| Broken::Closed(format!("{e:#}")))?;
        }
        Ok(Ok(outs))
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
            // A PUBREL frees a place for the PUBLISH that waited longest.
            self.take_waiting(&mut outs, last_new)?;
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
        let flash = &mut Flash::new(&mut self.image.flash);
        let end = (self.client.on_group_end(flash))
            .map_err(|e| client_error(e, &self.a.topic, self.a.protocol))?;
        outs.push((end, None));
        Ok(outs)
    }

    /// Has the client decide the PUBLISHes that wait, in order, while places are free;
    /// one decided is news (`last_new`), as one arrived is.
    fn take_waiting(
        &mut self,
        outs: &mut Vec<Taken>,
        last_new: &mut Instant,
    ) -> Result<(), Broken> {
        loop {
            let flash = &mut Flash::new(&mut self.image.flash);
            let out = (self.client.take_waiting(flash))
                .map_err(|e| client_error(e, &self.a.topic, self.a.protocol))?;
            let Some(out) = out else {
                return Ok(());
            };
            let id = out
                .pid
                .and_then(|pid| self.undecided.remove(&pid))
                .flatten();
            self.log_applied(&out, id.as_deref())?;
            outs.push((out, id));
            *last_new = Instant::now();
        }
    }

    /// Hands one packet to the client; with what it did, the id of the PUBLISH it took
    /// (the client decides only the PUBLISH of the call, if any).
    fn take(&mut self, got: Got) -> Result<Taken, Broken> {
        let key = self.image.id_key();
        let decode = |payload: &[u8]| idem_mqtt::payments::parse(payload, &key).ok();
        let flash = &mut Flash::new(&mut self.image.flash);
        let (id, pid) = match &got {
            Got::Publish { payload, pid, .. } => {
                let id = idem_mqtt::payments::id_and_amount(payload).ok();
                (id.map(|(id, _)| id.to_owned()), *pid)
            }
            Got::Oversized { pid, .. } => (None, *pid),
            _ => (None, None),
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
        let out = out.map_err(|e| client_error(e, &self.a.topic, self.a.protocol))?;
        if let (Some(Left::Waiting), Some(pid)) = (out.left, pid) {
            // Its id is logged when the client decides it.
            self.undecided.insert(pid, id);
            return Ok((out, None));
        }
        self.log_applied(&out, id.as_deref())?;
        Ok((out, id))
    }

    /// Logs the id of the PUBLISH `out` applied, at once, before a later packet of the
    /// group can put its record in the file.
    fn log_applied(&mut self, out: &Outbox<PLACES>, id: Option<&str>) -> Result<(), Broken> {
        if out.decided == Some(Decided::Applied) {
            // Written at once, before a later packet of the group can put this one's
            // record in the file (a page erase writes what the flash holds through).
            self.logged += 1;
            // A write that fails (a full disk) ends the run before this group's
            // acknowledgements go out.
            (self.applied.push(&mut self.image.flash, self.logged, id)).map_err(|e| {
                Broken::Garbage(format!(
                    "{e:#}: none of the acknowledgements of this group of packets was sent (the broker sends those messages again), and every one sent before is in the image"
                ))
            })?;
            self.ids_unsynced = true;
        }
        Ok(())
    }

    /// Checks the ids logged against the image's count, before the sync that makes
    /// both durable (the log's lines are in the image file, written before the records).
    fn sync_applied(&mut self) -> Result<(), Broken> {
        if std::mem::take(&mut self.ids_unsynced)
            && self.a.abort_after_id_log.is_some_and(|n| self.logged >= n)
        {
            // The ids in the file, their records not yet.
            let _ = self.image.flash.ids_write();
            std::process::abort();
        }
        let counted = self.client.receiver().record().applied;
        if counted != self.logged {
            self.applied.out_of_step(counted.abs_diff(self.logged));
            self.logged = counted;
        }
        Ok(())
    }

    /// Makes the ids `outs` applied and the records they wrote durable, with one sync
    /// of the image, then sends their packets.
    fn deliver(&mut self, link: &mut Link, outs: Vec<Taken>) -> Result<(), Broken> {
        let records: u64 = outs.iter().map(|(o, _)| u64::from(o.records)).sum();
        // A write that fails (a full disk): the batch's acknowledgements stay unsent.
        let unsent = |e: Broken| match e {
            Broken::Garbage(why) => Broken::Garbage(format!(
                "{why}: none of the {} acknowledgements of the last {} packets was sent (the broker sends those messages again), and every one sent before is in the image",
                outs.iter()
                    .flat_map(|(o, _)| o.packets())
                    .filter(|s| matches!(s, Send::Ack(_) | Send::Pubcomp(_)))
                    .count(),
                outs.len()
            )),
            closed => closed,
        };
        self.keep_marks().map_err(unsent)?;
        self.sync_applied().map_err(unsent)?;
        if records > 0 {
            self.sync().map_err(unsent)?;
            self.records += records;
            if self.a.abort_before_ack.is_some_and(|n| self.records >= n) {
                std::process::abort(); // durable, and nothing acknowledged
            }
        }
        // One write for all of them: one system call and, without Nagle, one segment
        // where a packet each took as many.
        let mut bytes = Vec::new();
        for send in outs.iter().flat_map(|(o, _)| o.packets()) {
            self.encode(send, &mut bytes)?;
        }
        if bytes.is_empty() {
            return Ok(());
        }
        link.send_bytes(&bytes)
            .map_err(|e| Broken::Closed(format!("{e:#}")))
    }

    fn send(&mut self, link: &mut Link, send: Send) -> Result<(), Broken> {
        let mut bytes = Vec::new();
        self.encode(send, &mut bytes)?;
        link.send_bytes(&bytes)
            .map_err(|e| Broken::Closed(format!("{e:#}")))
    }

    /// Appends `send`, encoded, to `bytes`.
    fn encode(&self, send: Send, bytes: &mut Vec<u8>) -> Result<(), Broken> {
        let mut buf = [0u8; 512];
        let n = Client::<S, PLACES>::encode(&config(self.a), send, &mut buf)
            .map_err(|e| Broken::Garbage(format!("encoding {send:?}: {e:?}")))?;
        bytes.extend_from_slice(&buf[..n]);
        Ok(())
    }

    /// Marks in the image, durably, each way the promise broke so far, before any
    /// record or acknowledgement that follows it: no later run grades the image exact.
    fn keep_marks(&mut self) -> Result<(), Broken> {
        let asked = QoS::from_level(self.a.qos).unwrap_or(QoS::ExactlyOnce);
        let marks = identity::marks(&self.client.broken(asked, S::IDEMPOTENT));
        let path = self.a.flash.display().to_string();
        (self.image.flash.mark(marks))
            .map_err(|e| Broken::Garbage(format!("marking {path}: {e:?}")))
    }

    fn sync(&mut self) -> Result<(), Broken> {
        let path = self.a.flash.display().to_string();
        self.image
            .flash
            .sync()
            .map_err(|e| Broken::Garbage(format!("syncing {path}: {e:?}")))
    }
}

/// The session's packets' settings.
fn config(a: &ConsumeArgs) -> Config<'_> {
    Config {
        client_id: &a.client_id,
        filter: &a.topic,
        qos: QoS::from_level(a.qos).unwrap_or(QoS::ExactlyOnce),
        keep_alive: idem_mqtt::client::KEEP_ALIVE_S,
        protocol: a.protocol,
        maximum_packet_size: MAXIMUM_PACKET,
        session_expiry: idem_mqtt::client::SESSION_EXPIRY_S,
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
        Got::Suback { granted, reason } => Incoming::Suback {
            pid: 1,
            granted,
            reason,
        },
        Got::Pingresp => Incoming::Pingresp,
        Got::Puback(pid) => Incoming::Puback(pid),
        Got::Pubrec(pid) => Incoming::Pubrec(pid),
        Got::Pubcomp(pid) => Incoming::Pubcomp(pid),
        Got::Unsuback => Incoming::Unsuback(1),
        Got::Disconnect(r) => Incoming::Disconnect(r),
        Got::AckRefused { kind, pid, reason } => Incoming::AckRefused { kind, pid, reason },
    })
}

/// Refuses a QoS the receiver does not take.
pub fn qos(n: u8) -> anyhow::Result<QoS> {
    QoS::from_level(n).ok_or_else(|| usage(format!("--qos takes 0, 1 or 2, not {n}")))
}
