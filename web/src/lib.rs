//! idem's playground: the core compiled to WebAssembly for a static page.
//!
//! Every function takes and returns JSON text (the page parses it): `{"ok": ...}` with
//! the answer, or `{"error": "one sentence"}`. Every rule and every figure comes from
//! `idem-core` through `idem-lab`, exactly as `idem run --json` computes it; the page only
//! draws what these return.

use clap::ValueEnum;
use idem_lab::choice::store_words;
use idem_lab::grade::{self, Answer, GradeError, Observed, Row};
use idem_lab::lesson::{self, Observe};
use idem_lab::matrix::{self, MatrixReport};
use idem_lab::report::RunReport;
use idem_lab::select::{ScenarioKind, StoreKind};
use idem_lab::spec::{self, RunSpec};
use serde::Serialize;
use serde_json::{Value, json};
use wasm_bindgen::prelude::wasm_bindgen;

/// The most events the playground runs with a trace (about 2.4 MB of JSON for 10,000
/// events with a crash); longer logs are the CLI's.
pub const MAX_TRACED_EVENTS: u64 = 100_000;

/// A choice's one-line description: the CLI's help text for it.
fn about<T: ValueEnum>(v: &T) -> String {
    v.to_possible_value()
        .and_then(|p| p.get_help().map(ToString::to_string))
        .unwrap_or_default()
}

fn ok(v: impl Serialize) -> String {
    // Straight to text: a 10,000-event trace is some 20,000 steps, and a detour through
    // `serde_json::Value` doubles the time it takes.
    match serde_json::to_string(&v) {
        Ok(v) => format!("{{\"ok\":{v}}}"),
        Err(e) => error(format!("the answer could not be written as JSON: {e}")),
    }
}

fn error(message: impl std::fmt::Display) -> String {
    json!({ "error": message.to_string() }).to_string()
}

/// Runs one scenario (a [`RunSpec`] as JSON: `{"scenario": "ddia", "store": "naive",
/// "checkpoint_every": 10, "schedule": "crash@effect:49", "trace": true}`) and returns
/// `idem run --json`'s report.
#[wasm_bindgen]
pub fn run(spec_json: &str) -> String {
    match run_spec(spec_json) {
        Ok(r) => ok(r),
        Err(e) => error(format!("{e:#}")),
    }
}

fn run_spec(spec_json: &str) -> anyhow::Result<RunReport> {
    let spec: RunSpec = serde_json::from_str(spec_json)
        .map_err(|e| anyhow::anyhow!("not a run description: {e}"))?;
    if spec.trace && spec.events.is_some_and(|n| n > MAX_TRACED_EVENTS) {
        anyhow::bail!(
            "the playground draws up to {MAX_TRACED_EVENTS} events; run longer logs with the idem CLI"
        );
    }
    spec::run(&spec)
}

/// The `idem run` command line of a [`RunSpec`] (JSON), for a person to paste; empty
/// when the JSON is not a run description.
#[wasm_bindgen]
pub fn cli_line(spec_json: &str) -> String {
    serde_json::from_str::<RunSpec>(spec_json)
        .map(|s| s.command())
        .unwrap_or_default()
}

/// Offsets (a JSON array) as the CLI writes them: `40..49`, `0..1, 5`, `none`; empty when
/// the JSON is not an array of offsets.
#[wasm_bindgen]
pub fn ranges(offsets_json: &str) -> String {
    serde_json::from_str::<Vec<u64>>(offsets_json)
        .map(|o| idem_lab::render::ranges(&o))
        .unwrap_or_default()
}

/// The scenarios and stores the playground offers, with their one-line descriptions.
#[wasm_bindgen]
pub fn catalogue() -> String {
    let scenarios: Vec<Value> = [
        ScenarioKind::Ddia,
        ScenarioKind::WorkedExample,
        ScenarioKind::Payments,
        ScenarioKind::SameAmount,
        ScenarioKind::Resend,
        ScenarioKind::Zombie,
        ScenarioKind::LateRetry,
    ]
    .iter()
    .map(|k| json!({ "name": k.name(), "about": about(k) }))
    .collect();
    let stores: Vec<Value> = StoreKind::ALL
        .iter()
        .map(
            |k| json!({ "name": k.name(), "about": store_words(*k), "idempotent": k.idempotent() }),
        )
        .collect();
    ok(json!({ "scenarios": scenarios, "stores": stores }))
}

/// The lessons: name, title, setting, and each step's label, question, the kind of
/// answer it asks for, and the command that reruns it.
#[wasm_bindgen]
pub fn lessons() -> String {
    let lessons: Vec<Value> = lesson::LESSONS
        .iter()
        .map(|l| {
            json!({
                "name": l.name,
                "title": l.title,
                "intro": l.intro,
                "steps": l.steps.iter().map(|s| json!({
                    "label": s.label,
                    "question": s.question,
                    "answer": answer_kind(s.observe),
                    "run": grade::run_line(&s.run),
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    ok(lessons)
}

/// What kind of answer a step asks for, for the page's input hint.
fn answer_kind(o: Observe) -> &'static str {
    match o {
        Observe::FinalTotal | Observe::ResumeAt | Observe::NextOffset | Observe::FlashRecords => {
            "number"
        }
        Observe::Redelivered | Observe::Skipped | Observe::Landed(_) => "offsets",
        Observe::Diverged => "yes-no",
        Observe::Balances => "numbers",
    }
}

fn answer_text(a: &Answer) -> String {
    a.to_string()
}

fn row_json(r: &Row) -> Value {
    json!({
        "step": r.step(true),
        "handled": r.handled,
        "committed": r.committed,
        "balance": r.balance,
    })
}

fn observed_json(step: &lesson::LessonStep, o: &Observed) -> Value {
    json!({
        "observed": answer_text(&o.value),
        "explain": step.explain,
        "table": o.table.as_ref().map(|t| t.iter().map(row_json).collect::<Vec<_>>()),
        "run": o.run,
        "command": grade::run_line(&step.run),
        // The playground runs the simulator's scenarios; an MQTT or pump run is the CLI's.
        "spec": (!matches!(step.run.scenario, "mqtt" | "pump")).then(|| RunSpec::from(&step.run)),
    })
}

fn step_of(lesson: &str, step: usize) -> Result<&'static lesson::LessonStep, String> {
    let l = lesson::lesson(lesson).ok_or_else(|| format!("unknown lesson {lesson:?}"))?;
    l.steps
        .get(step)
        .ok_or_else(|| format!("the {} lesson has {} steps", l.name, l.steps.len()))
}

/// Grades a prediction for step `step` (from 0) of `lesson`: `{"ok": {"said", "right",
/// "observed", "explain", "table", "run", "command"}}`, or `{"unreadable": "why"}` when
/// the prediction does not read as the answer the step asks for.
#[wasm_bindgen]
pub fn grade(lesson: &str, step: usize, prediction: &str) -> String {
    let s = match step_of(lesson, step) {
        Ok(s) => s,
        Err(e) => return error(e),
    };
    match grade::grade(s, prediction) {
        Ok(g) => {
            let mut v = observed_json(s, &g.observed);
            // The explanation of the number given: a tempting wrong answer gets its own.
            v["explain"] = grade::feedback(s, Some(&g.said), &g.observed.value).into();
            v["said"] = answer_text(&g.said).into();
            v["right"] = g.right().into();
            ok(v)
        }
        Err(GradeError::Unreadable(why)) => json!({ "unreadable": why }).to_string(),
        Err(e @ GradeError::Run(_)) => error(e),
    }
}

/// Runs step `step` of `lesson` without a prediction: what it observes.
#[wasm_bindgen]
pub fn observe(lesson: &str, step: usize) -> String {
    let s = match step_of(lesson, step) {
        Ok(s) => s,
        Err(e) => return error(e),
    };
    match grade::observe(s) {
        Ok(o) => ok(observed_json(s, &o)),
        Err(e) => error(format!("{e:#}")),
    }
}

/// The matrix: every store against every fault, each cell with the run (as a
/// [`RunSpec`]) that explains it.
#[wasm_bindgen]
pub fn matrix() -> String {
    match matrix_json() {
        Ok(v) => ok(v),
        Err(e) => error(format!("{e:#}")),
    }
}

fn matrix_json() -> anyhow::Result<Value> {
    let rows = matrix::table(&StoreKind::ALL, &matrix::FAULTS)?;
    Ok(serde_json::to_value(MatrixReport::new(
        &rows,
        &matrix::FAULTS,
    ))?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Value {
        serde_json::from_str(s).unwrap()
    }

    #[test]
    fn ddia_naive_over_and_offset_exact() {
        let naive = parse(&run(r#"{"scenario":"ddia","store":"naive"}"#));
        assert_eq!(naive["ok"]["final_total"], 110);
        let offset = parse(&run(r#"{"scenario":"ddia","store":"offset"}"#));
        assert_eq!(offset["ok"]["final_total"], 100);
        assert_eq!(offset["ok"]["skipped"].as_array().unwrap().len(), 10);
    }

    /// The page's matrix is `idem matrix --json`'s table of the stores, field for field
    /// (`host/tests/cli.rs` checks the CLI's side of the same shape).
    #[test]
    fn the_matrix_is_the_clis_serialisation() {
        let m = parse(&matrix());
        let m = &m["ok"];
        assert_eq!(
            m["faults"][0],
            json!({"name": "consumer-crash", "title": "consumer crash"})
        );
        let cell = &m["rows"][0]["cells"][0];
        let mut keys: Vec<&str> = cell
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            [
                "fault",
                "final_total",
                "flash_writes",
                "isolation",
                "producer",
                "scenario",
                "spec",
                "true_total",
                "verdict"
            ]
        );
        assert_eq!(
            (
                &m["rows"][0]["store"],
                &cell["verdict"],
                &cell["final_total"]
            ),
            (&json!("naive"), &json!("over"), &json!(110))
        );
    }

    #[test]
    fn bad_input_is_one_sentence() {
        let e = parse(&run(r#"{"scenario":"ddia","store":"nope"}"#));
        assert_eq!(
            e["error"],
            "unknown store \"nope\": one of naive, offset, message-id, producer-seq, atomic, two-phase, set, max, unique-key"
        );
        let e = parse(&run("{garbage"));
        assert!(
            e["error"]
                .as_str()
                .unwrap()
                .starts_with("not a run description")
        );
        let e = parse(&run(
            r#"{"scenario":"ddia","store":"naive","schedule":"crash@effect:500"}"#,
        ));
        assert_eq!(
            e["error"],
            "cannot crash at offset 500: the log has offsets 0..=99"
        );
    }

    #[test]
    fn a_lesson_step_is_graded() {
        let wrong = parse(&grade("ddia", 2, "100"));
        assert_eq!(wrong["ok"]["right"], false);
        assert_eq!(wrong["ok"]["said"], "100");
        assert_eq!(wrong["ok"]["observed"], "110");
        let g = parse(&grade("ddia", 0, "40"));
        assert_eq!(g["ok"]["right"], true);
        let u = parse(&grade("ddia", 0, "forty"));
        assert_eq!(u["unreadable"], "\"forty\" is not a whole number");
    }

    #[test]
    fn a_pump_step_names_its_cli_run_and_offers_no_playground_run() {
        let g = parse(&grade("pump", 1, "110"));
        assert_eq!(g["ok"]["observed"], "105");
        assert_eq!(g["ok"]["command"], "idem run pump --way reassert --trace");
        assert!(g["ok"]["spec"].is_null(), "{g}");
    }
}
