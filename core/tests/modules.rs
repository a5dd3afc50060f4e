//! The engine's modules import one another in one direction only: the graph of
//! `crate::` paths between idem-core's top-level modules has no circle. The store
//! contract and its policies' traits, which name each other, are one module
//! (`contract`), under the policies (`persist`) and the dedup rules (`store`); the
//! flash's regions and layout (`flash`) are under the journal.
//!
//! A module is a file under `src/` and the files it includes or holds: `persist.rs` and
//! `persist/io.rs` are `persist`, `testing/flash.rs` is `testing`. An edge is any
//! `crate::<module>` path in the code a build ships (a `use` line or a path inside an
//! item). Comments and doc links are no dependency, and neither are unit tests (a
//! `#[cfg(test)]` module, a `tests.rs`): the journal's tests run on the test flash of
//! `testing`, whose harness drives a consumer.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

/// Every `.rs` file under `dir`, as paths relative to `root`.
fn sources(root: &Path, dir: &Path, out: &mut Vec<String>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(root, &path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let rel = path.strip_prefix(root).unwrap().to_string_lossy();
            out.push(rel.replace('\\', "/"));
        }
    }
}

/// The top-level module a file belongs to (`lib.rs` is the crate root).
fn module_of(file: &str) -> String {
    let first = file.split('/').next().unwrap();
    first.trim_end_matches(".rs").to_string()
}

/// `code` without its `#[cfg(test)]` (or `#[cfg(all(test, ...))]`) modules.
fn without_tests(code: &str) -> String {
    let mut out = String::new();
    let mut rest = code;
    while let Some(i) = rest
        .find("#[cfg(test)]")
        .or_else(|| rest.find("#[cfg(all(test"))
    {
        out.push_str(&rest[..i]);
        let after = &rest[i..];
        let open = after.find(['{', ';']).unwrap_or(after.len());
        if after[..open].contains("mod ") && after[open..].starts_with('{') {
            // Skip the module's balanced braces.
            let mut depth = 0;
            let mut end = after.len();
            for (k, c) in after[open..].char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            end = open + k + 1;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            rest = &after[end..];
        } else {
            // An attribute on something else (`mod tests;` of a file, an item): kept.
            out.push_str(&after[..1]);
            rest = &after[1..];
        }
    }
    out.push_str(rest);
    out
}

/// The code of a file without its comments (line comments, doc comments, and
/// `/* */` blocks).
fn code(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find("/*") {
        out.push_str(&rest[..i]);
        rest = rest[i..].find("*/").map_or("", |j| &rest[i + j + 2..]);
    }
    out.push_str(rest);
    out.lines()
        .map(|l| l.find("//").map_or(l, |i| &l[..i]))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The modules that `code` names after `crate::`, including each name of a
/// `crate::{a, b::c}` group.
fn named(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let name = item.trim().split("::").next().unwrap_or("").trim();
                if !name.is_empty() {
                    out.insert(name.to_string());
                }
            }
        } else {
            let end = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            out.insert(rest[..end].to_string());
        }
    }
    out
}

/// The module graph of the crate at `root` (`src/`): module -> the modules it names.
fn graph(root: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    sources(root, root, &mut files);
    let modules: BTreeSet<String> = files.iter().map(|f| module_of(f)).collect();
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files.iter().filter(|f| !f.ends_with("/tests.rs")) {
        let from = module_of(file);
        let text = fs::read_to_string(root.join(file)).unwrap();
        let to = g.entry(from.clone()).or_default();
        for m in named(&without_tests(&code(&text))) {
            // Names that are not modules (`crate::MaxSize`) are items of the root.
            let m = if modules.contains(&m) {
                m
            } else {
                "lib".to_string()
            };
            if m != from {
                to.insert(m);
            }
        }
    }
    g
}

/// A circle of `g`, if it has one, as the modules around it.
fn circle(g: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    // Depth-first search: 0 unvisited, 1 on the path, 2 done.
    fn visit(
        g: &BTreeMap<String, BTreeSet<String>>,
        m: &str,
        mark: &mut BTreeMap<String, u8>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        mark.insert(m.to_string(), 1);
        path.push(m.to_string());
        for next in g.get(m).into_iter().flatten() {
            match mark.get(next).copied().unwrap_or(0) {
                1 => {
                    let at = path.iter().position(|p| p == next).unwrap();
                    let mut c = path[at..].to_vec();
                    c.push(next.clone());
                    return Some(c);
                }
                0 => {
                    if let Some(c) = visit(g, next, mark, path) {
                        return Some(c);
                    }
                }
                _ => {}
            }
        }
        path.pop();
        mark.insert(m.to_string(), 2);
        None
    }
    let mut mark = BTreeMap::new();
    for m in g.keys() {
        if mark.get(m).copied().unwrap_or(0) == 0 {
            let mut path = Vec::new();
            if let Some(c) = visit(g, m, &mut mark, &mut path) {
                return Some(c);
            }
        }
    }
    None
}

#[test]
fn the_engines_modules_import_one_another_in_one_direction() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let g = graph(&root);
    // The reading finds the engine's modules and the imports between them.
    let modules: Vec<&str> = g.keys().map(String::as_str).collect();
    assert_eq!(
        modules,
        [
            "consumer", "contract", "effects", "flash", "io", "journal", "lib", "log", "persist",
            "store", "testing"
        ]
    );
    assert!(g["effects"].contains("journal") && !g["effects"].contains("store"));
    assert!(g["consumer"].contains("persist") && g["consumer"].contains("store"));
    assert!(g["persist"].contains("journal") && g["journal"].contains("io"));
    assert!(!g["persist"].contains("consumer") && !g["store"].contains("consumer"));
    // The store contract and its persistence name each other (a store names its policy,
    // `Store::Persist: Persistence<Self>`, every policy is generic over its store): both
    // are `contract`, which names neither the policies nor the dedup rules above it.
    assert!(g["store"].contains("contract") && g["persist"].contains("contract"));
    assert!(g["store"].contains("persist") && !g["persist"].contains("store"));
    assert!(!g["contract"].contains("persist") && !g["contract"].contains("store"));
    // The flash's units, regions and layout stand under the journal and the test flash.
    assert_eq!(g["flash"], BTreeSet::from(["io".to_string()]));
    assert!(g["journal"].contains("flash") && g["testing"].contains("flash"));
    assert_eq!(circle(&g), None, "the engine's module graph: {g:?}");
}

#[test]
fn the_reading_finds_a_circle_where_there_is_one() {
    let src = &std::env::temp_dir().join(format!("idem-modules-{}", std::process::id()));
    fs::create_dir_all(src).unwrap();
    fs::write(src.join("lib.rs"), "pub mod a;\npub mod b;\npub mod c;\n").unwrap();
    fs::write(src.join("a.rs"), "use crate::b::B;\n// use crate::c::C;\n").unwrap();
    fs::write(src.join("b.rs"), "use crate::{c::C, a};\n").unwrap();
    fs::write(
        src.join("c.rs"),
        "/// [`crate::a`]\npub struct C;\n#[cfg(test)]\nmod tests {\n    use crate::a;\n}\n",
    )
    .unwrap();
    let g = graph(src);
    assert_eq!(circle(&g), Some(vec!["a".into(), "b".into(), "a".into()]));
    assert_eq!(g["a"], BTreeSet::from(["b".to_string()]));
    assert!(g["c"].is_empty());
    fs::remove_dir_all(src).unwrap();
}
