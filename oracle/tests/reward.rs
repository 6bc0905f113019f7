//! The reward pipeline's spec on hand-made steps: step PnL and trade closes, shaping,
//! durations, the EMAs on done, the per-env outcome EMA, scaling and its differential Sharpe
//! ratio option, the controllers and the dispersion statistic.

use tallyho_oracle::reward::*;

fn cfg() -> RewardConfig {
    RewardConfig {
        entry_cost: 0.5,
        hold_bonus: 0.25,
        min_hold: 3,
        min_hold_penalty: 2.0,
        ema_rate: 0.5,
        outcome_rate: 0.5,
        ..RewardConfig::default()
    }
}

/// Steps `(pnl, position)` for each of the envs through the chain.
fn run(
    c: &RewardConfig,
    steps: &[(Vec<f32>, Vec<i32>)],
) -> (Vec<RewardOut>, RewardEnvs, RewardGlobal) {
    let mut envs = RewardEnvs::new(steps[0].0.len());
    let mut g = RewardGlobal::new(c);
    let outs = steps
        .iter()
        .map(|(r, p)| reward_step(c, r, p, &mut envs, &mut g))
        .collect();
    (outs, envs, g)
}

#[test]
fn opening_holding_and_closing_a_trade_are_shaped_and_timed() {
    let c = RewardConfig {
        hold_gain: 0.0,
        scale_gain: 0.0,
        ..cfg()
    };
    // Open long at step 0, hold, close at step 3 with +10 realized.
    let steps = vec![
        (vec![0.0], vec![2]),
        (vec![0.0], vec![2]),
        (vec![0.0], vec![2]),
        (vec![10.0], vec![0]),
    ];
    let (o, envs, g) = run(&c, &steps);
    assert_eq!(o[0].raw, vec![-0.5 + 0.25], "entry cost and hold bonus");
    assert_eq!(o[1].raw, vec![0.25]);
    assert_eq!(
        o[3].raw,
        vec![10.0],
        "a close after 4 steps: the PnL, no bonus, no penalty"
    );
    assert_eq!(o[3].done, vec![1.0]);
    assert_eq!(o[3].duration, vec![4]);
    assert_eq!(o.iter().map(|s| s.done[0]).sum::<f32>(), 1.0);
    assert_eq!(envs.steps_since_done, vec![0]);
    assert_eq!(envs.outcome_ema, vec![0.5]);
    assert_eq!(g.dones, 1.0);
    assert_eq!(g.updates, 1.0);
    // EMAs at rate 0.5 from their neutral values: duration (20 + 4) / 2, |PnL| (1 + 10) / 2.
    assert_eq!(
        (g.ema_duration, g.ema_abs_pnl, g.ema_outcome),
        (12.0, 5.5, 0.5)
    );
    assert_eq!(o[3].reward, vec![10.0], "scale 1");
}

#[test]
fn a_quick_close_pays_the_min_hold_penalty_and_a_flip_is_a_close() {
    let steps = vec![(vec![0.0, 0.0], vec![1, -1]), (vec![-4.0, 3.0], vec![0, 2])];
    let (o, envs, _) = run(&cfg(), &steps);
    assert_eq!(o[1].done, vec![1.0, 1.0]);
    assert_eq!(o[1].duration, vec![2, 2]);
    // Env 0 closes flat: -4 - 2 penalty. Env 1 flips to long: +3 + hold bonus - 2 penalty.
    assert_eq!(o[1].raw, vec![-6.0, 3.0 + 0.25 - 2.0]);
    assert_eq!(o[1].abs, vec![6.0, 1.25]);
    assert_eq!(envs.outcome_ema, vec![-0.5, 0.5]);
}

#[test]
fn emas_and_controllers_move_only_on_steps_with_a_done() {
    let c = cfg();
    let flat = (vec![0.0; 3], vec![0; 3]);
    let (o, _, g) = run(&c, &[flat.clone(), flat]);
    assert_eq!(
        g,
        RewardGlobal {
            dispersion: 0.0,
            ..RewardGlobal::new(&c)
        }
    );
    assert!(o.iter().all(|s| s.done.iter().all(|&d| d == 0.0)));
}

#[test]
fn the_scale_controller_steps_towards_the_target_and_stays_in_range() {
    let c = RewardConfig {
        scale_gain: 0.5,
        ema_rate: 1.0,
        scale_min: 0.01,
        scale_max: 1.0,
        ..cfg()
    };
    // Every step closes a trade of |PnL| 100: the scale falls towards 1 / 100.
    let mut envs = RewardEnvs::new(1);
    let mut g = RewardGlobal::new(&c);
    let mut scales = Vec::new();
    for t in 0..40 {
        let pos = if t % 2 == 0 { 1 } else { 0 };
        let pnl = if pos == 0 { 100.0 } else { 0.0 };
        reward_step(&c, &[pnl], &[pos], &mut envs, &mut g);
        scales.push(g.scale);
    }
    assert!(scales.windows(2).all(|w| w[1] <= w[0]), "{scales:?}");
    assert!((g.scale - 0.01).abs() < 1e-3, "{}", g.scale);
    assert!(scales.iter().all(|&s| (0.01..=1.0).contains(&s)));
}

#[test]
fn the_hold_controller_raises_the_bonus_for_short_trades_up_to_its_cap() {
    let c = RewardConfig {
        hold_gain: 0.5,
        ema_rate: 1.0,
        target_duration: 20.0,
        hold_bonus: 0.001,
        hold_bonus_max: 0.01,
        ..cfg()
    };
    let mut envs = RewardEnvs::new(1);
    let mut g = RewardGlobal::new(&c);
    for t in 0..30 {
        reward_step(&c, &[0.0], &[(t % 2 == 0) as i32], &mut envs, &mut g);
    }
    assert_eq!(
        g.hold_bonus, 0.01,
        "2-step trades against a 20-step target: capped"
    );
}

#[test]
fn dispersion_is_the_variance_over_the_absolute_mean() {
    let c = RewardConfig {
        entry_cost: 0.0,
        hold_bonus: 0.0,
        min_hold: 0,
        ..cfg()
    };
    let steps = vec![
        (vec![0.0; 4], vec![1; 4]),
        (vec![1.0, 2.0, 3.0, 6.0], vec![1; 4]),
    ];
    let (o, _, g) = run(&c, &steps);
    assert_eq!(o[1].reward, vec![1.0, 2.0, 3.0, 6.0]);
    // mean 3, population variance (4 + 1 + 0 + 9) / 4 = 3.5.
    assert!((g.dispersion - 3.5 / 3.0).abs() < 1e-6, "{}", g.dispersion);
}

#[test]
fn the_global_state_round_trips_through_its_words_and_bad_configs_are_refused() {
    let g = RewardGlobal::new(&RewardConfig::default());
    assert_eq!(RewardGlobal::of_words(&g.to_words()), g);
    assert!(RewardConfig::default().validate().is_ok());
    let err = RewardConfig {
        ema_rate: 0.0,
        ..RewardConfig::default()
    }
    .validate()
    .unwrap_err()
    .to_string();
    assert!(err.contains("ema_rate = 0 is outside (0, 1]"), "{err}");
    assert!(RewardConfig {
        hold_bonus: 1.0,
        ..RewardConfig::default()
    }
    .validate()
    .is_err());
    assert!(RewardConfig {
        scale_min: f32::NAN,
        ..RewardConfig::default()
    }
    .validate()
    .is_err());
    let err = RewardConfig {
        dsr_eta: 1.0,
        ..RewardConfig::default()
    }
    .validate()
    .unwrap_err()
    .to_string();
    assert!(err.contains("dsr_eta = 1 is outside [0, 1)"), "{err}");
    assert!(RewardConfig {
        dsr_eta: f32::NAN,
        ..RewardConfig::default()
    }
    .validate()
    .is_err());
    assert!(Stage::ALL
        .iter()
        .enumerate()
        .all(|(i, s)| s.index() == i && Stage::of_index(i) == Some(*s)));
    assert_eq!(Stage::ALL.map(Stage::kernel)[5], "reward_ema");
}

/// The drift bound of `tolerance::reward_ema_drift` on the CPU: the same 500 steps with the
/// envs in reverse order sum every reduction in another order, and the double sums do come
/// out different (checked, so the case exercises reordering); the EMAs stay within the bound.
#[test]
fn the_emas_summed_in_another_order_stay_within_the_drift_bound_over_500_steps() {
    use rand::{Rng, SeedableRng};
    use tallyho_oracle::tolerance::reward_ema_drift;
    let c = RewardConfig {
        ema_rate: 0.2,
        ..RewardConfig::default()
    };
    let n = 777;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
    let (mut pnl, mut position) = (vec![0.0f32; n], vec![0i32; n]);
    let (mut fwd, mut rev) = (
        (RewardEnvs::new(n), RewardGlobal::new(&c)),
        (RewardEnvs::new(n), RewardGlobal::new(&c)),
    );
    let (mut a, mut b) = (vec![], vec![]);
    let mut sums_differed = false;
    for _ in 0..500 {
        for i in 0..n {
            pnl[i] = 0.0;
            if rng.gen_bool(0.3) {
                let before = position[i];
                position[i] = rng.gen_range(-3..=3);
                if before != 0 && position[i] != before {
                    // Magnitudes 1 down to 1e-12 across envs: the double sums then round.
                    pnl[i] = rng.gen_range(-50.0f32..50.0) * 10f32.powi(-((i % 13) as i32));
                }
            }
        }
        let o = reward_step(&c, &pnl, &position, &mut fwd.0, &mut fwd.1);
        let closed: Vec<f64> = (0..n)
            .filter(|&i| o.done[i] == 1.0)
            .map(|i| f64::from(o.pnl[i].abs()))
            .collect();
        sums_differed |= closed.iter().sum::<f64>() != closed.iter().rev().sum::<f64>();
        let (rr, rp): (Vec<f32>, Vec<i32>) = (
            pnl.iter().rev().copied().collect(),
            position.iter().rev().copied().collect(),
        );
        reward_step(&c, &rr, &rp, &mut rev.0, &mut rev.1);
        a.push([fwd.1.ema_duration, fwd.1.ema_abs_pnl, fwd.1.ema_outcome]);
        b.push([rev.1.ema_duration, rev.1.ema_abs_pnl, rev.1.ema_outcome]);
    }
    assert!(
        sums_differed,
        "the two orders summed every |PnL| alike: the case does not exercise reordering"
    );
    for j in 0..3 {
        let m = a.iter().map(|w| f64::from(w[j]).abs()).fold(0.0, f64::max) * (1.0 + 1e-6);
        let tol = reward_ema_drift(m, c.ema_rate);
        for (x, y) in a.iter().zip(&b) {
            let d = (f64::from(x[j]) - f64::from(y[j])).abs();
            assert!(
                d <= tol.atol,
                "EMA {j}: {} vs {}: {d} > {}",
                x[j],
                y[j],
                tol.atol
            );
        }
    }
}

#[test]
fn the_differential_sharpe_ratio_follows_moody_and_saffell() {
    let (mut a, mut b) = (0.1f32, 0.05f32);
    let d = dsr(0.1, 0.3, &mut a, &mut b);
    let (a0, b0, r) = (0.1f64, 0.05f64, 0.3f64);
    let want = (b0 * (r - a0) - 0.5 * a0 * (r * r - b0)) / (b0 - a0 * a0).powf(1.5);
    assert!((f64::from(d) - want).abs() < 1e-5, "{d} vs {want}");
    assert!((f64::from(a) - (a0 + 0.1 * (r - a0))).abs() < 1e-7);
    let (mut a, mut b) = (0.0f32, 0.0f32);
    assert_eq!(dsr(0.1, 1.0, &mut a, &mut b), 0.0, "no variance yet");
}

/// With `dsr_eta > 0` stage 8 makes the reward the differential Sharpe ratio of the scaled
/// shaped reward on each env's own moments; off, the moments never move.
#[test]
fn the_dsr_option_turns_the_scaled_reward_into_its_differential_sharpe_ratio() {
    let c = RewardConfig {
        entry_cost: 0.0,
        hold_bonus: 0.0,
        min_hold: 0,
        scale_gain: 0.0,
        hold_gain: 0.0,
        ..cfg()
    };
    let pnls = [0.5f32, -0.25, 1.0, 0.75, -1.0];
    let steps: Vec<(Vec<f32>, Vec<i32>)> = pnls
        .iter()
        .map(|&p| (vec![p, 2.0 * p], vec![0, 0]))
        .collect();
    let (plain, plain_envs, _) = run(&c, &steps);
    assert!(
        plain_envs
            .dsr_a
            .iter()
            .chain(&plain_envs.dsr_b)
            .all(|&m| m == 0.0),
        "off: the moments stay 0"
    );
    let eta = 0.1;
    let (o, envs, _) = run(&RewardConfig { dsr_eta: eta, ..c }, &steps);
    // The same raw rewards; each env's final reward is its own DSR, step by step.
    let (mut a, mut b) = ([0.0f32; 2], [0.0f32; 2]);
    for (t, s) in o.iter().enumerate() {
        assert_eq!(s.raw, plain[t].raw);
        for i in 0..2 {
            assert_eq!(
                s.reward[i],
                dsr(eta, plain[t].reward[i], &mut a[i], &mut b[i]),
                "step {t} env {i}"
            );
        }
    }
    assert_eq!(
        (envs.dsr_a.clone(), envs.dsr_b.clone()),
        (a.to_vec(), b.to_vec())
    );
    assert!(
        o[0].reward.iter().all(|&r| r == 0.0),
        "no variance yet at the first step"
    );
    assert!(
        o[1..].iter().all(|s| s
            .reward
            .iter()
            .zip(&s.raw)
            .all(|(&r, &raw)| r != 0.0 && r != raw)),
        "then the DSR, not the raw reward"
    );
}
