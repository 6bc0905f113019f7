//! The command line: exit codes and error messages a user sees.

mod common;

use common::tallyho;

#[test]
fn fixtures_check_passes_on_the_committed_fixtures() {
    let (ok, stdout, stderr) = tallyho(&["fixtures", "check"]);
    assert!(ok, "{stdout}\n{stderr}");
    assert!(
        stdout.contains("reproduce the recorded GPU results"),
        "{stdout}"
    );
}

#[test]
fn fixtures_check_of_a_missing_folder_fails_and_names_the_fix() {
    let (ok, _, stderr) = tallyho(&["fixtures", "check", "--dir", "/nonexistent/fixtures"]);
    assert!(!ok);
    assert!(stderr.contains("tallyho fixtures record"), "{stderr}");
}

#[test]
fn verify_with_zero_cases_is_refused() {
    let (ok, _, stderr) = tallyho(&["verify", "--cases", "0"]);
    assert!(!ok);
    assert!(stderr.contains("--cases 0 checks nothing"), "{stderr}");
}

#[test]
fn verify_lists_its_groups_and_refuses_a_filter_that_selects_none() {
    let (ok, stdout, stderr) = tallyho(&["verify", "--list"]);
    assert!(ok, "{stderr}");
    for group in [
        "replay",
        "env fused vs unfused",
        "training step",
        "fixtures",
    ] {
        assert!(
            stdout.lines().any(|l| l.starts_with(group)),
            "{group} missing:\n{stdout}"
        );
    }
    // A kernel file selects every group that checks it, and only those.
    let (ok, stdout, stderr) = tallyho(&["verify", "--list", "--only", "replay_sample"]);
    assert!(ok, "{stderr}");
    let names: Vec<&str> = stdout
        .lines()
        .map(|l| l.split("  ").next().unwrap_or(""))
        .collect();
    assert_eq!(names, ["replay", "fixtures", "training step"], "{stdout}");
    let (ok, _, stderr) = tallyho(&["verify", "--only", "replay_smaple"]);
    assert!(!ok);
    assert!(
        stderr.contains("--only \"replay_smaple\" selects no group")
            && stderr.contains("replay_sample"),
        "{stderr}"
    );
}

#[test]
fn kernels_command_compiles_every_kernel_for_sm90() {
    let (ok, stdout, stderr) = tallyho(&["kernels", "--arch", "sm_90"]);
    assert!(ok, "{stderr}");
    for k in tallyho::runtime::KERNELS {
        assert!(
            stdout.contains(&format!("compiled cuda/{}.cu for sm_90", k.name)),
            "{stdout}"
        );
    }
}

fn run_dir(name: &str) -> std::path::PathBuf {
    common::fresh_dir(&format!("cli-{name}"))
}

/// Every line of `dir/metrics.jsonl` parsed, every number in it finite; the last step.
fn finite_metrics(dir: &std::path::Path) -> (usize, u64) {
    let text = std::fs::read_to_string(dir.join("metrics.jsonl"))
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let mut last = 0;
    for line in text.lines() {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}"));
        let obj = v.as_object().unwrap();
        for (k, x) in obj {
            if let Some(f) = x.as_f64() {
                assert!(f.is_finite(), "{k} = {f} in {line}");
            }
        }
        assert_eq!(
            obj["non_finite"].as_array().map(Vec::len),
            Some(0),
            "{line}"
        );
        last = obj["step"].as_u64().unwrap();
    }
    (text.lines().count(), last)
}

#[test]
fn train_on_the_cpu_backend_writes_finite_metrics_and_its_config() {
    let dir = run_dir("synthetic");
    let (ok, stdout, stderr) = tallyho(&[
        "train",
        "--backend",
        "cpu",
        "--steps",
        "250",
        "--metrics-every",
        "100",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(ok, "{stdout}\n{stderr}");
    assert!(
        stderr.contains("training on the CPU oracle backend"),
        "{stderr}"
    );
    assert!(
        stdout.contains(
            "trained to step 250 (250 steps, 4000 transitions this run) on the cpu backend"
        ),
        "{stdout}"
    );
    assert_eq!(finite_metrics(&dir), (3, 250));
    let cfg: toml::Table =
        toml::from_str(&std::fs::read_to_string(dir.join("config.toml")).unwrap()).unwrap();
    assert_eq!(cfg["env"]["envs"].as_integer(), Some(16));
    assert_eq!(cfg["run"]["steps"].as_integer(), Some(250));
    let checkpoints = std::fs::read_dir(dir.join("checkpoints")).unwrap().count();
    assert_eq!(checkpoints, 1, "the run's end writes a checkpoint");
    // The run's end evaluates on the test split and draws its figures.
    let eval: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("eval.json")).unwrap()).unwrap();
    assert_eq!(eval["step"], 250);
    let names: Vec<&str> = eval["policies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["greedy", "random", "buy_and_hold"]);
    assert!(stdout.contains("evaluation at step 250:"), "{stdout}");
    for f in ["training.svg", "training.png", "equity.svg", "equity.png"] {
        let len = std::fs::metadata(dir.join("report").join(f)).map_or(0, |m| m.len());
        assert!(len > 0, "report/{f} is missing or empty");
    }
    // The run's figures draw from what it wrote.
    let (ok, stdout, stderr) = tallyho(&["report", dir.to_str().unwrap()]);
    assert!(ok, "{stdout}\n{stderr}");
    assert!(dir.join("report/training.png").exists(), "{stdout}");
    // A second run into the same folder is refused: nothing written is lost.
    let (ok, _, stderr) = tallyho(&[
        "train",
        "--backend",
        "cpu",
        "--steps",
        "10",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(!ok);
    assert!(
        stderr.contains("already holds a run") && stderr.contains("choose another --out"),
        "{stderr}"
    );
    assert_eq!(
        finite_metrics(&dir),
        (3, 250),
        "the first run's metrics are intact"
    );
}

#[test]
fn train_on_the_es_bars_writes_finite_metrics() {
    let data = tallyho_oracle::shared_data::dir()
        .unwrap_or_else(|e| panic!("{e}"))
        .join("lean-es-minute-2013-10");
    let dir = run_dir("es");
    let (ok, stdout, stderr) = tallyho(&[
        "train",
        "--backend",
        "cpu",
        "--data",
        data.to_str().unwrap(),
        "--steps",
        "200",
        "--envs",
        "8",
        "--metrics-every",
        "50",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(ok, "{stdout}\n{stderr}");
    assert_eq!(finite_metrics(&dir), (4, 200));
}

#[test]
fn market_on_the_es_week_lists_each_days_contract_and_no_roll() {
    let data = tallyho_oracle::shared_data::dir()
        .unwrap_or_else(|e| panic!("{e}"))
        .join("lean-es-minute-2013-10");
    let (ok, stdout, stderr) = tallyho(&["market", "--data", data.to_str().unwrap()]);
    assert!(ok, "{stdout}\n{stderr}");
    for line in [
        "bars: 6708 from 1381104000000 (2013-10-07 00:00:00)",
        "LEAN future minute data, 5 days:",
        "  2013-10-07  es 201312  1344 bars  shift +0",
        "  2013-10-11  es 201312  1253 bars  shift +0",
        "rolls: none (prices as in the files)",
    ] {
        assert!(stdout.contains(line), "`{line}` missing from:\n{stdout}");
    }
}

#[test]
fn train_with_bad_arguments_is_refused_with_the_fix() {
    let dir = run_dir("bad");
    let (ok, _, stderr) = tallyho(&[
        "train",
        "--backend",
        "cpu",
        "--steps",
        "0",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(!ok);
    assert!(
        stderr.contains("run.steps = 0 is outside >= 1: a run trains at least one step"),
        "{stderr}"
    );
    let (ok, _, stderr) = tallyho(&[
        "train",
        "--backend",
        "cpu",
        "--envs",
        "0",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(!ok);
    assert!(stderr.contains("envs is 0"), "{stderr}");
    let (ok, _, stderr) = tallyho(&[
        "train",
        "--backend",
        "cpu",
        "--data",
        "/nonexistent/bars.csv",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(!ok);
    assert!(stderr.contains("/nonexistent/bars.csv"), "{stderr}");
    assert!(
        !dir.join("metrics.jsonl").exists(),
        "a refused run writes nothing"
    );
}

mod gpu {
    use super::*;

    #[test]
    fn train_on_the_cuda_backend_writes_finite_metrics() {
        let dir = run_dir("cuda");
        let (ok, stdout, stderr) = tallyho(&[
            "train",
            "--backend",
            "cuda",
            "--steps",
            "3000",
            "--metrics-every",
            "500",
            "--out",
            dir.to_str().unwrap(),
        ]);
        assert!(ok, "{stdout}\n{stderr}");
        assert!(stderr.contains("(CUDA backend)"), "{stderr}");
        assert_eq!(finite_metrics(&dir), (6, 3000));
    }

    #[test]
    fn train_on_the_cuda_backend_on_the_es_bars_writes_finite_metrics() {
        let data = tallyho_oracle::shared_data::dir()
            .unwrap_or_else(|e| panic!("{e}"))
            .join("lean-es-minute-2013-10");
        let dir = run_dir("cuda-es");
        let (ok, stdout, stderr) = tallyho(&[
            "train",
            "--backend",
            "cuda",
            "--data",
            data.to_str().unwrap(),
            "--steps",
            "2000",
            "--metrics-every",
            "500",
            "--out",
            dir.to_str().unwrap(),
        ]);
        assert!(ok, "{stdout}\n{stderr}");
        assert_eq!(finite_metrics(&dir), (4, 2000));
    }

    #[test]
    fn verify_only_runs_the_groups_it_names_and_writes_json() {
        let dir = common::fresh_dir("verify-only");
        let json = dir.join("verify.json");
        let (ok, stdout, stderr) = tallyho(&[
            "verify",
            "--only",
            "replay_sample",
            "--cases",
            "2",
            "--steps",
            "10",
            "--json",
            json.to_str().unwrap(),
        ]);
        assert!(ok, "{stdout}\n{stderr}");
        let report: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        let kernels: std::collections::BTreeSet<String> = report["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["kernel"].as_str().unwrap().to_string())
            .collect();
        for k in [
            "replay_sample",
            "replay_sample (fixture)",
            "training step, GPU vs CPU trainer x10",
            "training step, graph vs eager x10",
        ] {
            assert!(kernels.contains(k), "{k} missing from {kernels:?}");
        }
        for k in [
            "philox",
            "qnet_loss (NA 51)",
            "env_step",
            "philox (fixture)",
        ] {
            assert!(!kernels.contains(k), "{k} ran: {kernels:?}");
        }
    }

    #[test]
    fn a_fault_planted_in_the_gpu_step_fails_the_training_step_rows() {
        let (ok, stdout, stderr) = tallyho(&[
            "verify",
            "--only",
            "training step",
            "--steps",
            "12",
            "--plant",
            "reward@6",
        ]);
        assert!(!ok, "the planted fault went unseen:\n{stdout}");
        let failed: Vec<&str> = stdout.lines().filter(|l| l.starts_with("FAIL ")).collect();
        // The GPU against the CPU trainer, and the faulty fast twin against the slow one.
        for row in ["GPU vs CPU trainer", "graph vs eager"] {
            assert!(
                failed
                    .iter()
                    .any(|l| l.contains(row) && l.contains("first failure at step 6")),
                "no failing {row} row at step 6:\n{stdout}\n{stderr}"
            );
        }
    }

    #[test]
    fn verify_prints_a_passing_parity_table() {
        let (ok, stdout, stderr) = tallyho(&["verify", "--cases", "3", "--steps", "30"]);
        assert!(ok, "{stdout}\n{stderr}");
        for k in [
            "philox",
            "replay_insert",
            "replay_sample",
            "replay_gather",
            "replay_update_priorities",
        ] {
            assert!(stdout.contains(k), "{k} missing from:\n{stdout}");
        }
        assert!(
            stdout.contains("kernel outputs within tolerance"),
            "{stdout}"
        );
    }
}

#[test]
fn report_command_prints_the_figures_it_wrote_and_refuses_a_folder_without_metrics() {
    let dir = run_dir("report");
    std::fs::create_dir_all(&dir).unwrap();
    let (ok, _, stderr) = tallyho(&["report", dir.to_str().unwrap()]);
    assert!(!ok);
    assert!(
        stderr.contains("a run folder of `tallyho train`"),
        "{stderr}"
    );
    std::fs::write(
        dir.join("metrics.jsonl"),
        r#"{"step":10,"loss":null,"reward":0.5,"epsilon":1.0,"grad_norm":null,"mean_q":0.0,"transitions_per_s":100.0}"#,
    )
    .unwrap();
    let (ok, stdout, stderr) = tallyho(&["report", dir.to_str().unwrap()]);
    assert!(ok, "{stdout}\n{stderr}");
    for f in ["training.svg", "training.png"] {
        let path = dir.join("report").join(f);
        assert!(
            stdout.contains(&format!("wrote {}", path.display())),
            "{stdout}"
        );
        assert!(path.exists());
    }
}

#[test]
fn without_a_usable_gpu_train_falls_back_to_the_cpu_and_cuda_is_refused_with_the_fix() {
    // Device 99 exists on no machine: the same outcome with or without a GPU (no driver,
    // or no such device).
    let bin = std::env::var_os("NEXTEST_BIN_EXE_tallyho")
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_tallyho").into());
    let run = |backend: &str, device: &str, out: &std::path::Path| {
        let o = std::process::Command::new(&bin)
            .args(["train", "--backend", backend, "--steps", "5", "--out"])
            .arg(out)
            .env("TALLYHO_DEVICE", device)
            .output()
            .unwrap();
        (
            o.status.success(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let (ok, stderr) = run("auto", "99", &run_dir("no-gpu-auto"));
    assert!(ok, "{stderr}");
    assert!(
        stderr.contains("no GPU (") && stderr.contains("training on the CPU oracle backend"),
        "{stderr}"
    );
    let (ok, stderr) = run("cuda", "99", &run_dir("no-gpu-cuda"));
    assert!(!ok);
    assert!(
        stderr.contains("run on a machine with an NVIDIA GPU and driver")
            || stderr.contains("device 99 requested")
                && stderr.contains("CUDA_VISIBLE_DEVICES and TALLYHO_DEVICE"),
        "{stderr}"
    );
    let (ok, stderr) = run("cuda", "first", &run_dir("no-gpu-name"));
    assert!(!ok);
    assert!(
        stderr.contains("TALLYHO_DEVICE=\"first\" is not a device number")
            || stderr.contains("run on a machine with an NVIDIA GPU and driver"),
        "{stderr}"
    );
}
