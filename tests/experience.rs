//! The experience step (state gather -> Q-forward -> action select -> fill -> barriers) on
//! the GPU against the oracle stepped alongside, on the real ES minute bars, and its graph
//! replay against eager launches.

mod common;

mod gpu {
    use super::common::*;
    use tallyho::env::load_market;
    use tallyho::harness::parity::env::{
        check_experience, check_experience_fused, check_experience_graph,
    };
    use tallyho_oracle::env::{EnvConfig, EnvMarket, Split, STOP_LOSS, TAKE_PROFIT, TIME_LIMIT};

    fn es_market() -> tallyho_oracle::features::Market {
        let data = tallyho_oracle::shared_data::dir()
            .unwrap_or_else(|e| panic!("{e}"))
            .join("lean-es-minute-2013-10");
        load_market(Some(&data)).unwrap_or_else(|e| panic!("loading {}: {e}", data.display()))
    }

    #[test]
    fn two_hundred_timesteps_of_256_envs_on_es_data_match_the_oracle() {
        let gpu = gpu();
        let m = es_market();
        // Barriers near the ES minute range and a 60-step limit, so that all exits occur.
        let cfg = EnvConfig {
            envs: 256,
            take_profit: 0.001,
            stop_loss: 0.0008,
            max_steps: 60,
            ..EnvConfig::default()
        };
        let (comparisons, activity) = check_experience(
            &gpu,
            &cfg,
            &EnvMarket::of(&m),
            Split::train(&m),
            0.3,
            200,
            25,
        )
        .unwrap();
        assert_all(&comparisons);
        assert!(activity.fills > 1000, "{activity:?}");
        assert!(activity.greedy_and_random_differ, "{activity:?}");
        for reason in [TAKE_PROFIT, STOP_LOSS, TIME_LIMIT] {
            assert!(
                activity.dones[reason as usize] > 0,
                "no done of reason {reason}: {activity:?}"
            );
        }
    }

    #[test]
    fn experience_graph_replay_is_bitwise_equal_to_eager_for_20_steps() {
        let gpu = gpu();
        let m = es_market();
        let cfg = EnvConfig {
            envs: 783,
            max_steps: 7,
            ..EnvConfig::default()
        };
        // The Q-forward layer by layer (the default), then by the qnet_act option.
        for block_rows in [None, Some(32)] {
            assert_all(
                &check_experience_graph(
                    &gpu,
                    &cfg,
                    &EnvMarket::of(&m),
                    Split::train(&m),
                    20,
                    block_rows,
                )
                .unwrap(),
            );
        }
    }

    #[test]
    fn the_experience_step_in_one_launch_is_bitwise_the_unfused_launches() {
        let gpu = gpu();
        let m = es_market();
        // 783 envs: a partial last block at both rows per block; a 7-step limit, so that
        // resets occur within the 12 steps.
        let cfg = EnvConfig {
            envs: 783,
            max_steps: 7,
            ..EnvConfig::default()
        };
        for block_rows in [16, 32] {
            assert_all(
                &check_experience_fused(
                    &gpu,
                    &cfg,
                    &EnvMarket::of(&m),
                    Split::train(&m),
                    12,
                    block_rows,
                )
                .unwrap(),
            );
        }
    }

    #[test]
    fn the_default_synthetic_market_steps_4096_envs_like_the_oracle() {
        let gpu = gpu();
        let m = load_market(None).unwrap();
        let cfg = EnvConfig {
            envs: 4096,
            ..EnvConfig::default()
        };
        let (comparisons, activity) =
            check_experience(&gpu, &cfg, &EnvMarket::of(&m), Split::test(&m), 0.1, 30, 15).unwrap();
        assert_all(&comparisons);
        assert!(activity.fills > 1000, "{activity:?}");
    }
}
