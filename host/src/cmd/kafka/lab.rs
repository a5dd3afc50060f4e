//! `kafka lab`: the payments lesson on a fresh topic.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use anyhow::Context;
use idem_core::log::IdKey;
use idem_sim::registry::Source;
use serde_json::json;

use super::client::{consumer, create_topic, partitions, unique};
use super::consume::{ConsumeOptions, consume};
use super::produce::{Batching, send_created};
use super::read::read_partition;
use crate::image::SyncMode;
use crate::kafka::trust::ReadRules;
use crate::select::StoreKind;

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
    let n = partitions(&reader, brokers, &topic)?.unwrap_or(1);
    let mut records = Vec::new();
    for p in 0..n {
        // The lab grades by keys, not ids: any key will do for its read.
        let read = read_partition(&reader, brokers, &topic, p, &ReadRules::LAB, IdKey::PUBLIC)?;
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
    for store in StoreKind::on(Source::Kafka) {
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
            sync: SyncMode::Checkpoint,
            abort_after: None,
            abort_behind: None,
            stall: ReadRules::LAB.deadline,
            truth: None,
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
    for store in StoreKind::on(Source::Kafka) {
        writeln!(out, "  {:<11} {}", store.name(), totals[store.name()])?;
    }
    Ok(())
}
