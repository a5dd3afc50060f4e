//! The board consumes a stream the host feeds it: the idem-feed firmware under QEMU's
//! micro:bit model, fed by `idem device qemu` (which builds the image, starts QEMU with
//! its UART on a unix socket and QMP on another, both in a temporary directory, and
//! resets the board through QMP). Every run is bounded by its `--timeout`.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use idem_board::feed::{DOMAIN, DeviceKey, FromDevice, HostReader};
use idem_core::log::IdKey;
use idem_payments::registry::{Source, StoreKind};
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

/// The stores the board runs, by the registry's names.
fn stores() -> Vec<&'static str> {
    StoreKind::on(Source::Board).map(StoreKind::name).collect()
}

#[test]
fn ddia_and_payments_on_the_board_end_as_the_simulator_does() {
    let mut ddia = Vec::new();
    let mut payments = Vec::new();
    for store in stores() {
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
        assert_eq!(
            b["verdict"], sim["verdict"],
            "ddia {store}: this host delivered every offset, so the run is graded"
        );
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

/// Builds the idem-feed image for QEMU (as `idem device qemu` does); its path.
fn feed_elf() -> PathBuf {
    let firmware = Path::new(env!("CARGO_MANIFEST_DIR")).join("../firmware");
    let status = Command::new(env!("CARGO"))
        .current_dir(&firmware)
        .args([
            "build",
            "--release",
            "--quiet",
            "--locked",
            "--bin",
            "idem-feed",
        ])
        .args(["--features", "qemu", "--target-dir", "target/feed-qemu"])
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("RUSTFLAGS")
        .status()
        .unwrap();
    assert!(status.success());
    firmware.join("target/feed-qemu/thumbv6m-none-eabi/release/idem-feed")
}

/// Starts QEMU on a fresh flash, waits for each boot frame, resets the board through QMP
/// after the first: the boots and keys of the two frames.
fn two_boots(elf: &Path, n: u32) -> [(u32, DeviceKey); 2] {
    let dir = std::env::temp_dir().join(format!("idem-feed-key-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let qmp_path = dir.join("qmp.sock");
    let mut qemu = Command::new("qemu-system-arm")
        .args(["-M", "microbit", "-display", "none", "-serial", "stdio"])
        .arg("-qmp")
        .arg(format!("unix:{},server=on,wait=off", qmp_path.display()))
        .arg("-kernel")
        .arg(elf)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("qemu-system-arm is installed (.ci/run installs it)");
    let (tx, rx) = mpsc::channel();
    let mut uart = qemu.stdout.take().unwrap();
    std::thread::spawn(move || {
        let mut reader = HostReader::in_domain(DOMAIN);
        let mut buf = [0u8; 256];
        while let Ok(n) = uart.read(&mut buf) {
            if n == 0 {
                break;
            }
            for &b in &buf[..n] {
                if let Some(Ok(FromDevice::Boot { boots, key, .. })) = reader.push(b)
                    && tx.send((boots, key)).is_err()
                {
                    return;
                }
            }
        }
    });
    let first = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("a boot frame");
    let started = Instant::now();
    let mut qmp = loop {
        match UnixStream::connect(&qmp_path) {
            Ok(s) => break s,
            Err(_) if started.elapsed() < Duration::from_secs(10) => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(e) => panic!("QMP: {e}"),
        }
    };
    let mut replies = qmp.try_clone().unwrap();
    std::thread::spawn(move || std::io::copy(&mut replies, &mut std::io::sink()));
    qmp.write_all(b"{\"execute\": \"qmp_capabilities\"}\n{\"execute\": \"system_reset\"}\n")
        .unwrap();
    let second = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("a boot frame after the reset");
    let _ = qemu.kill();
    let _ = qemu.wait();
    let _ = std::fs::remove_dir_all(&dir);
    [first, second]
}

#[test]
fn the_board_draws_its_id_key_from_its_rng_and_keeps_it_in_flash() {
    // QEMU's micro:bit models the nRF51's RNG (hw/misc/nrf51_rng.c): each QEMU run starts
    // from a blank flash, so each first boot draws a key of its own; a reset reads it back.
    let elf = feed_elf();
    let [(b1, k1), (b2, k2)] = two_boots(&elf, 1);
    let [(c1, l1), _] = two_boots(&elf, 2);
    assert_eq!((b1, b2, c1), (1, 2, 1), "a fresh flash, then a reset");
    assert_eq!(k1, k2, "a reset keeps the key in flash");
    assert_ne!(k1, l1, "another first boot, another key");
    for k in [k1, l1] {
        assert_ne!(k, DeviceKey(IdKey::PUBLIC), "a key of its own");
        assert!(k.0.0.iter().any(|&b| b != k.0.0[0]), "{k:?} is no RNG's");
    }
}
