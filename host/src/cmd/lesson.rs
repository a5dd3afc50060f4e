//! `idem lesson <name>`: predict, then observe. Each step asks its question, takes the
//! learner's prediction (typed at a terminal, or given with `--answers`), runs the
//! simulator, and compares. The questions are the core's (`idem_core::lab::lesson`);
//! every answer comes from a run.

use std::io::{BufRead, IsTerminal, Write};
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use idem_core::lab::lesson::{self, Lesson, LessonRun, LessonStep, Observe};
use idem_core::lab::scenario::Landed;
use idem_core::lab::sim::{Action, TraceStep};

use crate::error::usage;
use crate::render::ranges;
use crate::select::{
    self, FixArg, ProducerArg, ScenarioArgs, ScenarioKind, SinkChoice, StoreKind, WINDOW_CAPACITY,
};

/// Predict, then observe: a lesson's questions, each answered by a run.
#[derive(Debug, Args)]
pub struct Cmd {
    /// The lesson: ddia, payments or guarantees.
    name: String,
    /// Your predictions, in order, separated by `;` (offset lists as `40..49` or
    /// `0, 1` or `0 1`; yes or no). Without it, a terminal asks for each; otherwise each question
    /// is followed by its observation.
    #[arg(long, value_name = "ANSWERS")]
    answers: Option<String>,
    /// Print the questions as a Markdown fill-in sheet instead.
    #[arg(long)]
    worksheet: bool,
    /// With --worksheet: the answer key, each answer taken from its run.
    #[arg(long, requires = "worksheet")]
    key: bool,
}

/// An observed (or predicted) answer.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Value {
    Number(i64),
    Offsets(Vec<u64>),
    Numbers(Vec<i64>),
    YesNo(bool),
}

impl std::fmt::Display for Value {
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
fn parse(observe: Observe, text: &str) -> Result<Value, String> {
    let text = text.trim();
    match observe {
        Observe::FinalTotal | Observe::ResumeAt | Observe::FlashRecords => text
            .parse()
            .map(Value::Number)
            .map_err(|_| format!("{text:?} is not a whole number")),
        Observe::Diverged => match text.to_ascii_lowercase().as_str() {
            "yes" | "y" => Ok(Value::YesNo(true)),
            "no" | "n" => Ok(Value::YesNo(false)),
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
                n => Ok(Value::Numbers(n)),
            }
        }
        Observe::Redelivered | Observe::Landed(_) => {
            if text.eq_ignore_ascii_case("none") {
                return Ok(Value::Offsets(Vec::new()));
            }
            let mut out = Vec::new();
            for part in text
                .split(|c: char| c == ',' || c.is_whitespace())
                .filter(|p| !p.is_empty())
            {
                let bad = || format!("{part:?} is not an offset or a range such as 40..49");
                match part.split_once("..") {
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
            Ok(Value::Offsets(out))
        }
    }
}

/// A step's observation: its answer, and the run's step table when the step asks for
/// one.
struct Observed {
    value: Value,
    table: Option<Vec<Row>>,
}

/// A row of a worked example's step table.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Row {
    what: String,
    handled: String,
    committed: u64,
    balance: i64,
    /// Where the restart after this row's crash resumed.
    restart: Option<u64>,
}

impl Row {
    /// The step column; `reveal` adds where a restart resumed (a worksheet leaves it to
    /// the learner).
    fn step(&self, reveal: bool) -> String {
        match self.restart {
            Some(at) if reveal => format!("{} at {at}", self.what),
            _ => self.what.clone(),
        }
    }
}

/// The step table of a run, as the payments lesson draws it: one row per event handled
/// (applied or skipped) and one for each crash; the committed offset is the next offset
/// to read, after any commit that follows the handling.
fn step_table(trace: &[TraceStep]) -> Vec<Row> {
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

/// Prints a step table, indented under its step.
fn print_table(out: &mut impl Write, rows: &[Row]) -> std::io::Result<()> {
    let w = rows
        .iter()
        .map(|r| r.step(true).len())
        .max()
        .unwrap_or(0)
        .max(4);
    writeln!(
        out,
        "   {:<w$}  {:<14}  {:<24}  balance",
        "step", "offset handled", "committed (next to read)"
    )?;
    for r in rows {
        writeln!(
            out,
            "   {:<w$}  {:<14}  {:<24}  {:>7}",
            r.step(true),
            r.handled,
            r.committed,
            r.balance
        )?;
    }
    Ok(())
}

/// Runs a step's simulation and reads its answer.
fn observe(step: &LessonStep) -> anyhow::Result<Observed> {
    let LessonRun {
        scenario,
        store,
        fix,
        producer,
        schedule,
        every,
    } = step.run;
    let kind = ScenarioKind::from_name(scenario)
        .ok_or_else(|| anyhow::anyhow!("lesson names an unknown scenario {scenario:?}"))?;
    let fix = fix.and_then(|f| FixArg::ALL.into_iter().find(|x| x.name() == f));
    let args = ScenarioArgs {
        producer: ProducerArg::from_str(producer, true)
            .map_err(|e| anyhow::anyhow!("lesson names a producer {producer:?}: {e}"))?,
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
    let tabled = step.observe == Observe::Balances;
    let o = select::run(&loaded, choice, WINDOW_CAPACITY, tabled)?;
    select::ensure_every_crash_happened(&loaded, &o.report)?;
    let table = o.trace.as_deref().map(step_table);
    let value = match step.observe {
        Observe::FinalTotal => Value::Number(o.report.final_total),
        Observe::ResumeAt => Value::Number(o.report.resume_at_crash.unwrap_or(0) as i64),
        Observe::FlashRecords => Value::Number(o.report.flash.writes as i64),
        Observe::Redelivered => Value::Offsets(o.redelivered),
        Observe::Diverged => Value::YesNo(o.report.views.is_some_and(|(t, i)| t != i)),
        Observe::Landed(name) => Value::Offsets(
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
        Observe::Balances => Value::Numbers(
            table
                .iter()
                .flatten()
                .filter(|r| r.handled != "-")
                .map(|r| r.balance)
                .collect(),
        ),
    };
    Ok(Observed { value, table })
}

/// Where predictions come from.
enum Predictions<'a> {
    /// `--answers`, in order.
    Given(Vec<&'a str>),
    /// Typed at the terminal.
    Typed,
    /// None: each question is followed by its observation.
    None,
}

impl Cmd {
    /// Runs the command.
    pub fn run(self) -> anyhow::Result<ExitCode> {
        let lesson = lesson::lesson(&self.name).ok_or_else(|| {
            usage(format!(
                "unknown lesson {:?}: one of {}",
                self.name,
                lesson::LESSONS.map(|l| l.name).join(", ")
            ))
        })?;
        let mut out = std::io::stdout().lock();
        if self.worksheet {
            worksheet(&mut out, lesson, self.key)?;
            return Ok(ExitCode::SUCCESS);
        }
        let predictions = match &self.answers {
            Some(a) => {
                let given: Vec<&str> = a.split(';').collect();
                if given.len() != lesson.steps.len() {
                    return Err(usage(format!(
                        "--answers has {} answers for the {} questions of the {} lesson",
                        given.len(),
                        lesson.steps.len(),
                        lesson.name
                    )));
                }
                // Every answer must read before anything runs.
                for (i, (step, a)) in lesson.steps.iter().zip(&given).enumerate() {
                    parse(step.observe, a)
                        .map_err(|e| usage(format!("--answers, answer {}: {e}", i + 1)))?;
                }
                Predictions::Given(given)
            }
            None if std::io::stdin().is_terminal() => Predictions::Typed,
            None => Predictions::None,
        };
        teach(&mut out, lesson, predictions)?;
        Ok(ExitCode::SUCCESS)
    }
}

fn teach(
    out: &mut impl Write,
    lesson: &Lesson,
    predictions: Predictions<'_>,
) -> anyhow::Result<()> {
    writeln!(out, "{}\n\n{}\n", lesson.title, lesson.intro)?;
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    let (mut right, mut asked) = (0, 0);
    let mut summary: Vec<(&str, Option<Value>, Value)> = Vec::new();
    for (i, step) in lesson.steps.iter().enumerate() {
        writeln!(out, "{}. {}", i + 1, step.question)?;
        let said = match &predictions {
            Predictions::Given(given) => Some(parse(step.observe, given[i]).map_err(usage)?),
            Predictions::Typed => loop {
                write!(out, "   your prediction (q to stop)> ")?;
                out.flush()?;
                let line = lines.next().transpose()?;
                let Some(line) = line.filter(|l| !matches!(l.trim(), "q" | "quit")) else {
                    writeln!(out)?;
                    return score(out, &summary, right, asked);
                };
                match parse(step.observe, &line) {
                    Ok(v) => break Some(v),
                    Err(e) => writeln!(out, "   {e}; try again")?,
                }
            },
            Predictions::None => None,
        };
        let Observed { value: seen, table } = observe(step)?;
        let run = run_line(&step.run);
        match &said {
            Some(said) => {
                asked += 1;
                if *said == seen {
                    right += 1;
                    writeln!(
                        out,
                        "   right: you said {said}; it is {seen}. {}",
                        step.explain
                    )?;
                } else {
                    writeln!(out, "   you said {said}; it is {seen}. {}", step.explain)?;
                }
            }
            None => writeln!(out, "   observed: {seen}. {}", step.explain)?,
        }
        if let Some(rows) = &table {
            print_table(out, rows)?;
        }
        writeln!(out, "   (run it: {run})\n")?;
        summary.push((step.label, said, seen));
    }
    score(out, &summary, right, asked)
}

/// The closing table (every step so far side by side: what was said, what was seen) and
/// the score, when anything was asked.
fn score(
    out: &mut impl Write,
    summary: &[(&str, Option<Value>, Value)],
    right: usize,
    asked: usize,
) -> anyhow::Result<()> {
    if !summary.is_empty() {
        let w = summary.iter().map(|(l, ..)| l.len()).max().unwrap_or(0);
        let said: Vec<String> = summary
            .iter()
            .map(|(_, s, _)| s.as_ref().map_or(String::new(), Value::to_string))
            .collect();
        let sw = said.iter().map(String::len).max().unwrap_or(0).max(8);
        if asked > 0 {
            writeln!(
                out,
                "side by side:\n  {:<w$}  {:<sw$}  observed",
                "step", "you said"
            )?;
        } else {
            writeln!(out, "side by side:\n  {:<w$}  observed", "step")?;
        }
        for ((label, _, seen), said) in summary.iter().zip(&said) {
            if asked > 0 {
                writeln!(out, "  {label:<w$}  {said:<sw$}  {seen}")?;
            } else {
                writeln!(out, "  {label:<w$}  {seen}")?;
            }
        }
        writeln!(out)?;
    }
    if asked > 0 {
        writeln!(out, "score: {right}/{asked}")?;
    }
    out.flush()?;
    Ok(())
}

/// The command that reruns a step.
fn run_line(r: &LessonRun) -> String {
    let mut line = format!("idem run {}", r.scenario);
    if let Some(s) = r.store {
        line += &format!(" --store {s}");
    }
    if let Some(f) = r.fix {
        line += &format!(" --fix {f}");
    }
    if r.producer != "plain" {
        line += &format!(" --producer {}", r.producer);
    }
    if let Some(k) = r.every {
        line += &format!(" --checkpoint-every {k}");
    }
    if let Some(s) = r.schedule {
        line += &format!(" --schedule {s}");
    }
    line + " --trace"
}

fn worksheet(out: &mut impl Write, lesson: &Lesson, key: bool) -> anyhow::Result<()> {
    let what = if key { "answer key" } else { "worksheet" };
    writeln!(out, "# {} ({what})\n\n{}\n", lesson.title, lesson.intro)?;
    if !key {
        writeln!(
            out,
            "Write your prediction for each question before you run anything.\n"
        )?;
    }
    for (i, step) in lesson.steps.iter().enumerate() {
        writeln!(out, "{}. {}\n", i + 1, step.question)?;
        let Observed { value: seen, table } = observe(step)?;
        if key {
            writeln!(
                out,
                "   **{seen}**. {} (`{}`)\n",
                step.explain,
                run_line(&step.run)
            )?;
        } else {
            writeln!(out, "   Prediction: ____________________\n")?;
        }
        if let Some(rows) = table {
            // The lesson's table: the steps are given, the cells to fill in are blank on
            // the sheet and filled in the key.
            writeln!(
                out,
                "   | Step | Offset handled | Committed offset (next to read) | Balance |\n   |---|---|---|---|"
            )?;
            for r in rows {
                let (committed, balance) = if key {
                    (r.committed.to_string(), r.balance.to_string())
                } else {
                    (String::new(), String::new())
                };
                writeln!(
                    out,
                    "   | {} | {} | {committed} | {balance} |",
                    r.step(key),
                    r.handled
                )?;
            }
            writeln!(out)?;
        }
    }
    Ok(())
}
