//! `idem mqtt consume --truth` graded on ids, not totals, against a broker the test plays
//! on 127.0.0.1: a fabricated message that offsets a lost one is named, and a kill
//! between the line of an applied id and the record that applies it changes no verdict.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

mod common;
use common::{idem, ids_log};

/// A QoS 1 PUBLISH on `pay` of the payment `id` and `amount`, identifier `pid`.
fn publish(pid: u8, id: &str, amount: i64, dup: bool) -> Vec<u8> {
    let payload = format!(r#"{{"id": "{id}", "payer": "ada", "amount": {amount}}}"#);
    let mut p = vec![
        if dup { 0x3a } else { 0x32 },
        (2 + 3 + 2 + payload.len()) as u8,
    ];
    p.extend_from_slice(&[0x00, 0x03, b'p', b'a', b'y', 0x00, pid]);
    p.extend_from_slice(payload.as_bytes());
    p
}

/// A broker that answers each connection in turn with CONNACK (session present 1),
/// SUBACK (QoS 1) and then `script[i]`'s PUBLISHes, and reads until the client closes.
fn broker(script: Vec<Vec<Vec<u8>>>) -> (String, std::thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let handle = std::thread::spawn(move || {
        for publishes in script {
            let (mut s, _) = listener.accept().unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let mut buf = [0u8; 512];
            let _ = s.read(&mut buf);
            let mut out = vec![0x20, 0x02, 0x01, 0x00, 0x90, 0x03, 0x00, 0x01, 0x01];
            publishes.iter().for_each(|p| out.extend_from_slice(p));
            let _ = s.write_all(&out);
            while matches!(s.read(&mut buf), Ok(n) if n > 0) {}
        }
    });
    (addr, handle)
}

/// `idem mqtt consume` of the message-id store at QoS 1, graded by `truth`.
fn consume(addr: &str, flash: &Path, truth: &Path, extra: &[&str]) -> std::process::Output {
    idem()
        .args(["mqtt", "consume", "--broker", addr, "--topic", "pay"])
        .args([
            "--qos",
            "1",
            "--store",
            "message-id",
            "--idle-ms",
            "300",
            "--json",
        ])
        .arg("--flash")
        .arg(flash)
        .arg("--truth")
        .arg(truth)
        .args(extra)
        .output()
        .unwrap()
}

fn report(out: &std::process::Output) -> Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

const TRUTH: &str = "{\"id\": \"p1\", \"payer\": \"ada\", \"amount\": 5}\n{\"id\": \"p2\", \"payer\": \"ada\", \"amount\": 3}\n";

#[test]
fn a_fabricated_message_that_offsets_a_lost_one_is_not_exact() {
    let dir = tempfile::tempdir().unwrap();
    let truth = dir.path().join("truth.jsonl");
    std::fs::write(&truth, TRUTH).unwrap();
    // p1 (5) never comes; zz (5) does: the totals agree at 8.
    let (addr, b) = broker(vec![vec![
        publish(1, "p2", 3, false),
        publish(2, "zz", 5, false),
    ]]);
    let v = report(&consume(&addr, &dir.path().join("dev.img"), &truth, &[]));
    b.join().unwrap();
    assert_eq!(
        (&v["final_total"], &v["true_total"]),
        (&json!(8), &json!(8)),
        "{v}"
    );
    assert_eq!(v["verdict"], "over and under", "{v}");
    assert_eq!(
        v["ids"],
        json!({"missing": 1, "missing_first": ["p1"], "applied_again": 0,
               "applied_again_first": [], "not_in_truth": 1, "not_in_truth_first": ["zz"]})
    );
}

#[test]
fn a_kill_between_the_ids_log_and_the_record_changes_no_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let truth = dir.path().join("truth.jsonl");
    std::fs::write(&truth, TRUTH).unwrap();
    let flash = dir.path().join("dev.img");
    // Killed once the ids' lines are in the image file and before their records reach
    // it (and before any PUBACK). p1 and p2 come in one write, so they are one group
    // commit: both lines go to the file before the group's records. The broker
    // sends p1 again, DUP 1, with p2. The image applied nothing, so the log's lines past
    // its count are dropped at open, and p1 and p2 are applied (once) by the second run.
    let (addr, b) = broker(vec![
        vec![publish(1, "p1", 5, false), publish(2, "p2", 3, false)],
        vec![publish(1, "p1", 5, true), publish(2, "p2", 3, false)],
    ]);
    let out = consume(&addr, &flash, &truth, &["--abort-after-id-log", "1"]);
    assert_eq!(out.status.code(), None, "aborted");
    assert_eq!(
        ids_log(&flash),
        "{\"n\":1,\"id\":\"p1\"}\n{\"n\":2,\"id\":\"p2\"}\n"
    );
    let v = report(&consume(&addr, &flash, &truth, &[]));
    b.join().unwrap();
    assert_eq!(
        (
            &v["final_total"],
            &v["applied"],
            &v["duplicates_skipped"],
            &v["verdict"]
        ),
        (&json!(8), &json!(2), &json!(0), &json!("exact")),
        "{v}"
    );
    assert_eq!(
        (&v["resumed"], &v["redeliveries"], &v["ids"]["missing"]),
        (&json!(false), &json!(1), &json!(0)),
        "{v}"
    );
    assert_eq!(
        ids_log(&flash),
        "{\"n\":1,\"id\":\"p1\"}\n{\"n\":2,\"id\":\"p2\"}\n"
    );
    assert!(!dir.path().join("dev.img.ids").exists(), "no log beside it");
}
