//! Runs interrupted while writing a checkpoint: killed at three points of the write (half
//! the bytes in the temporary file, the temporary file whole, the new file renamed in
//! place), and stopped by a full disk (a file-size limit: writes fail with EFBIG). Each
//! leaves only whole checkpoints, says what is kept, and resumes from the newest to end
//! bitwise equal to the run that was not interrupted. CPU backend.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

const STEPS: &str = "40";

fn bin() -> PathBuf {
    std::env::var_os("NEXTEST_BIN_EXE_tallyho")
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_tallyho").into())
        .into()
}

/// `tallyho train` of the test's run (CPU, 40 steps, a checkpoint every 10, all kept) into
/// `out`, with extra arguments.
fn train_args(out: &Path, extra: &[&str]) -> Vec<String> {
    let mut a: Vec<String> = [
        "train",
        "--backend",
        "cpu",
        "--steps",
        STEPS,
        "--set",
        "run.checkpoint_every=10",
        "--set",
        "run.keep_checkpoints=10",
        "--set",
        "run.eval_every=0",
        "--quiet",
        "--out",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    a.push(out.display().to_string());
    a.extend(extra.iter().map(|s| s.to_string()));
    a
}

fn checkpoint(out: &Path, step: u64) -> PathBuf {
    out.join("checkpoints")
        .join(format!("step-{step:010}.safetensors"))
}

fn steps_on_disk(out: &Path) -> Vec<u64> {
    tallyho::checkpoint::list(&out.join("checkpoints"))
        .unwrap()
        .into_iter()
        .map(|(k, _)| k)
        .collect()
}

/// The uninterrupted run, once per test process.
fn reference() -> PathBuf {
    static DONE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DONE.get_or_init(|| {
        let out = common::fresh_dir("interrupted-reference");
        let o = Command::new(bin())
            .args(train_args(&out, &[]))
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        out
    })
    .clone()
}

/// Resume `out` to the end and check its later checkpoints are the reference's, byte for
/// byte.
fn resume_matches_reference(out: &Path, from: u64) {
    let o = Command::new(bin())
        .args(["train", "--quiet", "--resume"])
        .arg(out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    let reference = reference();
    for step in (from + 10..=40).step_by(10) {
        assert_eq!(
            std::fs::read(checkpoint(out, step)).unwrap(),
            std::fs::read(checkpoint(&reference, step)).unwrap(),
            "step {step} after resuming from {from}"
        );
    }
}

#[test]
fn a_run_killed_while_writing_a_checkpoint_resumes_from_the_last_whole_one_bitwise() {
    for (point, newest) in [("partial", 20), ("before-rename", 20), ("after-rename", 30)] {
        let out = common::fresh_dir(&format!("interrupted-{point}"));
        let o = Command::new(bin())
            .args(train_args(&out, &[]))
            .env("TALLYHO_CRASH_AT", format!("{point}@step-0000000030"))
            .output()
            .unwrap();
        assert!(
            !o.status.success(),
            "{point}: the planted crash did not happen"
        );
        assert_eq!(
            steps_on_disk(&out).last(),
            Some(&newest),
            "{point}: the newest whole checkpoint"
        );
        // Every checkpoint on disk is whole: it reads back.
        for step in steps_on_disk(&out) {
            tallyho::checkpoint::Checkpoint::read(&checkpoint(&out, step))
                .unwrap_or_else(|e| panic!("{point}: step {step}: {e}"));
        }
        resume_matches_reference(&out, newest);
    }
}

#[test]
fn a_full_disk_stops_the_run_with_what_is_kept_and_it_resumes_bitwise() {
    let reference = reference();
    let size = |step| {
        std::fs::metadata(checkpoint(&reference, step))
            .unwrap()
            .len()
    };
    // A file-size limit between the checkpoints of steps 20 and 30 (they grow with the
    // replay): the write of step 30 fails as on a full disk.
    let (s20, s30) = (size(20), size(30));
    assert!(s20 < s30, "{s20} {s30}");
    let limit_kib = (s20 + s30) / 2 / 1024;
    let out = common::fresh_dir("interrupted-full");
    let args: Vec<String> = train_args(&out, &[])
        .into_iter()
        .map(|a| format!("'{a}'"))
        .collect();
    let script = format!(
        "ulimit -f {limit_kib}; trap '' XFSZ; exec '{}' {}",
        bin().display(),
        args.join(" ")
    );
    // bash: its ulimit -f counts KiB (POSIX sh's may count 512-byte blocks).
    let o = Command::new("bash").args(["-c", &script]).output().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "the run went past the limit: {stderr}");
    assert!(
        stderr.contains("File too large")
            && stderr.contains("step-0000000030")
            && stderr.contains("keeps metrics.jsonl and the checkpoint of step 20")
            && stderr.contains("--resume"),
        "{stderr}"
    );
    assert_eq!(steps_on_disk(&out), vec![10, 20]);
    let left: Vec<_> = std::fs::read_dir(out.join("checkpoints"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .filter(|n| n.to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(
        left.is_empty(),
        "a failed write leaves no temporary file: {left:?}"
    );
    resume_matches_reference(&out, 20);
}

#[test]
fn an_out_folder_that_cannot_be_made_is_refused_before_any_step() {
    let (ok, _, stderr) = common::tallyho(&[
        "train",
        "--backend",
        "cpu",
        "--steps",
        "5",
        "--out",
        "/dev/null/run",
    ]);
    assert!(!ok);
    assert!(
        stderr.contains("creating the run folder /dev/null/run")
            && stderr.contains("give --out a folder that can be created and written"),
        "{stderr}"
    );
}

#[test]
fn a_non_finite_value_stops_the_run_at_its_step_and_stage_keeping_the_last_good_checkpoint() {
    // TALLYHO_PLANT_FAULT makes a stage's first output element NaN from a step on (tests
    // only). The run stops at the metrics window that saw it, names the step and stage where
    // it first appeared (replayed from the last checkpoint), writes no checkpoint after it,
    // and resumes from the last good one to end as the run without the fault.
    // The optimizer's case updates from step 4 on (learn_start 64 rows): a NaN parameter
    // that a ReLU hides raises no metric flag; the checkpoint due at step 30 refuses it.
    let learn = ["--metrics-every", "10", "--set", "schedule.learn_start=64"];
    let cases: [(&str, u64, &str, &[&str]); 3] = [
        ("reward@33", 34, "reward", &learn[..2]),
        ("acting@12", 13, "acting", &learn[..2]),
        ("optimizer@25", 26, "optimizer", &learn),
    ];
    for (fault, at, stage, extra) in cases {
        let clean = common::fresh_dir(&format!("diverged-reference-{stage}"));
        let o = Command::new(bin())
            .args(train_args(&clean, extra))
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let out = common::fresh_dir(&format!("diverged-{stage}"));
        let o = Command::new(bin())
            .args(train_args(&out, extra))
            .env("TALLYHO_PLANT_FAULT", fault)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{fault}: the run went on: {stderr}");
        let window = at.div_ceil(10) * 10;
        let good = window - 10;
        for says in [
            format!("training diverged at step {window}"),
            format!("the first non-finite value appeared in step {at} (stage {stage}"),
            format!("replayed from the checkpoint of step {good}"),
            format!("keeps metrics.jsonl and the checkpoint of step {good}"),
        ] {
            assert!(stderr.contains(&says), "{fault}: no {says:?} in {stderr}");
        }
        assert_eq!(steps_on_disk(&out).last(), Some(&good), "{fault}");
        let o = Command::new(bin())
            .args(["train", "--quiet", "--resume"])
            .arg(&out)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert_eq!(
            std::fs::read(checkpoint(&out, 40)).unwrap(),
            std::fs::read(checkpoint(&clean, 40)).unwrap(),
            "{fault}: the resumed run ends as the clean one"
        );
    }
}
