//! Flash images and real process crashes: `consume`, `status`, `flash inspect`, `chaos`,
//! and the refusals that leave a bad image untouched.

use assert_cmd::Command;
use assert_fs::prelude::*;
use predicates::prelude::*;
use serde_json::Value;

mod common;
use common::{consume_ddia, idem};

fn json(cmd: &mut Command) -> Value {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn consume_persists_and_a_second_run_changes_nothing() {
    let dir = assert_fs::TempDir::new().unwrap();
    let img = dir.child("f.bin");
    for store in ["naive", "offset", "message-id", "atomic"] {
        let _ = std::fs::remove_file(img.path());
        let v = json(
            idem()
                .args(["consume", "ddia", "--store", store, "--json", "--flash"])
                .arg(img.path()),
        );
        assert_eq!(
            (v["next_offset"].as_u64(), v["total"].as_i64()),
            (Some(100), Some(100)),
            "{store}"
        );
        let before = std::fs::read(img.path()).unwrap();
        assert_eq!(before.len(), 512 + 8 * 1024);
        idem()
            .args(["consume", "ddia", "--store", store, "--flash"])
            .arg(img.path())
            .assert()
            .success();
        assert_eq!(
            std::fs::read(img.path()).unwrap(),
            before,
            "{store}: rerun after completion changed the image"
        );
        let s = json(idem().args(["status", "--json", "--flash"]).arg(img.path()));
        assert_eq!(s["store"], store);
        assert_eq!(
            (
                s["next_offset"].as_u64(),
                s["total"].as_i64(),
                s["true_total"].as_i64()
            ),
            (Some(100), Some(100), Some(100))
        );
    }
}

#[test]
fn payments_in_an_image_keep_their_figures() {
    let dir = assert_fs::TempDir::new().unwrap();
    for (store, total) in [
        ("naive", 13),
        ("offset", 13),
        ("message-id", 8),
        ("atomic", 13),
    ] {
        let img = dir.child(format!("{store}.bin"));
        let v = json(
            idem()
                .args(["consume", "payments", "--store", store, "--json", "--flash"])
                .arg(img.path()),
        );
        assert_eq!(
            (v["total"].as_i64(), v["true_total"].as_i64()),
            (Some(total), Some(8)),
            "{store}"
        );
    }
}

#[test]
fn flash_inspect_names_the_winning_record() {
    let dir = assert_fs::TempDir::new().unwrap();
    let img = dir.child("f.bin");
    consume_ddia("offset", img.path()).assert().success();
    idem()
        .args(["flash", "inspect"])
        .arg(img.path())
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "winner: page 0 record 9 (byte 72), seq 10: Position { next: 100, sinks: [100, 0] }",
        ))
        .stdout(predicate::str::contains(
            "winner: page 5 record 16 (byte 192), seq 100: Covered { covered: 90, state: Stamped { state: NaiveState { total: 100 }, stamp: Some(99) } }",
        ))
        .stdout(predicate::str::contains("erased 3 times in all"));
}

/// An image from an idem that wrote journal format 1 (16-byte page headers, a sequence
/// word in every slot): refused in one sentence, never erased as if it were damage.
#[test]
fn an_image_in_the_old_journal_format_is_refused() {
    let dir = assert_fs::TempDir::new().unwrap();
    let img = dir.child("old.bin");
    consume_ddia("offset", img.path()).assert().success();
    let mut bytes = std::fs::read(img.path()).unwrap();
    // The position journal's page 0 (after the 512-byte image header) rewritten as
    // format 1 wrote it: version 1, and the header's CRC-32C in its fourth word.
    let crc32c = |data: &[u8]| {
        let mut c = !0u32;
        for &b in data {
            c ^= u32::from(b);
            for _ in 0..8 {
                c = if c & 1 == 1 {
                    (c >> 1) ^ 0x82F6_3B78
                } else {
                    c >> 1
                };
            }
        }
        !c
    };
    let page = &mut bytes[512..512 + 1024];
    page[4..6].copy_from_slice(&1u16.to_le_bytes());
    let crc = crc32c(&page[..12]);
    page[12..16].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(img.path(), &bytes).unwrap();
    consume_ddia("offset", img.path())
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "was written by an older idem (journal format 1 at page 0; this one reads format 3): it was left untouched, start a new image",
        ));
    assert_eq!(std::fs::read(img.path()).unwrap(), bytes, "nothing written");
}

/// An image written by idem at journal format 2 (main 73bd32b's `idem consume ddia
/// --events 3000 --store message-id --pace-ms 1`, killed after its checkpoint through
/// 779) resumes at format 3 and ends exact, as a run never cut does: its format-2 pages
/// are read, the window's included, and its pages after them are written in format 3.
#[test]
fn an_image_of_journal_format_2_resumes_exactly() {
    let dir = assert_fs::TempDir::new().unwrap();
    let img = dir.child("format2.bin");
    let fixture = std::fs::read("tests/data/format2-message-id.img").unwrap();
    // Every page written holds a header of format 2 (magic, then version 2).
    let version = |bytes: &[u8], page: usize| {
        let at = 512 + page * 1024;
        (bytes[at..at + 4] != [0xFF; 4]).then(|| u16::from_le_bytes([bytes[at + 4], bytes[at + 5]]))
    };
    let before: Vec<_> = (0..8).filter_map(|p| version(&fixture, p)).collect();
    assert_eq!(before, [2; 6]);
    std::fs::write(img.path(), &fixture).unwrap();
    let args = [
        "consume",
        "ddia",
        "--events",
        "3000",
        "--store",
        "message-id",
    ];
    let v = json(
        idem()
            .args(args)
            .args(["--quiet", "--json", "--flash"])
            .arg(img.path()),
    );
    assert_eq!(
        (v["total"].as_i64(), v["true_total"].as_i64()),
        (Some(3000), Some(3000))
    );
    assert_eq!(v["next_offset"], 3000);
    let after = std::fs::read(img.path()).unwrap();
    // After the run: page 1 still in format 2, every other page in format 3.
    let formats: Vec<_> = (0..8).filter_map(|p| version(&after, p)).collect();
    assert_eq!(formats, [3, 2, 3, 3, 3, 3, 3, 3]);
}

/// One flipped bit in the header of the page that holds the store's newest records: the
/// run stops with exit 1 and a sentence naming the page, the file is unchanged, and
/// `flash inspect` shows the damage. (It used to end at "total 93", exit 0.)
#[test]
fn a_damaged_page_header_is_refused_and_shown() {
    let dir = assert_fs::TempDir::new().unwrap();
    let img = dir.child("f.bin");
    let consume = || consume_ddia("offset", img.path());
    consume().assert().success();
    let mut bytes = std::fs::read(img.path()).unwrap();
    // The image header is 512 bytes; page 5 is the store journal's second page, which
    // holds its newest 17 records (83 fill page 4, at their encoded size).
    bytes[512 + 5 * 1024 + 2] ^= 0x10;
    std::fs::write(img.path(), &bytes).unwrap();
    consume().assert().code(1).stderr(predicate::str::contains(
        "page 5 has a damaged header but holds a journal's newest record; it was left untouched",
    ));
    assert_eq!(std::fs::read(img.path()).unwrap(), bytes, "nothing written");
    idem()
        .args(["flash", "inspect"])
        .arg(img.path())
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "page  5  unformatted   17 records in a page with a damaged header, newest seq 100",
        ))
        .stdout(predicate::str::contains("DAMAGED: page 5"));
}

/// A message-id image whose position journal is lost (erased, as a lost page would be):
/// the store's records were written after offset 90 was committed, so the image is
/// refused instead of replayed from offset 0 (which ended at 200, exit 0).
#[test]
fn a_lost_position_journal_is_refused() {
    let dir = assert_fs::TempDir::new().unwrap();
    let img = dir.child("m.bin");
    let consume = || consume_ddia("message-id", img.path());
    consume().assert().success();
    let mut bytes = std::fs::read(img.path()).unwrap();
    bytes[512..512 + 4 * 1024].fill(0xFF);
    std::fs::write(img.path(), &bytes).unwrap();
    consume()
        .assert()
        .code(1)
        .stderr(predicate::str::contains(
            "its journals disagree, which no crash can cause: the position journal resumes at offset 0, but the store holds a record written after offset 90 was committed",
        ));
    assert_eq!(std::fs::read(img.path()).unwrap(), bytes, "nothing written");
}

#[test]
fn chaos_with_fifty_kills_ends_exact_for_idempotent_stores() {
    for store in ["offset", "message-id", "atomic"] {
        let v = json(idem().args([
            "chaos", "ddia", "--store", store, "--kills", "50", "--seed", "11", "--json",
        ]));
        assert_eq!(
            v["kills"], 50,
            "{store}: every kill landed before the stream ended"
        );
        assert!(v["mid_stream"].as_u64().unwrap() >= 40, "{store}: {v}");
        assert_eq!(
            (v["final_total"].as_i64(), v["verdict"].as_str()),
            (Some(100), Some("exact")),
            "{store}"
        );
    }
    let v = json(idem().args([
        "chaos", "ddia", "--store", "naive", "--kills", "50", "--seed", "11", "--json",
    ]));
    assert!(v["final_total"].as_i64().unwrap() >= 100, "{v}");
    idem()
        .args(["chaos", "ddia", "--store", "offset", "--kills", "5"])
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "final total 100 (true total 100): exact; the store survived every kill",
        ));
}

/// A refused image is left byte for byte as it was.
fn refused(path: &std::path::Path, args: &[&str], message: &str) {
    let before = std::fs::read(path).unwrap();
    idem()
        .args(args)
        .arg(path)
        .assert()
        .code(2)
        .stderr(predicate::str::contains(message))
        .stderr(predicate::str::contains("panicked").not());
    assert_eq!(
        std::fs::read(path).unwrap(),
        before,
        "{args:?} changed a refused image"
    );
}

#[test]
fn bad_images_are_refused_and_left_untouched() {
    let dir = assert_fs::TempDir::new().unwrap();
    let img = dir.child("good.bin");
    consume_ddia("offset", img.path()).assert().success();
    let good = std::fs::read(img.path()).unwrap();

    let other = ["consume", "ddia", "--store", "naive", "--flash"];
    refused(
        img.path(),
        &other,
        "holds the offset store of ddia (100 events, checkpoint every 10), not the naive store",
    );
    let longer = [
        "consume", "ddia", "--store", "offset", "--events", "200", "--flash",
    ];
    refused(
        img.path(),
        &longer,
        "not the offset store of ddia (200 events",
    );

    let truncated = dir.child("truncated.bin");
    truncated.write_binary(&good[..5000]).unwrap();
    refused(
        truncated.path(),
        &["status", "--flash"],
        "is truncated: 5000 bytes where an image of 8 pages of 1024 bytes is 8704",
    );
    refused(
        truncated.path(),
        &["consume", "ddia", "--store", "offset", "--flash"],
        "is truncated",
    );

    let garbage = dir.child("garbage.bin");
    garbage.write_binary(&[0x5A; 8704]).unwrap();
    refused(
        garbage.path(),
        &["status", "--flash"],
        "is not an idem flash image",
    );
    refused(
        garbage.path(),
        &["flash", "inspect"],
        "is not an idem flash image",
    );

    let mut header = good.clone();
    header[30] = b'#';
    let damaged = dir.child("damaged.bin");
    damaged.write_binary(&header).unwrap();
    refused(
        damaged.path(),
        &["status", "--flash"],
        "has a damaged header",
    );
}

/// Two `consume`s of one image at once, creating it and then resuming it: each time one
/// runs and ends exact, the other is refused as in use (exit 1) and writes nothing.
/// (Both used to exit 0 over one run, or end at 299,997 of 300,000.)
#[test]
fn one_image_is_written_by_one_process() {
    let dir = assert_fs::TempDir::new().unwrap();
    let img = dir.child("shared.bin");
    let bin = env!("CARGO_BIN_EXE_idem");
    let spawn = || {
        std::process::Command::new(bin)
            .args([
                "consume",
                "ddia",
                "--store",
                "message-id",
                "--pace-ms",
                "10",
            ])
            .arg("--flash")
            .arg(img.path())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    for round in ["creating", "resuming"] {
        if round == "resuming" {
            // Cut the first run short so the second round resumes mid-stream.
            let _ = std::fs::remove_file(img.path());
            let mut first = spawn();
            std::thread::sleep(std::time::Duration::from_millis(300));
            first.kill().unwrap();
            first.wait().unwrap();
        }
        let (a, b) = (spawn(), spawn());
        let outs = [a.wait_with_output().unwrap(), b.wait_with_output().unwrap()];
        let ok = outs.iter().filter(|o| o.status.success()).count();
        let refused: Vec<_> = outs
            .iter()
            .filter(|o| o.status.code() == Some(1))
            .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
            .collect();
        assert_eq!((ok, refused.len()), (1, 1), "{round}: {outs:?}");
        assert!(
            refused[0].contains("is in use by another idem process"),
            "{round}: {}",
            refused[0]
        );
        let v = json(idem().args(["status", "--json", "--flash"]).arg(img.path()));
        assert_eq!(
            (v["next_offset"].as_u64(), v["total"].as_i64()),
            (Some(100), Some(100)),
            "{round}"
        );
    }
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(leftovers, ["shared.bin"], "no temporary files left");
}

/// `--sync`: the same run under each mode, and how often each syncs the image (the rules
/// are `sim/tests/page_cache.rs`'s, which shows they survive a host power cut).
#[test]
fn each_sync_mode_syncs_as_documented() {
    let dir = assert_fs::TempDir::new().unwrap();
    // offset store, ddia: 10 commits, each synced before and after, plus the page erases
    // and page headers of both journals.
    for (mode, syncs) in [("checkpoint", 24), ("every-write", 229), ("none", 0)] {
        let path = dir.path().join(format!("{mode}.bin"));
        let out = common::consume_ddia("offset", &path)
            .args(["--sync", mode, "--quiet", "--json"])
            .output()
            .unwrap();
        assert!(out.status.success());
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(
            (v["total"].as_i64(), v["syncs"].as_u64()),
            (Some(100), Some(syncs)),
            "{mode}"
        );
    }
    common::refuses(
        &[
            "consume",
            "ddia",
            "--store",
            "offset",
            "--flash",
            "x.bin",
            "--sync",
            "sometimes",
        ],
        "invalid value 'sometimes' for '--sync <SYNC>'",
    );
}

/// CRC-32C, as the image header's checksum (at byte 380) uses it.
fn crc32c(data: &[u8]) -> u32 {
    let mut c = !0u32;
    for &b in data {
        c ^= u32::from(b);
        for _ in 0..8 {
            c = if c & 1 == 1 {
                (c >> 1) ^ 0x82F6_3B78
            } else {
                c >> 1
            };
        }
    }
    !c
}

/// Rewrites an image header's description (JSON at 24, its length at 20) with `edit`
/// and seals the header with a correct checksum: a header idem could have written.
fn rewrite_meta(bytes: &mut [u8], edit: impl FnOnce(&mut Value)) {
    let len = u32::from_le_bytes(bytes[20..24].try_into().unwrap()) as usize;
    let mut meta: Value = serde_json::from_slice(&bytes[24..24 + len]).unwrap();
    edit(&mut meta);
    let json = serde_json::to_vec(&meta).unwrap();
    bytes[24..344].fill(0);
    bytes[24..24 + json.len()].copy_from_slice(&json);
    bytes[20..24].copy_from_slice(&(json.len() as u32).to_le_bytes());
    seal(bytes);
}

fn seal(bytes: &mut [u8]) {
    let crc = crc32c(&bytes[..380]);
    bytes[380..384].copy_from_slice(&crc.to_le_bytes());
}

/// An image of header format 2 (no message-id key of its own): refused in one sentence
/// by every command, left byte for byte as it was.
#[test]
fn an_image_in_the_old_header_format_is_refused() {
    let dir = assert_fs::TempDir::new().unwrap();
    let img = dir.child("old.bin");
    consume_ddia("offset", img.path()).assert().success();
    let mut bytes = std::fs::read(img.path()).unwrap();
    // Format 2 wrote version 2 and nothing between the description and the checksum.
    bytes[8..12].copy_from_slice(&2u32.to_le_bytes());
    bytes[344..380].fill(0);
    seal(&mut bytes);
    std::fs::write(img.path(), &bytes).unwrap();
    let message = "was written by an older idem (image format 2, without the image's own message-id key; this one reads format 5): it was left untouched, start a new image";
    refused(
        img.path(),
        &["consume", "ddia", "--store", "offset", "--flash"],
        message,
    );
    refused(img.path(), &["status", "--flash"], message);
    refused(img.path(), &["flash", "inspect"], message);
}

/// Each image draws its own 16-byte key when it is created (header bytes 344..360) and
/// keeps it: a run killed mid-stream and resumed leaves it as it was.
#[test]
fn each_image_keeps_its_own_id_key() {
    let dir = assert_fs::TempDir::new().unwrap();
    let key = |p: &std::path::Path| std::fs::read(p).unwrap()[344..360].to_vec();
    let (a, b) = (dir.child("a.bin"), dir.child("b.bin"));
    let mut first = std::process::Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(["consume", "ddia", "--store", "message-id", "--quiet"])
        .args(["--pace-ms", "20", "--flash"])
        .arg(a.path())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while !a.path().exists() && started.elapsed() < std::time::Duration::from_secs(30) {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    std::thread::sleep(std::time::Duration::from_millis(200));
    first.kill().unwrap();
    first.wait().unwrap();
    let drawn = key(a.path());
    consume_ddia("message-id", a.path()).assert().success();
    assert_eq!(key(a.path()), drawn, "the rerun kept the key");
    consume_ddia("message-id", b.path()).assert().success();
    assert_ne!(key(b.path()), drawn, "another image, another key");
    assert_ne!(drawn, [0; 16]);
}

/// A header that differs from the run's only where the description does not show it
/// (the window of a store without one): the message names the field. It used to read
/// "holds the offset store of ddia (..), not the offset store of ddia (..)".
#[test]
fn a_header_that_differs_only_in_its_window_names_it() {
    let dir = assert_fs::TempDir::new().unwrap();
    let img = dir.child("w.bin");
    consume_ddia("offset", img.path()).assert().success();
    let mut bytes = std::fs::read(img.path()).unwrap();
    rewrite_meta(&mut bytes, |m| m["window"] = 16.into());
    std::fs::write(img.path(), &bytes).unwrap();
    refused(
        img.path(),
        &["consume", "ddia", "--store", "offset", "--flash"],
        "w.bin holds the offset store of ddia (100 events, checkpoint every 10), not the offset store of ddia (100 events, checkpoint every 10): window 16 in the image, 0 in this run; it was left untouched",
    );
}

/// Headers of 2 to 7 pages (and of 16), each with a flash of that size: one rule says
/// what the run needs, for every command (`status` used to say "journal region must be
/// at least two whole pages" although the header check allowed them).
#[test]
fn an_image_of_another_size_than_its_run_needs_is_refused() {
    let dir = assert_fs::TempDir::new().unwrap();
    let good = dir.child("good.bin");
    consume_ddia("offset", good.path()).assert().success();
    let good = std::fs::read(good.path()).unwrap();
    for pages in [2u32, 4, 7, 16] {
        let mut bytes = good[..512].to_vec();
        bytes[16..20].copy_from_slice(&pages.to_le_bytes());
        rewrite_meta(&mut bytes, |m| m["pages"] = pages.into());
        bytes.resize(512 + pages as usize * 1024, 0xFF);
        let img = dir.child(format!("p{pages}.bin"));
        img.write_binary(&bytes).unwrap();
        let message = format!(
            "p{pages}.bin has {pages} pages of 1024 bytes, but the offset store of ddia (100 events, checkpoint every 10) needs 8 pages of 1024 bytes; it was left untouched"
        );
        refused(img.path(), &["status", "--flash"], &message);
        refused(img.path(), &["flash", "inspect"], &message);
        refused(
            img.path(),
            &["consume", "ddia", "--store", "offset", "--flash"],
            &message,
        );
    }
}
