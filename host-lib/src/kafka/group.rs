//! What a consumer group's committed offset means to idem: a copy of a flash image's
//! durable position. When a `--shared` member takes a partition it keeps its image's
//! state or rebuilds it; the group copies a position only once it is durable, and only
//! what it does not hold already.

use std::collections::BTreeSet;
use std::time::Duration;

use idem_core::log::Offset;
use serde::Serialize;

/// How long a group member may go without heartbeats before the broker moves its
/// partitions.
pub const SESSION_TIMEOUT: Duration = Duration::from_secs(6);

/// What a member did with its image's state of a partition it took.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TakeAction {
    /// The image agreed with the group: its state is the fold up to the group's offset.
    Kept,
    /// It did not: the partition's pages are erased and its state folded again from
    /// offset 0 up to the group's offset.
    Rebuilt,
}

impl TakeAction {
    /// `kept` or `rebuilt`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Kept => "kept",
            Self::Rebuilt => "rebuilt",
        }
    }
}

/// How a member took a partition: what the group and its image said, and what it did.
#[derive(Debug, Clone, Serialize)]
pub struct Take {
    /// The partition.
    pub partition: i32,
    /// The group's committed offset (0 when none).
    pub group_offset: Offset,
    /// The position in this member's image.
    pub image_offset: Offset,
    /// `kept` (the image agreed with the group) or `rebuilt` (it did not: the partition's
    /// pages were erased and its state folded again from offset 0 up to the group's offset).
    pub action: TakeAction,
}

impl Take {
    /// A member takes `partition` with the group at `group_offset` and its image at
    /// `image_offset`. A store's state at a position is the fold of the partition's
    /// records before it, so the image's state is kept only when its position is the
    /// group's offset; behind it or ahead of it (a position the group never copied, or
    /// one another member moved past), it is rebuilt.
    pub fn decide(partition: i32, group_offset: Offset, image_offset: Offset) -> Self {
        let action = if image_offset == group_offset {
            TakeAction::Kept
        } else {
            TakeAction::Rebuilt
        };
        Self {
            partition,
            group_offset,
            image_offset,
            action,
        }
    }
}

/// The group's offset a member takes a partition at, from its committed offset: none,
/// or one not past 0, is 0.
pub fn group_offset(committed: Option<i64>) -> Offset {
    match committed {
        Some(n) if n > 0 => n as Offset,
        _ => 0,
    }
}

/// The group's committed offset when a run began, for the report: only when it
/// differed from the image's position `image` (the image is the truth; the group gets a
/// copy of it).
pub fn group_was(committed: Option<i64>, image: Offset) -> Option<i64> {
    committed.filter(|&n| n != image as i64)
}

/// What the group may copy once the flash commit of `durable` (the next offset to read)
/// is synced: that position itself, never one beyond it, and nothing while the group
/// already holds it or more (`group_has`: what the group held when this member took the
/// partition, while it folds the records again up to it). With `group_has` none, the
/// image is the position's one truth and the group gets each durable position.
pub fn group_copy(durable: Offset, group_has: Option<Offset>) -> Option<Offset> {
    match group_has {
        Some(has) if durable <= has => None,
        _ => Some(durable),
    }
}

/// What a rebalance changed for a member that owns `owned` and is now assigned
/// `assigned`: the partitions it lost and the partitions it takes, each in order.
pub fn rebalance(owned: &BTreeSet<i32>, assigned: &BTreeSet<i32>) -> (Vec<i32>, Vec<i32>) {
    (
        owned.difference(assigned).copied().collect(),
        assigned.difference(owned).copied().collect(),
    )
}

/// Whether a member may stop: every partition it owns is applied to the end of what was
/// read (`caught_up`) and nothing changed (no record, no rebalance) for `quiet_for`. A
/// member that owns nothing may be waiting for a rebalance that waits in turn for a
/// killed member's session to time out: it waits twice that at least.
pub fn member_may_stop(
    caught_up: bool,
    owns_nothing: bool,
    quiet_for: Duration,
    idle: Duration,
) -> bool {
    let quiet = if owns_nothing {
        idle.max(2 * SESSION_TIMEOUT)
    } else {
        idle
    };
    caught_up && quiet_for >= quiet
}

/// The longest a durable position waits for its copy in the group.
pub const COMMIT_EVERY: Duration = Duration::from_millis(100);

/// The most durable checkpoints that wait for their copy in the group.
pub const COMMIT_CHECKPOINTS: u32 = 10;

/// When the group gets its copy of the durable positions: off the record path, as one
/// asynchronous commit of every partition's latest durable position, [`COMMIT_EVERY`]
/// after the last one or after [`COMMIT_CHECKPOINTS`] checkpoints, whichever comes
/// first; what is still pending is committed synchronously at the end.
/// A position is handed here only once its flash commit is synced, so the group never
/// holds a position ahead of the image. Time is the caller's (`now`, any monotonic
/// clock).
#[derive(Debug, Clone)]
pub struct CommitPacer<T> {
    pending: std::collections::BTreeMap<i32, Offset>,
    checkpoints: u32,
    last: T,
}

impl<T: Copy + Ord + core::ops::Sub<Output = Duration>> CommitPacer<T> {
    /// A pacer whose last commit was at `now` (the run's start).
    pub fn new(now: T) -> Self {
        Self {
            pending: Default::default(),
            checkpoints: 0,
            last: now,
        }
    }

    /// Partition `p`'s flash commit of `next` is durable: it waits for the next commit.
    pub fn durable(&mut self, p: i32, next: Offset) {
        self.pending.insert(p, next);
        self.checkpoints += 1;
    }

    /// What to commit at `now`, if a commit is due: every pending position, which is
    /// then no longer pending.
    pub fn due(&mut self, now: T) -> Option<Vec<(i32, Offset)>> {
        let due = !self.pending.is_empty()
            && (self.checkpoints >= COMMIT_CHECKPOINTS || now - self.last >= COMMIT_EVERY);
        due.then(|| {
            self.last = now;
            self.take()
        })
    }

    /// Every pending position, for a synchronous commit (at the end); none pending after.
    pub fn take(&mut self) -> Vec<(i32, Offset)> {
        self.checkpoints = 0;
        std::mem::take(&mut self.pending).into_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_member_keeps_an_image_at_the_groups_offset() {
        let t = Take::decide(1, 40, 40);
        assert_eq!(t.action, TakeAction::Kept);
        assert_eq!((t.partition, t.group_offset, t.image_offset), (1, 40, 40));
        assert_eq!(Take::decide(0, 0, 0).action, TakeAction::Kept);
    }

    #[test]
    fn a_member_rebuilds_an_image_behind_or_ahead_of_the_group() {
        let behind = Take::decide(2, 40, 30);
        assert_eq!(behind.action, TakeAction::Rebuilt);
        assert_eq!((behind.group_offset, behind.image_offset), (40, 30));
        assert_eq!(Take::decide(2, 40, 50).action, TakeAction::Rebuilt);
        assert_eq!(Take::decide(2, 0, 10).action, TakeAction::Rebuilt);
    }

    #[test]
    fn a_take_is_reported_as_kept_or_rebuilt() {
        let json = serde_json::to_value(Take::decide(3, 10, 7)).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"partition": 3, "group_offset": 10, "image_offset": 7, "action": "rebuilt"})
        );
        assert_eq!(
            serde_json::to_value(TakeAction::Kept).unwrap(),
            serde_json::json!("kept")
        );
        assert_eq!(
            (TakeAction::Kept.name(), TakeAction::Rebuilt.name()),
            ("kept", "rebuilt")
        );
    }

    #[test]
    fn no_committed_offset_is_offset_0() {
        assert_eq!(group_offset(Some(25)), 25);
        assert_eq!(group_offset(Some(0)), 0);
        assert_eq!(group_offset(Some(-1001)), 0);
        assert_eq!(group_offset(None), 0);
    }

    #[test]
    fn the_group_was_is_said_only_when_it_differed() {
        assert_eq!(group_was(Some(30), 20), Some(30));
        assert_eq!(group_was(Some(10), 20), Some(10));
        assert_eq!(group_was(Some(20), 20), None);
        assert_eq!(group_was(None, 20), None);
    }

    #[test]
    fn the_group_copies_the_durable_position_and_nothing_beyond() {
        assert_eq!(group_copy(20, None), Some(20));
        assert_eq!(group_copy(0, None), Some(0));
        assert_eq!(group_copy(41, Some(40)), Some(41));
        assert_eq!(group_copy(50, Some(40)), Some(50));
    }

    #[test]
    fn the_group_copies_nothing_it_already_holds() {
        assert_eq!(group_copy(40, Some(40)), None);
        assert_eq!(group_copy(30, Some(40)), None);
        assert_eq!(group_copy(10, Some(40)), None);
    }

    #[test]
    fn a_rebalance_loses_and_takes_partitions() {
        let set = |ps: &[i32]| ps.iter().copied().collect::<BTreeSet<i32>>();
        assert_eq!(
            rebalance(&set(&[0, 1, 3]), &set(&[1, 2, 4])),
            (vec![0, 3], vec![2, 4])
        );
        assert_eq!(rebalance(&set(&[]), &set(&[2, 0])), (vec![], vec![0, 2]));
        assert_eq!(rebalance(&set(&[5]), &set(&[])), (vec![5], vec![]));
        assert_eq!(rebalance(&set(&[1, 2]), &set(&[1, 2])), (vec![], vec![]));
    }

    #[test]
    fn a_member_stops_when_caught_up_and_quiet() {
        let idle = Duration::from_secs(1);
        assert!(member_may_stop(true, false, idle, idle));
        assert!(!member_may_stop(
            true,
            false,
            Duration::from_millis(999),
            idle
        ));
        assert!(!member_may_stop(
            false,
            false,
            Duration::from_secs(60),
            idle
        ));
    }

    #[test]
    fn a_member_that_owns_nothing_waits_two_sessions() {
        let idle = Duration::from_secs(1);
        assert!(!member_may_stop(true, true, Duration::from_secs(11), idle));
        assert!(member_may_stop(true, true, Duration::from_secs(12), idle));
        let long = Duration::from_secs(20);
        assert!(!member_may_stop(true, true, Duration::from_secs(19), long));
        assert!(member_may_stop(true, true, long, long));
    }
    #[test]
    fn the_group_gets_its_copy_after_100_ms_or_10_checkpoints() {
        let ms = Duration::from_millis;
        let mut pacer = CommitPacer::new(ms(0));
        assert_eq!(
            pacer.due(ms(500)),
            None,
            "nothing durable, nothing to commit"
        );
        pacer.durable(0, 10);
        pacer.durable(1, 10);
        pacer.durable(0, 20);
        assert_eq!(pacer.due(ms(99)), None);
        assert_eq!(pacer.due(ms(100)), Some(vec![(0, 20), (1, 10)]));
        assert_eq!(pacer.due(ms(300)), None, "nothing pending");
        // Ten checkpoints within 100 ms of the last commit.
        for i in 1..=9 {
            pacer.durable(2, 10 * i);
        }
        assert_eq!(pacer.due(ms(150)), None);
        pacer.durable(2, 100);
        assert_eq!(pacer.due(ms(150)), Some(vec![(2, 100)]));
        assert_eq!(pacer.due(ms(249)), None);
        pacer.durable(1, 30);
        assert_eq!(
            pacer.due(ms(249)),
            None,
            "100 ms after the last commit, at 150"
        );
        assert_eq!(pacer.due(ms(250)), Some(vec![(1, 30)]));
    }

    #[test]
    fn what_is_pending_is_taken_at_the_end() {
        let mut pacer = CommitPacer::new(Duration::ZERO);
        pacer.durable(0, 5);
        pacer.durable(3, 7);
        assert_eq!(pacer.take(), vec![(0, 5), (3, 7)]);
        assert_eq!(pacer.take(), vec![]);
        assert_eq!(pacer.due(Duration::from_secs(9)), None);
    }
}
