//! The C door (capi/, idem-mqtt-c) from C: its header is cbindgen's output and compiles
//! as C99 and C++17 with every warning an error; the C consumer
//! (capi/examples/consumer: receive.c with posix.c), built with the system's C compiler,
//! consumes 10,000 payments that paho-mqtt publishes at QoS 2 through Mosquitto at its
//! stock in-flight limit (20), at MQTT 3.1.1 and at MQTT 5, is SIGKILLed 30 times at
//! each at seeded instants and resumed from its flash file, and ends with every id
//! applied once and the naive total exact; the same receive.c links for a Cortex-M4 with
//! arm-none-eabi-gcc and newlib (with cortex_m.c's stub transports).
//!
//! The tools come from `.ci/setup`: cbindgen 0.29.4 (`$IDEM_CBINDGEN`, else `cbindgen` on
//! the `PATH`), gcc-arm-none-eabi and libnewlib-arm-none-eabi, Mosquitto and paho-mqtt.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use idem_sim::rng::SplitMix64;
use idem_tests::mosquitto::{Broker, Scratch, paho};
use serde_json::Value;

/// Long enough that every one of the `KILLS` kills finds messages still to apply.
const MESSAGES: usize = 10_000;
/// C99 with every warning an error, for every C file built here.
const STRICT_C99: [&str; 5] = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic"];
const KILLS: u32 = 30;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn capi() -> PathBuf {
    root().join("capi")
}

fn run(c: &mut Command, what: &str) -> Output {
    let out = c.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Builds idem-mqtt-c with `args` (a target, a profile).
fn build_library(args: &[&str]) {
    run(
        Command::new(env!("CARGO"))
            .current_dir(root())
            .args(["build", "--quiet", "--locked", "-p", "idem-mqtt-c"])
            .args(args),
        "building idem-mqtt-c",
    );
}

fn cbindgen() -> PathBuf {
    std::env::var_os("IDEM_CBINDGEN").map_or_else(|| PathBuf::from("cbindgen"), PathBuf::from)
}

/// A C file that includes the header and names every function and type in it.
const USES: &str = r#"#include "idem_mqtt.h"
static idem_receiver rx;
int main(void) {
    idem_config c = {IDEM_MQTT_5, 2, 60, "dev", "t", IDEM_SESSION_NEVER};
    idem_stats s;
    char why[64];
    const uint8_t *out;
    size_t n = 0;
    uint8_t st[IDEM_STATE_MAX];
    int rc = idem_open(&rx, &c, (const idem_flash *)0, (const idem_app *)0);
    rc |= idem_connect(&rx) | idem_input(&rx, st, 0, &n) | idem_output(&rx, &out, &n);
    rc |= idem_sent(&rx, 0) | idem_idle(&rx) | idem_ping(&rx) | idem_disconnect(&rx);
    rc |= idem_get_stats(&rx, &s) | idem_get_state(&rx, st, sizeof st);
    rc |= idem_reason(&rx, why, sizeof why) | idem_close(&rx);
    return idem_strerror(rc)[0] == 'x';
}
"#;

#[test]
fn the_header_is_cbindgens_output_documents_every_function_and_compiles_as_c99_and_cpp17() {
    let s = Scratch::new("c-header");
    let fresh = s.join("idem_mqtt.h");
    run(
        Command::new(cbindgen())
            .current_dir(capi())
            .args(["--config", "cbindgen.toml", "--quiet", "--output"])
            .arg(&fresh),
        "cbindgen (.ci/setup installs 0.29.4; or set IDEM_CBINDGEN)",
    );
    let committed = std::fs::read_to_string(capi().join("include/idem_mqtt.h")).unwrap();
    assert!(
        std::fs::read_to_string(&fresh).unwrap() == committed,
        "capi/include/idem_mqtt.h is not what cbindgen makes of capi/src: run `cbindgen --config cbindgen.toml --output include/idem_mqtt.h` in capi/"
    );
    // Every prototype follows its doc comment.
    let lines: Vec<&str> = committed.lines().collect();
    let mut functions = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let prototype = line.contains('(')
            && !line.starts_with([' ', '/', '#', '}'])
            && !line.starts_with("typedef");
        if prototype {
            let head = line.split('(').next().unwrap();
            let name = head.rsplit([' ', '*']).next().unwrap();
            let documented = lines[..i].last().is_some_and(|l| l.starts_with("//"));
            functions.push((name.trim_start_matches("idem_").to_string(), documented));
        }
    }
    let names: Vec<&str> = functions.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "open",
            "connect",
            "input",
            "output",
            "sent",
            "idle",
            "ping",
            "disconnect",
            "get_stats",
            "get_state",
            "reason",
            "close",
            "strerror"
        ]
    );
    assert!(functions.iter().all(|(_, doc)| *doc), "{functions:?}");
    std::fs::write(s.join("uses.c"), USES).unwrap();
    std::fs::write(s.join("uses.cpp"), USES).unwrap();
    for (compiler, std, file) in [
        ("cc", "-std=c99", "uses.c"),
        ("c++", "-std=c++17", "uses.cpp"),
    ] {
        run(
            Command::new(compiler)
                .current_dir(s.path())
                .args([
                    std,
                    "-Wall",
                    "-Wextra",
                    "-Werror",
                    "-pedantic",
                    "-fsyntax-only",
                ])
                .arg("-I")
                .arg(capi().join("include"))
                .arg(file),
            &format!("{compiler} {std} on the header"),
        );
    }
}

/// The consumer, built with the system's C compiler against the host library.
fn consumer(s: &Scratch) -> PathBuf {
    build_library(&[]);
    let bin = s.join("consumer");
    let dir = capi().join("examples/consumer");
    run(
        Command::new("cc")
            .args(STRICT_C99)
            .arg("-O2")
            .arg("-I")
            .arg(capi().join("include"))
            .arg(dir.join("receive.c"))
            .arg(dir.join("posix.c"))
            .arg(root().join("target/debug/libidem_mqtt_c.a"))
            .args(["-lpthread", "-ldl", "-lm", "-o"])
            .arg(&bin),
        "building the C consumer",
    );
    bin
}

struct Run<'a> {
    bin: &'a Path,
    protocol: &'a str,
    port: String,
    flash: PathBuf,
}

impl Run<'_> {
    fn command(&self, idle_ms: &str) -> Command {
        let mut c = Command::new(self.bin);
        let client_id = format!("c-dev-{}", self.protocol);
        c.args(["--protocol", self.protocol, "127.0.0.1", &self.port])
            .args([&client_id, "payments"])
            .arg(&self.flash)
            .arg(idle_ms);
        c
    }

    fn report(&self, idle_ms: &str) -> Value {
        let out = run(&mut self.command(idle_ms), "the C consumer");
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// Runs the consumer and SIGKILLs it `wait_ms` in: whether it was still running.
    fn kill_after(&self, wait_ms: u64) -> bool {
        let mut child = self
            .command("3000")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(wait_ms));
        let running = child.try_wait().unwrap().is_none();
        let _ = child.kill(); // SIGKILL
        let status = child.wait().unwrap();
        assert!(!running || status.code().is_none(), "{status}");
        running
    }
}

/// Each truth id with its first amount, in order (as idem's truth files count them).
fn truth(path: &Path) -> Vec<(String, i64)> {
    let mut seen = std::collections::HashSet::new();
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| seen.insert(v["id"].as_str().unwrap().to_string()))
        .map(|v| {
            (
                v["id"].as_str().unwrap().into(),
                v["amount"].as_i64().unwrap(),
            )
        })
        .collect()
}

/// The ids log's first `applied` ids (`{"n":1,"id":"p0"}` lines, numbered from 1).
fn applied_ids(log: &Path, applied: usize) -> Vec<String> {
    let text = std::fs::read_to_string(log).unwrap();
    let ids: Vec<String> = text
        .lines()
        .take(applied)
        .enumerate()
        .map(|(i, l)| {
            let v: Value = serde_json::from_str(l).unwrap();
            assert_eq!(v["n"].as_u64(), Some(i as u64 + 1), "{l}");
            v["id"].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(ids.len(), applied, "the ids log lacks lines");
    ids
}

/// The id-set verdict of `idem mqtt consume` (host-lib/src/truth.rs, `IdCounts`): truth ids
/// never applied, applications past an id's first, applications of ids outside the
/// truth.
fn id_counts(truth: &[(String, i64)], applied: &[String]) -> (u64, u64, u64) {
    let mut times = std::collections::HashMap::new();
    let mut foreign = 0;
    for id in applied {
        if truth.iter().any(|(t, _)| t == id) {
            *times.entry(id.as_str()).or_insert(0u64) += 1;
        } else {
            foreign += 1;
        }
    }
    let missing = truth
        .iter()
        .filter(|(t, _)| !times.contains_key(t.as_str()))
        .count();
    let twice = times.values().map(|n| n - 1).sum();
    (missing as u64, twice, foreign)
}

impl Run<'_> {
    /// Kills the consumer at seeded instants (in 60 runs at most) until `KILLS` kills
    /// have found it running with messages still to apply (fewer than `MESSAGES` ids
    /// logged): a kill after the stream's end proves nothing, so it does not count.
    fn kill_loop(&self, seed: u64) -> u32 {
        let mut rng = SplitMix64::new(seed);
        let (mut kills, mut runs) = (0, 0);
        let log = PathBuf::from(format!("{}.ids", self.flash.display()));
        while kills < KILLS && runs < 2 * KILLS {
            runs += 1;
            let running = self.kill_after(rng.range(20, 300));
            let logged = std::fs::read_to_string(&log).map_or(0, |t| t.lines().count());
            kills += u32::from(running && logged < MESSAGES);
        }
        assert_eq!(
            kills, KILLS,
            "{}: the stream ended after {kills} kills with messages left to apply",
            self.protocol
        );
        kills
    }

    /// The last run, to the stream's end: graded by the id-set verdict and the total,
    /// exact. A QoS 2 PUBLISH the broker sent again after its PUBREL (`resent`,
    /// [`Broker::payments_sent_after_pubrel`]; MQTT 3.1.1 §4.3.3 forbids it), whose
    /// identifier the door had released, is recognised by its tombstone and not applied,
    /// counted (`publish_after_pubrel`); the door names none the broker's log does not
    /// show. (One whose release had not reached the flash when the consumer was killed
    /// is a resend of an identifier held to the door, not counted.)
    fn graded(&self, truth: &[(String, i64)], resent: &BTreeSet<String>) -> Value {
        let end = self.report("1000");
        let applied = end["applied"].as_u64().unwrap() as usize;
        let ids = applied_ids(
            &PathBuf::from(format!("{}.ids", self.flash.display())),
            applied,
        );
        let (missing, twice, foreign) = id_counts(truth, &ids);
        assert_eq!((missing, foreign), (0, 0), "{}: {end}", self.protocol);
        assert_eq!(twice, 0, "{}: {end}", self.protocol);
        let named = end["publish_after_pubrel"].as_u64().unwrap();
        assert!(
            named == 0 || !resent.is_empty(),
            "{}: {named} PUBLISHes after PUBREL named, and the broker's log shows none: {end}",
            self.protocol
        );
        println!(
            "MQTT {}: exact; the broker's log shows a PUBLISH sent again after its PUBREL (MQTT 3.1.1 §4.3.3 forbids it) under {} identifiers, the door named {named}",
            self.protocol,
            resent.len()
        );
        let true_total: i64 = truth.iter().map(|(_, a)| a).sum();
        assert_eq!(
            (
                end["total"].as_i64(),
                applied,
                end["duplicates"].as_u64(),
                end["rejected"].as_u64()
            ),
            (Some(true_total), MESSAGES, Some(0), Some(0)),
            "{}: {end}",
            self.protocol
        );
        assert_eq!(
            (end["held"].as_u64(), end["session_present"].as_bool()),
            (Some(0), Some(true)),
            "{}: {end}",
            self.protocol
        );
        end
    }
}

#[test]
fn the_c_consumer_is_exact_at_qos_2_with_a_naive_total_across_30_sigkills_at_3_1_1_and_at_5() {
    let s = Scratch::new("c-door");
    let bin = consumer(&s);
    // Mosquitto's stock in-flight limit, 20 (tests/mosquitto/idem.conf.in).
    let b = Broker::start(&s.join("broker"));
    let runs = ["3.1.1", "5"].map(|protocol| Run {
        bin: &bin,
        protocol,
        port: b.port().to_string(),
        flash: s.join(&format!("c-dev-{protocol}.flash")),
    });
    for c in &runs {
        // Subscribed before paho publishes: Mosquitto queues only for a session that has.
        let first = c.report("100");
        let expiry = if c.protocol == "5" { u32::MAX } else { 0 };
        assert_eq!(
            (
                first["applied"].as_u64(),
                first["granted_qos"].as_i64(),
                first["session_expiry_s"].as_u64()
            ),
            (Some(0), Some(2), Some(u64::from(expiry)))
        );
    }
    // One stream for both sessions, published at MQTT 5 with 20 in flight.
    let truth_path = s.join("truth.jsonl");
    let published = paho(&[
        "publish",
        "--broker",
        &b.addr(),
        "--topic",
        "payments",
        "--qos",
        "2",
        "--count",
        &MESSAGES.to_string(),
        "--seed",
        "29",
        "--truth",
        truth_path.to_str().unwrap(),
        "--inflight",
        "20",
        "--mqtt",
        "5",
    ]);
    assert!(
        published.status.success(),
        "paho publish: {}",
        String::from_utf8_lossy(&published.stderr)
    );
    let truth = truth(&truth_path);
    for (seed, c) in (49..).zip(&runs) {
        let mid_stream = c.kill_loop(seed);
        let end = c.graded(
            &truth,
            &b.payments_sent_after_pubrel(&format!("c-dev-{}", c.protocol)),
        );
        println!(
            "MQTT {}: {mid_stream} kills, each with messages left to apply; the last run: {} records, {} syncs, {} resend reconnections, {} PUBLISHes past the Receive Maximum, {} waited for a place (at most {} at once)",
            c.protocol,
            end["records"],
            end["syncs"],
            end["resend_reconnects"],
            end["past_receive_maximum"],
            end["waited"],
            end["most_waiting"]
        );
    }
}

/// A broker of the test's own on 127.0.0.1 that answers each of `connections` CONNECTs
/// with `answer`, then closes.
fn fake_broker(connections: usize, answer: Vec<u8>) -> (u16, std::thread::JoinHandle<()>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let thread = std::thread::spawn(move || {
        use std::io::{Read, Write};
        for _ in 0..connections {
            let (mut c, _) = listener.accept().unwrap();
            let mut connect = [0u8; 256];
            let _ = c.read(&mut connect);
            let _ = c.write_all(&answer);
            let _ = c.read(&mut connect); // until the consumer closes
        }
    });
    (port, thread)
}

#[test]
fn garbage_or_a_refusal_from_the_broker_ends_the_c_consumer_with_a_sentence_not_a_crash() {
    let s = Scratch::new("c-door-garbage");
    let bin = consumer(&s);
    let mut rng = SplitMix64::new(5);
    let garbage: Vec<u8> = (0..300).map(|_| rng.range(0, 256) as u8).collect();
    let refused = vec![0x20, 2, 0, 5]; // CONNACK: not authorized (MQTT 3.1.1 §3.2.2.3)
    let mut after_connack = vec![0x20, 2, 0, 0];
    after_connack.extend_from_slice(&garbage);
    // MQTT 5: a CONNACK (no properties), then a PUBLISH whose property section holds an
    // identifier MQTT 5 does not define (0x7F), or runs past the packet (40 bytes).
    let publish5 = |props: &[u8]| {
        let mut p = vec![0x20, 3, 0, 0, 0, 0x34, (2 + 8 + 2 + props.len() + 1) as u8];
        p.extend_from_slice(b"\0\x08payments\0\x01");
        p.extend_from_slice(props);
        p.push(b'7');
        p
    };
    let not_mqtt = "not an MQTT packet a subscriber takes";
    let refusal = "the broker refused the connection or the subscription";
    for (protocol, answer, connections, says) in [
        ("3.1.1", garbage, 5, [not_mqtt, ""]),
        ("3.1.1", after_connack, 5, [not_mqtt, ""]),
        (
            "3.1.1",
            refused,
            1,
            [refusal, "CONNACK 0x05 Connection Refused, not authorized"],
        ),
        ("5", publish5(&[2, 0x7F, 0]), 5, [not_mqtt, ""]),
        ("5", publish5(&[40, 0x01, 1]), 5, [not_mqtt, ""]),
        (
            "5",
            vec![0x20, 3, 0, 0x87, 0],
            1,
            [refusal, "CONNACK 0x87 Not authorized"],
        ),
        (
            "5",
            vec![0x20, 3, 0, 0, 0, 0xE0, 1, 0x8E],
            5,
            [
                "the broker sent DISCONNECT",
                "DISCONNECT 0x8E Session taken over",
            ],
        ),
    ] {
        let (port, broker) = fake_broker(connections, answer);
        let out = Command::new(&bin)
            .args(["--protocol", protocol, "127.0.0.1", &port.to_string()])
            .args(["c-dev", "payments"])
            .arg(s.join(&format!("garbage-{port}.flash")))
            .arg("300")
            .output()
            .unwrap();
        broker.join().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(says.iter().all(|s| err.contains(s)), "{err}");
        let closings = err.matches("closing the connection").count();
        assert_eq!(closings, if connections == 5 { 5 } else { 0 }, "{err}");
    }
    // A protocol the consumer does not speak: its usage, exit 2.
    let out = Command::new(&bin)
        .args(["--protocol", "4", "127.0.0.1", "1", "c", "t", "f"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        (out.status.code(), err.trim()),
        (Some(2), "consumer: --protocol takes 3.1.1 or 5, not 4")
    );
}

#[test]
fn the_receive_path_links_for_a_cortex_m4_with_newlib_against_the_thumbv7em_library() {
    let s = Scratch::new("c-door-m4");
    build_library(&["--profile", "c-door", "--target", "thumbv7em-none-eabihf"]);
    let dir = capi().join("examples/consumer");
    let elf = s.join("consumer-m4.elf");
    run(
        Command::new("arm-none-eabi-gcc")
            .args([
                "-mcpu=cortex-m4",
                "-mthumb",
                "-mfloat-abi=hard",
                "-mfpu=fpv4-sp-d16",
            ])
            .args(STRICT_C99)
            .arg("-Os")
            .args([
                "-ffunction-sections",
                "-fdata-sections",
                "-Wl,--gc-sections",
            ])
            .args(["--specs=nano.specs", "--specs=nosys.specs", "-I"])
            .arg(capi().join("include"))
            .arg(dir.join("receive.c"))
            .arg(dir.join("cortex_m.c"))
            .arg(root().join("target/thumbv7em-none-eabihf/c-door/libidem_mqtt_c.a"))
            .arg("-o")
            .arg(&elf),
        "arm-none-eabi-gcc (gcc-arm-none-eabi and libnewlib-arm-none-eabi, from .ci/setup)",
    );
    let size = run(
        Command::new("arm-none-eabi-size").arg(&elf),
        "arm-none-eabi-size",
    );
    println!("{}", String::from_utf8_lossy(&size.stdout));
    // The receive path calls the door, and the door is in the image, hard-float.
    let nm = run(
        Command::new("arm-none-eabi-nm").arg(&elf),
        "arm-none-eabi-nm",
    );
    let nm = String::from_utf8_lossy(&nm.stdout);
    for f in ["idem_open", "idem_input", "idem_idle", "consume", "main"] {
        assert!(
            nm.lines().any(|l| l.ends_with(&format!(" T {f}"))),
            "{f} is not in the image"
        );
    }
    let attrs = run(
        Command::new("arm-none-eabi-readelf").args(["-A"]).arg(&elf),
        "arm-none-eabi-readelf",
    );
    let attrs = String::from_utf8_lossy(&attrs.stdout);
    assert!(attrs.contains("Tag_ABI_VFP_args: VFP registers"), "{attrs}");
}
