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

use idem_sim::payment::Total;
use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use clap::{Args, Subcommand};
use idem_core::consumer::{CheckpointEvery, Consumer, ConsumerConfig, Step};
use idem_core::journal::Region;
use idem_core::log::{Event, IdKey, Log, MessageId, Offset};
use idem_core::persist::Layout;
use idem_sim::payment::{Message, SumSinks, Truth};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::{ClientContext, DefaultClientContext};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer as _};
use rdkafka::error::KafkaError;
use rdkafka::message::Message as _;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::{Offset as KOffset, TopicPartitionList};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::device;
use crate::error::usage;
use crate::image::{Image, Meta, PAGE, SyncArg};
use crate::render::count;
use crate::select::dispatch::{SinksJob, with_sinks};
use crate::select::{HostSinks, StoreKind, WINDOW_CAPACITY};

/// How long a broker may take to answer before it counts as unreachable.
const BROKER_TIMEOUT: Duration = Duration::from_secs(5);
/// The most partitions `consume` handles ([`PARTITION_PAGES`] flash pages each).
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
        /// ddia (100 events of +1) or payments (p17, p17 again, p18).
        #[arg(long, value_name = "SCENARIO")]
        scenario: KafkaScenario,
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
        #[command(flatten)]
        broker: Broker,
    },
    /// Consume a topic to its end into a store whose state lives in a flash image. It
    /// reads with isolation.level=read_committed, librdkafka's default (the Java client
    /// and kafka-python default to read_uncommitted).
    Consume {
        /// The topic.
        topic: String,
        /// The consumer group that holds the committed offsets.
        #[arg(long)]
        group: String,
        /// Where the effects land: naive, offset, message-id or atomic.
        #[arg(long, value_enum)]
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
        /// A partition is read until the broker's end offset is reached and the fetches
        /// return nothing new for this long.
        #[arg(long, value_name = "MS", default_value_t = 1000)]
        idle_ms: u64,
        /// A record that is not a payment (no value, not JSON, a bad amount, an amount
        /// that overflows, a keyless record the store refuses): stop (exit 2) or skip it
        /// (it is named, and the total excludes it).
        #[arg(long, value_enum, default_value = "stop")]
        on_bad_record: OnBadRecord,
        /// A record without a key, for the message-id store: refuse it (no key, no
        /// message id), or take its partition and offset as its id (a resend of it is
        /// then not caught). The other stores never read ids.
        #[arg(long, value_enum, default_value = "refuse")]
        keyless: Keyless,
        /// Keep consuming new records until Ctrl-C (a line per durable checkpoint on
        /// stderr), then report.
        #[arg(long, conflicts_with = "shared")]
        follow: bool,
        /// Be one member of the group: the broker assigns this process some of the
        /// partitions and moves them on a rebalance; each partition's state follows it
        /// (see the README). Stops after --idle-ms with nothing new.
        #[arg(long)]
        shared: bool,
        /// When the image's writes reach the disk: checkpoint (sync around each position
        /// commit, page erase and page header, and before each group commit),
        /// every-write, or none
        #[arg(long, value_enum, default_value = "checkpoint")]
        sync: SyncArg,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        broker: Broker,
        /// Test hook: abort right after the N-th flash commit, before its group commit.
        #[arg(long, hide = true, value_name = "N")]
        abort_after_flash_commit: Option<u64>,
    },
    /// For tests: an in-process mock broker (librdkafka's) on 127.0.0.1; prints its
    /// address, runs until standard input closes (ten minutes at most).
    #[command(hide = true)]
    MockBroker,
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
}

impl KafkaScenario {
    /// The records to send, in order: (key, payer, amount).
    fn records(self) -> Vec<(String, &'static str, i64)> {
        match self {
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

/// A record's value.
#[derive(Debug, Serialize, Deserialize)]
struct Payment {
    payer: String,
    amount: i64,
}

/// Delivery reports of the producer: the (partition, offset) of each send, or its error.
#[derive(Default)]
struct Acks(Mutex<Vec<Result<(i32, i64), String>>>);

impl ClientContext for Acks {}

impl ProducerContext for Acks {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        let ack = match result {
            Ok(m) => Ok((m.partition(), m.offset())),
            Err((e, _)) => Err(e.to_string()),
        };
        if let Ok(mut acks) = self.0.lock() {
            acks.push(ack);
        }
    }
}

fn unreachable(brokers: &str, e: KafkaError) -> anyhow::Error {
    anyhow::anyhow!(
        "cannot reach the Kafka broker at {brokers} within {} s ({e})",
        BROKER_TIMEOUT.as_secs()
    )
}

fn config(brokers: &str) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", brokers)
        .set("socket.timeout.ms", "5000")
        .set("message.timeout.ms", "10000")
        .set("log_level", "3");
    c
}

/// The topic's partition count, `None` when the broker does not have it.
fn partitions(consumer: &BaseConsumer, brokers: &str, topic: &str) -> anyhow::Result<Option<i32>> {
    let md = consumer
        .fetch_metadata(Some(topic), BROKER_TIMEOUT)
        .map_err(|e| unreachable(brokers, e))?;
    Ok(md
        .topics()
        .iter()
        .find(|t| t.name() == topic && t.error().is_none())
        .map(|t| t.partitions().len() as i32)
        .filter(|&n| n > 0))
}

/// The isolation level every consumer reads with: librdkafka's default, set here so that
/// it is said. Under `read_committed` a consumer skips the records of aborted
/// transactions and stops at the last stable offset (the first open transaction); the
/// Java client and kafka-python default to `read_uncommitted`, which reads them all.
const ISOLATION_LEVEL: &str = "read_committed";

fn consumer(brokers: &str, group: &str) -> anyhow::Result<BaseConsumer> {
    config(brokers)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("isolation.level", ISOLATION_LEVEL)
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest")
        .create()
        .map_err(|e| unreachable(brokers, e))
}

/// Creates `topic` with `partitions`. A broker that does not answer the admin request
/// (librdkafka's mock broker, for one) may still create it on the first send.
fn create_topic(brokers: &str, topic: &str, partitions: i32) -> Result<(), String> {
    let admin: AdminClient<DefaultClientContext> =
        config(brokers).create().map_err(|e| e.to_string())?;
    let new = NewTopic::new(topic, partitions, TopicReplication::Fixed(1));
    let opts = AdminOptions::new().request_timeout(Some(BROKER_TIMEOUT));
    let results = futures_executor::block_on(admin.create_topics([&new], &opts))
        .map_err(|e| e.to_string())?;
    for r in results {
        if let Err((name, code)) = r
            && code != rdkafka::types::RDKafkaErrorCode::TopicAlreadyExists
        {
            return Err(format!("creating topic {name}: {code}"));
        }
    }
    Ok(())
}

/// How a producer hands records to the broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Batching {
    /// Each record acknowledged before the next is sent: one record per batch.
    OneAtATime,
    /// As producers do: records linger up to 20 ms and go many to a batch; one flush at
    /// the end.
    Batched,
}

/// Sends `(key, payer, amount)`; the (partition, offset) of each acknowledged record, in
/// the order the acks came.
fn send(
    brokers: &str,
    topic: &str,
    idempotent: bool,
    batching: Batching,
    records: &[(String, &str, i64)],
) -> anyhow::Result<Vec<(i32, i64)>> {
    let mut config = config(brokers);
    config
        .set(
            "enable.idempotence",
            if idempotent { "true" } else { "false" },
        )
        .set("allow.auto.create.topics", "true");
    if batching == Batching::Batched {
        config
            .set("linger.ms", "20")
            .set("batch.num.messages", "1000");
    }
    let producer: BaseProducer<Acks> = config
        .create_with_context(Acks::default())
        .map_err(|e| unreachable(brokers, e))?;
    let flush = |producer: &BaseProducer<Acks>| {
        producer
            .flush(Duration::from_secs(15))
            .map_err(|e| unreachable(brokers, e))
    };
    for (key, payer, amount) in records {
        let value = serde_json::to_string(&Payment {
            payer: (*payer).to_string(),
            amount: *amount,
        })?;
        producer
            .send(
                BaseRecord::to(topic)
                    .key(key.as_str())
                    .payload(value.as_str()),
            )
            .map_err(|(e, _)| anyhow::anyhow!("sending to {topic}: {e}"))?;
        match batching {
            Batching::OneAtATime => flush(&producer)?,
            Batching::Batched => {
                producer.poll(Duration::ZERO);
            }
        }
    }
    flush(&producer)?;
    let acks = std::mem::take(
        &mut *producer
            .context()
            .0
            .lock()
            .map_err(|_| anyhow::anyhow!("delivery reports poisoned"))?,
    );
    anyhow::ensure!(
        acks.len() == records.len(),
        "{} delivery reports for the {} records sent to {topic}",
        acks.len(),
        records.len()
    );
    acks.into_iter()
        .map(|a| a.map_err(|e| anyhow::anyhow!("the broker refused a record of {topic}: {e}")))
        .collect()
}

/// A partition's records, as the core reads a log: by offset, from 0 to the last record
/// read. An offset with no record (a transaction marker, a compacted or skipped record)
/// holds a record of amount 0 with an id of its own, so the consumer steps over it.
///
/// A record's message id is its key under `key` (the image's own). The truth knows a
/// message by its key's bytes, not by that hash: `first` maps each key to the first
/// offset that carries it.
/// A record as read: its message, its key's bytes (none for a keyless record) and its
/// value.
type Record = (Message, Option<Vec<u8>>, String);

struct PartitionLog {
    partition: i32,
    key: IdKey,
    /// Each record, by offset.
    records: Vec<Option<Record>>,
    first: HashMap<Vec<u8>, usize>,
}

impl PartitionLog {
    /// An empty read of partition `p`, its ids under `key`.
    fn new(partition: i32, key: IdKey) -> Self {
        Self {
            partition,
            key,
            records: Vec::new(),
            first: HashMap::new(),
        }
    }

    /// The message idem applies for a placeholder at `offset` of partition `p`.
    fn placeholder(&self, offset: usize) -> Message {
        Message {
            id: self.offset_id(offset),
            producer: 0,
            epoch: 0,
            seq: offset as u32 + 1,
            amount: 0,
        }
    }

    /// The id of a record by its place: partition and offset (a keyless record with
    /// `--keyless offset`, a placeholder). It is the hash of a NUL byte and the place,
    /// which no printable key spells.
    fn offset_id(&self, offset: usize) -> MessageId {
        MessageId::keyed(&self.key, &self.place(offset))
    }

    /// The bytes of a place's id: a NUL byte, the partition, `@`, the offset.
    fn place(&self, offset: usize) -> Vec<u8> {
        format!("\0{}@{offset}", self.partition).into_bytes()
    }

    /// The bytes the message id at `offset` is made of: its record's key, or its place.
    fn id_bytes(&self, offset: usize) -> Vec<u8> {
        match self.records.get(offset) {
            Some(Some((_, Some(k), _))) => k.clone(),
            _ => self.place(offset),
        }
    }
}

impl Log<Message> for PartitionLog {
    fn len(&self) -> u64 {
        self.records.len() as u64
    }

    fn get(&self, offset: Offset) -> Option<Event<Message>> {
        let i = usize::try_from(offset).ok()?;
        let payload = match self.records.get(i)? {
            Some((m, _, _)) => *m,
            None => self.placeholder(i),
        };
        Some(Event { offset, payload })
    }
}

impl Truth for PartitionLog {
    /// The first offset with this record's key bytes (keyless records and placeholders
    /// are their own message).
    fn canonical(&self, offset: Offset) -> Offset {
        match usize::try_from(offset)
            .ok()
            .and_then(|i| self.records.get(i))
        {
            Some(Some((_, Some(k), _))) => self.first.get(k).map_or(offset, |&i| i as Offset),
            _ => offset,
        }
    }
}

/// What to do with a record that is not a payment idem can apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum OnBadRecord {
    /// Stop with exit 2, naming the partition and offset.
    Stop,
    /// Step over it (its offset counts as consumed), name it, and go on.
    Skip,
}

/// What a record without a key means to the message-id store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Keyless {
    /// It has no message id: a bad record.
    Refuse,
    /// Its id is its partition and offset (a resend of it is then not caught).
    Offset,
}

/// How partitions are read.
#[derive(Debug, Clone, Copy)]
struct ReadRules {
    /// Keep reading until the fetches return nothing new for this long.
    idle: Duration,
    /// Give up when the end offset has not been reached after this long.
    deadline: Duration,
    on_bad: OnBadRecord,
    keyless: Keyless,
    /// Whether the store dedups by message id (keyless records matter to it).
    by_id: bool,
    /// `--follow`: a stop request ends a read instead of failing it.
    follow: bool,
}

impl ReadRules {
    /// The lab's: every record is a payment with a key.
    const LAB: Self = Self {
        idle: Duration::from_millis(300),
        deadline: Duration::from_secs(30),
        on_bad: OnBadRecord::Stop,
        keyless: Keyless::Refuse,
        by_id: true,
        follow: false,
    };
}

/// The most records idem reads from one partition (each kept in memory with its key and
/// value for the report).
const MAX_RECORDS: usize = 1 << 20;

/// A record idem stepped over, and why.
#[derive(Debug, Clone, Serialize)]
struct Skipped {
    partition: i32,
    offset: usize,
    why: String,
}

/// One partition as read: its log and what the broker said about it.
struct PartitionRead {
    log: PartitionLog,
    /// The broker's end offset (ListOffsets, latest), asked once reading was done.
    end_offset: i64,
    /// Records fetched (distinct offsets).
    records_read: u64,
    /// Records stepped over with `--on-bad-record skip`.
    skipped: Vec<Skipped>,
    /// The sum of the |amounts| read: kept under a 64-bit total.
    sum: i64,
}

impl PartitionRead {
    /// Records were fetched at or past the broker's end offset: the broker's count of
    /// its own partition is short, so no verdict built on it can be trusted.
    fn short_read(&self) -> bool {
        self.log.len() as i64 > self.end_offset
    }
}

/// Reads a record's payment; a sentence saying why not.
fn payment(
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    rules: &ReadRules,
) -> Result<(bool, i64), String> {
    let value = value.ok_or("the record has no value (null)")?;
    let pay: Payment = serde_json::from_slice(value).map_err(|e| format!("not a payment ({e})"))?;
    let keyed = key.is_some();
    if !keyed && rules.by_id && rules.keyless == Keyless::Refuse {
        return Err(
            "the record has no key, so no message id for the message-id store (--keyless offset takes its partition and offset as its id)"
                .into(),
        );
    }
    Ok((keyed, pay.amount))
}

/// Reads partition `p` of `topic` from offset 0 until it has passed the broker's end
/// offset and the fetches return nothing new for `rules.idle`: an end offset alone is not
/// trusted (a broker can report one short of the records it serves).
fn read_partition(
    c: &BaseConsumer,
    brokers: &str,
    topic: &str,
    p: i32,
    rules: &ReadRules,
    key: IdKey,
) -> anyhow::Result<PartitionRead> {
    let mut read = PartitionRead {
        log: PartitionLog::new(p, key),
        end_offset: 0,
        records_read: 0,
        skipped: Vec::new(),
        sum: 0,
    };
    read_more(c, brokers, topic, &mut read, rules)?;
    Ok(read)
}

/// Extends `read` with the partition's records after the last one it holds, by the
/// rules of [`read_partition`].
fn read_more(
    c: &BaseConsumer,
    brokers: &str,
    topic: &str,
    read: &mut PartitionRead,
    rules: &ReadRules,
) -> anyhow::Result<()> {
    let p = read.log.partition;
    let (_, high) = c
        .fetch_watermarks(topic, p, BROKER_TIMEOUT)
        .map_err(|e| unreachable(brokers, e))?;
    let from = read.log.records.len();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, p, KOffset::Offset(from as i64))
        .context("assigning a partition")?;
    c.assign(&tpl).context("assigning a partition")?;
    let started = Instant::now();
    let mut last_new = Instant::now();
    let mut next = from as i64; // the next offset to fetch, by what arrived
    loop {
        if crate::cleanup::stop_requested() {
            if rules.follow {
                break; // the report follows
            }
            return Err(crate::cleanup::Interrupted.into());
        }
        let reached = next >= high.max(0);
        if reached && last_new.elapsed() >= rules.idle {
            break;
        }
        anyhow::ensure!(
            started.elapsed() < rules.deadline,
            "reading {topic} partition {p}: the broker's end offset is {high}, but after {} s the fetches stopped at offset {next}",
            rules.deadline.as_secs()
        );
        let Some(m) = c.poll(Duration::from_millis(100)) else {
            if let Ok(pos) = c.position()
                && let Some(KOffset::Offset(o)) = pos.find_partition(topic, p).map(|e| e.offset())
            {
                next = next.max(o); // past transaction markers the fetches skip
            }
            continue;
        };
        let m = m.with_context(|| format!("reading {topic} partition {p}"))?;
        if ingest(read, topic, &m, rules)? {
            last_new = Instant::now();
            next = next.max(m.offset() + 1);
        }
    }
    let (_, end_offset) = c
        .fetch_watermarks(topic, p, BROKER_TIMEOUT)
        .map_err(|e| unreachable(brokers, e))?;
    read.end_offset = end_offset;
    Ok(())
}

/// Adds record `m` to `read` (a record it already holds is ignored); whether it was new.
/// A bad record is skipped by name or refused, as `rules` say.
fn ingest<M: rdkafka::message::Message>(
    read: &mut PartitionRead,
    topic: &str,
    m: &M,
    rules: &ReadRules,
) -> anyhow::Result<bool> {
    let p = read.log.partition;
    let offset = usize::try_from(m.offset()).unwrap_or(usize::MAX);
    anyhow::ensure!(
        offset < MAX_RECORDS,
        crate::error::Usage(format!(
            "{topic} partition {p} has a record at offset {offset}; idem reads up to {MAX_RECORDS} records a partition"
        ))
    );
    let records = &mut read.log.records;
    if records.len() <= offset {
        records.resize(offset + 1, None);
    }
    if records[offset].is_some() || read.skipped.iter().any(|s| s.offset == offset) {
        return Ok(false);
    }
    read.records_read += 1;
    let key = m.key();
    let sum = read.sum;
    let checked = payment(key, m.payload(), rules).and_then(|(keyed, amount)| {
        sum.checked_add(amount.checked_abs().unwrap_or(i64::MAX))
            .map(|s| (keyed, amount, s))
            .ok_or_else(|| {
                format!("its amount {amount} takes the partition's amounts past a 64-bit total")
            })
    });
    match checked {
        Ok((keyed, amount, s)) => {
            read.sum = s;
            let log = &mut read.log;
            let id = match key {
                Some(k) if keyed => {
                    let first = log.first.entry(k.to_vec()).or_insert(offset);
                    *first = (*first).min(offset);
                    MessageId::keyed(&log.key, k)
                }
                _ => log.offset_id(offset),
            };
            log.records[offset] = Some((
                Message {
                    id,
                    producer: 0,
                    epoch: 0,
                    seq: offset as u32 + 1,
                    amount,
                },
                key.filter(|_| keyed).map(<[u8]>::to_vec),
                String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned(),
            ));
        }
        Err(why) if rules.on_bad == OnBadRecord::Skip => read.skipped.push(Skipped {
            partition: p,
            offset,
            why,
        }),
        Err(why) => {
            return Err(usage(format!(
                "{topic} partition {p} offset {offset}: {why} (--on-bad-record skip steps over such records)"
            )));
        }
    }
    Ok(true)
}

/// What consuming one partition ended with.
struct PartitionResult {
    partition: i32,
    total: i64,
    true_total: i64,
    next_offset: Offset,
    read: PartitionRead,
    /// The group's committed offset when the run began, when it differed from the image's.
    group_was: Option<i64>,
}

/// Pages of an image per partition: two for the position journal, three for the store's
/// (an appending store keeps the records it rebuilds its state from on two of them while
/// it reclaims the third).
const PARTITION_PAGES: u32 = 5;

/// Where partition `p`'s two journals live in an image: [`PARTITION_PAGES`] pages from
/// page `PARTITION_PAGES * p`.
fn layout(image: &Image, p: i32) -> Layout {
    let first = PARTITION_PAGES * p as u32;
    Layout {
        positions: Region {
            start: first * PAGE as u32,
            pages: 2,
        },
        sink: Region {
            start: (first + 2) * PAGE as u32,
            pages: PARTITION_PAGES - 2,
        },
        tag: image.meta.tag() ^ p as u32,
    }
}

struct ConsumePartition<'a> {
    image: &'a mut Image,
    kafka: &'a BaseConsumer,
    topic: &'a str,
    partition: i32,
    checkpoint_every: CheckpointEvery,
    pace: Duration,
    brokers: &'a str,
    /// The partition as read so far.
    read: PartitionRead,
    /// Whether to print a line on stderr for each durable checkpoint (`--follow`).
    progress: bool,
    /// Test hook: abort the process right after this many flash commits, before the
    /// group commit that copies the last one.
    abort_after: Option<u64>,
    commits: &'a mut u64,
}

impl SinksJob for ConsumePartition<'_> {
    type Out = PartitionResult;
    fn call<S: HostSinks>(self, store: S) -> anyhow::Result<PartitionResult> {
        let layout = layout(self.image, self.partition);
        if S::ORDERED_SINK {
            self.image
                .flash
                .add_ordered(crate::image::bytes(layout.sink));
        }
        let config = ConsumerConfig::every(self.checkpoint_every);
        // The flash image is the one source of truth for the position: recovery reads it
        // from the journals. The group's committed offset is a copy, committed after each
        // durable checkpoint, for the tools that watch a group's lag.
        let mut c = Consumer::open(&mut self.image.flash, layout, store, config)
            .map_err(|e| device::consumer_error(self.image, e))?;
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition(self.topic, self.partition);
        let committed = self
            .kafka
            .committed_offsets(tpl, BROKER_TIMEOUT)
            .map_err(|e| unreachable(self.brokers, e))?;
        let group_was = match committed
            .find_partition(self.topic, self.partition)
            .map(|e| e.offset())
        {
            Some(KOffset::Offset(n)) if n != c.next_offset() as i64 => Some(n),
            _ => None,
        };
        // The whole partition, so the true total counts every record, not just the rest.
        let read = self.read;
        loop {
            if self.progress && crate::cleanup::stop_requested() {
                break; // --follow: Ctrl-C ends it between two steps
            }
            match c
                .step(&mut self.image.flash, &read.log)
                .map_err(|e| device::consumer_error(self.image, e))?
            {
                Step::Done => break,
                Step::Effect(..) if !self.pace.is_zero() => std::thread::sleep(self.pace),
                Step::Commit { next } => {
                    *self.commits += 1;
                    if self.progress {
                        eprintln!(
                            "partition {}: checkpoint: {}; total {}",
                            self.partition,
                            crate::render::position_text(next),
                            c.total()
                        );
                    }
                    // The flash commit is durable before its copy goes to the group.
                    self.image.flash.sync().map_err(|e| {
                        anyhow::anyhow!("syncing {}: {e:?}", self.image.path.display())
                    })?;
                    if self.abort_after == Some(*self.commits) {
                        // As a SIGKILL would: no destructor, no group commit.
                        std::process::abort();
                    }
                    let mut tpl = TopicPartitionList::new();
                    tpl.add_partition_offset(
                        self.topic,
                        self.partition,
                        KOffset::Offset(next as i64),
                    )?;
                    self.kafka
                        .commit(&tpl, CommitMode::Sync)
                        .map_err(|e| unreachable(self.brokers, e))?;
                }
                _ => {}
            }
        }
        Ok(PartitionResult {
            partition: self.partition,
            total: c.total(),
            true_total: read.log.true_total(),
            next_offset: c.next_offset(),
            read,
            group_was,
        })
    }
}

/// A partition this member owns in `--shared` mode.
struct Owned<K: SumSinks> {
    consumer: Consumer<K>,
    read: PartitionRead,
    /// The group's committed offset when this member took the partition.
    group_at_take: Offset,
}

/// How a member took a partition: what the group and its image said, and what it did.
#[derive(Debug, Clone, Serialize)]
struct Take {
    partition: i32,
    /// The group's committed offset (0 when none).
    group_offset: Offset,
    /// The position in this member's image.
    image_offset: Offset,
    /// `kept` (the image agreed with the group) or `rebuilt` (it did not: the partition's
    /// pages were erased and its state folded again from offset 0 up to the group's offset).
    action: &'static str,
}

/// `--shared`: one member of a consumer group. The broker assigns partitions and moves
/// them on a rebalance (a member joins, leaves, or stops heartbeating). The group's
/// committed offset is then the position's one truth, since a partition's next owner
/// must see it; the image is this member's copy of each partition's state. A store's
/// state at a position is the fold of the partition's records before it (for the
/// idempotent stores, whatever replays happened), so a member that takes a partition
/// keeps its image's state when its position equals the group's offset, and otherwise
/// erases it and folds the records again up to the group's offset before going on.
struct SharedConsume<'a> {
    image: &'a mut Image,
    group: &'a BaseConsumer,
    reader: &'a BaseConsumer,
    topic: &'a str,
    brokers: &'a str,
    checkpoint_every: CheckpointEvery,
    pace: Duration,
    rules: ReadRules,
    /// Stop after this long with nothing new.
    idle: Duration,
    abort_after: Option<u64>,
}

/// What a consume ended with: each partition consumed, and for a group member which
/// partitions it took (and how) and lost to rebalances.
struct SharedOut {
    results: Vec<PartitionResult>,
    taken: Vec<Take>,
    released: Vec<i32>,
}

/// How long a group member may go without heartbeats before the broker moves its
/// partitions.
const SESSION_TIMEOUT: Duration = Duration::from_secs(6);

/// The longest a member runs.
const MEMBER_LIFETIME: Duration = Duration::from_secs(600);

impl SinksJob for SharedConsume<'_> {
    type Out = SharedOut;
    fn call<K: HostSinks>(self, sinks: K) -> anyhow::Result<SharedOut> {
        let config = ConsumerConfig::every(self.checkpoint_every);
        if K::ORDERED_SINK {
            for p in 0..(self.image.meta.pages / PARTITION_PAGES) as i32 {
                let sink = layout(self.image, p).sink;
                self.image.flash.add_ordered(crate::image::bytes(sink));
            }
        }
        let mut owned: BTreeMap<i32, Owned<K>> = BTreeMap::new();
        let (mut taken, mut released) = (Vec::new(), Vec::new());
        let mut commits = 0u64;
        self.group
            .subscribe(&[self.topic])
            .context("subscribing to the topic")?;
        let started = Instant::now();
        let mut last_change = Instant::now();
        let mut last_assigned = std::collections::BTreeSet::new();
        loop {
            if crate::cleanup::stop_requested() {
                return Err(crate::cleanup::Interrupted.into());
            }
            anyhow::ensure!(
                started.elapsed() < MEMBER_LIFETIME,
                "still consuming {} after {} s",
                self.topic,
                MEMBER_LIFETIME.as_secs()
            );
            let message = self.group.poll(Duration::from_millis(100));
            // Rebalances happen inside poll: drop what was revoked, take what is new.
            let assigned: std::collections::BTreeSet<i32> = self
                .group
                .assignment()
                .context("reading the group's assignment")?
                .elements_for_topic(self.topic)
                .iter()
                .map(|e| e.partition())
                .collect();
            if assigned != last_assigned {
                eprintln!("the group assigned this member partitions {assigned:?}");
                last_assigned = assigned.clone();
                last_change = Instant::now();
            }
            let revoked: Vec<i32> = owned
                .keys()
                .copied()
                .filter(|p| !assigned.contains(p))
                .collect();
            for p in revoked {
                eprintln!("lost partition {p} to a rebalance");
                owned.remove(&p);
                released.push(p);
                last_change = Instant::now();
            }
            let new: Vec<i32> = assigned
                .iter()
                .copied()
                .filter(|p| !owned.contains_key(p))
                .collect();
            for p in new {
                let mut tpl = TopicPartitionList::new();
                tpl.add_partition(self.topic, p);
                let committed = self
                    .group
                    .committed_offsets(tpl, BROKER_TIMEOUT)
                    .map_err(|e| unreachable(self.brokers, e))?;
                let group_offset = match committed.find_partition(self.topic, p).map(|e| e.offset())
                {
                    Some(KOffset::Offset(n)) if n > 0 => n as Offset,
                    _ => 0,
                };
                let read = read_partition(
                    self.reader,
                    self.brokers,
                    self.topic,
                    p,
                    &self.rules,
                    self.image.id_key(),
                )?;
                let layout = layout(self.image, p);
                let mut consumer =
                    Consumer::open(&mut self.image.flash, layout, sinks.clone(), config)
                        .map_err(|e| device::consumer_error(self.image, e))?;
                let image_offset = consumer.next_offset();
                let action = if image_offset == group_offset {
                    "kept"
                } else {
                    let from = layout.positions.start;
                    let to = from + PARTITION_PAGES * PAGE as u32;
                    embedded_storage::nor_flash::NorFlash::erase(&mut self.image.flash, from, to)
                        .map_err(|e| {
                        anyhow::anyhow!(
                            "{}: erasing partition {p}'s pages: {e:?}",
                            self.image.path.display()
                        )
                    })?;
                    consumer = Consumer::open(&mut self.image.flash, layout, sinks.clone(), config)
                        .map_err(|e| device::consumer_error(self.image, e))?;
                    "rebuilt"
                };
                eprintln!(
                    "took partition {p}: the group's offset {group_offset}, this image's {image_offset}: {action}"
                );
                taken.push(Take {
                    partition: p,
                    group_offset,
                    image_offset,
                    action,
                });
                owned.insert(
                    p,
                    Owned {
                        consumer,
                        read,
                        group_at_take: group_offset,
                    },
                );
                last_change = Instant::now();
            }
            if let Some(m) = message {
                let m = m.with_context(|| format!("reading {}", self.topic))?;
                if let Some(o) = owned.get_mut(&m.partition())
                    && ingest(&mut o.read, self.topic, &m, &self.rules)?
                {
                    last_change = Instant::now();
                }
            }
            for (&p, o) in &mut owned {
                // A bounded number of steps between two polls, so that a rebalance
                // (which happens inside poll) is never kept waiting for long.
                for _ in 0..64 {
                    match o
                        .consumer
                        .step(&mut self.image.flash, &o.read.log)
                        .map_err(|e| device::consumer_error(self.image, e))?
                    {
                        Step::Done => break,
                        Step::Effect(..) if !self.pace.is_zero() => std::thread::sleep(self.pace),
                        // While folding up to the group's offset, the group already
                        // has it: nothing to copy.
                        Step::Commit { next } if next > o.group_at_take => {
                            commits += 1;
                            eprintln!(
                                "partition {p}: checkpoint: {}; total {}",
                                crate::render::position_text(next),
                                o.consumer.total()
                            );
                            self.image.flash.sync().map_err(|e| {
                                anyhow::anyhow!("syncing {}: {e:?}", self.image.path.display())
                            })?;
                            if self.abort_after == Some(commits) {
                                std::process::abort();
                            }
                            let mut tpl = TopicPartitionList::new();
                            tpl.add_partition_offset(self.topic, p, KOffset::Offset(next as i64))?;
                            self.group
                                .commit(&tpl, CommitMode::Sync)
                                .map_err(|e| unreachable(self.brokers, e))?;
                        }
                        _ => {}
                    }
                }
            }
            // Done: every owned partition applied to the end of what was read, and
            // nothing new (no record, no rebalance) for the idle period.
            let caught_up = owned
                .values()
                .all(|o| o.consumer.next_offset() >= o.read.log.len());
            // A member that holds nothing may be waiting for a rebalance that waits in
            // turn for a killed member's session (6 s) to time out: it waits twice that.
            let quiet = if owned.is_empty() {
                self.idle.max(2 * SESSION_TIMEOUT)
            } else {
                self.idle
            };
            if caught_up && last_change.elapsed() >= quiet {
                break;
            }
        }
        let mut results = Vec::new();
        for (p, mut o) in owned {
            let (_, end_offset) = self
                .reader
                .fetch_watermarks(self.topic, p, BROKER_TIMEOUT)
                .map_err(|e| unreachable(self.brokers, e))?;
            o.read.end_offset = end_offset;
            results.push(PartitionResult {
                partition: p,
                total: o.consumer.total(),
                true_total: o.read.log.true_total(),
                next_offset: o.consumer.next_offset(),
                read: o.read,
                group_was: None,
            });
        }
        self.group.unsubscribe();
        Ok(SharedOut {
            results,
            taken,
            released,
        })
    }
}

/// How `consume` runs.
struct ConsumeOptions<'a> {
    brokers: &'a str,
    topic: &'a str,
    group: &'a str,
    store: StoreKind,
    flash: &'a Path,
    checkpoint_every: u64,
    pace: Duration,
    rules: ReadRules,
    /// Keep consuming new records until a signal stops it.
    follow: bool,
    /// Be one member of the group: the broker assigns the partitions.
    shared: bool,
    /// When the image's writes reach the disk.
    sync: SyncArg,
    abort_after: Option<u64>,
}

/// Consumes every partition of the topic into the image; one result per partition.
fn consume(o: &ConsumeOptions<'_>) -> anyhow::Result<SharedOut> {
    let store = o.store;
    if !matches!(
        store,
        StoreKind::Naive | StoreKind::Offset | StoreKind::MessageId | StoreKind::Atomic
    ) {
        return Err(usage(
            "kafka consume takes the naive, offset, message-id or atomic store",
        ));
    }
    let every = CheckpointEvery::new(o.checkpoint_every)
        .ok_or_else(|| usage("the checkpoint interval must be at least 1 record"))?;
    let kafka = consumer(o.brokers, o.group)?;
    let n = partitions(&kafka, o.brokers, o.topic)?
        .ok_or_else(|| usage(format!("the broker has no topic {}", o.topic)))?;
    if n > MAX_PARTITIONS {
        return Err(usage(format!(
            "{} has {n} partitions; idem consumes up to {MAX_PARTITIONS}",
            o.topic
        )));
    }
    let meta = Meta {
        scenario: format!("kafka:{}", o.topic),
        store: store.name().into(),
        events: 0,
        checkpoint_every: o.checkpoint_every,
        window: WINDOW_CAPACITY,
        pages: PARTITION_PAGES * n as u32,
    };
    let mut image = Image::open_or_create(o.flash, &meta)?;
    let barriers = (0..n)
        .map(|p| crate::image::bytes(layout(&image, p).positions))
        .collect();
    image.flash.set_sync(o.sync, barriers);
    let rules = ReadRules {
        by_id: store == StoreKind::MessageId,
        ..o.rules
    };
    if o.shared {
        let group = config(o.brokers)
            .set("group.id", o.group)
            .set("enable.auto.commit", "false")
            .set("isolation.level", ISOLATION_LEVEL)
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", "earliest")
            // A member that stops heartbeating (killed) loses its partitions after 6 s.
            .set(
                "session.timeout.ms",
                SESSION_TIMEOUT.as_millis().to_string(),
            )
            .set("heartbeat.interval.ms", "1000")
            // A rebalance waits this long at most for a member to rejoin.
            .set("max.poll.interval.ms", "10000")
            .create()
            .map_err(|e| unreachable(o.brokers, e))?;
        let reader = config(o.brokers)
            .set("group.id", format!("idem-reader-{}", unique()))
            .set("enable.auto.commit", "false")
            .set("isolation.level", ISOLATION_LEVEL)
            .set("fetch.wait.max.ms", "50")
            .create()
            .map_err(|e| unreachable(o.brokers, e))?;
        let job = SharedConsume {
            image: &mut image,
            group: &group,
            reader: &reader,
            topic: o.topic,
            brokers: o.brokers,
            checkpoint_every: every,
            pace: o.pace,
            // A partition taken mid-run is read whole with a short quiet period; the
            // member itself stops after `--idle-ms` with nothing new.
            rules: ReadRules {
                idle: rules.idle.min(Duration::from_millis(300)),
                ..rules
            },
            idle: rules.idle,
            abort_after: o.abort_after,
        };
        let out = with_sinks(store.into(), WINDOW_CAPACITY, job)?;
        return Ok(out);
    }
    if o.follow {
        // Ctrl-C ends a follow between two steps, with the report.
        crate::cleanup::defer_signals();
    }
    let mut results: Vec<PartitionResult> = Vec::new();
    let mut commits = 0;
    // What the group said when the run began (later rounds find their own copy).
    let mut group_was: Option<Vec<Option<i64>>> = None;
    loop {
        let mut reads: Vec<Option<PartitionRead>> =
            results.drain(..).map(|r| Some(r.read)).collect();
        reads.resize_with(n as usize, || None);
        for (partition, read) in (0..n).zip(reads) {
            let read = match read {
                None => read_partition(
                    &kafka,
                    o.brokers,
                    o.topic,
                    partition,
                    &rules,
                    image.id_key(),
                )?,
                Some(mut read) => {
                    read_more(&kafka, o.brokers, o.topic, &mut read, &rules)?;
                    read
                }
            };
            let job = ConsumePartition {
                image: &mut image,
                kafka: &kafka,
                topic: o.topic,
                partition,
                checkpoint_every: every,
                pace: o.pace,
                brokers: o.brokers,
                read,
                progress: o.follow,
                abort_after: o.abort_after,
                commits: &mut commits,
            };
            results.push(with_sinks(store.into(), WINDOW_CAPACITY, job)?);
        }
        let first = group_was.get_or_insert_with(|| results.iter().map(|r| r.group_was).collect());
        if !o.follow || crate::cleanup::stop_requested() {
            for (r, was) in results.iter_mut().zip(first.iter()) {
                r.group_was = *was;
            }
            return Ok(SharedOut {
                results,
                taken: Vec::new(),
                released: Vec::new(),
            });
        }
    }
}

fn unique() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{}-{nanos}", std::process::id())
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
            } => lab(&mut out, &broker.brokers, idempotent, json)?,
            Action::Produce {
                topic,
                scenario,
                partitions: n,
                idempotent,
                one_at_a_time,
                broker,
            } => {
                anyhow::ensure!(
                    (1..=MAX_PARTITIONS).contains(&n),
                    crate::error::Usage(format!(
                        "a topic here has 1 to {MAX_PARTITIONS} partitions"
                    ))
                );
                let c = consumer(&broker.brokers, "idem-produce")?;
                let created = match partitions(&c, &broker.brokers, &topic)? {
                    None => create_topic(&broker.brokers, &topic, n),
                    Some(_) => Ok(()),
                };
                let records = scenario.records();
                let batching = if one_at_a_time {
                    Batching::OneAtATime
                } else {
                    Batching::Batched
                };
                let landed = send(&broker.brokers, &topic, idempotent, batching, &records)
                    .map_err(|e| {
                        if let Err(c) = &created {
                            anyhow::anyhow!("{e} ({c})")
                        } else {
                            e
                        }
                    })?;
                writeln!(out, "produced {} records to {topic}", landed.len())?;
            }
            Action::MockBroker => {
                let cluster =
                    rdkafka::mocking::MockCluster::new(1).context("starting a mock broker")?;
                writeln!(out, "{}", cluster.bootstrap_servers())?;
                out.flush()?;
                let (done, wait) = std::sync::mpsc::channel();
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
                    let _ = done.send(());
                });
                let _ = wait.recv_timeout(MOCK_LIFETIME);
            }
            Action::Consume {
                topic,
                group,
                store,
                flash,
                checkpoint_every,
                pace_ms,
                idle_ms,
                on_bad_record,
                keyless,
                follow,
                shared,
                sync,
                json,
                broker,
                abort_after_flash_commit,
            } => {
                let results = consume(&ConsumeOptions {
                    brokers: &broker.brokers,
                    topic: &topic,
                    group: &group,
                    store,
                    flash: &flash,
                    checkpoint_every,
                    pace: Duration::from_millis(pace_ms),
                    rules: ReadRules {
                        idle: Duration::from_millis(idle_ms),
                        deadline: Duration::from_secs(30) + Duration::from_millis(idle_ms),
                        on_bad: on_bad_record,
                        keyless,
                        by_id: store == StoreKind::MessageId,
                        follow,
                    },
                    follow,
                    shared,
                    sync,
                    abort_after: abort_after_flash_commit,
                })?;
                return report(&mut out, &topic, store, &results, json);
            }
        }
        Ok(ExitCode::SUCCESS)
    }
}

/// The verdict of a `kafka consume`: the store's total against the true total of the
/// distinct message ids read, unless a partition's records passed the broker's end offset.
fn verdict(results: &[PartitionResult], total: i64, truth: i64) -> &'static str {
    if results.iter().any(|r| r.read.short_read()) {
        "unverified"
    } else {
        idem_sim::check::Verdict::of(total, truth).name()
    }
}

/// Prints what `kafka consume` ended with; exit 1 when the broker's end offsets cannot be
/// trusted.
fn report(
    out: &mut impl Write,
    topic: &str,
    store: StoreKind,
    consumed: &SharedOut,
    json_out: bool,
) -> anyhow::Result<ExitCode> {
    let results = &consumed.results;
    let sum = |f: fn(&PartitionResult) -> i64| {
        results
            .iter()
            .try_fold(0i64, |a, r| a.checked_add(f(r)))
            .ok_or_else(|| {
                usage(format!(
                    "{topic}: the partitions' totals add up past a 64-bit total"
                ))
            })
    };
    let (total, truth) = (sum(|r| r.total)?, sum(|r| r.true_total)?);
    let verdict = verdict(results, total, truth);
    let skipped: Vec<&Skipped> = results.iter().flat_map(|r| &r.read.skipped).collect();
    if json_out {
        let v = json!({
            "topic": topic,
            "store": store.name(),
            "isolation_level": ISOLATION_LEVEL,
            "total": total,
            "true_total": truth,
            "verdict": verdict,
            "next_offsets": results.iter().map(|r| r.next_offset).collect::<Vec<_>>(),
            "partitions": results.iter().map(|r| json!({
                "partition": r.partition,
                "records_read": r.read.records_read,
                "end_offset": r.read.end_offset,
                "short_read": r.read.short_read(),
                "next_offset": r.next_offset,
                "total": r.total,
                "true_total": r.true_total,
                "group_offset_was": r.group_was,
            })).collect::<Vec<_>>(),
            "skipped_records": skipped,
            "taken": consumed.taken,
            "released": consumed.released,
        });
        writeln!(out, "{v}")?;
    } else {
        for t in &consumed.taken {
            writeln!(
                out,
                "took partition {}: the group's offset {}, this image's {}: {}",
                t.partition,
                t.group_offset,
                t.image_offset,
                if t.action == "kept" {
                    "kept the image's state"
                } else {
                    "erased it and folded the partition again up to the group's offset"
                }
            )?;
        }
        for p in &consumed.released {
            writeln!(out, "lost partition {p} to a rebalance")?;
        }
        for r in results {
            let p = r.partition;
            writeln!(
                out,
                "partition {p}: {} read, the broker's end offset {}, next offset {}, total {} (true total {})",
                count(r.read.records_read, "record"),
                r.read.end_offset,
                r.next_offset,
                r.total,
                r.true_total
            )?;
            if r.read.short_read() {
                writeln!(
                    out,
                    "  warning: records were fetched up to offset {}, past the broker's end offset {}: the broker's own count is short",
                    r.read.log.len() - 1,
                    r.read.end_offset
                )?;
            }
            if let Some(n) = r.group_was {
                writeln!(
                    out,
                    "  note: the group's committed offset was {n}; the flash image's position is the truth, and the group now has a copy of it"
                )?;
            }
        }
        for s in &skipped {
            writeln!(
                out,
                "skipped partition {} offset {}: {}",
                s.partition, s.offset, s.why
            )?;
        }
        let excluded = if skipped.is_empty() {
            String::new()
        } else {
            format!(
                ", excluding {}",
                count(skipped.len() as u64, "skipped record")
            )
        };
        writeln!(
            out,
            "{topic} with the {} store: total {total}, true total {truth} of the distinct message ids read{excluded}: {verdict}",
            store.name()
        )?;
        writeln!(
            out,
            "(read with isolation.level={ISOLATION_LEVEL}, librdkafka's default; the Java client and kafka-python default to read_uncommitted)"
        )?;
    }
    Ok(if verdict == "unverified" {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn lab(
    out: &mut impl Write,
    brokers: &str,
    idempotent: bool,
    json_out: bool,
) -> anyhow::Result<()> {
    let topic = format!("payments-{}", unique());
    let created = create_topic(brokers, &topic, 1);
    let sends = [
        ("p17".to_string(), "ada", 5),
        ("p17".to_string(), "ada", 5),
        ("p18".to_string(), "bo", 3),
    ];
    let landed = send(brokers, &topic, idempotent, Batching::OneAtATime, &sends).map_err(|e| {
        if let Err(c) = &created {
            anyhow::anyhow!("{e} ({c})")
        } else {
            e
        }
    })?;
    let reader = consumer(brokers, &format!("idem-lab-read-{}", unique()))?;
    let n = partitions(&reader, brokers, &topic)?.unwrap_or(1);
    let mut records = Vec::new();
    for p in 0..n {
        // The lab grades by keys, not ids: any key will do for its read.
        let read = read_partition(&reader, brokers, &topic, p, &ReadRules::LAB, IdKey::PUBLIC)?;
        anyhow::ensure!(
            !read.short_read(),
            "{topic} partition {p}: records were fetched past the broker's end offset {}; its counts cannot be trusted",
            read.end_offset
        );
        for (o, r) in read.log.records.iter().enumerate() {
            if let Some((_, k, v)) = r {
                let k = k.as_deref().map_or_else(
                    || "(none)".into(),
                    |k| String::from_utf8_lossy(k).into_owned(),
                );
                records.push((p, o, k, v.clone()));
            }
        }
    }
    // The truth is what the producer meant to send: each payment once.
    let mut sent = BTreeMap::new();
    for (key, _, amount) in &sends {
        sent.entry(key.as_str()).or_insert(*amount);
    }
    let truth: i64 = sent.values().sum();
    // A folder of this run's own (created exclusively, an unpredictable name), removed
    // with what is in it when the lab ends.
    let tmp = tempfile::Builder::new()
        .prefix("idem-lab-")
        .tempdir()
        .context("creating a temporary folder for the lab's images")?;
    let dir = tmp.path();
    let mut totals = BTreeMap::new();
    let stores = [
        StoreKind::Naive,
        StoreKind::Offset,
        StoreKind::MessageId,
        StoreKind::Atomic,
    ];
    for store in stores {
        let flash = dir.join(format!("{}.bin", store.name()));
        let group = format!("idem-lab-{}-{}", store.name(), unique());
        let results = consume(&ConsumeOptions {
            brokers,
            topic: &topic,
            group: &group,
            store,
            flash: &flash,
            checkpoint_every: 10,
            pace: Duration::ZERO,
            rules: ReadRules {
                by_id: store == StoreKind::MessageId,
                ..ReadRules::LAB
            },
            follow: false,
            shared: false,
            sync: SyncArg::Checkpoint,
            abort_after: None,
        })?
        .results;
        anyhow::ensure!(
            !results.iter().any(|r| r.read.short_read()),
            "{topic}: records were fetched past the broker's end offset; its counts cannot be trusted"
        );
        totals.insert(store.name(), results.iter().map(|r| r.total).sum::<i64>());
    }
    drop(tmp);
    if json_out {
        let v = json!({
            "topic": topic,
            "idempotent": idempotent,
            "sent": landed.iter().map(|(p, o)| json!({"partition": p, "offset": o})).collect::<Vec<_>>(),
            "partitions": n,
            "records": records.iter().map(|(p, o, k, v)| json!({"partition": p, "offset": o, "key": k, "value": v})).collect::<Vec<_>>(),
            "totals": totals,
            "true_total": truth,
        });
        writeln!(out, "{v}")?;
        return Ok(());
    }
    let parts = if n == 1 {
        "1 partition".to_string()
    } else {
        format!("{n} partitions: the broker made them")
    };
    writeln!(
        out,
        "topic {topic} ({parts}){}",
        if idempotent {
            ", idempotent producer"
        } else {
            ""
        }
    )?;
    for ((key, _, _), (p, offset)) in sends.iter().zip(&landed) {
        writeln!(out, "  sent {key} -> partition {p} offset {offset}")?;
    }
    writeln!(out, "read the whole topic back: {} records", records.len())?;
    for (p, o, k, v) in &records {
        writeln!(out, "  partition {p} offset {o}  key {k}  value {v}")?;
    }
    if idempotent {
        writeln!(
            out,
            "the second send of p17 landed too: Kafka's idempotence dedups its own retries, not an application's resend"
        )?;
    }
    writeln!(out, "consumed with each store (true total {truth}):")?;
    for store in stores {
        writeln!(out, "  {:<11} {}", store.name(), totals[store.name()])?;
    }
    Ok(())
}

/// One partition of a topic as the board's stream: its records read whole (from offset
/// 0 past the broker's end offset), and the consumer group that gets the board's
/// position as a copy, committed only after the board acknowledged a checkpoint.
pub struct BoardSource {
    /// The partition's events, by offset (placeholders where no payment is), their ids
    /// under [`IdKey::PUBLIC`]: the board's own key is applied to `id_bytes`.
    pub events: Vec<Event<Message>>,
    /// The bytes each event's message id is made of: its record's key, or for a keyless
    /// record and a placeholder, its place (a NUL byte, the partition, `@`, the offset).
    pub id_bytes: Vec<Vec<u8>>,
    /// Each distinct message id (by its key's bytes) counted once.
    pub true_total: i64,
    /// The group's committed offset before the bridge started, if any.
    pub group_was: Option<i64>,
    group: BaseConsumer,
    topic: String,
    partition: i32,
    brokers: String,
}

impl BoardSource {
    /// Reads partition `partition` of `topic`; `by_id`: the store dedups by message id
    /// (a keyless record is then refused).
    pub fn read(
        brokers: &str,
        topic: &str,
        group: &str,
        partition: i32,
        by_id: bool,
    ) -> anyhow::Result<Self> {
        let reader: BaseConsumer = config(brokers)
            .set("group.id", format!("idem-reader-{}", unique()))
            .set("enable.auto.commit", "false")
            .set("isolation.level", ISOLATION_LEVEL)
            .set("fetch.wait.max.ms", "50")
            .create()
            .map_err(|e| unreachable(brokers, e))?;
        let n = partitions(&reader, brokers, topic)?
            .ok_or_else(|| usage(format!("the broker at {brokers} has no topic {topic}")))?;
        if !(0..n).contains(&partition) {
            return Err(usage(format!(
                "--partition {partition}: {topic} has partitions 0..={}",
                n - 1
            )));
        }
        let rules = ReadRules {
            by_id,
            ..ReadRules::LAB
        };
        let read = read_partition(&reader, brokers, topic, partition, &rules, IdKey::PUBLIC)?;
        if read.short_read() {
            anyhow::bail!(
                "{topic} partition {partition}: the broker's end offset is {} but it served {} records: its count of its own partition is short, so the board's verdict could not be trusted",
                read.end_offset,
                read.log.len()
            );
        }
        let group = consumer(brokers, group)?;
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition(topic, partition);
        let group_was = match group
            .committed_offsets(tpl, BROKER_TIMEOUT)
            .map_err(|e| unreachable(brokers, e))?
            .find_partition(topic, partition)
            .map(|e| e.offset())
        {
            Some(KOffset::Offset(n)) => Some(n),
            _ => None,
        };
        Ok(Self {
            events: (0..read.log.len())
                .filter_map(|o| read.log.get(o))
                .collect(),
            id_bytes: (0..read.log.records.len())
                .map(|o| read.log.id_bytes(o))
                .collect(),
            true_total: read.log.true_total(),
            group_was,
            group,
            topic: topic.to_string(),
            partition,
            brokers: brokers.to_string(),
        })
    }

    /// Commits `next` (the board's durable position: the next offset it reads) as the
    /// group's offset.
    pub fn commit(&self, next: Offset) -> anyhow::Result<()> {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&self.topic, self.partition, KOffset::Offset(next as i64))?;
        self.group
            .commit(&tpl, CommitMode::Sync)
            .map_err(|e| unreachable(&self.brokers, e))
    }
}
