//! `idem device mqtt`: the idem-mqtt firmware under QEMU as an MQTT subscriber, and this
//! host as its modem (`idem_board::modem`). The board speaks MQTT and keeps its session
//! in its own flash; the host dials when the board asks, answers each pull with what the
//! broker's socket holds, writes what the board sends, and hangs up when the board
//! boots again (a reset drops its connection, as a modem's does). Resets come through
//! QMP, after seeded counts of PUBLISHes carried to the board.
//!
//! The verdict does not rest on the board's word alone. The host reads the packets it
//! carries: each PUBLISH's message id, and each acknowledgement the board sends for it.
//! A run is exact only when the board's total is the truth file's and, at QoS 1 or 2,
//! the board acknowledged every id of the truth on the wire.

mod bridge;
mod tap;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use clap::Args;
use idem_board::modem::{self, Hangup, ModemRefusal, ModemStore, Report, SessionConfig};
use idem_mqtt::client::Broken;
use idem_payments::registry::Source;
use idem_sim::rng::SplitMix64;
use serde_json::json;

use super::qemu::{firmware_elf, reset_targets, resetter, start};
use crate::cmd::mqtt::report::print;
use crate::cmd::mqtt::{Asked, Tally, check_broker};
use bridge::Bridge;
use idem_host::truth::TruthFile;
use idem_lab::error::usage;
use idem_lab::render::count;
use idem_lab::select::StoreKind;

/// `idem device mqtt`.
#[derive(Debug, Args)]
pub(super) struct Mqtt {
    /// The broker (no TLS, no authentication).
    #[arg(long, default_value = "127.0.0.1:1883", value_name = "HOST:PORT")]
    broker: String,
    /// The protocol the board speaks: MQTT 3.1.1, or MQTT 5 (Receive Maximum, Session
    /// Expiry Interval, reason codes).
    #[arg(long, value_name = "3.1.1|5", default_value = "3.1.1", value_parser = crate::cmd::mqtt::parse_protocol)]
    protocol: idem_mqtt::codec::Protocol,
    /// The topic, or a filter with `+` or `#` (then order holds per topic only).
    #[arg(long)]
    topic: String,
    /// The QoS to subscribe at: 0, 1 or 2.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u8).range(0..=2))]
    qos: u8,
    /// The client identifier: the broker keeps the session under it.
    #[arg(long, default_value = "idem-board")]
    client_id: String,
    /// naive or message-id.
    #[arg(long, value_parser = idem_lab::choice::store(), default_value = "message-id")]
    store: StoreKind,
    /// Where the board keeps its QoS 2 identifiers: with the effect in flash, or in RAM.
    #[arg(long = "session", value_name = "flash|ram", default_value = "flash", value_parser = ["flash", "ram"])]
    session: String,
    /// Grade against this truth file (`idem mqtt publish --truth`, or paho's), each id
    /// once; read when the board has finished, so the publisher may still write it.
    #[arg(long, value_name = "FILE")]
    truth: Option<PathBuf>,
    /// Stop once the board has subscribed and this long passed with nothing new.
    #[arg(long = "idle-ms", value_name = "MS", default_value_t = 2000)]
    idle_ms: u64,
    /// Reset the board this many times (QMP's system_reset), each after a seeded count
    /// of PUBLISHes carried to it, drawn below --messages.
    #[arg(long, default_value_t = 0)]
    resets: u32,
    /// The PUBLISHes expected, for --resets.
    #[arg(long, value_name = "N")]
    messages: Option<u64>,
    /// The seed of the reset instants.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// The idem-mqtt ELF built with the qemu feature [default: built from firmware/]
    #[arg(long, value_name = "FILE")]
    elf: Option<PathBuf>,
    /// Give up after this many seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 300)]
    timeout: u64,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

impl Mqtt {
    fn config(&self) -> anyhow::Result<SessionConfig> {
        check_broker(&self.broker)?;
        let store = match self.store {
            StoreKind::Naive => ModemStore::Naive,
            StoreKind::MessageId => ModemStore::MessageId,
            other if !other.runs_on(Source::Mqtt) => {
                return Err(usage(format!(
                    "device mqtt takes the naive or message-id store, not {}: MQTT has no offsets",
                    other.name()
                )));
            }
            other => return Err(usage(format!("the board has no {} store", other.name()))),
        };
        crate::cmd::mqtt::check_topic(&self.topic, false)?;
        if self.client_id.is_empty() {
            return Err(usage("--client-id takes at least one byte"));
        }
        let too_long = |what: &str, max: usize| {
            usage(format!("{what} is over {max} bytes, the board's limit"))
        };
        Ok(SessionConfig {
            client_id: self
                .client_id
                .as_str()
                .try_into()
                .map_err(|_| too_long("--client-id", modem::CLIENT_ID_MAX))?,
            topic: self
                .topic
                .as_str()
                .try_into()
                .map_err(|_| too_long("--topic", modem::TOPIC_MAX))?,
            qos: self.qos,
            store,
            identifiers_in_flash: self.session == "flash",
            mqtt5: self.protocol == idem_mqtt::codec::Protocol::V5,
        })
    }

    pub(super) fn run(self) -> anyhow::Result<ExitCode> {
        let config = self.config()?;
        let targets = match (self.messages, self.resets) {
            (_, 0) => Vec::new(),
            (None, _) => {
                return Err(usage(
                    "--resets needs --messages N: the resets are drawn below the PUBLISHes expected",
                ));
            }
            (Some(m), r) if u64::from(r) >= m => {
                return Err(usage(format!(
                    "--resets {r}: at most {} for --messages {m}",
                    m.saturating_sub(1)
                )));
            }
            // A reset after each of these counts of PUBLISHes carried.
            (Some(m), r) => reset_targets(&mut SplitMix64::new(self.seed), r, 1, m - 1),
        };
        let elf = firmware_elf("idem-mqtt", self.elf.as_deref())?;
        let (run, qmp, link) = start(&elf)?;
        let finished = Arc::new(AtomicBool::new(false));
        let landed = Arc::new(AtomicU32::new(0));
        let reset = resetter(qmp, &finished, &landed);
        let mut bridge = Bridge::new(link, &self, config, targets);
        let result = bridge.run(&reset);
        finished.store(true, Ordering::SeqCst);
        drop(run);
        let report = result?;
        // Read at the end: the publisher may write it while the board receives.
        let truth = self.truth.as_deref().map(TruthFile::read).transpose()?;
        let landed = landed.load(Ordering::SeqCst);
        let asked = self.asked(&bridge, &report, landed, truth.as_ref());
        // The board counts in RAM, a boot at a time: each earlier boot's last count
        // frame is added to the last boot's report.
        let mut figures = report.figures.clone();
        for counts in &bridge.earlier {
            counts.add_to(&mut figures);
        }
        let tally = Tally {
            f: figures,
            syncs: 0,
            bytes: 0,
            ids: None,
            earlier: Vec::new(),
        };
        print(&asked, &tally, truth.as_ref().map(|t| (t, None)))?;
        Ok(ExitCode::SUCCESS)
    }

    fn asked<'a>(
        &'a self,
        b: &Bridge,
        r: &Report,
        landed: u32,
        truth: Option<&TruthFile>,
    ) -> Asked<'a> {
        let t = &b.tap;
        let mut doubts = Vec::new();
        if let Some(truth) = truth
            && self.qos > 0
            && (t.acknowledged.len() as u64) < truth.ids
        {
            doubts.push(format!(
                "the board acknowledged {} of the truth's {} ids on this run's wire: the host cannot confirm the others were received (by this board: a broker that delivered them to an earlier run has nothing left to send)",
                t.acknowledged.len(),
                truth.ids
            ));
        }
        if t.reused > 0 {
            doubts.push(format!(
                "the broker sent {} new messages under packet identifiers the board still held (a sender reuses one only once its exchange completed, MQTT 3.1.1 §2.3.1, §4.3.3): the board took each for a resend and dropped it, a broker protocol violation",
                t.reused
            ));
        }
        // What the wire showed over every boot, where the board's own list (its last
        // boot's) does not name it already.
        let named = |f: fn(&Broken) -> bool| r.figures.broken.iter().any(f);
        if t.sessions_lost > 0 && !named(|b| matches!(b, Broken::SessionLost { .. })) {
            doubts.push(format!(
                "the broker answered session present 0 on {} reconnections: the session it held, with what it had queued, was lost",
                t.sessions_lost
            ));
        }
        if let Some(g) = t.granted_below
            && !named(|b| matches!(b, Broken::Downgraded { .. }))
        {
            doubts.push(format!(
                "the broker granted QoS {g} where {} was asked",
                self.qos
            ));
        }
        if t.below > 0 && !named(|b| matches!(b, Broken::AtQos0(_) | Broken::AtQos1(_))) {
            doubts.push(format!(
                "{} messages arrived below QoS {}, as their publisher sent them",
                t.below, self.qos
            ));
        }
        Asked {
            command: "device mqtt",
            counts: "the board, every boot added",
            store: self.store.name(),
            qos: self.qos,
            session_ram: self.session == "ram",
            topic: &self.topic,
            json: self.json,
            extra: vec![
                ("boots", json!(r.boots)),
                ("resets", json!(landed)),
                ("carried_publishes", json!(t.publishes)),
                ("carried_dup", json!(t.dups)),
                ("taken_at_qos", json!(t.taken())),
                ("acknowledged_ids", json!(t.acknowledged.len())),
                ("held_identifier_reused", json!(t.reused)),
                ("connections", json!(b.connections)),
                ("connections_for_resend", json!(b.resends)),
                ("protocol", json!(self.protocol.name())),
                (
                    "past_receive_maximum",
                    json!(r.figures.past_receive_maximum),
                ),
            ],
            lines: self.lines(b, r, landed),
            doubts,
        }
    }
}

impl Mqtt {
    /// The report's lines of the board and the wire.
    fn lines(&self, b: &Bridge, r: &Report, landed: u32) -> Vec<String> {
        let t = &b.tap;
        let mut lines = vec![format!(
            "the board: {}, {}; the host carried {} ({} with DUP 1) over {}, and saw {} acknowledged",
            count(u64::from(r.boots), "boot"),
            count(u64::from(landed), "reset"),
            count(t.publishes, "PUBLISH packet"),
            t.dups,
            count(u64::from(b.connections), "connection"),
            count(t.acknowledged.len() as u64, "id"),
        )];
        if landed < self.resets {
            lines.push(format!(
                "{} of the {} resets asked for were not made: fewer PUBLISHes came than their counts",
                self.resets - landed,
                self.resets
            ));
        }
        lines
    }
}

/// Why the board did not take a request, in words.
fn refusal_words(r: ModemRefusal) -> String {
    match r {
        ModemRefusal::Version { board, host } => format!(
            "it speaks the link's protocol version {board} and this host {host}: build the idem-mqtt image of this idem"
        ),
        ModemRefusal::Config => "a QoS above 2, or an empty client id or topic".into(),
        ModemRefusal::OtherSession => {
            "its flash holds another session (client id, topic, QoS, store or --session): erase the board or ask for that session".into()
        }
        ModemRefusal::NotConfigured => "bytes before its configuration".into(),
    }
}

/// Why the board closed its connection, in words.
fn hangup_words(h: Hangup) -> String {
    match h {
        Hangup::Malformed => "the broker sent bytes that are no MQTT packet".into(),
        Hangup::Unexpected => "the broker sent a packet a subscriber does not take".into(),
        Hangup::Refused(code) => format!(
            "the broker refused the connection (CONNACK return code {code}, MQTT 3.1.1 §3.2.2.3)"
        ),
        Hangup::SubscriptionRefused => "the broker refused the subscription".into(),
        Hangup::Disconnected(r) => format!(
            "the broker sent DISCONNECT {} (reason code 0x{r:02X}, MQTT 5 §3.14.2.1)",
            idem_mqtt::codec::v5::reason_name(r)
        ),
        Hangup::Silent => format!(
            "the broker sent nothing for {} s after CONNECT (no CONNACK)",
            idem_mqtt::client::CONNACK_WAIT_S
        ),
        Hangup::TooLong => format!(
            "the broker sent a PUBLISH whose topic is too long for the board's {}-byte buffer (--topic's filter matched it)",
            modem::MAX_PACKET + modem::CHUNK
        ),
        Hangup::PacketTooLarge(len) => format!(
            "the broker sent a {len}-byte packet, past the Maximum Packet Size of {} B the board announced: a protocol error (MQTT 5 §3.1.2.11.4), answered with DISCONNECT 0x95 (Packet too large)",
            modem::MAXIMUM_PACKET_5
        ),
        Hangup::Resend => format!(
            "the board left QoS 2 PUBLISHes unanswered with all {} places taken and connects again for the broker's resend",
            modem::PLACES
        ),
    }
}
