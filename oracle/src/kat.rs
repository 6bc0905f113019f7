//! Known-answer vectors of Philox4x32-10 in the Random123 `kat_vectors` format:
//! `name rounds ctr0 ctr1 ctr2 ctr3 key0 key1 out0 out1 out2 out3`, hex words, `#` comments.

#[derive(Clone, Debug, PartialEq)]
pub struct KatVector {
    pub counter: [u32; 4],
    pub key: [u32; 2],
    pub expected: [u32; 4],
}

/// Parse the philox4x32 10-round lines of a KAT file; other generators' lines are skipped.
pub fn parse_kat(text: &str) -> Result<Vec<KatVector>, String> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() != 12 {
            return Err(format!(
                "line {}: expected 12 fields, found {}: {line:?}",
                n + 1,
                f.len()
            ));
        }
        if f[0] != "philox4x32" || f[1] != "10" {
            continue;
        }
        let mut w = [0u32; 10];
        for (k, s) in f[2..].iter().enumerate() {
            w[k] = u32::from_str_radix(s, 16)
                .map_err(|e| format!("line {}: field {:?}: {e}", n + 1, s))?;
        }
        out.push(KatVector {
            counter: [w[0], w[1], w[2], w[3]],
            key: [w[4], w[5]],
            expected: [w[6], w[7], w[8], w[9]],
        });
    }
    if out.is_empty() {
        return Err("no philox4x32 10-round vectors found".into());
    }
    Ok(out)
}

/// Read and parse `random123-kat/philox4x32_10.txt` from the shared data
/// ([`crate::shared_data::dir`]).
pub fn load_philox_kat() -> Result<Vec<KatVector>, String> {
    let path = crate::shared_data::dir()
        .map_err(|e| e.to_string())?
        .join("random123-kat")
        .join("philox4x32_10.txt");
    let text = std::fs::read_to_string(&path).map_err(|e| {
        format!(
            "cannot read {}: {e} (set TALLYHO_SHARED_DATA to the shared data folder)",
            path.display()
        )
    })?;
    parse_kat(&text)
}
