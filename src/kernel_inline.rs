//! The kernel sources' include rule, one function shared by build.rs (which embeds every
//! cuda/<file>.cu inlined) and `tallyho mutants` (which inlines a mutated tree the same way,
//! so that an unmutated tree gives the embedded sources byte for byte): every
//! `#include "path"` (path relative to cuda/) is replaced, the first time the file meets it,
//! by that header's text between `// ---- begin path` and `// ---- end path` lines, and
//! `#pragma once` lines are dropped. No dependency: build.rs includes this file by path.

use std::collections::BTreeSet;

/// The text of `rel` (a path relative to cuda/, read by `read`) with its headers inlined;
/// `seen` holds the headers already inlined into the file being built.
pub fn inline(
    rel: &str,
    read: &mut dyn FnMut(&str) -> Result<String, String>,
    seen: &mut BTreeSet<String>,
) -> Result<String, String> {
    let text = read(rel)?;
    let mut out = String::new();
    for line in text.lines() {
        let t = line.trim();
        if t == "#pragma once" {
            continue;
        }
        if let Some(rest) = t.strip_prefix("#include \"") {
            let header = rest.trim_end_matches('"');
            if seen.insert(header.to_string()) {
                out.push_str(&format!("// ---- begin {header}\n"));
                let body = inline(header, read, seen)
                    .map_err(|e| format!("{rel}: #include \"{header}\": {e}"))?;
                out.push_str(&body);
                out.push_str(&format!("// ---- end {header}\n"));
            }
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    Ok(out)
}
