//! A lesson's sheet to hand out, in Markdown or HTML: a worksheet of its questions, or
//! the answer key with every answer taken from a run.

use idem_lab::grade::{Observed, Row, observe, run_line};
use idem_lab::lesson::{Lesson, Observe};

/// A lesson's sheet to hand out: its questions, and for the key their answers.
pub(super) struct Sheet {
    title: String,
    intro: &'static str,
    key: bool,
    questions: Vec<SheetQuestion>,
}

/// One question of a sheet.
struct SheetQuestion {
    question: &'static str,
    /// The command to run after predicting.
    run: String,
    /// For the key: the answer and why.
    answer: Option<(String, String)>,
    /// The step table's rows, when the question asks for one: the key's are the run's,
    /// a worksheet's are blank (`None`), as many as the key's.
    table: Option<Vec<Option<Row>>>,
    /// On a worksheet, the questions before this one that share its run (their
    /// predictions are written before it runs once, after the last of them).
    shared: usize,
}

/// The sheet of `lesson`; with `key`, every answer is taken from its run. A worksheet
/// takes from a run only the number of rows of a step table, and groups the questions
/// that share a run: every prediction of the group before the one run that answers them.
pub(super) fn sheet(lesson: &Lesson, key: bool) -> anyhow::Result<Sheet> {
    let mut questions: Vec<SheetQuestion> = Vec::new();
    for step in lesson.steps {
        let (answer, table) = if key {
            let Observed {
                value: seen, table, ..
            } = observe(step)?;
            let rows = table.map(|rows| rows.into_iter().map(Some).collect());
            (Some((seen.to_string(), step.explain.to_string())), rows)
        } else if step.observe == Observe::Balances {
            let rows = observe(step)?.table.map_or(0, |t| t.len());
            (None, Some(vec![None; rows]))
        } else {
            (None, None)
        };
        let run = run_line(&step.run);
        let shared = match questions.last() {
            Some(q) if !key && q.run == run => q.shared + 1,
            _ => 0,
        };
        questions.push(SheetQuestion {
            question: step.question,
            run,
            answer,
            table,
            shared,
        });
    }
    Ok(Sheet {
        title: lesson.title.to_string(),
        intro: lesson.intro,
        key,
        questions,
    })
}

/// How to use a worksheet.
const HOW: &str = "Write your prediction before you run anything. Then run the command \
that follows, write what you observe, and why. Questions that share one run are grouped: \
write every prediction of the group before you run it.";

/// A blank to write in.
const BLANK: &str = "______________________________________";

impl Sheet {
    fn what(&self) -> &'static str {
        if self.key { "answer key" } else { "worksheet" }
    }

    /// The sheet in Markdown.
    pub(super) fn markdown(&self) -> String {
        let mut s = format!("# {} ({})\n\n", self.title, self.what());
        if !self.key {
            s += &format!("Name: {BLANK}\n\n");
        }
        s += &format!("{}\n\n", self.intro);
        if !self.key {
            s += &format!("{HOW}\n\n");
        }
        for (i, q) in self.questions.iter().enumerate() {
            s += &format!("{}. {}\n\n", i + 1, q.question);
            match &q.answer {
                Some((seen, why)) => {
                    s += &format!(
                        "   - Prediction: **{seen}**\n   - Observed: {seen} (`{}`)\n   - Why: {why}\n\n",
                        q.run
                    );
                }
                None => s += &format!("   - Prediction: {BLANK}\n\n"),
            }
            if let Some(rows) = &q.table {
                s += &markdown_table(rows);
            }
            if q.answer.is_none() && self.last_of_group(i) {
                s += &self.markdown_run(i);
            }
        }
        s
    }

    /// [`Self::markdown_run`] in HTML.
    fn html_run(&self, i: usize) -> String {
        let q = &self.questions[i];
        let first = i - q.shared;
        let mut s = if q.shared == 0 {
            String::from("<dl>\n")
        } else {
            format!("<p>{} share one run.</p>\n<dl>\n", group(first, i))
        };
        s += &format!(
            "<dt>Then run</dt><dd><code>{}</code></dd>\n",
            escape(&q.run)
        );
        for n in first + 1..=i + 1 {
            let at = if q.shared == 0 {
                String::new()
            } else {
                format!(" ({n})")
            };
            s += &format!(
                "<dt>Observed{at}</dt><dd class=\"blank\"></dd>\n<dt>Why{at}</dt><dd class=\"blank\"></dd><dd class=\"blank\"></dd>\n"
            );
        }
        s + "</dl>\n"
    }

    /// Whether question `i` (from 0) is the last of the questions that share its run.
    fn last_of_group(&self, i: usize) -> bool {
        self.questions.get(i + 1).is_none_or(|n| n.shared == 0)
    }

    /// A worksheet's run, after the last question `i` of its group, with room for what
    /// each question of the group observes.
    fn markdown_run(&self, i: usize) -> String {
        let q = &self.questions[i];
        let first = i - q.shared;
        if q.shared == 0 {
            return format!(
                "   - Then run: `{}`\n   - Observed: {BLANK}\n   - Why: {BLANK}\n\n",
                q.run
            );
        }
        let mut s = format!(
            "   {} share one run. Then run: `{}`\n\n",
            group(first, i),
            q.run
        );
        for n in first + 1..=i + 1 {
            s += &format!("   - Observed ({n}): {BLANK}\n   - Why ({n}): {BLANK}\n");
        }
        s + "\n"
    }

    /// The sheet as a printable HTML page.
    pub(super) fn html(&self) -> String {
        let e = escape;
        let mut s = format!(
            "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{} ({})</title>\n<style>\n{HTML_STYLE}</style>\n</head>\n<body>\n<h1>{} <small>({})</small></h1>\n",
            e(&self.title),
            self.what(),
            e(&self.title),
            self.what()
        );
        if !self.key {
            s += "<p class=\"name\">Name: <span class=\"blank\"></span></p>\n";
        }
        s += &format!("<p>{}</p>\n", e(self.intro));
        if !self.key {
            s += &format!("<p>{HOW}</p>\n");
        }
        s += "<ol>\n";
        for (i, q) in self.questions.iter().enumerate() {
            s += &format!("<li>\n<p>{}</p>\n<dl>\n", e(q.question));
            match &q.answer {
                Some((seen, why)) => {
                    s += &format!(
                        "<dt>Prediction</dt><dd><strong>{}</strong></dd>\n<dt>Observed</dt><dd>{} (<code>{}</code>)</dd>\n<dt>Why</dt><dd>{}</dd>\n",
                        e(seen),
                        e(seen),
                        e(&q.run),
                        e(why)
                    );
                }
                None => s += "<dt>Prediction</dt><dd class=\"blank\"></dd>\n",
            }
            s += "</dl>\n";
            if let Some(rows) = &q.table {
                s += &html_table(rows);
            }
            if q.answer.is_none() && self.last_of_group(i) {
                s += &self.html_run(i);
            }
            s += "</li>\n";
        }
        s += "</ol>\n</body>\n</html>\n";
        s
    }
}

/// Questions `first` to `last` (from 0), in words.
fn group(first: usize, last: usize) -> String {
    let word = if last == first + 1 { "and" } else { "to" };
    format!("Questions {} {word} {}", first + 1, last + 1)
}

/// A step table in Markdown: the key's rows, or a worksheet's blank numbered rows.
fn markdown_table(rows: &[Option<Row>]) -> String {
    let mut s = String::from(
        "   | Step | Offset handled | Committed offset (next to read) | Balance |\n   |---|---|---|---|\n",
    );
    for (n, r) in rows.iter().enumerate() {
        match r {
            Some(r) => {
                s += &format!(
                    "   | {} | {} | {} | {} |\n",
                    r.step(true),
                    r.handled,
                    r.committed,
                    r.balance
                );
            }
            // Only the row number: what each row handles is part of what the learner
            // works out.
            None => s += &format!("   | {} |  |  |  |\n", n + 1),
        }
    }
    s + "\n"
}

/// A step table in HTML: the key's rows, or a worksheet's blank numbered rows.
fn html_table(rows: &[Option<Row>]) -> String {
    let mut s = String::from(
        "<table>\n<thead><tr><th>Step</th><th>Offset handled</th><th>Committed offset (next to read)</th><th>Balance</th></tr></thead>\n<tbody>\n",
    );
    for (n, r) in rows.iter().enumerate() {
        match r {
            Some(r) => {
                s += &format!(
                    "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
                    escape(&r.step(true)),
                    escape(&r.handled),
                    r.committed,
                    r.balance
                );
            }
            None => s += &format!("<tr><td>{}</td><td></td><td></td><td></td></tr>\n", n + 1),
        }
    }
    s + "</tbody>\n</table>\n"
}

/// A printable sheet's style: lines to write on, and a page per lesson when printed.
const HTML_STYLE: &str =
    "body { font: 12pt/1.45 Georgia, serif; max-width: 46em; margin: 2em auto; padding: 0 1em; }
h1 small { font-weight: normal; color: #555; }
.blank { display: block; border-bottom: 1px solid #444; min-height: 1.6em; }
p.name .blank { display: inline-block; width: 22em; }
dl { display: grid; grid-template-columns: 8em 1fr; gap: 0.3em 0.8em; }
dt { font-weight: bold; grid-column: 1; }
dd { margin: 0; grid-column: 2; }
li { margin-bottom: 1.4em; break-inside: avoid; }
table { border-collapse: collapse; margin: 0.6em 0; }
td, th { border: 1px solid #444; padding: 0.2em 0.6em; min-width: 5em; height: 1.4em; }
code { font-size: 0.95em; }
@media print {
  body { margin: 0; max-width: none; }
  @page { margin: 1.6cm; }
  h1 { break-before: page; }
  h1:first-of-type { break-before: auto; }
}
";

/// `text` with HTML's special characters escaped: four replacements, written here
/// rather than taken from a crate for a page that only idem's own texts fill.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            _ => out.push(c),
        }
    }
    out
}
