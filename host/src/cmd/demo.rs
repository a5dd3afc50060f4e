//! `idem demo`: the DDIA chapter 12 exercise told step by step, every figure taken from
//! a run of the simulator.

use std::io::{BufRead, IsTerminal, Write};
use std::process::ExitCode;

use clap::Args;
use idem_sim::check::Verdict;
use idem_sim::run::{Action, TraceStep};

use idem_core::consumer::covers_through;
use idem_lab::render::ranges;
use idem_lab::select::{self, Loaded, Outcome, ScenarioArgs, ScenarioKind, StoreKind, WINDOW};

/// Tell the DDIA exercise step by step. On a terminal it stops before each figure so
/// that you can predict it first; piped, or with --no-pause, it prints straight through.
#[derive(Debug, Args)]
pub struct Cmd {
    /// Print every figure without stopping for a prediction.
    #[arg(long)]
    no_pause: bool,
}

impl Cmd {
    /// Runs the command.
    pub fn run(self) -> anyhow::Result<ExitCode> {
        let pause =
            !self.no_pause && std::io::stdin().is_terminal() && std::io::stdout().is_terminal();
        let args = ScenarioArgs::default();
        let loaded = select::load(Some(ScenarioKind::Ddia), &args)?;
        let naive = select::run(&loaded, StoreKind::Naive, WINDOW, true)?;
        let offset = select::run(&loaded, StoreKind::Offset, WINDOW, true)?;
        let atomic = select::run(&loaded, StoreKind::Atomic, WINDOW, false)?;
        let mut out = std::io::stdout().lock();
        let mut input = std::io::stdin().lock();
        let mut stop = pause;
        for (prompt, text) in story(&loaded, &naive, &offset, &atomic) {
            if let (true, Some(prompt)) = (stop, prompt) {
                write!(out, "{prompt} [Enter] ")?;
                out.flush()?;
                let mut line = String::new();
                // At the end of the input, the rest prints without stopping.
                stop = input.read_line(&mut line)? > 0;
                writeln!(out)?;
            }
            write!(out, "{text}")?;
        }
        out.flush()?;
        Ok(ExitCode::SUCCESS)
    }
}

/// The story in parts, each with the prediction to ask for before it (if any).
fn story(
    loaded: &Loaded,
    naive: &Outcome,
    offset: &Outcome,
    atomic: &Outcome,
) -> Vec<(Option<&'static str>, String)> {
    let n = loaded.events();
    let k = loaded.consumer().checkpoint_every;
    let crash = loaded
        .crashes()
        .first()
        .map_or("no crash".into(), ToString::to_string);
    let truth = naive.report.true_total;
    let mut s = String::new();
    s += "idem demo: the DDIA chapter 12 exercise, on a simulated device with NOR flash\n\n";
    s += "The workload\n";
    s += &format!(
        "  A log of {n} events, each +1, at offsets 0..{}: the true total is {truth}.\n",
        n.saturating_sub(1)
    );
    s += "  A consumer applies each event to a total kept in flash and commits its position\n";
    s += &format!("  every {k} events, after the effects (at-least-once). The device crashes at\n");
    s += &format!("  {crash}: after an effect, before the checkpoint that would cover it.\n\n");
    let mut parts = vec![(None, s)];
    parts.push((
        Some("Predict: where does the restart resume, and what does the naive store end at?"),
        chapter("Naive store: total += 1", naive),
    ));
    parts.push((
        Some("Predict: what does the offset-stamped store end at, and which offsets does it skip?"),
        chapter(
            "Offset-stamped store: apply only if the offset is newer than the stamp",
            offset,
        ),
    ));
    let mut s = String::new();
    s += "Summary\n";
    let d = |o: &Outcome| Verdict::of(o.report.final_total, o.report.true_total);
    s += &format!(
        "  naive            {:>5}  {}\n",
        naive.report.final_total,
        match d(naive) {
            Verdict::Over(x) =>
                format!("+{x} from the {} replayed events", naive.redelivered.len()),
            v => v.to_string(),
        }
    );
    s += &format!(
        "  offset-stamped   {:>5}  {}\n",
        offset.report.final_total,
        match d(offset) {
            Verdict::Exact => format!(
                "{} replayed events rejected as duplicates: effectively-once",
                offset.skipped.len()
            ),
            v => v.to_string(),
        }
    );
    parts.push((None, s));
    let s = format!(
        "  atomic           {:>5}  {}: value and position in one record, {} flash records instead of {}\n\n\
Next: idem run ddia --store naive --trace   |   idem lesson payments   |   idem matrix\n",
        atomic.report.final_total,
        d(atomic),
        atomic.report.flash.writes,
        offset.report.flash.writes
    );
    parts.push((
        Some(
            "The atomic store writes value and position in one record, at checkpoints only.\n\
Predict: what does it end at, and in how many flash records?",
        ),
        s,
    ));
    parts
}

/// One store's run as the exercise tells it: first run, crash, restart, final total.
fn chapter(title: &str, o: &Outcome) -> String {
    let trace = o.trace.as_deref().unwrap_or_default();
    let crash_at = trace
        .iter()
        .position(|t| matches!(t.action, Action::Crash(_)));
    let (before, after) = trace.split_at(crash_at.unwrap_or(trace.len()));
    let applied = |steps: &[TraceStep]| -> Vec<u64> {
        steps
            .iter()
            .filter(|t| t.action == Action::Apply)
            .filter_map(|t| t.offset)
            .collect()
    };
    let mut s = format!("{title}\n");
    let last = before.last();
    s += &format!(
        "  first run    applied offsets {}, total {}, last checkpoint covers {}\n",
        ranges(&applied(before)),
        last.map_or(0, |t| t.total),
        last.and_then(|t| covers_through(t.resume_at))
            .map_or("nothing".into(), |c| format!("offset {c}"))
    );
    if let (Some(crash), Some(recover)) = (after.first(), after.get(1)) {
        s += &format!(
            "  *** CRASH *** ({}) RAM is lost; flash keeps total {} and resume position {}\n",
            idem_lab::render::action_name(crash.action),
            recover.total,
            recover.resume_at
        );
        let fresh: Vec<u64> = after
            .iter()
            .filter(|t| t.action == (Action::Deliver { redelivery: false }))
            .filter_map(|t| t.offset)
            .collect();
        s += &format!(
            "  restart      resumes at offset {}: redelivers {} ({} events), then {}\n",
            recover.resume_at,
            ranges(&o.redelivered),
            o.redelivered.len(),
            ranges(&fresh)
        );
        s += &if o.skipped.is_empty() {
            "               skipped no offsets: every redelivered event was applied again\n"
                .to_string()
        } else {
            format!(
                "               skipped {} already-applied offsets: {}\n",
                o.skipped.len(),
                ranges(&o.skipped)
            )
        };
    }
    let r = &o.report;
    s += &format!(
        "  final total  {} (true total {}, {})\n\n",
        r.final_total,
        r.true_total,
        Verdict::of(r.final_total, r.true_total)
    );
    s
}
