//! `kafka consume`: every partition of a topic into a store whose state lives in a flash
//! image, one core consumer per partition; the group's committed offset is a copy of
//! each durable position.

use std::path::Path;
use std::time::Duration;

use idem_core::consumer::{CheckpointEvery, Consumer, ConsumerConfig};
use idem_core::journal::Region;
use idem_core::log::Offset;
use idem_core::persist::Layout;
use idem_sim::payment::{Total, Truth};
use idem_sim::registry::{self, Source};
use rdkafka::consumer::BaseConsumer;

use super::MAX_PARTITIONS;
use super::client::{commit, committed, consumer, partitions};
use super::read::{read_more, read_partition};
use super::shared::{SharedConsume, SharedOut};
use crate::device;
use crate::drive::Drive;
use crate::error::usage;
use crate::image::{Image, Meta, PAGE, SyncMode};
use crate::kafka::group::{group_copy, group_was};
use crate::kafka::trust::{PartitionRead, ReadRules};
use crate::select::dispatch::{SinksJob, with_sinks};
use crate::select::{HostSinks, StoreKind, WINDOW};

/// What consuming one partition ended with.
pub(super) struct PartitionResult {
    pub(super) partition: i32,
    pub(super) total: i64,
    pub(super) true_total: i64,
    pub(super) next_offset: Offset,
    pub(super) read: PartitionRead,
    /// The group's committed offset when the run began, when it differed from the image's.
    pub(super) group_was: Option<i64>,
}

/// Pages of an image per partition: two for the position journal, three for the store's
/// (an appending store keeps the records it rebuilds its state from on two of them while
/// it reclaims the third).
pub(super) const PARTITION_PAGES: u32 = 5;

/// Where partition `p`'s two journals live in an image: [`PARTITION_PAGES`] pages from
/// page `PARTITION_PAGES * p`.
pub(super) fn layout(image: &Image, p: i32) -> Layout {
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

/// Where a durable position's copy goes: a group's committed offsets.
pub(super) struct GroupCommit<'a> {
    pub(super) group: &'a BaseConsumer,
    pub(super) brokers: &'a str,
    pub(super) topic: &'a str,
    /// Test hook: abort the process right after this many flash commits, before the
    /// group commit that copies the last one.
    pub(super) abort_after: Option<u64>,
}

impl GroupCommit<'_> {
    /// Flash commit number `commits` put partition `p` at `next`, durable already (the
    /// drive syncs each commit before it reports it): copied to the group.
    pub(super) fn copy(&self, commits: u64, p: i32, next: Offset) -> anyhow::Result<()> {
        if self.abort_after == Some(commits) {
            // As a SIGKILL would: no destructor, no group commit.
            std::process::abort();
        }
        commit(self.group, self.brokers, self.topic, p, next)
    }
}

struct ConsumePartition<'a> {
    image: &'a mut Image,
    kafka: GroupCommit<'a>,
    partition: i32,
    checkpoint_every: CheckpointEvery,
    pace: Duration,
    /// The partition as read so far.
    read: PartitionRead,
    /// Whether to print a line on stderr for each durable checkpoint (`--follow`).
    progress: bool,
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
        let k = &self.kafka;
        let group_was = group_was(
            committed(k.group, k.brokers, k.topic, self.partition)?,
            c.next_offset(),
        );
        // The whole partition, so the true total counts every record, not just the rest.
        let read = self.read;
        let follow = self.progress;
        let stop = || follow && crate::cleanup::stop_requested(); // --follow: Ctrl-C
        let drive = Drive {
            pace: self.pace,
            stop: &stop,
            steps: None,
            reports: &|next| group_copy(next, None).is_some(),
        };
        let (partition, commits) = (self.partition, self.commits);
        drive.run(&mut c, self.image, &read.log, &mut |next, total| {
            *commits += 1;
            if follow {
                eprintln!(
                    "partition {partition}: checkpoint: {}; total {total}",
                    crate::render::position_text(next)
                );
            }
            k.copy(*commits, partition, next)
        })?;
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

/// How `consume` runs.
pub(super) struct ConsumeOptions<'a> {
    pub(super) brokers: &'a str,
    pub(super) topic: &'a str,
    pub(super) group: &'a str,
    pub(super) store: StoreKind,
    pub(super) flash: &'a Path,
    pub(super) checkpoint_every: u64,
    pub(super) pace: Duration,
    pub(super) rules: ReadRules,
    /// Keep consuming new records until a signal stops it.
    pub(super) follow: bool,
    /// Be one member of the group: the broker assigns the partitions.
    pub(super) shared: bool,
    /// When the image's writes reach the disk.
    pub(super) sync: SyncMode,
    pub(super) abort_after: Option<u64>,
}

/// Consumes every partition of the topic into the image; one result per partition.
pub(super) fn consume(o: &ConsumeOptions<'_>) -> anyhow::Result<SharedOut> {
    let store = o.store;
    if !store.runs_on(Source::Kafka) {
        return Err(usage(format!(
            "kafka consume takes the {} store",
            registry::list(StoreKind::on(Source::Kafka), " or ")
        )));
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
        window: WINDOW,
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
        let job = SharedConsume::new(o, &mut image, every, rules)?;
        let out = with_sinks(store.into(), WINDOW, job)?;
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
                kafka: GroupCommit {
                    group: &kafka,
                    brokers: o.brokers,
                    topic: o.topic,
                    abort_after: o.abort_after,
                },
                partition,
                checkpoint_every: every,
                pace: o.pace,
                read,
                progress: o.follow,
                commits: &mut commits,
            };
            results.push(with_sinks(store.into(), WINDOW, job)?);
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
