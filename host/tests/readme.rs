//! The README's figures and sample outputs come from the program. Each claim below quotes
//! the README (whitespace aside) and names the run that backs it; the figure is read from
//! the quote itself, so changing either the README or the program without the other
//! fails here. Every ```text block is either the output of a command it names
//! (`<!-- output of: idem ... -->` just above it, checked line by line), or marked as a
//! sample or as not output at all.

use serde_json::Value;

mod common;
use common::{idem, json};

/// The documents whose figures and outputs are checked: the README and every page of
/// the book (docs/*.md), the teachers' page that holds the lessons' answers among them.
fn docs() -> Vec<String> {
    let dir = format!("{}/../docs", env!("CARGO_MANIFEST_DIR"));
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("docs/{n}"))
        .collect();
    names.sort();
    assert!(names.len() > 10, "the book's pages were not found");
    names.insert(0, "README.md".to_string());
    names
}

fn doc(name: &str) -> String {
    std::fs::read_to_string(format!("{}/../{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

/// Every checked document, one after the other.
fn readme() -> String {
    docs().iter().map(|n| doc(n)).collect::<Vec<_>>().join("\n")
}

/// `text` with every run of whitespace as one space.
fn flat(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The figure a quote states: its first bold `**X**`, else its first `[...]` list, else
/// its last number (commas in numbers dropped).
fn figure(says: &str) -> Value {
    if let Some((_, rest)) = says.split_once("**") {
        let bold = rest.split_once("**").unwrap().0.replace(',', "");
        return serde_json::from_str(&bold).unwrap_or(Value::String(bold));
    }
    if let (Some(a), Some(b)) = (says.find('['), says.find(']')) {
        return serde_json::from_str(&says[a..=b]).unwrap();
    }
    let numbers: Vec<i64> = says
        .replace(',', "")
        .split(|c: char| !c.is_ascii_digit())
        .filter(|n| !n.is_empty())
        .map(|n| n.parse().unwrap())
        .collect();
    Value::from(*numbers.last().expect("a quote with a figure"))
}

/// (what the README says, the command behind it with `--json`, where the figure is in
/// its output).
const CLAIMS: &[(&str, &str, &str)] = &[
    // 1. A replay after a crash.
    (
        "The restart resumes at 40",
        "run ddia --store naive --json",
        "/resume_at",
    ),
    (
        "naive ends at **110**",
        "run ddia --store naive --json",
        "/final_total",
    ),
    (
        "so the replayed 40..49 are skipped: **100**",
        "run ddia --store offset --json",
        "/final_total",
    ),
    // 2. A retry after a lost ack.
    (
        "the offset stamp lets it through: **13**",
        "run payments --store offset --json",
        "/final_total",
    ),
    (
        "remembers the ids it applied: **8**",
        "run payments --store message-id --json",
        "/final_total",
    ),
    // And what about ...?
    (
        "it ends at **96**",
        "run ddia --store offset --guarantee at-most-once --crash-after 45 --json",
        "/final_total",
    ),
    (
        "`lost: [46, 47, 48, 49]`",
        "run ddia --store offset --guarantee at-most-once --crash-after 45 --json",
        "/lost",
    ),
    (
        "nothing is lost (**100**, `idem run ddia --store offset --guarantee at-most-once`)",
        "run ddia --store offset --guarantee at-most-once --json",
        "/final_total",
    ),
    (
        "every store ends at **3**",
        "run payments --store naive --producer no-retry --json",
        "/final_total",
    ),
    (
        "(`lost_sends: [\"p17\"]`",
        "run payments --store naive --producer no-retry --json",
        "/lost_sends",
    ),
    (
        "even the naive store ends at **8**",
        "run payments --store naive --producer idempotent --json",
        "/final_total",
    ),
    (
        "A resend is a new sequence, so it lands: **13**",
        "run resend --store naive --producer idempotent --json",
        "/final_total",
    ),
    (
        "only the message-id store ends exact",
        "run resend --store message-id --producer idempotent --json",
        "/verdict",
    ),
    (
        "and lands: **15**",
        "run zombie --store naive --producer idempotent --json",
        "/final_total",
    ),
    (
        "(12 only for the message-id store",
        "run zombie --store message-id --producer idempotent --json",
        "/final_total",
    ),
    (
        "and for producer-seq, which reads the application's own epochs)",
        "run zombie --store producer-seq --producer idempotent --json",
        "/verdict",
    ),
    (
        "still reads it, **15** for the naive store",
        "run zombie --store naive --producer transactional --json",
        "/final_total",
    ),
    (
        "(12 for message-id)",
        "run zombie --store message-id --producer transactional --json",
        "/final_total",
    ),
    (
        "`--isolation read-committed` does every store end at **12**",
        "run zombie --store producer-seq --producer transactional --isolation read-committed --json",
        "/final_total",
    ),
    (
        "the late retry's second insert of r0 changes nothing, **40** exact",
        "run late-retry --store unique-key --json",
        "/final_total",
    ),
    (
        "still ends at **100**, with no stamp at all",
        "run gauge --store set --json",
        "/final_total",
    ),
    (
        "(so does `--store max`)",
        "run gauge --store max --json",
        "/verdict",
    ),
    (
        "`set` ends at **60**",
        "run late-reading --store set --json",
        "/final_total",
    ),
    (
        "while `max` stays at **100**",
        "run late-reading --store max --json",
        "/final_total",
    ),
    (
        "producer-seq is exact at **40**",
        "run late-retry --store producer-seq --json",
        "/final_total",
    ),
    (
        "so it ends at **41**",
        "run late-retry --store message-id --json",
        "/final_total",
    ),
    (
        "(`evicted: 9` in `--json`)",
        "run late-retry --store message-id --json",
        "/evicted",
    ),
    (
        "producer-seq is exact on payments (8)",
        "run payments --store producer-seq --json",
        "/final_total",
    ),
    (
        "and zombie (12)",
        "run zombie --store producer-seq --json",
        "/final_total",
    ),
    (
        "but over on an application resend (13)",
        "run resend --store producer-seq --json",
        "/final_total",
    ),
    (
        "**10** records against",
        "run ddia --store atomic --json",
        "/flash/writes",
    ),
    (
        "records against **110**",
        "run ddia --store offset --json",
        "/flash/writes",
    ),
    (
        "total **106**,",
        "run dual-write --fix none --json",
        "/total",
    ),
    (
        "index **105**, true 90",
        "run dual-write --fix none --json",
        "/index_sum",
    ),
    (
        "true 90. `atomic`",
        "run dual-write --fix none --json",
        "/true_total",
    ),
    (
        "`atomic` and `derive` end exact and consistent at **90**",
        "run dual-write --fix atomic --json",
        "/index_sum",
    ),
    (
        "`atomic` and `derive` end exact and consistent at **90**",
        "run dual-write --fix derive --json",
        "/total",
    ),
    (
        "keeps the total exact at **90**",
        "run dual-write --fix split --json",
        "/total",
    ),
    (
        "leaves only the index wrong (**105**)",
        "run dual-write --fix split --json",
        "/index_sum",
    ),
    (
        "exact at all **315** points",
        "sweep ddia --store two-phase --torn-writes --json",
        "/stores/0/exact",
    ),
    (
        "**30** for the run's 10 checkpoints",
        "run ddia --store two-phase --no-crash --json",
        "/flash/writes",
    ),
    // 4. Real crashes: the resumed run.
    (
        "The resumed `consume` ends at 100",
        "run ddia --store offset --no-crash --json",
        "/final_total",
    ),
    // 5. Every crash point.
    (
        "exact at all 210 single crash points",
        "sweep ddia --store offset --json",
        "/stores/0/exact",
    ),
    (
        "(220 for two-phase",
        "sweep ddia --store two-phase --json",
        "/stores/0/exact",
    ),
    (
        "(548 points in all for the offset store",
        "sweep ddia --store offset --torn-writes --json",
        "/stores/0/exact",
    ),
    (
        "748 for message-id)",
        "sweep ddia --store message-id --torn-writes --json",
        "/stores/0/exact",
    ),
    (
        "the naive store over-counts at 190",
        "sweep ddia --store naive --json",
        "/stores/0/over",
    ),
    (
        "(1,000 duplicate effects in all",
        "sweep ddia --store naive --json",
        "/stores/0/anomalies/duplicate",
    ),
    (
        "worst +10)",
        "sweep ddia --store naive --json",
        "/stores/0/worst_over/by",
    ),
    (
        "the ddia run programs 2,140 bytes of flash",
        "run ddia --store message-id --json",
        "/flash/bytes_written",
    ),
    (
        "the ddia run programs 1,740 bytes",
        "run ddia --store producer-seq --json",
        "/flash/bytes_written",
    ),
    // 7. An effect that moves hardware (docs/teachers.md).
    (
        "Driving the motor after the step loses offset 6's dose: the counter ends at **95**",
        "run pump --way after --json",
        "/pumped_ml",
    ),
    (
        "gives it back, and doubles offset 13's: **105**",
        "run pump --way reassert --json",
        "/pumped_ml",
    ),
    (
        "(offset 13's dose got 10",
        "run pump --way reassert --json",
        "/per_dose_ml/13",
    ),
    (
        "The effects API asks the counter at each boot and ends exact at **100**",
        "run pump --way effects --json",
        "/pumped_ml",
    ),
    (
        "it pumps the missing 3 and ends at **100** too",
        "run pump --way effects --schedule crash@pump:17/2 --json",
        "/pumped_ml",
    ),
    (
        "where `after` ends at 97",
        "run pump --way after --schedule crash@pump:17/2 --json",
        "/pumped_ml",
    ),
    (
        "and `reassert` at 102",
        "run pump --way reassert --schedule crash@pump:17/2 --json",
        "/pumped_ml",
    ),
    // Reference.
    (
        "the next offset to read: 40 for ddia",
        "run ddia --store offset --json",
        "/resume_at",
    ),
    (
        "0 for the worked example",
        "run worked-example --store offset --json",
        "/resume_at",
    ),
    (
        "--schedule \"crash@effect:49,crash@effect:45#2\"` ends at 116",
        "run ddia --store naive --schedule crash@effect:49,crash@effect:45#2 --json",
        "/final_total",
    ),
];

/// Runs `idem` with `args` (split on spaces), which must succeed, and parses its JSON.
fn output(args: &str) -> Value {
    let args: Vec<&str> = args.split(' ').collect();
    json(&args, 0)
}

#[test]
fn every_readme_figure_comes_from_its_run() {
    let text = flat(&readme());
    let mut cache = std::collections::HashMap::new();
    for (says, args, field) in CLAIMS {
        assert!(
            text.contains(&flat(says)),
            "the README no longer says {says:?}"
        );
        let out = cache.entry(*args).or_insert_with(|| output(args));
        let got = out
            .pointer(field)
            .unwrap_or_else(|| panic!("{args}: no {field}"));
        let want = if *field == "/verdict" {
            Value::from("exact")
        } else {
            figure(says)
        };
        assert_eq!(*got, want, "README: {says:?}; idem {args}: {field} = {got}");
    }
}

/// Every ```text block is the output of a command it names (each of its lines, in order,
/// is a line of that command's output; for `whole output of`, the output is the block,
/// line for line), or is marked as a sample (output that changes from run to run or comes
/// from elsewhere: a broker's random topic, QEMU) or as not output.
#[test]
fn every_sample_output_in_the_readme_is_the_programs() {
    let mut checked = 0;
    for name in docs() {
        checked += check_outputs(&name);
    }
    assert!(
        checked >= 2,
        "the sweep's sample and the matrix are checked"
    );
}

/// Checks the text blocks of document `name`; how many were outputs.
fn check_outputs(name: &str) -> usize {
    let readme = doc(name);
    let lines: Vec<&str> = readme.lines().collect();
    let mut checked = 0;
    for (i, line) in lines.iter().enumerate() {
        if *line != "```text" {
            continue;
        }
        let marker = lines[..i]
            .iter()
            .rev()
            .find(|l| !l.trim().is_empty())
            .copied()
            .unwrap_or("");
        if marker.starts_with("<!-- sample:") || marker == "<!-- not output -->" {
            continue;
        }
        let whole = marker.starts_with("<!-- whole output of: idem ");
        let command = marker
            .strip_prefix("<!-- output of: idem ")
            .or_else(|| marker.strip_prefix("<!-- whole output of: idem "))
            .and_then(|m| m.strip_suffix(" -->"))
            .unwrap_or_else(|| {
                panic!(
                    "{name} line {}: a text block needs <!-- output of: idem ... -->, \
                     <!-- sample: why --> or <!-- not output --> above it",
                    i + 1
                )
            });
        let block: Vec<&str> = lines[i + 1..]
            .iter()
            .take_while(|l| **l != "```")
            .copied()
            .collect();
        let out = idem()
            .args(command.split(' ').map(|a| a.trim_matches('"')))
            .output()
            .unwrap();
        let out = String::from_utf8(out.stdout).unwrap();
        let out: Vec<&str> = out.lines().collect();
        let found = if whole {
            out == block
        } else {
            out.windows(block.len()).any(|w| w == block.as_slice())
        };
        assert!(
            found,
            "{name} line {}: the block is not the {}output of `idem {command}`:\n{}\n---\n{}",
            i + 1,
            if whole { "whole " } else { "" },
            block.join("\n"),
            out.join("\n")
        );
        checked += 1;
    }
    checked
}

/// Predict, then observe: the README asks and shows the commands; the answers live in
/// docs/teachers.md. Nothing in README.md, even read raw (`cat README.md`), gives away a
/// lesson's figure.
#[test]
fn the_readme_asks_and_the_teachers_page_answers() {
    let readme = doc("README.md");
    assert!(
        !readme.contains("<details>"),
        "answers hidden only on a rendered page"
    );
    for spoiler in [
        "twice, at two offsets",
        "three events at offsets 0, 1, 2",
        "ends at **110**",
        "naive ends at 110",
        "offset store at 100",
        "exactly 100",
        "| naive | `total += amount` | over 110",
        "### Figures",
    ] {
        assert!(
            !readme.contains(spoiler),
            "README.md gives away {spoiler:?}"
        );
    }
    let teachers = doc("docs/teachers.md");
    for answer in [
        "naive ends at **110**",
        "## Figures",
        "<!-- whole output of: idem matrix -->",
    ] {
        assert!(
            teachers.contains(answer),
            "docs/teachers.md lacks {answer:?}"
        );
    }
}
