//! `tallyho train` as a tool: the config (file, --set, --print-config, errors that name the
//! key), checkpoints and exact resume (bitwise, on the CPU backend here and on the CUDA
//! backend in `gpu::`), refusal of a checkpoint of another run or version, and Ctrl-C.

mod common;

use common::{fresh_dir, tallyho};
use std::path::{Path, PathBuf};
use tallyho::checkpoint::{self, Checkpoint};

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The checkpoint files of a run folder, oldest first.
fn checkpoints(dir: &Path) -> Vec<(u64, PathBuf)> {
    checkpoint::list(&dir.join("checkpoints")).unwrap()
}

/// The metrics windows of a run folder without their wall-clock fields.
fn windows(dir: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(dir.join("metrics.jsonl")).unwrap();
    text.lines()
        .map(|l| {
            let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
            let o = v.as_object_mut().unwrap();
            o.remove("wall_s");
            o.remove("transitions_per_s");
            v
        })
        .collect()
}

/// A short CPU run's keys: updates from step 4 (64 rows of 16 envs), a checkpoint every 50.
const SMALL: [&str; 6] = [
    "--set",
    "schedule.learn_start=64",
    "--set",
    "run.checkpoint_every=50",
    "--metrics-every",
    "20",
];

fn train(backend: &str, extra: &[&str]) -> (bool, String, String) {
    let mut args = vec!["train", "--backend", backend, "--quiet"];
    args.extend_from_slice(extra);
    tallyho(&args)
}

#[test]
fn a_config_file_and_sets_shape_the_run_and_the_printed_config_reads_back() {
    let dir = fresh_dir("config");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("run.toml");
    std::fs::write(&file, "[qnet]\nlr = 0.001\nh1 = 48\n\n[run]\nsteps = 40\n").unwrap();
    let (ok, printed, stderr) = train(
        "cpu",
        &[
            "--print-config",
            "--config",
            s(&file),
            "--set",
            "qnet.lr=0.002",
        ],
    );
    assert!(ok, "{stderr}");
    let t: toml::Table = toml::from_str(&printed).unwrap();
    assert_eq!(
        t["qnet"]["lr"].as_float(),
        Some(0.002),
        "--set wins over the file"
    );
    assert_eq!(t["qnet"]["h1"].as_integer(), Some(48));
    assert_eq!(t["run"]["steps"].as_integer(), Some(40));
    assert_eq!(
        t["env"]["envs"].as_integer(),
        Some(16),
        "the CPU preset below"
    );
    let again = dir.join("printed.toml");
    std::fs::write(&again, &printed).unwrap();
    let (ok, reprinted, _) = train("cpu", &["--print-config", "--config", s(&again)]);
    assert!(ok);
    assert_eq!(
        reprinted, printed,
        "the printed config is a config file of itself"
    );
}

#[test]
fn config_errors_name_the_key_the_value_and_the_fix_and_write_nothing() {
    let dir = fresh_dir("config-errors");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("bad.toml");
    std::fs::write(&file, "[replay]\ncapacityy = 4096\n").unwrap();
    let out = dir.join("run");
    let cases: [(Vec<&str>, &str); 4] = [
        (
            vec!["--config", s(&file)],
            "unknown key replay.capacityy: [replay] has ",
        ),
        (
            vec!["--set", "env.envs=many"],
            "env.envs = \"many\" is a string, but env.envs takes an integer",
        ),
        (
            vec!["--set", "replay.capacity=100"],
            "replay.capacity 100 is below 4 x batch 64 (= 256): raise replay.capacity or lower replay.batch",
        ),
        (
            vec!["--set", "qnet.lr=-1"],
            "qnet.lr = -1 is outside",
        ),
    ];
    for (args, want) in cases {
        let mut a = args.clone();
        a.extend(["--out", s(&out)]);
        let (ok, _, stderr) = train("cpu", &a);
        assert!(!ok, "{args:?} was accepted");
        assert!(stderr.contains(want), "{args:?}: {stderr}");
        assert!(!out.exists(), "{args:?}: a refused run writes nothing");
    }
}

/// Resume the run of `whole` from its checkpoint of step `k` into the folder `cut`, to the
/// run's end; every later checkpoint and metrics window of the two are then equal, bit for
/// bit (wall clocks aside).
fn resume_and_compare(backend: &str, whole: &Path, cut: &Path, k: u64) {
    let from = checkpoints(whole)
        .into_iter()
        .find(|c| c.0 == k)
        .expect("the checkpoint to resume from")
        .1;
    let (ok, stdout, stderr) = train(backend, &["--resume", s(&from), "--out", s(cut)]);
    assert!(ok, "{stdout}\n{stderr}");
    assert!(stdout.contains("trained to step"), "{stdout}");
    let (a, b) = (checkpoints(whole), checkpoints(cut));
    let later: Vec<&(u64, PathBuf)> = a.iter().filter(|c| c.0 > k).collect();
    assert!(!later.is_empty());
    assert_eq!(
        b.iter().map(|c| c.0).collect::<Vec<_>>(),
        later.iter().map(|c| c.0).collect::<Vec<_>>()
    );
    for (x, y) in later.iter().zip(&b) {
        let (bx, by) = (std::fs::read(&x.1).unwrap(), std::fs::read(&y.1).unwrap());
        assert!(bx == by, "step {}: the checkpoints differ", x.0);
    }
    let after: Vec<serde_json::Value> = windows(whole)
        .into_iter()
        .filter(|w| w["step"].as_u64().unwrap() > k)
        .collect();
    assert_eq!(
        windows(cut),
        after,
        "the same metrics windows after step {k}"
    );
}

#[test]
fn a_cpu_run_resumed_from_its_checkpoint_ends_bitwise_equal_to_the_run_that_went_on() {
    let (whole, cut) = (fresh_dir("resume-whole"), fresh_dir("resume-cut"));
    let mut a: Vec<&str> = SMALL.to_vec();
    a.extend(["--steps", "120", "--out", s(&whole)]);
    let (ok, stdout, stderr) = train("cpu", &a);
    assert!(ok, "{stdout}\n{stderr}");
    assert_eq!(
        checkpoints(&whole).iter().map(|c| c.0).collect::<Vec<_>>(),
        [50, 100, 120]
    );
    let c = Checkpoint::read(&checkpoints(&whole)[0].1).unwrap();
    assert!(c.header.step == 50 && c.header.backend == "cpu");
    assert!(
        c.header.config.schedule.learn_start == 64,
        "updates before the cut"
    );
    resume_and_compare("cpu", &whole, &cut, 50);
}

#[test]
fn a_checkpoint_reads_back_into_the_state_it_was_written_from() {
    use tallyho_oracle::trainer::{train, Keep, OracleTrainer};
    let market = tallyho::env::load_market(None).unwrap();
    let mut cfg = tallyho::train::Preset::Cpu.config(30, Some(8), Some(3), market.feature_dim);
    cfg.schedule.learn_start = 64;
    let mut t = OracleTrainer::new(&cfg, &market).unwrap();
    train(&cfg, 0, &mut t, &mut Keep::default()).unwrap();
    assert!(t.adam.step > 0 && t.replay.ctl.size > 0);
    let header = checkpoint::Header {
        format: checkpoint::FORMAT.into(),
        version: checkpoint::VERSION,
        step: 30,
        backend: "cpu".into(),
        market: checkpoint::MarketId::of(&market, "synthetic"),
        config: cfg.clone(),
    };
    let dir = fresh_dir("roundtrip");
    let path = checkpoint::write(&dir, &header, &t, 2).unwrap();
    let c = Checkpoint::read(&path).unwrap();
    assert_eq!(c.header, header);
    let back = c.trainer(&market, "synthetic").unwrap();
    assert_eq!(back.state_differences(&t), Vec::<&str>::new());
    // The newest `keep` are kept.
    for step in [40, 50] {
        let h = checkpoint::Header {
            step,
            ..header.clone()
        };
        checkpoint::write(&dir, &h, &t, 2).unwrap();
    }
    let left: Vec<u64> = checkpoint::list(&dir)
        .unwrap()
        .iter()
        .map(|c| c.0)
        .collect();
    assert_eq!(left, [40, 50]);
    // Another version is refused, naming both.
    let h = checkpoint::Header {
        version: 99,
        ..header.clone()
    };
    let other = dir.join("other.safetensors");
    std::fs::write(&other, checkpoint::serialize(&h, &t).unwrap()).unwrap();
    let err = Checkpoint::read(&other).err().unwrap().to_string();
    assert!(
        err.contains(
            "is tallyho-checkpoint version 99; this tallyho reads tallyho-checkpoint version 1"
        ),
        "{err}"
    );
    // Another market is refused, naming the data to resume with.
    let es = tallyho_oracle::shared_data::dir()
        .unwrap()
        .join("lean-es-minute-2013-10");
    let es_market = tallyho::env::load_market(Some(&es)).unwrap();
    let err = c.trainer(&es_market, s(&es)).err().unwrap().to_string();
    assert!(
        err.contains("trained on synthetic") && err.contains("resume with --data synthetic"),
        "{err}"
    );
    // Not a checkpoint at all.
    let junk = dir.join("junk.safetensors");
    std::fs::write(&junk, b"not a tensor file").unwrap();
    let err = Checkpoint::read(&junk).err().unwrap().to_string();
    assert!(err.contains("is not a safetensors file"), "{err}");
}

#[test]
fn a_resume_that_would_change_the_config_or_not_go_further_is_refused() {
    let dir = fresh_dir("resume-refused");
    let mut a: Vec<&str> = SMALL.to_vec();
    a.extend(["--steps", "60", "--out", s(&dir)]);
    let (ok, _, stderr) = train("cpu", &a);
    assert!(ok, "{stderr}");
    let before = std::fs::read_to_string(dir.join("metrics.jsonl")).unwrap();
    let (ok, _, stderr) = train(
        "cpu",
        &["--resume", s(&dir), "--steps", "90", "--set", "qnet.lr=0.5"],
    );
    assert!(!ok);
    assert!(
        stderr.contains("these keys would change it (checkpoint vs now): qnet.lr: "),
        "{stderr}"
    );
    let (ok, _, stderr) = train("cpu", &["--resume", s(&dir), "--steps", "60"]);
    assert!(!ok);
    assert!(
        stderr.contains("is at step 60, and run.steps is 60: give --steps above 60"),
        "{stderr}"
    );
    let (ok, _, stderr) = train("cpu", &["--resume", "/nonexistent/run"]);
    assert!(!ok);
    assert!(
        stderr.contains("/nonexistent/run holds no checkpoint"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("metrics.jsonl")).unwrap(),
        before,
        "a refused resume leaves the run as it was"
    );
}

#[test]
fn ctrl_c_stops_the_run_with_a_checkpoint_that_it_resumes_from() {
    let dir = fresh_dir("ctrl-c");
    let bin = std::env::var_os("NEXTEST_BIN_EXE_tallyho")
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_tallyho").into());
    let mut args: Vec<&str> = vec!["train", "--backend", "cpu", "--quiet"];
    args.extend(SMALL);
    args.extend(["--steps", "1000000", "--out", s(&dir)]);
    let child = std::process::Command::new(&bin)
        .args(&args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let metrics = dir.join("metrics.jsonl");
    let started = std::time::Instant::now();
    while std::fs::read_to_string(&metrics).map_or(true, |t| t.lines().count() < 2) {
        assert!(started.elapsed().as_secs() < 60, "the run wrote no metrics");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let pid = child.id().to_string();
    let sent = std::process::Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap();
    assert!(sent.success());
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("stopped at step"), "{stdout}");
    assert!(
        stdout.contains("continue with: tallyho train --resume"),
        "{stdout}"
    );
    let (step, _) = *checkpoints(&dir).last().expect("a checkpoint at the stop");
    let last = windows(&dir).last().unwrap()["step"].as_u64().unwrap();
    assert_eq!(
        last, step,
        "the stop closed a metrics window at its checkpoint"
    );
    let to = (step + 30).to_string();
    let (ok, stdout, stderr) = train("cpu", &["--resume", s(&dir), "--steps", &to]);
    assert!(ok, "{stdout}\n{stderr}");
    assert_eq!(checkpoints(&dir).last().unwrap().0, step + 30);
}

mod gpu {
    use super::*;

    #[test]
    fn an_env_count_past_the_device_memory_is_refused_with_the_largest_that_fits() {
        // 16 M envs of a 65536-wide network: terabytes of acting buffers, on any card.
        let dir = fresh_dir("oom");
        let (ok, stdout, stderr) = tallyho(&[
            "train",
            "--backend",
            "cuda",
            "--envs",
            "16777216",
            "--steps",
            "2",
            "--set",
            "qnet.h1=65536",
            "--set",
            "replay.capacity=67108864",
            "--out",
            dir.to_str().unwrap(),
        ]);
        assert!(!ok, "{stdout}");
        assert!(
            stderr.contains("the device is out of memory for 16777216 envs")
                && stderr.contains("MiB are free")
                && stderr.contains("the largest env count that fits is"),
            "{stderr}"
        );
        let fits: usize = stderr
            .split("the largest env count that fits is ")
            .nth(1)
            .and_then(|r| r.split(':').next())
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("no count in {stderr}"));
        assert!(fits > 0 && fits < 16777216, "{fits}");
    }

    #[test]
    fn a_cuda_run_resumed_from_its_checkpoint_ends_bitwise_equal_to_the_run_that_went_on() {
        let (whole, cut) = (fresh_dir("cuda-resume-whole"), fresh_dir("cuda-resume-cut"));
        let (ok, stdout, stderr) = train(
            "cuda",
            &[
                "--set",
                "run.checkpoint_every=150",
                "--envs",
                "256",
                "--metrics-every",
                "50",
                "--steps",
                "400",
                "--out",
                s(&whole),
            ],
        );
        assert!(ok, "{stdout}\n{stderr}");
        let c = Checkpoint::read(&checkpoints(&whole)[0].1).unwrap();
        assert_eq!((c.header.step, c.header.backend.as_str()), (150, "cuda"));
        assert!(
            c.header.config.schedule.learn_start <= 150 * 256,
            "the GPU preset learns before the cut"
        );
        resume_and_compare("cuda", &whole, &cut, 150);
    }
}

#[test]
fn json_output_is_one_event_a_line_and_eval_reads_the_runs_checkpoint() {
    let dir = fresh_dir("json");
    let mut a: Vec<&str> = vec!["train", "--backend", "cpu", "--json"];
    a.extend(SMALL);
    a.extend(["--steps", "60", "--out", s(&dir)]);
    let (ok, stdout, stderr) = tallyho(&a);
    assert!(ok, "{stdout}\n{stderr}");
    let events: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect();
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds.iter().filter(|k| **k == "metrics").count(),
        4,
        "{kinds:?}"
    );
    assert_eq!(
        kinds.iter().filter(|k| **k == "checkpoint").count(),
        2,
        "{kinds:?}"
    );
    assert_eq!(
        kinds.iter().filter(|k| **k == "eval").count(),
        1,
        "{kinds:?}"
    );
    let done = events.last().unwrap();
    assert_eq!(
        (done["event"].as_str(), done["step"].as_u64()),
        (Some("done"), Some(60))
    );
    assert!(done["eval"]["policies"]
        .as_array()
        .is_some_and(|p| p.len() == 3));
    // `tallyho eval` on the run folder: its newest checkpoint, the data it trained on.
    let json = dir.join("eval-again.json");
    let (ok, stdout, stderr) = tallyho(&["eval", s(&dir), "--json", s(&json)]);
    assert!(ok, "{stdout}\n{stderr}");
    assert!(
        stdout.contains("(step 60, trained on synthetic)"),
        "{stdout}"
    );
    for name in ["greedy", "random", "buy_and_hold"] {
        assert!(stdout.contains(name), "{stdout}");
    }
    let again: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let first: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("eval.json")).unwrap()).unwrap();
    assert_eq!(
        again, first,
        "the same checkpoint evaluates to the same report"
    );
    // Data it cannot read is refused, naming the file.
    let csv = dir.join("bars.csv");
    std::fs::write(&csv, "time,open,high,low,close,volume\n").unwrap();
    let (ok, _, stderr) = tallyho(&["eval", s(&dir), "--data", s(&csv)]);
    assert!(!ok);
    assert!(stderr.contains("bars.csv"), "{stderr}");
}
