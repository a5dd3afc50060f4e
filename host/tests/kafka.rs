//! `idem kafka` against librdkafka's in-process mock broker (`idem kafka mock-broker`, on
//! 127.0.0.1, stopped when its standard input closes). A real broker (tansu) is in
//! `tests/tests/tansu.rs`.
#![cfg(feature = "kafka")]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use assert_fs::prelude::*;
use idem_sim::rng::SplitMix64;
use serde_json::Value;

mod common;
use common::{idem, json, refuses};

/// A mock broker for one test; dropped, it stops.
struct Mock {
    child: Child,
    brokers: String,
}

impl Mock {
    fn start() -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_idem"))
            .args(["kafka", "mock-broker"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        Self {
            child,
            brokers: line.trim().to_string(),
        }
    }
}

impl Drop for Mock {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

fn lab(brokers: &str, idempotent: bool) -> Value {
    let mut args = vec!["kafka", "lab", "--json", "--brokers", brokers];
    if idempotent {
        args.push("--idempotent");
    }
    json(&args, 0)
}

#[test]
fn the_lab_shows_the_duplicate_and_the_table() {
    let mock = Mock::start();
    for idempotent in [false, true] {
        let v = lab(&mock.brokers, idempotent);
        let records = v["records"].as_array().unwrap();
        let keys: Vec<&str> = records.iter().map(|r| r["key"].as_str().unwrap()).collect();
        assert_eq!(
            keys.iter().filter(|k| **k == "p17").count(),
            2,
            "{idempotent}: the second send lands too"
        );
        assert_eq!(keys.iter().filter(|k| **k == "p18").count(), 1);
        let p17: Vec<&Value> = records.iter().filter(|r| r["key"] == "p17").collect();
        assert_eq!(
            (p17[0]["partition"].clone(), p17[0]["offset"].as_i64()),
            (p17[1]["partition"].clone(), Some(0))
        );
        assert_eq!(
            p17[1]["offset"], 1,
            "the duplicate is at the next offset of the same partition"
        );
        assert_eq!(p17[0]["value"], "{\"payer\":\"ada\",\"amount\":5}");
        assert_eq!(
            v["totals"],
            serde_json::json!({"naive": 13, "offset": 13, "message-id": 8, "atomic": 13})
        );
        assert_eq!(v["true_total"], 8);
    }
}

/// Consumes `topic` with `store`, killing the consumer at seeded random instants, then
/// lets a last run finish; the final JSON.
fn consume_with_kills(
    brokers: &str,
    topic: &str,
    store: &str,
    flash: &std::path::Path,
    kills: u32,
) -> Value {
    let group = format!("g-{store}");
    let base = [
        "kafka",
        "consume",
        topic,
        "--group",
        &group,
        "--store",
        store,
        "--brokers",
        brokers,
        "--idle-ms",
        "300",
    ];
    let mut rng = SplitMix64::new(u64::from(kills) * 31 + store.len() as u64);
    for _ in 0..kills {
        let mut child = Command::new(env!("CARGO_BIN_EXE_idem"))
            .args(base)
            .arg("--flash")
            .arg(flash)
            .args(["--pace-ms", "20"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(rng.range(300, 1500)));
        let _ = child.kill();
        let _ = child.wait();
    }
    let mut args: Vec<&str> = base.to_vec();
    let f = flash.to_str().unwrap();
    args.extend(["--flash", f, "--json"]);
    json(&args, 0)
}

#[test]
fn killed_consumers_resume_and_the_idempotent_stores_end_exact() {
    let mock = Mock::start();
    let topic = format!("ddia-{}", std::process::id());
    idem()
        .args([
            "kafka",
            "produce",
            &topic,
            "--scenario",
            "ddia",
            "--brokers",
            &mock.brokers,
        ])
        .assert()
        .success();
    let dir = assert_fs::TempDir::new().unwrap();
    let started = Instant::now();
    for store in ["offset", "message-id", "atomic"] {
        let flash = dir.child(format!("{store}.bin"));
        let v = consume_with_kills(&mock.brokers, &topic, store, flash.path(), 3);
        assert_eq!(
            (v["total"].as_i64(), v["true_total"].as_i64()),
            (Some(100), Some(100)),
            "{store}: {v}"
        );
        // Running it again after completion changes nothing.
        let again = consume_with_kills(&mock.brokers, &topic, store, flash.path(), 0);
        assert_eq!(again["total"], 100, "{store}");
    }
    assert!(started.elapsed() < Duration::from_secs(600));
}

#[test]
fn clear_errors_and_untouched_flash() {
    let mock = Mock::start();
    let dir = assert_fs::TempDir::new().unwrap();
    let flash = dir.child("f.bin");
    let f = flash.path().to_str().unwrap();
    // An unreachable broker: one sentence, exit 1, no image created.
    idem()
        .args([
            "kafka",
            "consume",
            "t",
            "--group",
            "g",
            "--store",
            "offset",
            "--flash",
            f,
            "--brokers",
            "127.0.0.1:1",
        ])
        .assert()
        .code(1)
        .stderr(predicates::str::contains(
            "cannot reach the Kafka broker at 127.0.0.1:1 within 5 s",
        ));
    assert!(!flash.path().exists());
    refuses(
        &[
            "kafka",
            "consume",
            "no-such-topic",
            "--group",
            "g",
            "--store",
            "offset",
            "--flash",
            f,
            "--brokers",
            &mock.brokers,
        ],
        "the broker has no topic no-such-topic",
    );
    assert!(!flash.path().exists());
    // An image of another topic or store is refused and left as it was.
    let topic = format!("pay-{}", std::process::id());
    idem()
        .args([
            "kafka",
            "produce",
            &topic,
            "--scenario",
            "payments",
            "--brokers",
            &mock.brokers,
        ])
        .assert()
        .success();
    let ok = [
        "kafka",
        "consume",
        &topic,
        "--group",
        "g1",
        "--store",
        "message-id",
        "--flash",
        f,
        "--brokers",
        &mock.brokers,
        "--json",
    ];
    assert_eq!(json(&ok, 0)["total"], 8);
    let before = std::fs::read(flash.path()).unwrap();
    refuses(
        &[
            "kafka",
            "consume",
            &topic,
            "--group",
            "g1",
            "--store",
            "naive",
            "--flash",
            f,
            "--brokers",
            &mock.brokers,
        ],
        "not the naive store",
    );
    assert_eq!(std::fs::read(flash.path()).unwrap(), before);
    refuses(
        &[
            "kafka",
            "consume",
            &topic,
            "--group",
            "g1",
            "--store",
            "two-phase",
            "--flash",
            f,
            "--brokers",
            &mock.brokers,
        ],
        "kafka consume takes the naive, offset, message-id or atomic store",
    );
}

/// `--truth`: graded against what the producer sent, not a second read of the topic.
#[test]
fn a_truth_file_grades_the_consume() {
    let mock = Mock::start();
    let dir = assert_fs::TempDir::new().unwrap();
    let topic = format!("truth-{}", std::process::id());
    let sent = dir.child("sent.jsonl");
    let s = sent.path().to_str().unwrap();
    idem()
        .args(["kafka", "produce", &topic, "--scenario", "payments"])
        .args(["--brokers", &mock.brokers, "--truth", s])
        .assert()
        .success()
        .stdout(format!(
            "produced 3 records to {topic}\nwhat was sent is in {s}\n"
        ));
    let lines: Vec<Value> = std::fs::read_to_string(sent.path())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        lines,
        [
            serde_json::json!({"idem_truth": 1, "writer": "kafka produce"}),
            serde_json::json!({"id": "p17", "payer": "ada", "amount": 5}),
            serde_json::json!({"id": "p17", "payer": "ada", "amount": 5}),
            serde_json::json!({"id": "p18", "payer": "bo", "amount": 3}),
            serde_json::json!({"idem_truth_end": 3}),
        ]
    );
    // The same file cut before its end line, as a killed producer would leave it: refused.
    let cut = dir.child("cut.jsonl");
    let text = std::fs::read_to_string(sent.path()).unwrap();
    cut.write_str(&text[..text.rfind("{\"idem_truth_end").unwrap()])
        .unwrap();
    // A truth written by hand that leaves p18 out: the same records grade as over.
    let short = dir.child("short.jsonl");
    short
        .write_str("{\"id\":\"p17\",\"payer\":\"ada\",\"amount\":5}\n\n")
        .unwrap();
    let bad = dir.child("bad.jsonl");
    bad.write_str("{\"id\":\"p17\",\"payer\":\"ada\",\"amount\":5}\n{\"id\":\"p18\"}\n")
        .unwrap();
    let consume = |store: &str, truth: &assert_fs::fixture::ChildPath| {
        let flash = dir.child(format!(
            "{store}-{}.bin",
            truth.path().display().to_string().len()
        ));
        json(
            &[
                "kafka",
                "consume",
                &topic,
                "--group",
                store,
                "--store",
                store,
                "--flash",
                flash.path().to_str().unwrap(),
                "--brokers",
                &mock.brokers,
                "--json",
                "--truth",
                truth.path().to_str().unwrap(),
            ],
            0,
        )
    };
    let v = consume("message-id", &sent);
    assert_eq!(
        (&v["total"], &v["true_total"], &v["verdict"]),
        (&Value::from(8), &Value::from(8), &Value::from("exact")),
        "{v}"
    );
    assert_eq!(
        v["truth"],
        serde_json::json!({"file": s, "ids": 2, "sent": 3})
    );
    let parts = v["partitions"].as_array().unwrap();
    assert!(parts.iter().all(|p| p["true_total"].is_null()), "{v}");
    let read: u64 = parts
        .iter()
        .map(|p| p["records_read"].as_u64().unwrap())
        .sum();
    assert_eq!(read, 3, "{v}");
    let v = consume("naive", &sent);
    assert_eq!(
        (&v["total"], &v["verdict"]),
        (&Value::from(13), &Value::from("over"))
    );
    let v = consume("message-id", &short);
    assert_eq!(
        (&v["true_total"], &v["verdict"]),
        (&Value::from(5), &Value::from("over"))
    );
    let base = [
        "kafka", "consume", &topic, "--group", "g", "--store", "offset",
    ];
    let f = dir.child("refused.bin");
    let mut args = base.to_vec();
    let (b, fl) = (bad.path().to_str().unwrap(), f.path().to_str().unwrap());
    args.extend(["--flash", fl, "--brokers", &mock.brokers, "--truth", b]);
    refuses(&args, &format!("line 2 of {b} is not a payment"));
    let c = cut.path().to_str().unwrap();
    let mut cut_args = base.to_vec();
    cut_args.extend(["--flash", fl, "--brokers", &mock.brokers, "--truth", c]);
    refuses(
        &cut_args,
        &format!("{c} was written by idem kafka produce and has no end line"),
    );
    args.push("--follow");
    refuses(&args, "cannot be used with");
    assert!(!f.path().exists(), "nothing refused made an image");
}

/// `--truth` grades the set of ids applied: on p17 (5), p17 again and p18 (3), the
/// message-id store's 8 against p17 (5) and zz (3) names zz and p18; the naive store's
/// 13 against p17, p18 and p19 (5) names p19 and p17. Then a consume killed right after
/// it logged an id, before the step that writes the record holding it
/// (`--abort-after-ids`), 6 times a store, and run to the end: the ids the image
/// applied add up to its total (ddia: 100 events e0..e99 of +1).
#[test]
fn the_truth_grades_ids_across_kills_between_an_id_and_its_record() {
    let mock = Mock::start();
    let dir = assert_fs::TempDir::new().unwrap();
    let path = |name: &str| dir.child(name).path().to_str().unwrap().to_string();
    let b = mock.brokers.as_str();
    for (topic, scenario) in [("pay", "payments"), ("ddia", "ddia")] {
        let t = path(&format!("{topic}.jsonl"));
        succeeds(&[
            "kafka",
            "produce",
            topic,
            "--scenario",
            scenario,
            "--brokers",
            b,
            "--truth",
            &t,
        ]);
    }
    dir.child("zz.jsonl")
        .write_str("{\"id\":\"p17\",\"payer\":\"a\",\"amount\":5}\n{\"id\":\"zz\",\"payer\":\"b\",\"amount\":3}\n")
        .unwrap();
    dir.child("p19.jsonl")
        .write_str("{\"id\":\"p17\",\"payer\":\"a\",\"amount\":5}\n{\"id\":\"p18\",\"payer\":\"b\",\"amount\":3}\n{\"id\":\"p19\",\"payer\":\"b\",\"amount\":5}\n")
        .unwrap();
    let consume = |topic: &str, store: &str, flash: &str, extra: &[&str]| {
        let mut a = vec![
            "kafka", "consume", topic, "--group", flash, "--store", store,
        ];
        let f = path(flash);
        a.extend(["--flash", &f, "--brokers", b]);
        a.extend(extra);
        idem().args(&a).output().unwrap()
    };
    let graded = |topic: &str, store: &str, flash: &str, truth: &str, extra: &[&str]| {
        let t = path(truth);
        let mut a = vec!["--json", "--truth", &t];
        a.extend(extra);
        let out = consume(topic, store, flash, &a);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    let v = graded("pay", "message-id", "m.bin", "zz.jsonl", &[]);
    assert_eq!(
        (&v["total"], &v["true_total"], &v["verdict"]),
        (&8.into(), &8.into(), &"over and under".into())
    );
    assert_eq!(
        (&v["ids"]["missing_first"], &v["ids"]["not_in_truth_first"]),
        (&serde_json::json!(["zz"]), &serde_json::json!(["p18"]))
    );
    let v = graded("pay", "naive", "n.bin", "p19.jsonl", &[]);
    assert_eq!(
        (&v["total"], &v["true_total"], &v["verdict"]),
        (&13.into(), &13.into(), &"over and under".into())
    );
    assert_eq!(
        (&v["ids"]["missing_first"], &v["ids"]["applied_again_first"]),
        (&serde_json::json!(["p19"]), &serde_json::json!(["p17"]))
    );
    let mut rng = SplitMix64::new(0x1d5);
    let mut replayed = 0;
    for (store, sync) in [
        ("message-id", "checkpoint"),
        ("atomic", "checkpoint"),
        ("offset", "every-write"),
        ("naive", "every-write"),
    ] {
        let flash = format!("{store}-{sync}.bin");
        let t = path("ddia.jsonl");
        let args = ["--truth", &t, "--sync", sync, "--checkpoint-every", "7"];
        for _ in 0..6 {
            let n = rng.range(1, 16).to_string();
            let mut a = args.to_vec();
            a.extend(["--abort-after-ids", &n]);
            let out = consume("ddia", store, &flash, &a);
            assert_eq!(out.status.code(), None, "{store}: it was not aborted");
        }
        let v = graded("ddia", store, &flash, "ddia.jsonl", &args[2..]);
        let count = |k: &str| v["ids"][k].as_i64().unwrap();
        let total = v["total"].as_i64().unwrap();
        assert_eq!(
            total,
            100 - count("missing") + count("applied_again") + count("not_in_truth"),
            "{store}: {v}"
        );
        if store == "naive" {
            replayed = count("applied_again");
            assert_eq!(
                v["verdict"],
                if total == 100 { "exact" } else { "over" },
                "{v}"
            );
        } else {
            assert_eq!(
                (total, &v["verdict"]),
                (100, &"exact".into()),
                "{store}: {v}"
            );
        }
    }
    // Written through at each write, the naive store's records outlive the kills, and
    // the replays apply ids again, which the ids name.
    assert!(replayed > 0, "no kill replayed an id");
}

/// Runs `idem args`, which must succeed.
fn succeeds(args: &[&str]) {
    let out = idem().args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
