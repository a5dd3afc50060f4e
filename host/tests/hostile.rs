//! Hostile and careless input, one row per case: the exit code and the one sentence a
//! user gets. Every row is refused before any work starts, with no panic and no file
//! left behind.

use assert_fs::prelude::*;
use predicates::prelude::*;

mod common;
use common::{consume_ddia, idem};

/// Two payments of `i64::MAX`: their total does not fit a 64-bit integer.
const HUGE: &str = "{\"id\":\"a\",\"producer\":1,\"seq\":1,\"amount\":9223372036854775807}\n\
                    {\"id\":\"b\",\"producer\":1,\"seq\":2,\"amount\":9223372036854775807}\n";

#[test]
fn refused_up_front_with_one_sentence() {
    let dir = assert_fs::TempDir::new().unwrap();
    let huge = dir.child("huge.jsonl");
    huge.write_str(HUGE).unwrap();
    let garbage = dir.child("garbage.bin");
    garbage
        .write_binary(&[0x00, 0xFF, 0xFE, 0x80, 0x81, b'{', 0xC3, 0x28, b'\n', 0x9F])
        .unwrap();
    let long = dir.child("long.jsonl");
    long.write_binary(&vec![b' '; 5000]).unwrap();
    let image = dir.child("new.bin");
    let p = |c: &assert_fs::fixture::ChildPath| c.path().to_str().unwrap().to_string();
    let rows: Vec<(Vec<String>, i32, String)> = vec![
        // Used to end at "final total -2 (exact)".
        (
            vec!["run".into(), "--log".into(), p(&huge), "--store".into(), "naive".into()],
            2,
            "huge.jsonl line 2: at offset 1 the running total 9223372036854775807 plus 9223372036854775807 passes what a 64-bit total holds (-9223372036854775808 to 9223372036854775807)".into(),
        ),
        // Used to panic with "capacity overflow" (exit 101).
        (
            ["sweep", "ddia", "--store", "offset", "--events", "9223372036854775807"]
                .map(String::from)
                .to_vec(),
            2,
            "--events 9223372036854775807: idem runs logs of up to 1048576 events".into(),
        ),
        // Used to fail with exit 1 after the run had started.
        (
            ["run", "ddia", "--store", "naive", "--events", "1048577"]
                .map(String::from)
                .to_vec(),
            2,
            "--events 1048577: idem runs logs of up to 1048576 events".into(),
        ),
        // Used to report "true_total": -1.
        (
            vec![
                "consume".into(),
                "ddia".into(),
                "--store".into(),
                "offset".into(),
                "--events".into(),
                "18446744073709551615".into(),
                "--flash".into(),
                p(&image),
            ],
            2,
            "--events 18446744073709551615: idem runs logs of up to 1048576 events".into(),
        ),
        // Used to say "stream did not contain valid UTF-8", exit 1, no line.
        (
            vec!["run".into(), "--log".into(), p(&garbage), "--store".into(), "naive".into()],
            2,
            "garbage.bin line 1: not UTF-8 text (is this a binary file?)".into(),
        ),
        // A line with no end (as /dev/zero is) is not read into memory whole.
        (
            vec!["run".into(), "--log".into(), p(&long), "--store".into(), "naive".into()],
            2,
            "long.jsonl line 1: longer than 1024 bytes".into(),
        ),
    ];
    for (args, code, message) in rows {
        idem()
            .args(&args)
            .assert()
            .code(code)
            .stderr(predicate::str::contains(message.as_str()))
            .stderr(predicate::str::contains("panicked").not());
    }
    image.assert(predicate::path::missing());
    // A window the store cannot have is refused before the image is created.
    idem()
        .args([
            "consume",
            "ddia",
            "--store",
            "message-id",
            "--window",
            "0",
            "--flash",
        ])
        .arg(image.path())
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "a message-id window must hold 1 to 32 ids, not 0",
        ));
    image.assert(predicate::path::missing());
    // A file beside the image that idem did not make is not idem's to remove.
    let stale = dir.child("new.tmp.4000000");
    stale.write_str("half an image").unwrap();
    consume_ddia("offset", image.path()).assert().success();
    stale.assert("half an image");
    // `--window` is part of the run only for the message-id store: a rerun with another
    // value resumes an offset image instead of refusing it.
    idem()
        .args([
            "consume", "ddia", "--store", "offset", "--window", "5", "--flash",
        ])
        .arg(image.path())
        .assert()
        .success();
}

/// `monitor` on a device that is not a serial port, or a file that does not exist.
#[test]
fn monitor_names_what_it_cannot_read() {
    for (source, message) in [
        ("/dev/null", "/dev/null is a device but not a serial port"),
        (
            "/nonexistent/frames.bin",
            "/nonexistent/frames.bin does not exist",
        ),
    ] {
        idem()
            .args(["monitor", source])
            .assert()
            .code(2)
            .stderr(predicate::str::contains(message));
    }
}

/// A dangling symbolic link given as `--flash` is refused, not replaced by a new file.
#[test]
fn a_dangling_symlink_is_not_replaced() {
    let dir = assert_fs::TempDir::new().unwrap();
    let link = dir.child("link.bin");
    std::os::unix::fs::symlink(dir.path().join("nowhere.bin"), link.path()).unwrap();
    consume_ddia("offset", link.path())
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "is a symbolic link to a file that does not exist; it was left untouched",
        ));
    assert!(
        std::fs::symlink_metadata(link.path())
            .unwrap()
            .file_type()
            .is_symlink()
    );
}

/// Crash schedules: each mistake gets its own sentence, and a long one is not echoed
/// whole.
#[test]
fn schedule_mistakes_are_named() {
    let long = "x".repeat(100_000);
    let rows: [(&str, &str); 6] = [
        (
            "crash@effect:99999999999999999999999",
            "a crash point's offset is at most 18446744073709551615",
        ),
        (
            "crash@commit:0",
            "the crash point crash@commit:0 never happened in this run: commits and prepares come after offsets 9, 19, 29, ... (a checkpoint every 10) and after the last, 99",
        ),
        (
            "crash@effect:3,crash@effect:3",
            "crash@effect:3 is in the schedule twice",
        ),
        (
            "crash@effect:3,,crash@effect:4",
            "part 2 of the schedule is empty (a stray comma?)",
        ),
        (
            "crash@effect:2#5,crash@effect:7",
            "1 of the 2 crash points in the schedule never happened in this run: the run ended first",
        ),
        (
            &long,
            "... (100000 characters): a crash point starts with `crash@`",
        ),
    ];
    for (schedule, message) in rows {
        let out = idem()
            .args(["run", "ddia", "--store", "naive", "--schedule", schedule])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains(message), "{schedule:.40}: {err}");
        assert!(err.len() < 400, "a short sentence: {err:.400}");
    }
    // `plot` refuses what `run` refuses, and writes nothing.
    let dir = assert_fs::TempDir::new().unwrap();
    let svg = dir.child("p.svg");
    idem()
        .args([
            "plot",
            "ddia",
            "--store",
            "naive",
            "--schedule",
            "crash@effect:2#5",
            "--svg",
        ])
        .arg(svg.path())
        .assert()
        .code(2)
        .stderr(predicate::str::contains("never happened in this run"));
    svg.assert(predicate::path::missing());
}

/// `plot --svg` replaces the file whole (temporary file, rename) and leaves nothing else.
#[test]
fn plot_writes_its_file_atomically() {
    let dir = assert_fs::TempDir::new().unwrap();
    let svg = dir.child("p.svg");
    svg.write_str("an older plot").unwrap();
    idem()
        .args(["plot", "ddia", "--store", "naive", "--svg"])
        .arg(svg.path())
        .assert()
        .success();
    let text = std::fs::read_to_string(svg.path()).unwrap();
    assert!(text.starts_with("<svg") && text.trim_end().ends_with("</svg>"));
    // The replay window is shaded once; the naive store skips nothing (no rings).
    assert_eq!(text.matches(">replay</text>").count(), 1);
    assert_eq!(text.matches("<circle").count(), 0);
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["p.svg"]);
}

/// `chaos` checks what its consume runs would refuse before it starts one, and says it
/// once (it used to print "idem: idem consume failed: idem: ...", exit 1).
#[test]
fn chaos_refuses_up_front() {
    let dir = assert_fs::TempDir::new().unwrap();
    let rows: [(Vec<String>, &str); 2] = [
        (
            ["chaos", "ddia", "--store", "message-id", "--window", "0"]
                .map(String::from)
                .to_vec(),
            "idem: a message-id window must hold 1 to 32 ids, not 0\n",
        ),
        (
            vec![
                "chaos".into(),
                "ddia".into(),
                "--store".into(),
                "offset".into(),
                "--flash".into(),
                dir.path()
                    .join("no/such/folder/x.bin")
                    .display()
                    .to_string(),
            ],
            "the folder",
        ),
    ];
    for (args, message) in rows {
        idem()
            .args(&args)
            .assert()
            .code(2)
            .stderr(predicate::str::contains(message))
            .stderr(predicate::str::contains("failed").not());
    }
}

/// SIGTERM to `chaos` kills its consume child and removes its temporary image (exit
/// 130); they used to be left running and on disk.
#[test]
fn a_signal_to_chaos_leaves_no_process_and_no_file() {
    let chaos = std::process::Command::new(env!("CARGO_BIN_EXE_idem"))
        .args([
            "chaos",
            "ddia",
            "--store",
            "naive",
            "--kills",
            "500",
            "--pace-ms",
            "20",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = chaos.id();
    let image = std::env::temp_dir().join(format!("idem-chaos-{pid}-1.bin"));
    // Wait (at most 10 s) for a consume child of this chaos.
    let child = (0..1000).find_map(|_| {
        std::thread::sleep(std::time::Duration::from_millis(10));
        children_of(pid).into_iter().next()
    });
    let child = child.expect("chaos started a consume run");
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let out = chaos.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130));
    assert!(String::from_utf8_lossy(&out.stderr).contains("interrupted by a signal"));
    assert!(
        !std::path::Path::new(&format!("/proc/{child}")).exists(),
        "the consume child {child} is gone"
    );
    assert!(!image.exists(), "{} removed", image.display());
}

/// Processes whose parent is `pid`, from /proc.
fn children_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(p) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
            continue;
        };
        // pid (comm) state ppid ...: comm may hold spaces, so split after the last ')'.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|s| s.parse::<u32>().ok());
        if ppid == Some(pid) {
            out.push(p);
        }
    }
    out
}

/// A damaged image header (here one flipped bit in the page count, then in the events)
/// is called damaged, not "truncated" or "another journal", and left untouched.
#[test]
fn a_damaged_image_header_is_called_damaged() {
    let dir = assert_fs::TempDir::new().unwrap();
    let img = dir.child("h.bin");
    consume_ddia("offset", img.path()).assert().success();
    let good = std::fs::read(img.path()).unwrap();
    let events = good
        .windows(12)
        .position(|w| w == b"\"events\":100")
        .unwrap();
    for at in [16, events + 10] {
        let mut bytes = good.clone();
        bytes[at] ^= 0x01;
        std::fs::write(img.path(), &bytes).unwrap();
        for cmd in [
            &["status", "--flash"][..],
            &["consume", "ddia", "--store", "offset", "--flash"],
        ] {
            idem()
                .args(cmd)
                .arg(img.path())
                .assert()
                .code(2)
                .stderr(predicate::str::contains(
                    "has a damaged header (its checksum does not match); it was left untouched",
                ));
        }
        assert_eq!(std::fs::read(img.path()).unwrap(), bytes);
    }
}

/// An image whose header is intact (its checksum matches) but names a store or scenario
/// this idem does not know: the file is named and left untouched.
#[test]
fn an_unknown_name_in_a_sound_header_names_the_file() {
    let dir = assert_fs::TempDir::new().unwrap();
    let img = dir.child("u.bin");
    consume_ddia("offset", img.path()).assert().success();
    let good = std::fs::read(img.path()).unwrap();
    for (from, to, what) in [
        (
            &b"\"offset\""[..],
            &b"\"offsez\""[..],
            "names an unknown store \"offsez\"",
        ),
        (
            b"\"ddia\"",
            b"\"ddix\"",
            "names an unknown scenario \"ddix\"",
        ),
    ] {
        let mut bytes = good.clone();
        let at = bytes.windows(from.len()).position(|w| w == from).unwrap();
        bytes[at..at + to.len()].copy_from_slice(to);
        // A sound header: the CRC-32C of its first 380 bytes, at 380.
        let crc = crc::Crc::<u32>::new(&crc::CRC_32_ISCSI).checksum(&bytes[..380]);
        bytes[380..384].copy_from_slice(&crc.to_le_bytes());
        std::fs::write(img.path(), &bytes).unwrap();
        idem()
            .args(["status", "--flash"])
            .arg(img.path())
            .assert()
            .code(2)
            .stderr(predicate::str::contains(format!(
                "{} {what}; it was left untouched",
                img.path().display()
            )));
        assert_eq!(std::fs::read(img.path()).unwrap(), bytes);
    }
}

/// `sweep --store` with a name it does not know lists every store; a rerun line that a
/// dual-write sweep prints is a command `run` accepts.
#[test]
fn sweep_names_every_store_and_its_rerun_lines_run() {
    idem()
        .args(["sweep", "ddia", "--store", "nosuch"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "naive, offset, message-id, producer-seq, atomic, two-phase, unique-key, set, max, all",
        ));
    let out = idem()
        .args(["sweep", "dual-write", "--fix", "none"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("idem run "))
        .expect("a rerun line");
    let schedule = line.split('"').nth(1).unwrap();
    assert_eq!(
        line,
        format!("dual-write --fix none --schedule \"{schedule}\"")
    );
    idem()
        .args(["run", "dual-write", "--fix", "none", "--schedule", schedule])
        .assert()
        .success();
}
