//! The recorded GPU fixtures: the oracle reproduces them on every CI run (CPU), the kernels
//! reproduce them bitwise on a GPU, a changed kernel makes its fixture stale, and the
//! reviewable summary is an insta snapshot.

mod common;

use std::path::{Path, PathBuf};
use tallyho::harness::fixtures::{self, Replayer};

fn temp_copy_of_fixtures(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tallyho-fixtures-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for entry in std::fs::read_dir(fixtures::default_dir()).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            std::fs::copy(&path, dir.join(path.file_name().unwrap())).unwrap();
        }
    }
    dir
}

/// Rewrite tensor `name` of the safetensors file at `path` with `change` (its dtype and bytes).
fn rewrite_tensor(path: &Path, name: &str, change: impl FnOnce(safetensors::Dtype, &mut [u8])) {
    use safetensors::tensor::{SafeTensors, TensorView};
    let bytes = std::fs::read(path).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let mut tensors: Vec<(String, safetensors::Dtype, Vec<usize>, Vec<u8>)> = st
        .tensors()
        .into_iter()
        .map(|(n, v)| (n, v.dtype(), v.shape().to_vec(), v.data().to_vec()))
        .collect();
    let (_, dtype, _, data) = tensors
        .iter_mut()
        .find(|(n, ..)| n == name)
        .unwrap_or_else(|| panic!("{} holds no tensor {name}", path.display()));
    change(*dtype, data);
    let views: Vec<(String, TensorView)> = tensors
        .iter()
        .map(|(n, d, s, b)| (n.clone(), TensorView::new(*d, s.clone(), b).unwrap()))
        .collect();
    std::fs::write(path, safetensors::serialize(views, &None).unwrap()).unwrap();
}

#[test]
fn recorded_fixtures_replay_through_the_oracle() {
    let pairs = fixtures::check(&fixtures::default_dir(), Replayer::Oracle)
        .unwrap_or_else(|e| panic!("{e}"));
    let comparisons: Vec<_> = pairs.iter().map(|(_, c)| c.clone()).collect();
    common::assert_all(&comparisons);
    for k in fixtures::kernels() {
        assert!(
            pairs.iter().any(|(kk, _)| kk == k),
            "no fixture replayed for {k}"
        );
    }
}

#[test]
fn fixture_summary_matches_its_snapshot() {
    let summary =
        fixtures::manifest::summary(&fixtures::default_dir()).unwrap_or_else(|e| panic!("{e}"));
    insta::with_settings!({ snapshot_path => fixtures::default_dir().join("snapshots") }, {
        insta::assert_snapshot!("fixture_summary", summary);
    });
}

#[test]
fn a_changed_kernel_source_makes_its_fixture_stale_with_the_command_to_re_record() {
    let dir = temp_copy_of_fixtures("stale");
    let path = dir.join("manifest.json");
    let mut m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    m["kernels"]["replay_sample"]["sha256"] = serde_json::Value::String("0".repeat(64));
    std::fs::write(&path, m.to_string()).unwrap();
    let err = fixtures::check(&dir, Replayer::Oracle)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("stale: cuda/replay_sample.cu changed"),
        "{err}"
    );
    assert!(
        err.contains("re-record with `tallyho fixtures record`"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_tampered_fixture_output_fails_the_oracle_replay() {
    let dir = temp_copy_of_fixtures("tampered");
    // Change one recorded sample index: the oracle replay must notice.
    rewrite_tensor(
        &dir.join("replay_sample.safetensors"),
        "0/out/indices",
        |_, data| {
            let first = u32::from_le_bytes([data[0], data[1], data[2], data[3]]);
            data[..4].copy_from_slice(&((first + 1) % 96).to_le_bytes());
        },
    );
    let pairs = fixtures::check(&dir, Replayer::Oracle).unwrap();
    let bad: Vec<_> = pairs.iter().filter(|(_, c)| !c.passed()).collect();
    assert_eq!(
        bad.len(),
        1,
        "exactly the tampered output must fail: {bad:?}"
    );
    assert_eq!(
        (bad[0].0.as_str(), bad[0].1.output.as_str()),
        ("replay_sample", "indices")
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_missing_fixture_folder_names_the_record_command() {
    let err = fixtures::check(Path::new("/nonexistent/fixtures"), Replayer::Oracle)
        .unwrap_err()
        .to_string();
    assert!(err.contains("tallyho fixtures record"), "{err}");
}

mod gpu {
    use super::*;

    #[test]
    fn recorded_fixtures_replay_bitwise_through_the_kernels() {
        let gpu = common::gpu();
        let pairs = fixtures::check(&fixtures::default_dir(), Replayer::Gpu(&gpu))
            .unwrap_or_else(|e| panic!("{e}"));
        let comparisons: Vec<_> = pairs.iter().map(|(_, c)| c.clone()).collect();
        common::assert_all(&comparisons);
    }
}

/// One element of a recorded output changed past any tolerance: the float of largest
/// magnitude moved by 1 + 2|v| (a non-finite one made 0), or an integer plus one.
fn perturb_one_element(dtype: safetensors::Dtype, data: &mut [u8]) {
    use safetensors::Dtype;
    fn largest<const W: usize>(data: &[u8], magnitude: impl Fn([u8; W]) -> f64) -> usize {
        (0..data.len() / W)
            .max_by(|&a, &b| {
                let m = |i: usize| magnitude(data[i * W..(i + 1) * W].try_into().unwrap());
                m(a).total_cmp(&m(b))
            })
            .unwrap_or(0)
    }
    let moved = |v: f64| {
        if v.is_finite() {
            v + (1.0 + 2.0 * v.abs())
        } else {
            0.0
        }
    };
    match dtype {
        Dtype::F32 => {
            let i = largest::<4>(data, |b| f64::from(f32::from_le_bytes(b)).abs());
            let v = f32::from_le_bytes(data[i * 4..i * 4 + 4].try_into().unwrap());
            data[i * 4..i * 4 + 4].copy_from_slice(&(moved(f64::from(v)) as f32).to_le_bytes());
        }
        Dtype::F64 => {
            let i = largest::<8>(data, |b| f64::from_le_bytes(b).abs());
            let v = f64::from_le_bytes(data[i * 8..i * 8 + 8].try_into().unwrap());
            data[i * 8..i * 8 + 8].copy_from_slice(&moved(v).to_le_bytes());
        }
        Dtype::I32 | Dtype::U32 => {
            let v = u32::from_le_bytes(data[..4].try_into().unwrap());
            data[..4].copy_from_slice(&v.wrapping_add(1).to_le_bytes());
        }
        other => panic!("no perturbation for a recorded {other:?} output"),
    }
}

#[test]
fn one_element_changed_in_any_recorded_output_fails_its_kernels_replay() {
    use safetensors::tensor::{SafeTensors, TensorView};
    let dir = temp_copy_of_fixtures("perturb-each");
    let (mut tried, mut unnoticed) = (0, Vec::new());
    for kernel in fixtures::kernels() {
        let path = dir.join(format!("{kernel}.safetensors"));
        let original = std::fs::read(&path).unwrap();
        let st = SafeTensors::deserialize(&original).unwrap();
        let tensors: Vec<(String, safetensors::Dtype, Vec<usize>, Vec<u8>)> = st
            .tensors()
            .into_iter()
            .map(|(n, v)| (n, v.dtype(), v.shape().to_vec(), v.data().to_vec()))
            .collect();
        for (target, ..) in tensors.iter().filter(|(n, ..)| n.contains("/out/")) {
            let mut changed = tensors.clone();
            let (_, dtype, _, data) = changed.iter_mut().find(|(n, ..)| n == target).unwrap();
            if data.is_empty() {
                continue;
            }
            perturb_one_element(*dtype, data);
            let views: Vec<(String, TensorView)> = changed
                .iter()
                .map(|(n, d, s, b)| (n.clone(), TensorView::new(*d, s.clone(), b).unwrap()))
                .collect();
            std::fs::write(&path, safetensors::serialize(views, &None).unwrap()).unwrap();
            tried += 1;
            let noticed = match fixtures::check_kernels(&dir, Replayer::Oracle, |k| k == kernel) {
                Ok(pairs) => pairs.iter().any(|(_, c)| !c.passed()),
                // A replay that refuses the recording (an index out of range) noticed it too.
                Err(_) => true,
            };
            if !noticed {
                unnoticed.push(format!("{kernel}: {target}"));
            }
        }
        std::fs::write(&path, &original).unwrap();
    }
    eprintln!("{tried} recorded outputs perturbed");
    assert!(tried > 100, "{tried}");
    assert!(
        unnoticed.is_empty(),
        "outputs whose one changed element no replay noticed:\n{}",
        unnoticed.join("\n")
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The recorded tensors of `file` (a fixture) whose names end in `suffix`, as i32 or f32.
fn recorded<T: tallyho::tensor_file::Element>(file: &str, suffix: &str) -> Vec<T> {
    let bytes = std::fs::read(fixtures::default_dir().join(file)).unwrap();
    let st = safetensors::tensor::SafeTensors::deserialize(&bytes).unwrap();
    let mut out = Vec::new();
    for name in st.names() {
        if name.ends_with(suffix) {
            out.extend(tallyho::tensor_file::read::<T>(&st, name, file).unwrap());
        }
    }
    out
}

#[test]
fn the_recorded_transitions_hold_every_episode_end_and_n_step_discounts() {
    use tallyho_oracle::env::{END_OF_DATA, STOP_LOSS, TAKE_PROFIT, TIME_LIMIT};
    let reasons: Vec<i32> = recorded("transition_assemble.safetensors", "in/step.reasons");
    for (reason, name) in [
        (TAKE_PROFIT, "take-profit (terminal)"),
        (STOP_LOSS, "stop-loss (terminal)"),
        (TIME_LIMIT, "time limit (truncated)"),
        (END_OF_DATA, "end of data (truncated)"),
    ] {
        assert!(reasons.contains(&reason), "no {name} step recorded");
    }
    // n = 3, gamma 0.9: a terminal's discount 0, and bootstraps of gamma^k for k = 1 .. 3.
    let discounts: Vec<f32> = recorded("transition_assemble.safetensors", "out/rows.discounts");
    assert!(discounts.contains(&0.0), "no terminal row");
    for k in 1..=3 {
        let g = (0..k).fold(1.0f32, |d, _| d * 0.9);
        assert!(
            discounts.contains(&g),
            "no row bootstrapping gamma^{k}: {discounts:?}"
        );
    }
}

#[test]
fn the_qnet_scenario_covers_clipping_the_huber_linear_region_clamped_atoms_and_terminals() {
    use tallyho::harness::fixtures::qnet::{scenario_configs, scenario_inputs};
    use tallyho_oracle::optimizer::AdamState;
    use tallyho_oracle::qnet::{param_count, update_step_at};
    let (mut clipped, mut huber_linear, mut clamped) = (false, false, false);
    for cfg in scenario_configs() {
        let (mut online, target, batch, weights, _) = scenario_inputs(&cfg);
        let mut adam = AdamState::new(param_count(&cfg));
        let u = update_step_at(
            &cfg,
            &mut online,
            &target,
            &mut adam,
            &batch,
            &weights,
            None,
        )
        .unwrap();
        clipped |= u.grad_norm > f64::from(cfg.grad_clip) && u.clip_scale < 1.0;
        if cfg.atoms == 1 && cfg.huber_kappa != 1.0 {
            // A priority is the mean |TD| over the branches: above kappa, one |TD| is.
            huber_linear |= u.priorities.iter().any(|&p| p > f64::from(cfg.huber_kappa));
        }
        if cfg.atoms > 1 {
            // A projected atom r + d z_j outside [v_min, v_max] is clamped to an end.
            let dz = (cfg.v_max - cfg.v_min) / (cfg.atoms - 1) as f32;
            clamped |= batch.rewards.iter().zip(&batch.discounts).any(|(&r, &d)| {
                (0..cfg.atoms).any(|j| {
                    let tz = r + d * (cfg.v_min + j as f32 * dz);
                    tz < cfg.v_min || tz > cfg.v_max
                })
            });
        }
        assert!(
            batch.discounts.contains(&0.0),
            "seed {}: no terminal row",
            cfg.seed
        );
        assert!(
            batch
                .discounts
                .iter()
                .any(|&d| d > 0.0 && d < 0.99 * 0.99 + 1e-6),
            "seed {}: no n-step bootstrap (gamma^k, k > 1)",
            cfg.seed
        );
    }
    assert!(clipped, "no recorded update clips its gradient");
    assert!(
        huber_linear,
        "no scalar update with kappa != 1 has a TD error past kappa"
    );
    assert!(clamped, "no C51 target falls outside the support");
}

#[test]
fn whole_step_fixtures_replay_through_the_oracle_and_fail_where_changed_or_stale() {
    // Recorded here by the oracle trainer itself (the GPU records the committed ones): the
    // format, the taught replay of every stage, a changed output and a stale kernel.
    use tallyho::harness::fixtures::training_step::{self as ts, StepFixtures};
    use tallyho::harness::parity::trainer::GpuStep;
    use tallyho_oracle::trainer::OracleTrainer;
    let (market, source) = ts::market(ts::DATA).unwrap();
    let cfg = ts::config(&market);
    let dir = temp_copy_of_fixtures("whole-step").join("training_step");
    std::fs::create_dir_all(&dir).unwrap();
    let mut o = OracleTrainer::new(&cfg, &market).unwrap();
    let steps = [1u64, 3];
    for t in 0..=3 {
        let kind = cfg
            .schedule
            .kind(t, cfg.env.envs, cfg.qnet.n_step, cfg.replay.capacity);
        let before = o.clone();
        o.step_with(kind, None).unwrap();
        if steps.contains(&t) {
            let header = tallyho::checkpoint::Header::new(t, "cpu", &market, &source, &cfg);
            let step = GpuStep { after: o.clone() };
            ts::write_step(&dir, &header, &before, kind, &step).unwrap();
        }
    }
    let hashes = tallyho::trainer::STEP_KERNELS
        .iter()
        .map(|k| {
            let sha = tallyho::runtime::kernel_source(k).unwrap().sha256;
            (k.to_string(), sha.to_string())
        })
        .collect();
    let entry = StepFixtures {
        data: ts::DATA.into(),
        seed: ts::SEED,
        steps: steps.to_vec(),
        acting: "Float32".into(),
        kernels: hashes,
    };
    let rows = ts::check(&dir, &entry, None).unwrap();
    let failed: Vec<String> = rows.iter().filter_map(|c| c.check().err()).collect();
    assert!(failed.is_empty(), "{failed:#?}");
    for name in [
        "step 1: acting q",
        "step 1: reward",
        "step 3: loss",
        "step 3: priorities",
    ] {
        assert!(rows.iter().any(|c| c.output == name), "no row {name}");
    }

    // One changed element of the recorded step: its row fails.
    rewrite_tensor(
        &dir.join("step-000003-record.safetensors"),
        "update0.loss",
        perturb_one_element,
    );
    let rows = ts::check(&dir, &entry, None).unwrap();
    let failed: Vec<&str> = rows
        .iter()
        .filter(|c| !c.passed())
        .map(|c| c.output.as_str())
        .collect();
    assert!(failed.contains(&"step 3: loss"), "{failed:?}");

    // A kernel of the step changed since: stale, naming it.
    let mut stale = entry.clone();
    stale.kernels.insert("replay_sample".into(), "0".repeat(64));
    let e = ts::check(&dir, &stale, None).unwrap_err().to_string();
    assert!(
        e.contains("stale")
            && e.contains("cuda/replay_sample.cu")
            && e.contains("tallyho fixtures record"),
        "{e}"
    );
}
