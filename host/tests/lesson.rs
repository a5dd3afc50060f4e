//! `idem lesson`: predict, then observe, scripted, without a terminal, on paper, and in
//! a real pseudo-terminal.

mod common;
use common::idem;

/// Each lesson with every answer right, and every answer wrong.
const LESSONS: [(&str, &str, &str, usize); 5] = [
    (
        "ddia",
        "40;40..49;110;100;40..49;100;40;100;100;10;40;yes;no",
        "0;1;2;3;4;5;41;60;6;7;8;no;yes",
        13,
    ),
    (
        "payments",
        "0, 1;3;13;8;8;0;20;5, 8, 13, 16, 20;12;9;13",
        "2;2;8;13;13;1;16;5 8 12;20;12;8",
        11,
    ),
    ("guarantees", "3;13;8;8;15;12", "8;8;13;13;12;15", 6),
    ("mqtt", "66;147;141;147;141;60", "141;141;147;141;147;30", 6),
    ("pump", "95;105;100;100", "100;100;105;102", 4),
];

fn stdout(args: &[&str]) -> String {
    let out = idem().args(args).write_stdin("").output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn right_answers_score_full_and_wrong_ones_are_each_compared() {
    for (name, right, wrong, n) in LESSONS {
        let text = stdout(&["lesson", name, "--answers", right]);
        assert!(
            text.contains(&format!("score: {n}/{n}\n")),
            "{name}: {text}"
        );
        assert_eq!(text.matches("   right: you said").count(), n, "{name}");
        let text = stdout(&["lesson", name, "--answers", wrong]);
        assert!(text.contains(&format!("score: 0/{n}\n")), "{name}: {text}");
        // The closing table fits 80 columns, as the lesson's own text does at a
        // terminal of that width.
        let table = &text[text.find("side by side:").unwrap()..];
        assert_eq!(table.lines().count(), n + 4, "{name}: {table}");
        assert!(table.lines().all(|l| l.len() <= 80), "{name}: {table}");
        assert_eq!(
            text.lines()
                .filter(|l| l.starts_with("   you said "))
                .count(),
            n,
            "{name}: a comparison for every step\n{text}"
        );
    }
    // An answer nobody listed gets the step's own explanation of the number it gave.
    let text = stdout(&[
        "lesson",
        "ddia",
        "--answers",
        "0;1;2;3;4;5;6;7;8;9;10;no;yes",
    ]);
    assert!(text.contains(
        "   you said 2; it is 110. 50 before the crash (0..49), then 60 after it (40..99): 110. Each redelivered event is added a second time: at-least-once delivery, 10 over the true 100.\n"
    ), "{text}");
}

/// The lesson's steps as the core holds them: the tempting wrong answers of every step.
fn tempting() -> Vec<(&'static str, usize, &'static idem_lab::lesson::Tempting)> {
    idem_lab::lesson::LESSONS
        .iter()
        .flat_map(|l| {
            l.steps
                .iter()
                .enumerate()
                .flat_map(move |(i, s)| s.tempting.iter().map(move |t| (l.name, i, t)))
        })
        .collect()
}

/// Every tempting wrong answer, typed: the program answers it with the explanation
/// written for it, which is not the right answer's, and the parts it names add up to
/// the number typed.
#[test]
fn each_tempting_wrong_answer_gets_its_own_explanation() {
    let all = tempting();
    assert!(all.len() >= 30, "{} tempting answers", all.len());
    for (name, right, _, n) in LESSONS {
        let right: Vec<&str> = right.split(';').collect();
        assert_eq!(right.len(), n);
        let lesson = idem_lab::lesson::lesson(name).unwrap();
        // Round r types each step's r-th tempting answer (the right one where a step
        // has fewer), so every tempting answer is typed once.
        let rounds = lesson.steps.iter().map(|s| s.tempting.len()).max().unwrap();
        for r in 0..rounds {
            let typed: Vec<&str> = lesson
                .steps
                .iter()
                .zip(&right)
                .map(|(s, right)| s.tempting.get(r).map_or(*right, |t| t.answer))
                .collect();
            let text = stdout(&["lesson", name, "--answers", &typed.join(";")]);
            for (i, step) in lesson.steps.iter().enumerate() {
                let Some(t) = step.tempting.get(r) else {
                    continue;
                };
                assert_ne!(t.answer, right[i], "{name} {}: tempting but right", i + 1);
                assert_ne!(t.why, step.explain, "{name} {}", i + 1);
                let said = format!("you said {}; it is ", t.answer);
                let line = text
                    .lines()
                    .find(|l| l.contains(&said) && l.contains(t.why))
                    .unwrap_or_else(|| {
                        panic!("{name} {}: {:?} is not explained:\n{text}", i + 1, t.answer)
                    });
                assert!(
                    line.ends_with(&format!("{} {}", t.why, step.explain)),
                    "{line}"
                );
                if let Ok(value) = t.answer.parse::<i64>() {
                    assert_eq!(
                        t.parts.iter().sum::<i64>(),
                        value,
                        "{name} {}: the parts of {value}",
                        i + 1
                    );
                    for part in t.parts {
                        assert!(
                            t.why.contains(&part.abs().to_string()),
                            "{name} {}: {part} is not named in {:?}",
                            i + 1,
                            t.why
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn without_a_terminal_each_question_is_followed_by_its_observation() {
    for (name, _, _, n) in LESSONS {
        let text = stdout(&["lesson", name]);
        let questions = (1..=n)
            .filter(|i| text.contains(&format!("\n{i}. ")))
            .count();
        assert_eq!(questions, n, "{name}: every question\n{text}");
        assert_eq!(text.matches("   observed: ").count(), n, "{name}");
        assert!(!text.contains("score:"), "nothing was predicted");
    }
    assert!(
        stdout(&["lesson", "payments"])
            .contains("   observed: 0..1. 0 and 1: a retry is a new append")
    );
}

/// The payments lesson's worked example: the step table drawn from the run (committed as
/// the next offset to read), its "committed = 2" variant, the commit before handling, and
/// "p19 instead of the retry".
#[test]
fn the_worked_example_draws_the_lessons_step_table() {
    let text = stdout(&[
        "lesson",
        "payments",
        "--answers",
        "0, 1;3;13;8;8;0;20;8, 5, 13, 16, 20;12;9;8",
    ]);
    assert!(text.contains(
        "   you said 8, 5, 13, 16, 20; it is 5, 8, 13, 16, 20. The committed offset stays 0"
    ));
    assert!(
        text.contains(
            "\
   step                      offset handled  committed (next to read)  balance
   handle offset 0           0               0                               5
   handle offset 1           1               0                               8
   crash, then restart at 0  -               0                               8
   handle offset 0 again     0 again         0                              13
   handle offset 1 again     1 again         0                              16
   handle offset 2           2               3                              20
"
        ),
        "{text}"
    );
    assert!(text.contains(
        "   right: you said 12; it is 12. 8 before the crash, and the restart begins at the saved place, 2"
    ));
    assert!(text.contains("(run it: idem run worked-example --store naive --checkpoint-every 2 --schedule crash@commit:1 --trace)"));
    assert!(text.contains("   right: you said 9; it is 9. 5 before the crash, then the restart reads from 2, past offset 1"));
    assert!(text.contains("(run it: idem run worked-example --store naive --checkpoint-every 1 --guarantee at-most-once --schedule crash@commit:1 --trace)"), "{text}");
    assert!(text.contains("   you said 8; it is 13. 8 = 5 + 3 skips p19 for having p17's amount."));
    // The closing table puts every step side by side.
    assert!(
        text.contains(
            "  worked example: balances in order      8, 5, 13, 16, 20  5, 8, 13, 16, 20\n"
        ),
        "{text}"
    );
    assert!(text.contains("score: 9/11\n"), "{text}");
    // On paper the rows are blank and numbered; the key fills in every cell.
    let sheet = stdout(&["lesson", "payments", "--worksheet"]);
    assert!(
        sheet.contains("   | 1 |  |  |  |\n   | 2 |  |  |  |\n"),
        "{sheet}"
    );
    // As many rows as the key's table, the crash's among them.
    assert!(sheet.contains("   | 6 |  |  |  |\n\n"), "{sheet}");
    assert!(sheet.contains(
        "   Questions 6 to 8 share one run. Then run: `idem run worked-example --store naive --trace`\n\n   - Observed (6): ____"
    ), "{sheet}");
    let key = stdout(&["lesson", "payments", "--key"]);
    assert!(key.contains("   | crash, then restart at 0 | - | 0 | 8 |\n   | handle offset 0 again | 0 again | 0 | 13 |\n"));
    assert!(key.contains("   | handle offset 2 | 2 | 3 | 20 |\n"));
}

/// A sheet to hand out: a name line, and for each question room for the prediction, the
/// observation and why, with the command to run after predicting; no question's answer
/// anywhere on it. The key fills in all three.
#[test]
fn worksheets_give_nothing_away_and_keys_fill_in_all_three() {
    for (name, right, _, n) in LESSONS {
        let sheet = stdout(&["lesson", name, "--worksheet"]);
        assert!(sheet.starts_with("# ") && sheet.contains("(worksheet)"));
        assert_eq!(sheet.matches("Name: ____").count(), 1, "{name}");
        for field in ["Prediction: ____", "   - Observed", "   - Why"] {
            assert_eq!(sheet.matches(field).count(), n, "{name}: {field}");
        }
        // Questions that share a run are predicted together, then run once.
        let runs = match name {
            "ddia" => 9,
            "payments" => 8,
            "guarantees" => 6,
            "pump" => 4,
            _ => 5,
        };
        assert_eq!(
            sheet.matches("Then run: `idem run ").count(),
            runs,
            "{name}\n{sheet}"
        );
        for spoiler in ["0 again", "8 in all", "writes 110", "40..49", "0..1"] {
            assert!(
                !sheet.contains(spoiler),
                "{name}: {spoiler:?} on the sheet\n{sheet}"
            );
        }
        let key = stdout(&["lesson", name, "--key"]);
        assert_eq!(key, stdout(&["lesson", name, "--worksheet", "--key"]));
        assert!(key.contains("(answer key)"));
        for (i, answer) in right.split(';').enumerate() {
            let shown = match answer {
                "0, 1" => "0..1".to_string(),
                "5, 8, 13, 16, 20" => answer.to_string(),
                a => a.to_string(),
            };
            assert!(
                key.contains(&format!(
                    "   - Prediction: **{shown}**\n   - Observed: {shown} (`idem run "
                )),
                "{name} {}: {shown}\n{key}",
                i + 1
            );
        }
        assert_eq!(key.matches("   - Why: ").count(), n, "{name}");
    }
    let html = stdout(&["lesson", "ddia", "--worksheet", "--format", "html"]);
    assert!(html.starts_with("<!doctype html>\n"), "{html}");
    assert!(html.contains("@media print"));
    assert!(html.contains("<p class=\"name\">Name: <span class=\"blank\"></span></p>"));
    assert_eq!(html.matches("<li>").count(), 13);
    assert!(!html.contains("110"), "no answer on the printed sheet");
    let key = stdout(&["lesson", "ddia", "--key", "--format", "html"]);
    assert!(
        key.contains("<dt>Prediction</dt><dd><strong>110</strong></dd>"),
        "{key}"
    );
}

#[test]
fn bad_answers_are_refused_before_anything_runs() {
    for (args, message) in [
        (
            &["lesson", "ddia", "--answers", "0;1"][..],
            "--answers has 2 answers for the 13 questions of the ddia lesson",
        ),
        (
            &[
                "lesson",
                "ddia",
                "--answers",
                "x;1;2;3;4;5;6;7;8;9;10;no;no",
            ],
            "--answers, answer 1: \"x\" is not a whole number",
        ),
        (
            &[
                "lesson",
                "ddia",
                "--answers",
                "0;1;2;3;4;5;6;7;8;9;10;maybe;no",
            ],
            "--answers, answer 12: \"maybe\": answer yes or no",
        ),
        (
            &["lesson", "ddia", "--answers", "0;;2;3;4;5;6;7;8;9;10;no;no"],
            "--answers, answer 2: give an answer: offsets such as 3..7 or 3, 5, or none",
        ),
        (
            &["lesson", "ddia", "--worksheet", "--answers", "0"],
            "--worksheet and --key print a sheet to hand out, --answers grades predictions: give one or the other",
        ),
        (
            &["lesson", "ddia", "--format", "html"],
            "--format chooses a sheet's format: give it with --worksheet or --key",
        ),
    ] {
        let out = idem().args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(message), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "one sentence: {err}");
    }
}

/// Ranges as people write them.
#[test]
fn ranges_read_as_people_write_them() {
    for typed in [
        "40..49",
        "40-49",
        "40 to 49",
        "40, 41, 42, 43, 44, 45, 46, 47, 48, 49",
    ] {
        let text = stdout(&[
            "lesson",
            "ddia",
            "--answers",
            &format!("40;{typed};110;100;40..49;100;40;100;100;10;40;yes;no"),
        ]);
        assert!(text.contains("score: 13/13"), "{typed}: {text}");
    }
}

/// A real pseudo-terminal (util-linux `script`): a wrong answer to the first question, a
/// right one to the second, then `q`. Both comparisons appear on the screen.
#[test]
fn typed_at_a_terminal_a_wrong_then_a_right_prediction() {
    // Bounded: the lesson stops at `q`; the helper gives up after 30 s.
    let screen = common::in_a_terminal("lesson ddia", b"0\n\n40..49\nq\n");
    assert!(
        screen.contains("you said 0; it is 40."),
        "the wrong prediction is compared:\n{screen}"
    );
    assert!(
        screen.contains("right: you said 40..49; it is 40..49."),
        "the right prediction is confirmed:\n{screen}"
    );
    assert!(
        screen.contains("give an answer: offsets such as 3..7 or 3, 5, or none; try again"),
        "an empty Enter asks again:\n{screen}"
    );
    assert!(screen.contains("score: 1/2"), "{screen}");
}

/// At a terminal 80 columns wide every line of every lesson fits: the text wraps at word
/// boundaries, the tables are narrower.
#[test]
fn at_80_columns_every_line_fits() {
    use std::io::{Read, Write};
    use std::process::{Command, Stdio};
    for (name, right, _, n) in LESSONS {
        let command = format!(
            "stty cols 80 rows 50; exec {} lesson {name}",
            env!("CARGO_BIN_EXE_idem")
        );
        let mut child = Command::new("script")
            .args(["-qfec", &command, "/dev/null"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("script (util-linux) runs a command in a pseudo-terminal");
        let input = right.replace(';', "\n") + "\n";
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        // Bounded: the lesson ends after its last answer; give up after 60 s.
        let started = std::time::Instant::now();
        while child.try_wait().unwrap().is_none() {
            if started.elapsed() > std::time::Duration::from_secs(60) {
                let _ = child.kill();
                panic!("idem lesson {name} did not end");
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let mut screen = String::new();
        child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut screen)
            .unwrap();
        assert!(
            screen.contains(&format!("score: {n}/{n}")),
            "{name}: {screen}"
        );
        // A line as the terminal shows it: what follows the last carriage return. The
        // answers were all typed before the first prompt, so the terminal echoed them
        // there, and the Enter that ends each prompt's line is among them.
        let screen = screen.replace("(q to stop)> ", "(q to stop)>\n");
        let wide: Vec<&str> = screen
            .lines()
            .map(|l| l.rsplit('\r').next().unwrap_or(l))
            .filter(|l| l.chars().count() > 80)
            .collect();
        assert!(wide.is_empty(), "{name}: {wide:#?}");
    }
}

/// The pump story's commands, as docs/lessons.md prints them, each run: the motor's
/// counter each ends at.
#[test]
fn the_pump_storys_commands_run() {
    let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/lessons.md"))
        .unwrap();
    let commands: Vec<&str> = page
        .lines()
        .filter_map(|l| l.strip_prefix("cargo run --release -- run pump "))
        .collect();
    let counters: Vec<String> = commands
        .iter()
        .map(|c| {
            let mut args = vec!["run", "pump"];
            args.extend(c.split(' '));
            let text = stdout(&args);
            let end = text.lines().find(|l| l.starts_with("way ")).unwrap();
            let shown = end.split(" ml,").next().unwrap();
            shown.rsplit(' ').next().unwrap().to_string()
        })
        .collect();
    assert_eq!(counters, ["95", "105", "100", "100"], "{commands:?}");
}
