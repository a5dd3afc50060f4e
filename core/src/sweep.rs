//! Crash sweeps: the pieces that decide what a sweep tries and how a branch ends.
//!
//! A sweep runs a scenario once without a crash (the clean run), remembers the clean
//! run's [`Snapshot`] at every offset, and branches a crashed run off the clean one at
//! every crash point. A branch stops as soon as it is idle in the same logical state as
//! the clean run at the same offset ([`finish_branch`]): from there on the two are the
//! same, so the branch's outcome is the clean outcome plus what the branch did before
//! (a store that never converges, like the naive one after a replay, runs to the end).
//! Random multi-crash schedules come from a seed ([`random_schedule`]); a failing one is
//! shrunk to a smallest one that still fails ([`shrink`]).
//!
//! Iterating, parallelising and printing are the caller's.

use crate::check::{Anomalies, AppliedSet, Verdict};
use crate::crash::{At, CrashPoint};
use crate::log::{Log, Offset};
use crate::rng::SplitMix64;
use crate::scenario::MAX_CRASHES;
use crate::sim::Action;
use crate::sim::{Logical, Quiet, Run, SimError, TraceStep};
use crate::store::Store;

/// The clean run as it stood, idle, before reading one offset.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot<S: Store> {
    /// The logical state there.
    pub logical: Logical<S>,
    /// What the checker had found by then (lost writes judged below this offset).
    pub anomalies: Anomalies,
}

/// How one crash schedule ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BranchOutcome {
    /// The store's final total.
    pub final_total: i64,
    /// The true total.
    pub true_total: i64,
    /// What the checker found over the whole run.
    pub anomalies: Anomalies,
    /// Steps the branch ran (after it left the clean run).
    pub steps: u64,
    /// Where the branch rejoined the clean run, if it did.
    pub converged_at: Option<Offset>,
    /// Crash points that never happened.
    pub unfired: u32,
    /// The crash points that happened: the schedule that reproduces this outcome.
    pub fired: heapless::Vec<CrashPoint, MAX_CRASHES>,
}

impl BranchOutcome {
    /// The verdict on the final total.
    pub fn verdict(&self) -> Verdict {
        Verdict::of(self.final_total, self.true_total)
    }

    /// Whether this outcome fails a store that promises exactness: a total off the truth
    /// or any anomaly.
    pub fn fails(&self) -> bool {
        self.verdict() != Verdict::Exact || !self.anomalies.is_empty()
    }
}

/// The crash point a clean-run step offers (a clean run delivers each offset once).
pub fn point_of(step: &TraceStep) -> Option<CrashPoint> {
    let at = match (step.action, step.offset) {
        (Action::Deliver { .. }, Some(o)) => At::Deliver(o),
        (Action::Apply | Action::Skip, Some(o)) => At::Effect(o),
        (Action::Prepare, Some(o)) => At::Prepare(o),
        (Action::Commit, Some(o)) => At::Commit(o),
        _ => return None,
    };
    Some(CrashPoint::new(at))
}

/// Runs `branch` until it rejoins the clean run or ends. `snapshots(p)` is the clean
/// run at offset `p`; `clean_end` is the clean run's final report of anomalies and total.
pub fn finish_branch<'l, 's, S, L, A, const P: usize, const PS: usize>(
    mut branch: Run<'l, S, L, A, P, PS>,
    snapshots: impl Fn(Offset) -> Option<&'s Snapshot<S>>,
    clean_final: (i64, Anomalies),
) -> Result<BranchOutcome, SimError>
where
    S: Store + Clone + 's,
    L: Log,
    A: AppliedSet,
{
    let start = branch.report().steps;
    loop {
        if branch.plan_done() && branch.is_idle() {
            let p = branch.next_offset();
            if let Some(snap) = snapshots(p).filter(|s| branch.same_as(&s.logical)) {
                let fired = branch.fired_points();
                let mut r = branch.finish_at(p);
                let mut anomalies = r.anomalies;
                anomalies.add(&suffix(&clean_final.1, &snap.anomalies));
                r.anomalies = anomalies;
                return Ok(BranchOutcome {
                    final_total: clean_final.0,
                    true_total: r.true_total,
                    anomalies: r.anomalies,
                    steps: r.steps - start,
                    converged_at: Some(p),
                    unfired: r.unfired,
                    fired,
                });
            }
        }
        if !branch.step(&mut Quiet)? {
            let fired = branch.fired_points();
            let r = branch.finish();
            return Ok(BranchOutcome {
                final_total: r.final_total,
                true_total: r.true_total,
                anomalies: r.anomalies,
                steps: r.steps - start,
                converged_at: None,
                unfired: r.unfired,
                fired,
            });
        }
    }
}

/// The anomalies the clean run found after a snapshot: `end` minus `at`, counts only.
fn suffix(end: &Anomalies, at: &Anomalies) -> Anomalies {
    Anomalies {
        duplicate: end.duplicate - at.duplicate,
        lost_write: end.lost_write - at.lost_write,
        nonmonotonic: end.nonmonotonic - at.nonmonotonic,
        first_duplicate: end.first_duplicate.filter(|_| end.duplicate > at.duplicate),
        first_lost: end.first_lost.filter(|_| end.lost_write > at.lost_write),
        first_nonmonotonic: end
            .first_nonmonotonic
            .filter(|_| end.nonmonotonic > at.nonmonotonic),
    }
}

/// What a random schedule may pick from: the clean run's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Space {
    /// Events in the log.
    pub events: u64,
    /// The checkpoint interval (commit points are batch ends).
    pub checkpoint_every: u64,
    /// Word writes of the clean run (0: no torn-write points).
    pub word_writes: u64,
    /// Erases of the clean run (0: no erase points).
    pub erases: u64,
}

/// `crashes` random crash points (at most [`MAX_CRASHES`]) from `rng`, sorted by kind
/// and offset. Later points may carry `#2`, so that they fall in a replay.
pub fn random_schedule(
    rng: &mut SplitMix64,
    crashes: usize,
    space: &Space,
) -> heapless::Vec<CrashPoint, MAX_CRASHES> {
    let mut out = heapless::Vec::new();
    if space.events == 0 {
        return out;
    }
    let k = space.checkpoint_every.max(1);
    while out.len() < crashes.min(MAX_CRASHES) {
        let kinds = 3 + u64::from(space.word_writes > 0) + u64::from(space.erases > 0);
        let o = rng.range(0, space.events - 1);
        let at = match rng.range(0, kinds - 1) {
            0 => At::Deliver(o),
            1 => At::Effect(o),
            2 => {
                let batch_end = ((o / k + 1) * k - 1).min(space.events - 1);
                At::Commit(batch_end)
            }
            3 if space.word_writes > 0 => At::Torn(rng.range(1, space.word_writes)),
            _ => At::Erase(rng.range(1, space.erases.max(1))),
        };
        let offsetted = !matches!(at, At::Torn(_) | At::Erase(_));
        let occurrence = if offsetted && !out.is_empty() && rng.range(0, 2) == 0 {
            2
        } else {
            1
        };
        let point = CrashPoint { at, occurrence };
        if !out.contains(&point) {
            let _ = out.push(point);
        }
    }
    out.sort_unstable();
    out
}

/// Shrinks a failing schedule to a smallest one that still fails: fewest crashes first,
/// then each point as early as it can be. `fails` runs a candidate schedule.
pub fn shrink(
    schedule: &[CrashPoint],
    mut fails: impl FnMut(&[CrashPoint]) -> bool,
) -> heapless::Vec<CrashPoint, MAX_CRASHES> {
    let mut best: heapless::Vec<CrashPoint, MAX_CRASHES> =
        schedule.iter().copied().take(MAX_CRASHES).collect();
    // Fewest crashes: drop any point the failure does not need.
    let mut i = 0;
    while i < best.len() && best.len() > 1 {
        let mut without = best.clone();
        without.remove(i);
        if fails(&without) {
            best = without;
        } else {
            i += 1;
        }
    }
    // Earliest points: for each, the earliest of a few earlier candidates that still fails.
    for i in 0..best.len() {
        for _round in 0..16 {
            let p = best[i];
            let improved = earlier(p).into_iter().flatten().find(|c| {
                let mut trial = best.clone();
                trial[i] = *c;
                fails(&trial)
            });
            match improved {
                Some(c) => best[i] = c,
                None => break,
            }
        }
    }
    best
}

/// Earlier variants of a point, earliest first.
fn earlier(p: CrashPoint) -> [Option<CrashPoint>; 6] {
    let (n, make): (u64, fn(u64) -> At) = match p.at {
        At::Deliver(o) => (o, At::Deliver),
        At::Effect(o) => (o, At::Effect),
        At::Prepare(o) => (o, At::Prepare),
        At::Commit(o) => (o, At::Commit),
        At::Torn(w) => (w, At::Torn),
        At::Erase(e) => (e, At::Erase),
    };
    let min = if matches!(p.at, At::Torn(_) | At::Erase(_)) {
        1
    } else {
        0
    };
    let with = |m: u64| {
        (m < n && m >= min).then_some(CrashPoint {
            at: make(m),
            occurrence: p.occurrence,
        })
    };
    let first_occurrence = (p.occurrence > 1).then_some(CrashPoint {
        at: p.at,
        occurrence: 1,
    });
    [
        with(min),
        with(n / 4),
        with(n / 2),
        with(n - n / 4),
        with(n.saturating_sub(1)),
        first_occurrence,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::BitSet;
    use crate::scenario;
    use crate::sim::{SIM_LAYOUT, SimFlash};
    use crate::store::{Naive, OffsetStamped};

    type Applied = BitSet<4>;

    /// Single crash at every clean point of a 100-event ddia run; results by verdict.
    fn sweep<S: Store + Clone>(store: S) -> (u32, u32, u64) {
        let s = scenario::ddia(100, 10, None).unwrap();
        let mut clean = Run::new(SimFlash::new(), SIM_LAYOUT, &s, store, Applied::new()).unwrap();
        let mut snaps = std::vec::Vec::new();
        let mut points = std::vec::Vec::new();
        loop {
            if clean.is_idle() && snaps.len() as u64 == clean.next_offset() {
                let mut c = clean.clone();
                snaps.push(Snapshot {
                    logical: clean.logical(),
                    anomalies: c.finish_at(clean.next_offset()).anomalies,
                });
            }
            let mut last = None;
            let more = clean.step(&mut |t: &TraceStep| last = Some(*t)).unwrap();
            if let Some(p) = last.as_ref().and_then(point_of) {
                points.push((p, clean.clone()));
            }
            if !more {
                break;
            }
        }
        let end = clean.finish();
        let (mut exact, mut failing, mut dups) = (0, 0, 0);
        for (p, mut branch) in points {
            branch.crash(p, None, &mut Quiet).unwrap();
            let o = finish_branch(
                branch,
                |q| snaps.get(q as usize),
                (end.final_total, end.anomalies),
            )
            .unwrap();
            if o.fails() {
                failing += 1
            } else {
                exact += 1
            }
            dups += o.anomalies.duplicate;
        }
        (exact, failing, dups)
    }

    #[test]
    fn offset_store_survives_every_single_crash_naive_does_not() {
        // 100 deliveries, 100 effects, 10 commits: 210 points.
        assert_eq!(sweep(OffsetStamped), (210, 0, 0));
        let (exact, failing, dups) = sweep(Naive);
        assert_eq!(exact + failing, 210);
        // A crash right after a commit (10 points) or after delivering the first offset
        // of a batch (10 points) replays nothing. After delivering o, the o % 10 effects
        // of o's batch before it are replayed; after the effect of o, o % 10 + 1.
        assert_eq!(exact, 20);
        assert_eq!(dups, 10 * (0..10).sum::<u64>() + 10 * (1..=10).sum::<u64>());
    }

    #[test]
    fn shrinking_keeps_a_failure_with_fewer_and_earlier_points() {
        let fails = |s: &[CrashPoint]| s.iter().any(|p| matches!(p.at, At::Effect(o) if o >= 5));
        let big = [
            CrashPoint::new(At::Deliver(3)),
            CrashPoint::new(At::Effect(40)),
            CrashPoint::new(At::Effect(90)),
        ];
        let small = shrink(&big, fails);
        assert_eq!(&small[..], &[CrashPoint::new(At::Effect(5))]);
    }

    #[test]
    fn random_schedules_are_reproducible() {
        let space = Space {
            events: 100,
            checkpoint_every: 10,
            word_writes: 500,
            erases: 4,
        };
        let a = random_schedule(&mut SplitMix64::new(9), 3, &space);
        let b = random_schedule(&mut SplitMix64::new(9), 3, &space);
        assert_eq!(a, b);
        assert_eq!(a.len(), 3);
        for p in &a {
            if let At::Commit(o) = p.at {
                assert_eq!((o + 1) % 10, 0, "commit points are batch ends");
            }
        }
    }
}
