//! `kafka lab`: the payments lesson on a fresh topic.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use anyhow::Context;
use idem_core::log::IdKey;
use idem_payments::registry::Source;
use serde_json::json;

use super::client::{consumer, create_topic, partitions, unique};
use super::consume::consume;
use super::partition::ConsumeOptions;
use super::produce::{Batching, send_created};
use super::read::read_partition;
use idem_host::image::SyncMode;
use idem_host::kafka::trust::ReadRules;
use idem_lab::select::StoreKind;

/// A record read back: partition, offset, key (or "(none)") and value.
type ReadBack = (i32, usize, String, String);

/// What the lab found, to print.
struct Found<'a> {
    topic: &'a str,
    idempotent: bool,
    sends: &'a [(String, &'static str, i64)],
    landed: &'a [(i32, i64)],
    partitions: i32,
    records: &'a [ReadBack],
    totals: &'a BTreeMap<&'static str, i64>,
    truth: i64,
}

/// Sends p17 twice and p18 to a fresh topic, reads the topic back and consumes it with
/// each store; prints what each step found.
pub(super) fn lab(
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
    let landed = send_created(
        brokers,
        &topic,
        idempotent,
        Batching::OneAtATime,
        &sends,
        &created,
    )?;
    let reader = consumer(brokers, &format!("idem-lab-read-{}", unique()))?;
    let partitions = partitions(&reader, brokers, &topic)?.unwrap_or(1);
    let records = read_back(&reader, brokers, &topic, partitions)?;
    // The truth is what the producer meant to send: each payment once.
    let mut sent = BTreeMap::new();
    for (key, _, amount) in &sends {
        sent.entry(key.as_str()).or_insert(*amount);
    }
    let found = Found {
        topic: &topic,
        idempotent,
        sends: &sends,
        landed: &landed,
        partitions,
        records: &records,
        totals: &consume_each(brokers, &topic)?,
        truth: sent.values().sum(),
    };
    if json_out {
        writeln!(out, "{}", found.json())?;
        Ok(())
    } else {
        found.text(out)
    }
}

/// Every record of the topic's `n` partitions.
fn read_back(
    reader: &rdkafka::consumer::BaseConsumer,
    brokers: &str,
    topic: &str,
    n: i32,
) -> anyhow::Result<Vec<ReadBack>> {
    let mut records = Vec::new();
    for p in 0..n {
        // The lab grades by keys, not ids: any key will do for its read.
        let read = read_partition(reader, brokers, topic, p, &ReadRules::LAB, IdKey::PUBLIC)?;
        anyhow::ensure!(
            !read.facts().short_read(),
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
    Ok(records)
}

/// The topic consumed with each store Kafka takes, each into an image of its own: each
/// store's total.
fn consume_each(brokers: &str, topic: &str) -> anyhow::Result<BTreeMap<&'static str, i64>> {
    // A folder of this run's own (created exclusively, an unpredictable name), removed
    // with what is in it when the lab ends.
    let tmp = tempfile::Builder::new()
        .prefix("idem-lab-")
        .tempdir()
        .context("creating a temporary folder for the lab's images")?;
    let mut totals = BTreeMap::new();
    for store in StoreKind::on(Source::Kafka) {
        let flash = tmp.path().join(format!("{}.bin", store.name()));
        let group = format!("idem-lab-{}-{}", store.name(), unique());
        let results = consume(&ConsumeOptions {
            brokers,
            topic,
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
            sync: SyncMode::Checkpoint,
            abort_after: None,
            abort_behind: None,
            stall: ReadRules::LAB.deadline,
            truth: None,
            abort_after_ids: None,
        })?
        .results;
        anyhow::ensure!(
            !results.iter().any(|r| r.read.short_read()),
            "{topic}: records were fetched past the broker's end offset; its counts cannot be trusted"
        );
        totals.insert(store.name(), results.iter().map(|r| r.total).sum::<i64>());
    }
    Ok(totals)
}

impl Found<'_> {
    fn json(&self) -> serde_json::Value {
        json!({
            "topic": self.topic,
            "idempotent": self.idempotent,
            "sent": self.landed.iter().map(|(p, o)| json!({"partition": p, "offset": o})).collect::<Vec<_>>(),
            "partitions": self.partitions,
            "records": self.records.iter().map(|(p, o, k, v)| json!({"partition": p, "offset": o, "key": k, "value": v})).collect::<Vec<_>>(),
            "totals": self.totals,
            "true_total": self.truth,
        })
    }

    fn text(&self, out: &mut impl Write) -> anyhow::Result<()> {
        let n = self.partitions;
        let parts = if n == 1 {
            "1 partition".to_string()
        } else {
            format!("{n} partitions: the broker made them")
        };
        writeln!(
            out,
            "topic {} ({parts}){}",
            self.topic,
            if self.idempotent {
                ", idempotent producer"
            } else {
                ""
            }
        )?;
        for ((key, _, _), (p, offset)) in self.sends.iter().zip(self.landed) {
            writeln!(out, "  sent {key} -> partition {p} offset {offset}")?;
        }
        writeln!(
            out,
            "read the whole topic back: {} records",
            self.records.len()
        )?;
        for (p, o, k, v) in self.records {
            writeln!(out, "  partition {p} offset {o}  key {k}  value {v}")?;
        }
        if self.idempotent {
            writeln!(
                out,
                "the second send of p17 landed too: Kafka's idempotence dedups its own retries, not an application's resend"
            )?;
        }
        writeln!(out, "consumed with each store (true total {}):", self.truth)?;
        for store in StoreKind::on(Source::Kafka) {
            writeln!(out, "  {:<11} {}", store.name(), self.totals[store.name()])?;
        }
        Ok(())
    }
}
