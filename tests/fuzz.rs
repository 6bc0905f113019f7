//! Fuzz targets for every reader of outside input: the CSV and LEAN zip loaders, the config
//! (a TOML file and `--set`), the checkpoint reader and the fixture reader. Each target feeds
//! arbitrary bytes and bytes mutated from valid inputs for a time budget and fails on a
//! panic or on an error with an empty message.
//!
//! `TALLYHO_FUZZ_SECS` sets each target's budget (default 2 s, so CI stays brief);
//! `TALLYHO_FUZZ_SEED` replays a run (the seed is printed, and named in a failure). An input
//! that failed is written under `$CARGO_TARGET_TMPDIR/fuzz-failures/<target>/`; once fixed,
//! commit it under `tests/bad_inputs/fuzz/<target>/`, where every run replays it first.
//! docs/ROBUSTNESS.md has the commands.

#[path = "bad_inputs/support.rs"]
mod support;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use support::*;
use tallyho::checkpoint::{self, Checkpoint};
use tallyho::harness::fixtures::{self, Replayer};
use tallyho_oracle::market;

/// Each target's time budget.
fn budget() -> Duration {
    let secs = std::env::var("TALLYHO_FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .unwrap_or(2.0);
    Duration::from_secs_f64(secs.max(0.0))
}

/// The run's seed: `TALLYHO_FUZZ_SEED`, else from the clock.
fn seed() -> u64 {
    std::env::var("TALLYHO_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        })
}

/// Fragments worth splicing into text inputs.
const TOKENS: [&[u8]; 24] = [
    b"0",
    b"-1",
    b"NaN",
    b"nan",
    b"inf",
    b"-inf",
    b"1e309",
    b"9223372036854775807",
    b"-9223372036854775808",
    b"18446744073709551616",
    b"4294967296",
    b",",
    b"\n",
    b"\r\n",
    b"\"",
    b"=",
    b"[",
    b"]",
    b"{",
    b"}",
    b"\xff\xfe",
    b"\0",
    b"2013-10-07 00:00",
    b"_",
];

/// One to eight stacked mutations of `base`: bit flips, random bytes, insertions and
/// deletions, truncation, duplicated ranges, tokens spliced in.
fn mutate(rng: &mut ChaCha8Rng, base: &[u8]) -> Vec<u8> {
    let mut v = base.to_vec();
    for _ in 0..rng.gen_range(1..=8) {
        let len = v.len();
        let at = if len == 0 { 0 } else { rng.gen_range(0..len) };
        match rng.gen_range(0..8) {
            0 if len > 0 => v[at] ^= 1 << rng.gen_range(0..8),
            1 if len > 0 => v[at] = rng.gen(),
            2 => {
                let n = rng.gen_range(1..=16);
                let bytes: Vec<u8> = (0..n).map(|_| rng.gen()).collect();
                v.splice(at..at, bytes);
            }
            3 if len > 0 => {
                let end = (at + rng.gen_range(1..=64)).min(len);
                v.drain(at..end);
            }
            4 => v.truncate(if len == 0 { 0 } else { rng.gen_range(0..len) }),
            5 if len > 0 => {
                let end = (at + rng.gen_range(1..=64)).min(len);
                let copy = v[at..end].to_vec();
                let to = rng.gen_range(0..=len);
                v.splice(to..to, copy);
            }
            6 => {
                let t = TOKENS[rng.gen_range(0..TOKENS.len())];
                if len > 0 && rng.gen_bool(0.5) {
                    let end = (at + rng.gen_range(1..=8)).min(len);
                    v.splice(at..end, t.iter().copied());
                } else {
                    v.splice(at..at, t.iter().copied());
                }
            }
            _ if len > 0 => {
                // A digit changed: reaches values that stay parsable.
                let digits: Vec<usize> = (0..len).filter(|&i| v[i].is_ascii_digit()).collect();
                if !digits.is_empty() {
                    let i = digits[rng.gen_range(0..digits.len())];
                    v[i] = b'0' + rng.gen_range(0..10);
                }
            }
            _ => v.push(rng.gen()),
        }
    }
    v
}

/// An input and what it did.
enum Outcome {
    Ok,
    Refused(String),
}

/// Runs `target` on the committed regression inputs of `name`, then on fuzzed inputs
/// (arbitrary bytes one time in ten, else a mutation of a `corpus` entry) until the budget
/// is spent; fails on any panic or empty error message, naming the seed and the saved
/// input.
fn fuzz(name: &str, corpus: &[Vec<u8>], mut target: impl FnMut(&[u8]) -> Outcome) {
    let seed = seed();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let failures_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("fuzz-failures")
        .join(name);
    let mut failures = Vec::new();
    let mut check = |input: &[u8], origin: &str, failures: &mut Vec<String>| -> bool {
        let outcome = catch_unwind(AssertUnwindSafe(|| target(input)));
        let why = match outcome {
            Ok(Outcome::Ok) => return true,
            Ok(Outcome::Refused(msg)) if !msg.trim().is_empty() => return false,
            Ok(Outcome::Refused(_)) => "an error with an empty message".to_string(),
            Err(p) => format!(
                "a panic: {}",
                p.downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default()
            ),
        };
        std::fs::create_dir_all(&failures_dir).unwrap();
        let file = failures_dir.join(format!("{origin}.bin"));
        std::fs::write(&file, input).unwrap();
        failures.push(format!("{why} (input saved as {})", file.display()));
        false
    };
    let regressions = repo().join("tests/bad_inputs/fuzz").join(name);
    let mut replayed = 0;
    if let Ok(entries) = std::fs::read_dir(&regressions) {
        for e in entries {
            let p = e.unwrap().path();
            let stem = p.file_stem().unwrap().to_string_lossy().to_string();
            check(
                &std::fs::read(&p).unwrap(),
                &format!("regression-{stem}"),
                &mut failures,
            );
            replayed += 1;
        }
    }
    let (start, budget) = (Instant::now(), budget());
    let (mut cases, mut accepted) = (0u64, 0u64);
    while start.elapsed() < budget && failures.len() < 5 {
        let input = if corpus.is_empty() || rng.gen_ratio(1, 10) {
            let n = rng.gen_range(0..512);
            (0..n).map(|_| rng.gen()).collect()
        } else {
            let base = rng.gen_range(0..corpus.len());
            mutate(&mut rng, &corpus[base])
        };
        if check(&input, &format!("seed-{seed}-case-{cases}"), &mut failures) {
            accepted += 1;
        }
        cases += 1;
    }
    let line = format!(
        "fuzz {name}: seed {seed}, {replayed} regression inputs, {cases} cases ({accepted} accepted) in {:.1} s, {} failures",
        start.elapsed().as_secs_f64(),
        failures.len()
    );
    println!("{line}");
    assert!(
        failures.is_empty(),
        "{line} (TALLYHO_FUZZ_SEED={seed} replays it):\n{}",
        failures.join("\n")
    );
    assert!(cases > 0 || budget.is_zero(), "{line}: no case ran");
}

fn refused(e: impl std::fmt::Display) -> Outcome {
    Outcome::Refused(e.to_string())
}

fn outcome<T, E: std::fmt::Display>(r: Result<T, E>) -> Outcome {
    r.map_or_else(refused, |_| Outcome::Ok)
}

#[test]
fn the_csv_loader_survives_fuzzed_files() {
    let dir = scratch("fuzz-csv");
    let file = dir.join("bars.csv");
    let rows = csv_rows(12);
    let mut corpus = vec![csv_text(&rows).into_bytes()];
    corpus.push(
        b"Timestamp,OPEN,high,low,close,volume,extra\r\n\xef\xbb\xbf2013-10-07 00:00,1,2,1,2,3,x\r\n2013-10-07T00:01:00Z,2,2,1,1,0,y\n"
            .to_vec(),
    );
    corpus.push(
        b"timestamp,open,high,low,close,volume\n1381104000,1,1,1,1,1\n1381104060,1,1,1,1,1\n"
            .to_vec(),
    );
    fuzz("csv", &corpus, |bytes| {
        std::fs::write(&file, bytes).unwrap();
        outcome(market::load_csv(&file))
    });
}

#[test]
fn the_lean_loader_survives_fuzzed_zips_and_entries() {
    let dir = scratch("fuzz-lean");
    let real = es_dir();
    let real_trade = std::fs::read(real.join("20131008_trade.zip")).unwrap();
    let real_quote = std::fs::read(real.join("20131008_quote.zip")).unwrap();
    let day = LeanDay::valid("20131008", 6);
    // The input: one byte choosing what it is, then the bytes. 0: the trade zip, 1: the quote
    // zip (the real day's), 2: the trade CSV's text, 3: the quote CSV's text, 4: the trade
    // entry's name, each of the small stored day.
    let tagged = |tag: u8, b: &[u8]| [&[tag][..], b].concat();
    let corpus = vec![
        tagged(0, &real_trade),
        tagged(1, &real_quote),
        tagged(0, &day.trade_zip()),
        tagged(2, day.trade.join("\n").as_bytes()),
        tagged(3, day.quote.join("\n").as_bytes()),
        tagged(4, day.trade_name().as_bytes()),
    ];
    fuzz("lean", &corpus, |input| {
        let Some((&tag, bytes)) = input.split_first() else {
            return Outcome::Ok;
        };
        let (trade_zip, quote_zip) = match tag % 5 {
            0 => (bytes.to_vec(), real_quote.clone()),
            1 => (real_trade.clone(), bytes.to_vec()),
            2 => (zip_bytes(&[(&day.trade_name(), bytes)]), day.quote_zip()),
            3 => (day.trade_zip(), zip_bytes(&[(&day.quote_name(), bytes)])),
            _ => {
                let name = String::from_utf8_lossy(bytes).into_owned();
                let text = day.trade.join("\n");
                (zip_bytes(&[(&name, text.as_bytes())]), day.quote_zip())
            }
        };
        std::fs::write(dir.join("20131008_trade.zip"), trade_zip).unwrap();
        std::fs::write(dir.join("20131008_quote.zip"), quote_zip).unwrap();
        outcome(market::read_lean(&dir))
    });
}

#[test]
fn the_config_parser_survives_fuzzed_files_and_sets() {
    use tallyho::train::{Preset, TrainOptions};
    let dir = scratch("fuzz-config");
    let file = dir.join("run.toml");
    let shape = tallyho::config::shape().unwrap();
    let feature_dim = tallyho_oracle::features::FEATURE_DIM;
    let printed = tallyho::config::to_toml(&tallyho_oracle::TrainConfig::default()).unwrap();
    // The input: a TOML file, or (first byte 0) one `--set` per line.
    let corpus = vec![
        printed.into_bytes(),
        b"[qnet]\nlr = 0.001\nh1 = 48\nbranches = [3, 5, 3]\n[run]\nsteps = 40\n".to_vec(),
        b"[replay]\ncapacity = 4096\nbatch = 64\n[env]\nenvs = 16\n".to_vec(),
        b"\0qnet.lr=3e-4\nenv.envs=16\nschedule.epsilon.end=0.1\nqnet.polyak_tau=0.005".to_vec(),
    ];
    fuzz("config", &corpus, |bytes| {
        let (config, sets) = match bytes.split_first() {
            Some((0, rest)) => (
                None,
                String::from_utf8_lossy(rest)
                    .lines()
                    .map(str::to_string)
                    .collect(),
            ),
            _ => {
                std::fs::write(&file, bytes).unwrap();
                (Some(file.clone()), Vec::new())
            }
        };
        // The check of the keys alone, then the whole resolution (preset, apply, validate).
        if let Err(e) = tallyho::config::overrides(config.as_deref(), &sets, &shape) {
            return refused(e);
        }
        let opts = TrainOptions {
            config,
            sets,
            ..TrainOptions::default()
        };
        outcome(tallyho::train::resolve_config(
            &opts,
            Preset::Cpu,
            feature_dim,
        ))
    });
}

#[test]
fn the_checkpoint_reader_survives_fuzzed_files() {
    use safetensors::tensor::{SafeTensors, TensorView};
    let dir = scratch("fuzz-checkpoint");
    let (market, header, t) = short_run();
    let valid = checkpoint::serialize(&header, &t).unwrap();
    let json = serde_json::to_string(&header).unwrap();
    let st = SafeTensors::deserialize(&valid).unwrap();
    let tensors = st.tensors();
    let file = dir.join("step.safetensors");
    // The input: a tag byte, then (tag even) the checkpoint file's bytes or (tag odd) the
    // text of its `tallyho` header, put into a file of the valid tensors, so that most
    // cases reach the header's fields (the tensors are most of the file).
    let corpus = vec![
        [&[0u8][..], &valid].concat(),
        [&[1u8][..], json.as_bytes()].concat(),
    ];
    fuzz("checkpoint", &corpus, |input| {
        let Some((&tag, bytes)) = input.split_first() else {
            return Outcome::Ok;
        };
        if tag % 2 == 0 {
            std::fs::write(&file, bytes).unwrap();
        } else {
            let meta = [(
                "tallyho".to_string(),
                String::from_utf8_lossy(bytes).into_owned(),
            )]
            .into();
            let views = tensors.iter().map(|(n, v)| {
                let view = TensorView::new(v.dtype(), v.shape().to_vec(), v.data()).unwrap();
                (n.clone(), view)
            });
            std::fs::write(&file, safetensors::serialize(views, &Some(meta)).unwrap()).unwrap();
        }
        let c = match Checkpoint::read(&file) {
            Ok(c) => c,
            Err(e) => return refused(e),
        };
        if let Err(e) = c.online() {
            return refused(e);
        }
        outcome(c.trainer(&market, checkpoint::SYNTHETIC))
    });
}

/// The fixture files small enough to fuzz many times a second, and the manifest.
fn fixture_targets(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let p = e.unwrap().path();
            let small = p.metadata().unwrap().len() < 64 * 1024;
            let name = p.file_name()?.to_str()?.to_string();
            (p.is_file() && small).then_some(name)
        })
        .collect();
    names.sort();
    names
}

/// Fuzzes one file of a copy of the fixtures at a time (the input: its name, a NUL byte,
/// its bytes; a name not among them picks a file by its bytes), restoring it after each
/// case, through `read`.
fn fuzz_fixtures(name: &str, read: impl Fn(&Path) -> tallyho::Result<()>) {
    let dir = fixtures_copy(&format!("fuzz-{name}"));
    let names = fixture_targets(&dir);
    assert!(names.iter().any(|n| n == "manifest.json"), "{names:?}");
    let originals: Vec<Vec<u8>> = names
        .iter()
        .map(|n| std::fs::read(dir.join(n)).unwrap())
        .collect();
    let corpus: Vec<Vec<u8>> = names
        .iter()
        .zip(&originals)
        .map(|(n, b)| [n.as_bytes(), b"\0", b].concat())
        .collect();
    fuzz(name, &corpus, |input| {
        let (file, bytes) = match input.iter().position(|&b| b == 0) {
            Some(at) => (&input[..at], &input[at + 1..]),
            None => (&input[..0], input),
        };
        let i = names
            .iter()
            .position(|n| n.as_bytes() == file)
            .unwrap_or_else(|| input.iter().map(|&b| usize::from(b)).sum::<usize>() % names.len());
        let path = dir.join(&names[i]);
        std::fs::write(&path, bytes).unwrap();
        let result = read(&dir);
        std::fs::write(&path, &originals[i]).unwrap();
        outcome(result)
    });
}

/// The reader: the manifest and every file it lists (each tensor's name, dtype, shape and
/// bytes), as `tallyho fixtures check` and the snapshot summary read them.
#[test]
fn the_fixture_reader_survives_fuzzed_files() {
    fuzz_fixtures("fixtures", |dir| {
        let m = fixtures::manifest::load_manifest(dir)?;
        fixtures::manifest::check_fresh(&m)?;
        fixtures::manifest::summary(dir).map(|_| ())
    });
}

/// The reader and the replay of every recorded call through the oracle: a recording whose
/// values do not fit together (a bar index past the market, from
/// tests/bad_inputs/fuzz/fixtures-replay/) is an error naming the kernel, the call and the fix.
#[test]
fn the_fixture_replay_survives_fuzzed_files() {
    fuzz_fixtures("fixtures-replay", |dir| {
        fixtures::check(dir, Replayer::Oracle).map(|_| ())
    });
}
