//! The truth files' rules, tested.

use super::*;

#[test]
fn a_key_set_holds_each_key_once_by_its_bytes() {
    let mut keys = KeySet::default();
    let many: Vec<String> = (0..5000).map(|i| format!("k{i}")).collect();
    for k in &many {
        assert_eq!(keys.insert(k.as_bytes()), Ok(true));
    }
    let mut insert = |k: &[u8]| keys.insert(k).unwrap();
    assert!(!insert(b"k17") && !insert(b"k4999"));
    assert!(insert(b"k5000") && insert(b"") && !insert(b""));
    assert!(insert(b"k1\0") && insert(b"\0k1"));
    assert_eq!(keys.len(), 5004);
    let long = vec![7u8; MAX_KEY + 1];
    assert_eq!(keys.insert(&long), Err(TruthError::IdTooLong(MAX_KEY + 1)));
    assert_eq!(keys.insert(&long[..MAX_KEY]), Ok(true));
    assert_eq!(keys.insert(&long[..MAX_KEY]), Ok(false));
}

/// The sentence a truth file holding `text` is refused with.
fn refused(text: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl");
    std::fs::write(&path, text).unwrap();
    format!("{:#}", TruthFile::read(&path).unwrap_err()).replace(&*path.to_string_lossy(), "T")
}

const HEAD: &str = "{\"idem_truth\":1,\"writer\":\"mqtt publish\",\"qos\":2}\n";
const P17: &str = "{\"id\": \"p17\", \"payer\": \"ada\", \"amount\": 5}\n";

#[test]
fn idem_writes_a_truth_whole_or_leaves_none_under_its_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sent.jsonl");
    std::fs::write(&path, P17).unwrap();
    let mut w = TruthWriter::create(&path, "kafka produce", None).unwrap();
    w.payment("p1", "ada", 5).unwrap();
    w.flush().unwrap();
    assert!(!path.exists(), "the earlier truth is removed at the start");
    // A writer stopped before its end (an error; a signal removes it the same way).
    drop(w);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    let mut w = TruthWriter::create(&path, "kafka produce", None).unwrap();
    // Its first line is in the file at once: a SIGKILL now leaves a file that says
    // whose it is (refused for its missing end line), never an empty one.
    let tmp: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(
        std::fs::read_to_string(tmp[0].as_ref().unwrap().path()).unwrap(),
        "{\"idem_truth\":1,\"writer\":\"kafka produce\"}\n"
    );
    for (id, amount) in [("p1", 5), ("p2", 3), ("p1", 5)] {
        w.payment(id, "ada", amount).unwrap();
    }
    assert_eq!(w.finish().unwrap(), 3);
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        "{\"idem_truth\":1,\"writer\":\"kafka produce\"}\n\
         {\"id\": \"p1\", \"payer\": \"ada\", \"amount\": 5}\n\
         {\"id\": \"p2\", \"payer\": \"ada\", \"amount\": 3}\n\
         {\"id\": \"p1\", \"payer\": \"ada\", \"amount\": 5}\n\
         {\"idem_truth_end\":3}\n"
    );
    let t = TruthFile::read(&path).unwrap();
    assert_eq!((t.total, t.ids, t.sent, t.unconfirmed), (8, 2, 3, false));
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

#[test]
fn a_truth_idem_did_not_finish_is_refused_and_others_are_read() {
    assert_eq!(
        refused(&format!("{HEAD}{P17}")),
        "T was written by idem mqtt publish and has no end line: its writer stopped before it finished, so it may lack what was sent; publish again"
    );
    assert_eq!(
        refused(&format!("{HEAD}{P17}{{\"idem_truth_end\":2}}\n")),
        "T holds 1 payments and its end line says 2: lines were lost or added"
    );
    assert_eq!(
        refused(&format!("{HEAD}{P17}{{\"idem_truth_end\":1}}\n{P17}")),
        "line 4 of T follows its end line (1 payments): the file was appended to after idem finished it"
    );
    assert_eq!(
        refused(&format!("{P17}{HEAD}")),
        "line 2 of T is the first line of another truth file: two files joined?"
    );
    assert_eq!(
        refused(&format!("{P17}{{\"idem_truth_end\":1}}\n")),
        "T has idem's end line but not its first line: part of the file is missing"
    );
    // A truth from another writer: payment lines only, blank lines allowed.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("paho.jsonl");
    std::fs::write(&path, format!("{P17}\n{P17}")).unwrap();
    let t = TruthFile::read(&path).unwrap();
    assert_eq!((t.total, t.ids, t.sent, t.unconfirmed), (5, 1, 2, false));
    // At QoS 0 each line was written at its send: graded at best unproven.
    let head0 = HEAD.replace("\"qos\":2", "\"qos\":0");
    std::fs::write(&path, format!("{head0}{P17}{{\"idem_truth_end\":1}}\n")).unwrap();
    assert!(TruthFile::read(&path).unwrap().unconfirmed);
}

#[test]
fn a_line_with_no_end_and_a_named_pipe_are_refused_before_memory_or_a_wait() {
    let endless = "x".repeat(MAX_LINE + 1);
    assert_eq!(
        refused(&endless),
        format!(
            "line 1 of T is longer than the {MAX_LINE} bytes a truth line may hold (a file with no line end?)"
        )
    );
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let e = format!("{:#}", TruthFile::read(&fifo).unwrap_err());
    assert!(
        e.ends_with("fifo is a named pipe (FIFO), not a truth file; it was left untouched"),
        "{e}"
    );
}

#[test]
fn ids_applied_are_compared_with_the_truths_by_each_id() {
    let mut t = FirstAmounts::default();
    for id in ["p1", "p2", "p3"] {
        t.add(Some(id.as_bytes()), 3).unwrap();
    }
    let ids = |v: &[&str]| -> Vec<Option<String>> {
        v.iter()
            .map(|s| (!s.is_empty()).then(|| s.to_string()))
            .collect()
    };
    let c = IdCounts::of(&t, &ids(&["p2", "p3", "p1"]));
    assert!(c.exact() && c.verdict().is_none());
    // p1 never delivered, zz fabricated at p1's amount: the totals agree, the ids do not.
    let c = IdCounts::of(&t, &ids(&["p2", "zz", "p3"]));
    assert_eq!(c.verdict(), Some("over and under"));
    assert_eq!(c.words(), "1 missing (p1); 1 not in the truth (zz)");
    // A duplicate that offsets a loss.
    let c = IdCounts::of(&t, &ids(&["p1", "p1", "p1", "p3", ""]));
    assert_eq!(
        c.words(),
        "1 missing (p2); 2 applied again (p1); 1 not in the truth ((no id))"
    );
    let many: Vec<Option<String>> = (0..9).map(|i| Some(format!("x{i}"))).collect();
    let c = IdCounts::of(&t, &many);
    assert_eq!(c.verdict(), Some("over and under"));
    assert_eq!(
        c.words(),
        "3 missing (p1, p2, p3); 9 not in the truth (x0, x1, x2, x3, x4, ...)"
    );
}

#[test]
fn the_grade_is_the_ids_where_they_differ_else_the_totals() {
    let mut t = FirstAmounts::default();
    for id in ["p17", "zz"] {
        t.add(Some(id.as_bytes()), 3).unwrap();
    }
    let applied = [Some("p17".to_string()), Some("p18".to_string())];
    let c = IdCounts::of(&t, &applied);
    assert_eq!(IdCounts::grade(Some(&c), 6, 6, false), "over and under");
    let exact = IdCounts::of(&t, &[Some("zz".into()), Some("p17".into())]);
    assert_eq!(IdCounts::grade(Some(&exact), 6, 6, false), "exact");
    // The same ids at another amount: the totals say so.
    assert_eq!(IdCounts::grade(Some(&exact), 7, 6, false), "over");
    assert_eq!(IdCounts::grade(None, 5, 6, false), "under");
    assert_eq!(IdCounts::grade(None, 6, 6, true), "unproven");
    assert_eq!(IdCounts::grade(None, 6, 6, false), "exact");
}

#[test]
fn each_id_counts_once_at_its_first_amount() {
    let mut t = FirstAmounts::default();
    assert_eq!(t.add(Some(b"p17"), 5), Ok(true));
    assert_eq!(t.add(Some(b"p17"), 9), Ok(false));
    assert_eq!(t.add(None, 3), Ok(true));
    assert_eq!(t.add(None, 3), Ok(true));
    assert_eq!((t.total(), t.messages()), (11, 3));
    assert_eq!(t.add(Some(b"big"), i64::MAX), Err(TruthError::Overflow));
}
