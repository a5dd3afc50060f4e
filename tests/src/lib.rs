//! End-to-end tests of idem live in `tests/tests/`; what several of them share lives here.

pub mod mosquitto;

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
