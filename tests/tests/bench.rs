//! `idem kafka bench` on a small topic, against the real tansu and kafka-python that
//! `.ci/run` installs (`$IDEM_TANSU` and `$IDEM_KAFKA_PYTHON` point elsewhere, as for
//! `tests/tansu.rs`): every reader runs, every run is checked, and the figures that do not
//! depend on the machine's speed are exact. No wall-clock figure is asserted.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// `$VAR`, else `~/.cache/idem/DEFAULT`, where `.ci/run` installs it.
fn installed(var: &str, default: &str) -> PathBuf {
    std::env::var_os(var).map_or_else(
        || PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(default),
        PathBuf::from,
    )
}

fn tansu() -> PathBuf {
    installed(
        "IDEM_TANSU",
        ".cache/idem/tansu-0.6.0-libsql-dynostore-debug/bin/tansu",
    )
}

fn python() -> PathBuf {
    installed(
        "IDEM_KAFKA_PYTHON",
        ".cache/idem/kafka-python-3.0.12/bin/python",
    )
}

/// The `idem` binary with the kafka feature, built by cargo.
fn idem() -> Command {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let status = Command::new(env!("CARGO"))
        .current_dir(&root)
        .args(["build", "--quiet", "--locked", "-p", "idem"])
        .args(["--features", "kafka"])
        .status()
        .unwrap();
    assert!(status.success(), "building idem with the kafka feature");
    Command::new(root.join("target/debug/idem"))
}

/// `idem kafka bench ARGS --tansu .. --kafka-python .. --dir DIR`.
fn bench(args: &[&str], dir: &Path) -> Output {
    idem()
        .args(["kafka", "bench"])
        .args(args)
        .arg("--tansu")
        .arg(tansu())
        .arg("--kafka-python")
        .arg(python())
        .arg("--dir")
        .arg(dir)
        .output()
        .unwrap()
}

fn temp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("idem-bench-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn the_bench_runs_and_checks_every_reader_on_a_real_broker() {
    let dir = temp("small");
    let out = bench(
        &[
            "--records",
            "2000",
            "--partitions",
            "2",
            "--runs",
            "1",
            "--json",
        ],
        &dir,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let sum: i64 = (0..2000).map(|i| i % 7 + 1).sum();
    assert_eq!(
        (v["records"].as_u64(), v["sum"].as_i64()),
        (Some(2000), Some(sum))
    );
    assert_eq!(v["partitions"], 2);
    let spread: Vec<u64> = v["records_per_partition"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_u64().unwrap())
        .collect();
    assert_eq!(spread.iter().sum::<u64>(), 2000, "{v}");
    assert!(
        spread.iter().all(|&n| n > 0),
        "both partitions hold records: {v}"
    );
    let readers = v["readers"].as_array().unwrap();
    let names: Vec<&str> = readers
        .iter()
        .map(|r| r["reader"].as_str().unwrap())
        .collect();
    let mut want = vec![
        "rdkafka plain loop".to_string(),
        "kafka-python plain loop".to_string(),
    ];
    for store in ["naive", "offset", "message-id", "atomic"] {
        for sync in ["none", "checkpoint"] {
            want.push(format!("idem {store} --sync {sync}"));
        }
    }
    want.push("idem offset --sync none, truth read".into());
    assert_eq!(names, want);
    for r in readers {
        assert_eq!(r["verdict"], "exact", "{r}");
        let truth = match r["reader"].as_str().unwrap() {
            "idem offset --sync none, truth read" => Value::from("read"),
            name if name.starts_with("idem ") => Value::from("file"),
            _ => Value::Null,
        };
        assert_eq!(r["truth"], truth, "{r}");
        assert_eq!(r["records_read"], serde_json::json!([2000]), "{r}");
        assert_eq!(r["sums"], serde_json::json!([sum]), "{r}");
        assert_eq!(
            r["wall_s"].as_array().unwrap().len(),
            1,
            "one measured run: {r}"
        );
        assert!(r["peak_rss_kib"][0].as_u64().unwrap() > 0, "{r}");
        if r["sync"] == "checkpoint" {
            assert!(r["syncs"].as_u64().unwrap() > 0, "{r}");
            assert!(r["sync_median_us"].as_u64().is_some(), "{r}");
        } else {
            assert!(r["syncs"].is_null(), "{r}");
        }
    }
    assert_eq!(readers[0]["ratio"], 1.0);
    // The runs' images and outputs are gone; the directory stays.
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// What the bench cannot run is one sentence and exit 2, before any broker starts.
#[test]
fn bad_bench_input_is_one_sentence() {
    let dir = temp("bad");
    let missing = dir.join("missing");
    let missing = missing.to_str().unwrap();
    for (args, says) in [
        (
            &["--records", "0"][..],
            "--records takes 1 to 1000000 records",
        ),
        (
            &["--partitions", "0"],
            "--partitions takes 1 to 6 partitions",
        ),
        (
            &["--partitions", "7"],
            "--partitions takes 1 to 6 partitions",
        ),
        (&["--runs", "0"], "--runs takes 1 to 9 runs"),
        (&["--records", "10", "--tansu", missing], "does not exist"),
        (
            &["--records", "10", "--kafka-python", missing],
            "cannot import kafka-python",
        ),
    ] {
        let mut c = idem();
        c.args(["kafka", "bench"]).args(args).arg("--dir").arg(&dir);
        if !args.contains(&"--tansu") {
            c.arg("--tansu").arg(tansu());
        }
        if !args.contains(&"--kafka-python") {
            c.arg("--kafka-python").arg(python());
        }
        let out = c.output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(!err.contains("panicked"));
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// SIGKILL, which no handler sees: the broker's shell reads the bench's end of a pipe,
/// and when the kernel closes it, kills tansu and the running reader and removes the
/// folders (tansu's and the runs').
#[test]
fn a_sigkilled_bench_leaves_no_broker_no_reader_and_no_folder() {
    use std::os::unix::fs::PermissionsExt as _;
    use std::time::{Duration, Instant};
    let naming = idem_tests::processes_naming;
    let dir = temp("kill");
    let images = dir.join("images");
    // A stand-in for kafka-python: it imports kafka (exit 0), then as the bench's second
    // reader (after librdkafka's loop) it writes its arguments (the broker's address is
    // one) and waits, bounded, under a name the test can find.
    let (mark, fake) = (dir.join("reader-started"), dir.join("python"));
    std::fs::write(
        &fake,
        "#!/bin/sh\n[ \"$2\" = 'import kafka' ] && exit 0\necho \"$3\" > \"$IDEM_BENCH_MARK.tmp\"\nmv \"$IDEM_BENCH_MARK.tmp\" \"$IDEM_BENCH_MARK\"\nexec sh -c 'sleep 30; :' reader \"$IDEM_BENCH_MARK\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut bench = idem()
        .args(["kafka", "bench", "--records", "20", "--partitions", "1"])
        .args(["--runs", "1", "--tansu"])
        .arg(tansu())
        .arg("--kafka-python")
        .arg(&fake)
        .arg("--dir")
        .arg(&images)
        .env("IDEM_BENCH_MARK", &mark)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while !mark.exists() {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the bench never ran its kafka-python reader"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let url = format!("tcp://{}", std::fs::read_to_string(&mark).unwrap().trim());
    let reader = mark.to_str().unwrap();
    // The shell and tansu name the broker's address; the shell's folder is tansu's.
    let broker = naming(&url);
    assert_eq!(broker.len(), 2, "the shell and tansu: {broker:?}");
    let tansu_dir = std::fs::read_link(format!("/proc/{}/cwd", broker[0].0)).unwrap();
    assert!(tansu_dir.join("tansu.db").exists() || tansu_dir.join("tansu.log").exists());
    assert_eq!(naming(reader).len(), 1, "the reader: {:?}", naming(reader));
    assert_eq!(
        std::fs::read_dir(&images).unwrap().count(),
        1,
        "one run folder"
    );
    bench.kill().unwrap();
    bench.wait().unwrap();
    let killed = Instant::now();
    let gone = || {
        naming(&url).is_empty()
            && naming(reader).is_empty()
            && !tansu_dir.exists()
            && std::fs::read_dir(&images).unwrap().count() == 0
    };
    while !gone() && killed.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(naming(&url), Vec::new(), "tansu outlived the bench");
    assert_eq!(naming(reader), Vec::new(), "the reader outlived the bench");
    assert!(!tansu_dir.exists(), "{} was left", tansu_dir.display());
    let left: Vec<_> = std::fs::read_dir(&images).unwrap().flatten().collect();
    assert!(left.is_empty(), "left in {}: {left:?}", images.display());
    let _ = std::fs::remove_dir_all(&dir);
}
