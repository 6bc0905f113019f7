//! The CUDA trainer: against the oracle trainer step by step, graph replay against eager
//! launches, run-to-run determinism, the fused reward against the unfused chain through
//! the whole trainer, and the transitions it stores. GPU tests (named gpu::...).

mod common;

mod gpu {
    use super::common::*;
    use tallyho::graph::Phase;
    use tallyho::harness::parity::trainer::{
        small_config, small_market, trainer_vs_oracle, twin_runs,
    };
    use tallyho::reward::RewardPath;
    use tallyho::trainer::CudaTrainer;
    use tallyho_oracle::features::Market;
    use tallyho_oracle::schedule::StepKind;
    use tallyho_oracle::TrainConfig;

    fn market() -> Market {
        small_market().unwrap()
    }

    fn small(feature_dim: usize) -> TrainConfig {
        small_config(feature_dim)
    }

    #[test]
    fn the_trainer_matches_the_oracle_for_200_steps() {
        let (gpu, m) = (gpu(), market());
        let cfg = small(m.feature_dim);
        let p = trainer_vs_oracle(&gpu, &cfg, &m, 200, false, |_| Ok(())).unwrap();
        eprintln!("{}", table(&p.comparisons));
        eprintln!(
            "kinds (fill, collect, learn) {:?}; greedy picks {}, flips {}",
            p.kinds, p.greedy, p.flips
        );
        assert!(
            p.bad_flips.is_empty(),
            "flips outside the near-tie bound: {:?}",
            &p.bad_flips[..p.bad_flips.len().min(5)]
        );
        assert_all(&p.comparisons);
        assert!(p.kinds[2] >= 190, "most steps update: {:?}", p.kinds);
        assert!(p.greedy > 1000, "greedy picks occurred: {}", p.greedy);
        // Ceiling: near ties are rare in float32 Q-values (one in a thousand picks at most).
        assert!(
            p.flips * 1000 <= p.greedy,
            "{} flips in {} greedy picks",
            p.flips,
            p.greedy
        );
    }

    #[test]
    fn n_step_3_transitions_match_the_oracle() {
        let (gpu, m) = (gpu(), market());
        let mut cfg = small(m.feature_dim);
        cfg.qnet.n_step = 3;
        let p = trainer_vs_oracle(&gpu, &cfg, &m, 80, false, |_| Ok(())).unwrap();
        eprintln!("{}", table(&p.comparisons));
        assert!(p.bad_flips.is_empty(), "{:?}", p.bad_flips);
        assert_all(&p.comparisons);
        assert_eq!(
            p.kinds[0], 2,
            "n = 3: two steps fill the windows before the first insert"
        );
    }

    #[test]
    fn the_one_launch_experience_step_inside_the_trainer_matches_the_oracle() {
        // 64 envs act layer by layer by default (one-launch blocks would not fill the GPU);
        // forcing 16-row blocks runs experience_step inside the captured training step.
        let (gpu, m) = (gpu(), market());
        let cfg = small(m.feature_dim);
        let p = trainer_vs_oracle(&gpu, &cfg, &m, 60, false, |t| {
            t.net.set_act_block_rows(Some(16))
        })
        .unwrap();
        eprintln!("{}", table(&p.comparisons));
        assert!(p.bad_flips.is_empty(), "{:?}", p.bad_flips);
        assert_all(&p.comparisons);
    }

    #[test]
    fn polyak_n_step_2_and_the_unfused_reward_match_the_oracle() {
        let (gpu, m) = (gpu(), market());
        let mut cfg = small(m.feature_dim);
        (cfg.qnet.polyak_tau, cfg.qnet.n_step) = (Some(0.05), 2);
        let p = trainer_vs_oracle(&gpu, &cfg, &m, 60, false, |t| {
            t.set_reward_path(RewardPath::Unfused);
            Ok(())
        })
        .unwrap();
        eprintln!("{}", table(&p.comparisons));
        assert!(p.bad_flips.is_empty(), "{:?}", p.bad_flips);
        assert_all(&p.comparisons);
    }

    #[test]
    fn the_overlapped_step_gives_the_sequential_steps_bits() {
        // The update on its own stream beside the experience half, graph-replayed, against
        // the same step on one stream launched eagerly; at 64 envs (acting layer by layer,
        // handed between the streams) and with the one-launch experience step.
        let (gpu, m) = (gpu(), market());
        let cfg = small(m.feature_dim);
        assert_all(
            &twin_runs(&gpu, &cfg, &m, 60, [true, false], |t, i| {
                t.set_graphs(i == 0);
                Ok(())
            })
            .unwrap(),
        );
        let one_launch = |t: &mut CudaTrainer, i: usize| {
            t.set_graphs(i == 0);
            t.net.set_act_block_rows(Some(16))
        };
        assert_all(&twin_runs(&gpu, &cfg, &m, 60, [true, false], one_launch).unwrap());
    }

    #[test]
    fn the_overlapped_trainer_matches_the_oracle() {
        let (gpu, m) = (gpu(), market());
        let cfg = small(m.feature_dim);
        let p = trainer_vs_oracle(&gpu, &cfg, &m, 100, true, |t| {
            assert!(t.overlaps());
            Ok(())
        })
        .unwrap();
        eprintln!("{}", table(&p.comparisons));
        assert!(p.bad_flips.is_empty(), "{:?}", p.bad_flips);
        assert_all(&p.comparisons);
    }

    #[test]
    fn two_updates_a_step_replay_bitwise_as_eager() {
        let (gpu, m) = (gpu(), market());
        let mut cfg = small(m.feature_dim);
        cfg.schedule.updates_per_step = 2;
        assert_all(
            &twin_runs(&gpu, &cfg, &m, 40, [false; 2], |t, i| {
                t.set_graphs(i == 0);
                Ok(())
            })
            .unwrap(),
        );
        assert_all(
            &twin_runs(&gpu, &cfg, &m, 40, [true, false], |t, i| {
                t.set_graphs(i == 0);
                Ok(())
            })
            .unwrap(),
        );
    }

    #[test]
    fn the_graph_replayed_step_is_bitwise_the_eager_step_for_100_steps() {
        let (gpu, m) = (gpu(), market());
        let cfg = small(m.feature_dim);
        let c = twin_runs(&gpu, &cfg, &m, 100, [false; 2], |t, i| {
            t.set_graphs(i == 0);
            Ok(())
        })
        .unwrap();
        assert_all(&c);
        // The graphed twin did replay its captured Learn step.
        let mut t = CudaTrainer::new(&gpu, &cfg, &m).unwrap();
        let refused = t.step_kind(StepKind::Learn).unwrap_err().to_string();
        assert!(
            refused.contains("collect until the replay holds a batch"),
            "{refused}"
        );
        t.step_kind(StepKind::Collect).unwrap();
        for _ in 0..3 {
            t.step_kind(StepKind::Learn).unwrap();
        }
        assert_eq!(t.graph_phase(StepKind::Learn), Phase::Replay);
        let nodes = t.graph_nodes(StepKind::Learn).unwrap().unwrap();
        eprintln!("the captured Learn step holds {nodes} nodes");
        assert!(nodes > 20, "{nodes}");
    }

    #[test]
    fn two_runs_with_one_seed_are_bitwise_equal() {
        let (gpu, m) = (gpu(), market());
        let cfg = small(m.feature_dim);
        assert_all(&twin_runs(&gpu, &cfg, &m, 120, [false; 2], |_, _| Ok(())).unwrap());
    }

    #[test]
    fn the_fused_and_unfused_reward_give_the_same_loss_at_step_1000() {
        let (gpu, m) = (gpu(), market());
        let cfg = small(m.feature_dim);
        let loss_at_1000 = |path: RewardPath| {
            let mut t = CudaTrainer::new(&gpu, &cfg, &m).unwrap();
            t.set_reward_path(path);
            for step in 0..1000u64 {
                t.step_kind(cfg.schedule.kind(
                    step,
                    cfg.env.envs,
                    cfg.qnet.n_step,
                    cfg.replay.capacity,
                ))
                .unwrap();
            }
            t.synchronize().unwrap();
            let (online, _) = t.net.params().unwrap();
            (t.net.read_loss().unwrap().loss, online)
        };
        let (fused, p_fused) = loss_at_1000(RewardPath::Fused);
        let (unfused, p_unfused) = loss_at_1000(RewardPath::Unfused);
        let rel = (fused - unfused).abs() / unfused.abs();
        eprintln!(
            "loss at step 1000: fused {fused:.9e}, unfused {unfused:.9e}, relative difference {rel:.3e}; bitwise equal: loss {}, parameters {}",
            fused.to_bits() == unfused.to_bits(),
            p_fused == p_unfused
        );
        assert!(fused.is_finite() && fused > 0.0, "{fused}");
        assert!(rel <= 0.01, "the kill criterion: within 1% ({rel:.3e})");
    }

    #[test]
    fn the_gpu_trainer_learns_the_planted_component_and_earns_on_the_test_split() {
        use tallyho_oracle::evaluate::PlantedTask;
        use tallyho_oracle::trainer::{train, Keep};
        let gpu = gpu();
        let task = PlantedTask::new().unwrap();
        let mut t = CudaTrainer::new(&gpu, &task.cfg, &task.market).unwrap();
        let mut windows = Keep::default();
        train(&task.cfg, 0, &mut t, &mut windows).unwrap();
        for w in &windows.0 {
            eprintln!(
                "step {:>6}  loss {:>6.3}  reward {:>8.4}  pnl {:>9.0}  epsilon {:.3}",
                w.step,
                w.loss.unwrap_or(f64::NAN),
                w.reward,
                w.pnl,
                w.epsilon
            );
        }
        t.synchronize().unwrap();
        let (online, _) = t.net.params().unwrap();
        let verdict = task.judge(&online);
        eprintln!("{}", verdict.table());
        let failures = verdict.failures();
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }
}
