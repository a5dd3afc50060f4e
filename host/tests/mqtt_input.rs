//! Bad input to `idem mqtt`: a topic filter MQTT does not allow is refused before any
//! connection (MQTT 3.1.1 §4.7), and a peer that does not speak MQTT is named with its
//! first bytes.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::Duration;

mod common;
use common::idem;

#[test]
fn a_filter_mqtt_does_not_allow_is_refused_before_connecting() {
    let dir = tempfile::tempdir().unwrap();
    let flash = dir.path().join("dev.img");
    let f = flash.to_str().unwrap();
    // Port 9 of 127.0.0.1: nothing listens, and nothing is tried.
    let cases = [
        (
            "a/#/b",
            "# stands alone in the last level (a/#), never elsewhere (MQTT 3.1.1 §4.7.1.2)",
        ),
        (
            "a/b#",
            "# stands alone in the last level (a/#), never elsewhere (MQTT 3.1.1 §4.7.1.2)",
        ),
        (
            "a+/b",
            "+ stands alone in its level (a/+/b), never beside other characters (MQTT 3.1.1 §4.7.1.3)",
        ),
        (
            "",
            "a topic takes at least one character (MQTT 3.1.1 §4.7.3)",
        ),
    ];
    for (topic, why) in cases {
        let out = idem()
            .args(["mqtt", "consume", "--broker", "127.0.0.1:9", "--flash", f])
            .args(["--topic", topic])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{topic}");
        assert_eq!(
            String::from_utf8_lossy(&out.stderr),
            format!("idem: --topic {topic:?}: {why}\n")
        );
        assert!(!flash.exists(), "{topic}: no image");
    }
    for filter in ["a/+/b/#", "+"] {
        let out = idem()
            .args(["mqtt", "consume", "--broker", "127.0.0.1:9", "--flash", f])
            .args(["--topic", filter])
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(1),
            "{filter}: a valid filter is tried"
        );
    }
    let truth = dir.path().join("t.jsonl");
    let out = idem()
        .args([
            "mqtt",
            "publish",
            "--broker",
            "127.0.0.1:9",
            "--topic",
            "a/+",
        ])
        .arg("--truth")
        .arg(&truth)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "idem: --topic \"a/+\": a topic published to takes no wildcard, + or # (MQTT 3.1.1 §4.7.1)\n"
    );
    assert!(!truth.exists());
}

#[test]
fn a_peer_that_does_not_speak_mqtt_is_named_with_its_first_bytes() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let peer = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut buf = [0u8; 512];
        let _ = s.read(&mut buf);
        let body =
            "<html><head><title>400 Bad Request</title></head><body>400 Bad Request</body></html>";
        let reply = format!(
            "HTTP/1.1 400 Bad Request\r\nServer: nginx\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        s.write_all(reply.as_bytes()).unwrap();
    });
    let dir = tempfile::tempdir().unwrap();
    let flash = dir.path().join("dev.img");
    let out = idem()
        .args(["mqtt", "consume", "--broker", &addr, "--topic", "pay"])
        .arg("--flash")
        .arg(&flash)
        .output()
        .unwrap();
    peer.join().unwrap();
    assert_eq!(out.status.code(), Some(1));
    // Before any CONNACK: no image is made.
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!(
            "idem: {addr}: the peer does not speak MQTT: where a CONNACK belongs it sent \"HTTP/1.1 400 Bad Request\"; no image was made\n"
        )
    );
    assert!(!flash.exists());
}
