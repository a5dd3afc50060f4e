//! `kafka consume`: every partition of a topic into a store whose state lives in a flash
//! image, one core consumer per partition; the group's committed offset is a copy of
//! each durable position.

use std::path::Path;
use std::time::Duration;

use idem_core::consumer::CheckpointEvery;
use idem_core::journal::Region;
use idem_core::log::Offset;
use idem_core::persist::Layout;
use idem_payments::registry::{self, Source};
use rdkafka::consumer::BaseConsumer;

use super::MAX_PARTITIONS;
use super::client::{commit, consumer, partitions};
use super::shared::{SharedConsume, SharedOut};
use super::streamed::Streamed;
use crate::error::usage;
use crate::image::{Image, Meta, PAGE, SyncMode};
use crate::kafka::applied::AppliedLog;
use crate::kafka::trust::{ReadFacts, ReadRules};
use crate::select::dispatch::with_sinks;
use crate::select::{StoreKind, WINDOW};
use crate::truth::TruthFile;

/// What consuming one partition ended with.
pub(super) struct PartitionResult {
    pub(super) partition: i32,
    pub(super) total: i64,
    /// The partition's true total, from a read of its own; none when a truth file grades
    /// the topic as a whole.
    pub(super) true_total: Option<i64>,
    pub(super) next_offset: Offset,
    /// What the partition's read found.
    pub(super) read: ReadFacts,
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
    /// Test hook: abort right after this many flash commits, once the group holds the
    /// copy of the one before (the window between a flash commit and its group commit).
    pub(super) abort_after: Option<u64>,
    /// Test hook: abort right after this many flash commits, the group holding what the
    /// delayed commits gave it (up to [`crate::kafka::group::COMMIT_CHECKPOINTS`]
    /// checkpoints behind).
    pub(super) abort_behind: Option<u64>,
    /// Give up when no record comes for this long while a partition is short of its end.
    pub(super) stall: Duration,
    /// What the producer sent (`--truth`): the grade's truth, instead of a second read.
    pub(super) truth: Option<&'a TruthFile>,
    /// Test hook: abort right after this many ids are logged (`--truth`), before the
    /// step that writes the last one's record.
    pub(super) abort_after_ids: Option<u64>,
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
        mqtt: None,
    };
    let fresh = crate::files::regular_or_missing(o.flash, "a flash image")?.is_none();
    let mut image = Image::open_or_create(o.flash, &meta)?;
    if o.truth.is_none() {
        // Only a graded run keeps the log of ids applied: one left beside the image
        // would be out of step with what this run applies.
        AppliedLog::remove(o.flash)?;
    }
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
    let job = Streamed {
        o,
        image: &mut image,
        kafka,
        partitions: n,
        every,
        rules,
        fresh,
    };
    with_sinks(store.into(), WINDOW, job)
}
