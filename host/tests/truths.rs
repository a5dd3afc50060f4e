//! The truth files idem writes (`idem mqtt publish --truth`) against a broker the test
//! plays on 127.0.0.1: a line only for a PUBLISH the broker completed, the file renamed
//! into place with its end line when the publisher finishes, and a publisher killed
//! before then leaving nothing under the truth's name.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{Value, json};

/// One packet from `s`: its first byte and its body; `None` when the connection ends.
fn packet(s: &mut TcpStream) -> Option<(u8, Vec<u8>)> {
    let mut one = [0u8; 1];
    s.read_exact(&mut one).ok()?;
    let (mut len, mut shift) = (0usize, 0);
    loop {
        let mut b = [0u8; 1];
        s.read_exact(&mut b).ok()?;
        len |= usize::from(b[0] & 0x7f) << shift;
        shift += 7;
        if b[0] & 0x80 == 0 {
            break;
        }
    }
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).ok()?;
    Some((one[0], body))
}

/// A broker that accepts one connection, answers CONNECT, and PUBACKs the first `acks`
/// QoS 1 PUBLISHes; it sends the count of PUBLISHes received on `seen` after each, and
/// stays silent past `acks`.
fn broker(acks: usize) -> (String, mpsc::Receiver<usize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (tx, seen) = mpsc::channel();
    std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut publishes = 0;
        while let Some((first, body)) = packet(&mut s) {
            match first >> 4 {
                1 => s.write_all(&[0x20, 0x02, 0x00, 0x00]).unwrap(),
                3 => {
                    publishes += 1;
                    let topic = usize::from(u16::from_be_bytes([body[0], body[1]]));
                    let pid = &body[2 + topic..4 + topic];
                    if publishes <= acks {
                        s.write_all(&[0x40, 0x02, pid[0], pid[1]]).unwrap();
                    }
                    let _ = tx.send(publishes);
                }
                _ => {}
            }
        }
    });
    (addr, seen)
}

/// `idem mqtt publish` of `count` payments at QoS 1 to `addr`, its truth at `truth`.
fn publish(addr: &str, count: u32, truth: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_idem"));
    c.args(["mqtt", "publish", "--broker", addr, "--topic", "pay"])
        .args(["--qos", "1", "--count", &count.to_string(), "--truth"])
        .arg(truth);
    c
}

/// Each line of `path` as JSON.
fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The files in `dir`, by name.
fn names(dir: &Path) -> Vec<String> {
    let mut n: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    n.sort();
    n
}

#[test]
fn a_finished_publisher_renames_its_truth_into_place_with_an_end_line() {
    let dir = tempfile::tempdir().unwrap();
    let truth = dir.path().join("sent.jsonl");
    let (addr, _seen) = broker(usize::MAX);
    let out = publish(&addr, 3, &truth).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let l = lines(&truth);
    assert_eq!(l.len(), 5, "{l:?}");
    assert_eq!(
        l[0],
        json!({"idem_truth": 1, "writer": "mqtt publish", "qos": 1})
    );
    let ids: Vec<&str> = l[1..4].iter().map(|p| p["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["p0", "p1", "p2"]);
    assert_eq!(l[4], json!({"idem_truth_end": 3}));
    assert_eq!(names(dir.path()), ["sent.jsonl"]);
}

#[test]
fn a_killed_publisher_leaves_only_what_the_broker_completed_and_no_truth_by_its_name() {
    let dir = tempfile::tempdir().unwrap();
    let truth = dir.path().join("sent.jsonl");
    // An earlier run's truth: removed, so no consumer is graded against it.
    std::fs::write(
        &truth,
        "{\"id\": \"old\", \"payer\": \"ada\", \"amount\": 1}\n",
    )
    .unwrap();
    let (addr, seen) = broker(3);
    let mut child = publish(&addr, 10, &truth)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // The 4th PUBLISH is sent only after the 3rd's PUBACK was read and its line written.
    let counts: Vec<usize> = (0..4)
        .map_while(|_| seen.recv_timeout(Duration::from_secs(20)).ok())
        .collect();
    assert_eq!(counts, [1, 2, 3, 4]);
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        !truth.exists(),
        "a killed publisher's truth is not under its name"
    );
    let left: Vec<PathBuf> = names(dir.path())
        .iter()
        .map(|n| dir.path().join(n))
        .collect();
    assert_eq!(left.len(), 1, "{left:?}");
    let name = left[0].file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        name.starts_with("sent.jsonl.") && name.ends_with(".idem-tmp"),
        "{name}"
    );
    let l = lines(&left[0]);
    let ids: Vec<&str> = l[1..].iter().map(|p| p["id"].as_str().unwrap()).collect();
    assert_eq!(
        ids,
        ["p0", "p1", "p2"],
        "the 4th, never acknowledged, is not there"
    );
    // Graded against, it is refused in one sentence, before any broker or image.
    let flash = dir.path().join("dev.img");
    let out = Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(["mqtt", "consume", "--broker", &addr, "--topic", "pay"])
        .arg("--flash")
        .arg(&flash)
        .arg("--truth")
        .arg(&left[0])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!(
            "idem: {} was written by idem mqtt publish and has no end line: its writer stopped before it finished, so it may lack what was sent; publish again\n",
            left[0].display()
        )
    );
    assert!(!flash.exists());
}
