//! `idem run`: one scenario, one store, with a summary, a trace, or JSON.

mod pump;

use std::io::Write;
use std::process::ExitCode;

use clap::Args;
use idem_payments::crash::{At, CrashPoint};
use idem_sim::check::Verdict;
use idem_sim::run::{Action, TraceStep};

use idem_lab::report::guarantee_name;
use idem_lab::spec::value_name;

use idem_lab::render;
use idem_lab::select::{
    self, FixArg, Loaded, Outcome, ProducerArg, ScenarioArgs, ScenarioKind, SinkChoice, StoreKind,
};

/// Run one scenario with one store.
#[derive(Debug, Args)]
pub struct Cmd {
    /// The scenario (or give --log FILE instead).
    scenario: Option<ScenarioKind>,
    /// Where the effects land.
    #[arg(long, value_parser = idem_lab::choice::store())]
    store: Option<StoreKind>,
    /// How dual-write writes its two views (dual-write only; its default crash is
    /// crash@between:25, or crash@effect:25 for the fixes that write once).
    #[arg(long, value_enum)]
    fix: Option<FixArg>,
    #[command(flatten)]
    args: ScenarioArgs,
    /// Print every step: offset, action, total, and where a restart resumes.
    #[arg(long)]
    trace: bool,
    /// Print only the replay window of the trace: from the first crash to the last
    /// effect of an offset delivered again.
    #[arg(long, conflicts_with = "json")]
    replay: bool,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// mqtt only: the subscription's QoS, 0, 1 or 2 (2 by default).
    #[arg(long, value_parser = clap::value_parser!(u8).range(0..=2))]
    qos: Option<u8>,
    /// mqtt only: where the QoS 2 identifiers are kept, flash (with the effect) or ram.
    #[arg(long, value_name = "flash|ram", value_parser = ["flash", "ram"])]
    session: Option<String>,
    /// pump only: what the controller does about a dose a reset may cut: after (drive
    /// the motor after the step), reassert (and pump the newest dose again at boot) or
    /// effects (intent, done, and at boot ask the motor's counter).
    #[arg(long, value_name = "after|reassert|effects", value_parser = ["after", "reassert", "effects"])]
    way: Option<String>,
}

impl Cmd {
    /// `idem run mqtt`.
    fn mqtt(&self) -> anyhow::Result<ExitCode> {
        let store = self
            .store
            .ok_or_else(|| idem_lab::error::usage("--store is required: naive or message-id"))?;
        let qos = idem_mqtt::codec::QoS::from_level(self.qos.unwrap_or(2))
            .unwrap_or(idem_mqtt::codec::QoS::ExactlyOnce);
        let ram = self.session.as_deref() == Some("ram");
        let r = crate::cmd::mqtt::run::MqttRun {
            store,
            qos,
            ram,
            trace: self.trace,
            json: self.json,
        };
        crate::cmd::mqtt::run::run(r)
    }

    /// The scenarios with a run of their own (mqtt, pump), and the flags only they
    /// take; `None` for the others.
    fn own_run(&self) -> Option<anyhow::Result<ExitCode>> {
        let refuse = |why: &str| Some(Err(idem_lab::error::usage(why)));
        match self.scenario {
            Some(ScenarioKind::Mqtt) => Some(self.mqtt()),
            Some(ScenarioKind::Pump) => Some(self.pump()),
            _ if self.qos.is_some() || self.session.is_some() => {
                refuse("--qos and --session apply to the mqtt scenario only")
            }
            _ if self.way.is_some() => refuse("--way applies to the pump scenario only"),
            _ => None,
        }
    }

    /// Runs the command.
    pub fn run(self) -> anyhow::Result<ExitCode> {
        if let Some(done) = self.own_run() {
            return done;
        }
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        let choice = select::choose(self.scenario, self.store, self.fix)?;
        let args = ScenarioArgs {
            fix: self.fix,
            ..self.args.clone()
        };
        let loaded = select::load(self.scenario, &args)?;
        let o = select::run(&loaded, choice, self.args.window, self.trace || self.replay)?;
        select::ensure_every_crash_happened(&loaded, &o.report)?;
        if self.json {
            writeln!(out, "{}", idem_lab::report::run_json(&loaded, choice, &o))?;
            out.flush()?;
            return Ok(ExitCode::SUCCESS);
        }
        if let Some(trace) = &o.trace {
            let producer = loaded.producer();
            let trace = if self.replay {
                replay_window(trace, &o.redelivered)
            } else {
                trace
            };
            if self.replay {
                writeln!(
                    out,
                    "the replay window: from the first crash to the last effect of an offset delivered again"
                )?;
            } else if !producer.is_empty() {
                writeln!(out, "producer:\n{}", render::WHO_WRITES)?;
                for p in producer {
                    writeln!(out, "  {}", render::producer_line(p))?;
                }
                if producer.iter().any(|p| p.transactional) {
                    writeln!(out, "{}", render::NO_MARKERS)?;
                }
                writeln!(out, "\nconsumer:")?;
            }
            writeln!(out, "{}", render::TRACE_HEADER)?;
            for t in trace {
                writeln!(out, "{}", render::trace_line(t, producer))?;
            }
            writeln!(out)?;
        }
        match choice {
            SinkChoice::Store(store) => summary(&mut out, &loaded, store, self.args.producer, &o)?,
            SinkChoice::Dual(fix) => dual_summary(&mut out, &loaded, fix, &o)?,
        }
        out.flush()?;
        Ok(ExitCode::SUCCESS)
    }
}

/// The steps of `trace` from its first crash to the last effect (applied or skipped) of
/// an offset in `redelivered`; none without a crash.
fn replay_window<'a>(trace: &'a [TraceStep], redelivered: &[u64]) -> &'a [TraceStep] {
    let Some(start) = trace
        .iter()
        .position(|t| matches!(t.action, Action::Crash(_)))
    else {
        return &[];
    };
    let end = trace
        .iter()
        .enumerate()
        .skip(start)
        .rfind(|(_, t)| {
            matches!(t.action, Action::Apply | Action::Skip)
                && t.offset.is_some_and(|o| redelivered.contains(&o))
        })
        .map_or(start + 1, |(i, _)| i)
        .min(trace.len() - 1);
    &trace[start..=end]
}

/// The crash plan in words.
fn crashes_text(loaded: &Loaded) -> String {
    let crashes: Vec<String> = loaded.crashes().iter().map(ToString::to_string).collect();
    if crashes.is_empty() {
        "no crash".to_string()
    } else {
        crashes.join(", ")
    }
}

fn summary(
    out: &mut impl Write,
    loaded: &Loaded,
    store: StoreKind,
    producer: ProducerArg,
    o: &Outcome,
) -> anyhow::Result<()> {
    let r = &o.report;
    writeln!(
        out,
        "{} with the {} store: {}, checkpoint every {}, {}",
        loaded.name(),
        store.name(),
        render::count(loaded.events(), "event"),
        loaded.consumer().checkpoint_every,
        crashes_text(loaded)
    )?;
    writeln!(
        out,
        "  delivery            {} consumer at {}, {} producer",
        guarantee_name(loaded.consumer().guarantee),
        loaded.isolation().name(),
        value_name(&producer)
    )?;
    writeln!(
        out,
        "  final total         {} ({})",
        r.final_total,
        Verdict::of(r.final_total, r.true_total)
    )?;
    writeln!(out, "  true total          {}", r.true_total)?;
    let lost = loaded.lost_sends();
    if !lost.names.is_empty() {
        writeln!(
            out,
            "  lost sends          {} ({} in all): sent, lost before the log, never retried",
            lost.names.join(", "),
            lost.amount
        )?;
    }
    let at_crash = r
        .resume_at_crash
        .map_or("no crash".to_string(), render::position_text);
    writeln!(out, "  position at crash   {at_crash}")?;
    if let Some(res) = r.resolution {
        writeln!(
            out,
            "  recovery            {}",
            render::resolution_text(res)
        )?;
    }
    replay_lines(out, o)
}

/// What the run did with each offset after the crash, and what it cost in flash.
fn replay_lines(out: &mut impl Write, o: &Outcome) -> anyhow::Result<()> {
    let r = &o.report;
    writeln!(
        out,
        "  redelivered         {}",
        render::offsets_text(&o.redelivered)
    )?;
    writeln!(
        out,
        "  skipped             {}",
        render::offsets_text(&o.skipped)
    )?;
    if !o.passed.is_empty() {
        writeln!(
            out,
            "  passed over         {}: in an aborted transaction, never given to the store",
            render::offsets_text(&o.passed)
        )?;
    }
    if !o.lost.is_empty() {
        writeln!(
            out,
            "  lost                {}, never applied",
            render::offsets_text(&o.lost)
        )?;
    }
    writeln!(
        out,
        "  flash               {} written, {}, {} programmed",
        render::count(r.flash.writes, "record"),
        render::count(r.flash.erases, "erase"),
        render::count(r.flash.bytes_written, "byte")
    )?;
    Ok(())
}

fn dual_summary(
    out: &mut impl Write,
    loaded: &Loaded,
    fix: FixArg,
    o: &Outcome,
) -> anyhow::Result<()> {
    let r = &o.report;
    let crash = match loaded.crashes() {
        [] => "no crash".to_string(),
        [
            CrashPoint {
                at: At::Between(offset),
                occurrence: 1,
            },
        ] => format!("a crash between the two writes of offset {offset}"),
        [
            CrashPoint {
                at: At::Effect(offset),
                occurrence: 1,
            },
        ] if !matches!(fix, FixArg::None | FixArg::Split) => {
            format!("a crash right after the one write of offset {offset}")
        }
        _ => crashes_text(loaded),
    };
    writeln!(
        out,
        "dual-write with --fix {}: {} payments by 3 payers, checkpoint every {}, {crash}",
        fix.name(),
        loaded.events(),
        loaded.consumer().checkpoint_every,
    )?;
    let (total, index) = r.views.unwrap_or((r.final_total, r.final_total));
    writeln!(
        out,
        "  total view          {total} (true total {})",
        r.true_total
    )?;
    writeln!(out, "  index view (sum)    {index}")?;
    match r.diverged_at_recovery {
        Some((t, i)) => writeln!(
            out,
            "  after recovery      total {t}, index {i}: the views disagreed"
        )?,
        None if r.crashes > 0 => writeln!(out, "  after recovery      the views agreed")?,
        None => {}
    }
    let why = match render::verdict_name(r) {
        "diverged" => format!(
            "diverged: the index is {} {} the total, for good",
            total.abs_diff(index),
            if index < total { "below" } else { "above" }
        ),
        v => format!("{v}: the views agree"),
    };
    writeln!(out, "  verdict             {why}")?;
    writeln!(
        out,
        "  flash               {} records written",
        r.flash.writes
    )?;
    Ok(())
}
