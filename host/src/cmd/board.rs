//! `idem device`: the board as the consumer of a stream that lives on the host.
//!
//! `feed` talks to a board (a serial port or pty, or QEMU's socket) with the core's feed
//! protocol (`idem_board::feed`): it reads the board's boot frame, configures the
//! stream, and answers the board's pulls from the position the board announces (its
//! flash is the truth), through any number of resets. `qemu` starts the feed firmware
//! under QEMU and runs `feed` against it, with resets at seeded instants through QMP.
//!
//! What the board says is checked by the core's `Host`: a claim past what this host
//! delivered is one sentence and exit 1, and a done frame is graded only when this host
//! delivered every offset (otherwise the verdict is `unverified`, exit 1). Message ids
//! that came from outside idem (a log file's ids, a Kafka record's key) go to the board
//! keyed under the board's own id key, from its boot frame.

use std::io::{BufRead, IsTerminal, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{Args, Subcommand};
use idem_board::feed::{
    BATCH, DOMAIN, FromDevice, Heard, Host, HostError, HostReader, StoreId, StreamConfig,
    TO_DEVICE_ENCODED, TO_DEVICE_MAX, ToDevice, encode,
};
use idem_board::timing::HostTimer;
use idem_core::log::{IdKey, MessageId, Offset};
use idem_sim::check::Verdict;
use idem_sim::payment::Payment;
use idem_sim::registry::{self, Source};
use idem_sim::rng::SplitMix64;
use serde_json::json;

use crate::error::usage;
use crate::render;
use crate::select::{self, ProducerArg, ScenarioArgs, ScenarioKind, StoreKind};

/// The board as the consumer of a stream the host feeds it.
#[derive(Debug, Args)]
pub struct Cmd {
    #[command(subcommand)]
    what: What,
}

#[derive(Debug, Subcommand)]
enum What {
    /// Feed a scenario or a JSON Lines log to a board running the idem-feed firmware.
    Feed(Feed),
    /// Start the idem-feed firmware under QEMU and feed it, with resets if asked.
    Qemu(Qemu),
}

/// The stream and how the board consumes it.
#[derive(Debug, Clone, Args)]
struct StreamArgs {
    /// The scenario (or give --log FILE instead).
    scenario: Option<ScenarioKind>,
    /// Read the stream from a JSON Lines file instead of a built-in scenario.
    #[arg(long, value_name = "FILE")]
    log: Option<PathBuf>,
    /// The board's store: naive, offset, message-id, producer-seq, atomic or two-phase.
    #[arg(long, value_enum)]
    store: StoreKind,
    /// Commit the position every K events (at least 1) [default: the scenario's]
    #[arg(long, value_name = "K")]
    checkpoint_every: Option<u64>,
    /// Number of events (ddia and gauge only) [default: 100]
    #[arg(long)]
    events: Option<u64>,
    /// The producer the scenario runs with.
    #[arg(long, value_enum, default_value = "non-idempotent")]
    producer: ProducerArg,
    /// The board resets itself once, on its first boot of this stream, right after
    /// applying this offset (before its checkpoint).
    #[arg(long, value_name = "OFFSET")]
    crash_after: Option<Offset>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// Give up after this many seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 300)]
    timeout: u64,
    /// Wait this long per event before answering a pull, so a person can reset the board
    /// mid-stream by hand.
    #[arg(long, value_name = "MS", default_value_t = 0)]
    pace_ms: u64,
    /// Test aid: damage the line on purpose (seeded): garbage between frames and, now and
    /// then, a flipped bit in a frame.
    #[arg(long, value_name = "SEED", hide = true)]
    garble: Option<u64>,
    #[cfg(feature = "kafka")]
    #[command(flatten)]
    kafka: KafkaArgs,
}

/// A partition of a Kafka-protocol topic as the stream (the `kafka` feature).
#[cfg(feature = "kafka")]
#[derive(Debug, Clone, Args)]
struct KafkaArgs {
    /// Bridge this topic's partition to the board instead of a scenario or a log.
    #[arg(long, conflicts_with_all = ["scenario", "log", "events", "producer"])]
    topic: Option<String>,
    /// The partition.
    #[arg(long, default_value_t = 0, requires = "topic")]
    partition: i32,
    /// The consumer group that gets the board's position, committed only after the board
    /// acknowledged a checkpoint.
    #[arg(long, requires = "topic")]
    group: Option<String>,
    /// The broker.
    #[arg(long, default_value = "127.0.0.1:9092", value_name = "HOST:PORT")]
    brokers: String,
}

/// Where the board's acknowledged position is copied to: a Kafka consumer group.
#[cfg(feature = "kafka")]
type Bridge = super::kafka::BoardSource;

/// Without the `kafka` feature there is no group to copy the position to.
#[cfg(not(feature = "kafka"))]
struct Bridge;

#[cfg(not(feature = "kafka"))]
impl Bridge {
    fn commit(&self, _: Offset) -> anyhow::Result<()> {
        Ok(())
    }
}

/// `idem device feed`.
#[derive(Debug, Args)]
struct Feed {
    #[command(flatten)]
    stream: StreamArgs,
    /// The board: a serial port or pty path, `unix:PATH` or `tcp:HOST:PORT` (QEMU's
    /// socket).
    #[arg(long)]
    port: String,
    /// The serial port's speed.
    #[arg(long, default_value_t = 115_200)]
    baud: u32,
}

/// `idem device qemu`.
#[derive(Debug, Args)]
struct Qemu {
    #[command(flatten)]
    stream: StreamArgs,
    /// Reset the board this many times at seeded instants while it consumes (QMP's
    /// system_reset); on a terminal, `r` then Enter resets it by hand.
    #[arg(long, default_value_t = 0)]
    resets: u32,
    /// The seed of the reset instants.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// The idem-feed ELF built with the qemu feature [default: built from firmware/]
    #[arg(long, value_name = "FILE")]
    elf: Option<PathBuf>,
}

impl Cmd {
    /// Runs the command.
    pub fn run(self) -> anyhow::Result<ExitCode> {
        match self.what {
            What::Feed(f) => f.run(),
            What::Qemu(q) => q.run(),
        }
    }
}

/// The stream, ready to feed: its events, its truth and its configuration.
struct Stream {
    name: String,
    events: Vec<Payment>,
    /// The bytes each event's id was made of, when the ids came from outside idem (a log
    /// file, a Kafka partition): the board gets them keyed under its own key.
    id_bytes: Option<Vec<Vec<u8>>>,
    true_total: i64,
    config: StreamConfig,
    /// A Kafka partition's group, when the stream is one.
    bridge: Option<Bridge>,
}

impl idem_board::feed::Source for Stream {
    fn len(&self) -> Offset {
        self.events.len() as u64
    }

    fn event(&self, offset: Offset, key: &IdKey) -> Option<Payment> {
        let i = usize::try_from(offset).ok()?;
        let mut e = *self.events.get(i)?;
        if let Some(bytes) = self.id_bytes.as_ref().and_then(|b| b.get(i)) {
            e.payload.id = MessageId::keyed(key, bytes);
        }
        Some(e)
    }
}

fn store_id(kind: StoreKind) -> anyhow::Result<StoreId> {
    StoreId::from_kind(kind).ok_or_else(|| {
        usage(format!(
            "the board runs {}, not {}",
            registry::names_on(Source::Board, "and"),
            kind.name()
        ))
    })
}

/// The id of a stream of events: another stream is another id. Ids that came as bytes
/// count by their bytes (their message ids depend on a key), so a rerun on the same file
/// names the same stream.
fn stream_id(events: &[Payment], id_bytes: Option<&[Vec<u8>]>) -> u32 {
    let mut bytes = Vec::with_capacity(events.len() * 48);
    for (i, e) in events.iter().enumerate() {
        let m = e.payload;
        let id = match id_bytes.and_then(|b| b.get(i)) {
            Some(b) => {
                bytes.extend_from_slice(&(b.len() as u64).to_le_bytes());
                bytes.extend_from_slice(b);
                0
            }
            None => m.id.0,
        };
        for word in [
            e.offset,
            id,
            u64::from(m.producer),
            u64::from(m.epoch),
            u64::from(m.seq),
            m.amount as u64,
        ] {
            bytes.extend_from_slice(&word.to_le_bytes());
        }
    }
    short_id(&bytes)
}

/// A 32-bit id of `bytes`: the core's public-key id hash, folded.
fn short_id(bytes: &[u8]) -> u32 {
    let h = idem_core::log::MessageId::keyed(&idem_core::log::IdKey::PUBLIC, bytes).0;
    (h ^ (h >> 32)) as u32
}

impl StreamArgs {
    /// The stream of a Kafka partition, when `--topic` names one.
    #[cfg(feature = "kafka")]
    fn kafka(&self, store: StoreId) -> anyhow::Result<Option<Stream>> {
        let Some(topic) = &self.kafka.topic else {
            return Ok(None);
        };
        let group = self.kafka.group.as_deref().ok_or_else(|| {
            usage("--topic needs --group: the group that gets the board's position")
        })?;
        let mut source = Bridge::read(
            &self.kafka.brokers,
            topic,
            group,
            self.kafka.partition,
            store == StoreId::MessageId,
        )?;
        if source.events.is_empty() {
            return Err(usage(format!(
                "{topic} partition {} has no records",
                self.kafka.partition
            )));
        }
        let k = self.checkpoint_every.unwrap_or(10);
        let name = format!("kafka:{topic}/{}", self.kafka.partition);
        Ok(Some(Stream {
            true_total: source.true_total,
            config: StreamConfig {
                stream: short_id(name.as_bytes()),
                store,
                checkpoint_every: u32::try_from(k)
                    .ok()
                    .filter(|&k| k > 0)
                    .ok_or_else(|| usage("the checkpoint interval must be 1 to 4294967295"))?,
                crash_after: self.crash_after,
            },
            name,
            events: std::mem::take(&mut source.events),
            id_bytes: Some(std::mem::take(&mut source.id_bytes)),
            bridge: Some(source),
        }))
    }

    fn load(&self) -> anyhow::Result<Stream> {
        #[cfg(feature = "kafka")]
        if let Some(stream) = self.kafka(store_id(self.store)?)? {
            return Ok(stream);
        }
        if self.scenario == Some(ScenarioKind::DualWrite) {
            return Err(usage(
                "dual-write writes two views; the board consumes a stream into one store",
            ));
        }
        select::check_pair(self.scenario, self.store)?;
        let store = store_id(self.store)?;
        let args = ScenarioArgs {
            events: self.events,
            checkpoint_every: self.checkpoint_every,
            no_crash: true,
            log: self.log.clone(),
            producer: self.producer,
            ..ScenarioArgs::default()
        };
        let loaded = select::load(self.scenario, &args)?;
        let events = loaded.all_events();
        if events.is_empty() {
            return Err(usage("the stream has no events"));
        }
        let k = loaded.consumer().checkpoint_every.get();
        let checkpoint_every = u32::try_from(k).map_err(|_| {
            usage(format!(
                "--checkpoint-every {k}: the board takes up to {}",
                u32::MAX
            ))
        })?;
        if let Some(o) = self.crash_after.filter(|&o| o >= events.len() as u64) {
            return Err(usage(format!(
                "--crash-after {o}: the stream has offsets 0..={}",
                events.len() - 1
            )));
        }
        // A log file's ids are the user's bytes: the board keys them.
        let id_bytes = self.log.as_ref().map(|_| {
            (0..events.len() as u64)
                .map(|o| loaded.id_text(o).unwrap_or_default().as_bytes().to_vec())
                .collect::<Vec<_>>()
        });
        Ok(Stream {
            name: loaded.name().to_string(),
            true_total: loaded.truth_by_prefix().last().copied().unwrap_or(0),
            config: StreamConfig {
                stream: stream_id(&events, id_bytes.as_deref()),
                store,
                checkpoint_every,
                crash_after: self.crash_after,
            },
            events,
            id_bytes,
            bridge: None,
        })
    }
}

/// A byte link to the board.
trait Link: Read + Write + Send {}
impl<T: Read + Write + Send> Link for T {}

/// How long a read waits before the loop looks at its timers.
const POLL: Duration = Duration::from_millis(20);

fn connect(port: &str, baud: u32) -> anyhow::Result<Box<dyn Link>> {
    if let Some(path) = port.strip_prefix("unix:") {
        let s = UnixStream::connect(path)
            .map_err(|e| usage(format!("cannot connect to {path} ({e})")))?;
        s.set_read_timeout(Some(POLL))?;
        return Ok(Box::new(s));
    }
    if let Some(addr) = port.strip_prefix("tcp:") {
        let s = std::net::TcpStream::connect(addr)
            .map_err(|e| usage(format!("cannot connect to {addr} ({e})")))?;
        s.set_read_timeout(Some(POLL))?;
        s.set_nodelay(true)?;
        return Ok(Box::new(s));
    }
    if !Path::new(port).exists() {
        return Err(usage(format!(
            "{port} does not exist: give the board's serial port (such as /dev/ttyACM0), a pty, unix:PATH or tcp:HOST:PORT"
        )));
    }
    let p = serialport::new(port, baud)
        .timeout(POLL)
        .open()
        .map_err(|e| usage(format!("{port} is not a serial port ({e})")))?;
    Ok(Box::new(p))
}

/// What a feed saw, for the summary.
#[derive(Debug, Default)]
struct Seen {
    boots: u32,
    resumes: Vec<Offset>,
    acked: Option<(Offset, Offset, i64)>,
    /// Boots, total and durable position of the done frame, and the offsets `0..n` this
    /// host did not deliver, if any.
    done: Option<(u32, i64, Offset, Option<Offset>)>,
    garbled: u32,
    out_of_order: u32,
    stack_bytes: u32,
    hellos: u32,
    injected: u32,
    /// Offsets committed to the Kafka group, each the board's acknowledged position.
    group_commits: Vec<Offset>,
    /// Batches sent, and those sent again because the board asked again.
    batches: u64,
    resends: u64,
}

/// What a failed read or write of the board's link says, at `offset` (where the board
/// reads next): never an I/O error, so that `main` does not take a hang-up (which
/// `serialport` reports as a broken pipe) for a closed standard output.
fn link_error(e: &std::io::Error, offset: Offset) -> anyhow::Error {
    use std::io::ErrorKind::{BrokenPipe, ConnectionAborted, ConnectionReset, UnexpectedEof};
    if matches!(
        e.kind(),
        BrokenPipe | ConnectionReset | ConnectionAborted | UnexpectedEof
    ) {
        anyhow::anyhow!("the board's link closed at offset {offset}")
    } else {
        anyhow::anyhow!("the board's link failed at offset {offset}: {e}")
    }
}

/// Writes a frame, damaging the line on purpose when asked (`--garble`).
fn send(
    link: &mut dyn Link,
    msg: &ToDevice,
    noise: &mut Option<SplitMix64>,
    seen: &mut Seen,
) -> std::io::Result<()> {
    let mut scratch = [0u8; TO_DEVICE_MAX + 4];
    let mut out = [0u8; TO_DEVICE_ENCODED];
    let bytes = encode(msg, &mut scratch, &mut out)
        .map_err(|e| std::io::Error::other(format!("encoding a frame: {e}")))?;
    let mut bytes = bytes.to_vec();
    if let Some(rng) = noise.as_mut() {
        if rng.range(0, 2) == 0 {
            // Garbage, then a delimiter: a frame of its own that does not decode.
            let n = rng.range(1, 24) as usize;
            let garbage: Vec<u8> = (0..n).map(|_| (rng.next_u64() as u8) | 1).collect();
            link.write_all(&garbage)?;
            link.write_all(&[0])?;
            seen.injected += 1;
        }
        if rng.range(0, 9) == 0 && bytes.len() > 2 {
            let i = rng.range(0, bytes.len() as u64 - 2) as usize;
            bytes[i] ^= 1 << (rng.next_u64() % 8);
            seen.injected += 1;
        }
    }
    link.write_all(&bytes)?;
    link.flush()?;
    Ok(())
}

/// Feeds `stream` to the board on `link` until it reports done (or the time runs out).
/// `on_batch` is called with each batch's first offset and length once it is sent.
fn feed(
    link: &mut dyn Link,
    stream: &Stream,
    args: &StreamArgs,
    on_batch: &mut dyn FnMut(Offset, u64),
    quiet: bool,
) -> anyhow::Result<Seen> {
    let mut host = Host::new(stream.config);
    let mut reader = HostReader::in_domain(DOMAIN);
    let mut noise = args.garble.map(SplitMix64::new);
    let mut seen = Seen::default();
    let started = Instant::now();
    let limit = Duration::from_secs(args.timeout);
    // The feed's timing policy, on microseconds since the start.
    let clock = || started.elapsed().as_micros() as u64;
    let mut timer = HostTimer::new(0);
    let mut buf = [0u8; 512];
    let mut paced: Option<(Instant, ToDevice, bool)> = None;
    let mut last_pull_resend = false;
    let mut heard_any = false;
    let say = |line: String| {
        if !quiet {
            eprintln!("{line}");
        }
    };
    loop {
        // The stats frame follows the done frame; wait a little for it.
        if timer.finished(clock(), seen.stack_bytes > 0) {
            return Ok(seen);
        }
        if started.elapsed() > limit {
            let at = seen
                .acked
                .map_or("nothing acknowledged".to_string(), |(a, d, t)| {
                    format!("applied up to {a}, durable {d}, total {t}")
                });
            anyhow::bail!(
                "the board did not finish within {} s ({at}; {} boots seen)",
                args.timeout,
                seen.boots
            );
        }
        let n = match link.read(&mut buf) {
            // After the done frame, only the stats frame was still to come.
            Ok(0) if seen.done.is_some() => return Ok(seen),
            Ok(0) => anyhow::bail!("the board's link closed at offset {}", host.position()),
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::Interrupted
                ) =>
            {
                0
            }
            Err(_) if seen.done.is_some() => return Ok(seen),
            Err(e) => return Err(link_error(&e, host.position())),
        };
        for &b in &buf[..n] {
            let Some(Ok(msg)) = reader.push(b) else {
                // Noise at connect (a frame cut in half) is not enough: frames keep
                // failing after a hello that a feed board would have answered.
                if !heard_any && seen.hellos > 0 && reader.skipped >= 3 {
                    anyhow::bail!(
                        "the board sends frames that are not idem-feed's ({} so far, none of its own): is it running the demo image? Flash idem-feed (cd firmware && cargo run --release --bin idem-feed)",
                        reader.skipped
                    );
                }
                continue;
            };
            heard_any = true;
            timer.heard(clock());
            let (heard, reply) = host
                .on_message(&msg, stream)
                .map_err(|e: HostError| anyhow::anyhow!("{e}"))?;
            match heard {
                Heard::Booted { boots, resume } => {
                    if reply.is_some() {
                        seen.boots = seen.boots.max(boots);
                        say(format!(
                            "board: boot {boots}; its flash says it resumes at {resume}"
                        ));
                    }
                }
                Heard::Pulled { resend, .. } => last_pull_resend = resend,
                Heard::Unconfirmed => {}
                Heard::Done {
                    boots,
                    total,
                    durable,
                    undelivered,
                    advanced,
                } => {
                    if let (Some(durable), Some(bridge)) = (advanced, &stream.bridge) {
                        bridge.commit(durable)?;
                        seen.group_commits.push(durable);
                    }
                    seen.done = Some((boots, total, durable, undelivered));
                    seen.boots = seen.boots.max(boots);
                    timer.done(clock());
                }
                Heard::Report { said, advanced } => {
                    if let (Some(durable), Some(bridge)) = (advanced, &stream.bridge) {
                        // The group gets only what the board acknowledged as durable.
                        bridge.commit(durable)?;
                        seen.group_commits.push(durable);
                    }
                    match said {
                        FromDevice::Ready { resume, total, .. } => {
                            seen.resumes.push(resume);
                            say(format!(
                                "board: consuming {} from offset {resume} (total {total})",
                                stream.name
                            ));
                        }
                        FromDevice::Ack {
                            applied,
                            durable,
                            total,
                        } => {
                            if seen.acked.is_none_or(|(_, d, _)| d != durable) {
                                say(format!(
                                    "board: {}; applied up to {}, total {total}",
                                    render::position_text(durable),
                                    applied.saturating_sub(1)
                                ));
                            }
                            seen.acked = Some((applied, durable, total));
                        }
                        FromDevice::Stats {
                            garbled,
                            out_of_order,
                            stack_bytes,
                        } => {
                            (seen.garbled, seen.out_of_order) = (garbled, out_of_order);
                            seen.stack_bytes = stack_bytes.max(1);
                        }
                        _ => {}
                    }
                }
            }
            if let Some(m) = reply {
                if let ToDevice::Events { events, .. } = &m
                    && args.pace_ms > 0
                {
                    // Paced: the batch goes out later; the board's repeated pull for
                    // the same batch meanwhile is the same request, not a new one.
                    if paced.is_none() {
                        let due = Instant::now()
                            + Duration::from_millis(args.pace_ms * events.len() as u64);
                        paced = Some((due, m, last_pull_resend));
                    }
                    continue;
                }
                if matches!(m, ToDevice::Events { .. }) {
                    seen.batches += 1;
                    seen.resends += u64::from(last_pull_resend);
                }
                send(link, &m, &mut noise, &mut seen)
                    .map_err(|e| link_error(&e, host.position()))?;
                if let ToDevice::Events { events, .. } = &m
                    && let Some(first) = events.first()
                {
                    on_batch(first.offset, events.len() as u64);
                }
            }
        }
        if let Some((due, ..)) = &paced
            && Instant::now() >= *due
            && let Some((_, m, resend)) = paced.take()
        {
            seen.batches += 1;
            seen.resends += u64::from(resend);
            send(link, &m, &mut noise, &mut seen).map_err(|e| link_error(&e, host.position()))?;
            if let ToDevice::Events { events, .. } = &m
                && let Some(first) = events.first()
            {
                on_batch(first.offset, events.len() as u64);
            }
        }
        if timer.hello_due(clock()) {
            // Nothing heard: the board booted before we connected, or lost its
            // configuration. Who is there?
            seen.hellos += 1;
            let hello = host.hello();
            send(link, &hello, &mut None, &mut seen)
                .map_err(|e| link_error(&e, host.position()))?;
        }
    }
}

fn report(
    stream: &Stream,
    args: &StreamArgs,
    seen: &Seen,
    resets: Option<u32>,
) -> anyhow::Result<ExitCode> {
    let Some((boots, total, durable, undelivered)) = seen.done else {
        anyhow::bail!("the board never reported done");
    };
    let verdict = Verdict::of(total, stream.true_total);
    // Graded only when this host delivered every offset the board applied.
    let verdict_name = if undelivered.is_some() {
        "unverified"
    } else {
        verdict.name()
    };
    let mut out = std::io::stdout().lock();
    if args.json {
        let mut v = json!({
            "scenario": stream.name,
            "store": stream.config.store.name(),
            "events": stream.events.len(),
            "checkpoint_every": stream.config.checkpoint_every,
            "crash_after": stream.config.crash_after,
            "true_total": stream.true_total,
            "final_total": total,
            "verdict": verdict_name,
            "durable": durable,
            "boots": boots,
            "resumes": seen.resumes,
            "batches": seen.batches,
            "resends": seen.resends,
            "garbled": seen.garbled,
            "out_of_order": seen.out_of_order,
            "stack_bytes": seen.stack_bytes,
            "hellos": seen.hellos,
        });
        if let Some(n) = resets {
            v["resets"] = n.into();
        }
        if args.garble.is_some() {
            v["damaged_on_purpose"] = seen.injected.into();
        }
        if let Some(n) = undelivered {
            v["undelivered"] = json!({ "first": 0, "last": n - 1 });
        }
        #[cfg(feature = "kafka")]
        if let Some(b) = &stream.bridge {
            v["group_commits"] = seen.group_commits.clone().into();
            v["group_offset_was"] = b.group_was.into();
        }
        writeln!(out, "{v}")?;
    } else {
        writeln!(
            out,
            "board: {} with the {} store, {}, checkpoint every {}{}",
            stream.name,
            stream.config.store.name(),
            render::count(stream.events.len() as u64, "event"),
            stream.config.checkpoint_every,
            stream
                .config
                .crash_after
                .map_or(String::new(), |o| format!(", a reset after offset {o}"))
        )?;
        writeln!(
            out,
            "  final total        {total} ({})",
            if undelivered.is_some() {
                "unverified".to_string()
            } else {
                verdict.to_string()
            }
        )?;
        writeln!(out, "  true total         {}", stream.true_total)?;
        let resumes: Vec<String> = seen.resumes.iter().map(ToString::to_string).collect();
        writeln!(
            out,
            "  boots              {boots}; resumed at {} (each from its own flash)",
            resumes.join(", ")
        )?;
        if let Some(n) = resets {
            writeln!(out, "  resets through QMP {n}")?;
        }
        writeln!(
            out,
            "  batches sent       {} ({} again, when the board asked again)",
            seen.batches, seen.resends
        )?;
        writeln!(
            out,
            "  dropped by board   {} garbled frames, {} out-of-order batches",
            seen.garbled, seen.out_of_order
        )?;
        if seen.stack_bytes > 1 {
            writeln!(out, "  stack high-water   {} bytes", seen.stack_bytes)?;
        }
        #[cfg(feature = "kafka")]
        if let Some(b) = &stream.bridge {
            writeln!(
                out,
                "  kafka group        committed {} after the board's checkpoints (it was {})",
                seen.group_commits
                    .last()
                    .map_or("nothing".into(), ToString::to_string),
                b.group_was.map_or("unset".into(), |o| o.to_string())
            )?;
        }
    }
    out.flush()?;
    if let Some(n) = undelivered {
        eprintln!("idem: {}", undelivered_text(n));
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// Why a done frame is not graded: offsets `0..n` came to the board before this host.
fn undelivered_text(n: Offset) -> String {
    let which = if n == 1 {
        "offset 0".to_string()
    } else {
        format!("offsets 0..{}", n - 1)
    };
    format!(
        "unverified: this host did not deliver {which} (the board held them before this host first heard from it: a restarted host or bridge), so its total is not graded"
    )
}

impl Feed {
    fn run(self) -> anyhow::Result<ExitCode> {
        let stream = self.stream.load()?;
        let mut link = connect(&self.port, self.baud)?;
        let seen = feed(
            &mut *link,
            &stream,
            &self.stream,
            &mut |_, _| {},
            self.stream.json,
        )?;
        report(&stream, &self.stream, &seen, None)
    }
}

/// QEMU and its sockets, stopped and removed on every path.
struct QemuRun {
    child: Child,
    /// A folder of this run's own (created exclusively, under a name nobody can
    /// predict), removed with its sockets after QEMU is stopped.
    _dir: tempfile::TempDir,
}

impl Drop for QemuRun {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits for a unix socket QEMU creates.
fn connect_socket(path: &Path, child: &mut Child) -> anyhow::Result<UnixStream> {
    let started = Instant::now();
    loop {
        match UnixStream::connect(path) {
            Ok(s) => return Ok(s),
            Err(_) if started.elapsed() < Duration::from_secs(10) => {
                if let Some(status) = child.try_wait()? {
                    anyhow::bail!("qemu-system-arm exited ({status}) before it opened its sockets");
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => anyhow::bail!("QEMU's socket {}: {e}", path.display()),
        }
    }
}

impl Qemu {
    fn elf(&self) -> anyhow::Result<PathBuf> {
        if let Some(elf) = &self.elf {
            if !elf.is_file() {
                return Err(usage(format!("{} does not exist", elf.display())));
            }
            return Ok(elf.clone());
        }
        let dir = Path::new("firmware");
        if !dir.join("Cargo.toml").is_file() {
            return Err(usage(
                "run from idem's source tree (firmware/ builds the image), or give --elf FILE",
            ));
        }
        let target = dir.join("target").join("feed-qemu");
        let status = Command::new("cargo")
            .current_dir(dir)
            .args([
                "build",
                "--release",
                "--quiet",
                "--bin",
                "idem-feed",
                "--features",
                "qemu",
                "--target-dir",
                // Relative to firmware/, where cargo runs.
                "target/feed-qemu",
            ])
            .env_remove("CARGO_TARGET_DIR")
            .env_remove("RUSTFLAGS")
            .status()
            .context("running cargo to build the firmware")?;
        if !status.success() {
            anyhow::bail!("building the idem-feed firmware failed");
        }
        Ok(target.join("thumbv6m-none-eabi/release/idem-feed"))
    }

    fn run(self) -> anyhow::Result<ExitCode> {
        let stream = self.stream.load()?;
        let events = stream.events.len() as u64;
        // Targets leave the last batch alone (when the stream has more than one), so each
        // reset lands before the board's done frame.
        let span = if events > BATCH as u64 {
            events - BATCH as u64
        } else {
            events
        };
        if u64::from(self.resets) > span {
            return Err(usage(format!(
                "--resets {}: at most {span} for this stream (one per offset, the last batch's aside)",
                self.resets
            )));
        }
        let elf = self.elf()?;
        let dir = tempfile::Builder::new()
            .prefix("idem-qemu-")
            .tempdir()
            .context("creating a temporary folder for QEMU's sockets")?;
        let (uart, qmp) = (dir.path().join("uart.sock"), dir.path().join("qmp.sock"));
        let child = Command::new("qemu-system-arm")
            .args(["-M", "microbit", "-display", "none", "-monitor", "none"])
            .arg("-chardev")
            .arg(format!("socket,id=uart,path={},server=on,wait=off", uart.display()))
            .args(["-serial", "chardev:uart"])
            .arg("-qmp")
            .arg(format!("unix:{},server=on,wait=off", qmp.display()))
            .arg("-kernel")
            .arg(&elf)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| usage(format!("cannot start qemu-system-arm ({e}); install it (apt-get install qemu-system-arm)")))?;
        let mut run = QemuRun { child, _dir: dir };
        let qmp = connect_socket(&qmp, &mut run.child)?;
        let mut link = connect_socket(&uart, &mut run.child)?;
        link.set_read_timeout(Some(POLL))?;
        let qmp = Arc::new(Mutex::new(qmp));
        {
            let mut q = qmp.lock().map_err(|_| anyhow::anyhow!("QMP lock"))?;
            q.write_all(b"{\"execute\": \"qmp_capabilities\"}\n")?;
            let mut replies = q.try_clone()?;
            std::thread::spawn(move || std::io::copy(&mut replies, &mut std::io::sink()));
        }
        let finished = Arc::new(AtomicBool::new(false));
        let landed = Arc::new(AtomicU32::new(0));
        let reset = {
            let qmp = Arc::clone(&qmp);
            let landed = Arc::clone(&landed);
            let finished = Arc::clone(&finished);
            move || {
                if !finished.load(Ordering::SeqCst)
                    && let Ok(mut q) = qmp.lock()
                    && q.write_all(b"{\"execute\": \"system_reset\"}\n").is_ok()
                {
                    landed.fetch_add(1, Ordering::SeqCst);
                }
            }
        };
        // The resets: at seeded offsets spread over the stream, each fired while the board
        // applies the batch that holds its offset, about when it applies that offset (the
        // QEMU build takes 5 ms an effect, as a board's flash would): after some effects
        // of the batch, before its ack. Each target lies past the one before, so the stream
        // moves on between resets.
        let mut rng = SplitMix64::new(self.seed);
        let mut targets: Vec<Offset> = Vec::new();
        while targets.len() < self.resets as usize {
            let t = rng.range(0, span - 1);
            if !targets.contains(&t) {
                targets.push(t);
            }
        }
        targets.sort_unstable();
        let mut targets = targets.into_iter().peekable();
        let mut on_batch = |from: Offset, len: u64| {
            // One reset a batch: the next target, if this batch holds it, or at once if
            // the stream already passed it (two shared a batch and the first reset
            // landed after that batch's checkpoint).
            if let Some(&t) = targets.peek()
                && t < from + len
            {
                targets.next();
                let delay =
                    Duration::from_micros(t.saturating_sub(from) * 5_000 + rng.range(500, 4_500));
                let reset = reset.clone();
                std::thread::spawn(move || {
                    std::thread::sleep(delay);
                    reset();
                });
            }
        };
        if std::io::stdin().is_terminal() && !self.stream.json {
            eprintln!("board: type r then Enter to reset it");
            let reset = reset.clone();
            std::thread::spawn(move || {
                for line in std::io::stdin().lock().lines().map_while(Result::ok) {
                    if line.trim() == "r" {
                        reset();
                    }
                }
            });
        }
        let result = feed(
            &mut link,
            &stream,
            &self.stream,
            &mut on_batch,
            self.stream.json,
        );
        finished.store(true, Ordering::SeqCst);
        let seen = result?;
        let landed = landed.load(Ordering::SeqCst);
        drop(run);
        report(&stream, &self.stream, &seen, Some(landed))
    }
}
