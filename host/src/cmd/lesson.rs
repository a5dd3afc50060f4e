//! `idem lesson <name>`: predict, then observe. Each step asks its question, takes the
//! learner's prediction (typed at a terminal, or given with `--answers`), runs the
//! simulator, and compares. The questions are the core's (`idem_core::lab::lesson`);
//! every answer comes from a run.

use std::io::{BufRead, IsTerminal, Write};
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use idem_core::lab::lesson::{self, Lesson, LessonRun, LessonStep, Observe};
use idem_core::lab::scenario::Landed;

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
    /// `0, 1`; yes or no). Without it, a terminal asks for each; otherwise each question
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
    YesNo(bool),
}

impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Number(n) => write!(f, "{n}"),
            Self::Offsets(o) => f.write_str(&ranges(o)),
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
        Observe::Redelivered | Observe::Landed(_) => {
            if text.eq_ignore_ascii_case("none") {
                return Ok(Value::Offsets(Vec::new()));
            }
            let mut out = Vec::new();
            for part in text.split(',').map(str::trim) {
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

/// Runs a step's simulation and reads its answer.
fn observe(step: &LessonStep) -> anyhow::Result<Value> {
    let LessonRun {
        scenario,
        store,
        fix,
        producer,
        schedule,
    } = step.run;
    let kind = ScenarioKind::from_name(scenario)
        .ok_or_else(|| anyhow::anyhow!("lesson names an unknown scenario {scenario:?}"))?;
    let fix = fix.and_then(|f| FixArg::ALL.into_iter().find(|x| x.name() == f));
    let args = ScenarioArgs {
        producer: ProducerArg::from_str(producer, true)
            .map_err(|e| anyhow::anyhow!("lesson names a producer {producer:?}: {e}"))?,
        schedule: schedule.map(str::to_string),
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
    let o = select::run(&loaded, choice, WINDOW_CAPACITY, false)?;
    select::ensure_every_crash_happened(&loaded, &o.report)?;
    Ok(match step.observe {
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
    })
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
                    return score(out, right, asked);
                };
                match parse(step.observe, &line) {
                    Ok(v) => break Some(v),
                    Err(e) => writeln!(out, "   {e}; try again")?,
                }
            },
            Predictions::None => None,
        };
        let seen = observe(step)?;
        let run = run_line(&step.run);
        match said {
            Some(said) => {
                asked += 1;
                if said == seen {
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
        writeln!(out, "   (run it: {run})\n")?;
    }
    score(out, right, asked)
}

/// The closing score, when anything was asked.
fn score(out: &mut impl Write, right: usize, asked: usize) -> anyhow::Result<()> {
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
        if key {
            let seen = observe(step)?;
            writeln!(
                out,
                "   **{seen}**. {} (`{}`)\n",
                step.explain,
                run_line(&step.run)
            )?;
        } else {
            writeln!(out, "   Prediction: ____________________\n")?;
        }
    }
    Ok(())
}
