//! Group commit in `idem mqtt consume`, against a broker the test plays on 127.0.0.1:
//! the packets one read brings are taken together, and one sync of the image (which holds
//! the log of applied ids after its flash) makes all their records and ids durable
//! before any of their acknowledgements goes out; the releases go in the next record, or
//! in the group's last when the broker waits for their PUBCOMPs.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

mod common;
use common::{idem, ids_log};

/// A QoS 2 PUBLISH on `pay` of the payment `pN` of 1, identifier `pid`.
fn publish(pid: u8) -> Vec<u8> {
    let payload = format!(r#"{{"id": "p{pid}", "payer": "ada", "amount": 1}}"#);
    let mut p = vec![0x34, (2 + 3 + 2 + payload.len()) as u8];
    p.extend_from_slice(&[0x00, 0x03, b'p', b'a', b'y', 0x00, pid]);
    p.extend_from_slice(payload.as_bytes());
    p
}

/// Reads packets until `count` of type `kind` (the first byte's high nibble) came;
/// the identifiers of those, in order.
fn await_packets(s: &mut TcpStream, kind: u8, count: usize) -> Vec<u8> {
    let mut bytes = Vec::new();
    let mut pids = Vec::new();
    let mut buf = [0u8; 4096];
    while pids.len() < count {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "the client closed with {} of {count}", pids.len());
        bytes.extend_from_slice(&buf[..n]);
        // Every packet here is short: a one-byte remaining length.
        while bytes.len() >= 2 && bytes.len() >= 2 + usize::from(bytes[1]) {
            let len = 2 + usize::from(bytes[1]);
            if bytes[0] >> 4 == kind {
                pids.push(bytes[3]);
            }
            bytes.drain(..len);
        }
    }
    pids
}

/// A broker for one connection a turn: CONNACK (the turn's session present), SUBACK
/// (QoS 2) and PUBLISHes of the turn's identifiers in one write; once each has its
/// PUBREC, it checks that the image at `flash` holds a line for every id applied so far,
/// then sends the PUBRELs of them all in one write; once each has its PUBCOMP, it reads
/// until the client closes.
fn broker(flash: PathBuf, turns: Vec<(bool, Vec<u8>)>) -> (String, std::thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let handle = std::thread::spawn(move || {
        let mut applied = 0;
        for (session_present, pids) in turns {
            let (mut s, _) = listener.accept().unwrap();
            s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
            let mut buf = [0u8; 512];
            let _ = s.read(&mut buf);
            let mut out = vec![0x20, 0x02, u8::from(session_present), 0x00];
            out.extend_from_slice(&[0x90, 0x03, 0x00, 0x01, 0x02]);
            pids.iter().for_each(|&pid| out.extend(publish(pid)));
            s.write_all(&out).unwrap();
            assert_eq!(await_packets(&mut s, 5, pids.len()), pids, "PUBRECs");
            applied += pids.len();
            assert_eq!(
                ids_log(&flash).lines().count(),
                applied,
                "each id in the image before its PUBREC"
            );
            let pubrels: Vec<u8> = pids.iter().flat_map(|&p| [0x62, 0x02, 0x00, p]).collect();
            s.write_all(&pubrels).unwrap();
            assert_eq!(await_packets(&mut s, 7, pids.len()), pids, "PUBCOMPs");
            while matches!(s.read(&mut buf), Ok(n) if n > 0) {}
        }
    });
    (addr, handle)
}

/// `idem mqtt consume` of the naive store at QoS 2 into `flash`, synced.
fn consume(addr: &str, flash: &Path) -> Value {
    let out = idem()
        .args(["mqtt", "consume", "--broker", addr, "--topic", "pay"])
        .args(["--store", "naive", "--idle-ms", "300", "--json"])
        .arg("--flash")
        .arg(flash)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn figures(v: &Value) -> [u64; 4] {
    ["applied", "records", "syncs", "bytes_written"].map(|k| v[k].as_u64().unwrap())
}

#[test]
fn a_read_of_20_publishes_takes_one_sync_for_their_ids_and_records() {
    let dir = tempfile::tempdir().unwrap();
    let flash = dir.path().join("group.img");
    // The image's first message enters its first page: the page's header is synced
    // alone (durable before any record in it), then the group's record and its id's
    // line with one sync; the PUBREL alone in its read leaves every identifier
    // released, so its release is written at once, in a record and a sync of its own.
    let (addr, broker) = broker(
        flash.clone(),
        vec![(false, vec![1]), (true, (2..=21).collect())],
    );
    let v = consume(&addr, &flash);
    // 1 applied; 2 records of 20 bytes (the naive store's record with 32 places and
    // their 32 tombstones, at its encoded size: journal format 3; format 2 wrote its
    // 420-byte slot whole); 3 syncs; bytes: a 64 KiB page erased, a 20-byte header, the
    // two records and the ids line `{"n":1,"id":"p1"}` and its line end.
    assert_eq!(figures(&v), [1, 2, 3, 65536 + 20 + 2 * 20 + 18]);
    // 20 PUBLISHes in one read: 20 records and 20 lines, one sync before the 20
    // PUBRECs; their 20 PUBRELs in one read: one record, in one sync, before the 20
    // PUBCOMPs. One sync a group.
    let v = consume(&addr, &flash);
    broker.join().unwrap();
    let ids_bytes: u64 = (2..=21u64).map(|n| if n < 10 { 18 } else { 20 }).sum();
    // The 21 records at their encoded size: 1,780 bytes (21 slots of 420 in format 2).
    assert_eq!(
        figures(&v),
        [21, 21, 2, 1780 + ids_bytes],
        "21 applied over both runs"
    );
    assert_eq!(v["final_total"], 21);
}
