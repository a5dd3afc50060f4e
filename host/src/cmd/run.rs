//! `idem run`: one scenario, one store, with a summary, a trace, or JSON.

use std::io::Write;
use std::process::ExitCode;

use clap::Args;
use idem_core::check::Verdict;

use crate::render;
use crate::select::{self, Loaded, ScenarioArgs, ScenarioKind, StoreKind};
use idem_core::crash::{At, CrashPoint};
use idem_core::dual::{DUAL_LAYOUT, DualFix, DualReport};
use idem_core::scenario::DUAL_CRASH;
use idem_core::sim::SimFlash;

/// `--fix` of the dual-write scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FixArg {
    /// Two records, one after the other.
    None,
    /// One record for both views.
    Atomic,
    /// Only the index is written; the total is derived from it.
    Derive,
}

impl FixArg {
    /// The core's fix.
    pub fn fix(self) -> DualFix {
        match self {
            Self::None => DualFix::None,
            Self::Atomic => DualFix::Atomic,
            Self::Derive => DualFix::Derive,
        }
    }
}

/// Runs the dual-write scenario of `loaded` with `fix`.
pub fn dual(loaded: &Loaded, fix: DualFix) -> anyhow::Result<DualReport> {
    let Loaded::Small(s) = loaded else {
        return Err(crate::usage("dual-write runs its own log"));
    };
    let crash = match s.crashes.first().map(|p| p.at) {
        None => None,
        Some(At::Effect(o)) => Some(o),
        Some(_) => {
            return Err(crate::usage(
                "dual-write crashes between the two writes of an offset: use --crash-after",
            ));
        }
    };
    let mut flash = Box::new(SimFlash::new());
    idem_core::dual::run(
        &mut *flash,
        DUAL_LAYOUT,
        &s.log,
        fix,
        s.consumer.checkpoint_every,
        crash,
    )
    .map_err(|e| anyhow::anyhow!("the simulated device failed: {e}"))
}

/// Run one scenario with one store.
#[derive(Debug, Args)]
pub struct Cmd {
    /// The scenario (or give --log FILE instead).
    scenario: Option<ScenarioKind>,
    /// Where the effects land.
    #[arg(long, value_enum)]
    store: Option<StoreKind>,
    /// How dual-write writes its two views (dual-write only).
    #[arg(long, value_enum)]
    fix: Option<FixArg>,
    #[command(flatten)]
    args: ScenarioArgs,
    /// Print every step: offset, action, total, committed.
    #[arg(long)]
    trace: bool,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

impl Cmd {
    /// Runs the command.
    pub fn run(self) -> anyhow::Result<ExitCode> {
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        if self.scenario == Some(ScenarioKind::DualWrite) {
            return self.run_dual(&mut out);
        }
        let Some(store) = self.store else {
            return Err(crate::usage(
                "--store is required: naive, offset, message-id, producer-seq, atomic or two-phase",
            ));
        };
        if self.fix.is_some() {
            return Err(crate::usage(
                "--fix applies to the dual-write scenario only",
            ));
        }
        let loaded = select::load(self.scenario, &self.args)?;
        let o = select::run(&loaded, store, self.args.window, self.trace)?;
        if o.report.unfired > 0 {
            let plan: Vec<String> = loaded.crashes().iter().map(ToString::to_string).collect();
            return Err(crate::usage(format!(
                "{} of the crash points {} were never reached: the run ended before them",
                o.report.unfired,
                plan.join(",")
            )));
        }
        if self.json {
            writeln!(out, "{}", render::run_json(&loaded, store, &o))?;
            out.flush()?;
            return Ok(ExitCode::SUCCESS);
        }
        let r = &o.report;
        if let Some(trace) = &o.trace {
            writeln!(out, "{}", render::TRACE_HEADER)?;
            for t in trace {
                writeln!(out, "{}", render::trace_line(t))?;
            }
            writeln!(out)?;
        }
        let crashes: Vec<String> = loaded.crashes().iter().map(ToString::to_string).collect();
        writeln!(
            out,
            "{} with the {} store: {} events, checkpoint every {}, {}",
            loaded.name(),
            store.name(),
            loaded.events(),
            loaded.consumer().checkpoint_every,
            if crashes.is_empty() {
                "no crash".to_string()
            } else {
                crashes.join(", ")
            }
        )?;
        writeln!(
            out,
            "  final total         {} ({})",
            r.final_total,
            render::verdict_text(Verdict::of(r.final_total, r.true_total))
        )?;
        writeln!(out, "  true total          {}", r.true_total)?;
        let at_crash = match (r.crashes, r.committed_at_crash) {
            (0, _) => "no crash".to_string(),
            (_, None) => "nothing committed".to_string(),
            (_, Some(o)) => format!("offset {o} (resumed at {})", o + 1),
        };
        writeln!(out, "  committed at crash  {at_crash}")?;
        writeln!(
            out,
            "  redelivered         {} ({} events)",
            render::ranges(&o.redelivered),
            o.redelivered.len()
        )?;
        writeln!(
            out,
            "  skipped             {} ({} events)",
            render::ranges(&o.skipped),
            o.skipped.len()
        )?;
        writeln!(
            out,
            "  flash               {} records written, {} erases, {} bytes programmed",
            r.flash.writes, r.flash.erases, r.flash.bytes_written
        )?;
        out.flush()?;
        Ok(ExitCode::SUCCESS)
    }

    fn run_dual(&self, out: &mut impl Write) -> anyhow::Result<ExitCode> {
        let Some(fix) = self.fix else {
            return Err(crate::usage(
                "dual-write needs --fix none, atomic or derive",
            ));
        };
        if self.store.is_some() {
            return Err(crate::usage(
                "dual-write writes its own two views: give --fix, not --store",
            ));
        }
        if self.args.schedule.is_some() || self.trace {
            return Err(crate::usage(
                "dual-write takes --crash-after or --no-crash, not --schedule or --trace",
            ));
        }
        let mut args = self.args.clone();
        if args.crash_after.is_none() && !args.no_crash {
            args.crash_after = Some(DUAL_CRASH);
        }
        let loaded = select::load(self.scenario, &args)?;
        let r = dual(&loaded, fix.fix())?;
        let crash = loaded.crashes().first().map(|p: &CrashPoint| match p.at {
            At::Effect(o) => o,
            _ => 0,
        });
        if self.json {
            let v = serde_json::json!({
                "scenario": "dual-write",
                "fix": format!("{fix:?}").to_lowercase(),
                "events": loaded.events(),
                "checkpoint_every": loaded.consumer().checkpoint_every,
                "crash_between": crash,
                "true_total": r.true_total,
                "total": r.total,
                "index_sum": r.index_sum,
                "diverged": r.diverged(),
                "verdict": r.verdict_name(),
                "diverged_at_recovery": r.diverged_at_recovery.map(|(t, i)| serde_json::json!({"total": t, "index_sum": i})),
                "flash": {"writes": r.writes},
            });
            writeln!(out, "{v}")?;
            out.flush()?;
            return Ok(ExitCode::SUCCESS);
        }
        writeln!(
            out,
            "dual-write with --fix {}: {} payments by 3 payers, checkpoint every {}, {}",
            format!("{fix:?}").to_lowercase(),
            loaded.events(),
            loaded.consumer().checkpoint_every,
            crash.map_or("no crash".into(), |o| format!(
                "a crash between the two writes of offset {o}"
            ))
        )?;
        writeln!(
            out,
            "  total view          {} (true total {})",
            r.total, r.true_total
        )?;
        writeln!(out, "  index view (sum)    {}", r.index_sum)?;
        match r.diverged_at_recovery {
            Some((t, i)) => writeln!(
                out,
                "  after recovery      total {t}, index {i}: the views disagreed"
            )?,
            None => writeln!(out, "  after recovery      the views agreed")?,
        }
        let why = match r.verdict_name() {
            "diverged" => format!(
                "diverged: the views disagree by {} for good",
                r.total - r.index_sum
            ),
            v => format!("{v}: the views agree"),
        };
        writeln!(out, "  verdict             {why}")?;
        writeln!(out, "  flash               {} records written", r.writes)?;
        out.flush()?;
        Ok(ExitCode::SUCCESS)
    }
}
