//! The environment kernels against the oracle on random markets and portfolios: states,
//! actions, fills, rewards, dones and every portfolio field bitwise (`tolerance::ENV`), at
//! env counts that are not multiples of the block size, past one block.

mod common;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use tallyho::harness::parity::env::{random_actions, random_env_state, random_market, EnvCase};
use tallyho_oracle::env as spec;

/// The random cases reach every branch of the kernels they check: each order type fills,
/// limit orders also miss, every done reason occurs, rewards are non-trivial.
#[test]
fn random_env_cases_reach_every_fill_and_barrier_branch() {
    let case = EnvCase { envs: 4096, bars: 300, feature_dim: 3, dsr: true, seed: 77 };
    let (cfg, split) = (case.config(), case.split());
    let mut rng = ChaCha8Rng::seed_from_u64(case.seed);
    let m = random_market(&mut rng, case.bars, case.feature_dim);
    let st = random_env_state(&mut rng, &cfg, &m, split);
    let actions = random_actions(&mut rng, case.envs);
    let fills = spec::fill_step(&cfg, &m, &mut st.clone(), &actions);
    for typ in 0..3 {
        let n = (0..case.envs).filter(|&n| actions[3 * n + 2] == typ && fills.filled[n] == 1).count();
        assert!(n > 100, "order type {typ} filled only {n} times");
    }
    let missed = (0..case.envs).filter(|&n| actions[3 * n + 2] == tallyho_oracle::action::LIMIT && actions[3 * n] != tallyho_oracle::action::HOLD && fills.filled[n] == 0).count();
    assert!(missed > 50, "limit orders should sometimes miss: {missed}");
    let o = spec::barriers(&cfg, &m, split, &mut st.clone());
    for reason in 0..=spec::END_OF_DATA {
        let n = o.reason.iter().filter(|&&r| r == reason).count();
        assert!(n > 5, "done reason {reason} occurred only {n} times");
    }
    assert!(o.reward.iter().filter(|&&r| r != 0.0).count() > 1000);
}

mod gpu {
    use super::common::*;
    use proptest::prelude::*;
    use tallyho::harness::parity::env::{check_action_select, check_barriers, check_env_step, check_fill_step, check_state_gather, EnvCase, EnvSetup};
    use tallyho::Result;
    use tallyho_oracle::Comparison;

    fn cases() -> impl Strategy<Value = EnvCase> {
        (prop::sample::select(vec![1usize, 3, 50, 256, 783, 4096]), 3usize..=600, 1usize..=12, any::<bool>(), any::<u64>())
            .prop_map(|(envs, bars, feature_dim, dsr, seed)| EnvCase { envs, bars, feature_dim, dsr, seed })
    }

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
        let case = EnvCase { envs: 3, bars: 20, feature_dim: 2, dsr: false, seed: 5 };
        let mut s = EnvSetup::new(&gpu, &case).unwrap();
        let mut st = s.state.clone();
        st.bar[1] = 19;
        let err = s.env.upload_state(&st).unwrap_err().to_string();
        assert!(err.contains("env bar 19 is outside the split's start range [1, 19)"), "{err}");
        assert!(s.env.set_epsilon(1.5).unwrap_err().to_string().contains("epsilon 1.5 is outside [0, 1]"));
    }
}
