//! MQTT 5 against Mosquitto 2.0 (Debian 12's 2.0.11), each test with its own broker on a
//! free port of 127.0.0.1 (`idem_tests::mosquitto`), at its stock in-flight limit (20):
//! what the broker does with a client's Receive Maximum and an absent Session Expiry
//! Interval (a raw-socket client, tests/clients/paho_mqtt.py), and `idem mqtt consume
//! --protocol 5` exact across kills with paho-mqtt publishing at MQTT 5.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use idem_sim::rng::SplitMix64;
use idem_tests::idem;
use idem_tests::mosquitto::{Broker, Scratch, paho};
use serde_json::Value;

fn lines(out: &Output) -> Vec<Value> {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn mosquitto_2_0_11_sends_past_a_clients_receive_maximum_once_the_oldest_completes() {
    let s = Scratch::new("v5-window");
    let b = Broker::start(&s.join("data"));
    let out = paho(&[
        "raw-v5-window",
        "--broker",
        &b.addr(),
        "--topic",
        "w",
        "--client-id",
        "w",
        "--count",
        "12",
        "--receive-maximum",
        "4",
        "--quiet",
        "0.5",
    ]);
    let got = lines(&out);
    // The CONNACK names the broker's own Receive Maximum, its max_inflight_messages.
    assert_eq!(got[0]["properties"]["receive_maximum"], 20, "{}", got[0]);
    let ids = |phase: &str| -> Vec<u64> {
        got.iter()
            .filter(|p| p["phase"] == phase)
            .map(|p| {
                assert_eq!(p["packet"], "PUBLISH", "{p}");
                p["packet_id"].as_u64().unwrap()
            })
            .collect()
    };
    // Of 12, the Receive Maximum's 4 while none is answered: honoured so far.
    assert_eq!(ids("first"), [1, 2, 3, 4]);
    // The first completed (PUBREC, PUBREL, PUBCOMP), 3 still unanswered: 2.0.11 sends 4
    // more, 7 unacknowledged against a Receive Maximum of 4 (MQTT 5 §4.9 forbids it),
    // as it does past its own max_inflight_messages at MQTT 3.1.1
    // (tests/tests/mosquitto.rs).
    assert_eq!(ids("after-pubcomp"), [5, 6, 7, 8]);
}

#[test]
fn an_absent_session_expiry_interval_ends_the_session_at_disconnect() {
    let s = Scratch::new("v5-expiry");
    let b = Broker::start(&s.join("data"));
    let addr = b.addr();
    let present = |id: &str, expiry: &[&str]| {
        let args = [
            &[
                "raw-v5-session",
                "--broker",
                &addr,
                "--topic",
                "e",
                "--client-id",
                id,
            ][..],
            expiry,
        ]
        .concat();
        lines(&paho(&args))[0]["session_present"].clone()
    };
    // Clean Start 0 without the property: the interval is 0 (MQTT 5 §3.1.2.11.2), and
    // the second connection finds no session.
    assert_eq!(present("absent", &[]), serde_json::json!([false, false]));
    // With an interval (idem asks for 0xFFFFFFFF, never), the session outlives it.
    assert_eq!(
        present("kept", &["--session-expiry", "60"]),
        serde_json::json!([false, true])
    );
}

const TOPIC: &str = "payments";
const MESSAGES: usize = 2_000;
const KILLS: u64 = 20;

fn consume(b: &Broker, flash: &Path, store: &str, extra: &[&str]) -> Output {
    let idle: &[&str] = if extra.contains(&"--idle-ms") {
        &[]
    } else {
        &["--idle-ms", "500"]
    };
    Command::new(PathBuf::from(idem().get_program()))
        .args(["mqtt", "consume", "--protocol", "5", "--broker", &b.addr()])
        .args(["--topic", TOPIC, "--client-id", store, "--store", store])
        .args(["--json", "--flash"])
        .arg(flash)
        .args(idle)
        .args(extra)
        .output()
        .unwrap()
}

fn report(b: &Broker, flash: &Path, store: &str, extra: &[&str]) -> Value {
    let out = consume(b, flash, store, extra);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn consume_at_mqtt_5_is_exact_across_20_kills_at_the_stock_in_flight_limit() {
    let s = Scratch::new("v5-kills");
    let b = Broker::start(&s.join("broker"));
    let stores = ["naive", "message-id"];
    let flash = |store: &str| s.join(&format!("{store}.img"));
    for store in stores {
        // Subscribed before paho publishes: the broker queues only for a subscription.
        let first = report(&b, &flash(store), store, &["--idle-ms", "100"]);
        assert_eq!(
            (first["applied"].as_i64(), &first["protocol"]),
            (Some(0), &Value::from("5"))
        );
    }
    let truth = s.join("truth.jsonl");
    let published = paho(&[
        "publish",
        "--broker",
        &b.addr(),
        "--topic",
        TOPIC,
        "--qos",
        "2",
        "--count",
        "2000",
        "--seed",
        "29",
        "--truth",
        truth.to_str().unwrap(),
        "--inflight",
        "20",
        "--mqtt",
        "5",
    ]);
    lines(&published);
    for (seed, store) in stores.into_iter().enumerate() {
        let mut rng = SplitMix64::new(41 + seed as u64);
        for i in 0..KILLS {
            let n = rng.range(1, 150).to_string();
            let hook = if i % 2 == 0 {
                "--abort-before-ack"
            } else {
                "--abort-after-packets"
            };
            let out = consume(&b, &flash(store), store, &[hook, &n]);
            assert_eq!(
                out.status.code(),
                None,
                "{store}: run {i} ({hook} {n}) was not killed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let end = report(
            &b,
            &flash(store),
            store,
            &["--truth", truth.to_str().unwrap()],
        );
        assert_eq!(end["verdict"], "exact", "{store}: {end}");
        assert_eq!(
            (end["applied"].as_i64(), end["duplicates_applied"].as_i64()),
            (Some(MESSAGES as i64), Some(0)),
            "{store}: {end}"
        );
        assert_eq!(
            end["promise_broken"].as_array().map(Vec::len),
            Some(0),
            "{end}"
        );
    }
}

#[test]
fn publish_at_mqtt_5_honours_the_brokers_maximum_packet_size_where_3_1_1_loses_the_connection() {
    let s = Scratch::new("v5-max-packet");
    // max_packet_size: Mosquitto's CONNACK then carries Maximum Packet Size 120.
    let b = Broker::start_with(&s.join("data"), &[("max_packet_size", "120")]);
    let topic = "t".repeat(80);
    let publish = |protocol: &str, truth: &str| {
        Command::new(PathBuf::from(idem().get_program()))
            .args(["mqtt", "publish", "--broker", &b.addr(), "--topic", &topic])
            .args(["--count", "3", "--protocol", protocol, "--truth"])
            .arg(s.join(truth))
            .output()
            .unwrap()
    };
    // Each payment's PUBLISH is 127 bytes on this topic.
    let v5 = publish("5", "v5.jsonl");
    assert_eq!(v5.status.code(), Some(1));
    let said = String::from_utf8_lossy(&v5.stderr);
    assert!(
        said.contains(
            "a 127-byte PUBLISH is past the broker's Maximum Packet Size of 120 bytes (MQTT 5 §3.2.2.3.6): it was not sent"
        ),
        "{said}"
    );
    // MQTT 3.1.1 has no way to know: the broker closes the connection at the PUBLISH.
    let v311 = publish("3.1.1", "v311.jsonl");
    assert_eq!(v311.status.code(), Some(1));
    let said = String::from_utf8_lossy(&v311.stderr);
    assert!(said.contains("Connection reset by peer"), "{said}");
    for truth in ["v5.jsonl", "v311.jsonl"] {
        assert!(!s.join(truth).exists(), "{truth}");
    }
}
