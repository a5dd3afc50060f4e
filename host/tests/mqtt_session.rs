//! An `mqtt consume` image knows its session: protocol, broker, client id, topic filter
//! and QoS are fields of their own in its header, and another session's image is refused
//! naming the field that differs (exit 2, the image untouched). Where a run saw MQTT's
//! promise break is kept in the image, so no later run on it grades exact; and a
//! session lost after this run's first CONNACK is named even on a fresh image.
//! The brokers are played by the test on 127.0.0.1.

use std::path::Path;

use assert_fs::prelude::*;
use predicates::prelude::*;
use serde_json::Value;

mod common;
use common::idem;

/// The test's broker: one connection a turn (`common::turn_broker`).
fn broker(turns: Vec<(Vec<u8>, bool)>) -> (String, std::thread::JoinHandle<()>) {
    common::turn_broker(turns)
}

/// CONNACK with `session_present`.
fn connack(session_present: bool) -> Vec<u8> {
    vec![0x20, 0x02, u8::from(session_present), 0x00]
}

/// CONNACK, then a QoS 2 PUBLISH of `id` (5) on `topic`, identifier 1.
fn connack_and_publish(session_present: bool, topic: &str, id: &str) -> Vec<u8> {
    let payload = format!(r#"{{"id": "{id}", "payer": "ada", "amount": 5}}"#);
    let mut p = connack(session_present);
    p.extend_from_slice(&[0x34, (2 + topic.len() + 2 + payload.len()) as u8]);
    p.extend_from_slice(&(topic.len() as u16).to_be_bytes());
    p.extend_from_slice(topic.as_bytes());
    p.extend_from_slice(&[0x00, 0x01]);
    p.extend_from_slice(payload.as_bytes());
    p
}

/// `idem mqtt consume --json` of the naive store, 300 ms idle.
fn consume(addr: &str, flash: &Path, extra: &[&str]) -> assert_cmd::Command {
    let mut c = idem();
    c.args(["mqtt", "consume", "--broker", addr])
        .args(["--store", "naive", "--idle-ms", "300", "--json", "--flash"])
        .arg(flash)
        .args(extra);
    for (flag, default) in [("--topic", "pay"), ("--client-id", "t")] {
        if !extra.contains(&flag) {
            c.args([flag, default]);
        }
    }
    c
}

fn report(c: &mut assert_cmd::Command) -> Value {
    let out = c.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The image of client `a` on topic `b@c` is not the image of client `a@b` on topic `c`
/// (one joined string `mqtt:a@b@c` for both before), nor of another broker or QoS: each
/// is refused before connecting, naming the fields that differ, and the image is left
/// byte for byte as it was.
#[test]
fn another_sessions_image_is_refused_naming_the_field_that_differs() {
    let dir = assert_fs::TempDir::new().unwrap();
    let img = dir.child("dev.img");
    let (addr, b) = broker(vec![(connack_and_publish(false, "b@c", "p1"), false)]);
    let first = report(&mut consume(
        &addr,
        img.path(),
        &["--client-id", "a", "--topic", "b@c"],
    ));
    b.join().unwrap();
    assert_eq!(first["final_total"], 5, "{first}");
    let before = std::fs::read(img.path()).unwrap();
    let refused = |broker: &str, extra: &[&str], why: String| {
        consume(broker, img.path(), extra)
            .assert()
            .code(2)
            .stdout("")
            .stderr(format!(
                "idem: {} belongs to another MQTT session: {why}; it was left untouched\n",
                img.path().display()
            ));
        assert_eq!(std::fs::read(img.path()).unwrap(), before);
    };
    let session = ["--client-id", "a", "--topic", "b@c"];
    refused(
        &addr,
        &["--client-id", "a@b", "--topic", "c"],
        "client id a in the image, a@b in this run, topic filter b@c in the image, c in this run"
            .into(),
    );
    refused(
        &addr,
        &[&session[..], &["--qos", "1"]].concat(),
        "QoS 2 in the image, 1 in this run".into(),
    );
    refused(
        "127.0.0.1:9",
        &session,
        format!("broker {addr} in the image, 127.0.0.1:9 in this run"),
    );
    refused(
        &addr,
        &[&session[..], &["--session", "ram"]].concat(),
        "identifiers in flash in the image, ram in this run".into(),
    );
}

/// A run that saw the broker lose the session (session present 0 on an image begun)
/// marks the image; a later run with nothing wrong of its own, and every id of the
/// truth applied once, is still not exact: it names the earlier run's break.
#[test]
fn where_the_promise_broke_is_kept_in_the_image() {
    let dir = assert_fs::TempDir::new().unwrap();
    let img = dir.child("dev.img");
    let truth = dir.child("truth.jsonl");
    truth
        .write_str("{\"id\": \"p1\", \"payer\": \"ada\", \"amount\": 5}\n")
        .unwrap();
    let (addr, b) = broker(vec![
        (connack_and_publish(false, "pay", "p1"), false),
        (connack(false), false),
        (connack(true), false),
    ]);
    let truth_arg = ["--truth", truth.path().to_str().unwrap()];
    let applied = report(&mut consume(&addr, img.path(), &truth_arg));
    assert_eq!(
        (applied["verdict"].as_str(), applied["final_total"].as_i64()),
        (Some("exact"), Some(5)),
        "{applied}"
    );
    let lost = report(&mut consume(&addr, img.path(), &truth_arg));
    assert_eq!(lost["verdict"], "unproven", "{lost}");
    assert_eq!(
        lost["promise_broken"][0],
        "the broker answered session present 0 while the image held 1 QoS 2 identifiers: it lost the session"
    );
    let later = report(&mut consume(&addr, img.path(), &truth_arg));
    b.join().unwrap();
    assert_eq!(
        (
            later["verdict"].as_str(),
            later["session_present"].as_bool()
        ),
        (Some("unproven"), Some(true)),
        "{later}"
    );
    assert_eq!(
        later["promise_broken"],
        serde_json::json!([
            "an earlier run on this image saw the promise break: the broker lost the session (session present 0 for a session begun)"
        ])
    );
}

/// A fresh image's run: the broker answers session present 1 (a session under this
/// client id it already held), hangs up, and at the reconnection answers session
/// present 0: the session this run began was lost, with whatever the broker had queued
/// for it, and the run names it (no identifier was held, so nothing else showed it).
#[test]
fn session_present_1_then_0_in_a_fresh_images_run_is_named() {
    let dir = assert_fs::TempDir::new().unwrap();
    let img = dir.child("dev.img");
    let (addr, b) = broker(vec![(connack(true), true), (connack(false), false)]);
    let v = report(&mut consume(&addr, img.path(), &[]));
    b.join().unwrap();
    assert_eq!(
        (
            v["final_total"].as_i64(),
            v["new_sessions"].as_i64(),
            v["session_present"].as_bool()
        ),
        (Some(0), Some(1), Some(false)),
        "{v}"
    );
    assert_eq!(
        v["promise_broken"],
        serde_json::json!([
            "the broker answered session present 0 for a session this image had begun: it lost the session, and what it had queued for it"
        ]),
        "{v}"
    );
}

/// An image of format 3 (the session one joined string, no marks) is refused in one
/// sentence, never migrated, and left as it was.
#[test]
fn an_image_of_format_3_is_refused() {
    let dir = assert_fs::TempDir::new().unwrap();
    let img = dir.child("dev.img");
    let (addr, b) = broker(vec![(connack_and_publish(false, "pay", "p1"), false)]);
    report(&mut consume(&addr, img.path(), &[]));
    b.join().unwrap();
    let mut bytes = std::fs::read(img.path()).unwrap();
    bytes[8..12].copy_from_slice(&3u32.to_le_bytes());
    let crc = crc::Crc::<u32>::new(&crc::CRC_32_ISCSI).checksum(&bytes[..380]);
    bytes[380..384].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(img.path(), &bytes).unwrap();
    consume("127.0.0.1:9", img.path(), &[])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "was written by an older idem (image format 3, without an MQTT session's fields and the marks of where its promise broke; this one reads format 5): it was left untouched, start a new image",
        ));
    assert_eq!(std::fs::read(img.path()).unwrap(), bytes);
}

/// An image of format 4 (the previous layout: 24 pages of 1 KiB, its log of applied ids
/// in a file of its own beside it) is refused in one sentence, exit 2, and nothing is
/// written: the image and its log stay as they were, and no log is made.
#[test]
fn an_image_of_format_4_is_refused_and_nothing_is_written() {
    let dir = assert_fs::TempDir::new().unwrap();
    let img = dir.child("dev.img");
    let (addr, b) = broker(vec![(connack_and_publish(false, "pay", "p1"), false)]);
    report(&mut consume(&addr, img.path(), &[]));
    b.join().unwrap();
    // Format 5's header made format 4's: the version, pages of 1 KiB, 24 of them (in the
    // header's words and in its description of the run), the checksum; then 24 KiB of
    // flash and nothing after it.
    let new = std::fs::read(img.path()).unwrap();
    let mut header = new[..512].to_vec();
    let len = u32::from_le_bytes(header[20..24].try_into().unwrap()) as usize;
    let meta = String::from_utf8(header[24..24 + len].to_vec()).unwrap();
    assert!(meta.contains("\"pages\":3"), "{meta}");
    let meta = meta.replace("\"pages\":3", "\"pages\":24");
    header[24..24 + meta.len()].copy_from_slice(meta.as_bytes());
    header[20..24].copy_from_slice(&(meta.len() as u32).to_le_bytes());
    header[8..12].copy_from_slice(&4u32.to_le_bytes());
    header[12..16].copy_from_slice(&1024u32.to_le_bytes());
    header[16..20].copy_from_slice(&24u32.to_le_bytes());
    let crc = crc::Crc::<u32>::new(&crc::CRC_32_ISCSI).checksum(&header[..380]);
    header[380..384].copy_from_slice(&crc.to_le_bytes());
    let mut bytes = header;
    bytes.resize(512 + 24 * 1024, 0xFF);
    std::fs::write(img.path(), &bytes).unwrap();
    let log = dir.child("dev.img.ids");
    log.write_str("{\"n\":1,\"id\":\"p1\"}\n").unwrap();
    consume("127.0.0.1:9", img.path(), &[])
        .assert()
        .code(2)
        .stdout("")
        .stderr(format!(
            "idem: {} was written by an older idem (image format 4, with its log of applied ids in a file of its own and pages of 1024 bytes; this one reads format 5, the log inside the image): it was left untouched, start a new image\n",
            img.path().display()
        ));
    assert_eq!(std::fs::read(img.path()).unwrap(), bytes);
    log.assert("{\"n\":1,\"id\":\"p1\"}\n");
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
}

/// An image whose receiver's journal carries another record's tag (an older idem's, whose
/// record lacked the tombstones of released identifiers) is refused in one sentence,
/// exit 2, and nothing is written: the journal's first page header gets another tag, its
/// check recomputed, as an older idem's receiver would have written it.
#[test]
fn a_receiver_journal_of_another_record_is_refused_and_nothing_is_written() {
    let dir = assert_fs::TempDir::new().unwrap();
    let img = dir.child("dev.img");
    // Two turns at one address, as the image's session names its broker; the second is
    // never dialled (the journal is refused before any connection), so its thread is
    // left to end with the test.
    let (addr, _b) = broker(vec![
        (connack_and_publish(false, "pay", "p1"), false),
        (connack(true), false),
    ]);
    report(&mut consume(&addr, img.path(), &[]));
    let mut bytes = std::fs::read(img.path()).unwrap();
    // The receiver's journal starts after the image's 512-byte header; its page header's
    // tag is at +8 and its CRC-32C over the first 16 bytes at +16.
    let page = 512;
    let tag = u32::from_le_bytes(bytes[page + 8..page + 12].try_into().unwrap());
    let old = tag ^ 0x0000_0003;
    bytes[page + 8..page + 12].copy_from_slice(&old.to_le_bytes());
    let crc = crc::Crc::<u32>::new(&crc::CRC_32_ISCSI).checksum(&bytes[page..page + 16]);
    bytes[page + 16..page + 20].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(img.path(), &bytes).unwrap();
    consume(&addr, img.path(), &[])
        .assert()
        .code(2)
        .stdout("")
        .stderr(format!(
            "idem: {} holds a receiver's journal this idem does not read (tagged {old:#010x}, journal format 3, at page 0): it was written by another idem, whose receiver record differs, or for another store; it was left untouched, start a new image\n",
            img.path().display()
        ));
    assert_eq!(std::fs::read(img.path()).unwrap(), bytes);
}
