//! Embeds cuda/**/*.cu into a generated kernel table: for each file, its stage name, its
//! source with the project's own `#include "..."` headers inlined (so the binary needs no
//! source tree at run time), its `extern "C" __global__` entry points, and the SHA-256 of
//! the inlined source (what a fixture records as the kernel source hash); and a constant per
//! entry point (`entry::<file>::<ENTRY>`), so no launch site spells a kernel name.
//! Adding a .cu file needs no Rust edit.

#[path = "src/kernel_inline.rs"]
mod kernel_inline;

use sha2::{Digest, Sha256};
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

fn main() {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let cuda = root.join("cuda");
    println!("cargo::rerun-if-changed=cuda");
    let mut files = Vec::new();
    walk(&cuda, &mut files);
    files.sort();
    for f in &files {
        println!("cargo::rerun-if-changed={}", f.display());
    }
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    let mut table = String::from("pub static KERNELS: &[KernelSource] = &[\n");
    let mut consts = String::from(
        "// One constant per entry point of every cuda/<file>.cu, in a module named after the file:\n\
         // launch sites name kernels through these, never by a string literal.\n",
    );
    for file in files
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "cu"))
    {
        let name = file.file_stem().unwrap().to_str().unwrap().to_string();
        let rel = file
            .strip_prefix(&cuda)
            .unwrap()
            .to_str()
            .unwrap()
            .to_string();
        let source = kernel_inline::inline(
            &rel,
            &mut |r| {
                fs::read_to_string(cuda.join(r)).map_err(|e| format!("cannot read cuda/{r}: {e}"))
            },
            &mut BTreeSet::new(),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let entries = entry_points(&source);
        if entries.is_empty() {
            panic!(
                "{} declares no extern \"C\" __global__ entry point",
                file.display()
            );
        }
        let hash = hex(&Sha256::digest(source.as_bytes()));
        writeln!(
            consts,
            "/// The entry points of cuda/{name}.cu.\npub mod {name} {{\n    use super::Entry;"
        )
        .unwrap();
        for e in &entries {
            writeln!(
                consts,
                "    pub const {}: Entry = Entry {{ file: {name:?}, name: {e:?} }};",
                e.to_uppercase()
            )
            .unwrap();
        }
        writeln!(consts, "}}").unwrap();
        let generated = out_dir.join(format!("{name}.cu"));
        fs::write(&generated, &source).unwrap();
        writeln!(
            table,
            "    KernelSource {{ name: {name:?}, source: include_str!({:?}), entry_points: &{entries:?}, sha256: {hash:?} }},",
            generated.display().to_string()
        )
        .unwrap();
    }
    table.push_str("];\n");
    fs::write(out_dir.join("kernel_table.rs"), table).unwrap();
    fs::write(out_dir.join("kernel_entries.rs"), consts).unwrap();
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
    {
        let path = entry.unwrap().path();
        if path.is_dir() {
            walk(&path, out);
        } else if path.extension().is_some_and(|e| e == "cu" || e == "cuh") {
            out.push(path);
        }
    }
}

fn entry_points(source: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = source;
    while let Some(at) = rest.find("extern \"C\" __global__") {
        rest = &rest[at..];
        // The name is the token before the parameter list's '(' (skipping a
        // `__launch_bounds__(...)` between the return type and the name).
        let mut open = rest
            .find('(')
            .expect("entry point without a parameter list");
        while rest[..open].split_whitespace().last() == Some("__launch_bounds__") {
            let close = open
                + rest[open..]
                    .find(')')
                    .expect("__launch_bounds__ without ')'");
            open = close
                + rest[close..]
                    .find('(')
                    .expect("entry point without a parameter list");
        }
        let name = rest[..open].split_whitespace().last().unwrap().to_string();
        names.push(name);
        rest = &rest[open..];
    }
    names
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
