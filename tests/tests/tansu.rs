//! `idem kafka` against a real Kafka-protocol broker: tansu, in memory, on a free port of
//! 127.0.0.1 only, started for this test and stopped after it. `.ci/run` installs tansu
//! (`cargo install tansu --locked --features dynostore`).

use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use idem_core::lab::rng::SplitMix64;
use serde_json::Value;

/// A tansu broker for one test; dropped, it is killed.
struct Tansu {
    child: Child,
    brokers: String,
}

impl Tansu {
    fn start() -> Self {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let url = format!("tcp://127.0.0.1:{port}");
        let child = Command::new("tansu")
            .args([
                "broker",
                "--listener-url",
                &url,
                "--advertised-listener-url",
                &url,
            ])
            .args(["--storage-engine", "memory://tansu/"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("tansu is installed (.ci/run installs it)");
        let brokers = format!("127.0.0.1:{port}");
        let started = Instant::now();
        while TcpStream::connect(&brokers).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "tansu did not listen on {brokers}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Self { child, brokers }
    }
}

impl Drop for Tansu {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The `idem` binary with the kafka feature, built once by cargo.
fn idem() -> Command {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let status = Command::new(env!("CARGO"))
        .current_dir(&root)
        .args([
            "build",
            "--quiet",
            "--locked",
            "-p",
            "idem",
            "--features",
            "kafka",
        ])
        .status()
        .unwrap();
    assert!(status.success(), "building idem with the kafka feature");
    Command::new(root.join("target/debug/idem"))
}

fn json(out: Output) -> Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn the_lab_and_a_killed_consumer_on_a_real_broker() {
    let broker = Tansu::start();
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

    // 100 events; a consumer killed at seeded random instants, then a last run.
    let topic = format!("ddia-{}", std::process::id());
    let produced = idem()
        .args([
            "kafka",
            "produce",
            &topic,
            "--scenario",
            "ddia",
            "--brokers",
            &broker.brokers,
        ])
        .output()
        .unwrap();
    assert!(
        produced.status.success(),
        "{}",
        String::from_utf8_lossy(&produced.stderr)
    );
    let dir = std::env::temp_dir().join(format!("idem-tansu-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut rng = SplitMix64::new(0x7A45);
    for store in ["offset", "atomic", "message-id"] {
        let flash = dir.join(format!("{store}.bin"));
        let group = format!("tansu-{store}");
        let consume = |extra: &[&str]| {
            let mut c = idem();
            c.args([
                "kafka",
                "consume",
                &topic,
                "--group",
                &group,
                "--store",
                store,
                "--brokers",
                &broker.brokers,
            ]);
            c.arg("--flash").arg(&flash).args(extra);
            c
        };
        let mut landed = 0;
        for _ in 0..4 {
            let mut child = consume(&["--pace-ms", "25"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            // At most 500 ms at 25 ms an event: four runs cannot finish the 100 events.
            std::thread::sleep(Duration::from_millis(rng.range(150, 500)));
            landed += u32::from(child.try_wait().unwrap().is_none());
            let _ = child.kill();
            let _ = child.wait();
        }
        let v = json(consume(&["--json"]).output().unwrap());
        assert_eq!(
            (v["total"].as_i64(), v["true_total"].as_i64()),
            (Some(100), Some(100)),
            "{store}: {v}"
        );
        assert!(
            landed >= 3,
            "{store}: only {landed} of 4 kills landed mid-stream"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
