//! `idem lesson <name>`: predict, then observe. Each step asks its question, takes the
//! learner's prediction (typed at a terminal, or given with `--answers`), runs the
//! simulator, and compares. The questions are the core's (`idem_core::lab::lesson`);
//! every answer comes from a run.

use std::io::{BufRead, IsTerminal, Write};
use std::process::ExitCode;

use clap::Args;
use idem_core::lab::lesson::{self, Lesson};
use idem_lab::grade::{Answer, Observed, Row, observe, parse, run_line};

use crate::error::usage;

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
    let mut summary: Vec<(&str, Option<Answer>, Answer)> = Vec::new();
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
        let Observed {
            value: seen, table, ..
        } = observe(step)?;
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
    summary: &[(&str, Option<Answer>, Answer)],
    right: usize,
    asked: usize,
) -> anyhow::Result<()> {
    if !summary.is_empty() {
        let w = summary.iter().map(|(l, ..)| l.len()).max().unwrap_or(0);
        let said: Vec<String> = summary
            .iter()
            .map(|(_, s, _)| s.as_ref().map_or(String::new(), Answer::to_string))
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
        let Observed {
            value: seen, table, ..
        } = observe(step)?;
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
