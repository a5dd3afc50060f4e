//! `idem kafka`: the same stores and the same flash-backed journal, on a real
//! Kafka-protocol topic.
//!
//! A record's key is the message id and its value is JSON: `{"payer": "ada", "amount": 5}`.
//! `consume` applies a partition's records to a store whose state lives in a flash image,
//! one core consumer per partition (each with its own stamp and position: one stamp across
//! partitions would drop events). Stores whose position lives apart commit it to the
//! consumer group after the effects (at-least-once) and resume from the group's committed
//! offset; the atomic store keeps the position in its flash record and seeks to it
//! (Kafka's "manage your own offsets").

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use clap::{Args, Subcommand};
use idem_core::consumer::{CheckpointEvery, Consumer, ConsumerConfig, Step};
use idem_core::journal::Region;
use idem_core::log::{Event, Log, Message, MessageId, Offset};
use idem_core::persist::Layout;
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
use crate::image::{Image, Meta, PAGE};
use crate::select::dispatch::{SinksJob, with_sinks};
use crate::select::{HostSinks, StoreKind, WINDOW_CAPACITY};

/// How long a broker may take to answer before it counts as unreachable.
const BROKER_TIMEOUT: Duration = Duration::from_secs(5);
/// The most partitions `consume` handles (four flash pages each).
const MAX_PARTITIONS: i32 = 8;

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
        #[command(flatten)]
        broker: Broker,
    },
    /// Consume a topic to its end into a store whose state lives in a flash image.
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
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        broker: Broker,
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

fn consumer(brokers: &str, group: &str) -> anyhow::Result<BaseConsumer> {
    config(brokers)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
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

/// Sends `(key, payer, amount)` one at a time, each acknowledged before the next; the
/// (partition, offset) of each.
fn send(
    brokers: &str,
    topic: &str,
    idempotent: bool,
    records: &[(String, &str, i64)],
) -> anyhow::Result<Vec<(i32, i64)>> {
    let producer: BaseProducer<Acks> = config(brokers)
        .set(
            "enable.idempotence",
            if idempotent { "true" } else { "false" },
        )
        .set("allow.auto.create.topics", "true")
        .create_with_context(Acks::default())
        .map_err(|e| unreachable(brokers, e))?;
    let mut landed = Vec::new();
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
        producer
            .flush(Duration::from_secs(15))
            .map_err(|e| unreachable(brokers, e))?;
        let ack = producer
            .context()
            .0
            .lock()
            .map_err(|_| anyhow::anyhow!("delivery reports poisoned"))?
            .pop();
        match ack {
            Some(Ok(at)) => landed.push(at),
            Some(Err(e)) => anyhow::bail!("the broker refused a record of {topic}: {e}"),
            None => anyhow::bail!("no delivery report for a record of {topic}"),
        }
    }
    Ok(landed)
}

/// A partition's records, as the core reads a log: by offset, from 0 to the high watermark.
struct PartitionLog {
    records: Vec<Option<(Message, String, String)>>,
}

impl Log for PartitionLog {
    fn len(&self) -> u64 {
        self.records.len() as u64
    }

    fn get(&self, offset: Offset) -> Option<Event> {
        let (message, _, _) = self.records.get(usize::try_from(offset).ok()?)?.as_ref()?;
        Some(Event {
            offset,
            message: *message,
        })
    }
}

/// Reads partition `p` of `topic` from offset `from` to its high watermark.
fn read_partition(
    c: &BaseConsumer,
    brokers: &str,
    topic: &str,
    p: i32,
    from: Offset,
) -> anyhow::Result<PartitionLog> {
    let (_, high) = c
        .fetch_watermarks(topic, p, BROKER_TIMEOUT)
        .map_err(|e| unreachable(brokers, e))?;
    let high = high.max(0) as usize;
    let mut records = vec![None; high];
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, p, KOffset::Offset(from as i64))
        .context("assigning a partition")?;
    c.assign(&tpl).context("assigning a partition")?;
    let mut missing = high.saturating_sub(from as usize);
    let deadline = Instant::now() + Duration::from_secs(30);
    while missing > 0 {
        anyhow::ensure!(
            Instant::now() < deadline,
            "timed out reading {topic} partition {p}"
        );
        let Some(m) = c.poll(Duration::from_millis(200)) else {
            continue;
        };
        let m = m.with_context(|| format!("reading {topic} partition {p}"))?;
        let (offset, key) = (m.offset() as usize, m.key().unwrap_or_default());
        if offset >= high || records[offset].is_some() {
            continue;
        }
        let value = m.payload().unwrap_or_default();
        let pay: Payment = serde_json::from_slice(value).map_err(|e| {
            usage(format!(
                "{topic} partition {p} offset {offset}: not a payment ({e})"
            ))
        })?;
        let message = Message {
            id: MessageId::from_key(key),
            producer: 0,
            epoch: 0,
            seq: offset as u32 + 1,
            amount: pay.amount,
        };
        records[offset] = Some((
            message,
            String::from_utf8_lossy(key).into_owned(),
            String::from_utf8_lossy(value).into_owned(),
        ));
        missing -= 1;
    }
    Ok(PartitionLog { records })
}

/// What consuming one partition ended with.
struct PartitionResult {
    total: i64,
    true_total: i64,
    next_offset: Offset,
}

struct ConsumePartition<'a> {
    image: &'a mut Image,
    kafka: &'a BaseConsumer,
    topic: &'a str,
    partition: i32,
    checkpoint_every: CheckpointEvery,
    pace: Duration,
    brokers: &'a str,
}

impl SinksJob for ConsumePartition<'_> {
    type Out = PartitionResult;
    fn call<S: HostSinks>(self, store: S) -> anyhow::Result<PartitionResult> {
        let p = self.partition as u32;
        let layout = Layout {
            positions: Region {
                start: 4 * p * PAGE as u32,
                pages: 2,
            },
            sink: Region {
                start: (4 * p + 2) * PAGE as u32,
                pages: 2,
            },
            tag: self.image.meta.tag() ^ p,
        };
        let config = ConsumerConfig::every(self.checkpoint_every);
        let mut c = Consumer::open(&mut self.image.flash, layout, store, config)
            .map_err(|e| device::consumer_error(self.image, e))?;
        let own_position = S::BATCHED;
        if !own_position {
            // The group's committed offset is the position (the next offset to read).
            let mut tpl = TopicPartitionList::new();
            tpl.add_partition(self.topic, self.partition);
            let committed = self
                .kafka
                .committed_offsets(tpl, BROKER_TIMEOUT)
                .map_err(|e| unreachable(self.brokers, e))?;
            let at = committed
                .find_partition(self.topic, self.partition)
                .map(|e| e.offset());
            c.resume_from(match at {
                Some(KOffset::Offset(n)) if n >= 0 => n as u64,
                _ => 0,
            });
        }
        // The whole partition, so the true total counts every record, not just the rest.
        let log = read_partition(self.kafka, self.brokers, self.topic, self.partition, 0)?;
        loop {
            match c
                .step(&mut self.image.flash, &log)
                .map_err(|e| device::consumer_error(self.image, e))?
            {
                Step::Done => break,
                Step::Effect(..) if !self.pace.is_zero() => std::thread::sleep(self.pace),
                Step::Commit { next } if !own_position => {
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
            total: c.total(),
            true_total: log.true_total(),
            next_offset: c.next_offset(),
        })
    }
}

/// Consumes every partition of `topic` into the image at `flash`; total, true total, and
/// the next offset of each partition.
fn consume(
    brokers: &str,
    topic: &str,
    group: &str,
    store: StoreKind,
    flash: &Path,
    checkpoint_every: u64,
    pace: Duration,
) -> anyhow::Result<(i64, i64, Vec<Offset>)> {
    if !matches!(
        store,
        StoreKind::Naive | StoreKind::Offset | StoreKind::MessageId | StoreKind::Atomic
    ) {
        return Err(usage(
            "kafka consume takes the naive, offset, message-id or atomic store",
        ));
    }
    let every = CheckpointEvery::new(checkpoint_every)
        .ok_or_else(|| usage("the checkpoint interval must be at least 1 record"))?;
    let kafka = consumer(brokers, group)?;
    let n = partitions(&kafka, brokers, topic)?
        .ok_or_else(|| usage(format!("the broker has no topic {topic}")))?;
    if n > MAX_PARTITIONS {
        return Err(usage(format!(
            "{topic} has {n} partitions; idem consumes up to {MAX_PARTITIONS}"
        )));
    }
    let meta = Meta {
        scenario: format!("kafka:{topic}"),
        store: store.name().into(),
        events: 0,
        checkpoint_every,
        window: WINDOW_CAPACITY,
        pages: 4 * n as u32,
    };
    let mut image = Image::open_or_create(flash, &meta)?;
    let (mut total, mut truth, mut next) = (0, 0, Vec::new());
    for partition in 0..n {
        let job = ConsumePartition {
            image: &mut image,
            kafka: &kafka,
            topic,
            partition,
            checkpoint_every: every,
            pace,
            brokers,
        };
        let r = with_sinks(store.into(), WINDOW_CAPACITY, job)?;
        total += r.total;
        truth += r.true_total;
        next.push(r.next_offset);
    }
    Ok((total, truth, next))
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
                let records: Vec<(String, &str, i64)> = match scenario {
                    KafkaScenario::Ddia => {
                        (0..100).map(|i| (format!("e{i}"), "sensor", 1)).collect()
                    }
                    KafkaScenario::Payments => {
                        vec![
                            ("p17".into(), "ada", 5),
                            ("p17".into(), "ada", 5),
                            ("p18".into(), "bo", 3),
                        ]
                    }
                };
                let landed = send(&broker.brokers, &topic, idempotent, &records).map_err(|e| {
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
                json,
                broker,
            } => {
                let pace = Duration::from_millis(pace_ms);
                let (total, truth, next) = consume(
                    &broker.brokers,
                    &topic,
                    &group,
                    store,
                    &flash,
                    checkpoint_every,
                    pace,
                )?;
                if json {
                    let v = json!({"topic": topic, "store": store.name(), "total": total, "true_total": truth, "next_offsets": next});
                    writeln!(out, "{v}")?;
                } else {
                    writeln!(
                        out,
                        "{topic} with the {} store: total {total} (true total {truth}), next offsets {next:?}",
                        store.name()
                    )?;
                }
            }
        }
        Ok(ExitCode::SUCCESS)
    }
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
    let landed = send(brokers, &topic, idempotent, &sends).map_err(|e| {
        if let Err(c) = &created {
            anyhow::anyhow!("{e} ({c})")
        } else {
            e
        }
    })?;
    let reader = consumer(brokers, &format!("idem-lab-read-{}", unique()))?;
    let n = partitions(&reader, brokers, &topic)?.unwrap_or(1);
    let mut records = Vec::new();
    let mut truth = 0;
    for p in 0..n {
        let log = read_partition(&reader, brokers, &topic, p, 0)?;
        truth += log.true_total();
        for (o, r) in log.records.iter().enumerate() {
            if let Some((_, k, v)) = r {
                records.push((p, o, k.clone(), v.clone()));
            }
        }
    }
    let dir = std::env::temp_dir().join(format!("idem-lab-{}", unique()));
    std::fs::create_dir_all(&dir)?;
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
        let (total, _, _) = consume(brokers, &topic, &group, store, &flash, 10, Duration::ZERO)?;
        totals.insert(store.name(), total);
    }
    let _ = std::fs::remove_dir_all(&dir);
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
