//! `idem lesson <name>`: predict, then observe. Each step asks its question, takes the
//! learner's prediction (typed at a terminal, or given with `--answers`), runs the
//! simulator, and compares. The questions are idem-lab's (`idem_lab::lesson`);
//! every answer comes from a run.

mod sheet;

use std::io::{BufRead, IsTerminal, Read, Write};
use std::process::ExitCode;

use clap::Args;
use idem_lab::grade::{Answer, Observed, Row, feedback_on, observe, parse, run_line};
use idem_lab::lesson::{self, Lesson, Observe};

use idem_lab::error::usage;
use sheet::sheet;

/// Predict, then observe: a lesson's questions, each answered by a run.
#[derive(Debug, Args)]
pub struct Cmd {
    /// The lesson: ddia, payments, guarantees, mqtt or pump.
    name: String,
    /// Your predictions, in order, separated by `;` (offset lists as `3..7` or
    /// `3, 5` or `3 5`; yes or no). Without it, a terminal asks for each; otherwise each question
    /// is followed by its observation.
    #[arg(long, value_name = "ANSWERS")]
    answers: Option<String>,
    /// Print the questions as a fill-in sheet to hand out instead: for each, room for
    /// the prediction, the observation and why; the questions that share a run are
    /// grouped, every prediction before the command that answers them.
    #[arg(long)]
    worksheet: bool,
    /// The answer key: the sheet with all three filled in, each answer taken from its
    /// run (implies --worksheet).
    #[arg(long)]
    key: bool,
    /// The sheet's format: md (Markdown) or html (a printable page, one lesson per sheet).
    #[arg(long, value_enum, default_value = "md", value_name = "FORMAT")]
    format: SheetFormat,
}

/// `--format` of a sheet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum SheetFormat {
    /// Markdown.
    Md,
    /// A printable HTML page, with a print stylesheet.
    Html,
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
        if (self.worksheet || self.key) && self.answers.is_some() {
            return Err(usage(
                "--worksheet and --key print a sheet to hand out, --answers grades predictions: give one or the other",
            ));
        }
        if self.worksheet || self.key {
            let sheet = sheet(lesson, self.key)?;
            match self.format {
                SheetFormat::Md => write!(out, "{}", sheet.markdown())?,
                SheetFormat::Html => write!(out, "{}", sheet.html())?,
            }
            out.flush()?;
            return Ok(ExitCode::SUCCESS);
        }
        if self.format != SheetFormat::Md {
            return Err(usage(
                "--format chooses a sheet's format: give it with --worksheet or --key",
            ));
        }
        let predictions = match &self.answers {
            Some(a) => {
                let given: Vec<&str> = a.split(';').collect();
                if given.len() != lesson.steps.len() {
                    return Err(usage(format!(
                        "--answers has {} for the {} questions of the {} lesson",
                        idem_lab::render::count(given.len() as u64, "answer"),
                        lesson.steps.len(),
                        lesson.name
                    )));
                }
                // Every answer must read before anything runs.
                for (i, (step, a)) in lesson.steps.iter().zip(&given).enumerate() {
                    parse(step.observe, a).map_err(|e| {
                        usage(format!("--answers, answer {}: {}", i + 1, shorten(&e)))
                    })?;
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

/// `text` as lines of at most `width` columns, broken at word boundaries, the first
/// line starting with `first` and the rest indented by `rest`; as one line without a
/// width (output that is not a terminal).
fn wrap(text: &str, width: Option<usize>, first: &str, rest: &str) -> String {
    match width {
        Some(w) => textwrap::fill(
            text,
            textwrap::Options::new(w)
                .initial_indent(first)
                .subsequent_indent(rest),
        ),
        None => format!("{first}{text}"),
    }
}

fn teach(
    out: &mut impl Write,
    lesson: &Lesson,
    predictions: Predictions<'_>,
) -> anyhow::Result<()> {
    // On a terminal, text wraps at word boundaries to its width.
    let width = std::io::stdout()
        .is_terminal()
        .then(|| textwrap::termwidth().max(20));
    let say = |out: &mut dyn Write, first: &str, rest: &str, text: &str| {
        writeln!(out, "{}", wrap(text, width, first, rest))
    };
    writeln!(out, "{}\n", lesson.title)?;
    say(out, "", "", lesson.intro)?;
    writeln!(out)?;
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let (mut right, mut asked) = (0, 0);
    let mut summary: Vec<(&str, Option<Answer>, Answer)> = Vec::new();
    for (i, step) in lesson.steps.iter().enumerate() {
        say(out, &format!("{}. ", i + 1), "   ", step.question)?;
        let said = match &predictions {
            Predictions::Given(given) => {
                Some(parse(step.observe, given[i]).map_err(|e| usage(shorten(&e)))?)
            }
            Predictions::Typed => match prompt(out, &mut input, step.observe)? {
                Some(said) => Some(said),
                None => return score(out, &summary, right, asked),
            },
            Predictions::None => None,
        };
        let observed = observe(step)?;
        let why = feedback_on(step, said.as_ref(), &observed);
        let Observed {
            value: seen, table, ..
        } = observed;
        let run = run_line(&step.run);
        match &said {
            Some(said) => {
                asked += 1;
                if *said == seen {
                    right += 1;
                    say(
                        out,
                        "   ",
                        "   ",
                        &format!("right: you said {said}; it is {seen}. {why}"),
                    )?;
                } else {
                    say(
                        out,
                        "   ",
                        "   ",
                        &format!("you said {said}; it is {seen}. {why}"),
                    )?;
                }
            }
            None => say(out, "   ", "   ", &format!("observed: {seen}. {why}"))?,
        }
        if let Some(rows) = &table {
            print_table(out, rows)?;
        }
        say(out, "   ", "   ", &format!("(run it: {run})"))?;
        writeln!(out)?;
        summary.push((step.label, said, seen));
    }
    score(out, &summary, right, asked)
}

/// Asks for a prediction at the terminal until one reads as the answer `observe` asks
/// for; `None` when the learner stops (`q`, or the end of the input).
fn prompt(
    out: &mut impl Write,
    input: &mut impl BufRead,
    observe: Observe,
) -> anyhow::Result<Option<Answer>> {
    loop {
        write!(out, "   your prediction (q to stop)> ")?;
        out.flush()?;
        let line = match read_answer(input)? {
            Typed::Line(line) => line,
            Typed::TooLong(n) => {
                writeln!(
                    out,
                    "   that answer is {n} bytes long, more than the {MAX_ANSWER} an answer may have; try again"
                )?;
                continue;
            }
            Typed::NotText => {
                writeln!(out, "   that answer is not UTF-8 text; try again")?;
                continue;
            }
            Typed::End => {
                writeln!(out)?;
                return Ok(None);
            }
        };
        if matches!(line.trim(), "q" | "quit") {
            writeln!(out)?;
            return Ok(None);
        }
        match parse(observe, &line) {
            Ok(v) => return Ok(Some(v)),
            Err(e) => writeln!(out, "   {}; try again", shorten(&e))?,
        }
    }
}

/// The longest answer read at a prompt, in bytes (1,000 balances fit).
const MAX_ANSWER: usize = 16 * 1024;
/// The longest message about an answer, in characters: longer ones are shortened.
const MAX_MESSAGE: usize = 200;

/// One line typed at the prompt.
#[derive(Debug, PartialEq, Eq)]
enum Typed {
    /// A line of text, without its line end.
    Line(String),
    /// A line of more than [`MAX_ANSWER`] bytes (its length), skipped to its end.
    TooLong(u64),
    /// A line that is not UTF-8.
    NotText,
    /// The end of the input.
    End,
}

/// Reads one line from `input`, holding at most [`MAX_ANSWER`] bytes of it.
fn read_answer(input: &mut impl BufRead) -> std::io::Result<Typed> {
    let mut buf = Vec::new();
    let n = input
        .by_ref()
        .take(MAX_ANSWER as u64 + 1)
        .read_until(b'\n', &mut buf)?;
    if n == 0 {
        return Ok(Typed::End);
    }
    if buf.last() != Some(&b'\n') && buf.len() > MAX_ANSWER {
        // The rest of the line, read and dropped a buffer at a time.
        let mut total = buf.len() as u64;
        loop {
            let chunk = input.fill_buf()?;
            if chunk.is_empty() {
                break;
            }
            match chunk.iter().position(|&b| b == b'\n') {
                Some(i) => {
                    total += i as u64;
                    input.consume(i + 1);
                    break;
                }
                None => {
                    let len = chunk.len();
                    total += len as u64;
                    input.consume(len);
                }
            }
        }
        return Ok(Typed::TooLong(total));
    }
    Ok(match String::from_utf8(buf) {
        Ok(line) => Typed::Line(line.trim_end_matches(['\n', '\r']).to_string()),
        Err(_) => Typed::NotText,
    })
}

/// `message` shortened to at most about [`MAX_MESSAGE`] characters: its start and its
/// end (which says what was wrong), and how much was left out between them.
fn shorten(message: &str) -> String {
    let chars = message.chars().count();
    if chars <= MAX_MESSAGE {
        return message.to_string();
    }
    let (head, tail) = (MAX_MESSAGE / 2, MAX_MESSAGE / 4);
    let start: String = message.chars().take(head).collect();
    let end: String = message.chars().skip(chars - tail).collect();
    format!(
        "{start}[... {} characters left out ...]{end}",
        chars - head - tail
    )
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prompt_reads_one_bounded_line_at_a_time() {
        let mut long = vec![b'7'; MAX_ANSWER + 10];
        long.push(b'\n');
        let mut input: Vec<u8> = b"40\r\n\xff\n".to_vec();
        input.extend_from_slice(&long);
        input.extend_from_slice(b"q");
        let mut r = std::io::Cursor::new(input);
        assert_eq!(read_answer(&mut r).unwrap(), Typed::Line("40".into()));
        assert_eq!(read_answer(&mut r).unwrap(), Typed::NotText);
        assert_eq!(
            read_answer(&mut r).unwrap(),
            Typed::TooLong(MAX_ANSWER as u64 + 10)
        );
        assert_eq!(read_answer(&mut r).unwrap(), Typed::Line("q".into()));
        assert_eq!(read_answer(&mut r).unwrap(), Typed::End);
    }

    #[test]
    fn a_long_message_keeps_its_start_and_its_end() {
        let e = format!("{:?} is not a whole number", "x".repeat(1000));
        let s = shorten(&e);
        assert_eq!(
            s.chars().count(),
            150 + "[... 874 characters left out ...]".len()
        );
        assert!(s.starts_with("\"xxx"), "{s}");
        assert!(s.ends_with("xxx\" is not a whole number"), "{s}");
        assert!(s.contains("[... 874 characters left out ...]"), "{s}");
        assert_eq!(shorten("short"), "short");
    }
}
