//! A lesson's answers: reading a learner's prediction, running a step's simulation and
//! reading its observation, and the worked example's step table. The CLI (`idem lesson`)
//! and the playground both grade with these; the questions are the core's
//! (`idem_sim::lesson`).

use clap::ValueEnum;
use idem_sim::lesson::{LessonRun, LessonStep, Observe};
use idem_sim::run::{Action, TraceStep};
use idem_sim::scenario::Landed;

use crate::render::ranges;
use crate::report::RunReport;
use crate::select::{
    self, FixArg, GuaranteeArg, IsolationArg, ProducerArg, ScenarioArgs, ScenarioKind, SinkChoice,
    StoreKind, WINDOW,
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
                "give an answer: offsets such as 3..7 or 0, 1, or none".into()
            }
            Observe::Diverged => "give an answer: yes or no".into(),
            _ => "give an answer: a whole number".into(),
        });
    }
    match observe {
        Observe::FinalTotal | Observe::ResumeAt | Observe::NextOffset | Observe::FlashRecords => {
            text.parse()
                .map(Answer::Number)
                .map_err(|_| format!("{text:?} is not a whole number"))
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
                .map(|p| {
                    p.parse()
                        .map_err(|_| format!("{p:?} is not a whole number"))
                })
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
            // "40 to 49" and "40-49" are ranges too.
            let text = text.to_ascii_lowercase().replace(" to ", "..");
            for part in text
                .split(|c: char| c == ',' || c.is_whitespace())
                .filter(|p| !p.is_empty())
            {
                let bad = || format!("{part:?} is not an offset or a range such as 40..49");
                match part.split_once("..").or_else(|| part.split_once('-')) {
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
    let LessonRun {
        scenario,
        store,
        fix,
        producer,
        guarantee,
        isolation,
        schedule,
        every,
        qos,
        session,
    } = step.run;
    if scenario == "mqtt" {
        return observe_mqtt(step.observe, store, qos, session);
    }
    let kind = ScenarioKind::from_name(scenario)
        .ok_or_else(|| anyhow::anyhow!("lesson names an unknown scenario {scenario:?}"))?;
    let fix = fix.and_then(|f| FixArg::ALL.into_iter().find(|x| x.name() == f));
    let args = ScenarioArgs {
        producer: ProducerArg::from_str(producer, true)
            .map_err(|e| anyhow::anyhow!("lesson names a producer {producer:?}: {e}"))?,
        guarantee: GuaranteeArg::from_str(guarantee, true)
            .map_err(|e| anyhow::anyhow!("lesson names a guarantee {guarantee:?}: {e}"))?,
        isolation: IsolationArg::from_str(isolation, true)
            .map_err(|e| anyhow::anyhow!("lesson names an isolation level {isolation:?}: {e}"))?,
        schedule: schedule.map(str::to_string),
        checkpoint_every: every,
        fix,
        ..ScenarioArgs::default()
    };
    let loaded = select::load(Some(kind), &args)?;
    let choice = match (store, fix) {
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
    let run = RunReport::new(&loaded, choice, &o);
    let value = match step.observe {
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
                .flatten()
                .filter(|r| r.handled != "-")
                .map(|r| r.balance)
                .collect(),
        ),
    };
    Ok(Observed {
        value,
        table,
        run: Some(run),
    })
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
/// where it goes wrong.
pub fn feedback(step: &LessonStep, said: Option<&Answer>, seen: &Answer) -> String {
    let tempting = said.filter(|s| *s != seen).and_then(|said| {
        step.tempting
            .iter()
            .find(|t| parse(step.observe, t.answer).as_ref() == Ok(said))
    });
    match tempting {
        Some(t) => format!("{} {}", t.why, step.explain),
        None => step.explain.to_string(),
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
