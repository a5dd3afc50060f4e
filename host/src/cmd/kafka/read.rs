//! Reading a partition from the broker, by the rules of [`idem_host::kafka::trust`].

use std::time::{Duration, Instant};

use anyhow::Context;
use idem_core::log::IdKey;
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::message::Message as _;
use rdkafka::{Offset as KOffset, TopicPartitionList};

use idem_core::log::Offset;
use rdkafka::consumer::CommitMode;

use super::client::{BROKER_TIMEOUT, reader, unreachable};
use idem_host::kafka::stream::TruthFold;
use idem_host::kafka::trust::{PartitionRead, ReadRules};

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
        if idem_host::cleanup::stop_requested() {
            if rules.follow {
                break; // the report follows
            }
            return Err(idem_host::cleanup::Interrupted.into());
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

/// The broker's end offset of each of `n` partitions of `topic` (ListOffsets, latest, at
/// the consumer's isolation level): where a run that began now reads to.
pub(super) fn end_offsets(
    c: &BaseConsumer,
    brokers: &str,
    topic: &str,
    n: i32,
) -> anyhow::Result<Vec<Offset>> {
    (0..n)
        .map(|p| {
            let (_, high) = c
                .fetch_watermarks(topic, p, BROKER_TIMEOUT)
                .map_err(|e| unreachable(brokers, e))?;
            Ok(u64::try_from(high).unwrap_or(0))
        })
        .collect()
}

/// Assigns `c` the `partitions` of `topic`, each from offset 0.
pub(super) fn assign_from_zero(
    c: &BaseConsumer,
    topic: &str,
    partitions: impl IntoIterator<Item = i32>,
) -> anyhow::Result<()> {
    let mut tpl = TopicPartitionList::new();
    for p in partitions {
        tpl.add_partition_offset(topic, p, KOffset::Offset(0))
            .context("assigning a partition")?;
    }
    c.assign(&tpl).context("assigning the partitions")
}

/// The fetch position of each of `n` partitions of `topic`, when `c` has one: the
/// offset after the last record it delivered, or past offsets with none to deliver.
pub(super) fn positions(c: &BaseConsumer, topic: &str, n: i32) -> Vec<Option<Offset>> {
    let pos = c.position().ok();
    (0..n)
        .map(|p| match pos.as_ref()?.find_partition(topic, p)?.offset() {
            KOffset::Offset(o) => u64::try_from(o).ok(),
            _ => None,
        })
        .collect()
}

/// Commits each `(partition, next offset)` of `positions` as `group`'s offsets of
/// `topic`, in one request.
pub(super) fn commit_positions(
    group: &BaseConsumer,
    brokers: &str,
    topic: &str,
    positions: &[(i32, Offset)],
    mode: CommitMode,
) -> anyhow::Result<()> {
    if positions.is_empty() {
        return Ok(());
    }
    let mut tpl = TopicPartitionList::new();
    for &(p, next) in positions {
        tpl.add_partition_offset(topic, p, KOffset::Offset(next as i64))?;
    }
    group
        .commit(&tpl, mode)
        .map_err(|e| unreachable(brokers, e))
}

/// The true total of each `(partition, end offset)` of `topic` in `parts`, in that order,
/// from a read of its own: a consumer in no group, from offset 0, each record judged by
/// `rules` as the consuming read judges it ([`TruthFold`]). What the last fetches
/// brought past the ends is read too (so a broker whose end offset is short shows), not
/// folded.
pub(super) fn truth_read(
    brokers: &str,
    topic: &str,
    rules: &ReadRules,
    parts: &[(i32, Offset)],
    stall: Duration,
) -> anyhow::Result<Vec<TruthFold>> {
    let c = reader(brokers)?;
    assign_from_zero(&c, topic, parts.iter().map(|&(p, _)| p))?;
    let mut folds: Vec<TruthFold> = parts
        .iter()
        .map(|&(p, end)| TruthFold::new(p, *rules, end))
        .collect();
    let index = |p: i32| parts.iter().position(|&(q, _)| q == p);
    let n = parts.iter().map(|&(p, _)| p + 1).max().unwrap_or(0);
    let mut last_record = Instant::now();
    let fold_record = |folds: &mut Vec<TruthFold>, m: &rdkafka::message::BorrowedMessage<'_>| {
        let (Some(i), Ok(offset)) = (index(m.partition()), u64::try_from(m.offset())) else {
            return Ok(());
        };
        folds[i].ingest(topic, offset, m.key(), m.payload())
    };
    while let Some(i) = folds.iter().position(|f| !f.reached(None)) {
        if idem_host::cleanup::stop_requested() {
            return Err(idem_host::cleanup::Interrupted.into());
        }
        match c.poll(Duration::from_millis(100)) {
            Some(Err(e)) if passing(&e) => {}
            Some(m) => {
                let m = m.with_context(|| format!("reading {topic}"))?;
                fold_record(&mut folds, &m)?;
                last_record = Instant::now();
            }
            None => {
                let at = positions(&c, topic, n);
                if parts
                    .iter()
                    .zip(&folds)
                    .all(|(&(p, _), f)| f.reached(at.get(p as usize).copied().flatten()))
                {
                    break;
                }
                anyhow::ensure!(
                    last_record.elapsed() < stall,
                    "reading {topic} partition {}: the broker's end offset is {}, but no record came after offset {} for {} s",
                    parts[i].0,
                    parts[i].1,
                    folds[i].highest.map_or(0, |h| h + 1),
                    stall.as_secs()
                );
            }
        }
    }
    // What is fetched already, without waiting for more.
    let drained = Instant::now();
    while drained.elapsed() < DRAIN
        && let Some(m) = c.poll(Duration::ZERO)
    {
        let m = m.with_context(|| format!("reading {topic}"))?;
        fold_record(&mut folds, &m)?;
    }
    Ok(folds)
}

/// The longest the read of the true total takes what was fetched past its ends.
const DRAIN: Duration = Duration::from_millis(200);

/// Whether `e`, from a poll, is a lost connection that librdkafka reestablishes by
/// itself: the read goes on polling (the stall timeout bounds the wait).
pub(super) fn passing(e: &rdkafka::error::KafkaError) -> bool {
    use rdkafka::error::{KafkaError, RDKafkaErrorCode};
    matches!(
        e,
        KafkaError::MessageConsumption(
            RDKafkaErrorCode::AllBrokersDown | RDKafkaErrorCode::BrokerTransportFailure
        )
    )
}
