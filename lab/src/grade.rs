//! A lesson's answers: reading a learner's prediction, running a step's simulation and
//! reading its observation, and the worked example's step table. The CLI (`idem lesson`)
//! and the playground both grade with these; the questions are the lessons'
//! ([`crate::lesson`]).

use crate::lesson::{LessonRun, LessonStep, Observe};
use clap::ValueEnum;
use idem_sim::run::{Action, TraceStep};
use idem_sim::scenario::Landed;

use crate::render::ranges;
use crate::report::RunReport;
use crate::select::{
    self, FixArg, GuaranteeArg, IsolationArg, Loaded, Outcome, ProducerArg, ScenarioArgs,
    ScenarioKind, SinkChoice, StoreKind, WINDOW,
};
use crate::spec::RunSpec;

/// An observed (or predicted) answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// A whole number: a total, an offset, a count.
    Number(i64),
    /// A set of offsets, sorted, without repeats.
    Offsets(Vec<u64>),
    /// Numbers in order: balances.
    Numbers(Vec<i64>),
    /// Yes or no.
    YesNo(bool),
}

impl std::fmt::Display for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Number(n) => write!(f, "{n}"),
            Self::Offsets(o) => f.write_str(&ranges(o)),
            Self::Numbers(n) => {
                let text: Vec<String> = n.iter().map(i64::to_string).collect();
                f.write_str(&text.join(", "))
            }
            Self::YesNo(b) => f.write_str(if *b { "yes" } else { "no" }),
        }
    }
}

/// Reads a prediction of the kind `observe` asks for; a sentence saying why not.
pub fn parse(observe: Observe, text: &str) -> Result<Answer, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err(match observe {
            Observe::Redelivered | Observe::Skipped | Observe::Landed(_) => {
                "give an answer: offsets such as 3..7 or 3, 5, or none".into()
            }
            Observe::Diverged => "give an answer: yes or no".into(),
            _ => "give an answer: a whole number".into(),
        });
    }
    match observe {
        Observe::FinalTotal | Observe::ResumeAt | Observe::NextOffset | Observe::FlashRecords => {
            whole_number(text).map(Answer::Number)
        }
        Observe::Diverged => match text.to_ascii_lowercase().as_str() {
            "yes" | "y" => Ok(Answer::YesNo(true)),
            "no" | "n" => Ok(Answer::YesNo(false)),
            _ => Err(format!("{text:?}: answer yes or no")),
        },
        Observe::Balances => {
            let numbers: Result<Vec<i64>, String> = text
                .split(|c: char| c == ',' || c.is_whitespace())
                .filter(|p| !p.is_empty())
                .map(|p| p.parse().map_err(|_| not_a_number(p)))
                .collect();
            match numbers? {
                n if n.is_empty() => Err("give the balances in order, such as 1, 2, 3".into()),
                n if n.len() > 1000 => Err("more than 1000 balances".into()),
                n => Ok(Answer::Numbers(n)),
            }
        }
        Observe::Redelivered | Observe::Skipped | Observe::Landed(_) => {
            if text.eq_ignore_ascii_case("none") {
                return Ok(Answer::Offsets(Vec::new()));
            }
            let mut out = Vec::new();
            // "3 to 7" and "3-7" are ranges too.
            let text = text.to_ascii_lowercase().replace(" to ", "..");
            for part in text
                .split(|c: char| c == ',' || c.is_whitespace())
                .filter(|p| !p.is_empty())
            {
                let bad = || match part.trim_start_matches('-') {
                    digits if part.starts_with('-') && is_digits(digits) => {
                        format!("{part} is not an offset: offsets start at 0")
                    }
                    digits if is_digits(digits) => not_a_number(part),
                    _ => format!("{part:?} is not an offset or a range such as 3..7"),
                };
                match part.split_once("..").or_else(|| part.split_once('-')) {
                    Some(("", _)) => return Err(bad()),
                    Some((a, b)) => {
                        let (a, b): (u64, u64) = (
                            a.trim().parse().map_err(|_| bad())?,
                            b.trim().parse().map_err(|_| bad())?,
                        );
                        if b < a || b - a > 100_000 {
                            return Err(bad());
                        }
                        out.extend(a..=b);
                    }
                    None => out.push(part.parse().map_err(|_| bad())?),
                }
            }
            out.sort_unstable();
            out.dedup();
            Ok(Answer::Offsets(out))
        }
    }
}

/// A whole number, read with the unit a learner may type after it ("95 ml", "95ml",
/// "110 payments"): one word of letters after the digits is the unit and is not graded;
/// anything else after them ("95 or 100", "forty") does not read as a number.
fn whole_number(text: &str) -> Result<i64, String> {
    let end = text
        .char_indices()
        .find(|&(i, c)| !(c.is_ascii_digit() || (i == 0 && c == '-')))
        .map_or(text.len(), |(i, _)| i);
    let (number, unit) = text.split_at(end);
    let unit = unit.trim_start();
    let is_unit = unit.len() <= 16 && unit.chars().all(|c| c.is_alphabetic());
    match number.parse() {
        Ok(n) if is_unit => Ok(n),
        _ if is_unit && is_digits(number.strip_prefix('-').unwrap_or(number)) => {
            Err(not_a_number(number))
        }
        _ => Err(not_a_number(text)),
    }
}

/// Whether `text` is one or more ASCII digits.
fn is_digits(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit())
}

/// Why `text` does not read as a whole number: too large for one, or not one at all.
fn not_a_number(text: &str) -> String {
    if is_digits(text.strip_prefix('-').unwrap_or(text)) {
        format!("{text} is too large for any figure here")
    } else {
        format!("{text:?} is not a whole number")
    }
}

/// A step's observation: its answer, and the run's step table when the step asks for
/// one.
pub struct Observed {
    /// The answer the run gives.
    pub value: Answer,
    /// The worked example's step table, for a step that asks for balances.
    pub table: Option<Vec<Row>>,
    /// The run itself, with its trace: a simulator run's report (none for an MQTT run,
    /// which `idem run mqtt` reports).
    pub run: Option<RunReport>,
}

/// A row of a worked example's step table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// What happened: `handle offset 1`, `skip (a duplicate) offset 1 again`, `crash`.
    pub what: String,
    /// The offset handled (`1 again`), or `-` for a crash.
    pub handled: String,
    /// The committed offset: the next offset to read.
    pub committed: u64,
    /// The balance after the row.
    pub balance: i64,
    /// Where the restart after this row's crash resumed.
    pub restart: Option<u64>,
}

impl Row {
    /// The step column; `reveal` adds where a restart resumed (a worksheet leaves it to
    /// the learner).
    pub fn step(&self, reveal: bool) -> String {
        match self.restart {
            Some(at) if reveal => format!("{} at {at}", self.what),
            _ => self.what.clone(),
        }
    }
}

/// The step table of a run, as the payments lesson draws it: one row per event handled
/// (applied or skipped) and one for each crash; the committed offset is the next offset
/// to read, after any commit that follows the handling.
pub fn step_table(trace: &[TraceStep]) -> Vec<Row> {
    let mut rows: Vec<Row> = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for s in trace {
        match (s.action, s.offset) {
            (Action::Apply | Action::Skip, Some(o)) => {
                let again = !seen.insert(o);
                let verb = if s.action == Action::Apply {
                    "handle"
                } else {
                    "skip (a duplicate)"
                };
                rows.push(Row {
                    what: format!("{verb} offset {o}{}", if again { " again" } else { "" }),
                    handled: format!("{o}{}", if again { " again" } else { "" }),
                    committed: s.resume_at,
                    balance: s.total,
                    restart: None,
                });
            }
            (Action::Commit, _) => {
                if let Some(last) = rows.last_mut() {
                    last.committed = s.resume_at;
                }
            }
            (Action::Crash(_), _) => rows.push(Row {
                what: "crash".into(),
                handled: "-".into(),
                committed: s.resume_at,
                balance: s.total,
                restart: None,
            }),
            (Action::Recover, _) => {
                if let Some(last) = rows.last_mut() {
                    last.what = "crash, then restart".into();
                    last.restart = Some(s.resume_at);
                    last.committed = s.resume_at;
                }
            }
            _ => {}
        }
    }
    rows
}

/// Runs a step's simulation and reads its answer.
pub fn observe(step: &LessonStep) -> anyhow::Result<Observed> {
    let run = &step.run;
    if run.scenario == "mqtt" {
        return observe_mqtt(step.observe, run.store, run.qos, run.session);
    }
    if run.scenario == "pump" {
        return observe_pump(step.observe, run);
    }
    let (kind, args) = scenario_args(run)?;
    let loaded = select::load(Some(kind), &args)?;
    let choice = match (run.store, args.fix) {
        (Some(s), _) => SinkChoice::Store(
            StoreKind::from_name(s)
                .ok_or_else(|| anyhow::anyhow!("lesson names an unknown store {s:?}"))?,
        ),
        (None, Some(f)) => SinkChoice::Dual(f),
        (None, None) => anyhow::bail!("a lesson step names neither a store nor a fix"),
    };
    let o = select::run(&loaded, choice, WINDOW, true)?;
    select::ensure_every_crash_happened(&loaded, &o.report)?;
    let table = (step.observe == Observe::Balances)
        .then(|| o.trace.as_deref().map(step_table))
        .flatten();
    Ok(Observed {
        value: answer(step.observe, &loaded, &o, table.as_deref()),
        run: Some(RunReport::new(&loaded, choice, &o)),
        table,
    })
}

/// The scenario a lesson's run names, and the arguments `idem run` would be given.
fn scenario_args(run: &LessonRun) -> anyhow::Result<(ScenarioKind, ScenarioArgs)> {
    let LessonRun {
        scenario,
        fix,
        producer,
        guarantee,
        isolation,
        schedule,
        every,
        ..
    } = *run;
    let kind = ScenarioKind::from_name(scenario)
        .ok_or_else(|| anyhow::anyhow!("lesson names an unknown scenario {scenario:?}"))?;
    let args = ScenarioArgs {
        producer: ProducerArg::from_str(producer, true)
            .map_err(|e| anyhow::anyhow!("lesson names a producer {producer:?}: {e}"))?,
        guarantee: GuaranteeArg::from_str(guarantee, true)
            .map_err(|e| anyhow::anyhow!("lesson names a guarantee {guarantee:?}: {e}"))?,
        isolation: IsolationArg::from_str(isolation, true)
            .map_err(|e| anyhow::anyhow!("lesson names an isolation level {isolation:?}: {e}"))?,
        schedule: schedule.map(str::to_string),
        checkpoint_every: every,
        fix: fix.and_then(|f| FixArg::ALL.into_iter().find(|x| x.name() == f)),
        ..ScenarioArgs::default()
    };
    Ok((kind, args))
}

/// What `observe` asks of a run: read from its report, its trace or its step table.
fn answer(observe: Observe, loaded: &Loaded, o: &Outcome, table: Option<&[Row]>) -> Answer {
    match observe {
        Observe::FinalTotal => Answer::Number(o.report.final_total),
        Observe::ResumeAt => Answer::Number(o.report.resume_at_crash.unwrap_or(0) as i64),
        Observe::FlashRecords => Answer::Number(o.report.flash.writes as i64),
        Observe::NextOffset => Answer::Number(
            o.trace
                .as_deref()
                .and_then(<[_]>::last)
                .map_or(0, |t| t.resume_at) as i64,
        ),
        Observe::Redelivered => Answer::Offsets(o.redelivered.clone()),
        Observe::Skipped => Answer::Offsets(o.skipped.clone()),
        Observe::Diverged => Answer::YesNo(o.report.views.is_some_and(|(t, i)| t != i)),
        Observe::Landed(name) => Answer::Offsets(
            loaded
                .producer()
                .iter()
                .filter(|p| p.name.to_string() == name)
                .filter_map(|p| match p.landed {
                    Landed::At(o) => Some(o),
                    _ => None,
                })
                .collect(),
        ),
        Observe::Balances => Answer::Numbers(
            table
                .iter()
                .copied()
                .flatten()
                .filter(|r| r.handled != "-")
                .map(|r| r.balance)
                .collect(),
        ),
    }
}

/// A step of the `mqtt` scenario: `idem run mqtt`'s run ([`crate::mqtt`]), which has no
/// offsets, so it answers a total or a count of records only.
fn observe_mqtt(
    observe: Observe,
    store: Option<&str>,
    qos: Option<u8>,
    session: Option<&str>,
) -> anyhow::Result<Observed> {
    let store = store
        .and_then(StoreKind::from_name)
        .ok_or_else(|| anyhow::anyhow!("an mqtt lesson step names no store idem knows"))?;
    let qos = qos
        .and_then(idem_mqtt::codec::QoS::from_level)
        .ok_or_else(|| anyhow::anyhow!("an mqtt lesson step names no QoS 0, 1 or 2"))?;
    let ram = match session {
        Some("ram") => true,
        Some("flash") | None => false,
        other => anyhow::bail!("an mqtt lesson step keeps its session in {other:?}"),
    };
    let o = crate::mqtt::run(crate::mqtt::MqttRun { store, qos, ram })?;
    let value = match observe {
        Observe::FinalTotal => Answer::Number(o.end.state),
        Observe::FlashRecords => Answer::Number(o.end.records as i64),
        other => anyhow::bail!("an mqtt run has no offsets to observe {other:?} on"),
    };
    Ok(Observed {
        value,
        table: None,
        run: None,
    })
}

/// A step of the `pump` scenario: `idem run pump`'s run ([`crate::pump`]), which
/// answers the millilitres on the motor's own counter.
fn observe_pump(observe: Observe, run: &LessonRun) -> anyhow::Result<Observed> {
    let r = crate::pump::PumpRun {
        way: crate::pump::way(run.way)?,
        schedule: crate::pump::schedule(run.schedule, false)?,
    };
    let o = crate::pump::run(&r)?;
    let value = match observe {
        Observe::FinalTotal => Answer::Number(o.end.motor.pumped_ml as i64),
        other => anyhow::bail!("a pump run answers the millilitres pumped, not {other:?}"),
    };
    Ok(Observed {
        value,
        table: None,
        run: None,
    })
}

/// The command that reruns a step, with its trace.
pub fn run_line(r: &LessonRun) -> String {
    RunSpec {
        trace: true,
        ..RunSpec::from(r)
    }
    .command()
}

/// A prediction graded against its step's run.
pub struct Graded {
    /// What the learner said.
    pub said: Answer,
    /// What the run gives.
    pub observed: Observed,
}

impl Graded {
    /// Whether the prediction was right.
    pub fn right(&self) -> bool {
        self.said == self.observed.value
    }
}

/// What a learner is told after saying `said` where the run gave `seen`: the step's
/// explanation, and before it, for a tempting wrong answer, what that answer counts and
/// where it goes wrong, or for another wrong answer of a kind worth its own sentence
/// (a negative, a near miss, a list of the wrong length), that sentence.
pub fn feedback(step: &LessonStep, said: Option<&Answer>, seen: &Answer) -> String {
    feedback_in(step, said, seen, None)
}

/// [`feedback`], with what the run observed: an offset past the end of its log is read
/// as a number of another kind (a balance, say).
pub fn feedback_on(step: &LessonStep, said: Option<&Answer>, observed: &Observed) -> String {
    let events = observed.run.as_ref().map(|r| r.events);
    feedback_in(step, said, &observed.value, events)
}

fn feedback_in(
    step: &LessonStep,
    said: Option<&Answer>,
    seen: &Answer,
    events: Option<u64>,
) -> String {
    let Some(said) = said.filter(|s| *s != seen) else {
        return step.explain.to_string();
    };
    let tempting = step
        .tempting
        .iter()
        .find(|t| parse(step.observe, t.answer).as_ref() == Ok(said));
    match tempting {
        Some(t) => format!("{} {}", t.why, step.explain),
        None => match reading(step.observe, said, seen, events) {
            Some(r) => format!("{r} {}", step.explain),
            None => step.explain.to_string(),
        },
    }
}

/// A sentence on how a wrong answer that no step lists reads: a negative number, a
/// number of another kind, a near miss, a list of the wrong length, balances that go
/// down.
fn reading(observe: Observe, said: &Answer, seen: &Answer, events: Option<u64>) -> Option<String> {
    let position = matches!(observe, Observe::ResumeAt | Observe::NextOffset);
    match (said, seen) {
        (Answer::Number(n), _) if *n < 0 => Some(match observe {
            Observe::FinalTotal => format!(
                "{n} is negative, and every amount here is positive: a total starts at 0 and only grows."
            ),
            Observe::FlashRecords => format!("{n} is negative: a count of records starts at 0."),
            _ => format!("{n} is negative: offsets start at 0."),
        }),
        (Answer::Number(n), _) if position && events.is_some_and(|e| *n > e as i64) => {
            Some(format!(
                "{n} is past the end of the log, which holds offsets 0 to {}: it reads as a total, not an offset.",
                events.unwrap_or(0).saturating_sub(1)
            ))
        }
        (Answer::Number(n), Answer::Number(m)) if position && n + 1 == *m => Some(format!(
            "{n} is one short: a position names the next offset to read, one past the last one it covers."
        )),
        (Answer::Number(n), Answer::Number(m)) if position && *n == m + 1 => Some(format!(
            "{n} is one past: the position is the next offset to read, and the last one covered is one before it."
        )),
        (Answer::Number(n), Answer::Number(m)) if n.abs_diff(*m) == 1 => Some(format!(
            "{n} is one {} it: count again where each run of events starts and ends.",
            if n > m { "over" } else { "under" }
        )),
        (Answer::Offsets(a), Answer::Offsets(b)) => offsets_reading(a, b),
        (Answer::Numbers(a), Answer::Numbers(b)) => balances_reading(a, b),
        _ => None,
    }
}

/// Offsets off by one at an end of a range, or of the wrong count.
fn offsets_reading(said: &[u64], seen: &[u64]) -> Option<String> {
    let text = ranges(said);
    let whole = |o: &[u64]| o.windows(2).all(|w| w[1] == w[0] + 1) && !o.is_empty();
    if whole(said) && whole(seen) {
        let (a, b) = (said[0], said[said.len() - 1]);
        let (c, d) = (seen[0], seen[seen.len() - 1]);
        let end = match (a.abs_diff(c), b.abs_diff(d)) {
            (1, 0) => Some("start"),
            (0, 1) => Some("end"),
            _ => None,
        };
        if let Some(end) = end {
            return Some(format!(
                "{text} is off by one at its {end}: a range such as 3..7 holds both its ends, 3 and 7, and the question is which offsets come first and last."
            ));
        }
    }
    (said.len() != seen.len() && !said.is_empty()).then(|| {
        format!(
            "{text} names {} offsets, where the run's answer has {}.",
            said.len(),
            seen.len()
        )
    })
}

/// Balances of the wrong length, that go down where the run's never do, or with one
/// balance wrong.
fn balances_reading(said: &[i64], seen: &[i64]) -> Option<String> {
    let text = Answer::Numbers(said.to_vec()).to_string();
    // Right up to a balance, then down from it: the restart read as a fresh balance.
    let down = |b: &[i64]| b.windows(2).position(|w| w[1] < w[0]);
    let right_until = |i: usize| said.get(..=i) == seen.get(..=i);
    if let (Some(i), None) = (down(said), down(seen))
        && right_until(i)
    {
        return Some(format!(
            "{text} goes down, from {} to {}, as if the balance restarted with the position. The balance is in flash and survives the crash; only the position goes back.",
            said[i],
            said[i + 1]
        ));
    }
    if said.len() != seen.len() {
        return Some(format!(
            "{text} is {} balances; the run handled {} payments, replays included, and each leaves one.",
            said.len(),
            seen.len()
        ));
    }
    let wrong: Vec<usize> = (0..said.len()).filter(|&i| said[i] != seen[i]).collect();
    match wrong.as_slice() {
        [i] => Some(format!(
            "{text} has one balance wrong, number {}, {}: add that payment's amount to the balance before it again.",
            i + 1,
            said[*i]
        )),
        _ => None,
    }
}

/// Reads `text` as a prediction for `step`, then runs the step.
pub fn grade(step: &LessonStep, text: &str) -> Result<Graded, GradeError> {
    let said = parse(step.observe, text).map_err(GradeError::Unreadable)?;
    let observed = observe(step).map_err(GradeError::Run)?;
    Ok(Graded { said, observed })
}

/// Why a prediction could not be graded.
#[derive(Debug, thiserror::Error)]
pub enum GradeError {
    /// The prediction does not read as the answer the step asks for.
    #[error("{0}")]
    Unreadable(String),
    /// The step's run failed.
    #[error("{0:#}")]
    Run(anyhow::Error),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_number_reads_with_or_without_its_unit() {
        for typed in ["95", "95 ml", "95ml", " 95  ml ", "95 millilitres"] {
            assert_eq!(
                parse(Observe::FinalTotal, typed),
                Ok(Answer::Number(95)),
                "{typed}"
            );
        }
        assert_eq!(parse(Observe::FinalTotal, "-3 ml"), Ok(Answer::Number(-3)));
        assert_eq!(
            parse(Observe::FinalTotal, "forty"),
            Err("\"forty\" is not a whole number".into())
        );
        assert_eq!(
            parse(Observe::FinalTotal, "95 or 100"),
            Err("\"95 or 100\" is not a whole number".into())
        );
        assert_eq!(
            parse(Observe::FinalTotal, "95.5 ml"),
            Err("\"95.5 ml\" is not a whole number".into())
        );
        assert_eq!(
            parse(Observe::FinalTotal, "99999999999999999999 ml"),
            Err("99999999999999999999 is too large for any figure here".into())
        );
    }
}
