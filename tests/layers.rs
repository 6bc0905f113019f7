//! The layer rule of docs/ARCHITECTURE.md, checked on the sources: every `crate::` path in a
//! module of src/ names a module of a lower layer (or its own), so arrows point down only
//! and no stage module reaches the verification harness. The table below is the one in
//! docs/ARCHITECTURE.md; a new top-level module must be placed in it.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The layers, bottom first: a module may import its own layer's earlier entries and
/// anything below.
const LAYERS: &[&[&str]] = &[
    &["error", "kernel_inline"],
    &["runtime", "tensor_file", "config"],
    &["graph", "gemm"],
    &[
        "philox",
        "replay",
        "optimizer",
        "reward",
        "schedule",
        "env",
        "transition",
    ],
    &["qnet"],
    &["experience"],
    &["trainer"],
    &["checkpoint", "eval", "harness", "report", "train"],
];

/// The position of `module` in the layer list: (layer, place in it).
fn rank(module: &str) -> Option<(usize, usize)> {
    LAYERS
        .iter()
        .enumerate()
        .find_map(|(l, names)| names.iter().position(|&n| n == module).map(|p| (l, p)))
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display())) {
        let p = e.unwrap().path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The top-level modules a source names through `crate::` paths (`use crate::{a, b::c}`
/// groups included).
fn imports(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let name: String = item
                    .trim()
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    found.insert(name);
                }
            }
        } else {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            found.insert(name);
        }
    }
    found
}

#[test]
fn every_import_in_src_points_down_the_layer_list() {
    // The run-time manifest folder (nextest sets it when it runs an archive elsewhere).
    let root = PathBuf::from(
        std::env::var("CARGO_MANIFEST_DIR")
            .expect("CARGO_MANIFEST_DIR is set by cargo and nextest"),
    );
    let src = root.join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut broken = Vec::new();
    for f in &files {
        let rel = f.strip_prefix(&src).unwrap();
        let top = rel
            .iter()
            .next()
            .unwrap()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_string();
        if top == "lib" || top == "main" {
            continue;
        }
        let here = rank(&top).unwrap_or_else(|| panic!("src/{} is not in the layer table: place `{top}` in LAYERS and docs/ARCHITECTURE.md", rel.display()));
        // Code only: a comment may name the layer above (what uses this module).
        let text: String = std::fs::read_to_string(f)
            .unwrap()
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        for m in imports(&text) {
            if m == top || m == "oracle" {
                continue;
            }
            let Some(there) = rank(&m) else { continue };
            if there >= here {
                broken.push(format!(
                    "src/{} ({top}) imports crate::{m}, which is not below it",
                    rel.display()
                ));
            }
        }
    }
    assert!(
        files.len() > 20,
        "only {} sources found under {}",
        files.len(),
        src.display()
    );
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

#[test]
fn the_import_scan_sees_grouped_and_plain_paths() {
    let found = imports("use crate::{graph::GraphSlot, qnet};\nlet x = crate::env::Env::new();");
    assert_eq!(
        found.into_iter().collect::<Vec<_>>(),
        ["env", "graph", "qnet"]
    );
    assert!(rank("harness") > rank("experience") && rank("qnet") > rank("replay"));
}
