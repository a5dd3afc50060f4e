//! What `kafka consume`'s two ways share: streamed.rs (every partition, to the end
//! offsets) and shared.rs (`--shared`, one member of a group). The run's options, where
//! a partition's journals live in the image, what consuming it ended with, the group
//! commit that copies a durable position, and the pace of reads. It imports neither way,
//! so both import it; consume.rs chooses between them.

use std::path::Path;
use std::time::Duration;

use idem_core::journal::Region;
use idem_core::log::Offset;
use idem_core::persist::Layout;
use rdkafka::consumer::BaseConsumer;

use super::client::commit;
use idem_host::image::{Image, PAGE, SyncMode};
use idem_host::kafka::group::Take;
use idem_host::kafka::trust::{ReadFacts, ReadRules};
use idem_host::truth::TruthFile;
use idem_lab::select::StoreKind;

/// Events a partition's window holds before its consumer steps through them.
pub(super) const BATCH: usize = 4096;

/// How long a poll waits for a record when nothing is waiting to be applied.
pub(super) const POLL: Duration = Duration::from_millis(100);

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
    /// delayed commits gave it (up to [`idem_host::kafka::group::COMMIT_CHECKPOINTS`]
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

/// What a consume ended with: each partition consumed, and for a group member which
/// partitions it took (and how) and lost to rebalances.
pub(super) struct SharedOut {
    pub(super) results: Vec<PartitionResult>,
    pub(super) taken: Vec<Take>,
    pub(super) released: Vec<i32>,
    /// With `--truth`: the ids applied, in order (`None`: keyless), or how many records
    /// of the image the log of ids lacks.
    pub(super) applied: Option<Result<Vec<Option<String>>, u64>>,
}
