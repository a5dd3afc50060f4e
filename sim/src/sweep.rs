//! Crash sweeps: what a sweep tries, in what order, and how a branch ends.
//!
//! A sweep runs a scenario once without a crash ([`clean_pass`]), remembering the clean
//! run's [`Snapshot`] at every offset, then walks the clean run again ([`Branches`]),
//! branching a crashed run off it at every crash point (and, with torn writes, in the
//! middle of every flash word write and erase). A branch stops as soon as it rejoins the
//! clean run ([`finish_branch`]): idle in the same logical state at the same offset, or in
//! the same state but for a total that stays a constant apart (a naive store after its
//! replay). From there on its outcome is the clean outcome (shifted by that constant)
//! plus what the branch found before. Random multi-crash schedules come from a seed
//! ([`random_schedule`]); a failing one is shrunk to a smallest one that still fails
//! ([`shrink`]).
//!
//! With the `std` feature, `sweep()` puts these together for one store:
//! it runs every branch (or seeded schedule) through a caller's spread over cores, tallies
//! the outcomes and shrinks the first failure. Printing is the caller's.

use crate::check::{Anomalies, AppliedSet, Verdict};
use crate::rng::SplitMix64;
use crate::run::{Action, Logical, Quiet, Run, SimError, TraceStep};
use idem_core::consumer::CheckpointEvery;
use idem_core::log::Offset;
use idem_payments::crash::{At, CrashPoint, MAX_CRASHES};
use idem_payments::{SumSinks, Truth};

#[cfg(any(test, feature = "std"))]
mod driver;
#[cfg(any(test, feature = "std"))]
pub use driver::{
    BATCH, Clean, LISTED, OneCore, Options, Overlay, Progress, Schedule, Spread, SweepError, Tally,
    sweep,
};

/// The clean run as it stood, idle, before reading one offset.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot<K: SumSinks> {
    /// The logical state there.
    pub logical: Logical<K>,
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

    /// Whether this outcome fails where it matters: the run's crashes all happened.
    pub fn fails_as_planned(&self) -> bool {
        self.fails() && self.unfired == 0
    }
}

/// The crash point a clean-run step offers (a clean run delivers each offset once).
pub fn point_of(step: &TraceStep) -> Option<CrashPoint> {
    let at = match (step.action, step.offset) {
        (Action::Deliver { .. }, Some(o)) => At::Deliver(o),
        (Action::Between, Some(o)) => At::Between(o),
        (Action::Apply | Action::Skip, Some(o)) => At::Effect(o),
        (Action::Prepare, Some(o)) => At::Prepare(o),
        (Action::Commit, Some(o)) => At::Commit(o),
        _ => return None,
    };
    Some(CrashPoint::new(at))
}

/// What the clean pass measured.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CleanPass {
    /// Crash points the clean run offers (one per delivery, write, prepare and commit).
    pub points: u64,
    /// Flash word writes of the clean run.
    pub word_writes: u64,
    /// Flash page erases of the clean run.
    pub erases: u64,
}

/// Runs `clean` (a run without a crash) to its end, handing `snapshot` the clean run's
/// [`Snapshot`] at each offset in order (offset 0, 1, ...), and counts what a sweep of it
/// will try. The run stays finished but unjudged: call [`Run::finish`] for its report.
pub fn clean_pass<K: SumSinks, L: Truth, A: AppliedSet, const P: usize, const PS: usize>(
    clean: &mut Run<'_, K, L, A, P, PS>,
    mut snapshot: impl FnMut(Snapshot<K>),
) -> Result<CleanPass, SimError> {
    let (mut taken, mut points) = (0u64, 0u64);
    loop {
        if clean.is_idle() && taken == clean.next_offset() {
            let p = clean.next_offset();
            snapshot(Snapshot {
                logical: clean.logical(),
                anomalies: clean.finish_at(p).anomalies,
            });
            taken += 1;
        }
        let mut last = None;
        let more = clean.step(&mut |t: &TraceStep| last = Some(*t))?;
        points += u64::from(last.as_ref().and_then(point_of).is_some());
        if !more {
            break;
        }
    }
    let (word_writes, erases) = clean.flash_ops();
    Ok(CleanPass {
        points,
        word_writes,
        erases,
    })
}

/// The most simulated steps a single-crash sweep may need ([`replay_steps`]): about two
/// minutes on two cores at the simulator's 25 million steps a second.
pub const MAX_REPLAY_STEPS: u64 = 3_000_000_000;

/// About how many steps the branches of a single-crash sweep replay: each of its
/// `branches` crash points, on average halfway through a batch of `k` events, replays
/// that half before it can rejoin the clean run. So a sweep grows with the events times
/// the checkpoint interval, not with the events alone; a state that rejoins at once (a
/// naive total, which only shifts) replays less.
pub fn replay_steps(branches: u64, k: CheckpointEvery, events: u64) -> u64 {
    branches.saturating_mul(k.get().min(events.max(1)).div_ceil(2))
}

/// Every single-crash branch of a clean run, in the order the clean run reaches them:
/// at each step, the crash right after it (if the step is a crash point), then, with
/// torn writes, a power cut in the middle of each word write and erase the step made.
/// Each branch has crashed (or is armed to) and is ready for [`finish_branch`].
#[derive(Debug)]
pub struct Branches<'l, K: SumSinks, L, A, const P: usize, const PS: usize> {
    clean: Run<'l, K, L, A, P, PS>,
    torn: bool,
    /// The branch at the crash point of the step just taken.
    at_point: Option<Run<'l, K, L, A, P, PS>>,
    /// The clean run before the step just taken, and the cuts of that step still to try.
    before: Option<Run<'l, K, L, A, P, PS>>,
    writes: core::ops::Range<u64>,
    erases: core::ops::Range<u64>,
    done: bool,
}

impl<'l, K: SumSinks, L: Truth, A: AppliedSet, const P: usize, const PS: usize>
    Branches<'l, K, L, A, P, PS>
{
    /// The branches of `clean`, a run not started yet; `torn` adds the flash-level cuts.
    pub fn new(clean: Run<'l, K, L, A, P, PS>, torn: bool) -> Self {
        Self {
            clean,
            torn,
            at_point: None,
            before: None,
            writes: 0..0,
            erases: 0..0,
            done: false,
        }
    }

    /// Takes one clean step and lines up its branches.
    fn advance(&mut self) -> Result<(), SimError> {
        let clean = &mut self.clean;
        if clean.is_idle() {
            // Judge lost writes as the clean run goes, so a branch inherits a settled
            // prefix instead of judging it again.
            clean.finish_at(clean.next_offset());
        }
        let before = self.torn.then(|| clean.clone());
        let (w0, e0) = clean.flash_ops();
        let mut last = None;
        let more = clean.step(&mut |t: &TraceStep| last = Some(*t))?;
        if let Some((point, step)) = last.as_ref().and_then(|t| point_of(t).map(|p| (p, t))) {
            let mut b = clean.clone();
            b.crash(point, step.offset, &mut Quiet)?;
            self.at_point = Some(b);
        }
        if let Some(before) = before {
            let (w1, e1) = clean.flash_ops();
            self.writes = w0 + 1..w1 + 1;
            self.erases = e0 + 1..e1 + 1;
            self.before = Some(before);
        }
        self.done = !more;
        Ok(())
    }

    fn cut(&mut self) -> Option<Result<Run<'l, K, L, A, P, PS>, SimError>> {
        let at = self
            .writes
            .next()
            .map(At::Torn)
            .or_else(|| self.erases.next().map(At::Erase))?;
        let mut b = self.before.as_ref()?.clone();
        Some(b.set_plan(&[CrashPoint::new(at)]).map(|()| b))
    }
}

impl<'l, K: SumSinks, L: Truth, A: AppliedSet, const P: usize, const PS: usize> Iterator
    for Branches<'l, K, L, A, P, PS>
{
    type Item = Result<Run<'l, K, L, A, P, PS>, SimError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(b) = self.at_point.take() {
                return Some(Ok(b));
            }
            if let Some(b) = self.cut() {
                return Some(b);
            }
            self.before = None;
            if self.done {
                return None;
            }
            if let Err(e) = self.advance() {
                self.done = true;
                return Some(Err(e));
            }
        }
    }
}

/// Runs `branch` until it rejoins the clean run or ends. `snapshots(p)` is the clean
/// run at offset `p`; `clean_final` is the clean run's final total and anomalies.
pub fn finish_branch<'l, 's, K, L, A, const P: usize, const PS: usize>(
    mut branch: Run<'l, K, L, A, P, PS>,
    snapshots: impl Fn(Offset) -> Option<&'s Snapshot<K>>,
    clean_final: (i64, Anomalies),
) -> Result<BranchOutcome, SimError>
where
    K: SumSinks + 's,
    L: Truth,
    A: AppliedSet,
{
    let start = branch.report().steps;
    loop {
        if branch.plan_done() && branch.is_idle() {
            let p = branch.next_offset();
            if let Some((snap, shift)) =
                snapshots(p).and_then(|s| branch.rejoins(&s.logical).map(|d| (s, d)))
            {
                let fired = branch.fired_points();
                let r = branch.finish_at(p);
                let mut anomalies = r.anomalies;
                anomalies.add(&clean_final.1.since(&snap.anomalies));
                return Ok(BranchOutcome {
                    final_total: clean_final.0 + shift,
                    true_total: r.true_total,
                    anomalies,
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

/// What a random schedule may pick from: the clean run's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Space {
    /// Events in the log.
    pub events: u64,
    /// The checkpoint interval (commit points are batch ends).
    pub checkpoint_every: CheckpointEvery,
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
    while out.len() < crashes.min(MAX_CRASHES) {
        let kinds = 3 + u64::from(space.word_writes > 0) + u64::from(space.erases > 0);
        let o = rng.range(0, space.events - 1);
        let at = match rng.range(0, kinds - 1) {
            0 => At::Deliver(o),
            1 => At::Effect(o),
            2 => At::Commit(space.checkpoint_every.batch_end(o, space.events) - 1),
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
        At::Between(o) => (o, At::Between),
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
    use crate::run::{SIM_LAYOUT, SimFlash};
    use crate::scenario;
    use idem_payments::stores::{Naive, OffsetStamped};

    type Applied = BitSet<4>;

    /// Single crash at every clean point of a 100-event ddia run; results by verdict.
    fn sweep<S: idem_payments::Sum + Sync>(store: S) -> (u64, u64, u64)
    where
        Snapshot<S>: Sync,
        for<'l> Run<'l, S, idem_payments::GeneratedLog, Overlay, 8, 1024>: Send,
    {
        let k = idem_core::consumer::CheckpointEvery::new(10).unwrap();
        let s = scenario::ddia(100, k, None).unwrap();
        let options = Options {
            crashes: 1,
            torn_writes: false,
            schedules: 0,
            seed: 0,
        };
        let t = super::sweep(&s, store, &options, &OneCore, &mut ()).unwrap();
        let (exact, failing, dups) = (t.schedules - t.failing, t.failing, t.anomalies.duplicate);
        let (branches, pass) = (t.schedules, t.pass);
        assert_eq!(branches, pass.points);
        (exact, failing, dups)
    }

    #[test]
    fn the_replay_estimate_grows_with_the_interval() {
        let k = |n| CheckpointEvery::new(n).unwrap();
        assert_eq!(replay_steps(300, k(10), 100), 1_500);
        assert_eq!(replay_steps(60_000, k(20_000), 20_000), 600_000_000);
        // An interval past the log replays at most the log.
        assert_eq!(replay_steps(300, k(1_000_000), 100), 15_000);
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
    fn a_branch_that_rejoins_shifted_ends_as_if_it_had_run_to_the_end() {
        let k = idem_core::consumer::CheckpointEvery::new(7).unwrap();
        let s = scenario::ddia(60, k, None).unwrap();
        let fresh = || Run::new(SimFlash::new(), SIM_LAYOUT, &s, Naive, Applied::new());
        let mut clean = fresh().unwrap();
        let mut snaps = std::vec::Vec::new();
        clean_pass(&mut clean, |snap| snaps.push(snap)).unwrap();
        let end = clean.finish();
        let clean_final = (end.final_total, end.anomalies);
        let (mut shifted, mut over) = (0, 0);
        for branch in Branches::new(fresh().unwrap(), true) {
            let branch = branch.unwrap();
            let full = finish_branch(branch.clone(), |_| None, clean_final).unwrap();
            let short = finish_branch(branch, |q| snaps.get(q as usize), clean_final).unwrap();
            assert_eq!(
                (short.final_total, short.anomalies, &short.fired),
                (full.final_total, full.anomalies, &full.fired)
            );
            assert!(short.steps <= full.steps);
            shifted += u64::from(short.converged_at.is_some() && short.final_total != 60);
            over += u64::from(full.final_total > 60);
        }
        assert!(shifted > 0 && shifted == over, "{shifted} of {over}");
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
            checkpoint_every: idem_core::consumer::CheckpointEvery::new(10).unwrap(),
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
