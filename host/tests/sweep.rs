//! `idem sweep`, `idem run --schedule` and `idem plot`, end to end.

use serde_json::Value;

mod common;
use common::{idem, json as json_with, refuses};

fn store<'a>(v: &'a Value, name: &str) -> &'a Value {
    v["stores"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["store"] == name)
        .unwrap()
}

#[test]
fn every_single_crash_point_of_ddia() {
    let v = json_with(&["sweep", "ddia", "--store", "all", "--json"], 0);
    // 100 deliveries, 100 effects and 10 commits.
    let naive = store(&v, "naive");
    assert_eq!(
        (
            naive["schedules"].as_u64(),
            naive["exact"].as_u64(),
            naive["over"].as_u64()
        ),
        (Some(210), Some(20), Some(190))
    );
    // After delivering offset o, o % 10 effects are replayed; after its effect, o % 10 + 1.
    assert_eq!(naive["anomalies"]["duplicate"], 450 + 550);
    assert_eq!(naive["worst_over"]["by"], 10);
    for name in ["offset", "message-id", "atomic"] {
        let s = store(&v, name);
        assert_eq!(
            (s["schedules"].as_u64(), s["exact"].as_u64()),
            (Some(210), Some(210)),
            "{name}"
        );
        assert_eq!(
            s["anomalies"],
            serde_json::json!({"duplicate": 0, "lost-write": 0, "nonmonotonic": 0, "diverged": 0}),
            "{name}"
        );
    }
}

#[test]
fn torn_writes_and_erases_are_swept_too() {
    let v = json_with(
        &[
            "sweep",
            "ddia",
            "--store",
            "offset",
            "--torn-writes",
            "--json",
        ],
        0,
    );
    let s = store(&v, "offset");
    // 210 consumer points, then every word write and erase of the run: 338 at journal
    // format 3, records at their encoded size (format 2's slots: 985 word writes, 100
    // store records of 9 words, 10 position records of 6, 5 headers of 5; 5 erases).
    assert_eq!(
        (s["schedules"].as_u64(), s["exact"].as_u64()),
        (Some(548), Some(548))
    );
    for name in ["message-id", "atomic"] {
        let v = json_with(
            &["sweep", "ddia", "--store", name, "--torn-writes", "--json"],
            0,
        );
        let s = store(&v, name);
        assert_eq!(s["exact"], s["schedules"], "{name}");
    }
}

#[test]
fn random_multi_crash_schedules_and_a_minimized_failure() {
    let v = json_with(
        &[
            "sweep",
            "ddia",
            "--crashes",
            "2",
            "--schedules",
            "300",
            "--seed",
            "7",
            "--torn-writes",
            "--json",
        ],
        0,
    );
    for name in ["offset", "message-id", "atomic"] {
        let s = store(&v, name);
        assert_eq!(
            (s["schedules"].as_u64(), s["exact"].as_u64()),
            (Some(300), Some(300)),
            "{name}"
        );
    }
    let naive = store(&v, "naive");
    assert!(naive["failing"].as_u64().unwrap() > 100, "{naive}");
    // The printed line reruns the failure, and the minimized one still fails.
    for line in [
        naive["rerun"][0].as_str().unwrap(),
        naive["minimized"]["rerun"].as_str().unwrap(),
    ] {
        let (cmd, schedule) = line.split_once(" --schedule ").unwrap();
        let mut args: Vec<&str> = cmd.split_whitespace().skip(1).collect();
        args.extend(["--schedule", schedule.trim_matches('"'), "--json"]);
        let r = json_with(&args, 0);
        assert!(r["final_total"].as_i64().unwrap() > 100, "{line}: {r}");
    }
    assert!(
        !naive["minimized"]["to"].as_str().unwrap().contains(','),
        "one crash is enough to fail naive"
    );
}

#[test]
fn a_sweep_of_payments_fails_the_stores_that_miss_the_retry() {
    let v = json_with(&["sweep", "payments", "--json"], 1);
    assert_eq!(store(&v, "message-id")["exact"], 7);
    assert_eq!(store(&v, "offset")["clean"]["final_total"], 13);
    assert_eq!(store(&v, "offset")["worse_than_clean"], 0);
}

#[test]
fn a_schedule_reruns_exactly() {
    let sched = "crash@effect:49,crash@effect:45#2";
    let naive = json_with(
        &[
            "run",
            "ddia",
            "--store",
            "naive",
            "--schedule",
            sched,
            "--json",
        ],
        0,
    );
    // 40..45 replayed before the second crash, 40..49 after it.
    assert_eq!(naive["final_total"], 100 + 6 + 10);
    assert_eq!(
        naive["crashes"],
        serde_json::json!(["crash@effect:49", "crash@effect:45#2"])
    );
    let offset = json_with(
        &[
            "run",
            "ddia",
            "--store",
            "offset",
            "--schedule",
            sched,
            "--json",
        ],
        0,
    );
    assert_eq!(offset["final_total"], 100);
    let torn = json_with(
        &[
            "run",
            "ddia",
            "--store",
            "offset",
            "--schedule",
            "crash@torn:100,crash@erase:3",
            "--json",
        ],
        0,
    );
    assert_eq!(torn["final_total"], 100);
}

#[test]
fn bad_sweep_and_schedule_input_is_exit_2() {
    let cases: [(&[&str], &str); 5] = [
        (&["sweep", "ddia", "--crashes", "0"], "0 is not in 1..=3"),
        (
            &["sweep", "ddia", "--store", "bogus"],
            "unknown store \"bogus\"",
        ),
        (
            &[
                "run",
                "ddia",
                "--store",
                "naive",
                "--schedule",
                "crash@apply:3",
            ],
            "a crash point is one of deliver, between, effect, prepare, commit, torn, erase",
        ),
        (
            &[
                "run",
                "ddia",
                "--store",
                "naive",
                "--schedule",
                "crash@effect:500",
            ],
            "cannot crash at offset 500",
        ),
        (
            &[
                "run",
                "ddia",
                "--store",
                "naive",
                "--schedule",
                "crash@torn:999999",
            ],
            "the crash point crash@torn:999999 never happened in this run: the run ended first",
        ),
    ];
    for (args, msg) in cases {
        refuses(args, msg);
    }
}

/// `--x offset`: offsets on the x axis, the title and the axis say so, and the replay
/// window spans the redelivered offsets 40..49 (plus the effect of 49).
#[test]
fn plot_puts_offsets_on_the_x_axis() {
    let dir = assert_fs::TempDir::new().unwrap();
    let svg = dir.path().join("by-offset.svg");
    idem()
        .args(["plot", "ddia", "--store", "naive", "--x", "offset", "--svg"])
        .arg(&svg)
        .assert()
        .success();
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.contains("— total against offset</text>"));
    assert!(text.contains(">offset</text>"));
    // 100 offsets over the 810-pixel plot area (from x = 70): 8.1 pixels an offset.
    assert!(
        text.contains(r##"<rect x="394.0" y="60" width="81.0""##),
        "the replay spans offsets 40..50:\n{text}"
    );
}

/// `-o` names the file; the x axis is the offset unless asked; counts are English; a
/// line that runs on another's says so; the position has its own axis, named.
#[test]
fn plot_defaults_and_its_legend() {
    let dir = assert_fs::TempDir::new().unwrap();
    let svg = dir.path().join("p.svg");
    idem()
        .args(["plot", "payments", "--store", "message-id,naive", "-o"])
        .arg(&svg)
        .assert()
        .success();
    let text = std::fs::read_to_string(&svg).unwrap();
    for needle in [
        "— total against offset</text>",
        "message-id store (ends at 8; rings: 1 skipped duplicate; on the true total after every effect)",
        ">committed position (next offset to read)</text>",
        ">total</text>",
    ] {
        assert!(text.contains(needle), "missing {needle}:\n{text}");
    }
    idem()
        .args(["plot", "ddia", "--store", "naive,offset,atomic", "-o"])
        .arg(&svg)
        .assert()
        .success();
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(
        text.contains("drawn over the offset line where the two agree"),
        "{text}"
    );
}

#[test]
fn plot_draws_the_drift() {
    let dir = assert_fs::TempDir::new().unwrap();
    let svg = dir.path().join("ddia.svg");
    idem()
        .args(["plot", "ddia", "--store", "naive,offset", "--svg"])
        .arg(&svg)
        .assert()
        .success();
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.starts_with("<svg"));
    for needle in [
        "crash@effect:49",
        "naive store (ends at 110)",
        "offset store (ends at 100; rings: 10 skipped duplicates;",
        "true total of what was delivered",
        ">replay</text>",
    ] {
        assert!(text.contains(needle), "missing {needle}");
    }
    assert_eq!(
        text.matches("<path").count(),
        4,
        "truth, committed position, two stores"
    );
}

/// The appending producer-seq store rebuilds its table from its newest records at each
/// recovery; with 8 producers interleaved (and their retries), every crash point tried,
/// torn writes among them, ends at the true total.
#[test]
fn eight_producers_rebuild_their_table_after_any_crash() {
    let dir = assert_fs::TempDir::new().unwrap();
    let path = dir.path().join("eight.jsonl");
    let mut rng = idem_sim::rng::SplitMix64::new(8);
    let (mut lines, mut seqs, mut truth) = (String::new(), [0u32; 8], 0i64);
    for i in 0..400 {
        let p = rng.range(0, 7) as usize;
        seqs[p] += 1;
        let amount = rng.range(1, 9) as i64;
        truth += amount;
        let line = format!(
            "{{\"id\": \"m{i}\", \"producer\": {}, \"seq\": {}, \"amount\": {amount}}}\n",
            p + 1,
            seqs[p]
        );
        lines += &line;
        if rng.range(0, 9) == 0 {
            lines += &line; // a retry: the same producer, sequence and id
        }
    }
    std::fs::write(&path, lines).unwrap();
    let log = path.to_str().unwrap();
    let mut points: Vec<String> = (0..400)
        .step_by(7)
        .flat_map(|o| [format!("crash@effect:{o}"), format!("crash@deliver:{o}")])
        .collect();
    points.extend(
        // Records at their encoded size (journal format 3) take some 4 words where
        // format 2's slots took 14: the run's word writes before offset 350 end near
        // 1,500, so the torn points span that (1 to 5,000 in steps of 61 in format 2).
        (1..1500)
            .step_by(18)
            .map(|w| format!("crash@torn:{w},crash@effect:350")),
    );
    for schedule in &points {
        let v = json_with(
            &[
                "run",
                "--log",
                log,
                "--store",
                "producer-seq",
                "--schedule",
                schedule,
                "--json",
            ],
            0,
        );
        assert_eq!(v["final_total"], truth, "{schedule}");
        assert_eq!(v["true_total"], truth, "{schedule}");
    }
}
