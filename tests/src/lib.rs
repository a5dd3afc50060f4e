//! End-to-end tests of idem live in `tests/tests/`; what several of them share lives here.

pub mod mosquitto;
pub mod rumqttd;

use std::path::Path;
use std::process::Command;

/// The `idem` binary with the kafka feature, built by cargo (once: a later call finds it
/// up to date). The Kafka and MQTT tests share this one build.
pub fn idem() -> Command {
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
        .expect("cargo builds idem");
    assert!(status.success(), "building idem with the kafka feature");
    Command::new(root.join("target/debug/idem"))
}

/// The processes whose command line names `needle`: their ids and command lines (the
/// arguments joined by spaces), read from /proc.
pub fn processes_naming(needle: &str) -> Vec<(u32, String)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|p| p.parse().ok()) else {
            continue;
        };
        if let Ok(cmd) = std::fs::read(entry.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(needle) {
                found.push((pid, cmd));
            }
        }
    }
    found
}
