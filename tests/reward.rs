//! The reward pipeline against its oracle (spec: tallyho_oracle::reward; checks in
//! tallyho::harness::parity::reward): each chain stage alone, whole steps by the chain and by the
//! fused kernel at N in {1, 3, 31, 256, 1000, 4096, 8192} with no dones, all dones and
//! mixed, the fused kernel against the chain bitwise, both paths' graph replay against
//! their eager runs, and the EMAs over 500 free-running steps within their drift bound;
//! each with the differential Sharpe ratio option off and on (`check_configs`).

mod common;

mod gpu {
    use super::common::*;
    use tallyho::harness::parity::reward::{
        check_configs, check_drift, check_fused_vs_unfused, check_graph, check_stage, check_steps,
        Mix, SIZES,
    };
    use tallyho::reward::RewardPath;
    use tallyho_oracle::reward::{RewardConfig, Stage};

    #[test]
    fn each_chain_stage_alone_matches_the_oracle_at_every_size_and_done_mix() {
        let gpu = gpu();
        for cfg in check_configs() {
            for stage in Stage::ALL {
                for (k, &n) in SIZES.iter().enumerate() {
                    for mix in Mix::ALL {
                        let c = check_stage(&gpu, &cfg, stage, n, mix, 10 + k as u64).unwrap();
                        let failures: Vec<String> =
                            c.iter().filter_map(|c| c.check().err()).collect();
                        let eta = cfg.dsr_eta;
                        assert!(
                            failures.is_empty(),
                            "{} at N = {n}, {mix:?}, dsr_eta {eta}:\n{}",
                            stage.kernel(),
                            failures.join("\n")
                        );
                    }
                }
            }
        }
    }

    fn steps_match(path: RewardPath, seed: u64) {
        let gpu = gpu();
        for cfg in check_configs() {
            for (k, &n) in SIZES.iter().enumerate() {
                for mix in Mix::ALL {
                    let c = check_steps(&gpu, &cfg, path, n, mix, 12, seed + k as u64).unwrap();
                    let failures: Vec<String> = c.iter().filter_map(|c| c.check().err()).collect();
                    let eta = cfg.dsr_eta;
                    assert!(
                        failures.is_empty(),
                        "{path:?} at N = {n}, {mix:?}, dsr_eta {eta}:\n{}",
                        failures.join("\n")
                    );
                }
            }
        }
    }

    #[test]
    fn unfused_reward_stages_match_the_oracle_at_every_size_and_done_mix() {
        steps_match(RewardPath::Unfused, 100);
    }

    /// The chain's working buffer is poisoned before every fused step and is still poison
    /// after it (`check_steps`): the chain's first stage writes it, so the chain did not run.
    #[test]
    fn fused_reward_matches_the_oracle_at_every_size_and_done_mix_without_the_chain() {
        steps_match(RewardPath::Fused, 200);
    }

    #[test]
    fn fused_reward_matches_the_unfused_chain_bitwise() {
        let gpu = gpu();
        for cfg in check_configs() {
            for &n in &SIZES {
                assert_all(&check_fused_vs_unfused(&gpu, &cfg, n, 30, n as u64).unwrap());
            }
        }
    }

    /// Also the proof that the fused path is one launch: its captured step has one node,
    /// the chain's twelve.
    #[test]
    fn both_paths_replayed_as_graphs_are_bitwise_equal_to_their_eager_runs() {
        let gpu = gpu();
        for cfg in check_configs() {
            for path in [RewardPath::Unfused, RewardPath::Fused] {
                for n in [1usize, 1000, 8192] {
                    assert_all(&check_graph(&gpu, &cfg, path, n, 10, 300 + n as u64).unwrap());
                }
            }
        }
    }

    #[test]
    fn the_emas_over_500_free_running_steps_stay_within_their_drift_bound() {
        let gpu = gpu();
        for path in [RewardPath::Unfused, RewardPath::Fused] {
            for cfg in check_configs() {
                assert_all(&check_drift(&gpu, &cfg, path, 1000, 500, 7).unwrap());
            }
            assert_all(&check_drift(&gpu, &RewardConfig::default(), path, 8192, 500, 8).unwrap());
        }
    }
}
