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
    ("payments", "0, 1;13;8;8;0;20", "2;8;13;13;1;16", 6),
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
