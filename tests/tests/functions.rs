//! No function outside tests is over 80 lines, in any crate of the house (the workspace,
//! the firmware, the size tool, the adopters' examples).
//!
//! Each source file is parsed with `syn`; a function's length runs from its `fn` to its
//! closing brace. Tests are left out: `tests/`, `fuzz/` and `node_modules/` folders, files
//! named `tests.rs`, `#[cfg(test)]` modules and `#[test]` functions.
//!
//! `tests/long-functions.txt` lists the functions that were longer when the rule landed,
//! each with its length then. The list only shrinks: a listed function may get shorter but
//! not longer, one that meets the rule must leave the list, and nothing joins it.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use syn::visit::Visit;

/// The longest function the rule allows, in lines.
const LIMIT: usize = 80;

/// The house's root: the workspace's, one above this package.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The Rust sources under `dir` that are not tests, nor build output, nor fetched.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            let skipped = ["target", "tests", "fuzz", "node_modules", "pkg"];
            if !name.starts_with('.') && !skipped.contains(&name.as_str()) {
                sources(&path, out);
            }
        } else if name.ends_with(".rs") && name != "tests.rs" {
            out.push(path);
        }
    }
}

/// Whether `attrs` hold `#[test]`, or a `#[cfg(…)]` that names `test`.
fn is_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        let path = a.path();
        if path.is_ident("test") || path.segments.last().is_some_and(|s| s.ident == "test") {
            return true;
        }
        if !path.is_ident("cfg") {
            return false;
        }
        let mut named = false;
        let _ = a.parse_nested_meta(|m| {
            named |= m.path.is_ident("test");
            Ok(())
        });
        named
    })
}

/// The functions of one file: their names (`Type::name` for a method) and lengths.
#[derive(Default)]
struct Functions {
    /// The type of the `impl` or the name of the `trait` being walked, if any.
    owner: Vec<String>,
    found: Vec<(String, usize)>,
}

impl Functions {
    fn record(&mut self, name: &syn::Ident, fn_token: &syn::token::Fn, block: &syn::Block) {
        let start = fn_token.span.start().line;
        let end = block.brace_token.span.close().end().line;
        let name = match self.owner.last() {
            Some(owner) => format!("{owner}::{name}"),
            None => name.to_string(),
        };
        self.found.push((name, end + 1 - start));
    }
}

/// The last identifier of a type's path: `Session` for `Session<'a, F>`.
fn type_name(ty: &syn::Type) -> String {
    match ty {
        syn::Type::Path(p) => p
            .path
            .segments
            .last()
            .map_or_else(|| "?".to_string(), |s| s.ident.to_string()),
        syn::Type::Reference(r) => type_name(&r.elem),
        _ => "?".to_string(),
    }
}

impl<'ast> Visit<'ast> for Functions {
    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if !is_test(&m.attrs) {
            syn::visit::visit_item_mod(self, m);
        }
    }
    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        if !is_test(&f.attrs) {
            self.record(&f.sig.ident, &f.sig.fn_token, &f.block);
            syn::visit::visit_item_fn(self, f);
        }
    }
    fn visit_item_impl(&mut self, i: &'ast syn::ItemImpl) {
        if !is_test(&i.attrs) {
            self.owner.push(type_name(&i.self_ty));
            syn::visit::visit_item_impl(self, i);
            self.owner.pop();
        }
    }
    fn visit_item_trait(&mut self, t: &'ast syn::ItemTrait) {
        self.owner.push(t.ident.to_string());
        syn::visit::visit_item_trait(self, t);
        self.owner.pop();
    }
    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        if !is_test(&f.attrs) {
            self.record(&f.sig.ident, &f.sig.fn_token, &f.block);
            syn::visit::visit_impl_item_fn(self, f);
        }
    }
    fn visit_trait_item_fn(&mut self, f: &'ast syn::TraitItemFn) {
        if let Some(block) = &f.default {
            self.record(&f.sig.ident, &f.sig.fn_token, block);
        }
        syn::visit::visit_trait_item_fn(self, f);
    }
}

/// Every function of `text` over `limit` lines, as (name, lines).
fn long_functions(text: &str, limit: usize) -> Result<Vec<(String, usize)>, syn::Error> {
    let file = syn::parse_file(text)?;
    let mut functions = Functions::default();
    functions.visit_file(&file);
    functions.found.retain(|(_, n)| *n > limit);
    Ok(functions.found)
}

/// `tests/long-functions.txt`: "lines path name" a line, `#` comments.
fn allowed() -> BTreeMap<(String, String), usize> {
    let text = fs::read_to_string(root().join("tests/long-functions.txt")).unwrap();
    let mut out = BTreeMap::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut words = line.split_whitespace();
        let (Some(n), Some(path), Some(name), None) =
            (words.next(), words.next(), words.next(), words.next())
        else {
            panic!("tests/long-functions.txt: {line:?} is not \"lines path name\"");
        };
        let n: usize = n.parse().expect("a length in lines");
        let key = (path.to_string(), name.to_string());
        assert!(out.insert(key, n).is_none(), "{line:?} is listed twice");
    }
    out
}

#[test]
fn no_function_outside_tests_is_over_80_lines_and_the_allowed_list_only_shrinks() {
    let root = root();
    let mut files = Vec::new();
    sources(&root, &mut files);
    files.sort();
    assert!(files.len() > 120, "only {} sources found", files.len());
    let mut allowed = allowed();
    let mut problems = Vec::new();
    for f in &files {
        let path = f.strip_prefix(&root).unwrap().display().to_string();
        let text = fs::read_to_string(f).unwrap();
        let long = match long_functions(&text, LIMIT) {
            Ok(long) => long,
            Err(e) => {
                problems.push(format!("{path}: not parsed ({e})"));
                continue;
            }
        };
        for (name, n) in long {
            match allowed.remove(&(path.clone(), name.clone())) {
                Some(was) if n <= was => {}
                Some(was) => problems.push(format!("{path} {name}: {n} lines, listed at {was}")),
                None => problems.push(format!("{path} {name}: {n} lines (at most {LIMIT})")),
            }
        }
    }
    for ((path, name), n) in allowed {
        problems.push(format!(
            "{path} {name} (listed at {n}) is gone or at most {LIMIT} lines: take it off tests/long-functions.txt"
        ));
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn a_functions_length_runs_from_fn_to_its_closing_brace_and_tests_are_left_out() {
    let body = "    let a = 1;\n".repeat(3);
    let text = format!(
        "/// Doc.\nfn free() {{\n{body}}}\nimpl<T> Thing<T> {{\n    pub fn method(&self) {{\n{body}    }}\n}}\n\
         #[cfg(test)]\nmod tests {{\n    fn helper() {{\n{body}    }}\n}}\n#[test]\nfn case() {{\n{body}}}\n"
    );
    assert_eq!(
        long_functions(&text, 0).unwrap(),
        [("free".to_string(), 5), ("Thing::method".to_string(), 5)]
    );
    assert_eq!(long_functions(&text, 5).unwrap(), []);
}
