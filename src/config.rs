//! A run's config as a person writes it: a TOML file of any subset of the keys of
//! [`TrainConfig`] (`[env]`, `[qnet]` (the network and its optimizer), `[replay]`,
//! `[reward]`, `[schedule]`, `[run]`), then `--set key=value` overrides (`qnet.lr=3e-4`,
//! `run.steps=50000`), laid over the backend's preset.
//!
//! Every key given is checked against the config's own shape before anything is read: an
//! unknown key is refused with the keys its section has, a value of the wrong type with the
//! type the key takes; then the resolved config is validated as a whole
//! ([`TrainConfig::validate`], whose errors name the key). [`to_toml`] prints the resolved
//! config in the same form, so `tallyho train --print-config > run.toml` is a valid file.

use crate::error::{Error, Result};
use std::path::Path;
use tallyho_oracle::TrainConfig;
use toml::{Table, Value};

/// Keys set by the file and the `--set` overrides, merged (the overrides win), each
/// checked against `shape` (a config's own table).
pub fn overrides(file: Option<&Path>, sets: &[String], shape: &Table) -> Result<Table> {
    let mut table = Table::new();
    if let Some(path) = file {
        let text = std::fs::read_to_string(path).map_err(|err| Error::Io {
            what: format!("reading the config file {}", path.display()),
            err,
        })?;
        let parsed: Table = toml::from_str(&text)
            .map_err(|e| Error::Settings(format!("{} is not valid TOML: {e}", path.display())))?;
        check(&parsed, shape, shape, "", &path.display().to_string())?;
        merge(&mut table, parsed);
    }
    for set in sets {
        let one = parse_set(set)?;
        check(&one, shape, shape, "", &format!("--set {set}"))?;
        merge(&mut table, one);
    }
    Ok(table)
}

/// `key.path=value` as a one-key table; the value is TOML (`3e-4`, `true`, `[3, 5, 3]`), or
/// a bare string where it is not.
fn parse_set(set: &str) -> Result<Table> {
    let Some((key, value)) = set.split_once('=') else {
        return Err(Error::Settings(format!(
            "--set {set}: expected key=value, as in --set qnet.lr=3e-4"
        )));
    };
    let (key, value) = (key.trim(), value.trim());
    let parsed = toml::from_str::<Table>(&format!("v = {value}"))
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| Value::String(value.to_string()));
    let mut path: Vec<&str> = key.split('.').collect();
    if key.is_empty() || path.iter().any(|p| p.is_empty()) {
        return Err(Error::Settings(format!(
            "--set {set}: {key:?} is not a key path: write section.key, as in qnet.lr"
        )));
    }
    let mut node = parsed;
    while let Some(last) = path.pop() {
        let mut t = Table::new();
        t.insert(last.to_string(), node);
        node = Value::Table(t);
    }
    match node {
        Value::Table(t) => Ok(t),
        _ => Err(Error::Settings(format!("--set {set}: no key"))),
    }
}

/// Every key of `given` exists in `shape` (the part of `root`, the whole config's table, at
/// `prefix`) at the same path, with a value of its type that the key can hold (an integer
/// in the range of its type, a list of the elements it takes).
fn check(given: &Table, root: &Table, shape: &Table, prefix: &str, origin: &str) -> Result<()> {
    for (key, value) in given {
        let path = format!("{prefix}{key}");
        let Some(want) = shape.get(key) else {
            let known: Vec<&str> = shape.keys().map(String::as_str).collect();
            let section = if prefix.is_empty() {
                "the config".to_string()
            } else {
                format!("[{}]", prefix.trim_end_matches('.'))
            };
            return Err(Error::Settings(format!(
                "{origin}: unknown key {path}: {section} has {}",
                known.join(", ")
            )));
        };
        match (want, value) {
            (Value::Table(w), Value::Table(v)) => check(v, root, w, &format!("{path}."), origin)?,
            (w, v) if same_kind(w, v) => fits(root, &path, v, w, origin)?,
            (w, v) => {
                return Err(Error::Settings(format!(
                    "{origin}: {path} = {v} is {}, but {path} takes {} (the default is {w})",
                    kind(v),
                    kind(w)
                )))
            }
        }
    }
    Ok(())
}

/// Keys that size a backend's preset (`train::Preset::config`) before the config is
/// validated, with their bound (the one `TrainConfig::validate` holds them to) and its fix.
const BOUNDED: [(&str, i64, &str); 1] = [("env.envs", 1 << 24, "lower --envs")];

/// `value` at `path` (`section.key`) is one the config can hold: the whole config's table
/// `root` with it set reads back as a [`TrainConfig`]. Refused naming the key, the value,
/// what the key takes and its default `want`.
fn fits(root: &Table, path: &str, value: &Value, want: &Value, origin: &str) -> Result<()> {
    let mut t = root.clone();
    let mut node = &mut t;
    let keys: Vec<&str> = path.split('.').collect();
    let Some((last, sections)) = keys.split_last() else {
        return Ok(());
    };
    for key in sections {
        match node.get_mut(*key) {
            Some(Value::Table(inner)) => node = inner,
            _ => return Ok(()),
        }
    }
    if let (Some(&(_, max, fix)), Some(v)) = (
        BOUNDED.iter().find(|(key, _, _)| *key == path),
        value.as_integer(),
    ) {
        if v > max {
            return Err(Error::Settings(format!(
                "{origin}: {path} = {v} is above {max}, the most it can be: {fix}"
            )));
        }
    }
    node.insert(last.to_string(), value.clone());
    match Value::Table(t).try_into::<TrainConfig>() {
        Ok(_) => Ok(()),
        Err(e) => {
            let why = e.to_string();
            let why = why.lines().next().unwrap_or("").trim();
            Err(Error::Settings(format!(
                "{origin}: {path} = {value} is not a value {path} can hold ({why}): give {} (the default is {want})",
                takes(why)
            )))
        }
    }
}

/// What a key takes, from serde's `expected ...` of its refusal.
fn takes(why: &str) -> &'static str {
    let expected = why.rsplit("expected ").next().unwrap_or("");
    let ty = expected.split(|c: char| !c.is_ascii_alphanumeric()).next();
    match ty.unwrap_or("") {
        "usize" | "u64" => "an integer from 0 to 18446744073709551615",
        "u32" => "an integer from 0 to 4294967295",
        "i32" => "an integer from -2147483648 to 2147483647",
        "f32" | "f64" => "a number",
        "a" if expected.starts_with("a boolean") => "true or false",
        _ => "a value of the key's type",
    }
}

fn same_kind(want: &Value, got: &Value) -> bool {
    match (want, got) {
        (Value::Float(_), Value::Integer(_)) => true,
        (Value::Array(_), Value::Array(_)) => true,
        (w, g) => std::mem::discriminant(w) == std::mem::discriminant(g),
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::String(_) => "a string",
        Value::Integer(_) => "an integer",
        Value::Float(_) => "a number",
        Value::Boolean(_) => "true or false",
        Value::Datetime(_) => "a date",
        Value::Array(_) => "a list",
        Value::Table(_) => "a section",
    }
}

fn merge(into: &mut Table, from: Table) {
    for (key, value) in from {
        match (into.get_mut(&key), value) {
            (Some(Value::Table(a)), Value::Table(b)) => merge(a, b),
            (_, v) => {
                into.insert(key, v);
            }
        }
    }
}

/// Every key a config file may set, with a value of its type: the default config's table,
/// its optional keys (`qnet.polyak_tau`) included.
pub fn shape() -> Result<Table> {
    let mut cfg = TrainConfig::default();
    cfg.qnet.polyak_tau = Some(0.005);
    table_of(&cfg)
}

/// A config's own table: its every key with its value.
pub fn table_of(cfg: &TrainConfig) -> Result<Table> {
    Table::try_from(cfg).map_err(|e| Error::Settings(format!("the config as TOML: {e}")))
}

/// `base` with the keys of `over` set (keys already checked by [`overrides`]).
pub fn apply(base: &TrainConfig, over: &Table) -> Result<TrainConfig> {
    let mut t = table_of(base)?;
    merge(&mut t, over.clone());
    Value::Table(t)
        .try_into()
        .map_err(|e| Error::Settings(format!("the config: {e}")))
}

/// The resolved config as a TOML file.
pub fn to_toml(cfg: &TrainConfig) -> Result<String> {
    toml::to_string_pretty(cfg).map_err(|e| Error::Settings(format!("the config as TOML: {e}")))
}

/// The keys where `a` and `b` differ, each with both values (`qnet.lr: 0.0001 vs 0.001`);
/// sections named in `skip` are left out.
pub fn differences(a: &TrainConfig, b: &TrainConfig, skip: &[&str]) -> Result<Vec<String>> {
    let (ta, tb) = (table_of(a)?, table_of(b)?);
    let mut out = Vec::new();
    diff(&ta, &tb, "", skip, &mut out);
    Ok(out)
}

fn diff(a: &Table, b: &Table, prefix: &str, skip: &[&str], out: &mut Vec<String>) {
    let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
    keys.sort();
    keys.dedup();
    for key in keys {
        let path = format!("{prefix}{key}");
        if skip.contains(&path.as_str()) {
            continue;
        }
        match (a.get(key), b.get(key)) {
            (Some(Value::Table(x)), Some(Value::Table(y))) => {
                diff(x, y, &format!("{path}."), skip, out)
            }
            (x, y) if x != y => {
                let show = |v: Option<&Value>| v.map_or("(none)".to_string(), |v| v.to_string());
                out.push(format!("{path}: {} vs {}", show(x), show(y)));
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("tallyho-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(format!(
            "{:x}.toml",
            text.len() * 7919 + text.bytes().map(u64::from).sum::<u64>() as usize
        ));
        std::fs::write(&p, text).unwrap();
        p
    }

    fn resolve(text: Option<&str>, sets: &[&str]) -> Result<TrainConfig> {
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        let path = text.map(file);
        let over = overrides(path.as_deref(), &sets, &shape().unwrap())?;
        apply(&TrainConfig::default(), &over)
    }

    #[test]
    fn a_file_and_sets_override_the_base_and_the_sets_win() {
        let cfg = resolve(
            Some("[qnet]\nlr = 0.001\nh1 = 128\n[run]\nsteps = 777\n"),
            &[
                "qnet.lr=3e-4",
                "schedule.epsilon.end=0.1",
                "qnet.polyak_tau=0.005",
            ],
        )
        .unwrap();
        assert_eq!(cfg.qnet.lr, 3e-4);
        assert_eq!(cfg.qnet.h1, 128);
        assert_eq!(cfg.run.steps, 777);
        assert_eq!(cfg.schedule.epsilon.end, 0.1);
        let base = TrainConfig::default();
        assert_eq!(cfg.qnet.h2, base.qnet.h2, "keys not given keep the base's");
        assert_eq!(cfg.env, base.env);
    }

    #[test]
    fn an_unknown_key_is_refused_with_the_keys_its_section_has() {
        let err = resolve(Some("[qnet]\nlrr = 0.001\n"), &[])
            .unwrap_err()
            .to_string();
        assert!(err.contains(": unknown key qnet.lrr: [qnet] has "), "{err}");
        assert!(err.contains("lr"), "{err}");
        let err = resolve(None, &["colour=red"]).unwrap_err().to_string();
        assert!(
            err.starts_with("--set colour=red: unknown key colour: the config has env, qnet"),
            "{err}"
        );
    }

    #[test]
    fn a_value_of_the_wrong_type_names_the_key_and_the_type_it_takes() {
        let err = resolve(None, &["env.envs=many"]).unwrap_err().to_string();
        assert_eq!(
            err,
            "--set env.envs=many: env.envs = \"many\" is a string, but env.envs takes an integer (the default is 256)"
        );
        let err = resolve(Some("qnet = 3\n"), &[]).unwrap_err().to_string();
        assert!(
            err.contains("qnet = 3 is an integer, but qnet takes a section"),
            "{err}"
        );
    }

    #[test]
    fn malformed_input_is_refused_with_the_form_expected() {
        let err = resolve(None, &["qnet.lr"]).unwrap_err().to_string();
        assert!(
            err.contains("expected key=value, as in --set qnet.lr=3e-4"),
            "{err}"
        );
        let err = resolve(Some("[qnet\nlr = 1\n"), &[])
            .unwrap_err()
            .to_string();
        assert!(err.contains("is not valid TOML"), "{err}");
        let err = overrides(
            Some(Path::new("/nonexistent/run.toml")),
            &[],
            &shape().unwrap(),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("reading the config file /nonexistent/run.toml"),
            "{err}"
        );
    }

    #[test]
    fn the_printed_config_reads_back_as_the_same_config() {
        let mut cfg = TrainConfig::default();
        cfg.qnet.polyak_tau = Some(0.01);
        cfg.run.steps = 123;
        let text = to_toml(&cfg).unwrap();
        assert!(text.contains("[qnet]") && text.contains("[run]"), "{text}");
        let path = file(&text);
        let over = overrides(Some(&path), &[], &shape().unwrap()).unwrap();
        assert_eq!(apply(&TrainConfig::default(), &over).unwrap(), cfg);
    }

    #[test]
    fn differences_list_each_key_with_both_values() {
        let a = TrainConfig::default();
        let mut b = a.clone();
        b.qnet.lr = 0.5;
        b.run.steps = 9;
        let d = differences(&a, &b, &["run"]).unwrap();
        assert_eq!(d.len(), 1, "{d:?}");
        assert!(d[0].starts_with("qnet.lr: "), "{d:?}");
        assert!(d[0].ends_with(" vs 0.5"), "{d:?}");
    }
}
