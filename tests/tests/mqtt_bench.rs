//! `idem mqtt bench`'s broker dies with the bench, whatever kills it: here SIGKILL, which
//! no handler sees. The bench's Mosquitto runs under a shell that reads the bench's end
//! of a pipe; the kernel closes that end with the bench, and the shell stops Mosquitto
//! and removes the folders (the broker's and the images').

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::time::{Duration, Instant};

use idem_tests::idem;
use idem_tests::mosquitto::{Scratch, mosquitto};

/// Processes whose command line names `needle`.
fn naming(needle: &str) -> Vec<String> {
    idem_tests::processes_naming(needle)
        .into_iter()
        .map(|(_, cmd)| cmd)
        .collect()
}

#[test]
fn a_sigkilled_bench_leaves_no_broker_and_no_folder() {
    let s = Scratch::new("bench-kill");
    // A stand-in for paho's Python: it says the broker is up (the bench runs it once
    // Mosquitto listens) and waits, bounded, while the bench is killed.
    let mark = s.join("reader-started");
    let fake = s.join("python");
    std::fs::write(
        &fake,
        "#!/bin/sh\ntouch \"$IDEM_BENCH_MARK\"\nexec sleep 5\n",
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let dir = s.join("images");
    let mut bench = idem()
        .args(["mqtt", "bench", "--messages", "10", "--runs", "1"])
        .arg("--mosquitto")
        .arg(mosquitto())
        .arg("--paho-python")
        .arg(&fake)
        .arg("--dir")
        .arg(&dir)
        .env("IDEM_BENCH_MARK", &mark)
        .spawn()
        .unwrap();
    let started = Instant::now();
    while !mark.exists() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the bench's broker never came up"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let folder = dir.join(format!("mqtt-{}", bench.id()));
    assert!(folder.join("mosquitto-1").is_dir());
    // The shell names the broker's folder, Mosquitto its configuration in it.
    let broker = folder.join("mosquitto-1");
    let conf = broker.to_str().unwrap();
    assert_eq!(
        naming(conf).len(),
        2,
        "the shell and Mosquitto: {:?}",
        naming(conf)
    );
    bench.kill().unwrap();
    bench.wait().unwrap();
    let killed = Instant::now();
    while (!naming(conf).is_empty() || folder.exists())
        && killed.elapsed() < Duration::from_secs(10)
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(naming(conf), Vec::<String>::new());
    assert!(
        !Path::new(&folder).exists(),
        "{} was left behind",
        folder.display()
    );
}
