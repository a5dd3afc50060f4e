//! `idem sweep`: every crash point of a run, or seeded multi-crash schedules, for each
//! store; a result matrix, the anomalies the checker named, and for every failure a line
//! that reruns it (and a minimized one).
//!
//! The simulator sweeps (`idem_sim::sweep::sweep`: what a crash point is, in what order
//! the branches come, how a branch ends, the tally and how a schedule shrinks); this
//! command spreads the branches over the cores (rayon) and reports.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args;
use idem_payments::Truth;
use idem_payments::crash::CrashPoint;
use idem_sim::check::{Anomalies, Verdict};
use idem_sim::run::SimError;
use idem_sim::scenario::Scenario;
use idem_sim::sweep::{self, Options, Progress, Schedule, Spread, SweepError, Tally};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rayon::prelude::*;
use serde_json::{Value, json};

use idem_lab::error::usage;
use idem_lab::report::anomalies_json;
use idem_lab::select::{self, FixArg, HostSinks, Job, ScenarioKind, SinkChoice, WorkloadArgs};

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

fn schedule_text(points: &[CrashPoint]) -> String {
    points
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// Spreads a sweep's branches over the cores.
struct Cores;

impl Spread for Cores {
    fn map<T: Send, R: Send>(
        &self,
        items: Vec<T>,
        job: &(dyn Fn(T) -> Result<R, SimError> + Sync),
    ) -> Result<Vec<R>, SimError> {
        items.into_par_iter().map(job).collect()
    }
}

/// The progress bar, drawn once a sweep has run a second (on a terminal only).
#[derive(Clone)]
struct Bar {
    bar: ProgressBar,
    visible_after: Instant,
    show: bool,
}

impl Bar {
    fn new(show: bool, started: Instant) -> Self {
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden());
        bar.set_style(
            ProgressStyle::with_template(
                "{prefix:>10} [{bar:30}] {pos}/{len} schedules, {eta} left",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        Self {
            bar,
            visible_after: started + Duration::from_secs(1),
            show,
        }
    }
}

impl Progress for Bar {
    fn start(&mut self, schedules: u64) {
        self.bar.set_length(schedules);
    }

    fn advance(&mut self, n: u64) {
        self.bar.inc(n);
        if self.show && self.bar.is_hidden() && Instant::now() >= self.visible_after {
            self.bar.set_draw_target(ProgressDrawTarget::stderr());
        }
    }
}

/// One store's sweep.
struct Sweep<'a>(&'a Options, Bar);

impl Job for Sweep<'_> {
    type Out = Tally;

    fn call<L: Truth + Sync, K: HostSinks>(
        self,
        s: &Scenario<L>,
        sinks: K,
    ) -> anyhow::Result<Tally> {
        let Sweep(options, mut bar) = self;
        sweep::sweep(s, sinks, options, &Cores, &mut bar).map_err(|e| match e {
            SweepError::Sim(e) => anyhow::anyhow!("the simulated device failed: {e}"),
            SweepError::TooLong {
                events: n,
                checkpoint_every: k,
                points,
                replay,
            } => usage(format!(
                "a sweep of {n} events with a checkpoint every {k} replays up to {k} events at each of its {points} crash points: about {replay} simulated steps, over {} (some {} minutes here); sweep fewer --events or a smaller --checkpoint-every",
                sweep::MAX_REPLAY_STEPS,
                replay / 25_000_000 / 60
            )),
        })
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
        let started = Instant::now();
        let bar = Bar::new(show, started);
        let options = Options {
            crashes: self.crashes,
            torn_writes: self.torn_writes,
            schedules: self.schedules,
            seed: self.seed,
        };
        let mut tallies = Vec::new();
        for choice in &choices {
            bar.bar.reset();
            bar.bar.set_prefix(choice.name());
            let job = Sweep(&options, bar.clone());
            let tally = select::dispatch(&loaded, *choice, self.workload.window, job)?;
            tallies.push((*choice, tally));
        }
        bar.bar.finish_and_clear();
        let elapsed = started.elapsed();
        let rerun = self.rerun_prefix(&loaded);
        let bad = tallies.iter().any(|(_, t)| t.idempotent && t.failing > 0);
        let mut out = std::io::stdout().lock();
        if self.json {
            writeln!(out, "{}", self.json(&loaded, &tallies, &rerun, elapsed))?;
        } else {
            self.print(&mut out, &loaded, &tallies, &rerun, elapsed)?;
        }
        Ok(if bad {
            ExitCode::from(1)
        } else {
            ExitCode::SUCCESS
        })
    }

    /// The JSON object of `--json`.
    fn json(
        &self,
        loaded: &select::Loaded,
        tallies: &[(SinkChoice, Tally)],
        rerun: &str,
        elapsed: Duration,
    ) -> Value {
        json!({
            "scenario": loaded.name(),
            "events": loaded.events(),
            "checkpoint_every": loaded.consumer().checkpoint_every.get(),
            "crashes": self.crashes,
            "torn_writes": self.torn_writes,
            "seed": (self.crashes > 1).then_some(self.seed),
            "elapsed_ms": elapsed.as_millis() as u64,
            "stores": tallies.iter().map(|(c, t)| tally_json(*c, t, rerun)).collect::<Vec<_>>(),
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

    /// The text report: what was swept, the matrix, each failing store's rerun lines,
    /// and the speed.
    fn print(
        &self,
        out: &mut impl Write,
        loaded: &select::Loaded,
        tallies: &[(SinkChoice, Tally)],
        rerun: &str,
        elapsed: Duration,
    ) -> anyhow::Result<()> {
        writeln!(
            out,
            "idem sweep {}: {} events, checkpoint every {}; {}",
            loaded.name(),
            loaded.events(),
            loaded.consumer().checkpoint_every,
            self.what()
        )?;
        writeln!(out)?;
        print_matrix(out, tallies)?;
        for (c, t) in tallies.iter().filter(|(_, t)| t.failing > 0) {
            writeln!(out)?;
            print_failing(out, *c, t, rerun)?;
        }
        let steps: u64 = tallies.iter().map(|(_, t)| t.steps).sum();
        writeln!(
            out,
            "\n{steps} simulated steps in {:.2} s ({:.1} M steps/s)",
            elapsed.as_secs_f64(),
            steps as f64 / elapsed.as_secs_f64().max(1e-9) / 1e6
        )?;
        Ok(())
    }

    /// What was swept: every crash point, or how many random schedules of how many crashes.
    fn what(&self) -> String {
        match (self.crashes, self.torn_writes) {
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
        }
    }
}

/// The result matrix: one line a store.
fn print_matrix(out: &mut impl Write, tallies: &[(SinkChoice, Tally)]) -> std::io::Result<()> {
    writeln!(
        out,
        "{:<13} {:>9} {:>8} {:>7} {:>7} {:>7}  {:<11} {:<11}  anomalies",
        "store", "schedules", "exact", "over", "under", "failing", "worst over", "worst under"
    )?;
    for (c, t) in tallies {
        let worst = |w: &Option<(u64, Schedule)>, sign: char| {
            w.as_ref().map_or("-".into(), |(d, _)| format!("{sign}{d}"))
        };
        writeln!(
            out,
            "{:<13} {:>9} {:>8} {:>7} {:>7} {:>7}  {:<11} {:<11}  {}",
            c.name(),
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
    Ok(())
}

/// A store with failing schedules: why, the lines that rerun them, the minimized one,
/// and the worst.
fn print_failing(
    out: &mut impl Write,
    c: SinkChoice,
    t: &Tally,
    rerun: &str,
) -> std::io::Result<()> {
    let why = match (t.idempotent, t.clean.fails()) {
        (false, _) => "expected: the store is not idempotent",
        (true, true) => "not exact on this log, crash or no crash",
        (true, false) => "an idempotent store FAILED",
    };
    writeln!(
        out,
        "{}: {} failing schedules ({why}); rerun one:",
        c.name(),
        t.failing
    )?;
    if t.clean.fails() {
        let (total, truth) = (t.clean.final_total, t.clean.true_total);
        writeln!(
            out,
            "  even without a crash it ends at {total} (true total {truth}; {}): the log holds a duplicate it cannot see;\n  {} of the schedules end worse than that",
            anomaly_text(&t.clean.anomalies),
            t.worse
        )?;
    }
    for s in t.listed.iter().map(|s| schedule_text(s)) {
        writeln!(out, "  {rerun} {} --schedule \"{s}\"", c.flag())?;
    }
    let minimized = t.minimized.as_ref();
    match minimized.map(|(from, to)| (schedule_text(from), schedule_text(to))) {
        Some((from, to)) if from == to => writeln!(out, "  {from} is already minimal")?,
        Some((from, to)) => {
            writeln!(out, "  minimized from {from}:")?;
            writeln!(out, "  {rerun} {} --schedule \"{to}\"", c.flag())?;
        }
        None => {}
    }
    if let Some((d, s)) = &t.worst_over {
        let s = schedule_text(s);
        writeln!(out, "  worst: {} at {s}", Verdict::Over(*d))?;
    }
    Ok(())
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

fn tally_json(c: SinkChoice, t: &Tally, rerun: &str) -> Value {
    let text = |s: &Option<Schedule>| s.as_deref().map(schedule_text);
    let worst = |w: &Option<(u64, Schedule)>| {
        w.as_ref()
            .map(|(d, s)| json!({ "by": d, "schedule": schedule_text(s) }))
    };
    let line = |s: &Schedule| format!("{rerun} {} --schedule \"{}\"", c.flag(), schedule_text(s));
    json!({
        "store": c.name(),
        "idempotent": t.idempotent,
        "schedules": t.schedules,
        "exact": t.exact,
        "over": t.over,
        "under": t.under,
        "worst_over": worst(&t.worst_over),
        "worst_under": worst(&t.worst_under),
        "anomalies": anomalies_json(&t.anomalies),
        "examples": {
            "duplicate": text(&t.examples[0]),
            "lost-write": text(&t.examples[1]),
            "nonmonotonic": text(&t.examples[2]),
            "diverged": text(&t.examples[3]),
        },
        "failing": t.failing,
        "worse_than_clean": t.worse,
        "clean": json!({ "final_total": t.clean.final_total, "true_total": t.clean.true_total }),
        "rerun": t.listed.iter().map(line).collect::<Vec<_>>(),
        "minimized": t.minimized.as_ref().map(|(from, to)| json!({ "from": schedule_text(from), "to": schedule_text(to), "rerun": line(to) })),
        "steps": t.steps,
    })
}
