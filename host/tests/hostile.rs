//! Hostile and careless input, one row per case: the exit code and the one sentence a
//! user gets. Every row is refused before any work starts, with no panic and no file
//! left behind.

use assert_fs::prelude::*;
use predicates::prelude::*;

mod common;
use common::idem;

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
            "huge.jsonl line 2: the amounts add up past what a 64-bit total holds (9223372036854775807)".into(),
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
}

/// A dangling symbolic link given as `--flash` is refused, not replaced by a new file.
#[test]
fn a_dangling_symlink_is_not_replaced() {
    let dir = assert_fs::TempDir::new().unwrap();
    let link = dir.child("link.bin");
    std::os::unix::fs::symlink(dir.path().join("nowhere.bin"), link.path()).unwrap();
    idem()
        .args(["consume", "ddia", "--store", "offset", "--flash"])
        .arg(link.path())
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
