//! `idem mqtt consume` against brokers that misbehave, played by the test on 127.0.0.1:
//! garbage after CONNACK, a packet out of order, a refused connection, no broker at
//! all, a broker that goes away; and images made by another command. Each gets one
//! sentence and a non-zero exit, and what the image held is still there.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::time::Duration;

use assert_fs::prelude::*;
use predicates::prelude::*;
use serde_json::Value;

mod common;
use common::idem;

/// A broker of the test's own: it accepts `sessions` connections in turn, reads the
/// CONNECT, answers each with `reply(i)`, and reads what the client sends until it
/// closes (or, with `hang_up`, closes at once).
fn fake_broker(
    sessions: usize,
    reply: fn(usize) -> Vec<u8>,
) -> (String, std::thread::JoinHandle<()>) {
    broker_of(sessions, reply, false)
}

fn broker_of(
    sessions: usize,
    reply: fn(usize) -> Vec<u8>,
    hang_up: bool,
) -> (String, std::thread::JoinHandle<()>) {
    broker_at("127.0.0.1:0", sessions, reply, hang_up)
}

/// [`broker_of`] at `addr`: the address of an earlier one, whose image names it (an
/// image belongs to one broker).
fn broker_at(
    addr: &str,
    sessions: usize,
    reply: fn(usize) -> Vec<u8>,
    hang_up: bool,
) -> (String, std::thread::JoinHandle<()>) {
    let listener = TcpListener::bind(addr).unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let handle = std::thread::spawn(move || {
        for i in 0..sessions {
            let Ok((mut s, _)) = listener.accept() else {
                return;
            };
            s.set_read_timeout(Some(Duration::from_millis(200)))
                .unwrap();
            let mut buf = [0u8; 512];
            let _ = s.read(&mut buf);
            let _ = s.write_all(&reply(i));
            if hang_up {
                continue;
            }
            // A client idle past its --idle-ms disconnects.
            let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
            while matches!(s.read(&mut buf), Ok(n) if n > 0) {}
        }
    });
    (addr, handle)
}

/// `idem mqtt consume` of the naive store with a 300 ms idle stop, unless `extra` says
/// otherwise.
fn consume(addr: &str, flash: &Path, extra: &[&str]) -> assert_cmd::Command {
    let mut c = idem();
    c.args([
        "mqtt",
        "consume",
        "--broker",
        addr,
        "--topic",
        "pay",
        "--client-id",
        "t",
    ])
    .args(["--json", "--flash"])
    .arg(flash)
    .args(extra);
    for (flag, default) in [("--store", "naive"), ("--idle-ms", "300")] {
        if !extra.contains(&flag) {
            c.args([flag, default]);
        }
    }
    c
}

/// CONNACK with session present 1 (no SUBSCRIBE), then a QoS 2 PUBLISH of p1 (5),
/// identifier 1.
fn connack_and_publish() -> Vec<u8> {
    let payload = br#"{"id": "p1", "payer": "ada", "amount": 5}"#;
    let mut p = vec![
        0x20,
        0x02,
        0x01,
        0x00,
        0x34,
        (2 + 3 + 2 + payload.len()) as u8,
    ];
    p.extend_from_slice(&[0x00, 0x03, b'p', b'a', b'y', 0x00, 0x01]);
    p.extend_from_slice(payload);
    p
}

#[test]
fn garbage_after_a_message_is_one_sentence_and_the_message_stays_applied() {
    let dir = assert_fs::TempDir::new().unwrap();
    let flash = dir.child("dev.img");
    // The PUBLISH, then a packet type no broker sends a client (SUBSCRIBE).
    let (addr, broker) = fake_broker(1, |_| {
        let mut p = connack_and_publish();
        p.extend_from_slice(&[0x82, 0x05, 0x00, 0x01, 0x00, 0x00, 0x00]);
        p
    });
    consume(&addr, flash.path(), &[])
        .assert()
        .code(1)
        .stdout("")
        .stderr(predicate::str::contains(
            "idem: the broker sent a packet of type 8, which no broker sends a client; the connection was closed and what the image holds is kept",
        ));
    broker.join().unwrap();
    // The message was made durable before its PUBREC; the image holds it and its
    // identifier. A broker that now resends it finds it held.
    let (addr, broker) = broker_at(&addr, 1, |_| connack_and_publish(), false);
    let out = consume(&addr, flash.path(), &[]).output().unwrap();
    broker.join().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (
            v["final_total"].as_i64(),
            v["applied"].as_i64(),
            v["held_again"].as_i64()
        ),
        (Some(5), Some(1), Some(1)),
        "{v}"
    );
}

#[test]
fn out_of_order_packets_and_refusals_get_one_sentence_each() {
    type Reply = fn(usize) -> Vec<u8>;
    let cases: [(Reply, &str); 4] = [
        (
            |_| vec![0x20, 0x02, 0x01, 0x00, 0x40, 0x02, 0x00, 0x07],
            "the broker sent PUBACK, which a subscriber that publishes nothing never receives",
        ),
        (
            |_| vec![0x20, 0x02, 0x00, 0x05],
            "the broker refused the connection: Connection Refused, not authorized (return code 5)",
        ),
        (
            |_| vec![0x20, 0x02, 0x00, 0x00, 0x90, 0x03, 0x00, 0x01, 0x80],
            "the broker refused the subscription to pay: Failure (return code 0x80)",
        ),
        (
            |_| vec![0x20, 0x03, 0x00, 0x00, 0x00],
            "the broker sent a malformed packet of type 2",
        ),
    ];
    for (reply, sentence) in cases {
        let dir = assert_fs::TempDir::new().unwrap();
        let (addr, broker) = fake_broker(1, reply);
        consume(&addr, dir.child("dev.img").path(), &[])
            .assert()
            .code(1)
            .stderr(predicate::str::contains(sentence));
        broker.join().unwrap();
    }
}

#[test]
fn no_broker_gets_five_tries_then_one_sentence() {
    let dir = assert_fs::TempDir::new().unwrap();
    // A port nothing listens on: bound, then released.
    let addr = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    consume(&addr, dir.child("dev.img").path(), &[])
        .assert()
        .code(1)
        .stderr(predicate::str::contains(format!(
            "idem: no MQTT broker answered at {addr} after 5 tries"
        )));
}

#[test]
fn a_broker_that_goes_away_each_time_is_given_up_on_after_five_reconnects() {
    let dir = assert_fs::TempDir::new().unwrap();
    // CONNACK, then the connection closes, six times.
    let (addr, broker) = broker_of(6, |_| vec![0x20, 0x02, 0x01, 0x00], true);
    let mut c = consume(&addr, dir.child("dev.img").path(), &["--idle-ms", "5000"]);
    c.assert().code(1).stderr(predicate::str::contains(format!(
        "idem: the broker at {addr} went away 5 times (the broker closed the connection); what the image holds is kept"
    )));
    broker.join().unwrap();
}

#[test]
fn images_of_other_commands_are_refused_both_ways() {
    let dir = assert_fs::TempDir::new().unwrap();
    let scenario = dir.child("ddia.img");
    idem()
        .args(["consume", "ddia", "--store", "naive", "--flash"])
        .arg(scenario.path())
        .assert()
        .success();
    let before = std::fs::read(scenario.path()).unwrap();
    consume("127.0.0.1:9", scenario.path(), &[])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("holds the naive store of ddia"));
    assert_eq!(std::fs::read(scenario.path()).unwrap(), before);

    let (addr, broker) = fake_broker(1, |_| connack_and_publish());
    let mqtt = dir.child("dev.img");
    consume(&addr, mqtt.path(), &[]).assert().success();
    broker.join().unwrap();
    idem()
        .args(["status", "--flash"])
        .arg(mqtt.path())
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "holds `idem mqtt consume` state for the session of client t on pay at 127.0.0.1:",
        ));
    // Another store, or another session, on the same image: refused, naming what differs.
    let mut other = consume("127.0.0.1:9", mqtt.path(), &["--store", "message-id"]);
    other.assert().code(2).stderr(predicate::str::contains(
        "store naive in the image, message-id in this run",
    ));
}

#[test]
fn stores_that_need_offsets_are_refused_by_name() {
    let dir = assert_fs::TempDir::new().unwrap();
    let mut c = consume(
        "127.0.0.1:9",
        dir.child("x.img").path(),
        &["--store", "offset"],
    );
    c.assert().code(2).stderr(predicate::str::contains(
        "mqtt consume takes the naive or message-id store: MQTT has no offsets",
    ));
}

#[test]
fn the_mqtt_matrix_prints_each_qos_against_a_reset_at_every_crash_point() {
    let out = idem()
        .args(["matrix", "--source", "mqtt"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    // Journal format 3: records at their encoded size take fewer word writes, so a run
    // has fewer reset points (format 2's slots, with the receiver's tombstones: 678,
    // 3,240, 1,356, 6,480, 860, 4,104).
    for row in [
        "QoS 0                   30  under at 141/142 -10326  under at 1283/1284 -68840",
        "QoS 1                   30  over at 30/142 +141     exact at 1284",
        "QoS 2, in RAM           30  over at 30/142 +141     exact at 1284",
        "QoS 2, in flash         60  exact at 644            exact at 3021",
        "QoS 2, with next        38  exact at 405            exact at 1889",
    ] {
        assert!(text.lines().any(|l| l == row), "{row}\n{text}");
    }
    assert!(text.lines().all(|l| l.len() <= 100), "{text}");
    let out = idem()
        .args(["matrix", "--source", "mqtt", "--json"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let ram = &v["rows"][2];
    assert_eq!(
        (ram["qos"].as_u64(), ram["identifiers"].as_str()),
        (Some(2), Some("ram"))
    );
    assert_eq!(ram["stores"]["naive"]["over"].as_u64(), Some(30));
    assert_eq!(ram["stores"]["message-id"]["exact"].as_bool(), Some(true));
}

#[test]
fn idem_run_mqtt_shows_each_qos_against_one_reset_after_p14s_record() {
    let run = |args: &[&str]| -> Value {
        let out = idem()
            .args(["run", "mqtt", "--json"])
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };
    // (arguments, final total, verdict, applied twice, never applied); p14 is 6, the
    // three behind it on the wire at QoS 1 and 2 are 7, 8 and 9; at QoS 0, with no
    // in-flight limit, the broker had written all 30, and p15 to p29 (75) are lost.
    type Case<'a> = (&'a [&'a str], i64, &'a str, &'a [&'a str], &'a [&'a str]);
    let cases: [Case; 6] = [
        (
            &["--store", "naive", "--qos", "2", "--session", "ram"],
            147,
            "over",
            &["p14"],
            &[],
        ),
        (&["--store", "naive", "--qos", "2"], 141, "exact", &[], &[]),
        (
            &["--store", "message-id", "--qos", "2", "--session", "ram"],
            141,
            "exact",
            &[],
            &[],
        ),
        (
            &["--store", "naive", "--qos", "1"],
            147,
            "over",
            &["p14"],
            &[],
        ),
        (
            &["--store", "message-id", "--qos", "1"],
            141,
            "exact",
            &[],
            &[],
        ),
        (
            &["--store", "naive", "--qos", "0"],
            66,
            "under",
            &[],
            &[
                "p15", "p16", "p17", "p18", "p19", "p20", "p21", "p22", "p23", "p24", "p25", "p26",
                "p27", "p28", "p29",
            ],
        ),
    ];
    for (args, total, verdict, twice, lost) in cases {
        let v = run(args);
        assert_eq!(
            (
                v["final_total"].as_i64(),
                v["true_total"].as_i64(),
                v["verdict"].as_str()
            ),
            (Some(total), Some(141), Some(verdict)),
            "{args:?}: {v}"
        );
        assert_eq!(
            v["applied_twice"],
            serde_json::json!(twice),
            "{args:?}: {v}"
        );
        assert_eq!(v["lost"], serde_json::json!(lost), "{args:?}: {v}");
    }
    // The trace: with the identifiers in flash, the resent p14 is held.
    let out = idem()
        .args(["run", "mqtt", "--store", "naive", "--trace"])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("PUBLISH p14 (id 3)         applied, a record; RESET"),
        "{text}"
    );
    assert!(
        text.contains("PUBLISH p14 (id 3, DUP 1)  held: nothing applied, PUBREC 3"),
        "{text}"
    );
    assert!(text.lines().all(|l| l.len() <= 100), "{text}");
    // At QoS 0 nothing waits for an acknowledgement, so no in-flight limit holds the
    // broker back: it wrote all 30 before the reset.
    let out = idem()
        .args(["run", "mqtt", "--store", "naive", "--qos", "0"])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.starts_with(
            "mqtt: 30 payments p0..p29 (141 in all) at QoS 0 to the naive store\n\
all 30 written at once (QoS 0 has no in-flight limit); no acknowledgement\n\
the device resets once, after p14's record\n"
        ),
        "{text}"
    );
    assert_eq!(
        run(&["--store", "naive", "--qos", "0"])["in_flight"],
        Value::Null
    );
    assert_eq!(
        run(&["--store", "naive", "--qos", "2"])["in_flight"].as_u64(),
        Some(4)
    );
    idem()
        .args(["run", "mqtt", "--store", "offset"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "mqtt takes the naive or message-id store",
        ));
    idem()
        .args(["run", "ddia", "--store", "naive", "--qos", "1"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "--qos and --session apply to the mqtt scenario only",
        ));
}
