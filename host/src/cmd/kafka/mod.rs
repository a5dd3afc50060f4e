//! `idem kafka`: the same stores and the same flash-backed journal, on a real
//! Kafka-protocol topic.
//!
//! A record's key is the message id and its value is JSON: `{"payer": "ada", "amount": 5}`.
//! `consume` applies a partition's records to a store whose state lives in a flash image,
//! one core consumer per partition (each with its own stamp and position: one stamp across
//! partitions would drop events). Stores whose position lives apart commit it to the
//! consumer group after the effects (at-least-once) and resume from the group's committed
//! offset; the atomic store keeps the position in its flash record and seeks to it
//! (what Kafka's consumer documentation calls storing offsets outside Kafka).

mod bench;
mod bridge;
mod client;
mod consume;
mod ids;
mod lab;
mod partition;
mod produce;
mod read;
mod report;
mod shared;
mod streamed;

pub use bridge::BoardSource;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use clap::{Args, Subcommand};

use idem_host::image::SyncMode;
use idem_host::kafka::trust::{Keyless, OnBadRecord, ReadRules};
use idem_host::truth::TruthFile;
use idem_lab::select::StoreKind;

/// One of the library's choices by name, with the words `--help` shows beside each
/// (the library carries no clap).
fn named<T: Copy + Send + Sync + 'static>(
    choices: [(&'static str, &'static str, T); 2],
) -> impl TypedValueParser<Value = T> {
    let names = choices.map(|(name, words, _)| PossibleValue::new(name).help(words));
    PossibleValuesParser::new(names).try_map(move |name| {
        (choices.iter().find(|c| c.0 == name))
            .map(|c| c.2)
            .ok_or("no such choice")
    })
}

/// `--on-bad-record`: stop or skip.
fn on_bad_record() -> impl TypedValueParser<Value = OnBadRecord> {
    named([
        (
            "stop",
            "Stop with exit 2, naming the partition and offset",
            OnBadRecord::Stop,
        ),
        (
            "skip",
            "Step over it (its offset counts as consumed), name it, and go on",
            OnBadRecord::Skip,
        ),
    ])
}

/// `--keyless`: refuse, or take the record's place as its id.
fn keyless() -> impl TypedValueParser<Value = Keyless> {
    named([
        (
            "refuse",
            "It has no message id: a bad record",
            Keyless::Refuse,
        ),
        (
            "offset",
            "Its id is its partition and offset (a resend of it is then not caught)",
            Keyless::Offset,
        ),
    ])
}

/// The most partitions `consume` handles ([`partition::PARTITION_PAGES`] flash pages each).
const MAX_PARTITIONS: i32 = 6;

/// Talk to a Kafka-protocol broker.
#[derive(Debug, Args)]
pub struct Cmd {
    #[command(subcommand)]
    action: Action,
}

#[derive(Debug, Args, Clone)]
struct Broker {
    /// The broker to talk to.
    #[arg(long, default_value = "127.0.0.1:9092", value_name = "HOST:PORT")]
    brokers: String,
}

#[derive(Debug, Subcommand)]
enum Action {
    /// The payments lesson on a fresh topic: send p17 twice and p18, read the topic back,
    /// consume it with each store.
    Lab {
        #[command(flatten)]
        broker: Broker,
        /// Produce with Kafka's idempotence (it dedups its own retries, not a second send).
        #[arg(long)]
        idempotent: bool,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Produce a scenario's messages to a topic (created when missing).
    Produce {
        /// The topic.
        topic: String,
        /// ddia (100 events of +1), payments (p17, p17 again, p18), shop, or stream
        /// (--count payments, each once, as `kafka bench` produces them).
        #[arg(long, value_name = "SCENARIO")]
        scenario: KafkaScenario,
        /// Payments of the stream scenario (1 to 1,000,000).
        #[arg(long, value_name = "N", default_value_t = 1000)]
        count: u64,
        /// Partitions of a topic this creates.
        #[arg(long, default_value_t = 1)]
        partitions: i32,
        /// Produce with Kafka's idempotence.
        #[arg(long)]
        idempotent: bool,
        /// Wait for each record's ack before sending the next (one record per batch);
        /// by default records are batched, as producers do.
        #[arg(long)]
        one_at_a_time: bool,
        /// Write what was sent to this file once the broker acknowledged it all, one JSON
        /// payment a line, for `kafka consume --truth`.
        #[arg(long, value_name = "FILE")]
        truth: Option<PathBuf>,
        #[command(flatten)]
        broker: Broker,
    },
    /// Consume a topic to its end into a store whose state lives in a flash image. It
    /// reads with isolation.level=read_committed, librdkafka's default (the Java client
    /// and kafka-python default to read_uncommitted).
    Consume(ConsumeArgs),
    #[command(flatten)]
    Bench(bench::Action),
    /// For tests: an in-process mock broker (librdkafka's) on 127.0.0.1; prints its
    /// address, runs until standard input closes (ten minutes at most).
    #[command(hide = true)]
    MockBroker,
}

/// `kafka consume`'s arguments.
#[derive(Debug, Args)]
struct ConsumeArgs {
    /// The topic.
    topic: String,
    /// The consumer group that holds the committed offsets.
    #[arg(long)]
    group: String,
    /// Where the effects land: a store that runs on Kafka (another is refused, with
    /// the list of those that do).
    #[arg(long, value_parser = idem_lab::choice::store())]
    store: StoreKind,
    /// The flash image (created erased when missing).
    #[arg(long, value_name = "FILE")]
    flash: PathBuf,
    /// Commit the position every K records.
    #[arg(long, value_name = "K", default_value_t = 10)]
    checkpoint_every: u64,
    /// Sleep this long after each effect, so a kill can land mid-stream.
    #[arg(long, value_name = "MS", default_value_t = 0)]
    pace_ms: u64,
    /// With --shared: a member stops after this long with nothing new (no record, no
    /// rebalance). Without it, consume reads each partition to the end offset the
    /// broker gave when the run began, and waits for nothing more.
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    idle_ms: u64,
    /// Give up (exit 1) when no record comes for this long while a partition is short
    /// of its end offset.
    #[arg(long, value_name = "MS", default_value_t = 30_000)]
    stall_ms: u64,
    /// A record that is not a payment (no value, not JSON, a bad amount, an amount
    /// that overflows, a keyless record the store refuses): stop (exit 2) or skip it
    /// (it is named, and the total excludes it).
    #[arg(long, value_parser = on_bad_record(), default_value = "stop")]
    on_bad_record: OnBadRecord,
    /// A record without a key, for the message-id store: refuse it (no key, no
    /// message id), or take its partition and offset as its id (a resend of it is
    /// then not caught). The other stores never read ids.
    #[arg(long, value_parser = keyless(), default_value = "refuse")]
    keyless: Keyless,
    /// Keep consuming new records until Ctrl-C (a line per durable checkpoint on
    /// stderr), then report.
    #[arg(long, conflicts_with = "shared")]
    follow: bool,
    /// Be one member of the group: the broker assigns this process some of the
    /// partitions and moves them on a rebalance; each partition's state follows it
    /// (see the book, docs/kafka.md). Stops after --idle-ms with nothing new.
    #[arg(long)]
    shared: bool,
    /// When the image's writes reach the disk (a position is durable before the
    /// group gets its copy, in every mode but none)
    #[arg(long, value_parser = idem_lab::choice::sync(), default_value = "checkpoint")]
    sync: SyncMode,
    /// Grade against what the producer sent (`kafka produce --truth`, `mqtt publish
    /// --truth`: one JSON payment a line, each id counted once) instead of a second read
    /// of the topic; records on the topic that the file does not hold grade as over.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["follow", "shared"])]
    truth: Option<PathBuf>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    broker: Broker,
    /// Test hook: abort right after the N-th flash commit, before its group commit
    /// (the group holding the copy of the one before).
    #[arg(long, hide = true, value_name = "N")]
    abort_after_flash_commit: Option<u64>,
    /// Test hook: abort right after the N-th flash commit, the group holding what
    /// its delayed commits gave it.
    #[arg(long, hide = true, value_name = "N")]
    abort_with_group_behind: Option<u64>,
    /// Test hook (`--truth`): abort right after the N-th id is logged, before the step
    /// that writes its record.
    #[arg(long, hide = true, value_name = "N")]
    abort_after_ids: Option<u64>,
}

impl ConsumeArgs {
    /// Consumes the topic and prints the report.
    fn run(self, out: &mut impl Write) -> anyhow::Result<ExitCode> {
        let by_id = self.store == StoreKind::MessageId;
        let rules = ReadRules::consume(
            self.idle_ms,
            self.on_bad_record,
            self.keyless,
            by_id,
            self.follow,
        );
        let truth = self.truth.as_deref().map(TruthFile::read_ids).transpose()?;
        let file = truth.as_ref().map(|(t, _)| t);
        let results = consume::consume(&partition::ConsumeOptions {
            brokers: &self.broker.brokers,
            topic: &self.topic,
            group: &self.group,
            store: self.store,
            flash: &self.flash,
            checkpoint_every: self.checkpoint_every,
            pace: Duration::from_millis(self.pace_ms),
            rules,
            follow: self.follow,
            shared: self.shared,
            sync: self.sync,
            abort_after: self.abort_after_flash_commit,
            abort_behind: self.abort_with_group_behind,
            stall: Duration::from_millis(self.stall_ms),
            truth: file,
            abort_after_ids: self.abort_after_ids,
        })?;
        let truth = report::Graded::new(truth.as_ref(), self.truth.as_deref());
        report::report(out, &self.topic, self.store, &results, truth, self.json)
    }
}

/// The longest a mock broker lives.
const MOCK_LIFETIME: Duration = Duration::from_secs(600);

/// What `produce` can send.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum KafkaScenario {
    /// 100 events of +1.
    Ddia,
    /// p17 (ada, 5), p17 again, p18 (bo, 3).
    Payments,
    /// 300 payments p0..p299 (amounts 1 to 7) and 44 application resends (p0, p6, ...,
    /// p258, each sent again after the next five payments): the same key, so the same
    /// partition, well within a message-id window of its original.
    Shop,
    /// `--count` payments b0, b1, ..., each once ([`KafkaScenario::stream`]).
    Stream,
}

/// The most payments `--scenario stream` sends.
const MAX_STREAM: u64 = 1_000_000;
/// The payers of a stream's payments, in turn.
const STREAM_PAYERS: [&str; 4] = ["ada", "bo", "cy", "di"];

impl KafkaScenario {
    /// `n` payments keyed `b0`, `b1`, ...: `{"payer": ada, bo, cy or di in turn,
    /// "amount": i % 7 + 1}`.
    fn stream(n: u64) -> Vec<(String, &'static str, i64)> {
        (0..n)
            .map(|i| {
                let payer = STREAM_PAYERS[(i % 4) as usize];
                (format!("b{i}"), payer, (i % 7) as i64 + 1)
            })
            .collect()
    }

    /// The records to send, in order: (key, payer, amount); `count` for the stream.
    fn records(self, count: u64) -> Vec<(String, &'static str, i64)> {
        match self {
            Self::Stream => Self::stream(count),
            Self::Ddia => (0..100).map(|i| (format!("e{i}"), "sensor", 1)).collect(),
            Self::Payments => vec![
                ("p17".into(), "ada", 5),
                ("p17".into(), "ada", 5),
                ("p18".into(), "bo", 3),
            ],
            Self::Shop => {
                const PAYERS: [&str; 4] = ["ada", "bo", "cy", "di"];
                let payment = |i: usize| (format!("p{i}"), PAYERS[i % 4], (i % 7) as i64 + 1);
                let mut out = Vec::new();
                for i in 0..300 {
                    out.push(payment(i));
                    if i >= 5 && (i - 5) % 6 == 0 && (i - 5) / 6 < 44 {
                        out.push(payment(i - 5));
                    }
                }
                out
            }
        }
    }
}

impl Cmd {
    /// Runs the command.
    pub fn run(self) -> anyhow::Result<ExitCode> {
        let mut out = std::io::stdout().lock();
        match self.action {
            Action::Lab {
                broker,
                idempotent,
                json,
            } => lab::lab(&mut out, &broker.brokers, idempotent, json)?,
            Action::Produce {
                topic,
                scenario,
                partitions,
                idempotent,
                one_at_a_time,
                count,
                truth,
                broker,
            } => {
                if !(1..=MAX_STREAM).contains(&count) {
                    return Err(idem_lab::error::usage(format!(
                        "--count takes 1 to {MAX_STREAM} payments"
                    )));
                }
                let records = scenario.records(count);
                let landed = produce::produce(
                    &broker.brokers,
                    &topic,
                    &records,
                    partitions,
                    (idempotent, one_at_a_time),
                    truth.as_deref(),
                )?;
                writeln!(out, "produced {landed} records to {topic}")?;
                if let Some(path) = truth {
                    writeln!(out, "what was sent is in {}", path.display())?;
                }
            }
            Action::MockBroker => mock_broker(&mut out)?,
            Action::Bench(b) => return b.run(&mut out),
            Action::Consume(args) => return args.run(&mut out),
        }
        Ok(ExitCode::SUCCESS)
    }
}

/// `kafka mock-broker`: starts librdkafka's mock broker, prints its address, and runs
/// until standard input closes ([`MOCK_LIFETIME`] at most).
fn mock_broker(out: &mut impl Write) -> anyhow::Result<()> {
    let cluster = rdkafka::mocking::MockCluster::new(1).context("starting a mock broker")?;
    writeln!(out, "{}", cluster.bootstrap_servers())?;
    out.flush()?;
    let (done, wait) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
        let _ = done.send(());
    });
    let _ = wait.recv_timeout(MOCK_LIFETIME);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[arg(long, value_parser = on_bad_record(), default_value = "stop")]
        on_bad_record: OnBadRecord,
        #[arg(long, value_parser = keyless(), default_value = "refuse")]
        keyless: Keyless,
    }

    /// Each name reads as its choice, the defaults are stop and refuse, and an unknown
    /// name is clap's usage error listing the names.
    #[test]
    fn the_choices_of_a_bad_or_keyless_record_read_by_name() {
        let read = |args: &[&str]| {
            let cli = Cli::try_parse_from([&["idem"], args].concat()).unwrap();
            (cli.on_bad_record, cli.keyless)
        };
        assert_eq!(read(&[]), (OnBadRecord::Stop, Keyless::Refuse));
        assert_eq!(
            read(&["--on-bad-record", "skip", "--keyless", "offset"]),
            (OnBadRecord::Skip, Keyless::Offset)
        );
        assert_eq!(
            read(&["--on-bad-record", "stop", "--keyless", "refuse"]),
            (OnBadRecord::Stop, Keyless::Refuse)
        );
        let Err(e) = Cli::try_parse_from(["idem", "--keyless", "Offset"]) else {
            panic!("names are matched exactly");
        };
        assert_eq!(e.kind(), clap::error::ErrorKind::InvalidValue);
        assert!(
            e.to_string().contains("[possible values: refuse, offset]"),
            "{e}"
        );
    }
}
