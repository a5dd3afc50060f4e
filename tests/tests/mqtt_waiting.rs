//! `idem mqtt consume` on a queue much longer than its places, at Mosquitto's stock
//! in-flight limit (20). Mosquitto 2.0.11 sends a whole window more at each PUBCOMP,
//! whatever is still unanswered, so it soon has the whole queue in flight. The host
//! keeps the new QoS 2 PUBLISHes that find every place taken waiting, unanswered, in
//! memory, and decides them in the order they came as PUBRELs free places: the queue
//! drains on one connection, with nothing left unanswered and no reconnection (before,
//! every 32 messages cost a reconnection, at which the broker sent all that was still in
//! flight again).

use std::path::Path;

use idem_tests::idem;
use idem_tests::mosquitto::{Broker, Scratch, paho_publish};
use serde_json::Value;

const MESSAGES: usize = 2_000;

fn consume(b: &Broker, flash: &Path, extra: &[&str]) -> Value {
    let out = idem()
        .args([
            "mqtt",
            "consume",
            "--broker",
            &b.addr(),
            "--topic",
            "payments",
        ])
        .args(["--client-id", "waiting", "--qos", "2", "--json", "--flash"])
        .arg(flash)
        .args(extra)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn a_queue_past_the_places_drains_on_one_connection_at_the_stock_in_flight_limit() {
    let s = Scratch::new("mqtt-waiting");
    let b = Broker::start(&s.join("broker"));
    let flash = s.join("dev.img");
    // Subscribed before paho publishes: Mosquitto queues only for a session that has
    // subscribed.
    let first = consume(&b, &flash, &["--idle-ms", "100"]);
    assert_eq!(first["applied"], 0);
    let truth = s.join("sent.jsonl");
    paho_publish(&b.addr(), "payments", "2", MESSAGES, &truth);
    let end = consume(
        &b,
        &flash,
        &["--idle-ms", "1000", "--truth", truth.to_str().unwrap()],
    );
    assert_eq!(end["verdict"], "exact", "{end}");
    assert_eq!(end["applied"], MESSAGES as u64, "{end}");
    assert_eq!(end["final_total"], end["true_total"], "{end}");
    assert_eq!(
        (&end["unanswered"], &end["resend_reconnects"]),
        (&Value::from(0), &Value::from(0)),
        "{end}"
    );
    assert_eq!(end["promise_broken"].as_array().map(Vec::len), Some(0));
}
