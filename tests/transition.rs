//! n-step transition assembly (oracle/src/transition.rs, cuda/transition_assemble.cu): the
//! oracle against hand-computed windows and the definition, the window invariants over random
//! episodes, and the kernel against the oracle bitwise.

mod common;

use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tallyho_oracle::env::{END_OF_DATA, STOP_LOSS, TAKE_PROFIT, TIME_LIMIT};
use tallyho_oracle::replay::Transitions;
use tallyho_oracle::transition::{
    is_terminal, window, window_return, TransitionError, TransitionRing,
};

/// One env of state width 1: s_t = t, s'_t = t + 0.5, a_t = (t mod 3, 0, 1).
fn push_one(ring: &mut TransitionRing, t: usize, reward: f32, reason: i32) -> Option<Transitions> {
    let a = [(t % 3) as i32, 0, 1];
    ring.push(&[t as f32], &a, &[reward], &[t as f32 + 0.5], &[reason])
        .unwrap()
}

/// (s, a[0], G, s', discount) of row 0.
fn row0(t: &Transitions) -> (f32, i32, f32, f32, f32) {
    (
        t.states[0],
        t.actions[0],
        t.rewards[0],
        t.next_states[0],
        t.discounts[0],
    )
}

#[test]
fn three_step_windows_bootstrap_after_a_time_limit_and_not_after_a_stop_loss() {
    // gamma 0.5 and powers of two: every value below is exact in float.
    let mut ring = TransitionRing::new(1, 1, 3, 0.5).unwrap();
    // Episode A: steps 0..=3, cut by the time limit at 3; B: 4..=5, stop-loss at 5; C: 6...
    let rewards = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0];
    let reasons = [0, 0, 0, TIME_LIMIT, 0, STOP_LOSS, 0, 0, 0];
    let mut got = Vec::new();
    for t in 0..9 {
        let out = push_one(&mut ring, t, rewards[t], reasons[t]);
        assert_eq!(out.is_some(), t >= 2, "step {t}");
        got.extend(out.map(|o| row0(&o)));
    }
    let want = [
        (0.0, 0, 1.0 + 0.5 * 2.0 + 0.25 * 4.0, 2.5, 0.125), // steps 0..=2
        (1.0, 1, 2.0 + 0.5 * 4.0 + 0.25 * 8.0, 3.5, 0.125), // 1..=3, ends at the time limit
        (2.0, 2, 4.0 + 0.5 * 8.0, 3.5, 0.25),               // 2..=3: cut, bootstraps with gamma^2
        (3.0, 0, 8.0, 3.5, 0.5),                            // 3: cut, gamma^1
        (4.0, 1, 16.0 + 0.5 * 32.0, 5.5, 0.0),              // 4..=5: stop-loss, no bootstrap
        (5.0, 2, 32.0, 5.5, 0.0),                           // 5
        (6.0, 0, 64.0 + 0.5 * 128.0 + 0.25 * 256.0, 8.5, 0.125),
    ];
    assert_eq!(got, want);
}

#[test]
fn one_step_transitions_are_each_step_with_gamma_unless_terminal() {
    let gamma = 0.93f32;
    let mut ring = TransitionRing::new(1, 1, 1, gamma).unwrap();
    for (t, reason) in [0, TIME_LIMIT, 0, TAKE_PROFIT, END_OF_DATA, STOP_LOSS, 0]
        .into_iter()
        .enumerate()
    {
        let r = t as f32 * 0.25 - 0.6;
        let out = push_one(&mut ring, t, r, reason).expect("n = 1 emits at every step");
        let d = if is_terminal(reason) { 0.0 } else { gamma };
        assert_eq!(
            row0(&out),
            (t as f32, (t % 3) as i32, r, t as f32 + 0.5, d),
            "step {t}"
        );
        assert_eq!(out.actions, vec![(t % 3) as i32, 0, 1]);
    }
}

#[test]
fn invalid_configs_steps_and_rings_are_refused_with_the_fix() {
    let msg = |n, g| TransitionRing::new(2, 3, n, g).unwrap_err().to_string();
    assert_eq!(msg(0, 0.9), "n_step is 0: it must be at least 1");
    assert!(
        msg(257, 0.9).contains("n_step = 257 is outside [1, 256]"),
        "{}",
        msg(257, 0.9)
    );
    assert!(msg(3, 1.5).contains("use a discount such as 0.99"));
    assert!(TransitionRing::new(2, 3, 3, f32::NAN).is_err());
    assert!(
        TransitionRing::new(0, 3, 3, 0.9).is_err() && TransitionRing::new(2, 0, 3, 0.9).is_err()
    );

    let mut ring = TransitionRing::new(2, 1, 2, 0.9).unwrap();
    let before = ring.clone();
    let bad_reason = ring
        .push(&[0.0; 2], &[0; 6], &[1.0; 2], &[0.0; 2], &[0, 5])
        .unwrap_err();
    assert_eq!(bad_reason, TransitionError::Reason { env: 1, value: 5 });
    let short = ring
        .push(&[0.0; 2], &[0; 5], &[1.0; 2], &[0.0; 2], &[0, 0])
        .unwrap_err();
    assert!(
        short
            .to_string()
            .starts_with("actions has 5 values, expected 6"),
        "{short}"
    );
    ring.counts[1] = 1;
    assert!(matches!(
        ring.push(&[0.0; 2], &[0; 6], &[1.0; 2], &[0.0; 2], &[0, 0]),
        Err(TransitionError::Count { env: 1, .. })
    ));
    ring.counts[1] = 0;
    assert_eq!(ring, before, "a refused step changes nothing");
}

#[test]
fn the_folded_push_count_keeps_the_slot_and_never_passes_two_n() {
    for n in [1usize, 2, 3, 5] {
        let mut ring = TransitionRing::new(1, 1, n, 0.9).unwrap();
        for t in 0..(5 * n + 3) {
            let c = ring.counts[0] as usize;
            assert!(
                c < 2 * n && c % n == t % n && (c + 1 >= n) == (t + 1 >= n),
                "n {n} step {t}: count {c}"
            );
            push_one(&mut ring, t, 1.0, 0);
        }
    }
}

/// Random episodes on several envs, s_t = (t, e) and s'_t = (t + 0.5, e): every emitted row is
/// the window starting at t - n + 1 of its own env, inside one episode (no end before its last
/// step, which ends the episode or completes n), with the return of the definition (f64,
/// within the float rounding of k Horner steps) and the discount 0 (terminal) or gamma^k; so
/// every step up to T - n starts exactly one emitted window. Discounts of 0 and of gamma^k for
/// several k all occur.
fn check_windows_of_random_episodes(
    n: usize,
    gamma: f32,
    envs: usize,
    steps: usize,
    end_rate: f64,
    seed: u64,
) -> Result<(), TestCaseError> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut ring = TransitionRing::new(envs, 2, n, gamma).unwrap();
    let mut history: Vec<Vec<(f32, i32)>> = vec![Vec::new(); envs];
    let (mut starts, mut discounts) = (vec![Vec::new(); envs], Vec::new());
    for t in 0..steps {
        let (mut st, mut ns, mut r, mut c) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (e, h) in history.iter_mut().enumerate() {
            st.extend([t as f32, e as f32]);
            ns.extend([t as f32 + 0.5, e as f32]);
            let reason = if rng.gen_bool(end_rate) {
                rng.gen_range(1..=4)
            } else {
                0
            };
            let reward = rng.gen_range(-1.0f32..1.0);
            h.push((reward, reason));
            r.push(reward);
            c.push(reason);
        }
        let actions: Vec<i32> = (0..envs * 3).map(|k| (k % 3) as i32).collect();
        let out = ring.push(&st, &actions, &r, &ns, &c).unwrap();
        prop_assert_eq!(out.is_some(), t + 1 >= n);
        let Some(out) = out else { continue };
        prop_assert_eq!(out.len(), envs);
        for (e, h) in history.iter().enumerate() {
            let i = out.states[2 * e] as usize;
            prop_assert_eq!(
                i,
                t + 1 - n,
                "env {} at step {}: the window starting n - 1 steps back",
                e,
                t
            );
            prop_assert_eq!(out.states[2 * e + 1], e as f32);
            let j = (out.next_states[2 * e] - 0.5) as usize;
            prop_assert!(
                i <= j && j <= t && j < i + n,
                "window {}..={} at step {}",
                i,
                j,
                t
            );
            let k = j - i + 1;
            let w = &h[i..=j];
            prop_assert!(
                w[..k - 1].iter().all(|s| s.1 == 0),
                "an episode end inside {}..={}",
                i,
                j
            );
            prop_assert!(k == n || w[k - 1].1 != 0);
            let want: f64 = w
                .iter()
                .enumerate()
                .map(|(m, s)| f64::from(gamma).powi(m as i32) * f64::from(s.0))
                .sum();
            let scale: f64 = w
                .iter()
                .enumerate()
                .map(|(m, s)| f64::from(gamma).powi(m as i32) * f64::from(s.0).abs())
                .sum();
            let bound =
                2.0 * k as f64 * f64::from(f32::EPSILON) * scale + f64::from(f32::MIN_POSITIVE);
            let got = f64::from(out.rewards[e]);
            prop_assert!(
                (got - want).abs() <= bound,
                "G {} vs {} (bound {:e})",
                got,
                want,
                bound
            );
            let d = f64::from(out.discounts[e]);
            if is_terminal(w[k - 1].1) {
                prop_assert_eq!(d, 0.0);
            } else {
                let g_k = f64::from(gamma).powi(k as i32);
                let bound = k as f64 * f64::from(f32::EPSILON) * g_k + f64::from(f32::MIN_POSITIVE);
                prop_assert!((d - g_k).abs() <= bound, "discount {} vs {}", d, g_k);
            }
            starts[e].push(i);
            discounts.push((out.discounts[e], k));
        }
    }
    for s in &starts {
        prop_assert_eq!(s, &(0..steps.saturating_sub(n - 1)).collect::<Vec<_>>());
    }
    // Every window ending in an episode end was checked above; here, that the cases occur
    // where the episodes hold them (an end at a step starts a window that ends there).
    let starts_end = |pred: &dyn Fn(i32) -> bool| {
        history
            .iter()
            .any(|h| h[..steps.saturating_sub(n - 1)].iter().any(|s| pred(s.1)))
    };
    if starts_end(&is_terminal) {
        prop_assert!(
            discounts.iter().any(|&(d, _)| d == 0.0),
            "no terminal window"
        );
    }
    if n > 1 && starts_end(&|r| r != 0 && !is_terminal(r)) {
        prop_assert!(
            discounts.iter().any(|&(d, k)| d > 0.0 && k < n),
            "no truncated window shorter than n"
        );
    }
    Ok(())
}

#[test]
fn every_window_lies_in_one_episode_and_every_step_starts_exactly_one() {
    for (n, seed) in [(1, 1), (2, 2), (3, 3), (5, 4)] {
        check_windows_of_random_episodes(n, 0.97, 4, 200, 0.15, seed).unwrap();
    }
}

proptest! {
    #[test]
    fn windows_of_random_episodes_keep_the_invariants(
        n in 1usize..=6, gamma in 0.0f32..=1.0, envs in 1usize..=5, steps in 1usize..=80,
        end_rate in 0.0f64..0.6, seed in any::<u64>()
    ) {
        check_windows_of_random_episodes(n, gamma, envs, steps, end_rate, seed)?;
    }

    /// Horner from the last back against the f64 sum: within the rounding of k multiply-add
    /// pairs (2k units of float rounding of the sum of |terms|).
    #[test]
    fn horner_equals_the_definition_within_float_rounding(
        rewards in prop::collection::vec(-100.0f32..100.0, 1..=12), gamma in 0.0f32..=1.0
    ) {
        let got = f64::from(window_return(&rewards, gamma));
        let g = f64::from(gamma);
        let want: f64 = rewards.iter().enumerate().map(|(m, &r)| g.powi(m as i32) * f64::from(r)).sum();
        let scale: f64 = rewards.iter().enumerate().map(|(m, &r)| g.powi(m as i32) * f64::from(r).abs()).sum();
        let bound = 2.0 * rewards.len() as f64 * f64::from(f32::EPSILON) * scale + f64::from(f32::MIN_POSITIVE);
        prop_assert!((got - want).abs() <= bound, "{} vs {} (bound {:e})", got, want, bound);
        // The pure window helper agrees with it over a window with no end.
        let w = window(&rewards, &vec![0; rewards.len()], rewards.len(), gamma);
        prop_assert_eq!((w.k, w.ret.to_bits()), (rewards.len(), window_return(&rewards, gamma).to_bits()));
    }
}

/// The check the GPU tests run, fed the oracle's own results: it passes them, and fails a
/// row changed by one ulp, a row written before step n - 1 and a ring count off by one.
#[test]
fn the_parity_check_passes_the_oracle_and_catches_one_ulp_an_early_row_and_a_count() {
    use tallyho::harness::parity::transition::{
        case_steps, compare_step, oracle_steps, GpuStep, TransitionCase,
    };
    use tallyho::transition::poison_rows;
    let case = TransitionCase {
        envs: 9,
        state_dim: 3,
        n: 3,
        gamma: 0.9,
        steps: 12,
        end_rate: 0.3,
        seed: 5,
    };
    let ring = TransitionRing::new(case.envs, case.state_dim, case.n, case.gamma).unwrap();
    let want = oracle_steps(&ring, &case_steps(&case)).unwrap();
    let as_gpu = |w: &(Option<Transitions>, TransitionRing)| GpuStep {
        emitted: w.0.is_some(),
        out: w
            .0
            .clone()
            .unwrap_or_else(|| poison_rows(case.envs, case.state_dim)),
        ring: w.1.clone(),
    };
    let failures = |g: &GpuStep, w| compare_step(g, w).iter().filter(|c| !c.passed()).count();
    for w in &want {
        assert_eq!(failures(&as_gpu(w), w), 0);
    }
    let mut g = as_gpu(&want[5]);
    g.out.rewards[4] = f32::from_bits(g.out.rewards[4].to_bits() + 1);
    assert_eq!(failures(&g, &want[5]), 1);
    let mut g = as_gpu(&want[0]);
    g.out = want[2].0.clone().unwrap();
    assert!(
        failures(&g, &want[0]) >= 5,
        "an early row must fail every field"
    );
    let mut g = as_gpu(&want[7]);
    g.ring.counts[8] += 1;
    assert_eq!(failures(&g, &want[7]), 1);
    assert!(
        tallyho::harness::fixtures::kernels().any(|k| k == "transition_assemble"),
        "the fixture family is registered"
    );
}

mod gpu {
    use super::common::*;
    use proptest::prelude::*;
    use tallyho::harness::parity::transition::{
        case_steps, check_transition_assemble, check_transition_assemble_on,
        check_transition_graph, TransitionCase,
    };
    use tallyho_oracle::transition::TransitionRing;

    /// Random N, S, n, gamma, steps and end rates: every launch's rows, the untouched rows
    /// before step n - 1, and the ring, bitwise the oracle's.
    #[test]
    fn transition_assemble_matches_the_oracle_bitwise_on_random_steps() {
        let gpu = gpu();
        let cases = (
            1usize..=300,
            1usize..=12,
            1usize..=6,
            0.5f32..=1.0,
            1usize..=40,
            0.05f64..0.5,
            any::<u64>(),
        );
        runner(file!())
            .run(
                &cases,
                |(envs, state_dim, n, gamma, steps, end_rate, seed)| {
                    let case = TransitionCase {
                        envs,
                        state_dim,
                        n,
                        gamma,
                        steps,
                        end_rate,
                        seed,
                    };
                    for c in check_transition_assemble(&gpu, &case)
                        .map_err(|e| TestCaseError::fail(e.to_string()))?
                    {
                        c.check().map_err(TestCaseError::fail)?;
                    }
                    Ok(())
                },
            )
            .unwrap_or_else(|e| panic!("{e}"));
    }

    /// Sizes past one block and not multiples of it, n = 1 and a long window.
    #[test]
    fn transition_assemble_matches_the_oracle_at_large_and_odd_sizes() {
        let gpu = gpu();
        for (envs, state_dim, n, seed) in [(783, 33, 3, 1), (4096, 8, 1, 2), (50, 3, 17, 3)] {
            let case = TransitionCase {
                envs,
                state_dim,
                n,
                gamma: 0.99,
                steps: 3 * n + 4,
                end_rate: 0.2,
                seed,
            };
            assert_all(&check_transition_assemble(&gpu, &case).unwrap());
        }
    }

    /// A ring uploaded mid-run (its folded count past n) continues as the oracle's does.
    #[test]
    fn transition_assemble_continues_from_an_uploaded_ring() {
        let gpu = gpu();
        let case = TransitionCase {
            envs: 37,
            state_dim: 5,
            n: 4,
            gamma: 0.95,
            steps: 23,
            end_rate: 0.25,
            seed: 9,
        };
        let steps = case_steps(&case);
        let mut ring = TransitionRing::new(case.envs, case.state_dim, case.n, case.gamma).unwrap();
        for h in &steps[..11] {
            ring.push(
                &h.states,
                &h.actions,
                &h.rewards,
                &h.next_states,
                &h.reasons,
            )
            .unwrap();
        }
        assert!(ring.counts[0] as usize >= case.n);
        assert_all(&check_transition_assemble_on(&gpu, &ring, &steps[11..]).unwrap());
    }

    /// Captured once and replayed: every step's rows and ring bitwise equal to eager launches
    /// (the push count comes from device memory, not from a frozen argument).
    #[test]
    fn transition_assemble_graph_replay_is_bitwise_equal_to_eager() {
        let gpu = gpu();
        for (n, seed) in [(1, 1), (3, 2), (5, 3)] {
            let case = TransitionCase {
                envs: 257,
                state_dim: 6,
                n,
                gamma: 0.97,
                steps: 4 * n + 5,
                end_rate: 0.2,
                seed,
            };
            assert_all(&check_transition_graph(&gpu, &case).unwrap());
        }
    }
}
