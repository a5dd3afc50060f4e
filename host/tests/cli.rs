//! The `idem` binary, end to end: every figure of the two lessons, and more parameters
//! than the defaults, checked against an independent prediction.

use assert_fs::prelude::*;
use predicates::prelude::*;
use serde_json::{Value, json};

mod common;
use common::{idem, matrix_cell, run_json};

fn offsets(range: std::ops::RangeInclusive<u64>) -> Value {
    range.collect::<Vec<_>>().into()
}

#[test]
fn demo_tells_the_ddia_story_with_110_and_100() {
    idem()
        .arg("demo")
        .assert()
        .success()
        .stdout(predicate::str::contains("applied offsets 0..49, total 50, last checkpoint covers offset 39"))
        .stdout(predicate::str::contains("resumes at offset 40: redelivers 40..49 (10 events), then 50..99"))
        .stdout(predicate::str::contains("final total  110 (true total 100, over by 10)"))
        .stdout(predicate::str::contains("skipped 10 already-applied offsets: 40..49"))
        .stdout(predicate::str::contains("final total  100 (true total 100, exact)"))
        .stdout(predicate::str::contains("naive              110  +10 from the 10 replayed events"))
        .stdout(predicate::str::contains("atomic             100  exact: value and position in one record, 10 flash records instead of 110"));
}

#[test]
fn ddia_figures_for_every_store() {
    let naive = run_json(&["ddia", "--store", "naive"]);
    assert_eq!(naive["final_total"], 110);
    assert_eq!(naive["true_total"], 100);
    assert_eq!(naive["committed_at_crash"], 39);
    assert_eq!(naive["redelivered"], offsets(40..=49));
    assert_eq!(naive["skipped"], json!([]));
    assert_eq!(naive["flash"]["writes"], 120);

    let offset = run_json(&["ddia", "--store", "offset"]);
    assert_eq!(offset["final_total"], 100);
    assert_eq!(offset["committed_at_crash"], 39);
    assert_eq!(offset["redelivered"], offsets(40..=49));
    assert_eq!(offset["skipped"], offsets(40..=49));
    assert_eq!(offset["flash"]["writes"], 110);

    let mid = run_json(&["ddia", "--store", "message-id"]);
    assert_eq!(
        (mid["final_total"].as_i64(), mid["skipped"].clone()),
        (Some(100), offsets(40..=49))
    );

    let atomic = run_json(&["ddia", "--store", "atomic"]);
    assert_eq!(atomic["final_total"], 100);
    assert_eq!(atomic["committed_at_crash"], 39);
    assert_eq!(atomic["redelivered"], offsets(40..=49));
    assert_eq!(
        atomic["skipped"],
        json!([]),
        "atomic replays from its own checkpoint: nothing to skip"
    );
    assert_eq!(
        atomic["flash"]["writes"], 10,
        "one record per checkpoint: 4 before the crash, 6 after"
    );
}

#[test]
fn worked_example_figures() {
    for (store, total) in [
        ("naive", 20),
        ("offset", 12),
        ("message-id", 12),
        ("atomic", 12),
    ] {
        let v = run_json(&["worked-example", "--store", store]);
        assert_eq!(v["final_total"], total, "{store}");
        assert_eq!(v["true_total"], 12);
        assert_eq!(
            v["committed_at_crash"],
            Value::Null,
            "nothing was committed before the crash"
        );
        assert_eq!(v["redelivered"], json!([0, 1]));
    }
}

#[test]
fn payments_figures() {
    for (store, total, skipped) in [
        ("naive", 13, json!([])),
        ("offset", 13, json!([])),
        ("message-id", 8, json!([1])),
        ("atomic", 13, json!([])),
    ] {
        let v = run_json(&["payments", "--store", store]);
        assert_eq!(v["final_total"], total, "{store}");
        assert_eq!(v["true_total"], 8);
        assert_eq!(v["committed_at_crash"], Value::Null);
        assert_eq!(
            v["redelivered"],
            json!([]),
            "the retry is a new offset, not a redelivery"
        );
        assert_eq!(v["skipped"], skipped, "{store}");
    }
}

/// The prediction of the model, computed independently of idem: batches end at offsets
/// o with (o + 1) % k == 0; a crash after the effect of c loses every effect after the
/// last batch end before c, and those are redelivered.
fn predict(k: u64, c: u64) -> (Option<u64>, u64) {
    let b = (c / k) * k; // first offset not covered by the durable checkpoint
    (b.checked_sub(1), c - b + 1)
}

#[test]
fn any_parameters_give_the_predicted_figures() {
    for (n, k, c) in [
        (100, 10, 49),
        (1000, 7, 500),
        (1000, 7, 496),
        (50, 10, 5),
        (20, 1, 19),
        (300, 64, 255),
        (1, 3, 0),
    ] {
        let (committed, replayed) = predict(k, c);
        let args = [
            "ddia",
            "--events",
            &n.to_string(),
            "--checkpoint-every",
            &k.to_string(),
            "--crash-after",
            &c.to_string(),
        ];
        let with = |store: &str| {
            let mut a = args.to_vec();
            a.extend(["--store", store]);
            run_json(&a)
        };
        let naive = with("naive");
        assert_eq!(
            naive["final_total"].as_u64(),
            Some(n + replayed),
            "naive {n} {k} {c}"
        );
        assert_eq!(
            naive["committed_at_crash"].as_u64(),
            committed,
            "{n} {k} {c}"
        );
        assert_eq!(
            naive["redelivered"].as_array().unwrap().len() as u64,
            replayed
        );
        for store in ["offset", "atomic"] {
            assert_eq!(
                with(store)["final_total"].as_u64(),
                Some(n),
                "{store} {n} {k} {c}"
            );
        }
        // The message-id window (32 ids by default) covers a replay of up to 32 events; a
        // longer replay evicts each id just before its duplicate arrives, so all of it
        // slips through: the stated overflow policy.
        let mid = if replayed <= 32 { n } else { n + replayed };
        assert_eq!(
            with("message-id")["final_total"].as_u64(),
            Some(mid),
            "message-id {n} {k} {c}"
        );
        assert_eq!(
            with("offset")["skipped"].as_array().unwrap().len() as u64,
            replayed
        );
    }
}

#[test]
fn no_crash_is_exact_for_every_store_and_a_million_events_need_no_storage() {
    for store in ["naive", "offset", "atomic"] {
        let v = run_json(&[
            "ddia",
            "--store",
            store,
            "--no-crash",
            "--events",
            "1000000",
            "--checkpoint-every",
            "1000",
        ]);
        assert_eq!(v["final_total"], 1_000_000, "{store}");
        assert_eq!(v["committed_at_crash"], Value::Null);
    }
}

#[test]
fn trace_shows_every_step_with_crash_and_recovery() {
    let v = run_json(&["worked-example", "--store", "naive", "--trace"]);
    let trace = v["trace"].as_array().unwrap();
    let actions: Vec<&str> = trace
        .iter()
        .map(|t| t["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        actions,
        [
            "deliver",
            "apply",
            "deliver",
            "apply",
            "crash@effect:1",
            "recover",
            "redeliver",
            "apply",
            "redeliver",
            "apply",
            "deliver",
            "apply",
            "commit"
        ]
    );
    let totals: Vec<i64> = trace.iter().map(|t| t["total"].as_i64().unwrap()).collect();
    assert_eq!(totals, [0, 5, 5, 8, 8, 8, 8, 13, 13, 16, 16, 20, 20]);
    // Positions are the next offset to read: the last commit covers 0..2.
    assert_eq!(trace.last().unwrap()["resume_at"], 3);
    assert_eq!(trace[5]["resume_at"], 0, "the crash found nothing covered");

    idem()
        .args(["run", "ddia", "--store", "offset", "--trace"])
        .assert()
        .success()
        .stdout(predicate::str::contains("crash@effect:49"))
        .stdout(predicate::str::contains(
            "recovered from flash: covers through 39, resumes at 40",
        ));
}

#[test]
fn a_users_log_file_runs_like_the_lesson() {
    let dir = assert_fs::TempDir::new().unwrap();
    let f = dir.child("events.jsonl");
    f.write_str(
        "{\"id\": \"p17\", \"producer\": 1, \"seq\": 1, \"amount\": 5}\n\
         {\"id\": \"p17\", \"producer\": 1, \"seq\": 1, \"amount\": 5}\n\
         {\"id\": \"p18\", \"producer\": 1, \"seq\": 2, \"amount\": 3}\n",
    )
    .unwrap();
    let path = f.path().to_str().unwrap();
    let v = run_json(&["--log", path, "--store", "message-id"]);
    assert_eq!(
        (v["final_total"].as_i64(), v["true_total"].as_i64()),
        (Some(8), Some(8))
    );
    let v = run_json(&["--log", path, "--store", "naive", "--crash-after", "1"]);
    assert_eq!(
        v["final_total"], 23,
        "13 plus the replay of offsets 0 and 1 (5 + 5)"
    );

    let bad = dir.child("bad.jsonl");
    bad.write_str("{\"id\": \"p1\", \"producer\": 1, \"seq\": 1, \"amount\": 5}\n{\"id\": \"p2\", \"amount\": \"x\"}\n").unwrap();
    idem()
        .args([
            "run",
            "--store",
            "naive",
            "--log",
            bad.path().to_str().unwrap(),
        ])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("line 2: not an event"));
}

#[test]
fn a_log_larger_than_the_capacity_is_refused() {
    let dir = assert_fs::TempDir::new().unwrap();
    let f = dir.child("big.jsonl");
    let line = "{\"id\": \"x\", \"producer\": 1, \"seq\": 1, \"amount\": 1}\n";
    f.write_str(&line.repeat(4097)).unwrap();
    idem()
        .args([
            "run",
            "--store",
            "naive",
            "--log",
            f.path().to_str().unwrap(),
        ])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "line 4097: the log holds at most 4096 events",
        ));
}

#[test]
fn impossible_input_is_one_sentence_and_exit_2() {
    let cases: [(&[&str], &str); 6] = [
        (
            &["run", "ddia", "--store", "naive", "--checkpoint-every", "0"],
            "the checkpoint interval must be at least 1 event",
        ),
        (
            &["run", "ddia", "--store", "naive", "--crash-after", "100"],
            "cannot crash at offset 100: the log has offsets 0..=99",
        ),
        (
            &["run", "ddia", "--store", "nosuch"],
            "invalid value 'nosuch' for '--store <STORE>'",
        ),
        (
            &["run", "payments", "--store", "naive", "--events", "3"],
            "--events applies to the ddia and gauge scenarios only",
        ),
        (
            &["run", "payments", "--store", "message-id", "--window", "99"],
            "a message-id window must hold 1 to 32 ids, not 99",
        ),
        (
            &[
                "run",
                "--store",
                "naive",
                "--log",
                "/nonexistent/events.jsonl",
            ],
            "reading event file /nonexistent/events.jsonl",
        ),
    ];
    // A missing event file is bad input too: exit 2, before any work.
    for (args, msg) in cases {
        idem()
            .args(args)
            .assert()
            .code(2)
            .stderr(predicate::str::contains(msg))
            .stderr(predicate::str::contains("panicked").not());
    }
}

#[test]
fn matrix_shows_stores_against_faults() {
    let out = idem().args(["matrix", "--json"]).output().unwrap();
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let cell = |store: &str, fault: &str| matrix_cell(&v, store, fault);
    let expect = [
        ("naive", "consumer-crash", "over", 110),
        ("naive", "producer-retry", "over", 13),
        ("offset", "consumer-crash", "exact", 100),
        ("offset", "producer-retry", "over", 13),
        ("message-id", "consumer-crash", "exact", 100),
        ("message-id", "producer-retry", "exact", 8),
        ("atomic", "consumer-crash", "exact", 100),
        ("atomic", "producer-retry", "over", 13),
    ];
    for (store, fault, verdict, total) in expect {
        assert_eq!(
            cell(store, fault),
            (verdict.to_string(), total),
            "{store} × {fault}"
        );
    }
    // It fits a 100-column terminal, with no trailing blanks, and its JSON names each
    // column's producer as `--producer` spells it.
    let out = idem().arg("matrix").output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("naive         over 110      over 13"),
        "{text}"
    );
    for line in text.lines() {
        assert!(
            line.chars().count() <= 100,
            "{} columns: {line}",
            line.chars().count()
        );
        assert_eq!(line, line.trim_end(), "trailing blanks: {line:?}");
    }
    let producers: Vec<String> = v["rows"][0]["cells"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["producer"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        producers,
        [
            "non-idempotent",
            "non-idempotent",
            "idempotent",
            "idempotent",
            "non-idempotent",
            "non-idempotent"
        ]
    );
}

/// Offsets are named as offsets, lost ones too, and two-phase recovery says what it did
/// with a prepared record.
#[test]
fn runs_say_which_offsets_and_what_recovery_did() {
    let text = |args: &[&str]| {
        let out = idem().args(args).output().unwrap();
        assert!(out.status.success(), "{args:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let payments = text(&["run", "payments", "--store", "message-id"]);
    assert!(
        payments.contains("  skipped             offset 1 (1 event)\n"),
        "{payments}"
    );
    let amo = text(&[
        "run",
        "ddia",
        "--store",
        "offset",
        "--guarantee",
        "at-most-once",
        "--crash-after",
        "45",
    ]);
    assert!(
        amo.contains("  lost                offsets 46..49 (4 events), never applied\n"),
        "{amo}"
    );
    let back = text(&[
        "run",
        "ddia",
        "--store",
        "two-phase",
        "--schedule",
        "crash@prepare:49",
    ]);
    assert!(
        back.contains(
            "  recovery            prepared record found, position not committed: rolled back, resumes at 40\n"
        ),
        "{back}"
    );
    assert!(back.contains("  redelivered         offsets 40..49 (10 events)\n"));
    // A cut in the middle of the 17th word write lands between the decision and the
    // committed record of the first checkpoint.
    let forward = text(&[
        "run",
        "ddia",
        "--store",
        "two-phase",
        "--schedule",
        "crash@torn:17",
    ]);
    assert!(
        forward.contains(
            "  recovery            prepared record found, position committed: rolled forward, resumes at 10\n"
        ),
        "{forward}"
    );
    let v: Value = serde_json::from_str(&text(&[
        "run",
        "ddia",
        "--store",
        "two-phase",
        "--schedule",
        "crash@prepare:49",
        "--json",
    ]))
    .unwrap();
    assert_eq!(
        v["recovery"],
        json!({"prepared_record": "rolled-back", "resume_at": 40})
    );
}

/// The producer's side in the trace: the send, the lost ack and the retry, the offsets
/// they landed at, and the message each consumer row handles; with an idempotent
/// producer, the log's refusal and why.
#[test]
fn a_trace_shows_the_producer_side() {
    let out = idem()
        .args(["run", "payments", "--store", "naive", "--trace"])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    for line in [
        "producer:\n  The broker writes the offset. The producer library writes a batch header",
        "  send p17 (5) -> offset 0\n      payload: instance 1 epoch 0 seq 0; batch: no producer id (Kafka stores -1)\n",
        "  ack lost; retry p17 -> offset 1\n      payload: instance 1 epoch 0 seq 0; batch: no producer id (Kafka stores -1)\n",
        "  send p18 (3) -> offset 2\n",
        "     2        1  p17      deliver                  5          0\n",
        "     5        2  p18      apply                   13          0\n",
        "  delivery            at-least-once consumer at read_uncommitted, non-idempotent producer\n",
    ] {
        assert!(text.contains(line), "{line}\n{text}");
    }
    let trace = |scenario: &str, producer: &str| {
        let args = [
            "run",
            scenario,
            "--store",
            "naive",
            "--producer",
            producer,
            "--trace",
        ];
        String::from_utf8(idem().args(args).output().unwrap().stdout).unwrap()
    };
    let text = trace("payments", "idempotent");
    assert!(text.contains(
        "  ack lost; retry p17 -> already at offset 0: answered with success and that offset, nothing appended\n      payload: instance 1 epoch 0 seq 0; batch: producer id 1000 epoch 0 sequence 0\n"
    ), "{text}");
    assert!(!text.contains("refused"), "{text}");
    // The zombie: who sent what, and the broker's fencing of the old epoch.
    let text = trace("zombie", "idempotent");
    assert!(text.contains(
        "  the stalled send of p42 (3) arrives late -> offset 3\n      payload: instance 7 epoch 0 seq 1; batch: producer id 1000 epoch 0 sequence 1\n"
    ), "{text}");
    let v = run_json(&[
        "payments",
        "--store",
        "naive",
        "--producer",
        "idempotent",
        "--trace",
    ]);
    assert_eq!(v["producer"][1]["landed"], "already-appended");
    assert_eq!(v["producer"][1]["offset"], 0);
    assert_eq!(
        v["producer"][1]["batch"],
        json!({"producer_id": 1000, "epoch": 0, "sequence": 0})
    );
    let v = run_json(&[
        "late-retry",
        "--store",
        "naive",
        "--producer",
        "idempotent",
        "--trace",
    ]);
    assert_eq!(v["producer"][40]["landed"], "older-duplicate");
    assert_eq!(v["producer"][40]["offset"], Value::Null);
    let v = run_json(&["payments", "--store", "naive", "--trace"]);
    assert_eq!(v["producer"][1]["kind"], "retry");
    assert_eq!(v["producer"][1]["batch"], Value::Null);
    assert_eq!(
        (
            v["producer"][1]["message"].as_str(),
            v["producer"][1]["offset"].as_u64()
        ),
        (Some("p17"), Some(1))
    );
    assert_eq!(v["trace"][2]["message"], "p17");
}

/// A transactional zombie: A's p42 lands in a transaction A never commits, B's start
/// aborts it, A's late commit is fenced; read_uncommitted reads the aborted record,
/// read_committed passes over it; the last stable offset is told where it holds a
/// read_committed consumer back.
#[test]
fn transactions_abort_fence_and_the_isolation_level_decides() {
    let trace = |isolation: &str| {
        let args = [
            "run",
            "zombie",
            "--store",
            "naive",
            "--producer",
            "transactional",
            "--isolation",
            isolation,
            "--trace",
        ];
        let out = idem().args(args).output().unwrap();
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap()
    };
    let text = trace("read-uncommitted");
    for line in [
        "  send p41 (5) -> offset 0, committed\n",
        "  send p42 (3), then stall before the commit -> offset 1, in an open transaction\n      a read_committed consumer reads only the offsets before 1 (the last stable\n      offset) until that transaction commits or aborts\n",
        "  send p42 (3) again, a new send call -> offset 2, committed\n      payload: instance 7 epoch 1 seq 0; batch: producer id 1000 epoch 1 sequence 0\n      before it, this instance's start (initTransactions) bumped the epoch and aborted\n      the open transaction of producer id 1000 at offset 1\n",
        "  the stalled commit of p42 arrives late -> fenced: rejected, producer id 1000 is at epoch 1 now\n      the commit (EndTxn) is from producer id 1000 epoch 0\n",
        "     3        1  p42      apply                    8          0\n",
        "  (Kafka also writes a commit or abort marker at an offset of its own after each\n",
        "  delivery            at-least-once consumer at read_uncommitted, transactional producer\n  final total         15 (over by 3)\n  true total          12\n",
    ] {
        assert!(text.contains(line), "{line}\n{text}");
    }
    assert!(!text.contains("passed over"), "{text}");
    let text = trace("read-committed");
    for line in [
        "     2        1  p42      pass (aborted)           5          0\n     3        2  p42      deliver                  5          0\n",
        "  delivery            at-least-once consumer at read_committed, transactional producer\n  final total         12 (exact)\n",
        "  passed over         offset 1 (1 event): in an aborted transaction, never given to the store\n",
    ] {
        assert!(text.contains(line), "{line}\n{text}");
    }
    let v = run_json(&[
        "zombie",
        "--store",
        "message-id",
        "--producer",
        "transactional",
        "--isolation",
        "read-committed",
        "--trace",
    ]);
    assert_eq!(
        (&v["isolation"], &v["passed"], &v["final_total"]),
        (&json!("read_committed"), &json!([1]), &json!(12))
    );
    assert_eq!(
        (&v["producer"][1]["kind"], &v["producer"][1]["stable_end"]),
        (&json!("uncommitted"), &json!(1))
    );
    assert_eq!(v["producer"][2]["aborted"], 1);
    assert_eq!(
        (&v["producer"][4]["kind"], &v["producer"][4]["landed"]),
        (&json!("late-commit"), &json!("fenced"))
    );
    // Without transactions in the log the level changes nothing, and the header says
    // the level the run used.
    let v = run_json(&[
        "payments",
        "--store",
        "naive",
        "--isolation",
        "read-committed",
    ]);
    assert_eq!(
        (&v["final_total"], &v["isolation"]),
        (&json!(13), &json!("read_committed"))
    );
    // The matrix holds both levels side by side.
    let out = idem().args(["matrix", "--json"]).output().unwrap();
    let m: Value = serde_json::from_slice(&out.stdout).unwrap();
    let totals: Vec<(String, Vec<i64>)> = m["transactions"]["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let cells = r["cells"].as_array().unwrap();
            (
                r["store"].as_str().unwrap().to_string(),
                cells
                    .iter()
                    .map(|c| c["final_total"].as_i64().unwrap())
                    .collect(),
            )
        })
        .collect();
    assert_eq!(totals[0], ("naive".to_string(), vec![15, 12]));
    assert_eq!(totals[2], ("message-id".to_string(), vec![12, 12]));
    let bad = idem()
        .args([
            "run",
            "zombie",
            "--store",
            "naive",
            "--isolation",
            "serializable",
        ])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
}

/// Insert with a unique key: naturally idempotent, and it never forgets, so the late
/// retry the 32-id window misses is exact; its price is a row for every key, and a full
/// table refuses the next new key in one sentence.
#[test]
fn a_unique_key_never_forgets_and_a_full_table_says_so() {
    let total =
        |scenario: &str| run_json(&[scenario, "--store", "unique-key"])["final_total"].clone();
    assert_eq!(
        [
            total("late-retry"),
            total("payments"),
            total("resend"),
            total("zombie")
        ],
        [json!(40), json!(8), json!(8), json!(12)]
    );
    let v = run_json(&["late-retry", "--store", "message-id"]);
    assert_eq!(v["final_total"], 41, "the window forgot r0");
    let v = run_json(&["ddia", "--store", "unique-key", "--events", "64"]);
    assert_eq!(
        (&v["final_total"], &v["verdict"]),
        (&json!(64), &json!("exact"))
    );
    let out = idem()
        .args(["run", "ddia", "--store", "unique-key"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "idem: the unique-key table is full: it holds 64 keys, and the event at offset 64 has a new one (nothing was dropped: the event is not applied)\n"
    );
    let out = idem()
        .args(["run", "gauge", "--store", "unique-key"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// Predict, then observe: neither `idem --help` nor the README above its story section
/// gives away an answer (110, 100, 13 or 8).
#[test]
fn the_answers_are_not_given_before_the_questions() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap();
    let opening = readme.split("## The story").next().unwrap().to_string();
    let help = String::from_utf8(idem().arg("--help").output().unwrap().stdout).unwrap();
    for (what, text) in [("README opening", opening), ("idem --help", help)] {
        let numbers: Vec<&str> = text
            .split(|c: char| !c.is_ascii_digit())
            .filter(|w| ["110", "100", "13", "8"].contains(w))
            .collect();
        assert!(numbers.is_empty(), "{what} gives away {numbers:?}");
    }
}

/// `idem run --json` prices its flash use per event on an nRF51: 48 µs a word write,
/// 22 ms a page erase, and a 2-page partition's lifetime at 20,000 erase cycles a page.
#[test]
fn flash_cost_per_event_on_an_nrf51() {
    // The appending message-id store: a record of up to 44 bytes per applied effect
    // (issue targets: at most 52 bytes and 0.075 erases an event).
    let v = common::run_json(&["ddia", "--store", "message-id"]);
    let f = &v["flash"];
    assert_eq!(
        (f["bytes_written"].as_u64(), f["erases"].as_u64()),
        (Some(2_140), Some(3))
    );
    assert_eq!(f["bytes_per_event"], 21.4);
    assert_eq!(f["erases_per_event"], 0.03);
    // 2,140 / 4 words × 48 µs + 3 × 22,000 µs, over 100 events (journal format 3; format
    // 2's slots: 4,760 B and 6 erases, 1,891.2 µs, 666,666 events).
    assert_eq!(f["nrf51_us_per_event"], 916.8);
    assert_eq!(f["lifetime_events"], 1_333_333);
    let atomic = common::run_json(&["ddia", "--store", "atomic"]);
    assert_eq!(atomic["flash"]["lifetime_events"], 4_000_000);
}

/// `--replay`: the trace's replay window alone, from the crash to the last effect of a
/// redelivered offset.
#[test]
fn the_replay_window_alone() {
    let out = idem()
        .args(["run", "ddia", "--store", "naive", "--replay"])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let rows: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("  step"))
        .skip(1)
        .take_while(|l| !l.is_empty())
        .collect();
    assert!(rows[0].contains("*** CRASH"), "{text}");
    assert!(rows[1].contains("recovered from flash"), "{text}");
    // The second column is the offset.
    let offset = |row: &str| row.split_whitespace().nth(1).unwrap().to_string();
    assert_eq!(offset(rows.last().unwrap()), "49", "{text}");
    let applied: Vec<String> = rows
        .iter()
        .filter(|r| r.contains(" apply "))
        .map(|r| offset(r))
        .collect();
    assert_eq!(
        applied,
        (40..=49).map(|o: u64| o.to_string()).collect::<Vec<_>>(),
        "{text}"
    );
}

/// On a terminal (a pseudo-terminal from util-linux `script`) the demo stops for a
/// prediction before each figure; `--no-pause` and a pipe print straight through.
#[test]
fn the_demo_pauses_for_a_prediction_on_a_terminal() {
    let screen = |args: &str, input: &[u8]| common::in_a_terminal(&format!("demo {args}"), input);
    let paused = screen("", b"\n\n\n");
    let prompt =
        "Predict: where does the restart resume, and what does the naive store end at? [Enter]";
    let (before, after) = paused.split_once(prompt).expect(&paused);
    assert!(
        !before.contains("110"),
        "a figure before its prediction:\n{paused}"
    );
    assert!(
        after.contains("final total  110 (true total 100, over by 10)"),
        "{paused}"
    );
    assert_eq!(paused.matches("[Enter]").count(), 3, "{paused}");
    let straight = screen("--no-pause", b"");
    assert!(!straight.contains("[Enter]"), "{straight}");
    assert!(straight.contains("final total  110"), "{straight}");
}

/// Each cell of `idem matrix --json` carries the run that explains it, as the page gets it
/// (`spec`): that run, given to `idem run` by its flags, ends at the cell's total with the
/// cell's verdict, in the stores' table and at both isolation levels of the transactions'.
#[test]
fn each_matrix_cell_names_the_run_that_gives_it() {
    let out = idem().args(["matrix", "--json"]).output().unwrap();
    let m: Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut checked = 0;
    for table in [&m, &m["transactions"]] {
        assert_eq!(
            table["faults"].as_array().unwrap().len(),
            table["rows"][0]["cells"].as_array().unwrap().len()
        );
        for row in table["rows"].as_array().unwrap() {
            for c in row["cells"].as_array().unwrap() {
                let spec = &c["spec"];
                assert_eq!(spec["store"], row["store"]);
                assert_eq!(
                    (&spec["scenario"], &spec["producer"]),
                    (&c["scenario"], &c["producer"])
                );
                let mut args = vec![
                    spec["scenario"].as_str().unwrap(),
                    "--store",
                    spec["store"].as_str().unwrap(),
                    "--producer",
                    spec["producer"].as_str().unwrap(),
                ];
                if let Some(level) = spec["isolation"].as_str() {
                    args.extend(["--isolation", level]);
                }
                let r = run_json(&args);
                assert_eq!(
                    (&r["final_total"], &r["verdict"], &r["flash"]["writes"]),
                    (&c["final_total"], &c["verdict"], &c["flash_writes"]),
                    "{args:?}"
                );
                // The isolation level is in the spec exactly when it is not the default.
                assert_eq!(
                    spec["isolation"].is_string(),
                    c["isolation"] == "read_committed",
                    "{args:?}"
                );
                checked += 1;
            }
        }
    }
    // 6 stores × 6 faults, and 6 × the 2 levels.
    assert_eq!(checked, 48);
    // Each fault with its column's title, as the page has them.
    assert_eq!(
        m["faults"][0],
        json!({"name": "consumer-crash", "title": "consumer crash"})
    );
    assert_eq!(
        m["transactions"]["faults"][1]["name"],
        "zombie-transaction-read-committed"
    );
}
