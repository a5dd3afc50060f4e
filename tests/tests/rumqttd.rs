//! idem's MQTT suite on a second broker from another codebase, rumqttd 0.20
//! (`idem_tests::rumqttd`), at its stock configuration bound to 127.0.0.1: paho-mqtt and
//! `idem mqtt publish` publish, `idem mqtt consume` receives at QoS 1 and 2, MQTT 3.1.1
//! and 5, graded on ids against the publisher's truth. rumqttd keeps its sessions in
//! memory, so the broker-restart cases run on Mosquitto only (tests/tests/mqtt.rs).
//! Where rumqttd breaks the protocol, the test names the break and asserts that idem
//! reports it.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use idem_sim::rng::SplitMix64;
use idem_tests::idem;
use idem_tests::mosquitto::{Scratch, paho_publish};
use idem_tests::rumqttd::Rumqttd;
use serde_json::Value;

const TOPIC: &str = "payments";

/// One `idem mqtt consume` session: its broker address, protocol, client id, store,
/// QoS and image.
struct Session {
    bin: PathBuf,
    broker: String,
    protocol: &'static str,
    client: String,
    store: &'static str,
    qos: &'static str,
    flash: PathBuf,
}

impl Session {
    fn new(broker: String, s: &Scratch, protocol: &'static str, store: &'static str) -> Self {
        let client = format!("dev-{protocol}-{store}");
        Self {
            bin: PathBuf::from(idem().get_program()),
            broker,
            protocol,
            flash: s.join(&format!("{client}.img")),
            client,
            store,
            qos: "2",
        }
    }

    fn at_qos_1(mut self) -> Self {
        self.qos = "1";
        self.client.push_str("-qos1");
        self.flash = self.flash.with_extension("qos1.img");
        self
    }

    fn run(&self, extra: &[&str]) -> Output {
        Command::new(&self.bin)
            .args([
                "mqtt",
                "consume",
                "--broker",
                &self.broker,
                "--topic",
                TOPIC,
            ])
            .args(["--protocol", self.protocol, "--client-id", &self.client])
            .args([
                "--store",
                self.store,
                "--session",
                "flash",
                "--qos",
                self.qos,
            ])
            .args(["--json", "--flash"])
            .arg(&self.flash)
            .args(if extra.contains(&"--idle-ms") {
                &[][..]
            } else {
                &["--idle-ms", "500"][..]
            })
            .args(extra)
            .output()
            .unwrap()
    }

    fn report(&self, extra: &[&str]) -> Value {
        let out = self.run(extra);
        assert!(
            out.status.success(),
            "{}: {}",
            self.client,
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// Subscribes (a first run with nothing to receive): rumqttd, as Mosquitto, keeps
    /// messages only for a session that has subscribed.
    fn subscribe(&self) {
        let v = self.report(&["--idle-ms", "100"]);
        assert_eq!(num(&v, "applied"), 0, "{v}");
    }

    fn graded(&self, truth: &Path) -> Value {
        self.report(&["--truth", truth.to_str().unwrap()])
    }
}

fn num(v: &Value, k: &str) -> i64 {
    v[k].as_i64().unwrap_or_else(|| panic!("{k} in {v}"))
}

fn exact(v: &Value, applied: i64) {
    assert_eq!(
        (v["verdict"].as_str(), num(v, "applied")),
        (Some("exact"), applied),
        "{v}"
    );
    assert_eq!(v["promise_broken"].as_array().unwrap().len(), 0, "{v}");
}

/// A bare MQTT 3.1.1 subscriber over a TCP socket (not idem's, not paho's), to watch
/// what the broker sends and under which packet identifier: idem's own client would
/// answer as its rules say, and the test must answer otherwise.
struct Raw {
    socket: TcpStream,
    session_present: bool,
}

/// A packet the broker sent: its first byte and its body.
type Packet = (u8, Vec<u8>);

impl Raw {
    /// Connects as `client` with clean session 0 and reads the CONNACK.
    fn connect(addr: &str, client: &str) -> Self {
        let mut socket = TcpStream::connect(addr).unwrap();
        let mut body = vec![0, 4, b'M', b'Q', b'T', b'T', 4, 0, 0, 60];
        body.extend(string(client));
        socket.write_all(&frame(0x10, &body)).unwrap();
        let mut raw = Self {
            socket,
            session_present: false,
        };
        let (kind, body) = raw.read(Duration::from_secs(10)).expect("a CONNACK");
        assert_eq!((kind, body[1]), (0x20, 0), "CONNACK accepted");
        raw.session_present = body[0] & 1 == 1;
        raw
    }

    /// Subscribes to `filter` at QoS 2 and reads the SUBACK.
    fn subscribe(&mut self, filter: &str) {
        let mut body = vec![0, 1];
        body.extend(string(filter));
        body.push(2);
        self.send(0x82, &body);
        let (kind, body) = self.read(Duration::from_secs(10)).expect("a SUBACK");
        assert_eq!((kind, body), (0x90, vec![0, 1, 2]), "SUBACK granting QoS 2");
    }

    fn send(&mut self, first: u8, body: &[u8]) {
        self.socket.write_all(&frame(first, body)).unwrap();
    }

    /// Answers the QoS 2 PUBLISH under `id` with PUBREC, and its PUBREL with PUBCOMP.
    fn complete(&mut self, id: u16) {
        self.send(0x50, &id.to_be_bytes());
        let (kind, body) = self.read(Duration::from_secs(10)).expect("a PUBREL");
        assert_eq!((kind, &body[..]), (0x62, &id.to_be_bytes()[..]), "PUBREL");
        self.send(0x70, &id.to_be_bytes());
    }

    /// The next packet, or `None` when nothing came within `wait`.
    fn read(&mut self, wait: Duration) -> Option<Packet> {
        self.socket.set_read_timeout(Some(wait)).unwrap();
        let mut first = [0];
        self.socket.read_exact(&mut first).ok()?;
        let (mut len, mut shift) = (0usize, 0);
        loop {
            let mut b = [0];
            self.socket.read_exact(&mut b).unwrap();
            len |= usize::from(b[0] & 0x7F) << shift;
            shift += 7;
            if b[0] & 0x80 == 0 {
                break;
            }
        }
        let mut body = vec![0; len];
        self.socket.read_exact(&mut body).unwrap();
        Some((first[0], body))
    }

    /// Each packet that arrives until none has for 1 s (the first awaited 10 s), in
    /// words: `PUBLISH 3 p7` (its packet identifier and the payment's id), with ` DUP`
    /// where the flag is set, or `PUBREL 3`.
    fn drain(&mut self) -> Vec<String> {
        let mut got = Vec::new();
        let mut wait = Duration::from_secs(10);
        while let Some((first, body)) = self.read(wait) {
            wait = Duration::from_secs(1);
            let id = |at: usize| u16::from_be_bytes([body[at], body[at + 1]]);
            got.push(match first & 0xF0 {
                0x30 => {
                    assert_eq!(first & 0x06, 0x04, "QoS 2");
                    let topic = usize::from(id(0));
                    let payment: Value = serde_json::from_slice(&body[4 + topic..]).unwrap();
                    let dup = if first & 0x08 != 0 { " DUP" } else { "" };
                    format!(
                        "PUBLISH {} {}{dup}",
                        id(2 + topic),
                        payment["id"].as_str().unwrap()
                    )
                }
                0x60 => format!("PUBREL {}", id(0)),
                _ => panic!("packet {first:#x}"),
            });
        }
        got
    }
}

/// An MQTT UTF-8 string: its length in two bytes, then its bytes.
fn string(s: &str) -> Vec<u8> {
    let mut v = u16::try_from(s.len()).unwrap().to_be_bytes().to_vec();
    v.extend(s.as_bytes());
    v
}

/// A packet: its first byte, the body's length as MQTT's variable-length integer, the body.
fn frame(first: u8, body: &[u8]) -> Vec<u8> {
    let mut v = vec![first];
    let mut len = body.len();
    loop {
        let b = (len % 128) as u8;
        len /= 128;
        v.push(if len > 0 { b | 0x80 } else { b });
        if len == 0 {
            break;
        }
    }
    v.extend(body);
    v
}

/// rumqttd 0.20 breaks MQTT 3.1.1 §4.4 and §2.3.1 at a reconnection: it resends the
/// PUBLISHes not acknowledged under new packet identifiers (numbered from 1 again), with
/// DUP 0, and gives an identifier whose PUBREL it has just resent, not yet completed, to
/// another message. A receiver that holds that identifier durably takes the new message
/// for the one it holds: idem answers it PUBREC and applies it never (see
/// [`a_kill_before_pubrec_on_rumqttd_stalls_the_session_and_grades_under_naming_the_missing_ids`]).
#[test]
fn rumqttd_resends_under_new_identifiers_and_reuses_one_whose_pubrel_is_outstanding() {
    let s = Scratch::new("rumqttd-resend");
    let b = Rumqttd::start(&s.join("broker"));
    let mut sub = Raw::connect(&b.addr(), "watch");
    sub.subscribe(TOPIC);
    paho_publish(&b.addr(), TOPIC, "2", 10, &s.join("truth.jsonl"));
    let sent: Vec<String> = (0..10).map(|i| format!("PUBLISH {} p{i}", i + 1)).collect();
    assert_eq!(sub.drain(), sent);
    // p0, p1 and p2 completed; p3 received (PUBREC, and the broker's PUBREL read) but not
    // completed; p4 to p9 left unanswered; the connection dropped.
    for id in 1..=3 {
        sub.complete(id);
    }
    sub.send(0x50, &4u16.to_be_bytes());
    assert_eq!(sub.drain(), ["PUBREL 4"]);
    drop(sub);
    let mut again = Raw::connect(&b.addr(), "watch");
    assert!(again.session_present);
    // MQTT 3.1.1 §4.4 asks for PUBREL 4 and then p4 to p9 under 5 to 10, each with DUP 1
    // (§3.3.1.1). rumqttd sends p4 to p9 under 1 to 6, DUP 0, and p7 under 4, whose
    // PUBREL awaits its PUBCOMP.
    let resent = ["PUBREL 4", "PUBLISH 1 p4", "PUBLISH 2 p5", "PUBLISH 3 p6"];
    let resent = resent.into_iter().map(String::from);
    let rest = ["PUBLISH 4 p7", "PUBLISH 5 p8", "PUBLISH 6 p9"];
    assert_eq!(
        again.drain(),
        resent.chain(rest.map(String::from)).collect::<Vec<_>>()
    );
}

/// paho-mqtt publishes 2,000 payments at QoS 2 (20 in flight, its default) on rumqttd's
/// MQTT 3.1.1 listener; four sessions receive them, on both listeners (one router
/// behind both): at 3.1.1 the naive and the message-id store at QoS 2 and the message-id
/// store at QoS 1, at MQTT 5 the naive store at QoS 2. Each is exact, on one connection.
/// rumqttd keeps up to 100 QoS 1 and 2 PUBLISHes in flight to a client (a constant of
/// its own), past the receiver's 32 places: the waiting queue takes them at 3.1.1, and at
/// MQTT 5, where the client's Receive Maximum of 32 forbids it (§3.3.4), idem counts
/// what came past it.
#[test]
fn paho_s_payments_are_exact_on_rumqttd_at_qos_1_and_2_and_mqtt_3_1_1_and_5() {
    let s = Scratch::new("rumqttd-exact");
    let b = Rumqttd::start(&s.join("broker"));
    let sessions = [
        Session::new(b.addr(), &s, "3.1.1", "naive"),
        Session::new(b.addr(), &s, "3.1.1", "message-id"),
        Session::new(b.addr(), &s, "3.1.1", "message-id").at_qos_1(),
        Session::new(b.addr_v5(), &s, "5", "naive"),
    ];
    for c in &sessions {
        c.subscribe();
    }
    let truth = s.join("truth.jsonl");
    paho_publish(&b.addr(), TOPIC, "2", 2_000, &truth);
    for c in &sessions {
        let v = c.graded(&truth);
        exact(&v, 2_000);
        assert_eq!(
            (num(&v, "resend_reconnects"), v["session_present"].as_bool()),
            (0, Some(true)),
            "{v}"
        );
        if c.protocol == "5" {
            assert!(num(&v, "past_receive_maximum") > 0, "{v}");
        }
    }
}

/// `idem mqtt publish` (its truth written once the broker completed each PUBLISH) at
/// MQTT 5 on rumqttd's MQTT 5 listener, received at MQTT 3.1.1 on the other: exact.
#[test]
fn idem_s_own_publisher_at_mqtt_5_is_graded_exact_on_rumqttd() {
    let s = Scratch::new("rumqttd-publish");
    let b = Rumqttd::start(&s.join("broker"));
    let c = Session::new(b.addr(), &s, "3.1.1", "naive");
    c.subscribe();
    let truth = s.join("truth.jsonl");
    let out = Command::new(&c.bin)
        .args([
            "mqtt",
            "publish",
            "--broker",
            &b.addr_v5(),
            "--topic",
            TOPIC,
        ])
        .args(["--protocol", "5", "--count", "500", "--truth"])
        .arg(&truth)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    exact(&c.graded(&truth), 500);
}

/// Kills that land after a packet is read and before it is decided leave no identifier
/// held that rumqttd has not seen acknowledged: its resend under new identifiers then
/// finds nothing to collide with. 1,000 payments, 5 SIGKILL-like aborts a store at
/// seeded packets (1 to 200), then a graded run: exact for both stores. With
/// `--release-now`: rumqttd sends a new PUBLISH under an identifier whose PUBREL it sent
/// before it has the PUBCOMP (MQTT 3.1.1 §2.3.1 frees it only then); releasing in the
/// next record (the default) keeps that identifier held until the group's end, so the
/// new PUBLISH is taken for a resend and not applied, and the run grades under, naming
/// the missing ids (seen: 33 missing, `held_again` 11).
#[test]
fn kills_after_a_packet_on_rumqttd_end_exact() {
    let s = Scratch::new("rumqttd-kills");
    let b = Rumqttd::start(&s.join("broker"));
    let sessions = [
        Session::new(b.addr(), &s, "3.1.1", "naive"),
        Session::new(b.addr(), &s, "3.1.1", "message-id"),
    ];
    for c in &sessions {
        c.subscribe();
    }
    let truth = s.join("truth.jsonl");
    paho_publish(&b.addr(), TOPIC, "2", 1_000, &truth);
    let mut rng = SplitMix64::new(3);
    for c in &sessions {
        for i in 0..5 {
            let n = rng.range(1, 200).to_string();
            let killed = c.run(&["--abort-after-packets", &n, "--release-now"]);
            assert_eq!(killed.status.code(), None, "{}: run {i} killed", c.client);
        }
        let graded = c.report(&["--truth", truth.to_str().unwrap(), "--release-now"]);
        exact(&graded, 1_000);
    }
}

/// The kills of [`kills_after_a_packet_on_rumqttd_end_exact`] with the default release
/// (in the next record): at each reconnection rumqttd sends PUBREL 4, then a new
/// PUBLISH under 4 before it has the PUBCOMP
/// ([`rumqttd_resends_under_new_identifiers_and_reuses_one_whose_pubrel_is_outstanding`]),
/// which idem takes for a resend of the message it released. The graded run names that
/// fault of the broker's, counted (`publish_after_pubrel`), and each such message is
/// missing from the ids: never graded exact.
#[test]
fn kills_on_rumqttd_with_the_release_in_the_next_record_name_the_broker_s_reuse() {
    let s = Scratch::new("rumqttd-kills-next");
    let b = Rumqttd::start(&s.join("broker"));
    let c = Session::new(b.addr(), &s, "3.1.1", "naive");
    c.subscribe();
    let truth = s.join("truth.jsonl");
    paho_publish(&b.addr(), TOPIC, "2", 1_000, &truth);
    let mut rng = SplitMix64::new(3);
    for i in 0..5 {
        let n = rng.range(1, 200).to_string();
        let killed = c.run(&["--abort-after-packets", &n]);
        assert_eq!(killed.status.code(), None, "{}: run {i} killed", c.client);
    }
    let v = c.graded(&truth);
    let reused = num(&v, "publish_after_pubrel") + num(&v, "held_identifier_reused");
    assert!(reused > 0, "{v}");
    assert_eq!(
        v["broker_violations"].as_array().map(Vec::len),
        Some(1),
        "{v}"
    );
    assert_eq!(v["verdict"].as_str(), Some("under"), "{v}");
    assert!(num(&v["ids"], "missing") >= reused, "{v}");
}

/// A kill before PUBREC, on rumqttd. The first run applies what arrives (a group commit
/// at a time) and is killed once its 40th record is durable, before that group's PUBRECs
/// go out: the image holds their identifiers, every place. rumqttd resends from the
/// oldest PUBLISH not acknowledged, under identifiers numbered from 1 again
/// ([`rumqttd_resends_under_new_identifiers_and_reuses_one_whose_pubrel_is_outstanding`]):
/// the messages the image holds come back first, under identifiers it does not hold, and
/// wait for a place; then new messages come with DUP 0 under the identifiers it holds,
/// which idem takes for resends of what it holds (`held_identifier_reused`, named as the
/// broker's violation) and answers in their turn, behind the PUBLISHes that wait (MQTT
/// 3.1.1 §4.6 [MQTT-4.6.0-3]) while a place is free. With every place held, the PUBLISHes
/// at the head of the queue wait for a place that only those PUBRECs' PUBRELs would free,
/// so those PUBRECs go out ahead of them; rumqttd answers each with another new message
/// under the same identifier instead of a PUBREL: the session stalls on its one
/// connection, decides nothing, and the run ends idle, graded under with the ids missing
/// named, never exact.
#[test]
fn a_kill_before_pubrec_on_rumqttd_stalls_the_session_and_grades_under_naming_the_missing_ids() {
    let s = Scratch::new("rumqttd-kill");
    let b = Rumqttd::start(&s.join("broker"));
    let sessions = [
        Session::new(b.addr(), &s, "3.1.1", "naive"),
        Session::new(b.addr(), &s, "3.1.1", "message-id"),
    ];
    for c in &sessions {
        c.subscribe();
    }
    let truth = s.join("truth.jsonl");
    paho_publish(&b.addr(), TOPIC, "2", 300, &truth);
    for c in &sessions {
        let killed = c.run(&["--abort-before-ack", "40"]);
        assert_eq!(killed.status.code(), None, "{}: killed", c.client);
        let v = c.graded(&truth);
        let applied = num(&v, "applied");
        assert_eq!(
            (v["verdict"].as_str(), num(&v["ids"], "missing")),
            (Some("under"), 300 - applied),
            "{v}"
        );
        assert!(applied >= 40, "{v}");
        // rumqttd's 100 in flight arrived; each under an identifier held was new (DUP 0),
        // named; nothing was decided on this connection.
        let reused = num(&v, "held_identifier_reused");
        assert!(reused > 0, "{v}");
        assert_eq!(
            (
                num(&v, "held_again"),
                num(&v, "messages"),
                num(&v, "records")
            ),
            (reused, 0, 0),
            "{v}"
        );
        // Every place held, the PUBRECs of the identifiers held go out ahead of the
        // PUBLISHes that wait (idem's way on, `pubrec_ahead`); rumqttd answers each with
        // a new message under the same identifier, DUP 0, again and again, never a
        // PUBREL: at least its 100 in flight arrive, and nothing is decided.
        let received = v["received_at_qos"][2].as_i64().unwrap();
        assert!(received >= 100, "{v}");
        assert_eq!(
            v["broker_violations"].as_array().map(Vec::len),
            Some(1),
            "{v}"
        );
    }
    // rumqttd takes acknowledgements only in the order it sent: the PUBRECs sent ahead
    // are, to it, "out of order ack" (its log says so), and the session stays stalled.
    assert!(b.log().contains("out of order ack"), "rumqttd's log");
}
