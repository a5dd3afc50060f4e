//! `idem mqtt consume` against peers the test plays on 127.0.0.1: a PUBLISH sized from
//! the topic it arrives on (not the filter), a peer that accepts TCP and never sends
//! CONNACK (whatever `--idle-ms` says: one sentence, non-zero, no image), and the lowest
//! QoS granted over a run's subscriptions.

use std::io::Read;
use std::net::TcpListener;
use std::time::Duration;

use serde_json::Value;

mod common;
use common::idem;

/// The test's broker: one connection a turn (`common::turn_broker`).
fn broker(turns: Vec<(Vec<u8>, bool)>) -> (String, std::thread::JoinHandle<()>) {
    common::turn_broker(turns)
}

/// A QoS 2 PUBLISH of `payload` on `topic`, identifier 1.
fn publish(topic: &str, payload: &[u8]) -> Vec<u8> {
    let len = 2 + topic.len() + 2 + payload.len();
    let mut p = vec![0x34];
    // The remaining length (§2.2.3): 7 bits a byte, the top bit says more follow.
    let mut n = len;
    loop {
        let byte = (n % 128) as u8;
        n /= 128;
        p.push(if n > 0 { byte | 0x80 } else { byte });
        if n == 0 {
            break;
        }
    }
    p.extend_from_slice(&(topic.len() as u16).to_be_bytes());
    p.extend_from_slice(topic.as_bytes());
    p.extend_from_slice(&[0x00, 0x01]);
    p.extend_from_slice(payload);
    p
}

fn consume(addr: &str, flash: &std::path::Path, topic: &str) -> std::process::Output {
    idem()
        .args(["mqtt", "consume", "--broker", addr, "--topic", topic])
        .args(["--client-id", "t", "--store", "naive", "--idle-ms", "300"])
        .args(["--json", "--flash"])
        .arg(flash)
        .output()
        .unwrap()
}

fn report(out: &std::process::Output) -> Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A 203-byte payment on an 85-byte topic under `longtopic/#` (11 bytes): its PUBLISH
/// (295 bytes) is within what the device takes on that topic (348), so it is applied;
/// sized from the filter (274), it was acknowledged and rejected, lost for good.
#[test]
fn a_publish_is_sized_from_the_topic_it_arrives_on() {
    let dir = tempfile::tempdir().unwrap();
    let topic = format!("longtopic/{}", "x".repeat(75));
    assert_eq!(topic.len(), 85);
    let pad = "a".repeat(203 - 38);
    let payload = format!(r#"{{"id": "p1", "payer": "{pad}", "amount": 7}}"#);
    assert_eq!(payload.len(), 203);
    let mut reply = vec![0x20, 0x02, 0x00, 0x00];
    let packet = publish(&topic, payload.as_bytes());
    assert_eq!(packet.len(), 295);
    reply.extend_from_slice(&packet);
    let (addr, b) = broker(vec![(reply, false)]);
    let v = report(&consume(&addr, &dir.path().join("dev.img"), "longtopic/#"));
    b.join().unwrap();
    assert_eq!(
        (
            v["final_total"].as_i64(),
            v["applied"].as_i64(),
            v["rejected"].as_i64()
        ),
        (Some(7), Some(1), Some(0)),
        "{v}"
    );
}

/// A peer that accepts TCP and never answers CONNECT: with `--idle-ms 300` the run
/// still waits for the CONNACK 10 s from the CONNECT, then stops in one sentence,
/// exit 1, and no image exists (it was "session present 0", exit 0 and a bound image).
#[test]
fn a_peer_that_never_sends_connack_is_one_sentence_and_leaves_no_image() {
    let dir = tempfile::tempdir().unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let silent = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let _ = s.set_read_timeout(Some(Duration::from_secs(20)));
        let mut buf = [0u8; 512];
        while matches!(s.read(&mut buf), Ok(n) if n > 0) {}
    });
    let flash = dir.path().join("dev.img");
    let started = std::time::Instant::now();
    let out = consume(&addr, &flash, "pay");
    silent.join().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(out.stdout, b"");
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!(
            "idem: {addr}: the peer accepted the connection but did not answer CONNECT within 10 s; no image was made\n"
        )
    );
    assert!(started.elapsed() >= Duration::from_secs(10));
    assert!(!flash.exists());
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

/// The broker grants QoS 1 at the first subscription of a run and QoS 2 at the second
/// (after a reconnection): the report gives the lowest, 1, and names the downgrade
/// (it gave the last grant, 2, and nothing broken).
#[test]
fn the_lowest_qos_granted_over_the_run_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let suback = |q: u8| vec![0x90, 0x03, 0x00, 0x01, q];
    let (addr, b) = broker(vec![
        ([vec![0x20, 0x02, 0x00, 0x00], suback(1)].concat(), true),
        ([vec![0x20, 0x02, 0x01, 0x00], suback(2)].concat(), false),
    ]);
    let v = report(&consume(&addr, &dir.path().join("dev.img"), "pay"));
    b.join().unwrap();
    assert_eq!(v["granted"], 1, "{v}");
    assert_eq!(
        v["promise_broken"],
        serde_json::json!(["the broker granted QoS 1 for a subscription at QoS 2"]),
        "{v}"
    );
}

/// A full disk: the image's flash (written in place) has its room, but its log of
/// applied ids grows past its first 64 KiB after about 2,700 lines, and a burst of 3,000
/// QoS 1 payments needs that on a 320 KiB tmpfs (in a mount namespace of the test's own,
/// `unshare`) filled after the image was made. The run stops in one sentence that names
/// the file and says that nothing of the batch was acknowledged.
#[test]
fn a_full_disk_names_the_file_and_what_was_sent() {
    let burst = |n: usize| {
        let mut out = vec![0x20, 0x02, 0x01, 0x00];
        for i in 0..n {
            let payload = format!(r#"{{"id": "p{i}", "payer": "ada", "amount": 1}}"#);
            let mut p = vec![0x32, (2 + 3 + 2 + payload.len()) as u8, 0, 3];
            p.extend_from_slice(b"pay");
            p.extend_from_slice(&(i as u16 + 1).to_be_bytes());
            p.extend_from_slice(payload.as_bytes());
            out.extend_from_slice(&p);
        }
        out
    };
    let (addr, b) = broker(vec![(burst(1), false), (burst(3000), false)]);
    let dir = tempfile::tempdir().unwrap();
    let disk = dir.path().join("disk");
    std::fs::create_dir(&disk).unwrap();
    let consume = format!(
        "{} mqtt consume --broker {addr} --topic pay --client-id t --store naive --idle-ms 300 --flash {}/dev.img",
        env!("CARGO_BIN_EXE_idem"),
        disk.display()
    );
    let script = format!(
        "mount -t tmpfs -o size=320k tmpfs {d} && {consume} >/dev/null && \
         dd if=/dev/zero of={d}/fill bs=4k count=100 2>/dev/null; {consume}",
        d = disk.display()
    );
    let out = std::process::Command::new("unshare")
        .args(["--mount", "--map-root-user", "sh", "-c", &script])
        .output()
        .unwrap();
    b.join().unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with(&format!(
            "idem: writing {}/dev.img (the disk full?): No space left on device (os error 28): none of the ",
            disk.display()
        )),
        "{stderr}"
    );
    assert!(
        stderr.ends_with(" was sent (the broker sends those messages again), and every one sent before is in the image; the connection was closed and what the image holds is kept\n"),
        "{stderr}"
    );
}
