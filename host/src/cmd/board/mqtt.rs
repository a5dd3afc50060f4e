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

use std::collections::{HashMap, HashSet};
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail};
use clap::Args;
use idem_board::modem::{
    self, FromBoard, Hangup, HostReader, ModemRefusal, ModemStore, QUIET_WAIT_MS, Relay, Report,
    SessionConfig, Socket, ToBoard,
};
use idem_board::timing::{HostTimer, QEMU_EFFECT_US};
use idem_mqtt::codec::{self, Frame, Incoming};
use idem_sim::rng::SplitMix64;
use serde_json::json;

use super::qemu::{firmware_elf, reset_targets, resetter, start};
use crate::cmd::mqtt::link::{TRIES, dial};
use crate::cmd::mqtt::report::print;
use crate::cmd::mqtt::{Asked, Tally, check_broker};
use crate::error::usage;
use crate::select::StoreKind;
use crate::truth::TruthFile;
use idem_mqtt::client::{Broken, backoff_ms};
use idem_sim::registry::Source;

/// `idem device mqtt`.
#[derive(Debug, Args)]
pub(super) struct Mqtt {
    /// The broker (MQTT 3.1.1, no TLS, no authentication).
    #[arg(long, default_value = "127.0.0.1:1883", value_name = "HOST:PORT")]
    broker: String,
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
    #[arg(long, default_value = "message-id")]
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
        if self.topic.is_empty() || self.client_id.is_empty() {
            return Err(usage("--topic and --client-id take at least one byte"));
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
        let tally = Tally {
            f: report.figures.clone(),
            syncs: 0,
        };
        print(&asked, &tally, truth.as_ref())?;
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
            counts: "the board's last boot",
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
                ("acknowledged_ids", json!(t.acknowledged.len())),
                ("connections", json!(b.connections)),
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
            count(t.publishes, "PUBLISH"),
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

/// `n` and the noun, plural unless one ("PUBLISH" takes "es").
fn count(n: u64, noun: &str) -> String {
    match (n, noun.ends_with('H')) {
        (1, _) => format!("1 {noun}"),
        (_, true) => format!("{n} {noun}es"),
        (_, false) => format!("{n} {noun}s"),
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
        Hangup::Silent => format!(
            "the broker sent nothing for {} s after CONNECT (no CONNACK)",
            idem_mqtt::client::CONNACK_WAIT_S
        ),
        Hangup::TooLong => format!(
            "the broker sent a PUBLISH whose topic is too long for the board's {}-byte buffer (--topic's filter matched it)",
            modem::MAX_PACKET + modem::CHUNK
        ),
        Hangup::HeldBackFull => format!(
            "the broker sent more PUBLISHes past its window than the board holds back ({}): lower its max_inflight_messages",
            modem::HELD_BACK
        ),
    }
}

/// What the host reads of the packets it carries.
#[derive(Default)]
struct Tap {
    /// Broker bytes carried to the board and not yet a whole packet.
    buf: Vec<u8>,
    /// The message id of each packet identifier's latest PUBLISH.
    ids: HashMap<u16, String>,
    /// Ids whose PUBLISH the board acknowledged (PUBACK or PUBREC).
    acknowledged: HashSet<String>,
    publishes: u64,
    dups: u64,
    subscribed: bool,
    /// The QoS subscribed at.
    asked: u8,
    /// PUBLISHes (not retained) below it, as their publisher sent them.
    below: u64,
    /// A lower QoS that a SUBACK granted.
    granted_below: Option<u8>,
    /// CONNACKs carried, and those after the first that said session present 0.
    connacks: u32,
    sessions_lost: u32,
}

impl Tap {
    /// Broker bytes as the board got them, in order, once: the PUBLISHes among them.
    fn carried(&mut self, bytes: &[u8]) -> u64 {
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
    fn sent(&mut self, packet: &[u8]) {
        if let [first, 2, hi, lo] = *packet
            && (first == 0x40 || first == 0x50)
            && let Some(id) = self.ids.get(&u16::from_be_bytes([hi, lo]))
        {
            self.acknowledged.insert(id.clone());
        }
    }

    fn connected(&mut self) {
        self.buf.clear();
    }
}

/// The host's end of the modem.
struct Bridge {
    link: UnixStream,
    reader: HostReader,
    broker: String,
    config: SessionConfig,
    tcp: Option<TcpStream>,
    /// The broker's bytes not yet taken by the board.
    relay: Relay,
    tap: Tap,
    targets: std::iter::Peekable<std::vec::IntoIter<u64>>,
    rng: SplitMix64,
    idle: Duration,
    timeout: Duration,
    last_new: Instant,
    last_empty: bool,
    finishing: bool,
    connections: u32,
    /// The boot the board last announced.
    boot: Option<u32>,
    /// A hello went out after a silence: the board's answer may find it unconfigured.
    hello_after_silence: bool,
    /// Connections in a row that the broker closed or the board hung up, with no new id
    /// acknowledged (at QoS 0, no PUBLISH carried).
    strikes: u32,
}

impl Bridge {
    fn new(link: UnixStream, a: &Mqtt, config: SessionConfig, targets: Vec<u64>) -> Self {
        Self {
            link,
            reader: HostReader::in_domain(modem::DOMAIN),
            broker: a.broker.clone(),
            config,
            tcp: None,
            relay: Relay::default(),
            tap: Tap {
                asked: a.qos,
                ..Tap::default()
            },
            targets: targets.into_iter().peekable(),
            rng: SplitMix64::new(a.seed ^ 0x5EED),
            idle: Duration::from_millis(a.idle_ms),
            timeout: Duration::from_secs(a.timeout),
            last_new: Instant::now(),
            last_empty: false,
            finishing: false,
            connections: 0,
            boot: None,
            hello_after_silence: false,
            strikes: 0,
        }
    }

    /// Carries bytes until the board reports, after the idle end.
    fn run(&mut self, reset: &(impl Fn() + Clone + Send + 'static)) -> anyhow::Result<Report> {
        let started = Instant::now();
        let clock = || started.elapsed().as_micros() as u64;
        // The feed's silences (idem_board::timing): a hello after a silence, since a boot
        // frame cut by a reset, or sent before QEMU's socket had a reader, is lost.
        let mut timer = HostTimer::new(clock());
        let mut heard = Instant::now();
        let mut buf = [0u8; 512];
        let mut hellos = 1;
        self.tell(&ToBoard::Hello {
            version: modem::VERSION,
        })?;
        loop {
            if started.elapsed() > self.timeout {
                bail!(
                    "the board did not finish within {} s",
                    self.timeout.as_secs()
                );
            }
            if heard.elapsed() > Duration::from_secs(10) {
                bail!(
                    "the board said nothing for 10 s (is the ELF idem-mqtt's, built with --features qemu?)"
                );
            }
            let n = match self.link.read(&mut buf) {
                Ok(0) => bail!("QEMU closed the board's serial link"),
                Ok(n) => n,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => 0,
                Err(e) => bail!("the board's serial link failed: {e}"),
            };
            for &byte in &buf[..n] {
                let frame = self.reader.push(byte);
                // Frames that keep failing from a board never heard, after a hello an
                // idem-mqtt board would have answered: another image (the feed's
                // frames fail this link's CRC domain).
                if self.boot.is_none() && hellos > 1 && self.reader.skipped >= 3 {
                    bail!(
                        "the board sends frames that are not idem-mqtt's ({} so far, none of its own): is the ELF another idem image? Build idem-mqtt (cd firmware && cargo build --release --features qemu --bin idem-mqtt)",
                        self.reader.skipped
                    );
                }
                if let Some(Ok(msg)) = frame {
                    heard = Instant::now();
                    timer.heard(clock());
                    if let Some(report) = self.on_board(msg, reset)? {
                        return Ok(report);
                    }
                }
            }
            if timer.hello_due(clock()) {
                hellos += 1;
                self.hello_after_silence = true;
                self.tell(&ToBoard::Hello {
                    version: modem::VERSION,
                })?;
            }
            if self.tap.subscribed
                && !self.finishing
                && self.last_empty
                && self.last_new.elapsed() >= self.idle
            {
                self.finishing = true;
                self.tell(&ToBoard::Finish)?;
            }
        }
    }

    fn on_board(
        &mut self,
        msg: FromBoard,
        reset: &(impl Fn() + Clone + Send + 'static),
    ) -> anyhow::Result<Option<Report>> {
        if std::env::var_os("IDEM_TRACE").is_some() {
            eprintln!("board: {msg:?}");
        }
        match msg {
            FromBoard::Boot { version, .. } if version != modem::VERSION => {
                bail!(
                    "the board speaks protocol version {version}, this host {}",
                    modem::VERSION
                )
            }
            // The same boot again: its answer to a hello that crossed its boot frame, or
            // to a hello after a silence, when the configuration may have been lost: a
            // board off line and silent configured again (it dials at once when it has
            // its configuration).
            // A board on line is never silent for a hello's wait, so one that answers
            // such a hello lost a Dial or a Connected, or the finish: each is asked
            // again. The configuration itself is in its flash.
            FromBoard::Boot { boots, .. } if self.boot == Some(boots) => {
                if std::mem::take(&mut self.hello_after_silence) {
                    if self.finishing {
                        self.tell(&ToBoard::Finish)?;
                    } else {
                        self.configure()?;
                    }
                }
            }
            FromBoard::Boot { boots, .. } => {
                self.boot = Some(boots);
                self.hang_up();
                self.configure()?;
            }
            FromBoard::Dial => self.dial()?,
            FromBoard::Pull { at, max } => self.pull(at, max, reset)?,
            FromBoard::Send(bytes) => {
                let before = self.tap.acknowledged.len();
                self.tap.sent(&bytes);
                if self.tap.acknowledged.len() > before {
                    self.strikes = 0;
                }
                if let Some(tcp) = &mut self.tcp
                    && tcp.write_all(&bytes).is_err()
                {
                    self.tcp = None;
                }
            }
            FromBoard::Hangup(why) => {
                let why = hangup_words(why);
                eprintln!("device mqtt: the board hung up: {why}");
                self.hang_up();
                self.strike(format!("the board hung up: {why}"))?;
            }
            FromBoard::Report(r) => return Ok(Some(r)),
            FromBoard::Refused(why) => bail!("the board refused: {}", refusal_words(why)),
            FromBoard::Failed(why) => bail!("the board stopped: its {why:?} failed"),
        }
        Ok(None)
    }

    /// A connection ended by the broker or by the board's refusal of what the broker
    /// sent: after [`TRIES`] in a row with no PUBLISH carried, one sentence.
    fn strike(&mut self, why: String) -> anyhow::Result<()> {
        self.strikes += 1;
        // The session's backoff before the board dials again.
        std::thread::sleep(Duration::from_millis(u64::from(backoff_ms(self.strikes))));
        if self.strikes >= TRIES {
            bail!(
                "{why}, {} connections in a row with no new message acknowledged; the run stops ungraded",
                self.strikes
            );
        }
        Ok(())
    }

    fn configure(&mut self) -> anyhow::Result<()> {
        let configure = ToBoard::Configure {
            version: modem::VERSION,
            config: self.config.clone(),
        };
        self.tell(&configure)
    }

    fn hang_up(&mut self) {
        if let Some(tcp) = self.tcp.take() {
            let _ = tcp.shutdown(std::net::Shutdown::Both);
        }
    }

    fn dial(&mut self) -> anyhow::Result<()> {
        self.hang_up();
        if self.finishing {
            return Ok(());
        }
        let tcp = dial(&self.broker)?;
        tcp.set_read_timeout(Some(Duration::from_millis(u64::from(QUIET_WAIT_MS))))?;
        self.tcp = Some(tcp);
        self.connections += 1;
        self.relay.connected();
        self.tap.connected();
        self.tell(&ToBoard::Connected)
    }

    /// Answers a pull: the bytes from `at`, at most `max`, after a bounded wait for some
    /// (`idem_board::modem::Relay`).
    fn pull(
        &mut self,
        at: u32,
        max: u8,
        reset: &(impl Fn() + Clone + Send + 'static),
    ) -> anyhow::Result<()> {
        let Some(tcp) = &mut self.tcp else {
            return self.tell(&ToBoard::Closed);
        };
        if self.finishing {
            // A pull after the finish: it crossed the finish, or the finish was lost on
            // the line. Finish again; nothing more is read from the broker.
            return self.tell(&ToBoard::Finish);
        }
        let (answer, new) = self.relay.answer(at, max, |buf| match tcp.read(buf) {
            Ok(0) => Socket::Closed,
            Ok(n) => Socket::Bytes(n),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                Socket::Bytes(0)
            }
            Err(_) => Socket::Closed,
        });
        match &answer {
            ToBoard::Closed => {
                self.tcp = None;
                self.strike("the broker closed the connection".to_string())?;
            }
            ToBoard::Bytes { bytes, .. } => {
                self.last_empty = bytes.is_empty();
                let publishes = self.tap.carried(&bytes[bytes.len() - new..]);
                if publishes > 0 {
                    // At QoS 0 nothing is acknowledged: a PUBLISH carried is progress.
                    if self.config.qos == 0 {
                        self.strikes = 0;
                    }
                    self.last_new = Instant::now();
                    self.reset_if_due(reset);
                }
            }
            _ => {}
        }
        self.tell(&answer)
    }

    /// Resets the board, a few milliseconds on, when the PUBLISHes carried reach a
    /// target.
    fn reset_if_due(&mut self, reset: &(impl Fn() + Clone + Send + 'static)) {
        while self
            .targets
            .peek()
            .is_some_and(|&t| t <= self.tap.publishes)
        {
            self.targets.next();
            // Within two of the board's record times (its pause before an ack under
            // QEMU): before, between or after the record and its acknowledgement.
            let delay = Duration::from_micros(self.rng.range(0, 2 * QEMU_EFFECT_US));
            let reset = reset.clone();
            std::thread::spawn(move || {
                std::thread::sleep(delay);
                reset();
            });
        }
    }

    fn tell(&mut self, msg: &ToBoard) -> anyhow::Result<()> {
        let mut scratch = [0u8; modem::TO_BOARD_MAX + 4];
        let mut out = [0u8; modem::TO_BOARD_ENCODED];
        let bytes = modem::encode(msg, &mut scratch, &mut out)
            .map_err(|e| anyhow!("encoding {msg:?}: {e:?}"))?;
        self.link
            .write_all(bytes)
            .map_err(|e| anyhow!("the board's serial link failed: {e}"))
    }
}
