//! The board's bridge: one partition of a topic as the board's stream, and the group
//! that gets the board's acknowledged position as a copy.

use std::time::{Duration, Instant};

use anyhow::Context;
use idem_core::log::{IdKey, Offset};
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::message::Message as _;
use rdkafka::{Offset as KOffset, TopicPartitionList};

use super::client::{commit, committed, consumer, partitions, reader};
use super::read::{end_offsets, positions, truth_read};
use idem_host::id_bytes::IdBytes;
use idem_host::kafka::stream::{Judge, Judged, Window, place};
use idem_host::kafka::trust::ReadRules;
use idem_lab::error::usage;

/// One partition of a topic as the board's stream: its records from offset 0 to the end
/// offset the broker gave when the bridge started, and the consumer group that gets the
/// board's position as a copy, committed only after the board acknowledged a checkpoint.
pub struct BoardSource {
    /// The partition's amounts, by offset (0 where no payment is): each offset's event is
    /// its amount with an id of `id_bytes` under the board's own key
    /// ([`idem_host::kafka::record::message_of`]), 8 bytes an offset besides its id's.
    pub amounts: Vec<i64>,
    /// The bytes each event's message id is made of: its record's key, or for a keyless
    /// record and a placeholder, its place (a NUL byte, the partition, `@`, the offset).
    pub id_bytes: IdBytes,
    /// Each distinct message id (by its key's bytes) counted once, from a read of its
    /// own.
    pub true_total: i64,
    /// The group's committed offset before the bridge started, if any.
    pub group_was: Option<i64>,
    group: BaseConsumer,
    topic: String,
    partition: i32,
    brokers: String,
}

/// Give up a read of the partition that brings nothing for this long.
const STALL: Duration = Duration::from_secs(30);

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
        let reader = reader(brokers)?;
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
        let end = end_offsets(&reader, brokers, topic, n)?[partition as usize];
        let (amounts, id_bytes) = read_events(&reader, topic, partition, end, rules)?;
        let truth = truth_read(brokers, topic, &rules, &[(partition, end)], STALL)?;
        let after = end_offsets(&reader, brokers, topic, n)?[partition as usize];
        let truth = truth
            .into_iter()
            .next()
            .context("the read of the true total")?;
        let true_total = truth.total();
        let facts = truth.facts(after as i64);
        if facts.short_read() {
            anyhow::bail!(
                "{topic} partition {partition}: the broker's end offset is {after} but it served records up to offset {}: its count of its own partition is short, so the board's verdict could not be trusted",
                facts.highest.unwrap_or_default()
            );
        }
        let group = consumer(brokers, group)?;
        let group_was = committed(&group, brokers, topic, partition)?;
        Ok(Self {
            amounts,
            id_bytes,
            true_total,
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
        commit(
            &self.group,
            &self.brokers,
            &self.topic,
            self.partition,
            next,
        )
    }
}

/// Partition `p` of `topic` from offset 0 to `end`, streamed through the rules: each
/// offset's amount (0 where no payment is) and the bytes of its id.
fn read_events(
    reader: &BaseConsumer,
    topic: &str,
    p: i32,
    end: Offset,
    rules: ReadRules,
) -> anyhow::Result<(Vec<i64>, IdBytes)> {
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, p, KOffset::Offset(0))
        .context("assigning a partition")?;
    reader.assign(&tpl).context("assigning a partition")?;
    let (mut judge, mut window) = (Judge::new(p, rules), Window::new(p, IdKey::PUBLIC, 0, end));
    let (mut ids, mut amounts) = (IdBytes::default(), Vec::new());
    let mut last_record = Instant::now();
    // Placeholders up to `to`: amount 0, their places as their ids.
    let places = |ids: &mut IdBytes, amounts: &mut Vec<i64>, to: Offset| {
        while (ids.len() as Offset) < to.min(end) {
            ids.push(&place(p, ids.len() as Offset));
            amounts.push(0);
        }
    };
    while !window.complete() {
        if idem_host::cleanup::stop_requested() {
            return Err(idem_host::cleanup::Interrupted.into());
        }
        match reader.poll(Duration::from_millis(100)) {
            Some(m) => {
                let m = m.with_context(|| format!("reading {topic} partition {p}"))?;
                let taken = window.take(
                    &mut judge,
                    (topic, m.offset()),
                    m.key(),
                    m.payload(),
                    &mut |_| {},
                )?;
                if let Some((offset, j)) = taken.filter(|&(o, _)| o < end) {
                    places(&mut ids, &mut amounts, offset);
                    match j {
                        Judged::Payment(Some(k), amount) => {
                            ids.push(k);
                            amounts.push(amount);
                        }
                        // A keyless record: its place is its id.
                        Judged::Payment(None, amount) => {
                            ids.push(&place(p, offset));
                            amounts.push(amount);
                        }
                        Judged::Skipped => places(&mut ids, &mut amounts, offset + 1),
                    }
                }
                // The window only judges and spots gaps: what it holds is in `amounts`.
                window.consumed_to(Offset::MAX);
                last_record = Instant::now();
            }
            None => {
                if let Some(&Some(position)) = positions(reader, topic, p + 1).get(p as usize) {
                    window.pass_to(position);
                    window.consumed_to(Offset::MAX);
                    places(&mut ids, &mut amounts, position);
                }
                anyhow::ensure!(
                    last_record.elapsed() < STALL,
                    "reading {topic} partition {p}: the broker's end offset is {end}, but no record came after offset {} for {} s",
                    ids.len(),
                    STALL.as_secs()
                );
            }
        }
    }
    Ok((amounts, ids))
}
