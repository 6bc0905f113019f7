//! The training metrics' kernels against the oracle (`trainer_metrics_step`,
//! `trainer_metrics_update`): several steps and updates accumulated in the device block,
//! N around one block, non-finite inputs raising their flags; and the check itself on the
//! CPU (its cases, the flags the inputs raise, the comparison failing where it must).

mod common;

use tallyho::harness::parity::trainer_metrics::{
    compare_totals, injected_flags, oracle_totals, MetricLaunch, MetricsCase, BRANCHES,
};
use tallyho_oracle::trainer::{MetricTotals, NonFinite};

fn case(envs: usize, steps: usize, updates_per_step: usize, special: bool) -> MetricsCase {
    MetricsCase {
        envs,
        branches: BRANCHES.to_vec(),
        steps,
        updates_per_step,
        special,
        seed: 7 + envs as u64,
    }
}

#[test]
fn the_cases_inputs_are_not_trivial_and_raise_the_flags_they_inject() {
    let finite = case(257, 4, 2, false).launches();
    assert_eq!(finite.len(), 4 * 3);
    assert_eq!(injected_flags(&finite).last(), Some(&0));
    let MetricLaunch::Step(s) = &finite[0] else {
        panic!("a case starts with a step")
    };
    assert!(s.reward.iter().any(|&r| r != 0.0) && s.q.iter().any(|&q| q != 0.0));
    assert_eq!(s.q.len(), 257 * 11);
    let special = case(255, 3, 2, true).launches();
    assert_eq!(
        injected_flags(&special).last(),
        Some(&(NonFinite::REWARD | NonFinite::Q | NonFinite::LOSS | NonFinite::GRAD_NORM))
    );
    // One env, one step: every flag still raised.
    assert_eq!(
        injected_flags(&case(1, 1, 2, true).launches()).last(),
        Some(&15)
    );
}

#[test]
fn the_oracle_side_of_the_check_agrees_with_itself_and_catches_a_wrong_sum() {
    let launches = case(4099, 3, 1, true).launches();
    let want = oracle_totals(&BRANCHES, &launches);
    let last = want.last().unwrap();
    assert_eq!(last.totals.steps, 3.0);
    assert_eq!(last.totals.updates, 3.0);
    assert_eq!(last.totals.flags as u32, 15);
    assert!(
        last.totals.q.is_finite(),
        "a NaN or -inf Q-value never wins a max"
    );
    assert!(last.totals.reward.is_infinite());
    for c in compare_totals(&last.totals.to_words(), last) {
        c.check().unwrap();
    }
    // A block missing one env's PnL fails; one summed in another order does not.
    let step = want[0];
    let MetricLaunch::Step(s) = &launches[0] else {
        panic!("a case starts with a step")
    };
    let mut reordered = step.totals;
    reordered.pnl = s.pnl.iter().rev().map(|&p| f64::from(p)).sum();
    let rows = compare_totals(&reordered.to_words(), &step);
    assert!(rows.iter().all(|c| c.passed()), "{}", common::table(&rows));
    let mut missing = step.totals;
    missing.pnl -= f64::from(s.pnl[17]);
    let rows = compare_totals(&missing.to_words(), &step);
    let failed: Vec<_> = rows.iter().filter(|c| !c.passed()).collect();
    assert_eq!(failed.len(), 1, "{}", common::table(&rows));
    assert_eq!(failed[0].output, "pnl");
    let mut flags = last.totals;
    flags.flags = f64::from(NonFinite::REWARD | NonFinite::Q | NonFinite::LOSS);
    assert!(compare_totals(&flags.to_words(), last)
        .iter()
        .any(|c| c.output == "flags" && !c.passed()));
    assert_eq!(MetricTotals::WORDS, 11);
}

mod gpu {
    use super::case;
    use super::common::*;
    use proptest::prelude::*;
    use tallyho::harness::parity::trainer_metrics::{
        check_trainer_metrics_step, check_trainer_metrics_update, MetricsCase, BRANCHES,
    };

    /// N = 1, 255, 256, 257, 4099 with [3, 5, 3]: several steps accumulated, finite and
    /// with NaN / infinite inputs, the block after each launch within the declared bounds.
    #[test]
    fn trainer_metrics_step_matches_the_oracle_around_one_block() {
        let gpu = gpu();
        for envs in [1, 255, 256, 257, 4099] {
            for special in [false, true] {
                let c = check_trainer_metrics_step(&gpu, &case(envs, 5, 0, special)).unwrap();
                assert_all(&c);
                assert!(c.iter().any(|c| c.output == "pnl" && c.len > 0));
            }
        }
    }

    /// Updates on top of the steps' sums: loss and norm sums bitwise, NaN loss and infinite
    /// norm flagged alongside the steps' flags.
    #[test]
    fn trainer_metrics_update_matches_the_oracle_after_steps() {
        let gpu = gpu();
        for envs in [1, 257, 4099] {
            for special in [false, true] {
                assert_all(
                    &check_trainer_metrics_update(&gpu, &case(envs, 3, 3, special)).unwrap(),
                );
            }
        }
    }

    /// Random N, step and update counts, finite or not.
    #[test]
    fn trainer_metrics_match_the_oracle_on_random_cases() {
        let gpu = gpu();
        let cases = (
            1usize..=5000,
            1usize..=6,
            0usize..=3,
            any::<bool>(),
            any::<u64>(),
        )
            .prop_map(
                |(envs, steps, updates_per_step, special, seed)| MetricsCase {
                    envs,
                    branches: BRANCHES.to_vec(),
                    steps,
                    updates_per_step,
                    special,
                    seed,
                },
            );
        runner(file!())
            .run(&cases, |case| {
                for check in [check_trainer_metrics_step, check_trainer_metrics_update] {
                    for c in check(&gpu, &case).map_err(|e| TestCaseError::fail(e.to_string()))? {
                        c.check().map_err(TestCaseError::fail)?;
                    }
                }
                Ok(())
            })
            .unwrap_or_else(|e| panic!("{e}"));
    }
}
