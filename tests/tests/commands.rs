//! The CLI's commands stay thin: no file of `host/src` (the commands) or of
//! `host-lib/src` (their library, idem-host) is over 600 lines, and no command's `run`
//! over 60 (a command parses, makes one library call and prints).

use std::fs;
use std::path::{Path, PathBuf};

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The length in lines of each `fn run(` in `text`, from its line to its closing brace.
fn runs(text: &str) -> Vec<usize> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let t = l.trim_start();
        // Any visibility: `fn run(`, `pub fn run(`, `pub(super) fn run(`.
        let after_vis = match t.strip_prefix("pub") {
            Some(rest) if rest.starts_with('(') => rest.find(')').map_or(rest, |i| &rest[i + 1..]),
            Some(rest) => rest,
            None => t,
        };
        if !after_vis.trim_start().starts_with("fn run(") {
            continue;
        }
        let indent = l.len() - t.len();
        let end = lines[i + 1..]
            .iter()
            .position(|m| {
                m.len() > indent && m[..indent].trim().is_empty() && m[indent..].starts_with('}')
            })
            .map_or(lines.len() - i, |j| j + 2);
        out.push(end);
    }
    out
}

#[test]
fn no_file_of_the_cli_is_over_600_lines_and_no_run_over_60() {
    let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    let (mut files, mut library) = (Vec::new(), Vec::new());
    sources(&root.join("host/src"), &mut files);
    sources(&root.join("host-lib/src"), &mut library);
    assert!(files.len() > 20, "the CLI's sources were not found");
    assert!(
        library.len() > 10,
        "the CLI library's sources were not found"
    );
    files.extend(library);
    let mut long = Vec::new();
    let mut commands = 0;
    for f in &files {
        let text = fs::read_to_string(f).unwrap();
        let name = f.strip_prefix(root).unwrap().display().to_string();
        let n = text.lines().count();
        if n > 600 {
            long.push(format!("{name}: {n} lines"));
        }
        for r in runs(&text) {
            commands += 1;
            if r > 60 {
                long.push(format!("{name}: a run of {r} lines"));
            }
        }
    }
    assert!(commands >= 15, "only {commands} commands' run found");
    assert!(long.is_empty(), "{long:#?}");
}

#[test]
fn a_runs_length_is_counted_to_its_closing_brace() {
    let text =
        "impl Cmd {\n    pub fn run(self) -> u8 {\n        let a = 1;\n        a\n    }\n}\n";
    assert_eq!(runs(text), [4]);
}
