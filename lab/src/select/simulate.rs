//! A simulated run of a loaded scenario with the chosen sinks, and what the renderers
//! list of it.

use idem_core::log::Offset;
use idem_payments::SumSinks;
use idem_payments::Truth;
use idem_sim::run::{
    Action, DefaultApplied, Report, Run, SIM_LAYOUT, SimError, SimFlash, TraceStep,
};
use idem_sim::scenario::Scenario;

use super::args::SinkChoice;
use super::dispatch::{HostSinks, Job, dispatch};
use super::load::Loaded;
use crate::error::usage;

/// A finished run: the core's report and what the renderers list.
pub struct Outcome {
    /// The core's report.
    pub report: Report,
    /// Offsets delivered a second time, in order.
    pub redelivered: Vec<Offset>,
    /// Offsets the store skipped as duplicates, in order.
    pub skipped: Vec<Offset>,
    /// Offsets the consumer passed over (records of aborted transactions, under
    /// read_committed), in order.
    pub passed: Vec<Offset>,
    /// Messages (by first offset) never durably applied: lost writes.
    pub lost: Vec<Offset>,
    /// Every step, when asked for.
    pub trace: Option<Vec<TraceStep>>,
}

/// Runs `loaded` with the sinks `choice` names; keeps the whole trace when `trace` is
/// set.
pub fn run(
    loaded: &Loaded,
    choice: impl Into<SinkChoice>,
    window: usize,
    trace: bool,
) -> anyhow::Result<Outcome> {
    struct Simulate(bool);
    impl Job for Simulate {
        type Out = Outcome;
        fn call<L: Truth + Sync, K: HostSinks>(
            self,
            s: &Scenario<L>,
            sinks: K,
        ) -> anyhow::Result<Outcome> {
            run_with(s, sinks, self.0)
        }
    }
    dispatch(loaded, choice.into(), window, Simulate(trace))
}

fn run_with<L: Truth, K: SumSinks>(
    s: &Scenario<L>,
    sinks: K,
    keep: bool,
) -> anyhow::Result<Outcome> {
    let (mut redelivered, mut skipped, mut passed, mut trace) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let failed = |e: SimError| match e {
        SimError::Store(e) => usage(e.to_string()),
        e => anyhow::anyhow!("the simulated device failed: {e}"),
    };
    let mut r = Box::new(
        Run::new(SimFlash::new(), SIM_LAYOUT, s, sinks, DefaultApplied::new()).map_err(failed)?,
    );
    r.run_to_end(&mut |t: &TraceStep| {
        match (t.action, t.offset) {
            (Action::Deliver { redelivery: true }, Some(o)) => redelivered.push(o),
            (Action::Skip, Some(o)) => skipped.push(o),
            (Action::Pass, Some(o)) => passed.push(o),
            _ => {}
        }
        if keep {
            trace.push(*t);
        }
    })
    .map_err(failed)?;
    let mut lost = Vec::new();
    r.for_each_lost(|o| lost.push(o));
    let report: Report = r.finish();
    Ok(Outcome {
        report,
        redelivered,
        skipped,
        passed,
        lost,
        trace: keep.then_some(trace),
    })
}

/// Refuses a run whose crash schedule did not all happen (exit 2): a planned crash that
/// never came would make the run look as if it had survived it.
pub fn ensure_every_crash_happened(loaded: &Loaded, report: &Report) -> anyhow::Result<()> {
    if report.unfired == 0 {
        return Ok(());
    }
    let plan = loaded.crashes();
    let (n, of) = (report.unfired as usize, plan.len());
    let mut text = if of == 1 {
        format!("the crash point {} never happened in this run", plan[0])
    } else {
        format!("{n} of the {of} crash points in the schedule never happened in this run")
    };
    let k = loaded.consumer().checkpoint_every;
    let events = loaded.events();
    let off_batch = plan.iter().any(|p| {
        matches!(p.at, idem_payments::crash::At::Commit(o) | idem_payments::crash::At::Prepare(o)
            if !k.closes_batch(o, events))
    });
    if off_batch {
        let k = k.get();
        text.push_str(&format!(
            ": commits and prepares come after offsets {}, {}, {}, ... (a checkpoint every {k}) and after the last, {}",
            k - 1,
            2 * k - 1,
            3 * k - 1,
            events.saturating_sub(1)
        ));
    } else {
        text.push_str(": the run ended first");
    }
    Err(usage(text))
}
