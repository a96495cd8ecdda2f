//! A stack is one module behind the registry: no code outside a stack's own module (its module
//! in `quiclab-stacks/src/`, or its stack file) names it, not even the registry's. The report, the store and the command line
//! ask the registry, or read what a stack recorded, instead.

use std::path::{Path, PathBuf};

/// Names that are also protocol words (a transport, an HTTP version), which code names as such.
const PROTOCOL_WORDS: [&str; 2] = ["tcp", "coded"];

/// Where a stack's name may appear outside its module, and why.
const ALLOWED: [(&str, &str); 1] = [(
    // a migration of databases recorded before arms said whether their client is a browser
    "crates/quiclab-store/src/lib.rs",
    "\"chrome\"",
)];

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The code of a source file: before its test module, without comment lines.
fn code(text: &str) -> String {
    let before_tests = text.split("#[cfg(test)]").next().unwrap_or("");
    before_tests
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn no_code_outside_a_stacks_module_names_it() {
    let names: Vec<&str> = quiclab_stacks::all()
        .iter()
        .map(|s| s.name())
        .filter(|n| !PROTOCOL_WORDS.contains(n))
        .collect();
    // the registry is read: the built-in and shipped stacks are there
    for n in ["quinn", "chrome", "ngtcp2", "quiche", "quic-go"] {
        assert!(names.contains(&n), "{names:?}");
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let stacks_dir = root.join("crates/quiclab-stacks/src");
    let registry = stacks_dir.join("lib.rs");
    let mut files = Vec::new();
    for krate in std::fs::read_dir(root.join("crates")).unwrap() {
        let src = krate.unwrap().path().join("src");
        if src.is_dir() {
            sources(&src, &mut files);
        }
    }
    assert!(files.len() > 100, "{} files", files.len());
    let mut found = Vec::new();
    // the stack modules; the registry itself is checked
    let own_module = |f: &Path| f.starts_with(&stacks_dir) && f != registry;
    assert!(files.iter().any(|f| own_module(f)) && files.contains(&registry));
    for f in files.iter().filter(|f| !own_module(f)) {
        let rel = f.strip_prefix(&root).unwrap().display().to_string();
        let text = code(&std::fs::read_to_string(f).unwrap());
        for n in &names {
            let quoted = format!("\"{n}\"");
            if text.contains(&quoted) && !ALLOWED.contains(&(rel.as_str(), quoted.as_str())) {
                found.push(format!("{rel}: {quoted}"));
            }
        }
    }
    assert!(
        found.is_empty(),
        "stack names outside their modules: {found:#?}"
    );
}

/// The check finds a name where one is.
#[test]
fn a_stack_name_in_code_is_found_and_one_in_a_comment_or_a_test_is_not() {
    let text = "let a = 1;\n// \"quinn\" in a comment\nlet b = \"quinn\";\n#[cfg(test)]\nmod t { \"chrome\" }";
    let c = code(text);
    assert!(c.contains("\"quinn\""));
    assert!(!c.contains("comment") && !c.contains("\"chrome\""));
}
