//! Reading a partition from the broker, by the rules of [`crate::kafka::trust`].

use std::time::{Duration, Instant};

use anyhow::Context;
use idem_core::log::IdKey;
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::message::Message as _;
use rdkafka::{Offset as KOffset, TopicPartitionList};

use super::client::{BROKER_TIMEOUT, unreachable};
use crate::kafka::trust::{PartitionRead, ReadRules};

/// Reads partition `p` of `topic` from offset 0 until it has passed the broker's end
/// offset and the fetches return nothing new for `rules.idle`: an end offset alone is not
/// trusted (a broker can report one short of the records it serves).
pub(super) fn read_partition(
    c: &BaseConsumer,
    brokers: &str,
    topic: &str,
    p: i32,
    rules: &ReadRules,
    key: IdKey,
) -> anyhow::Result<PartitionRead> {
    let mut read = PartitionRead::new(p, key);
    read_more(c, brokers, topic, &mut read, rules)?;
    Ok(read)
}

/// Extends `read` with the partition's records after the last one it holds, by the
/// rules of [`read_partition`].
pub(super) fn read_more(
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
        if rules.done(next, high, last_new.elapsed()) {
            break;
        }
        anyhow::ensure!(
            !rules.overdue(started.elapsed()),
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
pub(super) fn ingest<M: rdkafka::message::Message>(
    read: &mut PartitionRead,
    topic: &str,
    m: &M,
    rules: &ReadRules,
) -> anyhow::Result<bool> {
    read.ingest(topic, m.offset(), m.key(), m.payload(), rules)
}
