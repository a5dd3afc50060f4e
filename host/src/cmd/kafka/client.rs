//! The clients idem talks to a broker with: their configuration, the topic's metadata,
//! a topic's creation, and a group's committed offsets.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use idem_core::log::Offset;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer as _};
use rdkafka::error::KafkaError;
use rdkafka::{Offset as KOffset, TopicPartitionList};

/// How long a broker may take to answer before it counts as unreachable.
pub(super) const BROKER_TIMEOUT: Duration = Duration::from_secs(5);

/// The isolation level every consumer reads with: librdkafka's default, set here so that
/// it is said. Under `read_committed` a consumer skips the records of aborted
/// transactions and stops at the last stable offset (the first open transaction); the
/// Java client and kafka-python default to `read_uncommitted`, which reads them all.
pub(super) const ISOLATION_LEVEL: &str = "read_committed";

pub(super) fn unreachable(brokers: &str, e: KafkaError) -> anyhow::Error {
    anyhow::anyhow!(
        "cannot reach the Kafka broker at {brokers} within {} s ({e})",
        BROKER_TIMEOUT.as_secs()
    )
}

/// How much a consumer fetches and keeps ahead, the same for every reader idem runs
/// (and for the baselines of `idem kafka bench`). librdkafka's defaults (its
/// CONFIGURATION.md) let a consumer prefetch up to 64 MiB (`queued.max.messages.kbytes`
/// 65536, for the consumer's one queue whatever its partitions) and ask up to 50 MiB a
/// fetch (`fetch.max.bytes` 52428800). Here a fetch asks 1 MiB at most, 1 MiB a
/// partition (`max.partition.fetch.bytes`, its default), and 4 MiB wait queued; the
/// broker answers a fetch after 50 ms at most when it has less (`fetch.wait.max.ms`,
/// 500 by default).
pub(super) const FETCH: [(&str, &str); 4] = [
    ("fetch.max.bytes", "1048576"),
    ("max.partition.fetch.bytes", "1048576"),
    ("queued.max.messages.kbytes", "4096"),
    ("fetch.wait.max.ms", "50"),
];

pub(super) fn config(brokers: &str) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", brokers)
        .set("socket.timeout.ms", "5000")
        .set("message.timeout.ms", "10000")
        .set("log_level", "3");
    c
}

/// The topic's partition count, `None` when the broker does not have it.
pub(super) fn partitions(
    consumer: &BaseConsumer,
    brokers: &str,
    topic: &str,
) -> anyhow::Result<Option<i32>> {
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

/// A consumer of group `group` that commits only when told to.
pub(super) fn consumer(brokers: &str, group: &str) -> anyhow::Result<BaseConsumer> {
    fetching(brokers)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("isolation.level", ISOLATION_LEVEL)
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest")
        .create()
        .map_err(|e| unreachable(brokers, e))
}

/// `config` with the fetch settings every reader shares ([`FETCH`]).
pub(super) fn fetching(brokers: &str) -> ClientConfig {
    let mut c = config(brokers);
    for (k, v) in FETCH {
        c.set(k, v);
    }
    c
}

/// A consumer that reads whole partitions, in a group of its own that never commits.
pub(super) fn reader(brokers: &str) -> anyhow::Result<BaseConsumer> {
    fetching(brokers)
        .set("group.id", format!("idem-reader-{}", unique()))
        .set("enable.auto.commit", "false")
        .set("isolation.level", ISOLATION_LEVEL)
        .create()
        .map_err(|e| unreachable(brokers, e))
}

/// Creates `topic` with `partitions`. A broker that does not answer the admin request
/// (librdkafka's mock broker, for one) may still create it on the first send.
pub(super) fn create_topic(brokers: &str, topic: &str, partitions: i32) -> Result<(), String> {
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

/// The offset `group` has committed for partition `p` of `topic`, when it has one.
pub(super) fn committed(
    group: &BaseConsumer,
    brokers: &str,
    topic: &str,
    p: i32,
) -> anyhow::Result<Option<i64>> {
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition(topic, p);
    let committed = group
        .committed_offsets(tpl, BROKER_TIMEOUT)
        .map_err(|e| unreachable(brokers, e))?;
    Ok(
        match committed.find_partition(topic, p).map(|e| e.offset()) {
            Some(KOffset::Offset(n)) => Some(n),
            _ => None,
        },
    )
}

/// Commits `next` as `group`'s offset of partition `p` of `topic`.
pub(super) fn commit(
    group: &BaseConsumer,
    brokers: &str,
    topic: &str,
    p: i32,
    next: Offset,
) -> anyhow::Result<()> {
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, p, KOffset::Offset(next as i64))?;
    group
        .commit(&tpl, CommitMode::Sync)
        .map_err(|e| unreachable(brokers, e))
}

/// A name no other run of idem picks: the process id and the time.
pub(super) fn unique() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{}-{nanos}", std::process::id())
}
