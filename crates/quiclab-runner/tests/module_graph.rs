//! The runner's modules import each other one way only: a plan does not reach back into the
//! trial, a workload does not reach back into the plan. Read from the sources: every
//! `crate::NAME` (and `super::NAME` in a directory module) outside `#[cfg(test)]` code is an
//! edge from the file's top-level module to NAME.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Top-level module of a source file under `src/`: `plan.rs` -> plan, `stacks/tcp.rs` -> stacks.
fn module_of(rel: &Path) -> String {
    let first = rel
        .components()
        .next()
        .unwrap()
        .as_os_str()
        .to_string_lossy();
    first.trim_end_matches(".rs").to_string()
}

/// The code of a file without its `#[cfg(test)]` module (tests may use anything).
fn without_tests(text: &str) -> &str {
    match text.find("#[cfg(test)]") {
        Some(i) => &text[..i],
        None => text,
    }
}

fn edges() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    let mut dirs = vec![src.clone()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                files.push(p);
            }
        }
    }
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in files {
        let rel = f.strip_prefix(&src).unwrap();
        let from = module_of(rel);
        if from == "lib" {
            continue;
        }
        let text = std::fs::read_to_string(&f).unwrap();
        let code = without_tests(&text);
        let mut targets = BTreeSet::new();
        for (i, _) in code.match_indices("crate::") {
            let rest = &code[i + "crate::".len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                targets.insert(name);
            }
            // `crate::{a, b}`
            if let Some(list) = rest.strip_prefix('{') {
                for item in list.split('}').next().unwrap_or("").split(',') {
                    let name: String = item
                        .trim()
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    if !name.is_empty() {
                        targets.insert(name);
                    }
                }
            }
        }
        targets.remove(&from);
        graph.entry(from).or_default().extend(targets);
    }
    graph
}

/// A cycle through `start`, if any (depth-first).
fn cycle(
    graph: &BTreeMap<String, BTreeSet<String>>,
    node: &str,
    path: &mut Vec<String>,
) -> Option<Vec<String>> {
    if let Some(i) = path.iter().position(|p| p == node) {
        let mut c = path[i..].to_vec();
        c.push(node.to_string());
        return Some(c);
    }
    path.push(node.to_string());
    for next in graph.get(node).into_iter().flatten() {
        if let Some(c) = cycle(graph, next, path) {
            return Some(c);
        }
    }
    path.pop();
    None
}

#[test]
fn the_runner_modules_have_no_import_cycle() {
    let graph = edges();
    // the graph is read: the modules that must import others do
    assert!(graph["trial"].contains("workloads"), "{graph:?}");
    assert!(graph["plan"].contains("stacks"), "{graph:?}");
    for node in graph.keys() {
        if let Some(c) = cycle(&graph, node, &mut Vec::new()) {
            panic!("import cycle: {}", c.join(" -> "));
        }
    }
}

#[test]
fn a_cycle_is_found_when_there_is_one() {
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    g.entry("a".into()).or_default().insert("b".into());
    g.entry("b".into()).or_default().insert("c".into());
    assert!(cycle(&g, "a", &mut Vec::new()).is_none());
    g.entry("c".into()).or_default().insert("a".into());
    assert_eq!(
        cycle(&g, "a", &mut Vec::new()).unwrap(),
        ["a", "b", "c", "a"]
    );
}

/// The runner uses statistics (adaptive iterations, the median trial) from `quiclab-stats`, not
/// from the report it does not render: neither its dependencies nor its code name the report.
#[test]
fn the_runner_does_not_depend_on_the_report() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
    let deps = manifest
        .split("[dependencies]")
        .nth(1)
        .unwrap()
        .split("\n[")
        .next()
        .unwrap();
    assert!(deps.contains("quiclab-stats"), "{deps}");
    assert!(!manifest.contains("quiclab-report"), "{manifest}");
    let mut todo = vec![dir.join("src")];
    let mut files = 0;
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                todo.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                files += 1;
                let text = std::fs::read_to_string(&p).unwrap();
                assert!(!text.contains("quiclab_report::"), "{}", p.display());
            }
        }
    }
    assert!(files > 10, "{files} source files read");
}

/// A trial reaches transports only through the stack registry (`quiclab-stacks`): the runner
/// depends on no transport or endpoint crate itself.
#[test]
fn the_runner_depends_on_no_transport_crate() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
    assert!(manifest.contains("quiclab-stacks"), "{manifest}");
    for krate in [
        "quiclab-tcp",
        "quiclab-quic",
        "quiclab-coded-udp",
        "quiclab-endpoint",
        "quiclab-browser",
    ] {
        assert!(!manifest.contains(krate), "the runner depends on {krate}");
    }
}
