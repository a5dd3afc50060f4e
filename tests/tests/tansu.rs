//! `idem kafka` against a real Kafka-protocol broker: tansu, on a free port of 127.0.0.1
//! only, started for each test and stopped after it, with its libSQL engine (and once with
//! its memory engine, whose end offsets are short). Records come from idem's own batching
//! producer and from a client of another codebase, kafka-python. `.ci/run` installs both
//! (tansu with `--features libsql,dynostore` under `~/.cache/idem`, kafka-python in a
//! virtualenv there); `$IDEM_TANSU` and `$IDEM_KAFKA_PYTHON` point elsewhere.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use idem_sim::rng::SplitMix64;
use idem_tests::idem;
use serde_json::Value;

/// tansu's storage engine for a test.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Engine {
    /// libSQL in a file of the broker's own temporary directory: behaves as Kafka does.
    Sqlite,
    /// In memory: its end offset after a multi-record batch is short
    /// (docs/tansu-memory-end-offset.md).
    Memory,
}

/// A tansu broker for one test, on a free port of 127.0.0.1, in a temporary directory of
/// its own; dropped, it is killed and the directory removed.
struct Tansu {
    child: Child,
    brokers: String,
    dir: PathBuf,
}

/// The tansu that `.ci/run` installs (libsql and memory engines), or `$IDEM_TANSU`.
fn tansu() -> PathBuf {
    std::env::var_os("IDEM_TANSU").map_or_else(
        || {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                .join(".cache/idem/tansu-0.6.0-libsql-dynostore-debug/bin/tansu")
        },
        PathBuf::from,
    )
}

/// The Python with kafka-python that `.ci/run` installs, or `$IDEM_KAFKA_PYTHON`.
fn kafka_python() -> Command {
    let python = std::env::var_os("IDEM_KAFKA_PYTHON").map_or_else(
        || {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                .join(".cache/idem/kafka-python-3.0.12/bin/python")
        },
        PathBuf::from,
    );
    let mut c = Command::new(python);
    c.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("clients/kafka_python.py"));
    c
}

impl Tansu {
    fn start(engine: Engine) -> Self {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let url = format!("tcp://127.0.0.1:{port}");
        let dir = std::env::temp_dir().join(format!("idem-tansu-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let storage = match engine {
            // Relative to the broker's working directory: its own temporary one.
            Engine::Sqlite => "sqlite://tansu.db",
            Engine::Memory => "memory://tansu/",
        };
        let child = Command::new(tansu())
            .current_dir(&dir)
            .args([
                "broker",
                "--listener-url",
                &url,
                "--advertised-listener-url",
                &url,
            ])
            .args(["--storage-engine", storage])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("tansu with the libsql and dynostore features (.ci/run installs it)");
        let brokers = format!("127.0.0.1:{port}");
        let started = Instant::now();
        while TcpStream::connect(&brokers).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "tansu did not listen on {brokers}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Self {
            child,
            brokers,
            dir,
        }
    }

    /// Sends one of the Python client's record sets to a new one-partition topic.
    fn python_produce(&self, topic: &str, kind: &str) {
        let out = kafka_python()
            .args([&self.brokers, "produce", topic, kind])
            .output()
            .expect("kafka-python in a virtualenv (.ci/run installs it)");
        assert!(
            out.status.success(),
            "kafka-python: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// `idem kafka consume TOPIC --store STORE` into `flash`, with `extra` arguments.
    fn consume(&self, topic: &str, store: &str, flash: &Path, extra: &[&str]) -> Command {
        let mut c = idem();
        c.args(["kafka", "consume", topic, "--store", store])
            .args([
                "--group",
                &format!("g-{store}-{}", flash.file_name().unwrap().to_string_lossy()),
            ])
            .args(["--brokers", &self.brokers, "--idle-ms", "300"])
            .arg("--flash")
            .arg(flash)
            .args(extra);
        c
    }
}

impl Drop for Tansu {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn json(out: Output) -> Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The JSON report of a consume that exits with `code`.
fn report(c: &mut Command, code: i32) -> Value {
    let out = c.output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(code),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn temp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("idem-kafka-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn the_lab_on_a_real_broker() {
    let broker = Tansu::start(Engine::Sqlite);
    let lab = json(
        idem()
            .args(["kafka", "lab", "--json", "--brokers", &broker.brokers])
            .output()
            .unwrap(),
    );
    assert_eq!(lab["partitions"], 1);
    let records: Vec<(i64, String)> = lab["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["offset"].as_i64().unwrap(),
                r["key"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        records,
        [
            (0, "p17".to_string()),
            (1, "p17".to_string()),
            (2, "p18".to_string())
        ]
    );
    assert_eq!(
        lab["totals"],
        serde_json::json!({"naive": 13, "offset": 13, "message-id": 8, "atomic": 13})
    );
    assert_eq!(lab["true_total"], 8, "what the producer meant to send");
}

/// 300 payments and 44 application resends from idem's batching producer over three
/// partitions; consumers killed at seeded random instants, then run to the end. The
/// figures are the shop scenario's: 1,197 for the distinct payments, 176 for the resends.
#[test]
fn batched_payments_on_three_partitions_with_kills() {
    let broker = Tansu::start(Engine::Sqlite);
    let topic = "shop";
    let dir = temp("shop");
    let sent = dir.join("sent.jsonl");
    let produced = produce_with_truth(&broker, (topic, "shop"), &["--partitions", "3"], &sent);
    assert_eq!(
        produced,
        format!(
            "produced 344 records to shop\nwhat was sent is in {}\n",
            sent.display()
        )
    );
    // What another client reads back: the keys and JSON values the README documents.
    let read = kafka_python()
        .args([&broker.brokers, "read", topic])
        .output()
        .unwrap();
    let read: Vec<Value> = String::from_utf8(read.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(read.len(), 344);
    assert!(read.iter().any(
        |r| r["key"] == "p0" && r["value"] == serde_json::json!({"payer": "ada", "amount": 1})
    ));
    let mut rng = SplitMix64::new(0x5409);
    let truth = sent.to_str().unwrap();
    for (store, want) in [
        ("message-id", 1197),
        ("offset", 1197 + 176),
        ("atomic", 1197 + 176),
        ("naive", 1197 + 176),
    ] {
        let flash = dir.join(format!("{store}.bin"));
        let mut landed = 0;
        for _ in 0..4 {
            // The consumer streams from its first poll: 344 records at 20 ms each outlast
            // the four kills. Graded by the truth file, it logs the ids it applies.
            let mut child = broker
                .consume(topic, store, &flash, &["--pace-ms", "20", "--truth", truth])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            std::thread::sleep(Duration::from_millis(rng.range(300, 1200)));
            landed += u32::from(child.try_wait().unwrap().is_none());
            let _ = child.kill();
            let _ = child.wait();
        }
        // Graded by the producer's truth file: the ids applied across the kills.
        let by_file = report(
            &mut broker.consume(topic, store, &flash, &["--json", "--truth", truth]),
            0,
        );
        assert_eq!(
            by_file["truth"],
            serde_json::json!({"file": truth, "ids": 300, "sent": 344})
        );
        // Then by a read of its own (which ends the log of ids): the same verdict.
        let v = report(&mut broker.consume(topic, store, &flash, &["--json"]), 0);
        assert_eq!(v["true_total"], 1197, "{store}: {v}");
        let parts = v["partitions"].as_array().unwrap();
        let read: u64 = parts
            .iter()
            .map(|p| p["records_read"].as_u64().unwrap())
            .sum();
        assert_eq!(read, 344, "{store}: every record read");
        for p in parts {
            assert_eq!(p["short_read"], false, "{store}: {p}");
            assert_eq!(p["end_offset"], p["next_offset"], "{store}: {p}");
        }
        assert_eq!(
            (
                &by_file["total"],
                &by_file["true_total"],
                &by_file["verdict"]
            ),
            (&v["total"], &v["true_total"], &v["verdict"]),
            "{store}: {by_file}"
        );
        let total = v["total"].as_i64().unwrap();
        let ids = &by_file["ids"];
        assert_eq!(
            (&ids["missing"], &ids["not_in_truth"]),
            (&0.into(), &0.into())
        );
        let again = ids["applied_again"].as_i64().unwrap();
        if store == "naive" {
            // Over by the resends, and by whatever the kills replayed.
            assert!(total >= want, "naive: {v}");
            assert!(again >= 44, "naive: {by_file}");
        } else {
            assert_eq!(total, want, "{store}: {v}");
            // The resends, each applied again under a new offset (none by the
            // message-id store); nothing the kills replayed.
            let resends = if store == "message-id" { 0 } else { 44 };
            assert_eq!(again, resends, "{store}: {by_file}");
        }
        assert!(
            landed >= 3,
            "{store}: only {landed} of 4 kills landed mid-stream"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// kafka-python batches 20 records into one request: with the libSQL engine the end
/// offset is 20 and idem reads all 20.
#[test]
fn a_batch_from_kafka_python_is_read_whole() {
    let broker = Tansu::start(Engine::Sqlite);
    broker.python_produce("batch20", "batch20");
    let dir = temp("batch20");
    let v = report(
        &mut broker.consume("batch20", "message-id", &dir.join("m.bin"), &["--json"]),
        0,
    );
    assert_eq!(
        (&v["total"], &v["true_total"], &v["verdict"]),
        (&Value::from(20), &Value::from(20), &Value::from("exact"))
    );
    assert_eq!(v["partitions"][0]["end_offset"], 20);
    assert_eq!(v["partitions"][0]["records_read"], 20);

    // Killed between a flash commit and its group commit: the image is the truth, so
    // the naive store does not replay what the flash commit covered.
    let flash = dir.join("naive.bin");
    let aborted = broker
        .consume(
            "batch20",
            "naive",
            &flash,
            &["--checkpoint-every", "5", "--abort-after-flash-commit", "3"],
        )
        .output()
        .unwrap();
    assert!(!aborted.status.success(), "the hook aborts the process");
    let v = report(
        &mut broker.consume(
            "batch20",
            "naive",
            &flash,
            &["--checkpoint-every", "5", "--json"],
        ),
        0,
    );
    assert_eq!(v["partitions"][0]["group_offset_was"], 10, "{v}");
    assert_eq!(
        (v["total"].as_i64(), v["verdict"].as_str()),
        (Some(20), Some("exact"))
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The memory engine's end offset after the same batch is 1: idem still reads all 20,
/// and says that the broker's count is short instead of calling the total exact.
#[test]
fn a_short_end_offset_is_reported_not_trusted() {
    let broker = Tansu::start(Engine::Memory);
    broker.python_produce("batch20", "batch20");
    let dir = temp("memory");
    let v = report(
        &mut broker.consume("batch20", "offset", &dir.join("o.bin"), &["--json"]),
        1,
    );
    assert_eq!(v["verdict"], "unverified", "{v}");
    assert_eq!(v["partitions"][0]["short_read"], true);
    assert_eq!(v["partitions"][0]["end_offset"], 1);
    assert_eq!(v["partitions"][0]["records_read"], 20);
    let out = broker
        .consume("batch20", "offset", &dir.join("o2.bin"), &[])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(
            "warning: records were fetched up to offset 19, past the broker's end offset 1"
        )
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Records as other clients write them: keyless, not payments, overflowing.
#[test]
fn keyless_bad_and_overflowing_records() {
    let broker = Tansu::start(Engine::Sqlite);
    let dir = temp("bad");
    let fails = |topic: &str, store: &str, name: &str, message: &str| {
        let out = broker
            .consume(topic, store, &dir.join(name), &[])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(message), "{err}");
        assert!(!err.contains("panicked"));
    };
    // Two payments without a key: no message id for the message-id store...
    broker.python_produce("keyless", "keyless");
    fails(
        "keyless",
        "message-id",
        "k1.bin",
        "keyless partition 0 offset 0: the record has no key, so no message id",
    );
    // ... unless each takes its place as its id; the other stores never read ids.
    for (store, extra) in [("message-id", &["--keyless", "offset"][..]), ("naive", &[])] {
        let mut args = extra.to_vec();
        args.push("--json");
        let v = report(
            &mut broker.consume("keyless", store, &dir.join(format!("k-{store}.bin")), &args),
            0,
        );
        assert_eq!(
            (v["total"].as_i64(), v["true_total"].as_i64()),
            (Some(8), Some(8)),
            "{v}"
        );
    }
    // Good and bad records mixed: stop at the first bad one, or skip and name each.
    broker.python_produce("mixed", "mixed");
    fails(
        "mixed",
        "offset",
        "m1.bin",
        "mixed partition 0 offset 1: not a payment",
    );
    let v = report(
        &mut broker.consume(
            "mixed",
            "message-id",
            &dir.join("m2.bin"),
            &["--on-bad-record", "skip", "--json"],
        ),
        0,
    );
    assert_eq!(
        (v["total"].as_i64(), v["verdict"].as_str()),
        (Some(8), Some("exact"))
    );
    let skipped: Vec<(u64, &str)> = v["skipped_records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["offset"].as_u64().unwrap(), s["why"].as_str().unwrap()))
        .collect();
    assert_eq!(skipped.len(), 3, "{v}");
    assert_eq!(skipped.iter().map(|s| s.0).collect::<Vec<_>>(), [1, 2, 3]);
    assert_eq!(skipped[2].1, "the record has no value (null)");
    // Two amounts of 2^63 - 1: an error, never a wrapped total.
    broker.python_produce("overflow", "overflow");
    fails(
        "overflow",
        "offset",
        "o.bin",
        "overflow partition 0 offset 1: its amount 9223372036854775807 takes the partition's amounts past a 64-bit total",
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The lines a child prints on stderr, as they come.
fn stderr_lines(child: &mut std::process::Child) -> std::sync::mpsc::Receiver<String> {
    use std::io::BufRead;
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Waits for every child to exit by itself (at most `limit`; then they are killed and
/// the test fails); each one's JSON report, in the order they exited.
fn finish_all(mut children: Vec<std::process::Child>, limit: Duration) -> Vec<Value> {
    let started = Instant::now();
    let mut order = Vec::new();
    while order.len() < children.len() {
        for (i, c) in children.iter_mut().enumerate() {
            if !order.contains(&i) && c.try_wait().unwrap().is_some() {
                order.push(i);
            }
        }
        if started.elapsed() > limit {
            for c in &mut children {
                let _ = c.kill();
            }
            panic!("the members did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut outs: Vec<Option<Output>> = children
        .into_iter()
        .map(|c| Some(c.wait_with_output().unwrap()))
        .collect();
    order
        .into_iter()
        .map(|i| {
            let out = outs[i].take().unwrap();
            assert!(
                out.status.success(),
                "member {i}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            serde_json::from_slice(&out.stdout).unwrap()
        })
        .collect()
}

/// Two `--shared` members of one group on a 4-partition topic, each with its own image:
/// the broker splits the partitions between them; one is killed mid-stream, so its
/// partitions move to the other, and restarted, so they move back. Each partition, as the
/// member that held it last left it, is consumed to its end, and together they make the
/// shop's figures: the distinct payments for message-id, plus the resends for offset and
/// atomic.
#[test]
fn two_members_of_a_group_with_rebalances_and_a_kill() {
    let broker = Tansu::start(Engine::Sqlite);
    let produced = idem()
        .args(["kafka", "produce", "shop4", "--scenario", "shop"])
        .args(["--partitions", "4", "--brokers", &broker.brokers])
        .output()
        .unwrap();
    assert!(produced.status.success());
    let dir = temp("members");
    for (store, want) in [
        ("message-id", 1197),
        ("offset", 1197 + 176),
        ("atomic", 1197 + 176),
    ] {
        let member = |name: &str| {
            idem()
                .args(["kafka", "consume", "shop4", "--store", store, "--shared"])
                .args(["--group", &format!("members-{store}")])
                .args(["--brokers", &broker.brokers, "--json"])
                .args(["--pace-ms", "4", "--idle-ms", "8000", "--flash"])
                .arg(dir.join(format!("{store}-{name}.bin")))
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        };
        // a alone takes every partition; b joins once a has committed, so the
        // partitions b takes are behind in b's image (rebuilt); then a is killed, and
        // restarted, and the partitions move again.
        let mut a = member("a");
        let lines = stderr_lines(&mut a);
        let deadline = Instant::now() + Duration::from_secs(30);
        while !lines
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("{store}: a printed no checkpoint"))
            .contains("checkpoint: covers through 19")
        {
            assert!(Instant::now() < deadline, "{store}: a made no progress");
        }
        let b = member("b");
        std::thread::sleep(Duration::from_millis(2500));
        assert!(a.try_wait().unwrap().is_none(), "{store}: a ended too soon");
        a.kill().unwrap();
        a.wait().unwrap();
        std::thread::sleep(Duration::from_millis(500));
        let a = member("a");
        // Each partition as the member that held it last left it.
        let reports = finish_all(vec![a, b], Duration::from_secs(90));
        let mut last = std::collections::BTreeMap::new();
        for v in &reports {
            for p in v["partitions"].as_array().unwrap() {
                last.insert(p["partition"].as_u64().unwrap(), p.clone());
            }
        }
        assert_eq!(
            last.len(),
            4,
            "{store}: every partition reported: {reports:?}"
        );
        let total: i64 = last.values().map(|p| p["total"].as_i64().unwrap()).sum();
        let truth: i64 = last
            .values()
            .map(|p| p["true_total"].as_i64().unwrap())
            .sum();
        assert_eq!((total, truth), (want, 1197), "{store}: {reports:?}");
        for p in last.values() {
            assert_eq!(p["next_offset"], p["end_offset"], "{store}: {p}");
        }
        let (a, b) = (&reports[0], &reports[1]);
        // A partition came to a member whose image was behind the group: rebuilt.
        let takes: Vec<&Value> = [a, b]
            .iter()
            .flat_map(|v| v["taken"].as_array().unwrap())
            .collect();
        assert!(
            takes.iter().any(|t| t["action"] == "rebuilt"),
            "{store}: {a} {b}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The group gets its copy of the durable positions late (every 100 ms or 10
/// checkpoints): killed between a flash commit and its delayed group commit, a consumer
/// leaves the group behind its image, never ahead, and the rerun of even the naive store
/// is exact, since the image holds the position.
#[test]
fn killed_before_its_delayed_group_commit_the_rerun_is_exact() {
    let broker = Tansu::start(Engine::Sqlite);
    let topic = "late-copy";
    let produced = idem()
        .args(["kafka", "produce", topic, "--scenario", "ddia"])
        .args(["--brokers", &broker.brokers])
        .output()
        .unwrap();
    assert!(produced.status.success());
    let dir = temp("late-copy");
    let flash = dir.join("naive.bin");
    let every = ["--checkpoint-every", "5"];
    let killed = broker
        .consume(
            topic,
            "naive",
            &flash,
            &[&every[..], &["--abort-with-group-behind", "7"]].concat(),
        )
        .output()
        .unwrap();
    assert!(!killed.status.success(), "the hook aborts the process");
    let group = "g-naive-naive.bin";
    let behind = python_committed(&broker.brokers, topic, group);
    assert!(
        behind.is_none_or(|n| n < 35),
        "the image is at 35: {behind:?}"
    );
    let v = report(
        &mut broker.consume(topic, "naive", &flash, &[&every[..], &["--json"]].concat()),
        0,
    );
    assert_eq!(
        (
            v["total"].as_i64(),
            v["true_total"].as_i64(),
            v["verdict"].as_str()
        ),
        (Some(100), Some(100), Some("exact")),
        "{v}"
    );
    assert_eq!(
        v["partitions"][0]["group_offset_was"].as_u64(),
        behind,
        "{v}"
    );
    assert_eq!(
        python_committed(&broker.brokers, topic, group),
        Some(100),
        "the end commits what is pending"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The group's committed offset of partition 0, as kafka-python reads it.
fn python_committed(brokers: &str, topic: &str, group: &str) -> Option<u64> {
    let out = kafka_python()
        .args([brokers, "committed", topic, group])
        .output()
        .expect("kafka-python in a virtualenv (.ci/run installs it)");
    json(out)["committed"].as_u64()
}

#[test]
fn a_topic_fed_to_the_board_under_qemu_with_resets_and_a_restarted_bridge() {
    let broker = Tansu::start(Engine::Sqlite);
    let b = broker.brokers.as_str();
    let produced = idem()
        .args([
            "kafka",
            "produce",
            "board",
            "--scenario",
            "ddia",
            "--brokers",
            b,
        ])
        .output()
        .unwrap();
    assert!(produced.status.success());
    // 1. The bridge under QEMU, ten resets at seeded offsets: exact, and the group gets
    //    only positions the board acknowledged.
    let r = json(
        idem()
            .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(".."))
            .args([
                "device",
                "qemu",
                "--topic",
                "board",
                "--group",
                "g1",
                "--brokers",
                b,
            ])
            .args(["--store", "message-id", "--resets", "10", "--seed", "8"])
            .args(["--json", "--timeout", "120"])
            .output()
            .unwrap(),
    );
    assert_eq!(
        (r["final_total"].as_i64(), r["true_total"].as_i64()),
        (Some(100), Some(100))
    );
    assert_eq!(r["resets"], 10);
    let commits: Vec<u64> = r["group_commits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_u64().unwrap())
        .collect();
    assert!(commits.windows(2).all(|w| w[0] < w[1]), "{commits:?}");
    assert_eq!(commits.last(), Some(&100));
    assert_eq!(python_committed(b, "board", "g1"), Some(100));

    // 2. One board, two bridges: the first is killed mid-stream; the group's offset then
    //    is no further than the board's flash, and the second bridge resumes from the
    //    position the board announces.
    let elf = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../firmware/target/feed-qemu/thumbv6m-none-eabi/release/idem-feed");
    let dir = temp("board-bridge");
    let uart = dir.join("uart.sock");
    let mut qemu = Command::new("qemu-system-arm")
        .args([
            "-M", "microbit", "-display", "none", "-monitor", "none", "-chardev",
        ])
        .arg(format!(
            "socket,id=uart,path={},server=on,wait=off",
            uart.display()
        ))
        .args(["-serial", "chardev:uart", "-kernel"])
        .arg(&elf)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while !uart.exists() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "QEMU made no socket"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let port = format!("unix:{}", uart.display());
    let bridge = |extra: &[&str]| {
        let mut c = idem();
        c.args([
            "device",
            "feed",
            "--topic",
            "board",
            "--group",
            "g2",
            "--brokers",
            b,
        ])
        .args(["--store", "offset", "--port", &port, "--timeout", "120"])
        .args(extra);
        c
    };
    let mut first = bridge(&[])
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let lines = stderr_lines(&mut first);
    loop {
        let line = lines
            .recv_timeout(Duration::from_secs(60))
            .expect("the first bridge reported progress");
        if line.contains("covers through 39") {
            break;
        }
    }
    first.kill().unwrap();
    first.wait().unwrap();
    let group_then = python_committed(b, "board", "g2").expect("a committed offset");
    // The second bridge did not deliver what the board held before it came: it reports
    // the board's total unverified (exit 1), and still commits the group at the end.
    let second = report(&mut bridge(&["--json"]), 1);
    assert_eq!(second["verdict"], "unverified", "{second}");
    let resumed = second["resumes"][0].as_u64().unwrap();
    let last = second["undelivered"]["last"].as_u64().unwrap();
    assert!(
        last + 1 >= resumed,
        "this bridge delivered from {} on, the board resumed at {resumed}",
        last + 1
    );
    assert!(
        group_then <= resumed,
        "the group's offset {group_then} passed the board's position {resumed}"
    );
    assert!(resumed >= 40, "the board resumed at {resumed}");
    assert_eq!(second["final_total"], 100);
    assert_eq!(python_committed(b, "board", "g2"), Some(100));
    println!(
        "bridge killed after the checkpoint at 40: group at {group_then}, the board resumed at {resumed}"
    );
    let _ = qemu.kill();
    let _ = qemu.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

/// `idem kafka produce TOPIC --scenario SCENARIO --truth TRUTH` on `broker`, with
/// `extra` arguments; what it printed.
fn produce_with_truth(
    broker: &Tansu,
    (topic, scenario): (&str, &str),
    extra: &[&str],
    truth: &Path,
) -> String {
    let out = idem()
        .args(["kafka", "produce", topic, "--scenario", scenario])
        .args(["--brokers", &broker.brokers])
        .args(extra)
        .arg("--truth")
        .arg(truth)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A consume refused with exit 2 and one sentence holding `message`.
fn refused(c: &mut Command, message: &str) {
    let out = c.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(message), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}

/// `--truth` grades the set of ids applied, not only their total: the topic holds p17
/// (5), p17 again and p18 (3).
#[test]
fn the_truth_grades_the_ids_applied_not_their_total() {
    let broker = Tansu::start(Engine::Sqlite);
    let dir = temp("ids");
    produce_with_truth(&broker, ("pay", "payments"), &[], &dir.join("sent.jsonl"));
    let truth = |name: &str, lines: &[(&str, i64)]| {
        let path = dir.join(name);
        let text: String = lines
            .iter()
            .map(|(id, amount)| {
                format!("{{\"id\":\"{id}\",\"payer\":\"ada\",\"amount\":{amount}}}\n")
            })
            .collect();
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_string()
    };
    let grade = |store: &str, flash: &str, truth: &str| {
        report(
            &mut broker.consume(
                "pay",
                store,
                &dir.join(flash),
                &["--json", "--truth", truth],
            ),
            0,
        )
    };
    // The case: p17, p18 (3) against a truth of p17, zz (3). The totals agree.
    let zz = truth("zz.jsonl", &[("p17", 5), ("zz", 3)]);
    let v = grade("message-id", "m1.bin", &zz);
    assert_eq!(
        (&v["total"], &v["true_total"], &v["verdict"]),
        (&8.into(), &8.into(), &"over and under".into()),
        "{v}"
    );
    assert_eq!(
        v["ids"],
        serde_json::json!({"missing": 1, "missing_first": ["zz"], "applied_again": 0,
            "applied_again_first": [], "not_in_truth": 1, "not_in_truth_first": ["p18"]})
    );
    let out = broker
        .consume("pay", "message-id", &dir.join("m2.bin"), &["--truth", &zz])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!(
            "pay with the message-id store: total 8, true total 8 of the 2 distinct ids in {zz}: over and under\nids against the truth: 1 missing (zz); 1 not in the truth (p18)\n"
        )),
        "{text}"
    );
    // A duplicate that offsets a loss: the naive store applies p17 twice (13), against
    // p17 (5), p18 (3) and p19 (5), never delivered (13).
    let p19 = truth("p19.jsonl", &[("p17", 5), ("p18", 3), ("p19", 5)]);
    let v = grade("naive", "n1.bin", &p19);
    assert_eq!(
        (&v["total"], &v["true_total"], &v["verdict"]),
        (&13.into(), &13.into(), &"over and under".into()),
        "{v}"
    );
    assert_eq!(
        (&v["ids"]["missing_first"], &v["ids"]["applied_again_first"]),
        (&serde_json::json!(["p19"]), &serde_json::json!(["p17"]))
    );
    // The producer's own truth: each id applied once by the message-id store.
    let sent = dir.join("sent.jsonl");
    let v = grade("message-id", "m3.bin", sent.to_str().unwrap());
    assert_eq!(v["verdict"], "exact", "{v}");
    assert_eq!(
        (&v["ids"]["missing"], &v["ids"]["applied_again"]),
        (&0.into(), &0.into())
    );
    // Consumed once without --truth, the image's ids are not known: graded on totals,
    // at best unproven.
    report(
        &mut broker.consume("pay", "message-id", &dir.join("m3.bin"), &["--json"]),
        0,
    );
    let v = grade("message-id", "m3.bin", sent.to_str().unwrap());
    assert_eq!(
        (&v["verdict"], &v["ids"], &v["ids_lacking"]),
        (&"unproven".into(), &Value::Null, &2.into()),
        "{v}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A `kafka produce --truth` killed before it finished leaves nothing under the truth's
/// name, and its temporary file, without the end line, is refused in one sentence.
/// kafka-python's truth, written only for the sends the broker acknowledged, has no
/// first or end line, and grades as any other.
#[test]
fn a_killed_producers_truth_is_refused_and_kafka_pythons_is_taken() {
    let broker = Tansu::start(Engine::Sqlite);
    let dir = temp("killedtruth");
    let truth = dir.join("t.jsonl");
    let mut child = idem()
        .args(["kafka", "produce", "big", "--scenario", "stream"])
        .args([
            "--count",
            "1000000",
            "--one-at-a-time",
            "--brokers",
            &broker.brokers,
        ])
        .arg("--truth")
        .arg(&truth)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Killed once its temporary file holds its first line (within 30 s).
    let started = Instant::now();
    let tmp = loop {
        let left: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        if let [only] = &left[..]
            && std::fs::metadata(only).unwrap().len() > 0
        {
            break only.clone();
        }
        assert!(started.elapsed() < Duration::from_secs(30), "{left:?}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(child.try_wait().unwrap().is_none(), "the producer finished");
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(!truth.exists(), "no truth under its name");
    let tmp = tmp.to_str().unwrap();
    assert!(tmp.ends_with(".idem-tmp"), "{tmp}");
    let flash = dir.join("big.bin");
    refused(
        &mut broker.consume("big", "offset", &flash, &["--truth", tmp]),
        &format!("{tmp} was written by idem kafka produce and has no end line"),
    );
    refused(
        &mut broker.consume(
            "big",
            "offset",
            &flash,
            &["--truth", truth.to_str().unwrap()],
        ),
        "t.jsonl",
    );
    assert!(!flash.exists(), "nothing refused made an image");
    // kafka-python's truth: 20 payments p0..p19 of 1, each once.
    let py = dir.join("py.jsonl");
    let out = kafka_python()
        .args([
            &broker.brokers,
            "produce",
            "py20",
            "batch20",
            py.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = report(
        &mut broker.consume(
            "py20",
            "message-id",
            &dir.join("py.bin"),
            &["--json", "--truth", py.to_str().unwrap()],
        ),
        0,
    );
    assert_eq!(
        (
            &v["total"],
            &v["verdict"],
            &v["truth"]["ids"],
            &v["truth"]["sent"]
        ),
        (&20.into(), &"exact".into(), &20.into(), &20.into()),
        "{v}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
