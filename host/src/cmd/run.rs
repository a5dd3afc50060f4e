//! `idem run`: one scenario, one store, with a summary, a trace, or JSON.

use std::io::Write;
use std::process::ExitCode;

use clap::Args;
use idem_core::check::Verdict;

use crate::render;
use crate::select::{self, ScenarioArgs, ScenarioKind, StoreKind};

/// Run one scenario with one store.
#[derive(Debug, Args)]
pub struct Cmd {
    /// The scenario (or give --log FILE instead).
    scenario: Option<ScenarioKind>,
    /// Where the effects land.
    #[arg(long, value_enum)]
    store: StoreKind,
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
        let loaded = select::load(self.scenario, &self.args)?;
        let o = select::run(&loaded, self.store, self.args.window, self.trace)?;
        if o.report.unfired > 0 {
            let plan: Vec<String> = loaded.crashes().iter().map(ToString::to_string).collect();
            return Err(crate::usage(format!(
                "{} of the crash points {} were never reached: the run ended before them",
                o.report.unfired,
                plan.join(",")
            )));
        }
        if self.json {
            writeln!(out, "{}", render::run_json(&loaded, self.store, &o))?;
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
            self.store.name(),
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
}
