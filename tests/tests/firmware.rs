//! The firmware under QEMU's micro:bit model: a real image, real resets, real flash.
//!
//! Each test builds the firmware (from `firmware/`, so its own `.cargo/config.toml`
//! applies) into a target directory of its own, runs it under `qemu-system-arm -M
//! microbit` with the UART on stdout, and decodes the frames with `idem_board::wire`. QEMU
//! listens only on a unix socket (QMP) in a temporary directory; every run is bounded.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use idem_board::demo::{self, DemoLayout};
use idem_board::wire::{Decoder, Frame, Totals};
use idem_sim::flash::MemFlash;
use idem_sim::rng::SplitMix64;

/// The longest a QEMU run may take before the test gives up on it.
const RUN_LIMIT: Duration = Duration::from_secs(120);

fn firmware_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../firmware")
}

/// Builds the firmware with `args` into `firmware/target/<name>`; the ELF's path.
fn build(name: &str, args: &[&str]) -> PathBuf {
    let target_dir = firmware_dir().join("target").join(name);
    let status = Command::new(env!("CARGO"))
        .current_dir(firmware_dir())
        .args(["build", "--release", "--quiet", "--locked", "--target-dir"])
        .arg(&target_dir)
        .args(args)
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("RUSTFLAGS")
        .status()
        .expect("cargo runs");
    assert!(
        status.success(),
        "building the firmware with {args:?} failed"
    );
    target_dir.join("thumbv6m-none-eabi/release/idem-firmware")
}

/// Starts QEMU on `elf` (with a QMP socket at `qmp` when given); stdout is the UART.
fn qemu(elf: &Path, qmp: Option<&Path>) -> Child {
    let mut cmd = Command::new("qemu-system-arm");
    cmd.args(["-M", "microbit", "-display", "none", "-serial", "stdio"]);
    cmd.args(["-semihosting-config", "enable=on,target=native", "-kernel"])
        .arg(elf);
    if let Some(path) = qmp {
        cmd.arg("-qmp")
            .arg(format!("unix:{},server=on,wait=off", path.display()));
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    cmd.spawn()
        .expect("qemu-system-arm is installed (.ci/run installs it)")
}

/// Collects the UART bytes of `child` on a thread.
fn capture(child: &mut Child) -> Arc<Mutex<Vec<u8>>> {
    let bytes = Arc::new(Mutex::new(Vec::new()));
    let mut out = child.stdout.take().expect("stdout is piped");
    let sink = Arc::clone(&bytes);
    std::thread::spawn(move || {
        let mut buf = [0u8; 512];
        while let Ok(n) = out.read(&mut buf) {
            if n == 0 {
                break;
            }
            sink.lock().unwrap().extend_from_slice(&buf[..n]);
        }
    });
    bytes
}

fn frames(bytes: &[u8]) -> Vec<Frame> {
    let mut d = Decoder::new();
    bytes
        .iter()
        .filter_map(|&b| d.push(b))
        .filter_map(Result::ok)
        .collect()
}

/// Waits until the captured stream holds a done frame, or the run limit passes.
fn wait_done(child: &mut Child, bytes: &Arc<Mutex<Vec<u8>>>, started: Instant) -> Vec<Frame> {
    loop {
        let f = frames(&bytes.lock().unwrap());
        if f.iter().any(|f| matches!(f, Frame::Done { .. })) {
            let _ = child.wait();
            return f;
        }
        if started.elapsed() > RUN_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("no done frame within {RUN_LIMIT:?}; got {} frames", f.len());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn done_of(frames: &[Frame]) -> (u32, Totals, i64) {
    match frames
        .iter()
        .rev()
        .find(|f| matches!(f, Frame::Done { .. }))
    {
        Some(Frame::Done {
            boots,
            totals,
            true_total,
        }) => (*boots, *totals, *true_total),
        _ => panic!("no done frame"),
    }
}

/// The planned-crash run on the host simulator: the same core, on the strict in-memory
/// flash that reads all zeros like QEMU's never-written pages.
fn simulated_planned_run() -> Vec<Frame> {
    let mut flash = MemFlash::<10, 1024>::filled(0);
    let mut frames = Vec::new();
    demo::simulate(
        &mut flash,
        DemoLayout {
            start: 0,
            page: 1024,
        },
        1,
        true,
        |f| frames.push(f),
    )
    .unwrap();
    frames
}

#[test]
fn planned_crash_under_qemu_ends_at_110_100_100_like_the_simulator() {
    let elf = build("qemu-planned", &["--features", "qemu"]);
    let started = Instant::now();
    let mut child = qemu(&elf, None);
    let bytes = capture(&mut child);
    let got = wait_done(&mut child, &bytes, started);
    let (boots, totals, truth) = done_of(&got);
    assert_eq!(
        (boots, totals, truth),
        (
            2,
            Totals {
                naive: 110,
                offset: 100,
                atomic: 100
            },
            100
        )
    );
    // Frame for frame the same as the host simulator (device statistics aside).
    let story: Vec<Frame> = got
        .into_iter()
        .filter(|f| !matches!(f, Frame::Stats { .. }))
        .collect();
    assert_eq!(story, simulated_planned_run());
    // And `idem monitor` decodes the real capture.
    let dir = std::env::temp_dir().join(format!("idem-fw-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let capture_file = dir.join("uart.bin");
    std::fs::write(&capture_file, &*bytes.lock().unwrap()).unwrap();
    let out = Command::new(env!("CARGO"))
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(".."))
        .args(["run", "--quiet", "-p", "idem", "--", "monitor", "--json"])
        .arg(&capture_file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let last = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .last()
        .unwrap()
        .to_string();
    let done: serde_json::Value = serde_json::from_str(&last).unwrap();
    assert_eq!(
        done,
        serde_json::json!({"type": "done", "boots": 2, "totals": {"naive": 110, "offset": 100, "atomic": 100}, "true_total": 100})
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn twenty_resets_at_random_instants_leave_the_idempotent_sinks_exact() {
    const RESETS: u32 = 24;
    let elf = build(
        "qemu-resets",
        &["--no-default-features", "--features", "qemu"],
    );
    let dir = std::env::temp_dir().join(format!("idem-qmp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("qmp.sock");
    let started = Instant::now();
    let mut child = qemu(&elf, Some(&socket));
    let bytes = capture(&mut child);
    let mut qmp = loop {
        match UnixStream::connect(&socket) {
            Ok(s) => break s,
            Err(_) if started.elapsed() < Duration::from_secs(10) => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(e) => panic!("QMP socket: {e}"),
        }
    };
    // Drain QMP's replies and events on a thread; send the handshake.
    let mut replies = qmp.try_clone().unwrap();
    std::thread::spawn(move || std::io::copy(&mut replies, &mut std::io::sink()));
    qmp.write_all(b"{\"execute\": \"qmp_capabilities\"}\n")
        .unwrap();
    // Wait for the first boot frame, then reset at seeded random instants.
    while frames(&bytes.lock().unwrap()).is_empty() {
        assert!(started.elapsed() < RUN_LIMIT, "the firmware never booted");
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut rng = SplitMix64::new(0x1DE5_0005);
    for i in 0..RESETS {
        std::thread::sleep(Duration::from_millis(rng.range(20, 80)));
        let done = frames(&bytes.lock().unwrap())
            .iter()
            .any(|f| matches!(f, Frame::Done { .. }));
        assert!(!done, "the stream finished after only {i} resets");
        qmp.write_all(b"{\"execute\": \"system_reset\"}\n").unwrap();
    }
    let got = wait_done(&mut child, &bytes, started);
    let (boots, totals, truth) = done_of(&got);
    assert_eq!(truth, 100);
    assert_eq!(
        (totals.offset, totals.atomic),
        (100, 100),
        "{totals:?} after {RESETS} resets"
    );
    assert!(totals.naive >= 100, "{totals:?}");
    // A reset can land before a boot is recorded, so boots can be fewer than resets + 1.
    assert!(
        (2..=RESETS + 1).contains(&boots),
        "{boots} boots after {RESETS} resets"
    );
    let boot_frames = got
        .iter()
        .filter(|f| matches!(f, Frame::Boot { .. }))
        .count();
    println!(
        "{RESETS} resets: {boots} boots recorded, {boot_frames} boot frames seen, final {totals:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
