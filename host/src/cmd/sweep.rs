//! `idem sweep`: every crash point of a run, or seeded multi-crash schedules, for each
//! store; a result matrix, the anomalies the checker named, and for every failure a line
//! that reruns it (and a minimized one).
//!
//! The core decides what a crash point is, in what order the branches come, how a
//! branch ends and how a schedule shrinks (`idem_sim::sweep`); this command spreads
//! the branches over the cores (rayon) and reports.

use std::collections::HashSet;
use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use idem_core::log::Offset;
use idem_sim::check::{Anomalies, AppliedSet, CheckError, Verdict};
use idem_sim::crash::{At, CrashPoint, MAX_CRASHES};
use idem_sim::payment::Truth;
use idem_sim::rng::SplitMix64;
use idem_sim::run::{Run, SIM_LAYOUT, SimFlash};
use idem_sim::scenario::Scenario;
use idem_sim::sweep::{self, BranchOutcome, Branches, Snapshot, Space};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rayon::prelude::*;
use serde_json::{Value, json};

use crate::error::usage;
use crate::render::anomalies_json;
use crate::select::{self, FixArg, HostSinks, Job, ScenarioKind, SinkChoice, WorkloadArgs};

/// Branches handed to the cores at once.
const BATCH: usize = 1024;
/// Failing schedules listed per store.
const LISTED: usize = 3;

/// Crash a scenario at every point (or at seeded random schedules) for each store.
#[derive(Debug, Args)]
pub struct Cmd {
    /// The scenario.
    scenario: ScenarioKind,
    /// One store, or `all` (not for dual-write, which takes --fix).
    #[arg(long)]
    store: Option<String>,
    /// dual-write: how it writes its two views.
    #[arg(long, value_enum)]
    fix: Option<FixArg>,
    /// Crashes per schedule: 1 sweeps every point; 2 or 3 runs seeded random schedules.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=3))]
    crashes: u8,
    /// Also crash in the middle of every flash word write and page erase.
    #[arg(long)]
    torn_writes: bool,
    /// Random schedules per store (with --crashes 2 or 3).
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    schedules: u32,
    /// Seed of the random schedules.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[command(flatten)]
    workload: WorkloadArgs,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
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
struct Overlay {
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

/// What one store's sweep found.
#[derive(Debug, Default)]
struct Tally {
    store: &'static str,
    /// The flag that names the store (or the dual-write fix) in a rerun line.
    flag: String,
    idempotent: bool,
    schedules: u64,
    exact: u64,
    over: u64,
    under: u64,
    worst_over: Option<(u64, String)>,
    worst_under: Option<(u64, String)>,
    anomalies: Anomalies,
    examples: [Option<String>; 4],
    failing: u64,
    listed: Vec<String>,
    minimized: Option<(String, String)>,
    steps: u64,
    clean: Option<(i64, i64, Anomalies)>,
    worse: u64,
}

fn schedule_text(points: &[CrashPoint]) -> String {
    points
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

impl Tally {
    fn add(&mut self, o: &BranchOutcome) {
        let schedule = schedule_text(&o.fired);
        if let Some((total, _, a)) = &self.clean {
            let b = &o.anomalies;
            let same = (b.duplicate, b.lost_write, b.nonmonotonic, b.diverged)
                == (a.duplicate, a.lost_write, a.nonmonotonic, a.diverged);
            self.worse += u64::from(o.final_total != *total || !same);
        }
        self.schedules += 1;
        self.steps += o.steps;
        match o.verdict() {
            Verdict::Exact => self.exact += 1,
            Verdict::Over(d) => {
                self.over += 1;
                if self.worst_over.as_ref().is_none_or(|(w, _)| d > *w) {
                    self.worst_over = Some((d, schedule.clone()));
                }
            }
            Verdict::Under(d) => {
                self.under += 1;
                if self.worst_under.as_ref().is_none_or(|(w, _)| d > *w) {
                    self.worst_under = Some((d, schedule.clone()));
                }
            }
        }
        let a = &o.anomalies;
        for (i, n) in [a.duplicate, a.lost_write, a.nonmonotonic, a.diverged]
            .into_iter()
            .enumerate()
        {
            if n > 0 && self.examples[i].is_none() {
                self.examples[i] = Some(schedule.clone());
            }
        }
        self.anomalies.add(a);
        if o.fails() {
            self.failing += 1;
            if self.listed.len() < LISTED {
                self.listed.push(schedule);
            }
        }
    }
}

struct Options {
    crashes: u8,
    torn: bool,
    schedules: u32,
    seed: u64,
    bar: ProgressBar,
    visible_after: Instant,
    show: bool,
}

impl Options {
    fn tick(&self, n: u64) {
        self.bar.inc(n);
        if self.show && self.bar.is_hidden() && Instant::now() >= self.visible_after {
            self.bar.set_draw_target(ProgressDrawTarget::stderr());
        }
    }
}

struct Sweep<'a>(&'a Options, SinkChoice);

impl Job for Sweep<'_> {
    type Out = Tally;

    fn call<L: Truth + Sync, K: HostSinks>(
        self,
        s: &Scenario<L>,
        sinks: K,
    ) -> anyhow::Result<Tally> {
        let Sweep(opts, choice) = self;
        let n = s.log.len();
        let sim = |e: idem_sim::run::SimError| anyhow::anyhow!("the simulated device failed: {e}");

        // Pass 1: the clean run, its snapshot at every offset, its size, and the order in
        // which it applied messages.
        let recorder = Recorder {
            order: vec![u32::MAX; n as usize],
            count: 0,
        };
        let mut clean =
            Run::new(SimFlash::new(), SIM_LAYOUT, s, sinks.clone(), recorder).map_err(sim)?;
        let mut snaps: Vec<Snapshot<K>> = Vec::with_capacity(n as usize + 1);
        let pass = sweep::clean_pass(&mut clean, |snap| snaps.push(snap)).map_err(sim)?;
        let order = Arc::new(clean.applied().order.clone());
        let end = clean.finish();
        let fresh = || {
            let applied = Overlay {
                order: Arc::clone(&order),
                known: 0,
                extra: HashSet::new(),
            };
            Run::new(SimFlash::new(), SIM_LAYOUT, s, sinks.clone(), applied)
        };
        let clean_final = (end.final_total, end.anomalies);
        let snapshot = |q: Offset| snaps.get(q as usize);
        let mut tally = Tally {
            store: choice.name(),
            flag: choice.flag(),
            idempotent: K::IDEMPOTENT,
            steps: end.steps,
            clean: Some((end.final_total, end.true_total, end.anomalies)),
            ..Tally::default()
        };

        let finish = |b| sweep::finish_branch(b, snapshot, clean_final);
        let settle = |outcomes: Vec<BranchOutcome>, tally: &mut Tally| {
            outcomes.iter().for_each(|o| tally.add(o));
            opts.tick(outcomes.len() as u64);
        };
        if opts.crashes == 1 {
            let cuts = if opts.torn {
                pass.word_writes + pass.erases
            } else {
                0
            };
            let k = s.consumer.checkpoint_every;
            let replay = sweep::replay_steps(pass.points + cuts, k, n);
            if replay > sweep::MAX_REPLAY_STEPS {
                return Err(usage(format!(
                    "a sweep of {n} events with a checkpoint every {k} replays up to {k} events at each of its {} crash points: about {replay} simulated steps, over {} (some {} minutes here); sweep fewer --events or a smaller --checkpoint-every",
                    pass.points + cuts,
                    sweep::MAX_REPLAY_STEPS,
                    replay / 25_000_000 / 60
                )));
            }
            opts.bar.set_length(pass.points + cuts);
            // Pass 2: the clean run again, branching off at every point.
            let mut branches = Branches::new(fresh().map_err(sim)?, opts.torn);
            loop {
                let batch: Vec<_> = branches
                    .by_ref()
                    .take(BATCH)
                    .collect::<Result<_, _>>()
                    .map_err(sim)?;
                if batch.is_empty() {
                    break;
                }
                let outcomes = batch
                    .into_par_iter()
                    .map(finish)
                    .collect::<Result<_, _>>()
                    .map_err(sim)?;
                settle(outcomes, &mut tally);
            }
        } else {
            opts.bar.set_length(u64::from(opts.schedules));
            let space = Space {
                events: n,
                checkpoint_every: s.consumer.checkpoint_every,
                word_writes: if opts.torn { pass.word_writes } else { 0 },
                erases: if opts.torn { pass.erases } else { 0 },
            };
            let seeds: Vec<u64> = (0..u64::from(opts.schedules)).collect();
            for chunk in seeds.chunks(BATCH) {
                let outcomes = chunk
                    .par_iter()
                    .map(|&i| {
                        let mut rng =
                            SplitMix64::new(opts.seed ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15));
                        let plan =
                            sweep::random_schedule(&mut rng, usize::from(opts.crashes), &space);
                        let mut r = fresh()?;
                        r.set_plan(&plan)?;
                        finish(r)
                    })
                    .collect::<Result<_, _>>()
                    .map_err(sim)?;
                settle(outcomes, &mut tally);
            }
        }

        // Shrink the first failing schedule to a smallest one that still fails.
        if let Some(first) = tally.listed.first().cloned() {
            let mut points = [CrashPoint::new(At::Deliver(0)); MAX_CRASHES];
            let len = idem_sim::crash::parse_schedule(&first, &mut points).unwrap_or(0);
            let fails = |plan: &[CrashPoint]| {
                let Ok(mut r) = fresh() else { return false };
                r.set_plan(plan).is_ok() && finish(r).is_ok_and(|o| o.fails_as_planned())
            };
            let small = sweep::shrink(&points[..len], fails);
            tally.minimized = Some((first, schedule_text(&small)));
        }
        Ok(tally)
    }
}

impl Cmd {
    /// Runs the command.
    pub fn run(self) -> anyhow::Result<ExitCode> {
        let choices = select::choose_all(self.scenario, self.store.as_deref(), self.fix)?;
        let mut args = self.workload.scenario_args();
        args.fix = self.fix;
        let loaded = select::load(Some(self.scenario), &args)?;
        let show = !self.quiet && !self.json && std::io::stdout().is_terminal();
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden());
        bar.set_style(
            ProgressStyle::with_template(
                "{prefix:>10} [{bar:30}] {pos}/{len} schedules, {eta} left",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        let started = Instant::now();
        let mut opts = Options {
            crashes: self.crashes,
            torn: self.torn_writes,
            schedules: self.schedules,
            seed: self.seed,
            bar,
            visible_after: started + Duration::from_secs(1),
            show,
        };
        let mut tallies = Vec::new();
        for choice in &choices {
            opts.bar.reset();
            opts.bar.set_prefix(choice.name());
            tallies.push(select::dispatch(
                &loaded,
                *choice,
                self.workload.window,
                Sweep(&opts, *choice),
            )?);
        }
        opts.bar.finish_and_clear();
        let elapsed = started.elapsed();
        let rerun = self.rerun_prefix(&loaded);
        let bad = tallies.iter().any(|t| t.idempotent && t.failing > 0);
        let mut out = std::io::stdout().lock();
        if self.json {
            let v = json!({
                "scenario": loaded.name(),
                "events": loaded.events(),
                "checkpoint_every": loaded.consumer().checkpoint_every.get(),
                "crashes": self.crashes,
                "torn_writes": self.torn_writes,
                "seed": (self.crashes > 1).then_some(self.seed),
                "elapsed_ms": elapsed.as_millis() as u64,
                "stores": tallies.iter().map(|t| tally_json(t, &rerun)).collect::<Vec<_>>(),
            });
            writeln!(out, "{v}")?;
        } else {
            self.print(&mut out, &loaded, &tallies, &rerun, elapsed)?;
        }
        opts.show = false;
        Ok(if bad {
            ExitCode::from(1)
        } else {
            ExitCode::SUCCESS
        })
    }

    /// `idem run <scenario> [--events N] [--checkpoint-every K] [--window W]`.
    fn rerun_prefix(&self, loaded: &select::Loaded) -> String {
        let mut s = format!("idem run {}", loaded.name());
        for flag in self.workload.flags() {
            s += " ";
            s += &flag;
        }
        s
    }

    fn print(
        &self,
        out: &mut impl Write,
        loaded: &select::Loaded,
        tallies: &[Tally],
        rerun: &str,
        elapsed: Duration,
    ) -> anyhow::Result<()> {
        let what = match (self.crashes, self.torn_writes) {
            (1, false) => "one crash at every delivery, effect and commit".to_string(),
            (1, true) => {
                "one crash at every delivery, effect and commit, and in every flash write and erase"
                    .to_string()
            }
            (c, t) => format!(
                "{} random schedules of {c} crashes{} (seed {})",
                self.schedules,
                if t {
                    ", flash writes and erases included"
                } else {
                    ""
                },
                self.seed
            ),
        };
        writeln!(
            out,
            "idem sweep {}: {} events, checkpoint every {}; {what}",
            loaded.name(),
            loaded.events(),
            loaded.consumer().checkpoint_every
        )?;
        writeln!(out)?;
        writeln!(
            out,
            "{:<13} {:>9} {:>8} {:>7} {:>7} {:>7}  {:<11} {:<11}  anomalies",
            "store", "schedules", "exact", "over", "under", "failing", "worst over", "worst under"
        )?;
        for t in tallies {
            let worst = |w: &Option<(u64, String)>, sign: char| {
                w.as_ref().map_or("-".into(), |(d, _)| format!("{sign}{d}"))
            };
            writeln!(
                out,
                "{:<13} {:>9} {:>8} {:>7} {:>7} {:>7}  {:<11} {:<11}  {}",
                t.store,
                t.schedules,
                t.exact,
                t.over,
                t.under,
                t.failing,
                worst(&t.worst_over, '+'),
                worst(&t.worst_under, '-'),
                anomaly_text(&t.anomalies)
            )?;
        }
        for t in tallies.iter().filter(|t| t.failing > 0) {
            writeln!(out)?;
            let clean_fails = t
                .clean
                .is_some_and(|(total, truth, a)| total != truth || !a.is_empty());
            let why = match (t.idempotent, clean_fails) {
                (false, _) => "expected: the store is not idempotent",
                (true, true) => "not exact on this log, crash or no crash",
                (true, false) => "an idempotent store FAILED",
            };
            writeln!(
                out,
                "{}: {} failing schedules ({why}); rerun one:",
                t.store, t.failing
            )?;
            if let Some((total, truth, a)) = t
                .clean
                .filter(|(total, truth, a)| total != truth || !a.is_empty())
            {
                writeln!(
                    out,
                    "  even without a crash it ends at {total} (true total {truth}; {}): the log holds a duplicate it cannot see;\n  {} of the schedules end worse than that",
                    anomaly_text(&a),
                    t.worse
                )?;
            }
            for s in &t.listed {
                writeln!(out, "  {rerun} {} --schedule \"{s}\"", t.flag)?;
            }
            match &t.minimized {
                Some((from, to)) if from == to => writeln!(out, "  {from} is already minimal")?,
                Some((from, to)) => {
                    writeln!(out, "  minimized from {from}:")?;
                    writeln!(out, "  {rerun} {} --schedule \"{to}\"", t.flag)?;
                }
                None => {}
            }
            if let Some((d, s)) = &t.worst_over {
                writeln!(out, "  worst: {} at {s}", Verdict::Over(*d))?;
            }
        }
        let steps: u64 = tallies.iter().map(|t| t.steps).sum();
        writeln!(
            out,
            "\n{steps} simulated steps in {:.2} s ({:.1} M steps/s)",
            elapsed.as_secs_f64(),
            steps as f64 / elapsed.as_secs_f64().max(1e-9) / 1e6
        )?;
        Ok(())
    }
}

fn anomaly_text(a: &Anomalies) -> String {
    if a.is_empty() {
        return "none".into();
    }
    let mut parts = Vec::new();
    if a.duplicate > 0 {
        parts.push(format!(
            "duplicate {} (first: offset {})",
            a.duplicate,
            a.first_duplicate.unwrap_or(0)
        ));
    }
    if a.lost_write > 0 {
        parts.push(format!(
            "lost-write {} (first: offset {})",
            a.lost_write,
            a.first_lost.unwrap_or(0)
        ));
    }
    if a.nonmonotonic > 0 {
        parts.push(format!("nonmonotonic {}", a.nonmonotonic));
    }
    if a.diverged > 0 {
        parts.push(format!(
            "diverged {} (first: resumed at {})",
            a.diverged,
            a.first_diverged.unwrap_or(0)
        ));
    }
    parts.join(", ")
}

fn tally_json(t: &Tally, rerun: &str) -> Value {
    let worst =
        |w: &Option<(u64, String)>| w.as_ref().map(|(d, s)| json!({ "by": d, "schedule": s }));
    let line = |s: &str| format!("{rerun} {} --schedule \"{s}\"", t.flag);
    json!({
        "store": t.store,
        "idempotent": t.idempotent,
        "schedules": t.schedules,
        "exact": t.exact,
        "over": t.over,
        "under": t.under,
        "worst_over": worst(&t.worst_over),
        "worst_under": worst(&t.worst_under),
        "anomalies": anomalies_json(&t.anomalies),
        "examples": {
            "duplicate": t.examples[0],
            "lost-write": t.examples[1],
            "nonmonotonic": t.examples[2],
            "diverged": t.examples[3],
        },
        "failing": t.failing,
        "worse_than_clean": t.worse,
        "clean": t.clean.map(|(total, truth, _)| json!({ "final_total": total, "true_total": truth })),
        "rerun": t.listed.iter().map(|s| line(s)).collect::<Vec<_>>(),
        "minimized": t.minimized.as_ref().map(|(from, to)| json!({ "from": from, "to": to, "rerun": line(to) })),
        "steps": t.steps,
    })
}
