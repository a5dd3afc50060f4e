//! The sweep of one scenario with one store, from its clean run to its tally.
//!
//! [`sweep`] runs the clean pass, then either branches a crashed run off the clean run at
//! every crash point (one crash a schedule) or runs seeded random schedules of two or
//! three crashes, tallies every branch's outcome (exact, over, under, the worst of each,
//! the anomalies and a schedule that shows each), and shrinks the first failing schedule
//! to a smallest one that still fails. Branches go out in batches of [`BATCH`] through a
//! [`Spread`], which runs them on one core ([`OneCore`]) or on as many as the caller has;
//! a [`Progress`] hears how many schedules there are and how many have ended.
//!
//! It needs the `std` feature (a sweep keeps the clean run's snapshot at every offset).

use std::collections::HashSet;
use std::sync::Arc;

use idem_core::consumer::CheckpointEvery;
use idem_core::log::Offset;

use super::{BranchOutcome, Branches, Snapshot, Space};
use crate::check::{Anomalies, AppliedSet, CheckError, Verdict};
use crate::rng::SplitMix64;
use crate::run::{Run, SIM_LAYOUT, SimError, SimFlash};
use crate::scenario::Scenario;
use idem_payments::crash::{CrashPoint, MAX_CRASHES};
use idem_payments::{SumSinks, Truth};

/// Branches handed to a [`Spread`] at once.
pub const BATCH: usize = 1024;
/// Failing schedules a [`Tally`] keeps ([`Tally::listed`]).
pub const LISTED: usize = 3;

/// A crash schedule: the crash points of one branch, in order.
pub type Schedule = heapless::Vec<CrashPoint, MAX_CRASHES>;

/// What a sweep tries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// Crashes per schedule: 1 sweeps every crash point; 2 or 3 runs seeded random
    /// schedules.
    pub crashes: u8,
    /// Also crash in the middle of every flash word write and page erase.
    pub torn_writes: bool,
    /// Random schedules (with 2 or 3 crashes).
    pub schedules: u32,
    /// The seed of the random schedules.
    pub seed: u64,
}

/// Runs a batch of independent jobs, on one core or on many, and returns their results
/// in the order of the jobs (or the first error).
pub trait Spread {
    /// Runs `job` on each item.
    fn map<T: Send, R: Send>(
        &self,
        items: Vec<T>,
        job: &(dyn Fn(T) -> Result<R, SimError> + Sync),
    ) -> Result<Vec<R>, SimError>;
}

/// Runs every job on the calling thread, one after the other.
#[derive(Debug, Clone, Copy, Default)]
pub struct OneCore;

impl Spread for OneCore {
    fn map<T: Send, R: Send>(
        &self,
        items: Vec<T>,
        job: &(dyn Fn(T) -> Result<R, SimError> + Sync),
    ) -> Result<Vec<R>, SimError> {
        items.into_iter().map(job).collect()
    }
}

/// Hears how far a sweep has come.
pub trait Progress {
    /// The sweep will run `schedules` schedules.
    fn start(&mut self, schedules: u64);
    /// `n` more schedules ended.
    fn advance(&mut self, n: u64);
}

/// Hears nothing.
impl Progress for () {
    fn start(&mut self, _: u64) {}
    fn advance(&mut self, _: u64) {}
}

/// Why a sweep did not run to its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SweepError {
    /// The simulated device failed.
    Sim(SimError),
    /// A single-crash sweep would replay more than [`super::MAX_REPLAY_STEPS`] steps.
    TooLong {
        /// Events in the log.
        events: u64,
        /// The checkpoint interval.
        checkpoint_every: CheckpointEvery,
        /// The crash points (and torn-write cuts) the sweep would branch at.
        points: u64,
        /// About how many steps it would replay ([`super::replay_steps`]).
        replay: u64,
    },
}

impl From<SimError> for SweepError {
    fn from(e: SimError) -> Self {
        Self::Sim(e)
    }
}

/// The clean run's end.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Clean {
    /// Its final total.
    pub final_total: i64,
    /// The true total.
    pub true_total: i64,
    /// What the checker found in it.
    pub anomalies: Anomalies,
}

impl Clean {
    /// Whether the clean run already fails: a total off the truth or an anomaly.
    pub fn fails(&self) -> bool {
        self.final_total != self.true_total || !self.anomalies.is_empty()
    }
}

/// What one store's sweep found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tally {
    /// Whether the store promises an exact total under replay.
    pub idempotent: bool,
    /// What the clean pass measured.
    pub pass: super::CleanPass,
    /// Schedules run.
    pub schedules: u64,
    /// Schedules that ended exact.
    pub exact: u64,
    /// Schedules that ended over the true total.
    pub over: u64,
    /// Schedules that ended under the true total.
    pub under: u64,
    /// The most over, and the first schedule that ended that far over.
    pub worst_over: Option<(u64, Schedule)>,
    /// The most under, and the first schedule that ended that far under.
    pub worst_under: Option<(u64, Schedule)>,
    /// The anomalies of every schedule, summed.
    pub anomalies: Anomalies,
    /// The first schedule that showed each anomaly: duplicate, lost write, nonmonotonic,
    /// diverged.
    pub examples: [Option<Schedule>; 4],
    /// Schedules that failed ([`BranchOutcome::fails`]).
    pub failing: u64,
    /// The first [`LISTED`] failing schedules.
    pub listed: Vec<Schedule>,
    /// The first failing schedule and a smallest one that still fails.
    pub minimized: Option<(Schedule, Schedule)>,
    /// Simulated steps: the clean run's and every branch's.
    pub steps: u64,
    /// The clean run's end.
    pub clean: Clean,
    /// Schedules that ended otherwise than the clean run (another total or other
    /// anomalies).
    pub worse: u64,
}

impl Tally {
    /// Counts one branch's outcome.
    pub fn add(&mut self, o: &BranchOutcome) {
        let (a, b) = (&self.clean.anomalies, &o.anomalies);
        let same = (b.duplicate, b.lost_write, b.nonmonotonic, b.diverged)
            == (a.duplicate, a.lost_write, a.nonmonotonic, a.diverged);
        self.worse += u64::from(o.final_total != self.clean.final_total || !same);
        self.schedules += 1;
        self.steps += o.steps;
        let worst = match o.verdict() {
            Verdict::Exact => {
                self.exact += 1;
                None
            }
            Verdict::Over(d) => {
                self.over += 1;
                Some((d, &mut self.worst_over))
            }
            Verdict::Under(d) => {
                self.under += 1;
                Some((d, &mut self.worst_under))
            }
        };
        if let Some((d, w)) = worst
            && w.as_ref().is_none_or(|(by, _)| d > *by)
        {
            *w = Some((d, o.fired.clone()));
        }
        for (i, n) in [b.duplicate, b.lost_write, b.nonmonotonic, b.diverged]
            .into_iter()
            .enumerate()
        {
            if n > 0 && self.examples[i].is_none() {
                self.examples[i] = Some(o.fired.clone());
            }
        }
        self.anomalies.add(b);
        if o.fails() {
            self.failing += 1;
            if self.listed.len() < LISTED {
                self.listed.push(o.fired.clone());
            }
        }
    }
}

/// Sweeps `scenario` with `sinks` on a fresh [`SimFlash`] and [`SIM_LAYOUT`]: the clean
/// run, then every single-crash branch of it or `options.schedules` seeded random
/// schedules, each branch ended where it rejoins the clean run, and the first failing
/// schedule shrunk. `spread` runs the branches; `progress` hears how many ended.
pub fn sweep<'l, K, L>(
    scenario: &'l Scenario<L>,
    sinks: K,
    options: &Options,
    spread: &impl Spread,
    progress: &mut impl Progress,
) -> Result<Tally, SweepError>
where
    K: SumSinks + Sync,
    L: Truth + Sync,
    Snapshot<K>: Sync,
    Branch<'l, K, L>: Send,
{
    let (base, mut tally) = Base::clean(scenario, sinks)?;
    if options.crashes == 1 {
        base.every_point(&mut tally, options.torn_writes, spread, progress)?;
    } else {
        base.random(&mut tally, options, spread, progress)?;
    }
    base.minimize(&mut tally);
    Ok(tally)
}

/// What the clean run leaves the branches: each branch starts as a fresh run and ends
/// where it rejoins the clean run's snapshots.
struct Base<'l, K: SumSinks, L> {
    scenario: &'l Scenario<L>,
    sinks: K,
    /// The clean run's snapshot at every offset.
    snaps: Vec<Snapshot<K>>,
    /// The order in which the clean run applied messages.
    order: Arc<Vec<u32>>,
    /// The clean run's final total and anomalies.
    clean_final: (i64, Anomalies),
}

impl<'l, K, L> Base<'l, K, L>
where
    K: SumSinks + Sync,
    L: Truth + Sync,
    Snapshot<K>: Sync,
    Branch<'l, K, L>: Send,
{
    /// Pass 1: the clean run, its snapshot at every offset, its size, and the order in
    /// which it applied messages; the tally starts from its end.
    fn clean(scenario: &'l Scenario<L>, sinks: K) -> Result<(Self, Tally), SimError> {
        let n = scenario.log.len();
        let recorder = Recorder {
            order: vec![u32::MAX; n as usize],
            count: 0,
        };
        let mut clean = Run::new(
            SimFlash::new(),
            SIM_LAYOUT,
            scenario,
            sinks.clone(),
            recorder,
        )?;
        let mut snaps: Vec<Snapshot<K>> = Vec::with_capacity(n as usize + 1);
        let pass = super::clean_pass(&mut clean, |snap| snaps.push(snap))?;
        let order = Arc::new(clean.applied().order.clone());
        let end = clean.finish();
        let tally = Tally {
            idempotent: K::IDEMPOTENT,
            pass,
            steps: end.steps,
            clean: Clean {
                final_total: end.final_total,
                true_total: end.true_total,
                anomalies: end.anomalies,
            },
            ..Tally::default()
        };
        let base = Self {
            scenario,
            sinks,
            snaps,
            order,
            clean_final: (end.final_total, end.anomalies),
        };
        Ok((base, tally))
    }

    /// A run from the start, with nothing applied yet.
    fn fresh(&self) -> Result<Branch<'l, K, L>, SimError> {
        let applied = Overlay {
            order: Arc::clone(&self.order),
            known: 0,
            extra: HashSet::new(),
        };
        Run::new(
            SimFlash::new(),
            SIM_LAYOUT,
            self.scenario,
            self.sinks.clone(),
            applied,
        )
    }

    /// Runs a branch until it rejoins the clean run, or to its end.
    fn finish(&self, b: Branch<'l, K, L>) -> Result<BranchOutcome, SimError> {
        super::finish_branch(b, |q: Offset| self.snaps.get(q as usize), self.clean_final)
    }

    /// Pass 2 with one crash a schedule: the clean run again, branching off at every
    /// point (and, with `torn`, in every word write and erase).
    fn every_point(
        &self,
        tally: &mut Tally,
        torn: bool,
        spread: &impl Spread,
        progress: &mut impl Progress,
    ) -> Result<(), SweepError> {
        let (n, pass) = (self.scenario.log.len(), tally.pass);
        let points = pass.points
            + if torn {
                pass.word_writes + pass.erases
            } else {
                0
            };
        let k = self.scenario.consumer.checkpoint_every;
        let replay = super::replay_steps(points, k, n);
        if replay > super::MAX_REPLAY_STEPS {
            return Err(SweepError::TooLong {
                events: n,
                checkpoint_every: k,
                points,
                replay,
            });
        }
        progress.start(points);
        let mut branches = Branches::new(self.fresh()?, torn);
        loop {
            let batch: Vec<_> = branches.by_ref().take(BATCH).collect::<Result<_, _>>()?;
            if batch.is_empty() {
                return Ok(());
            }
            settle(tally, progress, &spread.map(batch, &|b| self.finish(b))?);
        }
    }

    /// Pass 2 with two or three crashes a schedule: `options.schedules` seeded random
    /// schedules.
    fn random(
        &self,
        tally: &mut Tally,
        options: &Options,
        spread: &impl Spread,
        progress: &mut impl Progress,
    ) -> Result<(), SweepError> {
        progress.start(u64::from(options.schedules));
        let (torn, pass) = (options.torn_writes, tally.pass);
        let space = Space {
            events: self.scenario.log.len(),
            checkpoint_every: self.scenario.consumer.checkpoint_every,
            word_writes: if torn { pass.word_writes } else { 0 },
            erases: if torn { pass.erases } else { 0 },
        };
        let run_one = |i: u64| {
            let mut rng = SplitMix64::new(options.seed ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15));
            let plan = super::random_schedule(&mut rng, usize::from(options.crashes), &space);
            let mut r = self.fresh()?;
            r.set_plan(&plan)?;
            self.finish(r)
        };
        let seeds: Vec<u64> = (0..u64::from(options.schedules)).collect();
        for chunk in seeds.chunks(BATCH) {
            settle(tally, progress, &spread.map(chunk.to_vec(), &run_one)?);
        }
        Ok(())
    }

    /// Shrinks the first failing schedule to a smallest one that still fails.
    fn minimize(&self, tally: &mut Tally) {
        if let Some(first) = tally.listed.first().cloned() {
            let fails = |plan: &[CrashPoint]| {
                let Ok(mut r) = self.fresh() else {
                    return false;
                };
                r.set_plan(plan).is_ok() && self.finish(r).is_ok_and(|o| o.fails_as_planned())
            };
            let small = super::shrink(&first, fails);
            tally.minimized = Some((first, small));
        }
    }
}

/// A branch of a sweep: a run on the simulator's flash with an [`Overlay`].
type Branch<'l, K, L> = Run<'l, K, L, Overlay, 8, 1024>;

/// Counts a batch of outcomes.
fn settle(tally: &mut Tally, progress: &mut impl Progress, outcomes: &[BranchOutcome]) {
    outcomes.iter().for_each(|o| tally.add(o));
    progress.advance(outcomes.len() as u64);
}

/// Pass 1's applied set: remembers the order in which the clean run applied messages.
#[derive(Debug, Clone)]
struct Recorder {
    order: Vec<u32>,
    count: u32,
}

impl AppliedSet for Recorder {
    fn insert(&mut self, offset: Offset) -> Result<bool, CheckError> {
        let capacity = self.order.len() as u64;
        let slot = self
            .order
            .get_mut(offset as usize)
            .ok_or(CheckError::Capacity { capacity })?;
        if *slot != u32::MAX {
            return Ok(false);
        }
        *slot = self.count;
        self.count += 1;
        Ok(true)
    }

    fn contains(&self, offset: Offset) -> bool {
        self.order
            .get(offset as usize)
            .is_some_and(|&o| o != u32::MAX)
    }
}

/// Pass 2's applied set: the clean run's first `known` messages (in clean order), plus
/// what a branch applied out of that order. Cloning it into a branch costs O(1), not
/// O(events), which keeps a sweep linear.
#[derive(Debug, Clone)]
pub struct Overlay {
    order: Arc<Vec<u32>>,
    known: u32,
    extra: HashSet<Offset>,
}

impl AppliedSet for Overlay {
    fn insert(&mut self, offset: Offset) -> Result<bool, CheckError> {
        if self.contains(offset) {
            return Ok(false);
        }
        let capacity = self.order.len() as u64;
        let rank = *self
            .order
            .get(offset as usize)
            .ok_or(CheckError::Capacity { capacity })?;
        if rank == self.known {
            self.known += 1;
        } else {
            self.extra.insert(offset);
        }
        Ok(true)
    }

    fn contains(&self, offset: Offset) -> bool {
        self.order
            .get(offset as usize)
            .is_some_and(|&r| r < self.known)
            || self.extra.contains(&offset)
    }
}
