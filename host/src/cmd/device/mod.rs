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

mod feed;
mod mqtt;
mod qemu;
mod report;
mod sim;
mod stream;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use idem_board::feed::StreamConfig;
use idem_core::log::{IdKey, MessageId, Offset};
use idem_host::id_bytes::IdBytes;
use idem_payments::Payment;

use feed::{connect, feed};
use idem_lab::select::{ProducerArg, ScenarioKind, StoreKind};
use report::report;

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
    /// Start the idem-mqtt firmware under QEMU as an MQTT subscriber, this host its
    /// modem to the broker, with resets if asked.
    Mqtt(mqtt::Mqtt),
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
    #[arg(long, value_parser = idem_lab::choice::store())]
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
    /// socket), or `sim`: the board's own feed code in this process, on a flash in
    /// memory.
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
            What::Mqtt(m) => m.run(),
        }
    }
}

/// A stream's events.
enum Events {
    /// Every event whole: a scenario's, a log file's.
    Held(Vec<Payment>),
    /// A Kafka partition's: each offset's amount only, its event made from it and its
    /// id's bytes as it is sent ([`idem_host::kafka::record::message_of`]).
    #[cfg(feature = "kafka")]
    Amounts(Vec<i64>),
}

impl Events {
    /// How many there are.
    fn len(&self) -> usize {
        match self {
            Self::Held(e) => e.len(),
            #[cfg(feature = "kafka")]
            Self::Amounts(a) => a.len(),
        }
    }
}

/// The stream, ready to feed: its events, its truth and its configuration.
struct Stream {
    name: String,
    events: Events,
    /// The bytes each event's id was made of, when the ids came from outside idem (a log
    /// file, a Kafka partition): the board gets them keyed under its own key.
    id_bytes: Option<IdBytes>,
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
        let bytes = self.id_bytes.as_ref().and_then(|b| b.get(i));
        match &self.events {
            Events::Held(events) => {
                let mut e = *events.get(i)?;
                if let Some(bytes) = bytes {
                    e.payload.id = MessageId::keyed(key, bytes);
                }
                Some(e)
            }
            #[cfg(feature = "kafka")]
            Events::Amounts(amounts) => Some(idem_core::log::Event {
                offset,
                payload: idem_host::kafka::record::message_of(
                    key,
                    bytes?,
                    offset,
                    *amounts.get(i)?,
                ),
            }),
        }
    }
}

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
