//! `idem lesson`: predict, then observe, scripted, without a terminal, on paper, and in
//! a real pseudo-terminal.

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::idem;

/// Each lesson with every answer right, and every answer wrong.
const LESSONS: [(&str, &str, &str, usize); 3] = [
    (
        "ddia",
        "40;40..49;110;100;100;10;40;yes",
        "0;1;2;3;4;5;6;no",
        8,
    ),
    (
        "payments",
        "0, 1;13;8;8;0;20;5, 8, 13, 16, 20;12;13",
        "2;8;13;13;1;16;5 8 12;20;8",
        9,
    ),
    ("guarantees", "3;13;8;8", "8;8;13;13", 4),
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
        assert_eq!(
            text.lines()
                .filter(|l| l.starts_with("   you said "))
                .count(),
            n,
            "{name}: a comparison for every step\n{text}"
        );
    }
    let text = stdout(&["lesson", "ddia", "--answers", "0;1;2;3;4;5;6;no"]);
    assert!(text.contains(
        "   you said 2; it is 110. Each redelivered event is added a second time: at-least-once delivery.\n"
    ));
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
    assert!(stdout(&["lesson", "payments"]).contains("   observed: 0..1. A retry is a new append"));
}

/// The payments lesson's worked example: the step table drawn from the run (committed as
/// the next offset to read), its "committed = 2" variant and "p19 instead of the retry".
#[test]
fn the_worked_example_draws_the_lessons_step_table() {
    let text = stdout(&[
        "lesson",
        "payments",
        "--answers",
        "0, 1;13;8;8;0;20;8, 5, 13, 16, 20;12;8",
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
    assert!(
        text.contains("   right: you said 12; it is 12. The restart begins at the saved place, 2")
    );
    assert!(text.contains("(run it: idem run worked-example --store naive --checkpoint-every 2 --schedule crash@commit:1 --trace)"));
    assert!(text.contains("   you said 8; it is 13. A new id is a new payment"));
    // The closing table puts every step side by side.
    assert!(
        text.contains(
            "  worked example: balance after each step       8, 5, 13, 16, 20  5, 8, 13, 16, 20\n"
        ),
        "{text}"
    );
    assert!(text.contains("score: 7/9\n"));
    // On paper the step column is given, with the restart's offset left to the learner;
    // the key fills in every cell.
    let sheet = stdout(&["lesson", "payments", "--worksheet"]);
    assert!(sheet.contains(
        "   | crash, then restart | - |  |  |\n   | handle offset 0 again | 0 again |  |  |\n"
    ));
    let key = stdout(&["lesson", "payments", "--worksheet", "--key"]);
    assert!(key.contains("   | crash, then restart at 0 | - | 0 | 8 |\n   | handle offset 0 again | 0 again | 0 | 13 |\n"));
    assert!(key.contains("   | handle offset 2 | 2 | 3 | 20 |\n"));
}

#[test]
fn worksheets_and_their_keys_print() {
    for (name, _, _, n) in LESSONS {
        let sheet = stdout(&["lesson", name, "--worksheet"]);
        assert_eq!(sheet.matches("Prediction: ____").count(), n, "{name}");
        assert!(sheet.starts_with("# ") && sheet.contains("(worksheet)"));
        let key = stdout(&["lesson", name, "--worksheet", "--key"]);
        assert_eq!(key.matches("   **").count(), n, "{name}");
    }
    let key = stdout(&["lesson", "guarantees", "--worksheet", "--key"]);
    assert!(key.contains("   **3**. Nothing is duplicated"), "{key}");
}

#[test]
fn bad_answers_are_refused_before_anything_runs() {
    for (answers, message) in [
        (
            "0;1",
            "--answers has 2 answers for the 8 questions of the ddia lesson",
        ),
        (
            "x;1;2;3;4;5;6;no",
            "--answers, answer 1: \"x\" is not a whole number",
        ),
        (
            "0;1;2;3;4;5;6;maybe",
            "--answers, answer 8: \"maybe\": answer yes or no",
        ),
    ] {
        let out = idem()
            .args(["lesson", "ddia", "--answers", answers])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&out.stderr).contains(message));
    }
}

/// A real pseudo-terminal (util-linux `script`): a wrong answer to the first question, a
/// right one to the second, then `q`. Both comparisons appear on the screen.
#[test]
fn typed_at_a_terminal_a_wrong_then_a_right_prediction() {
    let command = format!("{} lesson ddia", env!("CARGO_BIN_EXE_idem"));
    let mut child = Command::new("script")
        .args(["-qfec", &command, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("script (util-linux) runs a command in a pseudo-terminal");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"0\n40..49\nq\n")
        .unwrap();
    // Bounded: the lesson stops at `q`; give up after 30 s.
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            panic!("the lesson did not stop at q");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut screen = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut screen)
        .unwrap();
    assert!(
        screen.contains("you said 0; it is 40."),
        "the wrong prediction is compared:\n{screen}"
    );
    assert!(
        screen.contains("right: you said 40..49; it is 40..49."),
        "the right prediction is confirmed:\n{screen}"
    );
    assert!(screen.contains("score: 1/2"), "{screen}");
}
