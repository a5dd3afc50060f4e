//! `idem mqtt`: the MQTT receiver (`idem-mqtt`) on a real broker, with a file image as
//! the device's flash.
//!
//! An application message is a payment, the JSON that `idem kafka consume` reads as a
//! record's value with its message id in an `"id"` field (MQTT 3.1.1 has no record key):
//! `{"id": "p17", "payer": "ada", "amount": 5}`. `consume` receives a topic into an
//! image; `publish` sends a seeded stream and writes what it sent to a truth file, which
//! `consume --truth` grades against.

mod bench;
mod consume;
mod identity;
pub mod link;
pub mod matrix;
mod publish;
pub mod report;
pub mod run;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};

use idem_host::image::SyncMode;
use idem_lab::error::usage;
use idem_lab::select::{StoreKind, WINDOW};
use idem_mqtt::codec::Protocol;
use idem_payments::registry::{self, Source};

/// Receive and publish on an MQTT broker.
#[derive(Debug, Args)]
pub struct Cmd {
    #[command(subcommand)]
    action: Action,
}

#[derive(Debug, Subcommand)]
enum Action {
    /// Receive a topic into a flash image, keeping the MQTT session with the effect:
    /// QoS 2 exactly once across kills with `--session flash`.
    Consume(ConsumeArgs),
    /// Publish a seeded payment stream, each payment once, and write what was sent to a
    /// truth file.
    Publish(publish::PublishArgs),
    /// Time paho-mqtt's plain subscriber and idem's consume draining N queued QoS 2
    /// payments each, on a Mosquitto it starts on 127.0.0.1 at in-flight 1 and 20.
    Bench(bench::BenchArgs),
}

/// `idem mqtt consume`'s arguments.
#[derive(Debug, Args)]
pub struct ConsumeArgs {
    /// The broker (no TLS, no authentication).
    #[arg(long, default_value = "127.0.0.1:1883", value_name = "HOST:PORT")]
    broker: String,
    /// The protocol: MQTT 3.1.1, or MQTT 5 (Receive Maximum, Session Expiry Interval,
    /// reason codes).
    #[arg(long, value_name = "3.1.1|5", default_value = "3.1.1", value_parser = parse_protocol)]
    protocol: Protocol,
    /// The topic, or a filter with `+` or `#` (then order holds per topic only).
    #[arg(long)]
    topic: String,
    /// The QoS to subscribe at: 0, 1 or 2.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u8).range(0..=2))]
    qos: u8,
    /// The client identifier: the broker keeps the session under it.
    #[arg(long, default_value = "idem")]
    client_id: String,
    /// naive or message-id (the stores whose rule needs no offsets).
    #[arg(long, value_parser = idem_lab::choice::store(), default_value = "message-id")]
    store: StoreKind,
    /// The flash image: created when missing, resumed when it exists.
    #[arg(long, value_name = "IMAGE")]
    flash: PathBuf,
    /// Keep the QoS 2 identifiers in RAM only, as a client that leaves them to the
    /// application does: a kill forgets them (`--session ram`).
    #[arg(long = "session", value_name = "flash|ram", default_value = "flash", value_parser = ["flash", "ram"])]
    session: String,
    #[arg(skip)]
    session_ram: bool,
    /// Write each PUBREL's release in a record of its own before its PUBCOMP, rather
    /// than in the next message's record (the default: one record a message where the
    /// broker keeps several in flight, and a group's releases in its last record when
    /// the broker waits for them).
    #[arg(long, conflicts_with = "release_with_next")]
    release_now: bool,
    /// The default, kept for scripts written when it was not.
    #[arg(long, hide = true)]
    release_with_next: bool,
    /// When the image's writes reach the disk.
    #[arg(long, value_parser = idem_lab::choice::sync(), default_value = "checkpoint")]
    sync: SyncMode,
    /// Grade against this truth file (`idem mqtt publish --truth`), each id once.
    #[arg(long, value_name = "FILE")]
    truth: Option<PathBuf>,
    /// Stop after this long with nothing new.
    #[arg(long = "idle-ms", value_name = "MS", default_value_t = 1000)]
    idle_ms: u64,
    #[arg(skip = Duration::ZERO)]
    idle: Duration,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// Test hook: abort after this many packets received, as a SIGKILL would.
    #[arg(long, hide = true)]
    abort_after_packets: Option<u64>,
    /// Test hook: abort once this run's Nth record is durable, before the acknowledgement
    /// it allows is sent.
    #[arg(long, hide = true)]
    abort_before_ack: Option<u64>,
    /// Test hook: abort once the Nth applied id's line is in the image file, before the
    /// record that applies it is written there.
    #[arg(long, hide = true)]
    abort_after_id_log: Option<u32>,
}

/// `--protocol`: `3.1.1` or `5` (also `311`, `5.0`).
pub fn parse_protocol(s: &str) -> Result<Protocol, String> {
    match s {
        "3.1.1" | "311" | "4" => Ok(Protocol::V311),
        "5" | "5.0" => Ok(Protocol::V5),
        _ => Err(format!("MQTT 3.1.1 or 5, not {s:?}")),
    }
}

/// Refuses a broker address that is not `HOST:PORT`, before anything is tried.
pub fn check_broker(broker: &str) -> anyhow::Result<()> {
    use std::net::ToSocketAddrs;
    let shaped = broker
        .rsplit_once(':')
        .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
    if !shaped {
        return Err(usage(format!(
            "--broker takes HOST:PORT (127.0.0.1:1883), not {broker:?}"
        )));
    }
    match broker.to_socket_addrs().map(|mut a| a.next()) {
        Ok(Some(_)) => Ok(()),
        Ok(None) => Err(usage(format!("--broker {broker}: the host has no address"))),
        Err(e) => Err(usage(format!(
            "--broker {broker}: the host does not resolve ({e})"
        ))),
    }
}

/// The longest topic an MQTT string holds, in bytes (MQTT 3.1.1 §1.5.3, §4.7.3).
const TOPIC_MAX: usize = 65_535;

/// Refuses a topic filter MQTT does not allow, before anything is tried (MQTT 3.1.1
/// §4.7.1 and §4.7.3; MQTT 5 §4.7 keeps the same rules): at least one character, no
/// null character, at most 65,535 bytes, `#` alone in the last level, `+` alone in its
/// level. With `name`, a topic name to publish to, which takes no wildcard at all
/// (§4.7.1-1).
pub fn check_topic(topic: &str, name: bool) -> anyhow::Result<()> {
    let refuse = |why: String| Err(usage(format!("--topic {topic:?}: {why}")));
    if topic.is_empty() {
        return refuse("a topic takes at least one character (MQTT 3.1.1 §4.7.3)".into());
    }
    if topic.contains('\0') {
        return refuse("a topic holds no null character (MQTT 3.1.1 §4.7.3)".into());
    }
    if topic.len() > TOPIC_MAX {
        return refuse(format!(
            "{} bytes, past the {TOPIC_MAX} an MQTT topic holds (MQTT 3.1.1 §4.7.3)",
            topic.len()
        ));
    }
    if name && topic.contains(['+', '#']) {
        return refuse("a topic published to takes no wildcard, + or # (MQTT 3.1.1 §4.7.1)".into());
    }
    let levels: Vec<&str> = topic.split('/').collect();
    for (i, level) in levels.iter().enumerate() {
        if level.contains('#') && (*level != "#" || i + 1 != levels.len()) {
            return refuse(
                "# stands alone in the last level (a/#), never elsewhere (MQTT 3.1.1 §4.7.1.2)"
                    .into(),
            );
        }
        if level.contains('+') && *level != "+" {
            return refuse(
                "+ stands alone in its level (a/+/b), never beside other characters (MQTT 3.1.1 §4.7.1.3)"
                    .into(),
            );
        }
    }
    Ok(())
}

/// What a report says it was asked, and what it adds: the command's own figures.
pub struct Asked<'a> {
    /// The command, as the text report names it.
    pub command: &'static str,
    /// What this run's counts cover: "this run", or the board's last boot.
    pub counts: &'static str,
    /// The store's name.
    pub store: &'static str,
    /// The QoS subscribed at.
    pub qos: u8,
    /// The identifiers in RAM only.
    pub session_ram: bool,
    /// The topic or filter.
    pub topic: &'a str,
    /// One JSON object instead of text.
    pub json: bool,
    /// The command's own fields in the JSON.
    pub extra: Vec<(&'static str, serde_json::Value)>,
    /// The command's own lines in the text.
    pub lines: Vec<String>,
    /// What the command could not confirm: each keeps the verdict from exact.
    pub doubts: Vec<String>,
}

impl ConsumeArgs {
    fn asked(&self) -> Asked<'_> {
        Asked {
            command: "mqtt consume",
            counts: "this run",
            store: self.store.name(),
            qos: self.qos,
            session_ram: self.session_ram,
            topic: &self.topic,
            json: self.json,
            extra: Vec::new(),
            lines: Vec::new(),
            doubts: Vec::new(),
        }
    }
}

/// What a consume did: the session's figures (`idem_mqtt::payments::Figures`, which the
/// board reports too) and the image's syncs.
#[derive(Debug, Clone, Default)]
pub struct Tally {
    /// The session's figures.
    pub f: idem_mqtt::payments::Figures,
    /// This run: syncs of the image, its records and its log of applied ids together
    /// (none on a board).
    pub syncs: u64,
    /// This run: bytes written to the image: its flash (programmed and erased) and its
    /// log of applied ids.
    pub bytes: u64,
    /// Each message the image applied, by its id (over every run on it), when its log
    /// holds them all (`Err`: how many it lacks); `None` where nothing records them.
    pub ids: Option<Result<Vec<Option<String>>, u32>>,
    /// Where earlier runs on the image saw the promise break, and this one did not: a
    /// sentence each.
    pub earlier: Vec<String>,
}

impl Cmd {
    /// Runs the subcommand.
    pub fn run(self) -> anyhow::Result<ExitCode> {
        match self.action {
            Action::Consume(mut a) => {
                if !a.store.runs_on(Source::Mqtt) {
                    return Err(usage(format!(
                        "mqtt consume takes the {} store: MQTT has no offsets",
                        registry::list(StoreKind::on(Source::Mqtt), " or ")
                    )));
                }
                consume::qos(a.qos)?;
                check_topic(&a.topic, false)?;
                check_broker(&a.broker)?;
                a.session_ram = a.session == "ram";
                a.idle = Duration::from_millis(a.idle_ms);
                let truth = a
                    .truth
                    .as_deref()
                    .map(idem_host::truth::TruthFile::read_ids)
                    .transpose()?;
                let job = consume::Job { args: &a };
                let tally = registry::with_mqtt_store(a.store, WINDOW, job)
                    .ok_or_else(|| usage("that store does not run on MQTT"))?
                    .map_err(|e| usage(format!("{e:?}")))??;
                let truth = truth.as_ref().map(|(t, ids)| (t, Some(ids)));
                let mut asked = a.asked();
                consume::protocol_figures(&a, &tally, &mut asked);
                report::print(&asked, &tally, truth)?;
                Ok(ExitCode::SUCCESS)
            }
            Action::Publish(p) => {
                check_topic(p.topic(), true)?;
                check_broker(&p.broker)?;
                publish::run(&p)
            }
            Action::Bench(b) => bench::run(&b),
        }
    }
}
