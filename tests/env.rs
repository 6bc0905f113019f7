//! The environment kernels against the oracle on random markets and portfolios: states,
//! actions, fills, step PnLs, s', dones and every portfolio field bitwise
//! (`tolerance::ENV`), at env counts that are not multiples of the block size, past one
//! block. And the oracle's own properties of s' and the step's PnL.

mod common;

use common::runner;
use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tallyho::harness::parity::env::{
    random_actions, random_env_state, random_market, EnvCase, BRANCHES,
};
use tallyho_oracle::env as spec;

/// Environment cases at the sizes of the style guide (1 to 4096 envs) on 3..=600 bars.
fn cases() -> impl Strategy<Value = EnvCase> {
    (
        prop::sample::select(vec![1usize, 3, 50, 256, 783, 4096]),
        3usize..=600,
        1usize..=12,
        any::<u64>(),
    )
        .prop_map(|(envs, bars, feature_dim, seed)| EnvCase {
            envs,
            bars,
            feature_dim,
            seed,
        })
}

/// s' is the state after the action and before the auto-reset: for every env that is not
/// done it is, bit for bit, the row `state_gather` gives it at the next step; for a done env
/// it is the next bar's features and the exited portfolio (flat), not the reset one. And
/// the step's PnL of a not-done env is its net realized PnL after the step minus the fill
/// step's `net_before`. Over four steps from random portfolios, by `env_step`.
#[test]
fn next_states_of_envs_not_done_are_the_next_state_gather_rows_bitwise() {
    runner(file!())
        .run(&cases(), |case| {
            let (cfg, split) = (case.config(), case.split());
            let mut rng = ChaCha8Rng::seed_from_u64(case.seed);
            let m = random_market(&mut rng, case.bars, case.feature_dim);
            let mut st = random_env_state(&mut rng, &cfg, &m, split);
            let (f, s) = (m.feature_dim, m.state_dim());
            let width: usize = BRANCHES.iter().sum();
            let mut compared = 0usize;
            for _ in 0..4 {
                let q: Vec<f32> = (0..case.envs * width)
                    .map(|_| rng.gen_range(-4i32..4) as f32 * 0.5)
                    .collect();
                let bars: Vec<u32> = st.bar.clone();
                let step = spec::env_step(&cfg, &BRANCHES, 0.3, &m, split, &mut st, |_| q.clone());
                let next = spec::state_gather(&cfg, &m, &st);
                let o = &step.outcome;
                prop_assert_eq!(o.next_states.len(), case.envs * s);
                for n in 0..case.envs {
                    let row = &o.next_states[n * s..(n + 1) * s];
                    let t = bars[n] as usize + 1;
                    prop_assert_eq!(
                        &row[..f],
                        &m.features[t * f..(t + 1) * f],
                        "env {}: the next bar's features",
                        n
                    );
                    if o.done[n] == 0.0 {
                        let want = &next[n * s..(n + 1) * s];
                        prop_assert!(
                            row.iter()
                                .zip(want)
                                .all(|(a, b)| a.to_bits() == b.to_bits()),
                            "env {}: {:?} vs {:?}",
                            n,
                            row,
                            want
                        );
                        let net = st.realized[n] - st.fees[n];
                        prop_assert_eq!(
                            (net - step.fills.net_before[n]).to_bits(),
                            o.pnl[n].to_bits(),
                            "env {}",
                            n
                        );
                        compared += 1;
                    } else {
                        prop_assert_eq!(row[f], 0.0, "env {}: an episode's end leaves it flat", n);
                    }
                }
            }
            // With 3 bars every episode ends at its first step; with many envs and bars some
            // always go on (the chance that all of 50 end at each of 4 steps is nil).
            prop_assert!(
                compared > 0 || case.envs < 50 || case.bars < 20,
                "no env stayed in its episode"
            );
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
}

/// The random cases reach every branch of the kernels they check: each order type fills,
/// limit orders also miss, every done reason occurs, step PnLs are non-trivial.
#[test]
fn random_env_cases_reach_every_fill_and_barrier_branch() {
    // 100 bars: a start at the last one ends by the end of data often enough to count.
    let case = EnvCase {
        envs: 4096,
        bars: 100,
        feature_dim: 3,
        seed: 77,
    };
    let (cfg, split) = (case.config(), case.split());
    let mut rng = ChaCha8Rng::seed_from_u64(case.seed);
    let m = random_market(&mut rng, case.bars, case.feature_dim);
    let st = random_env_state(&mut rng, &cfg, &m, split);
    let actions = random_actions(&mut rng, case.envs);
    let fills = spec::fill_step(&cfg, &m, &mut st.clone(), &actions);
    for typ in 0..3 {
        let n = (0..case.envs)
            .filter(|&n| actions[3 * n + 2] == typ && fills.filled[n] == 1)
            .count();
        assert!(n > 100, "order type {typ} filled only {n} times");
    }
    let missed = (0..case.envs)
        .filter(|&n| {
            actions[3 * n + 2] == tallyho_oracle::action::LIMIT
                && actions[3 * n] != tallyho_oracle::action::HOLD
                && fills.filled[n] == 0
        })
        .count();
    assert!(missed > 50, "limit orders should sometimes miss: {missed}");
    let net: Vec<f32> = st
        .realized
        .iter()
        .zip(&st.fees)
        .map(|(r, f)| r - f)
        .collect();
    let o = spec::barriers(&cfg, &m, split, &mut st.clone(), &net);
    for reason in 0..=spec::END_OF_DATA {
        let n = o.reason.iter().filter(|&&r| r == reason).count();
        assert!(n > 5, "done reason {reason} occurred only {n} times");
    }
    // Every exit of an open position realizes a PnL: about the done envs with a position.
    assert!(
        o.pnl.iter().filter(|&&r| r != 0.0).count() > 500,
        "{}",
        o.pnl.iter().filter(|&&r| r != 0.0).count()
    );
}

mod gpu {
    use super::cases;
    use super::common::*;
    use proptest::prelude::*;
    use tallyho::harness::parity::env::{
        check_action_select, check_barriers, check_env_step, check_fill_step, check_state_gather,
        EnvCase, EnvSetup,
    };
    use tallyho::Result;
    use tallyho_oracle::Comparison;

    fn property(check: impl Fn(&EnvCase) -> Result<Vec<Comparison>>) {
        runner(file!())
            .run(&cases(), |case| {
                for c in check(&case).map_err(|e| TestCaseError::fail(e.to_string()))? {
                    c.check().map_err(TestCaseError::fail)?;
                }
                Ok(())
            })
            .unwrap_or_else(|e| panic!("{e}"));
    }

    #[test]
    fn state_gather_matches_oracle() {
        let gpu = gpu();
        property(|case| check_state_gather(&gpu, case));
    }

    #[test]
    fn action_select_matches_oracle() {
        let gpu = gpu();
        property(|case| check_action_select(&gpu, case));
    }

    #[test]
    fn fill_step_matches_oracle() {
        let gpu = gpu();
        property(|case| check_fill_step(&gpu, case));
    }

    #[test]
    fn barriers_match_oracle() {
        let gpu = gpu();
        property(|case| check_barriers(&gpu, case));
    }

    #[test]
    fn env_step_matches_the_oracle_chain_of_select_fill_and_barriers() {
        let gpu = gpu();
        property(|case| check_env_step(&gpu, case));
    }

    #[test]
    fn a_bar_outside_the_split_is_refused_with_the_fix() {
        let gpu = gpu();
        let case = EnvCase {
            envs: 3,
            bars: 20,
            feature_dim: 2,
            seed: 5,
        };
        let mut s = EnvSetup::new(&gpu, &case).unwrap();
        let mut st = s.state.clone();
        st.bar[1] = 19;
        let err = s.env.upload_state(&st).unwrap_err().to_string();
        assert!(
            err.contains("env bar 19 is outside the split's start range [1, 19)"),
            "{err}"
        );
        assert!(s
            .env
            .set_epsilon(1.5)
            .unwrap_err()
            .to_string()
            .contains("epsilon 1.5 is outside [0, 1]"));
    }
}

/// The env step feeds the one reward: its PnL and the position after the step (a reset env
/// flat, as after an exit) into `reward_step`. Every episode that ends with a trade open at
/// the step's start closes that trade in the reward's test, and the reward's step PnL is
/// the env's, at every step of a 12-step run.
#[test]
fn the_env_steps_pnl_and_positions_drive_the_reward_and_an_episode_end_closes_the_trade() {
    use tallyho_oracle::reward::{reward_step, RewardConfig, RewardEnvs, RewardGlobal};
    let case = EnvCase {
        envs: 1000,
        bars: 200,
        feature_dim: 2,
        seed: 31,
    };
    let (cfg, split) = (case.config(), case.split());
    let mut rng = ChaCha8Rng::seed_from_u64(case.seed);
    let m = random_market(&mut rng, case.bars, case.feature_dim);
    let mut st = random_env_state(&mut rng, &cfg, &m, split);
    let rcfg = RewardConfig {
        dsr_eta: 0.05,
        ..RewardConfig::default()
    };
    let (mut envs, mut global) = (RewardEnvs::new(case.envs), RewardGlobal::new(&rcfg));
    envs.prev_position.clone_from(&st.position);
    let width: usize = BRANCHES.iter().sum();
    let (mut ends, mut closes) = (0usize, 0usize);
    for t in 0..12 {
        let before = st.position.clone();
        let q: Vec<f32> = (0..case.envs * width)
            .map(|_| rng.gen_range(-4i32..4) as f32 * 0.5)
            .collect();
        let step = spec::env_step(&cfg, &BRANCHES, 0.5, &m, split, &mut st, |_| q.clone());
        let out = reward_step(
            &rcfg,
            &step.outcome.pnl,
            &st.position,
            &mut envs,
            &mut global,
        );
        assert_eq!(out.pnl, step.outcome.pnl, "step {t}");
        for (n, &held) in before.iter().enumerate() {
            if step.outcome.done[n] == 1.0 && held != 0 {
                assert_eq!(
                    out.done[n], 1.0,
                    "step {t} env {n}: an episode's end closes the open trade"
                );
                ends += 1;
            }
            closes += (out.done[n] == 1.0) as usize;
        }
    }
    assert!(
        ends > 100 && closes >= ends,
        "{ends} episode ends with a trade open, {closes} closes"
    );
}
