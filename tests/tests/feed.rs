//! The board consumes a stream the host feeds it: the idem-feed firmware under QEMU's
//! micro:bit model, fed by `idem device qemu` (which builds the image, starts QEMU with
//! its UART on a unix socket and QMP on another, both in a temporary directory, and
//! resets the board through QMP). Every run is bounded by its `--timeout`.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

fn idem(args: &[&str]) -> Value {
    let out = Command::new(env!("CARGO"))
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(".."))
        .args(["run", "--quiet", "-p", "idem", "--"])
        .args(args)
        .output()
        .expect("cargo runs");
    assert!(
        out.status.success(),
        "idem {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "idem {args:?} printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

fn board(args: &[&str]) -> Value {
    let mut all = vec!["device", "qemu"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--json", "--timeout", "120"]);
    idem(&all)
}

const STORES: [&str; 6] = [
    "naive",
    "offset",
    "message-id",
    "producer-seq",
    "atomic",
    "two-phase",
];

#[test]
fn ddia_and_payments_on_the_board_end_as_the_simulator_does() {
    let mut ddia = Vec::new();
    let mut payments = Vec::new();
    for store in STORES {
        let b = board(&["ddia", "--store", store, "--crash-after", "49"]);
        let sim = idem(&[
            "run",
            "ddia",
            "--store",
            store,
            "--crash-after",
            "49",
            "--json",
        ]);
        assert_eq!(b["final_total"], sim["final_total"], "ddia {store}");
        assert_eq!(b["boots"], 2, "ddia {store}: the planned reset");
        assert_eq!(b["resumes"][1], sim["resume_at"], "ddia {store}");
        ddia.push(b["final_total"].as_i64().unwrap());
        let b = board(&["payments", "--store", store]);
        let sim = idem(&["run", "payments", "--store", store, "--json"]);
        assert_eq!(b["final_total"], sim["final_total"], "payments {store}");
        payments.push(b["final_total"].as_i64().unwrap());
    }
    // naive, offset, message-id, producer-seq, atomic, two-phase.
    assert_eq!(ddia, [110, 100, 100, 100, 100, 100]);
    assert_eq!(payments, [13, 13, 8, 8, 13, 13]);
    // One reset of QMP's, at a seeded instant inside the batch: message-id stays at 8.
    let b = board(&["payments", "--store", "message-id", "--resets", "1"]);
    assert_eq!(
        (b["final_total"].as_i64(), b["resets"].as_u64()),
        (Some(8), Some(1))
    );
    assert_eq!(b["boots"], 2);
}

#[test]
fn twenty_four_resets_while_the_host_feeds_leave_the_idempotent_stores_exact() {
    for (store, seed) in [
        ("offset", "11"),
        ("message-id", "12"),
        ("producer-seq", "13"),
        ("atomic", "14"),
        ("two-phase", "15"),
    ] {
        let b = board(&["ddia", "--store", store, "--resets", "24", "--seed", seed]);
        assert_eq!(b["final_total"], 100, "{store}: {b}");
        assert_eq!(b["resets"], 24, "{store}: every reset landed mid-stream");
        assert_eq!(b["durable"], 100, "{store}");
        // Each boot announced a position from its flash, and the host fed from there.
        let resumes = b["resumes"].as_array().unwrap();
        assert!(
            resumes.len() >= 20,
            "{store}: {} configurations",
            resumes.len()
        );
        assert!(resumes.iter().all(|r| r.as_u64().unwrap() < 100), "{store}");
        println!(
            "{store}: 24 resets, {} boots, resumed at {}, {} batches ({} again)",
            b["boots"],
            resumes
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(","),
            b["batches"],
            b["resends"]
        );
    }
    // The control: the same resets make the naive store count replays.
    let b = board(&["ddia", "--store", "naive", "--resets", "24", "--seed", "11"]);
    assert!(b["final_total"].as_i64().unwrap() > 100, "{b}");
}

#[test]
fn garbage_and_flipped_bits_on_the_line_are_counted_and_dropped() {
    for (store, seed) in [("offset", "5"), ("message-id", "9"), ("two-phase", "21")] {
        let b = board(&["ddia", "--store", store, "--garble", seed]);
        assert_eq!(b["final_total"], 100, "{store}: {b}");
        let (garbled, injected) = (
            b["garbled"].as_u64().unwrap(),
            b["damaged_on_purpose"].as_u64().unwrap(),
        );
        assert!(injected > 0, "{store}: nothing was damaged");
        // A flipped bit can split a frame in two at a new 0x00; never fewer.
        assert!(
            garbled >= injected,
            "{store}: {garbled} counted of {injected}"
        );
        println!(
            "{store}: {injected} frames damaged on purpose, {garbled} dropped by the board, {} batches sent again",
            b["resends"]
        );
    }
}

#[test]
fn the_demo_image_is_named_not_misread() {
    // The demo's frames are valid frames of another protocol: the feed's CRC domain makes
    // them fail, and the host says what the board is probably running.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let target = root.join("firmware/target/feed-demo");
    let status = Command::new(env!("CARGO"))
        .current_dir(root.join("firmware"))
        .args([
            "build",
            "--release",
            "--quiet",
            "--locked",
            "--bin",
            "idem-firmware",
        ])
        .args(["--features", "qemu", "--target-dir"])
        .arg(&target)
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("RUSTFLAGS")
        .status()
        .unwrap();
    assert!(status.success());
    let elf = target.join("thumbv6m-none-eabi/release/idem-firmware");
    let out = Command::new(env!("CARGO"))
        .current_dir(&root)
        .args([
            "run", "--quiet", "-p", "idem", "--", "device", "qemu", "ddia",
        ])
        .args(["--store", "offset", "--timeout", "30", "--elf"])
        .arg(&elf)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("the board sends frames that are not idem-feed's"),
        "{err}"
    );
}
