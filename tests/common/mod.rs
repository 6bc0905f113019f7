//! Shared pieces of the integration tests: the device, the comparator assertion, the
//! property-test runner and strategies.
#![allow(dead_code)]

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use tallyho::harness::parity::replay::ReplayCase;
use tallyho::Gpu;
use tallyho_oracle::Comparison;

/// The GPU, or a failure that says why there is none: a GPU test never passes without one.
pub fn gpu() -> Gpu {
    Gpu::new().unwrap_or_else(|e| panic!("this GPU test needs a CUDA device: {e}"))
}

/// Every comparison passed; otherwise fail with the first failure of each output.
#[track_caller]
pub fn assert_all(comparisons: &[Comparison]) {
    let failures: Vec<String> = comparisons.iter().filter_map(|c| c.check().err()).collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(!comparisons.is_empty(), "no output was compared");
}

/// A property runner: PROPTEST_CASES scales the case count; failures persist next to the test.
pub fn runner(source_file: &'static str) -> TestRunner {
    TestRunner::new(Config {
        source_file: Some(source_file),
        ..Config::default()
    })
}

/// Replay cases: batch 1..=1100 (past one block), capacity 4B + 0..3000, width 1..=40.
pub fn replay_cases() -> impl Strategy<Value = ReplayCase> {
    (1usize..=1100, 0usize..3000, 1usize..=40, any::<u64>()).prop_map(
        |(batch, extra, state_dim, seed)| ReplayCase {
            capacity: 4 * batch + extra,
            state_dim,
            batch,
            seed,
        },
    )
}

/// Run `check` on every generated case; a failed comparison fails the property with its text.
pub fn check_property(
    source_file: &'static str,
    check: impl Fn(&ReplayCase) -> tallyho::Result<Vec<Comparison>>,
) {
    runner(source_file)
        .run(&replay_cases(), |case| {
            let comparisons = check(&case).map_err(|e| TestCaseError::fail(e.to_string()))?;
            for c in &comparisons {
                c.check().map_err(TestCaseError::fail)?;
            }
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
}

/// One line per comparison: output, length, max abs and rel error, relative norm, verdict.
pub fn table(comparisons: &[Comparison]) -> String {
    comparisons
        .iter()
        .map(|c| {
            format!(
                "{:<40} {:>8}  max_abs {:>10.3e}  max_rel {:>10.3e}  rel_norm {:>10.3e}  {}",
                c.output,
                c.len,
                c.max_abs,
                c.max_rel,
                c.rel_norm,
                if c.passed() { "pass" } else { "FAIL" }
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Run the `tallyho` binary under test (nextest names it at run time, also in an archive run
/// elsewhere): whether it succeeded, its stdout and stderr.
pub fn tallyho(args: &[&str]) -> (bool, String, String) {
    let bin = std::env::var_os("NEXTEST_BIN_EXE_tallyho")
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_tallyho").into());
    let out = std::process::Command::new(&bin)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run {bin:?}: {e}"));
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A fresh, empty folder `tallyho-<name>-<pid>` under the system's temp dir.
pub fn fresh_dir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("tallyho-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}
