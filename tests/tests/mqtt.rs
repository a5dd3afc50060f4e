//! `idem mqtt consume` against a real Mosquitto broker, fed by paho-mqtt (another
//! codebase): 2,000 payments at QoS 2, the consumer killed 30 times at seeded instants
//! (10 of them after a record is durable and before its acknowledgement is out) and
//! resumed each time from its flash image. With the session in flash the total is exact
//! for the naive store too: QoS 2 needs no dedup in the store. With the identifiers in
//! RAM, each of the 10 kills between a record and its PUBREC applies a message twice,
//! and the report counts them.
//!
//! The broker keeps its stock in-flight limit (`max_inflight_messages 20`) and paho
//! publishes at its default of 20 in flight, but for the loops that count what a kill
//! costs a store without dedup, which kill at one in flight (see each). Mosquitto 2.0.11
//! sends up to 20 more whenever the oldest in flight completes, whatever is still
//! unanswered (`tests/tests/mosquitto.rs` measures the overshoot); a QoS 2 PUBLISH that
//! finds every one of the consumer's places taken waits in the client's queue, and past
//! it is left unanswered, the consumer connecting again once places are free, for the
//! broker's resend.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use idem_sim::rng::SplitMix64;
use idem_tests::idem;
use idem_tests::mosquitto::{Broker, Scratch, paho_publish, paho_publish_at};
use serde_json::Value;

const TOPIC: &str = "payments";
const MESSAGES: usize = 2_000;
const KILLS: u64 = 30;

fn broker(dir: &Path) -> Broker {
    Broker::start(dir)
}

/// A broker with one message in flight, and paho publishing one at a time: a kill
/// between a record and its acknowledgement then leaves exactly one message durable and
/// unacknowledged, so the tests that count what a kill costs a store without dedup count
/// exactly (with 20 in flight a kill leaves up to 20, as many as the socket carried).
fn broker_one_in_flight(dir: &Path) -> Broker {
    Broker::start_with(dir, &[("max_inflight_messages", "1")])
}

struct Consumer {
    bin: PathBuf,
    broker: String,
    flash: PathBuf,
    store: &'static str,
    session: &'static str,
    client: String,
    topic: &'static str,
}

impl Consumer {
    fn new(b: &Broker, s: &Scratch, store: &'static str, session: &'static str) -> Self {
        let bin = PathBuf::from(idem().get_program());
        let client = format!("dev-{store}-{session}");
        let flash = s.join(&format!("{client}.img"));
        Self {
            bin,
            broker: b.addr(),
            flash,
            store,
            session,
            client,
            topic: TOPIC,
        }
    }

    fn command(&self, extra: &[&str]) -> Command {
        let mut c = Command::new(&self.bin);
        c.args([
            "mqtt",
            "consume",
            "--broker",
            &self.broker,
            "--topic",
            self.topic,
        ])
        .args([
            "--client-id",
            &self.client,
            "--store",
            self.store,
            "--session",
            self.session,
        ])
        .args(["--json", "--flash"])
        .arg(&self.flash)
        .args(extra);
        for (flag, default) in [("--idle-ms", "500"), ("--qos", "2")] {
            if !extra.contains(&flag) {
                c.args([flag, default]);
            }
        }
        c
    }

    fn run(&self, extra: &[&str]) -> Output {
        self.command(extra).output().unwrap()
    }

    fn report(&self, extra: &[&str]) -> Value {
        let out = self.run(extra);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

fn publish(b: &Broker, s: &Scratch, count: usize, name: &str) -> PathBuf {
    publish_at(b, s, count, name, "2")
}

fn publish_at(b: &Broker, s: &Scratch, count: usize, name: &str, qos: &str) -> PathBuf {
    let truth = s.join(name);
    paho_publish(&b.addr(), TOPIC, qos, count, &truth);
    truth
}

/// [`publish_at`] one unanswered at a time, for [`broker_one_in_flight`].
fn publish_one_at_a_time(b: &Broker, s: &Scratch, count: usize, qos: &str) -> PathBuf {
    let truth = s.join("truth.jsonl");
    paho_publish_at(&b.addr(), TOPIC, qos, count, &truth, 1);
    truth
}

/// Kills the consumer `KILLS` times, each a run that the hook aborts as a SIGKILL
/// would: every third one once its Nth record is durable and before the acknowledgement
/// it allows is sent, the others after their Nth packet (N from 1 to `most`). Each is
/// asserted killed.
fn kill_loop(c: &Consumer, seed: u64, extra: &[&str], most: u64) -> u64 {
    let mut rng = SplitMix64::new(seed);
    let mut between = 0;
    for i in 0..KILLS {
        let n = rng.range(1, most).to_string();
        let hook = if i % 3 == 0 {
            "--abort-before-ack"
        } else {
            "--abort-after-packets"
        };
        between += u64::from(i % 3 == 0);
        let out = c.run(&[&[hook, n.as_str()], extra].concat());
        assert_eq!(
            out.status.code(),
            None,
            "run {i} ({hook} {n}) was not killed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    between
}

fn num(v: &Value, k: &str) -> i64 {
    v[k].as_i64().unwrap_or_else(|| panic!("{k} in {v}"))
}

fn truth_total(truth: &Path) -> i64 {
    std::fs::read_to_string(truth)
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["amount"]
                .as_i64()
                .unwrap()
        })
        .sum()
}

/// What idem named of Mosquitto's PUBLISHes sent again after their PUBREL
/// ([`Broker::publish_after_pubrel`], which MQTT 3.1.1 §4.3.3 forbids): the receiver
/// recognises one whose release reached its record by that release's tombstone, answers
/// PUBREC and applies nothing, and counts it in the image (`publish_after_pubrel`, over
/// every run). One whose release a kill cut before it was written is, to the receiver,
/// a resend under an identifier it holds: not applied, not counted. So idem names such
/// PUBLISHes only where the broker's log shows some.
fn named_after_pubrel(end: &Value, resent: &std::collections::BTreeSet<String>, store: &str) {
    let named = num(end, "publish_after_pubrel");
    assert!(
        named == 0 || !resent.is_empty(),
        "{store} store: {named} PUBLISHes after PUBREL named, and the broker's log shows none: {end}"
    );
    let violations = end["broker_violations"].as_array().unwrap().len();
    assert_eq!(violations, usize::from(named > 0), "{end}");
    eprintln!(
        "{store} store: exact; Mosquitto sent a PUBLISH again after its PUBREL under {} identifiers (its log), idem named {named}",
        resent.len()
    );
}

#[test]
fn qos_2_with_the_session_in_flash_is_exact_across_30_kills_for_both_stores() {
    // At Mosquitto's stock in-flight limit, paho at its default 20: the broker soon has
    // the whole queue in flight (2.0.11 sends up to 20 more at each completion), and
    // each kill leaves what waited in the client's queue unanswered, sent again at the
    // next run's connection.
    let s = Scratch::new("mqtt-flash");
    let b = broker(&s.join("broker"));
    let consumers = ["naive", "message-id"].map(|store| Consumer::new(&b, &s, store, "flash"));
    for c in &consumers {
        // Subscribed before paho publishes: Mosquitto queues only for a session that
        // has subscribed.
        assert_eq!(num(&c.report(&["--idle-ms", "100"]), "applied"), 0);
    }
    let truth = publish(&b, &s, MESSAGES, "truth.jsonl");
    let true_total = truth_total(&truth);
    for (seed, c) in consumers.iter().enumerate() {
        assert_eq!(kill_loop(c, seed as u64, &[], 100), 10);
        let end = c.report(&["--truth", truth.to_str().unwrap()]);
        let resent = b.payments_sent_after_pubrel(&c.client);
        assert_eq!(end["verdict"], "exact", "{} store: {end}", c.store);
        named_after_pubrel(&end, &resent, c.store);
        // Exact by the ids: each of the truth's applied once, nothing else.
        assert_eq!(
            (
                num(&end["ids"], "missing"),
                num(&end["ids"], "applied_again"),
                num(&end["ids"], "not_in_truth")
            ),
            (0, 0, 0),
            "{end}"
        );
        assert_eq!(
            (
                num(&end, "final_total"),
                num(&end, "true_total"),
                num(&end, "applied")
            ),
            (true_total, true_total, MESSAGES as i64),
            "{end}"
        );
        // A duplicate the message-id store skipped came only from a PUBLISH the broker
        // sent again after its PUBREL.
        let skipped = num(&end, "duplicates_skipped");
        assert_eq!(
            (
                num(&end, "duplicates_applied"),
                skipped > 0 && resent.is_empty()
            ),
            (0, false),
            "{end}"
        );
        assert_eq!(end["session_present"], true);
        assert_eq!(end["promise_broken"].as_array().unwrap().len(), 0);
    }
}

#[test]
fn qos_2_with_the_identifiers_in_ram_applies_a_message_again_at_each_kill_before_its_pubrec() {
    let s = Scratch::new("mqtt-ram");
    let b = broker_one_in_flight(&s.join("broker"));
    let c = Consumer::new(&b, &s, "naive", "ram");
    c.report(&["--idle-ms", "100"]);
    let truth = publish_one_at_a_time(&b, &s, MESSAGES, "2");
    assert_eq!(kill_loop(&c, 7, &[], 100), 10);
    let end = c.report(&["--truth", truth.to_str().unwrap()]);
    // Each kill between a message's record and its PUBREC: the broker sends the PUBLISH
    // again, the identifier is forgotten, the message applied again. The others land
    // after an acknowledgement: the broker sends PUBREL, not the PUBLISH.
    assert_eq!(
        (end["verdict"].as_str(), num(&end, "duplicates_applied")),
        (Some("over"), 10),
        "{end}"
    );
    assert_eq!(num(&end, "applied"), MESSAGES as i64 + 10);
    assert!(num(&end, "final_total") > truth_total(&truth));
    assert_eq!(end["promise_broken"].as_array().unwrap().len(), 1, "{end}");
}

#[test]
fn a_graceful_broker_restart_mid_stream_is_exact_and_a_lost_session_is_reported() {
    let s = Scratch::new("mqtt-broker");
    let mut b = broker(&s.join("broker"));
    let c = Consumer::new(&b, &s, "naive", "flash");
    c.report(&["--idle-ms", "100"]);
    let truth = publish(&b, &s, 300, "truth.jsonl");
    let killed = c.run(&["--abort-after-packets", "200"]);
    assert_eq!(killed.status.code(), None);
    b.restart_graceful();
    let end = c.report(&["--truth", truth.to_str().unwrap()]);
    assert_eq!(
        (end["verdict"].as_str(), num(&end, "applied")),
        (Some("exact"), 300),
        "{end}"
    );

    // A new data directory: the broker forgets the session while the device holds the
    // identifiers of the messages of its first group commit (what arrived together, at
    // most the broker's window of 20), which the broker had not released; the rest are
    // gone with the old directory.
    let d = Consumer::new(&b, &s, "message-id", "flash");
    d.report(&["--idle-ms", "100"]);
    let truth = publish(&b, &s, 100, "truth-2.jsonl");
    let killed = d.run(&["--abort-before-ack", "1"]);
    assert_eq!(killed.status.code(), None);
    b.fresh(&s.join("broker-new"));
    let end = d.report(&["--truth", truth.to_str().unwrap()]);
    let applied = num(&end, "applied");
    assert!((1..=20).contains(&applied), "{end}");
    assert_eq!(
        (
            end["session_present"].as_bool(),
            num(&end, "lost_identifiers"),
            end["verdict"].as_str()
        ),
        (Some(false), applied, Some("under")),
        "{end}"
    );
    let broken = end["promise_broken"].as_array().unwrap();
    assert_eq!(broken.len(), 1, "{end}");
    assert!(
        broken[0].as_str().unwrap().contains("session present 0"),
        "{end}"
    );
}

#[test]
fn qos_1_is_exact_with_the_message_id_store_and_the_naive_store_reports_its_duplicates() {
    let s = Scratch::new("mqtt-qos1");
    let b = broker_one_in_flight(&s.join("broker"));
    let consumers = ["message-id", "naive"].map(|store| Consumer::new(&b, &s, store, "flash"));
    for c in &consumers {
        c.report(&["--idle-ms", "100", "--qos", "1"]);
    }
    let truth = publish_one_at_a_time(&b, &s, 1_000, "1");
    let true_total = truth_total(&truth);
    let mut ends = Vec::new();
    for (seed, c) in consumers.iter().enumerate() {
        assert_eq!(kill_loop(c, 11 + seed as u64, &["--qos", "1"], 50), 10);
        ends.push(c.report(&["--qos", "1", "--truth", truth.to_str().unwrap()]));
    }
    // A kill between a message's record and its PUBACK: the broker sends it again (DUP
    // 1). The message-id store skips each of the 10; the naive store applies each again.
    let (by_id, naive) = (&ends[0], &ends[1]);
    assert_eq!(
        (by_id["verdict"].as_str(), num(by_id, "final_total")),
        (Some("exact"), true_total),
        "{by_id}"
    );
    assert_eq!(
        (num(by_id, "applied"), num(by_id, "duplicates_skipped")),
        (1_000, 10),
        "{by_id}"
    );
    assert_eq!(
        (naive["verdict"].as_str(), num(naive, "duplicates_applied")),
        (Some("over"), 10),
        "{naive}"
    );
    let broken = naive["promise_broken"].as_array().unwrap();
    assert!(
        broken[0]
            .as_str()
            .unwrap()
            .starts_with("QoS 1 is at least once"),
        "{naive}"
    );
}

#[test]
fn a_retained_message_is_reported_and_not_applied() {
    let s = Scratch::new("mqtt-retained");
    let b = broker(&s.join("broker"));
    let out = Command::new(PathBuf::from(idem().get_program()))
        .args([
            "mqtt",
            "publish",
            "--broker",
            &b.addr(),
            "--topic",
            TOPIC,
            "--count",
            "1",
            "--retain",
            "--truth",
        ])
        .arg(s.join("retained.jsonl"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A new session subscribes, and the broker sends the retained message with RETAIN 1.
    let c = Consumer::new(&b, &s, "naive", "flash");
    let end = c.report(&["--idle-ms", "300"]);
    assert_eq!(
        (
            num(&end, "retained"),
            num(&end, "applied"),
            num(&end, "final_total")
        ),
        (1, 0, 0),
        "{end}"
    );
    // Reconnected with session present 1, it subscribes again (the subscription is
    // replaced, MQTT 3.1.1 §3.8.4), and the broker resends the retained message with
    // RETAIN 1: reported again, applied never.
    let again = c.report(&["--idle-ms", "300"]);
    assert_eq!(
        (
            again["session_present"].as_bool(),
            num(&again, "retained"),
            num(&again, "final_total")
        ),
        (Some(true), 1, 0),
        "{again}"
    );
}

#[test]
fn a_client_id_that_subscribed_elsewhere_brings_foreign_topics_which_are_rejected_and_named() {
    let s = Scratch::new("mqtt-foreign");
    let b = broker(&s.join("broker"));
    let c = Consumer::new(&b, &s, "naive", "flash");
    c.report(&["--idle-ms", "100"]);
    publish(&b, &s, 5, "a.jsonl");
    // The same client id, another topic and image: the broker's session still holds the
    // subscription to payments, and sends its 5; they are not this stream's.
    let other = Consumer {
        flash: s.join("other.img"),
        topic: "elsewhere",
        ..Consumer::new(&b, &s, "naive", "flash")
    };
    let v = other.report(&["--idle-ms", "500"]);
    assert_eq!(
        (
            num(&v, "foreign_topic"),
            num(&v, "rejected"),
            num(&v, "final_total")
        ),
        (5, 5, 0),
        "{v}"
    );
    let broken = v["promise_broken"].as_array().unwrap();
    assert!(
        broken[0]
            .as_str()
            .unwrap()
            .starts_with("5 messages came on topics outside elsewhere"),
        "{v}"
    );
}
