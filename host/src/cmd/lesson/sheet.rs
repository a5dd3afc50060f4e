//! A lesson's sheet to hand out, in Markdown or HTML: a worksheet of its questions, or
//! the answer key with every answer taken from a run.

use idem_lab::grade::{Observed, Row, observe, run_line};
use idem_sim::lesson::{Lesson, Observe};

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
    /// a worksheet's are blank (`None`).
    table: Option<Vec<Option<Row>>>,
}

/// How many blank rows a worksheet's step table has.
const BLANK_ROWS: usize = 8;

/// The sheet of `lesson`; with `key`, every answer is taken from its run. Nothing on a
/// sheet without `key` comes from a run, so no question answers another.
pub(super) fn sheet(lesson: &Lesson, key: bool) -> anyhow::Result<Sheet> {
    let mut questions = Vec::new();
    for step in lesson.steps {
        let (answer, table) = if key {
            let Observed {
                value: seen, table, ..
            } = observe(step)?;
            let rows = table.map(|rows| rows.into_iter().map(Some).collect());
            (Some((seen.to_string(), step.explain.to_string())), rows)
        } else {
            // Blank rows, as many as a learner may need: their number is not the run's.
            let blank = (step.observe == Observe::Balances).then(|| vec![None; BLANK_ROWS]);
            (None, blank)
        };
        questions.push(SheetQuestion {
            question: step.question,
            run: run_line(&step.run),
            answer,
            table,
        });
    }
    Ok(Sheet {
        title: lesson.title.to_string(),
        intro: lesson.intro,
        key,
        questions,
    })
}

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
            s += "For each question, write your prediction before you run anything. Then run \
the command under it, write what you observe, and why.\n\n";
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
                None => {
                    s += &format!(
                        "   - Prediction: {BLANK}\n   - Then run: `{}`\n   - Observed: {BLANK}\n   - Why: {BLANK}\n\n",
                        q.run
                    );
                }
            }
            if let Some(rows) = &q.table {
                s += "   | Step | Offset handled | Committed offset (next to read) | Balance |\n   |---|---|---|---|\n";
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
                        // Only the row number: what each row handles is part of what the
                        // learner works out.
                        None => s += &format!("   | {} |  |  |  |\n", n + 1),
                    }
                }
                s += "\n";
            }
        }
        s
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
            s += "<p>For each question, write your prediction before you run anything. Then run the command under it, write what you observe, and why.</p>\n";
        }
        s += "<ol>\n";
        for q in &self.questions {
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
                None => {
                    s += &format!(
                        "<dt>Prediction</dt><dd class=\"blank\"></dd>\n<dt>Then run</dt><dd><code>{}</code></dd>\n<dt>Observed</dt><dd class=\"blank\"></dd>\n<dt>Why</dt><dd class=\"blank\"></dd><dd class=\"blank\"></dd>\n",
                        e(&q.run)
                    );
                }
            }
            s += "</dl>\n";
            if let Some(rows) = &q.table {
                s += "<table>\n<thead><tr><th>Step</th><th>Offset handled</th><th>Committed offset (next to read)</th><th>Balance</th></tr></thead>\n<tbody>\n";
                for (n, r) in rows.iter().enumerate() {
                    match r {
                        Some(r) => {
                            s += &format!(
                                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
                                e(&r.step(true)),
                                e(&r.handled),
                                r.committed,
                                r.balance
                            );
                        }
                        None => {
                            s += &format!(
                                "<tr><td>{}</td><td></td><td></td><td></td></tr>\n",
                                n + 1
                            );
                        }
                    }
                }
                s += "</tbody>\n</table>\n";
            }
            s += "</li>\n";
        }
        s += "</ol>\n</body>\n</html>\n";
        s
    }
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
