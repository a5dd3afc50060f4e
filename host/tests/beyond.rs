//! Beyond the two lessons: at-most-once, the idempotent producer, producer sequences,
//! the bounded window, two-phase commit and dual writes, each with exact figures.

use assert_fs::prelude::*;
use serde_json::{Value, json};

mod common;
use common::{idem, matrix_cell, refuses, run_json as run};
use idem_payments::registry::StoreKind;

fn totals(args: &[&str]) -> Vec<i64> {
    StoreKind::ALL
        .iter()
        .map(|k| k.name())
        .map(|s| {
            let mut a = args.to_vec();
            a.extend(["--store", s]);
            run(&a)["final_total"].as_i64().unwrap()
        })
        .collect()
}

#[test]
fn at_most_once_loses_the_rest_of_the_batch() {
    let v = run(&[
        "ddia",
        "--store",
        "offset",
        "--guarantee",
        "at-most-once",
        "--crash-after",
        "45",
    ]);
    assert_eq!(v["final_total"], 96);
    assert_eq!(v["lost"], json!([46, 47, 48, 49]));
    assert_eq!(
        v["committed_at_crash"], 49,
        "the batch 40..49 was committed before its effects"
    );
    assert_eq!(v["anomalies"]["lost-write"], 4);
    assert_eq!(v["guarantee"], "at-most-once");
    // With the crash after 49, the batch was fully applied before it: nothing is lost.
    let v = run(&["ddia", "--store", "offset", "--guarantee", "at-most-once"]);
    assert_eq!(
        (v["final_total"].as_i64(), v["lost"].clone()),
        (Some(100), json!([]))
    );
    let naive = run(&[
        "ddia",
        "--store",
        "naive",
        "--guarantee",
        "at-most-once",
        "--crash-after",
        "45",
    ]);
    assert_eq!(
        naive["final_total"], 96,
        "at-most-once never replays: even naive ends under"
    );
}

#[test]
fn producer_faults_against_every_store() {
    //                         naive offset m-id seq atomic 2pc
    assert_eq!(totals(&["payments"]), [13, 13, 8, 8, 13, 13]);
    assert_eq!(totals(&["payments", "--producer", "idempotent"]), [8; 6]);
    assert_eq!(
        totals(&["resend", "--producer", "idempotent"]),
        [13, 13, 8, 13, 13, 13]
    );
    assert_eq!(totals(&["zombie"]), [15, 15, 12, 12, 15, 15]);
    // Kafka's idempotent producer does not fence a zombie: its restart got a fresh
    // producer id. producer-seq reads the application's own numbering, so its cell is
    // the same under every producer.
    assert_eq!(
        totals(&["zombie", "--producer", "idempotent"]),
        [15, 15, 12, 12, 15, 15]
    );
    assert_eq!(
        totals(&["zombie", "--producer", "plain"]),
        totals(&["zombie", "--producer", "non-idempotent"]),
        "plain is another name for non-idempotent"
    );
    // A transactional A's p42 landed in the transaction B's start aborted: read
    // uncommitted (the default) it counts; read committed, every store is exact.
    assert_eq!(
        totals(&["zombie", "--producer", "transactional"]),
        [15, 15, 12, 15, 15, 15]
    );
    assert_eq!(
        totals(&[
            "zombie",
            "--producer",
            "transactional",
            "--isolation",
            "read-committed"
        ]),
        [12; 6]
    );
    assert_eq!(totals(&["payments", "--producer", "transactional"]), [8; 6]);
    // A producer that never retries: p17's send was lost, and no store can bring it
    // back (at-most-once on the producer's side).
    assert_eq!(totals(&["payments", "--producer", "no-retry"]), [3; 6]);
    assert_eq!(totals(&["late-retry"]), [41, 41, 41, 40, 41, 41]);
}

#[test]
fn the_window_forgets_and_says_so() {
    let v = run(&["late-retry", "--store", "message-id"]);
    assert_eq!(
        (v["final_total"].as_i64(), v["evicted"].as_u64()),
        (Some(41), Some(40 + 1 - 32))
    );
    let v = run(&["late-retry", "--store", "message-id", "--window", "8"]);
    assert_eq!(
        (v["final_total"].as_i64(), v["evicted"].as_u64()),
        (Some(41), Some(41 - 8))
    );
    let v = run(&["payments", "--store", "message-id", "--window", "1"]);
    assert_eq!(
        v["final_total"], 8,
        "a retry right behind its original fits a window of one"
    );
}

#[test]
fn two_phase_commit_is_exact_and_writes_three_records_a_checkpoint() {
    let v = run(&["ddia", "--store", "two-phase"]);
    assert_eq!(
        (v["final_total"].as_i64(), v["flash"]["writes"].as_u64()),
        (Some(100), Some(30))
    );
    for schedule in [
        "crash@prepare:49",
        "crash@commit:49",
        "crash@prepare:39,crash@prepare:39#2,crash@commit:49",
    ] {
        let v = run(&["ddia", "--store", "two-phase", "--schedule", schedule]);
        assert_eq!(v["final_total"], 100, "{schedule}");
    }
    let out = idem()
        .args([
            "sweep",
            "ddia",
            "--store",
            "two-phase",
            "--torn-writes",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let s: Value = serde_json::from_slice(&out.stdout).unwrap();
    let s = &s["stores"][0];
    assert_eq!(s["exact"], s["schedules"]);
    // 200 deliveries and effects, 10 prepares and 10 commits, and the flash operations.
    assert!(s["schedules"].as_u64().unwrap() > 220);
}

#[test]
fn dual_writes_diverge_without_a_fix() {
    let none = run(&["dual-write", "--fix", "none"]);
    assert_eq!(
        (
            none["total"].as_i64(),
            none["index_sum"].as_i64(),
            none["true_total"].as_i64()
        ),
        (Some(106), Some(105), Some(90))
    );
    assert_eq!(
        (none["verdict"].as_str(), none["diverged"].as_bool()),
        (Some("diverged"), Some(true))
    );
    assert_eq!(
        none["diverged_at_recovery"],
        json!({"total": 76, "index_sum": 75})
    );
    for fix in ["atomic", "derive"] {
        let v = run(&["dual-write", "--fix", fix]);
        assert_eq!(
            (
                v["total"].as_i64(),
                v["index_sum"].as_i64(),
                v["verdict"].as_str()
            ),
            (Some(90), Some(90), Some("exact")),
            "{fix}"
        );
    }
    assert_eq!(
        run(&["dual-write", "--fix", "none", "--no-crash"])["verdict"],
        "exact"
    );
}

#[test]
fn dual_writes_are_swept_and_the_checker_names_the_divergence() {
    let sweep = |fix: &str| -> Value {
        let out = idem()
            .args(["sweep", "dual-write", "--fix", fix, "--json", "--quiet"])
            .output()
            .unwrap();
        serde_json::from_slice::<Value>(&out.stdout).unwrap()["stores"][0].clone()
    };
    let none = sweep("none");
    // 30 deliveries, 30 writes between the two views, 30 effects, 3 commits.
    assert_eq!(none["schedules"], 93);
    // Each crash between the two writes of an offset leaves the views apart for good.
    assert_eq!(none["anomalies"]["diverged"], 30);
    assert_eq!(
        none["rerun"][0],
        "idem run dual-write --fix none --schedule \"crash@between:0\""
    );
    for fix in ["atomic", "derive"] {
        let s = sweep(fix);
        assert_eq!(
            (
                s["schedules"].as_u64(),
                s["exact"].as_u64(),
                s["failing"].as_u64()
            ),
            (Some(63), Some(63), Some(0)),
            "{fix}"
        );
    }
    // The rerun line runs, with a trace that shows the crash between the two writes.
    let v = run(&[
        "dual-write",
        "--fix",
        "none",
        "--schedule",
        "crash@between:0",
    ]);
    assert_eq!(
        (
            v["total"].as_i64(),
            v["index_sum"].as_i64(),
            v["verdict"].as_str()
        ),
        (Some(91), Some(90), Some("diverged"))
    );
    assert_eq!(v["anomalies"]["diverged"], 1);
    idem()
        .args(["run", "dual-write", "--fix", "none", "--trace"])
        .assert()
        .success()
        .stdout(predicates::str::contains("crash@between:25"))
        .stdout(predicates::str::contains("between"));
}

#[test]
fn matrix_has_every_store_against_every_fault() {
    let out = idem().args(["matrix", "--json"]).output().unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["rows"].as_array().unwrap().len(), 6);
    assert_eq!(v["faults"].as_array().unwrap().len(), 6);
    let cell = |store: &str, fault: &str| matrix_cell(&v, store, fault);
    assert_eq!(
        cell("producer-seq", "application-resend"),
        ("over".into(), 13)
    );
    assert_eq!(
        cell("message-id", "application-resend"),
        ("exact".into(), 8)
    );
    assert_eq!(cell("two-phase", "consumer-crash"), ("exact".into(), 100));
    assert_eq!(
        cell("offset", "producer-retry-idempotent"),
        ("exact".into(), 8)
    );
    assert_eq!(cell("producer-seq", "late-retry"), ("exact".into(), 40));
    let duals: Vec<&str> = v["dual_write"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["verdict"].as_str().unwrap())
        .collect();
    assert_eq!(duals, ["diverged", "exact", "exact", "diverged"]);
}

/// The split fix keeps the total exact (its position is stamped with it), so the only
/// thing left wrong is the index: the divergence alone, 15 above the total after the
/// replay of 20..24 and the crash between the two writes of 25.
#[test]
fn the_split_fix_leaves_only_the_index_wrong() {
    let v = run(&["dual-write", "--fix", "split"]);
    assert_eq!(
        (
            v["total"].as_i64(),
            v["index_sum"].as_i64(),
            v["true_total"].as_i64(),
            v["diverged"].as_bool()
        ),
        (Some(90), Some(105), Some(90), Some(true))
    );
    let out = idem()
        .args(["run", "dual-write", "--fix", "split"])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains(
            "  verdict             diverged: the index is 15 above the total, for good\n"
        ),
        "{text}"
    );
}

#[test]
fn bad_input_for_the_new_options_is_exit_2() {
    let dir = assert_fs::TempDir::new().unwrap();
    let f = dir.child("producers.jsonl");
    let lines: String = (1..=9)
        .map(|p| format!("{{\"id\": \"m{p}\", \"producer\": {p}, \"seq\": 0, \"amount\": 1}}\n"))
        .collect();
    f.write_str(&lines).unwrap();
    let file = f.path().to_str().unwrap();
    let cases: [(&[&str], &str); 8] = [
        (
            &[
                "run",
                "ddia",
                "--store",
                "naive",
                "--guarantee",
                "sometimes",
            ],
            "invalid value 'sometimes' for '--guarantee",
        ),
        (
            &["run", "payments", "--store", "naive", "--producer", "maybe"],
            "invalid value 'maybe' for '--producer",
        ),
        (
            &["run", "payments", "--store", "message-id", "--window", "0"],
            "a message-id window must hold 1 to 32 ids, not 0",
        ),
        (
            &[
                "run",
                "--log",
                file,
                "--store",
                "naive",
                "--producer",
                "idempotent",
            ],
            "line 9: the idempotent log remembers at most 8 producers",
        ),
        (
            &["run", "--log", file, "--store", "producer-seq"],
            "the producer-sequence store remembers at most 8 producers",
        ),
        (
            &["run", "dual-write"],
            "dual-write needs --fix none, atomic, derive or split",
        ),
        (
            &["run", "ddia", "--store", "naive", "--fix", "atomic"],
            "--fix applies to the dual-write scenario only",
        ),
        (&["run", "ddia"], "--store is required"),
    ];
    for (args, msg) in cases {
        refuses(args, msg);
    }
}

/// The producer's at-most-once: the send of p17 is lost and never retried, so the log
/// holds p18 only; the truth is what the application sent (8), and the loss is named.
#[test]
fn a_producer_that_never_retries_loses_a_payment() {
    let v = run(&["payments", "--store", "naive", "--producer", "no-retry"]);
    assert_eq!(
        (
            v["events"].as_u64(),
            v["final_total"].as_i64(),
            v["true_total"].as_i64(),
            v["verdict"].as_str()
        ),
        (Some(1), Some(3), Some(8), Some("under"))
    );
    assert_eq!(v["lost_sends"], serde_json::json!(["p17"]));
    let out = idem()
        .args([
            "run",
            "payments",
            "--store",
            "message-id",
            "--producer",
            "no-retry",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains(
            "  lost sends          p17 (5 in all): sent, lost before the log, never retried\n"
        ),
        "{text}"
    );
}

/// The DDIA boundary, a naturally idempotent operation: a gauge. `set` and `max` end
/// exact under the consumer crash with no stamp at all; an old reading that arrives
/// after the last sends `set` back to 60, while `max` stays at 100. The matrix prints
/// the same as its second table.
#[test]
fn a_gauge_needs_no_stamp_until_a_reading_arrives_late() {
    let total = |args: &[&str]| run(args)["final_total"].as_i64().unwrap();
    assert_eq!(total(&["gauge", "--store", "set"]), 100);
    assert_eq!(total(&["gauge", "--store", "max"]), 100);
    assert_eq!(total(&["late-reading", "--store", "set"]), 60);
    assert_eq!(total(&["late-reading", "--store", "max"]), 100);
    let v = run(&["gauge", "--store", "set"]);
    assert_eq!(
        (
            v["true_total"].as_i64(),
            v["redelivered"].as_array().map(Vec::len)
        ),
        (Some(100), Some(10)),
        "the replay of 40..49 happened and did no harm"
    );
    let out = idem().args(["matrix", "--json"]).output().unwrap();
    let m: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let cells: Vec<(String, String, i64)> = m["gauges"]["rows"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| {
            r["cells"].as_array().unwrap().iter().map(move |c| {
                (
                    r["store"].as_str().unwrap().to_string(),
                    c["verdict"].as_str().unwrap().to_string(),
                    c["final_total"].as_i64().unwrap(),
                )
            })
        })
        .collect();
    let expect = [
        ("set", "exact", 100),
        ("set", "under", 60),
        ("max", "exact", 100),
        ("max", "exact", 100),
    ];
    assert_eq!(
        cells,
        expect.map(|(s, v, t)| (s.to_string(), v.to_string(), t))
    );
}
