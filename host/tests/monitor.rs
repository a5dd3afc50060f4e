//! `idem monitor` over files: frames among garbage, a damaged frame, a stream that ends
//! early. (The firmware's real UART output is decoded in `tests/tests/firmware.rs`.)

use assert_fs::prelude::*;
use idem_board::wire::{self, Frame, Totals};
use predicates::prelude::*;

mod common;
use common::idem;

fn encoded(frames: &[Frame]) -> Vec<u8> {
    let mut out = Vec::new();
    for f in frames {
        let mut buf = [0u8; wire::MAX_ENCODED];
        out.extend_from_slice(wire::encode(f, &mut buf).unwrap());
    }
    out
}

fn run(totals: Totals) -> Vec<Frame> {
    vec![
        Frame::Boot {
            boots: 1,
            resume: 0,
            resume_atomic: 0,
            totals: Totals::default(),
        },
        Frame::Progress { offset: 0, totals },
        Frame::Done {
            boots: 1,
            totals,
            true_total: 100,
        },
    ]
}

#[test]
fn frames_among_garbage_are_decoded_and_the_garbage_counted() {
    let dir = assert_fs::TempDir::new().unwrap();
    let totals = Totals {
        naive: 110,
        offset: 100,
        atomic: 100,
    };
    // Two runs of garbage (each ended by a 0x00), then the frames, one of them damaged.
    let mut bytes = b"boot banner \x00\xff\xfe garbage".to_vec();
    bytes.push(0);
    let mut frames = encoded(&run(totals));
    frames[5] ^= 0x40; // damage the boot frame
    bytes.extend(frames);
    let f = dir.child("uart.bin");
    f.write_binary(&bytes).unwrap();
    let out = idem()
        .args(["monitor", "--json"])
        .arg(f.path())
        .output()
        .unwrap();
    assert!(out.status.success());
    let lines: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "the damaged boot frame is skipped");
    assert_eq!(
        lines[0],
        serde_json::json!({"type": "progress", "offset": 0, "totals": {"naive": 110, "offset": 100, "atomic": 100}})
    );
    assert_eq!(lines[1]["type"], "done");
    assert_eq!(lines[1]["totals"]["naive"], 110);
    assert!(
        String::from_utf8(out.stderr)
            .unwrap()
            .contains("skipped 3 damaged or partial frames")
    );
    idem()
        .arg("monitor")
        .arg(f.path())
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "done after 1 boots   naive  110  offset  100  atomic  100   (true total 100)",
        ));
}

#[test]
fn a_stream_that_ends_before_done_is_exit_1() {
    let dir = assert_fs::TempDir::new().unwrap();
    let bytes = encoded(&run(Totals::default())[..2]);
    let f = dir.child("partial.bin");
    f.write_binary(&bytes[..bytes.len() - 3]).unwrap();
    idem()
        .arg("monitor")
        .arg(f.path())
        .assert()
        .code(1)
        .stdout(predicate::str::contains("boot #1"))
        .stderr(predicate::str::contains(
            "the stream ended before the done frame (0 damaged or partial frames skipped)",
        ));
    // A source that does not exist is bad input: exit 2, before anything is read.
    idem()
        .args(["monitor", "/nonexistent/tty"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("/nonexistent/tty does not exist"));
}
