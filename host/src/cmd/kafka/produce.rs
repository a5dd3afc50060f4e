//! Sending a scenario's payments to a topic, and the acks the broker sends back.

use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use rdkafka::client::ClientContext;
use rdkafka::message::Message as _;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};

use super::MAX_PARTITIONS;
use super::client::{config, consumer, create_topic, partitions, unreachable};
use idem_host::kafka::trust::Payment;
use idem_host::truth::TruthWriter;

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

/// How a producer hands records to the broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Batching {
    /// Each record acknowledged before the next is sent: one record per batch.
    OneAtATime,
    /// As producers do: records linger up to 20 ms and go many to a batch; one flush at
    /// the end.
    Batched,
}

/// Records handed to one producer, flushed before the next: the producer's queue stays
/// far below librdkafka's 100,000 messages, and every record within its 15 s flush.
const CHUNK: usize = 20_000;

/// `kafka produce`: sends `records` to `topic`, created with `n` partitions when the
/// broker does not have it, each acknowledged chunk written to the truth file `truth`
/// when there is one (renamed into place with its end line once every record was
/// acknowledged); how many records landed.
pub(super) fn produce(
    brokers: &str,
    topic: &str,
    records: &[(String, &str, i64)],
    n: i32,
    (idempotent, one_at_a_time): (bool, bool),
    truth: Option<&Path>,
) -> anyhow::Result<usize> {
    anyhow::ensure!(
        (1..=MAX_PARTITIONS).contains(&n),
        idem_lab::error::Usage(format!("a topic here has 1 to {MAX_PARTITIONS} partitions"))
    );
    let c = consumer(brokers, "idem-produce")?;
    let created = match partitions(&c, brokers, topic)? {
        None => create_topic(brokers, topic, n),
        Some(_) => Ok(()),
    };
    let batching = if one_at_a_time {
        Batching::OneAtATime
    } else {
        Batching::Batched
    };
    let mut file = truth
        .map(|t| TruthWriter::create(t, "kafka produce", None))
        .transpose()?;
    let landed = send_chunked(
        brokers,
        topic,
        (idempotent, batching),
        records,
        &created,
        &mut file,
    )?;
    if let Some(f) = file {
        f.finish()?;
    }
    Ok(landed.len())
}

/// [`send_created`] in chunks of [`CHUNK`] records, each written to `truth` once the broker
/// acknowledged it; every ack's (partition, offset). Ctrl-C stops it between two chunks.
pub(super) fn send_chunked(
    brokers: &str,
    topic: &str,
    (idempotent, batching): (bool, Batching),
    records: &[(String, &str, i64)],
    created: &Result<(), String>,
    truth: &mut Option<TruthWriter>,
) -> anyhow::Result<Vec<(i32, i64)>> {
    let mut acks = Vec::with_capacity(records.len());
    for chunk in records.chunks(CHUNK) {
        if idem_host::cleanup::stop_requested() {
            return Err(idem_host::cleanup::Interrupted.into());
        }
        acks.extend(send_created(
            brokers, topic, idempotent, batching, chunk, created,
        )?);
        if let Some(t) = truth.as_mut() {
            for (id, payer, amount) in chunk {
                t.payment(id, payer, *amount)?;
            }
            t.flush()?;
        }
    }
    Ok(acks)
}

/// [`send`], its error saying why the topic could not be created when it could not.
pub(super) fn send_created(
    brokers: &str,
    topic: &str,
    idempotent: bool,
    batching: Batching,
    records: &[(String, &str, i64)],
    created: &Result<(), String>,
) -> anyhow::Result<Vec<(i32, i64)>> {
    send(brokers, topic, idempotent, batching, records).map_err(|e| {
        if let Err(c) = created {
            anyhow::anyhow!("{e} ({c})")
        } else {
            e
        }
    })
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
