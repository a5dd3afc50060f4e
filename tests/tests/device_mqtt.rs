//! The board as an MQTT subscriber: the idem-mqtt firmware under QEMU's micro:bit model,
//! `idem device mqtt` its modem to a real Mosquitto broker, paho-mqtt (another codebase)
//! the publisher. The board speaks MQTT itself and keeps its session in its own flash;
//! QMP resets it at seeded instants, some between a record and its acknowledgement.
//!
//! Each test makes the session first (a run that subscribes and finds nothing), then
//! paho publishes the stream into it (Mosquitto queues for a session that has
//! subscribed), then the board receives it across the resets. The verdict rests on
//! paho's truth file and on the acknowledgements the host saw on the wire, not on the
//! board's word alone.

use std::path::{Path, PathBuf};
use std::process::Command;

use idem_tests::idem;
use idem_tests::mosquitto::{Broker, Scratch, paho, paho_publish};
use serde_json::Value;

/// Builds the idem-mqtt image for QEMU (as `idem device mqtt` does); its path.
fn mqtt_elf() -> PathBuf {
    let firmware = Path::new(env!("CARGO_MANIFEST_DIR")).join("../firmware");
    let status = Command::new(env!("CARGO"))
        .current_dir(&firmware)
        .args(["build", "--release", "--quiet", "--locked"])
        .args(["--bin", "idem-mqtt", "--features", "qemu"])
        .args(["--target-dir", "target/feed-qemu"])
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("RUSTFLAGS")
        .status()
        .unwrap();
    assert!(status.success(), "building the idem-mqtt image");
    firmware.join("target/feed-qemu/thumbv6m-none-eabi/release/idem-mqtt")
}

struct Board {
    elf: PathBuf,
    broker: String,
    topic: String,
    qos: &'static str,
    store: &'static str,
    /// `3.1.1` or `5`.
    protocol: &'static str,
}

impl Board {
    fn new(b: &Broker, topic: &str, qos: &'static str, store: &'static str) -> Self {
        Self {
            elf: mqtt_elf(),
            broker: b.addr(),
            topic: topic.to_string(),
            qos,
            store,
            protocol: "3.1.1",
        }
    }

    /// One `idem device mqtt` run on a fresh board: its JSON report.
    fn run(&self, extra: &[&str]) -> Value {
        let out = idem()
            .args(["device", "mqtt", "--broker", &self.broker, "--topic"])
            .args([&self.topic, "--client-id", &self.topic, "--qos", self.qos])
            .args(["--store", self.store, "--json", "--timeout", "240"])
            .args(["--idle-ms", "500", "--protocol", self.protocol, "--elf"])
            .arg(&self.elf)
            .args(extra)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "idem device mqtt {extra:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("no JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
    }

    /// Makes the session (the board subscribes), then paho publishes `count` payments
    /// into it, each once: the truth file.
    fn publish(&self, s: &Scratch, count: usize) -> PathBuf {
        let first = self.run(&[]);
        assert_eq!(first["final_total"], 0, "{first}");
        assert_eq!(first["session_present"], false, "{first}");
        let truth = s.join(&format!("{}.jsonl", self.topic));
        // At paho's default of 20 in flight, the broker's stock limit.
        if self.protocol == "5" {
            let count = count.to_string();
            let out = paho(&[
                "publish",
                "--broker",
                &self.broker,
                "--topic",
                &self.topic,
                "--qos",
                self.qos,
                "--count",
                &count,
                "--seed",
                "29",
                "--inflight",
                "20",
                "--mqtt",
                "5",
                "--truth",
                truth.to_str().unwrap(),
            ]);
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        } else {
            paho_publish(&self.broker, &self.topic, self.qos, count, &truth);
        }
        truth
    }

    fn receive(&self, truth: &Path, count: usize, resets: u32, seed: u64) -> Value {
        self.run(&[
            "--truth",
            truth.to_str().unwrap(),
            "--resets",
            &resets.to_string(),
            "--messages",
            &count.to_string(),
            "--seed",
            &seed.to_string(),
        ])
    }
}

/// The connections the board closed for the broker's resend, over every boot, as the
/// host saw them (the board's own, added over its boots, is its count frames', which a
/// reset can cut short).
fn resend_reconnects(r: &Value) -> u64 {
    num(r, "connections_for_resend")
}

fn num(v: &Value, k: &str) -> u64 {
    v[k].as_u64()
        .unwrap_or_else(|| panic!("{k} is not a count: {v}"))
}

/// The broker of these tests, at its stock in-flight limit (20): Mosquitto 2.0.11 soon
/// has the whole queue in flight, far past the board's 8 places and 24 waiting slots,
/// so the board leaves PUBLISHes unanswered and connects again for the broker's resend.
fn broker(s: &Scratch) -> Broker {
    Broker::start(s.path())
}

#[test]
fn qos_2_with_the_session_in_the_boards_flash_is_exact_across_12_resets() {
    const COUNT: usize = 500;
    let s = Scratch::new("device-mqtt-qos2");
    let b = broker(&s);
    // The naive store: QoS 2 with its identifiers in flash needs no dedup of its own.
    let board = Board::new(&b, "board-qos2", "2", "naive");
    let truth = board.publish(&s, COUNT);
    let r = board.receive(&truth, COUNT, 12, 29);
    assert_eq!(r["verdict"], "exact", "{r}");
    assert_eq!(r["final_total"], r["true_total"], "{r}");
    assert_eq!(num(&r, "true_ids"), COUNT as u64, "{r}");
    assert_eq!(num(&r, "applied"), COUNT as u64, "{r}");
    assert_eq!(num(&r, "duplicates_applied"), 0, "{r}");
    assert_eq!(num(&r, "resets"), 12, "{r}");
    assert_eq!(num(&r, "boots"), 13, "{r}");
    assert_eq!(num(&r, "acknowledged_ids"), COUNT as u64, "{r}");
    // Each reset dropped a connection the board dialled again; each connection the
    // board closed for the broker's resend is one more.
    assert_eq!(num(&r, "connections"), 13 + resend_reconnects(&r), "{r}");
    // 500 queued at in-flight 20: more than the board's places and slots came at once.
    assert!(resend_reconnects(&r) > 0, "{r}");
    assert_eq!(r["promise_broken"].as_array().map(Vec::len), Some(0), "{r}");
    // The board's counts are every boot's, added: the PUBLISHes it counted at each QoS
    // are those the host carried within the bytes each boot's last count frame said
    // it took. A reset loses at most what one answer brought since that frame (64
    // bytes: one PUBLISH whole), so nearly every payment was counted once at least.
    println!(
        "received at QoS 0, 1, 2 over {} boots: {}, the host's reading {}; records {}",
        r["boots"], r["received_at_qos"], r["taken_at_qos"], r["records"]
    );
    assert_eq!(r["received_at_qos"], r["taken_at_qos"], "{r}");
    let received = r["received_at_qos"][2].as_u64().unwrap();
    assert!(received >= (COUNT - 12) as u64, "{r}");
}

#[test]
fn qos_1_is_exact_with_the_message_id_store_and_the_naive_store_reports_its_duplicates() {
    const COUNT: usize = 200;
    let s = Scratch::new("device-mqtt-qos1");
    let b = broker(&s);
    for (store, seed) in [("message-id", 5), ("naive", 5)] {
        let board = Board::new(&b, &format!("board-qos1-{store}"), "1", store);
        let truth = board.publish(&s, COUNT);
        let r = board.receive(&truth, COUNT, 10, seed);
        assert_eq!(num(&r, "resets"), 10, "{r}");
        assert_eq!(num(&r, "acknowledged_ids"), COUNT as u64, "{r}");
        let applied = num(&r, "applied");
        let dups = num(&r, "duplicates_applied");
        // Every id applied, and each applied beyond them is a duplicate the report counts.
        assert_eq!(applied, COUNT as u64 + dups, "{r}");
        if store == "message-id" {
            assert_eq!(r["verdict"], "exact", "{r}");
            assert_eq!(dups, 0, "{r}");
            assert_eq!(r["final_total"], r["true_total"], "{r}");
        } else {
            // Never graded exact: QoS 1 without dedup is named, whatever the total.
            assert_ne!(r["verdict"], "exact", "{r}");
            let named = r["promise_broken"].to_string();
            assert!(named.contains("QoS 1 is at least once"), "{r}");
            let over = r["final_total"].as_i64().unwrap() - r["true_total"].as_i64().unwrap();
            assert_eq!(over > 0, dups > 0, "{r}");
        }
    }
}

#[test]
fn qos_2_at_mqtt_5_is_exact_across_12_resets() {
    const COUNT: usize = 500;
    let s = Scratch::new("device-mqtt-5");
    let b = broker(&s);
    let board = Board {
        protocol: "5",
        ..Board::new(&b, "board-mqtt5", "2", "naive")
    };
    let truth = board.publish(&s, COUNT);
    let r = board.receive(&truth, COUNT, 12, 31);
    assert_eq!(r["protocol"], "5", "{r}");
    assert_eq!(r["verdict"], "exact", "{r}");
    assert_eq!(num(&r, "applied"), COUNT as u64, "{r}");
    assert_eq!(num(&r, "acknowledged_ids"), COUNT as u64, "{r}");
    assert_eq!(num(&r, "resets"), 12, "{r}");
    assert_eq!(num(&r, "connections"), 13 + resend_reconnects(&r), "{r}");
    // Mosquitto 2.0.11 sends past the board's Receive Maximum of 8 (tests/mqtt5.rs).
    assert!(num(&r, "past_receive_maximum") > 0, "{r}");
    assert_eq!(r["promise_broken"].as_array().map(Vec::len), Some(0), "{r}");
}
