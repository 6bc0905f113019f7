//! The reward pipeline's spec on hand-made steps: PnL deltas and trade closes, shaping,
//! durations, the EMAs on done, the per-env outcome EMA, scaling, the controllers and the
//! dispersion statistic.

use tallyho_oracle::reward::*;

fn cfg() -> RewardConfig {
    RewardConfig { entry_cost: 0.5, hold_bonus: 0.25, min_hold: 3, min_hold_penalty: 2.0, ema_rate: 0.5, outcome_rate: 0.5, ..RewardConfig::default() }
}

/// Steps `(realized, position)` for each of the envs through the chain.
fn run(c: &RewardConfig, steps: &[(Vec<f32>, Vec<i32>)]) -> (Vec<RewardOut>, RewardEnvs, RewardGlobal) {
    let mut envs = RewardEnvs::new(steps[0].0.len());
    let mut g = RewardGlobal::new(c);
    let outs = steps.iter().map(|(r, p)| reward_chain(c, r, p, &mut envs, &mut g)).collect();
    (outs, envs, g)
}

#[test]
fn opening_holding_and_closing_a_trade_are_shaped_and_timed() {
    let c = RewardConfig { hold_gain: 0.0, scale_gain: 0.0, ..cfg() };
    // Open long at step 0, hold, close at step 3 with +10 realized.
    let steps = vec![(vec![0.0], vec![2]), (vec![0.0], vec![2]), (vec![0.0], vec![2]), (vec![10.0], vec![0])];
    let (o, envs, g) = run(&c, &steps);
    assert_eq!(o[0].raw, vec![-0.5 + 0.25], "entry cost and hold bonus");
    assert_eq!(o[1].raw, vec![0.25]);
    assert_eq!(o[3].raw, vec![10.0], "a close after 4 steps: the PnL, no bonus, no penalty");
    assert_eq!(o[3].done, vec![1.0]);
    assert_eq!(o[3].duration, vec![4]);
    assert_eq!(o.iter().map(|s| s.done[0]).sum::<f32>(), 1.0);
    assert_eq!(envs.steps_since_done, vec![0]);
    assert_eq!(envs.outcome_ema, vec![0.5]);
    assert_eq!(g.dones, 1.0);
    assert_eq!(g.updates, 1.0);
    // EMAs at rate 0.5 from their neutral values: duration (20 + 4) / 2, |PnL| (1 + 10) / 2.
    assert_eq!((g.ema_duration, g.ema_abs_pnl, g.ema_outcome), (12.0, 5.5, 0.5));
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
    assert_eq!(g, RewardGlobal { dispersion: 0.0, ..RewardGlobal::new(&c) });
    assert!(o.iter().all(|s| s.done.iter().all(|&d| d == 0.0)));
}

#[test]
fn the_scale_controller_steps_towards_the_target_and_stays_in_range() {
    let c = RewardConfig { scale_gain: 0.5, ema_rate: 1.0, scale_min: 0.01, scale_max: 1.0, ..cfg() };
    // Every step closes a trade of |PnL| 100: the scale falls towards 1 / 100.
    let mut envs = RewardEnvs::new(1);
    let mut g = RewardGlobal::new(&c);
    let mut realized = 0.0;
    let mut scales = Vec::new();
    for t in 0..40 {
        let pos = if t % 2 == 0 { 1 } else { 0 };
        if pos == 0 {
            realized += 100.0;
        }
        reward_chain(&c, &[realized], &[pos], &mut envs, &mut g);
        scales.push(g.scale);
    }
    assert!(scales.windows(2).all(|w| w[1] <= w[0]), "{scales:?}");
    assert!((g.scale - 0.01).abs() < 1e-3, "{}", g.scale);
    assert!(scales.iter().all(|&s| (0.01..=1.0).contains(&s)));
}

#[test]
fn the_hold_controller_raises_the_bonus_for_short_trades_up_to_its_cap() {
    let c = RewardConfig { hold_gain: 0.5, ema_rate: 1.0, target_duration: 20.0, hold_bonus: 0.001, hold_bonus_max: 0.01, ..cfg() };
    let mut envs = RewardEnvs::new(1);
    let mut g = RewardGlobal::new(&c);
    for t in 0..30 {
        reward_chain(&c, &[0.0], &[(t % 2 == 0) as i32], &mut envs, &mut g);
    }
    assert_eq!(g.hold_bonus, 0.01, "2-step trades against a 20-step target: capped");
}

#[test]
fn dispersion_is_the_variance_over_the_absolute_mean() {
    let c = RewardConfig { entry_cost: 0.0, hold_bonus: 0.0, min_hold: 0, ..cfg() };
    let steps = vec![(vec![0.0; 4], vec![1; 4]), (vec![1.0, 2.0, 3.0, 6.0], vec![1; 4])];
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
    let err = RewardConfig { ema_rate: 0.0, ..RewardConfig::default() }.validate().unwrap_err().to_string();
    assert!(err.contains("ema_rate = 0 is outside (0, 1]"), "{err}");
    assert!(RewardConfig { hold_bonus: 1.0, ..RewardConfig::default() }.validate().is_err());
    assert!(RewardConfig { scale_min: f32::NAN, ..RewardConfig::default() }.validate().is_err());
    assert_eq!(STAGES.len(), 10);
}
