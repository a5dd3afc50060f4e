//! The feed's timeouts are written once, in `board/src/timing.rs`: the firmware, the
//! host and the link test read the policy's constants and timers, and none of the feed's
//! files writes one of its durations (250 ms, 500 ms, 2 s) in any unit, nor the 50 ms
//! silence the link model once had of its own.
//! `board/tests/timing.rs` runs the policy itself on a simulated clock.

use std::fs;
use std::path::Path;

use idem_board::timing::{
    DEVICE_SILENCE_MS, DEVICE_SILENCE_US, HOST_FIRST_HELLO_US, HOST_HELLO_US, STATS_WAIT_US,
};

fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

fn read(path: &str) -> String {
    fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// `text` without its comments: a duration in a sentence is no timeout.
fn code(text: &str) -> String {
    text.lines()
        .map(|l| l.find("//").map_or(l, |i| &l[..i]))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The integer literals of `code`, with their underscores taken out, each with the
/// word before it (`from_millis(`, `= `): `from_millis(250)` is `(250, "from_millis")`.
fn literals(code: &str) -> Vec<(u64, String)> {
    let bytes = code.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let starts = bytes[i].is_ascii_digit()
            && (i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_'));
        if !starts {
            i += 1;
            continue;
        }
        let from = i;
        while i < bytes.len() && (bytes[i].is_ascii_digit() || bytes[i] == b'_') {
            i += 1;
        }
        let digits: String = code[from..i].chars().filter(|c| *c != '_').collect();
        let before = code[..from].trim_end_matches(['(', ' ', '=', ':']);
        let word = before
            .rsplit(|c: char| !(c.is_alphanumeric() || c == '_'))
            .next()
            .unwrap_or("")
            .to_string();
        if let Ok(n) = digits.parse() {
            out.push((n, word));
        }
    }
    out
}

/// The policy's durations as a file could write them: (value, the unit's words).
fn spellings() -> Vec<(u64, &'static [&'static str])> {
    const MS: &[&str] = &["from_millis", "u32", "u64"];
    const US: &[&str] = &["from_micros", "u64", ""];
    const S: &[&str] = &["from_secs"];
    vec![
        (50, MS),
        (250, MS),
        (500, MS),
        (2_000, MS),
        (50_000, US),
        (250_000, US),
        (500_000, US),
        (2_000_000, US),
        (2, S),
    ]
}

#[test]
fn the_policys_values_are_the_feeds_timeouts() {
    assert_eq!(DEVICE_SILENCE_US, 250_000);
    assert_eq!(u64::from(DEVICE_SILENCE_MS) * 1_000, DEVICE_SILENCE_US);
    assert_eq!(
        (HOST_FIRST_HELLO_US, HOST_HELLO_US, STATS_WAIT_US),
        (500_000, 2_000_000, 500_000)
    );
}

#[test]
fn the_firmware_the_host_and_the_link_test_read_the_policy() {
    for (file, names) in [
        // The receive loop both images share counts the device's silence; the feed
        // image's effect takes QEMU's time.
        ("firmware/src/link.rs", &["DEVICE_SILENCE_MS"][..]),
        ("firmware/src/bin/feed.rs", &["QEMU_EFFECT_MS"][..]),
        ("host/src/cmd/device/qemu.rs", &["QEMU_EFFECT_US"][..]),
        (
            "host/src/cmd/device/feed.rs",
            &["HostTimer", "hello_due", "finished"][..],
        ),
        (
            "board/tests/feed_link.rs",
            &["DeviceTimer", "HostTimer", "hello_due", "expired"][..],
        ),
    ] {
        let code = code(&read(file));
        assert!(
            code.contains("idem_board::timing::"),
            "{file} does not use the timing policy"
        );
        for name in names {
            assert!(code.contains(name), "{file} does not use {name}");
        }
    }
}

#[test]
fn no_file_of_the_feed_writes_one_of_its_durations() {
    let mut files = vec![
        "firmware/src/bin/feed.rs".to_string(),
        "host-lib/src/image_consumer.rs".to_string(),
        "board/tests/feed_link.rs".to_string(),
    ];
    for dir in ["board/src", "firmware/src", "host/src/cmd/device"] {
        for entry in fs::read_dir(root().join(dir)).unwrap() {
            let name = entry.unwrap().file_name().into_string().unwrap();
            if name.ends_with(".rs") && name != "timing.rs" {
                files.push(format!("{dir}/{name}"));
            }
        }
    }
    let mut found = Vec::new();
    for file in &files {
        for (n, word) in literals(&code(&read(file))) {
            for (value, words) in spellings() {
                if n == value && words.contains(&word.as_str()) {
                    found.push(format!("{file}: {n} after {word:?}"));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "the feed's durations outside its timing policy: {found:#?}"
    );
    // The reading finds a duration where there is one.
    let sample = "const SILENCE_MS: u32 = 250;\nlet d = Duration::from_secs(2);\n// 500 ms\n";
    let hits: Vec<u64> = literals(&code(sample))
        .into_iter()
        .filter(|(n, w)| {
            spellings()
                .iter()
                .any(|(v, ws)| v == n && ws.contains(&w.as_str()))
        })
        .map(|(n, _)| n)
        .collect();
    assert_eq!(hits, [250, 2]);
}
