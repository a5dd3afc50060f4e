//! Helpers shared by the CLI tests.
#![allow(dead_code)] // each test file uses its own subset

use assert_cmd::Command;
use predicates::prelude::*;
use serde_json::Value;

/// The `idem` binary built for these tests.
pub fn idem() -> Command {
    Command::new(env!("CARGO_BIN_EXE_idem"))
}

/// `idem consume ddia --store STORE --flash PATH`.
pub fn consume_ddia(store: &str, path: &std::path::Path) -> Command {
    let mut c = idem();
    c.args(["consume", "ddia", "--store", store, "--flash"])
        .arg(path);
    c
}

/// Runs `idem args`, expects exit status `code`, parses stdout as one JSON value.
pub fn json(args: &[&str], code: i32) -> Value {
    let out = idem().args(args).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(code),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `idem run args --json`, which must succeed.
pub fn run_json(args: &[&str]) -> Value {
    let mut a = vec!["run"];
    a.extend_from_slice(args);
    a.push("--json");
    json(&a, 0)
}

/// `idem args` must fail with exit status 2 and `message` on stderr, without a panic.
pub fn refuses(args: &[&str], message: &str) {
    idem()
        .args(args)
        .assert()
        .code(2)
        .stderr(predicate::str::contains(message))
        .stderr(predicate::str::contains("panicked").not());
}

/// A cell of `idem matrix --json`: its verdict and final total.
pub fn matrix_cell(v: &Value, store: &str, fault: &str) -> (String, i64) {
    let row = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["store"] == store)
        .unwrap();
    let c = row["cells"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["fault"] == fault)
        .unwrap();
    (
        c["verdict"].as_str().unwrap().to_string(),
        c["final_total"].as_i64().unwrap(),
    )
}

/// The screen of `idem ARGS` run in a pseudo-terminal (util-linux `script`), with `input`
/// typed at it; bounded: the command is killed, and the test fails, after 30 s.
pub fn in_a_terminal(args: &str, input: &[u8]) -> String {
    use std::io::{Read, Write};
    use std::process::{Command, Stdio};
    let command = format!("{} {args}", env!("CARGO_BIN_EXE_idem"));
    let mut child = Command::new("script")
        .args(["-qfec", &command, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("script (util-linux) runs a command in a pseudo-terminal");
    child.stdin.take().unwrap().write_all(input).unwrap();
    let started = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > std::time::Duration::from_secs(30) {
            let _ = child.kill();
            panic!("idem {args} did not end");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let mut text = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut text)
        .unwrap();
    text
}

/// A broker played by a test on 127.0.0.1: it takes one connection a turn, in order,
/// reads the CONNECT, answers with the turn's bytes, then hangs up (`true`) or reads
/// until the client closes. Its address, and the thread to join.
pub fn turn_broker(turns: Vec<(Vec<u8>, bool)>) -> (String, std::thread::JoinHandle<()>) {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let handle = std::thread::spawn(move || {
        for (reply, hang_up) in turns {
            let Ok((mut s, _)) = listener.accept() else {
                return;
            };
            s.set_read_timeout(Some(std::time::Duration::from_millis(200)))
                .unwrap();
            let mut buf = [0u8; 512];
            let _ = s.read(&mut buf);
            let _ = s.write_all(&reply);
            if hang_up {
                continue;
            }
            let _ = s.set_read_timeout(Some(std::time::Duration::from_secs(15)));
            while matches!(s.read(&mut buf), Ok(n) if n > 0) {}
        }
    });
    (addr, handle)
}

/// The log of applied ids in the `mqtt consume` image at `flash`: after its 512-byte
/// header and 3 pages of 64 KiB, up to its first zero.
pub fn ids_log(flash: &std::path::Path) -> String {
    let bytes = std::fs::read(flash).unwrap();
    let log = &bytes[512 + 3 * 65536..];
    let end = log.iter().position(|&b| b == 0).unwrap();
    String::from_utf8(log[..end].to_vec()).unwrap()
}
