//! The board's bridge: one partition of a topic as the board's stream, and the group
//! that gets the board's acknowledged position as a copy.

use idem_core::log::{Event, IdKey, Log, Offset};
use idem_sim::payment::{Message, Truth};
use rdkafka::consumer::BaseConsumer;

use super::client::{commit, committed, consumer, partitions, reader};
use super::read::read_partition;
use crate::error::usage;
use crate::kafka::trust::ReadRules;

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
        let read = read_partition(&reader, brokers, topic, partition, &rules, IdKey::PUBLIC)?;
        if read.facts().short_read() {
            anyhow::bail!(
                "{topic} partition {partition}: the broker's end offset is {} but it served {} records: its count of its own partition is short, so the board's verdict could not be trusted",
                read.end_offset,
                read.log.len()
            );
        }
        let group = consumer(brokers, group)?;
        let group_was = committed(&group, brokers, topic, partition)?;
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
        commit(
            &self.group,
            &self.brokers,
            &self.topic,
            self.partition,
            next,
        )
    }
}
