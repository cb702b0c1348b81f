//! The library's layers, checked on its sources (an architecture test): each module of
//! `lab/src` may use modules of its own layer or below, never above, and the modules'
//! `crate::` references form no circle. The order is the one in docs/ARCHITECTURE.md:
//!
//! 1. base: the crate root's helpers, `error`, `agent`, `names`, `process`, `progress`, `cache`,
//!    `stats`, `sample`;
//! 2. supply: `debian`, `toolchain`, `slots`;
//! 3. inputs: `topology`, `host_topology`, `hosts`, `kernel`, `image`, `variant`;
//! 4. guests: `guest`, `vm`, `devices`, `observe`, `workload`, `storage`;
//! 5. runner: `report`, `experiment`, `host`, `scenarios`, `skip`, `bench`, `nextest`, `run`,
//!    `prepare`, `doctor`;
//! 6. the command line: `cli` (its arguments, one call per verb, what comes back printed), which
//!    a crate's own binary runs too (`cli::main_with`); nothing below may use it.
//!
//! `main.rs` is the binary (one call into `cli`) and is not read here. Unit tests
//! (`#[cfg(test)]` modules and their `tests.rs` or `*_tests.rs` files) are not part of the library: they may use
//! the test helpers of any layer (`skip`'s visible skips), as the integration tests do.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const LAYERS: &[(&str, &[&str])] = &[
    (
        "base",
        &[
            "lib",
            "error",
            "arch",
            "agent",
            "build_paths",
            "names",
            "process",
            "progress",
            "cache",
            "stats",
            "sample",
        ],
    ),
    ("supply", &["debian", "toolchain", "cross", "slots"]),
    (
        "inputs",
        &[
            "topology",
            "host_topology",
            "hosts",
            "kernel",
            "image",
            "variant",
        ],
    ),
    (
        "guests",
        &["guest", "vm", "devices", "observe", "workload", "storage"],
    ),
    (
        "runner",
        &[
            "report",
            "experiment",
            "host",
            "scenarios",
            "skip",
            "bench",
            "nextest",
            "run",
            "prepare",
            "doctor",
            "bisect",
            "results",
            "bundle",
        ],
    ),
    ("command line", &["cli"]),
];

/// The files of `lab/src` that make the `lab` binary, not the library.
const BINARY: &[&str] = &["main"];

/// What the crate root re-exports or defines, by the module that owns it.
const ROOT_ITEMS: &[(&str, &str)] = &[
    ("Error", "error"),
    ("Lab", "host"),
    ("BootOptions", "host"),
    ("results_root", "host"),
    ("DEFAULT_TOPOLOGY", "host"),
    ("repo_path", "lib"),
    ("from_archive", "lib"),
    ("ARCHIVE_MARKER", "lib"),
    ("qemu_opt_path", "lib"),
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS
        .iter()
        .position(|(_, modules)| modules.contains(&module))
}

/// The top-level module a source file belongs to (`lab/src/report/html.rs` -> `report`).
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap();
    let first = rel
        .components()
        .next()
        .unwrap()
        .as_os_str()
        .to_string_lossy();
    first.trim_end_matches(".rs").to_string()
}

/// The top-level modules `text` names after `crate::`, outside comments: `crate::a::b`,
/// `crate::{a, b::c}` and the root's items (`crate::Lab` is `host`).
fn references(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let code: String = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    let mut rest = code.as_str();
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        let names: Vec<String> = if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            group[..end]
                .split(',')
                .map(|s| s.trim().split("::").next().unwrap_or("").to_string())
                .collect()
        } else {
            let end = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            vec![rest[..end].to_string()]
        };
        for name in names.into_iter().filter(|n| !n.is_empty()) {
            let module = ROOT_ITEMS
                .iter()
                .find(|(item, _)| *item == name)
                .map_or(name.clone(), |(_, owner)| owner.to_string());
            out.insert(module);
        }
    }
    out
}

/// A source file's library code: the file without its `#[cfg(test)]` items (an attribute at the
/// start of a line, then `mod x;` or an item that runs to the next `}` at the start of a line,
/// as rustfmt writes them).
fn library_code(text: &str) -> String {
    let mut out = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if line != "#[cfg(test)]" {
            out.push(line);
            continue;
        }
        for item in lines.by_ref() {
            if item.ends_with(';') && !item.starts_with(' ') || item == "}" {
                break;
            }
        }
    }
    out.join("\n")
}

/// Every module's references to the other modules.
fn graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut todo = vec![src.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path: PathBuf = entry.path();
            if path.is_dir() {
                todo.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let module = module_of(src, &path);
                if BINARY.contains(&module.as_str())
                    || path.file_name().is_some_and(|n| {
                        let n = n.to_string_lossy();
                        n == "tests.rs" || n.ends_with("_tests.rs")
                    })
                {
                    continue;
                }
                let refs = references(&library_code(&std::fs::read_to_string(&path).unwrap()));
                let entry = graph.entry(module.clone()).or_default();
                entry.extend(refs.into_iter().filter(|r| *r != module));
            }
        }
    }
    graph
}

/// Arrows that point up the layer order, and modules no layer names.
fn violations(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let mut out = Vec::new();
    for (module, refs) in graph {
        let Some(own) = layer_of(module) else {
            out.push(format!(
                "{module} is in no layer: add it to LAYERS and the docs"
            ));
            continue;
        };
        for r in refs {
            match layer_of(r) {
                Some(layer) if layer > own => out.push(format!(
                    "{module} ({}) uses {r} ({}), a layer above it",
                    LAYERS[own].0, LAYERS[layer].0
                )),
                Some(_) => {}
                None => out.push(format!("{module} uses {r}, which is in no layer")),
            }
        }
    }
    out
}

/// A circle of references, if any (depth-first search).
fn circle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == node) {
            let mut c = path[at..].to_vec();
            c.push(node.to_string());
            return Some(c);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(c) = visit(next, graph, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    for node in graph.keys() {
        if let Some(c) = visit(node, graph, &mut Vec::new(), &mut done) {
            return Some(c);
        }
    }
    None
}

#[test]
fn no_module_uses_a_layer_above_it_and_none_is_in_a_circle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = graph(&src);
    assert!(graph.len() > 20, "read {} modules", graph.len());
    let bad = violations(&graph);
    assert!(
        bad.is_empty(),
        "against the layer order:\n  {}",
        bad.join("\n  ")
    );
    assert_eq!(circle(&graph), None, "a circle of modules");
}

#[test]
fn an_upward_import_or_a_circle_is_caught() {
    // What the test sees in sources: groups, paths, the root's re-exports, comments ignored.
    let refs = references(
        "use crate::{cache::Cache, stats};\n// crate::experiment in a comment\nuse crate::Lab;\n\
         fn f() { crate::observe::parse_trace(\"\"); }",
    );
    let want: BTreeSet<String> = ["cache", "stats", "host", "observe"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(refs, want);
    // Unit tests are cut off: a low module's tests may use a test helper of a higher layer.
    let text = "use crate::cache::Cache;\n#[cfg(test)]\nmod tests;\nmod view;\n#[cfg(test)]\n\
                mod more {\n    use crate::skip;\n}\nfn f() { crate::stats::x(); }\n";
    assert_eq!(
        references(&library_code(text)),
        ["cache".to_string(), "stats".to_string()]
            .into_iter()
            .collect::<BTreeSet<_>>()
    );
    // `process` (base) using `topology` (inputs): the arrow the lab had before.
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    g.insert("process".into(), ["topology".to_string()].into());
    g.insert("topology".into(), BTreeSet::new());
    let bad = violations(&g);
    assert_eq!(
        bad,
        ["process (base) uses topology (inputs), a layer above it"]
    );
    // topology <-> host_topology, the circle the lab had before.
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    g.insert("topology".into(), ["host_topology".to_string()].into());
    g.insert("host_topology".into(), ["topology".to_string()].into());
    assert!(violations(&g).is_empty(), "one layer: no upward arrow");
    assert_eq!(
        circle(&g),
        Some(vec![
            "host_topology".to_string(),
            "topology".to_string(),
            "host_topology".to_string()
        ])
    );
}
