//! `tallyho diverge`: a fault planted in one stage from step k is found at step k in that
//! stage, by every kind of comparison (two CPU trainers, a run against its recording; on a
//! GPU, the slow paths against the fast ones and the CUDA trainer against the CPU trainer),
//! and paths that should agree do. GPU tests are named gpu::...

mod common;

use common::tallyho;
use tallyho::harness::diverge::{diverge, Side};
use tallyho::harness::parity::trainer::{small_config, small_market};
use tallyho_oracle::trainer::trace::Fault;

#[test]
fn a_fault_in_any_stage_is_found_at_its_step_and_stage_between_two_cpu_trainers() {
    let m = small_market().unwrap();
    let cfg = small_config(m.feature_dim);
    let clean = diverge(
        None,
        &cfg,
        &m,
        [&Side::Cpu, &Side::Cpu],
        [None, None],
        8,
        None,
    )
    .unwrap();
    assert!(clean.divergence.is_none(), "{clean}");
    assert_eq!(clean.steps, 8);
    for stage in Fault::STAGES {
        // In side b as well as side a: the finder does not care which side is wrong.
        for side in 0..2 {
            let mut faults = [None, None];
            faults[side] = Some(Fault::new(stage, 5, 0.5).unwrap());
            let o = diverge(None, &cfg, &m, [&Side::Cpu, &Side::Cpu], faults, 9, None).unwrap();
            let d = o
                .divergence
                .clone()
                .unwrap_or_else(|| panic!("{stage}: not found: {o}"));
            assert_eq!((d.step, d.stage), (5, stage), "{d}");
            assert_eq!(d.element, 0, "{d}");
            assert!((d.a - d.b).abs() > 0.4, "both values reported: {d}");
            assert_eq!(o.steps, 6, "it stops at the divergent step");
        }
    }
}

#[test]
fn a_recorded_run_is_met_by_a_rerun_and_parted_from_by_a_faulty_one() {
    let m = small_market().unwrap();
    let cfg = small_config(m.feature_dim);
    let dir = common::fresh_dir("diverge-record");
    let sides = [&Side::Cpu, &Side::Cpu];
    let e = diverge(
        None,
        &cfg,
        &m,
        sides,
        [None, None],
        3,
        Some(&dir.join("run.safetensors")),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("the folder does not exist"), "{e}");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("run.safetensors");
    let o = diverge(None, &cfg, &m, sides, [None, None], 10, Some(&file)).unwrap();
    assert!(o.divergence.is_none(), "{o}");
    let recorded = Side::Recorded(file.clone());
    let again = diverge(
        None,
        &cfg,
        &m,
        [&Side::Cpu, &recorded],
        [None, None],
        10,
        None,
    )
    .unwrap();
    assert!(again.divergence.is_none(), "{again}");
    let fault = Some(Fault::new("replay_sample", 7, 0.25).unwrap());
    let parted = diverge(
        None,
        &cfg,
        &m,
        [&Side::Cpu, &recorded],
        [fault, None],
        10,
        None,
    )
    .unwrap();
    let d = parted
        .divergence
        .expect("the faulty run parts from the recording");
    assert_eq!(
        (d.step, d.stage, d.buffer.as_str()),
        (7, "replay_sample", "weights"),
        "{d}"
    );
    // Past its end, a recording says how many steps it holds.
    let e = diverge(
        None,
        &cfg,
        &m,
        [&Side::Cpu, &recorded],
        [None, None],
        11,
        None,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("holds 10 steps, not step 10"), "{e}");
}

#[test]
fn the_command_reports_the_divergence_and_exits_1_and_refuses_bad_sides_and_faults() {
    let (ok, stdout, stderr) = tallyho(&[
        "diverge",
        "--a",
        "cpu",
        "--b",
        "cpu",
        "--steps",
        "6",
        "--fault",
        "env_step@3@b",
    ]);
    assert!(!ok, "{stdout}\n{stderr}");
    assert!(
        stdout.contains("part at step 3, stage env_step, buffer \"pnl\", element 0"),
        "{stdout}"
    );
    let (ok, stdout, stderr) = tallyho(&["diverge", "--a", "cpu", "--b", "cpu", "--steps", "4"]);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("agree for all 4 steps"), "{stdout}");
    for (args, says) in [
        (
            &["--fault", "loss@3"][..],
            "no fault can be planted in stage \"loss\"",
        ),
        (&["--fault", "reward"][..], "is not STAGE@STEP"),
        (&["--a", "gpu"][..], "side \"gpu\" is not one of"),
        (
            &["--a", "cuda:eager,fastest"][..],
            "cuda option \"fastest\"",
        ),
    ] {
        let (ok, _, stderr) = tallyho(&[&["diverge", "--b", "cpu"][..], args].concat());
        assert!(!ok && stderr.contains(says), "{args:?}: {stderr}");
    }
}

mod gpu {
    use super::*;
    use tallyho::harness::diverge::CudaPaths;

    #[test]
    fn the_fast_and_slow_paths_agree_and_a_fault_in_either_is_found_at_its_step_and_stage() {
        let (gpu, m) = (common::gpu(), small_market().unwrap());
        let cfg = small_config(m.feature_dim);
        let (fast, slow) = (Side::Cuda(CudaPaths::FAST), Side::Cuda(CudaPaths::SLOW));
        let o = diverge(Some(&gpu), &cfg, &m, [&fast, &slow], [None, None], 60, None).unwrap();
        assert!(o.divergence.is_none(), "{o}");
        for stage in Fault::STAGES {
            let fault = Some(Fault::new(stage, 7, 0.5).unwrap());
            let o = diverge(
                Some(&gpu),
                &cfg,
                &m,
                [&fast, &slow],
                [None, fault],
                12,
                None,
            )
            .unwrap();
            let d = o
                .divergence
                .clone()
                .unwrap_or_else(|| panic!("{stage}: not found: {o}"));
            assert_eq!((d.step, d.stage), (7, stage), "{d}");
        }
    }

    #[test]
    fn the_cuda_trainer_agrees_with_the_cpu_trainer_until_a_planted_fault() {
        let (gpu, m) = (common::gpu(), small_market().unwrap());
        let cfg = small_config(m.feature_dim);
        let cuda = Side::Cuda(CudaPaths::FAST);
        let o = diverge(
            Some(&gpu),
            &cfg,
            &m,
            [&cuda, &Side::Cpu],
            [None, None],
            40,
            None,
        )
        .unwrap();
        assert!(o.divergence.is_none(), "{o}");
        for stage in ["acting", "reward", "replay_sample", "qnet_loss"] {
            let fault = Some(Fault::new(stage, 6, 0.5).unwrap());
            let o = diverge(
                Some(&gpu),
                &cfg,
                &m,
                [&cuda, &Side::Cpu],
                [fault, None],
                10,
                None,
            )
            .unwrap();
            let d = o
                .divergence
                .clone()
                .unwrap_or_else(|| panic!("{stage}: not found: {o}"));
            assert_eq!((d.step, d.stage), (6, stage), "{d}");
        }
    }

    #[test]
    fn a_cuda_run_is_met_by_its_recording() {
        let (gpu, m) = (common::gpu(), small_market().unwrap());
        let cfg = small_config(m.feature_dim);
        let dir = common::fresh_dir("diverge-cuda-record");
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("run.safetensors");
        let fast = Side::Cuda(CudaPaths::FAST);
        diverge(
            Some(&gpu),
            &cfg,
            &m,
            [&fast, &fast],
            [None, None],
            20,
            Some(&file),
        )
        .unwrap();
        let recorded = Side::Recorded(file);
        let o = diverge(
            Some(&gpu),
            &cfg,
            &m,
            [&Side::Cuda(CudaPaths::SLOW), &recorded],
            [None, None],
            20,
            None,
        )
        .unwrap();
        assert!(o.divergence.is_none(), "{o}");
    }
}

#[test]
fn every_row_of_the_taught_comparison_belongs_to_the_stage_that_writes_it() {
    use tallyho::harness::diverge::stage_of_row;
    for (row, stage) in [
        ("epsilon", "schedule"),
        ("states", "state_gather"),
        ("acting q", "acting"),
        ("next states", "env_step"),
        ("equity", "env_step"),
        ("reward", "reward"),
        ("global EMAs", "reward"),
        ("global scale, hold_bonus", "reward"),
        ("reward steps since done", "reward"),
        ("transition rewards", "transition_assemble"),
        ("sampled indices", "replay_sample"),
        ("importance weights", "replay_sample"),
        ("loss", "qnet_loss"),
        ("priorities", "qnet_loss"),
        ("parameter displacement", "optimizer"),
        ("adam step", "optimizer"),
        ("replay priorities", "replay_update_priorities"),
        ("replay max priority", "replay_update_priorities"),
        ("target displacement", "target_sync"),
        ("replay states", "replay_insert"),
        ("replay cursor, size, sample step", "replay_insert"),
        ("metric loss", "trainer_metrics"),
    ] {
        assert_eq!(stage_of_row(row), stage, "{row}");
    }
}
