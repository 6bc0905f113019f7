//! Behaviours a cargo-mutants sample of the oracle found untested (its survivors), each
//! checked through the public API against a value worked out by hand or an independent
//! property: a limit sell's price, evaluation statistics and the judge's episode count,
//! the normalisation floor, the GEMM's beta and float32 product, the sum-tree descent, the
//! C51 loss's TD buffer, the metric sums, the bar time check, the synthetic market's
//! session jumps and book depth, and the calendar of displayed times.

use tallyho_oracle::action::{ACTION_BRANCHES, LIMIT, SELL};
use tallyho_oracle::env::{fill_step, EnvConfig, EnvMarket, EnvState, Split};
use tallyho_oracle::evaluate::{evaluate, Evaluation, Policy, Verdict};
use tallyho_oracle::features::{self, FeatureConfig, FEATURE_NAMES, STD_FLOOR, WARMUP};
use tallyho_oracle::gemm::{gemm, gemm_f32_reversed};
use tallyho_oracle::market::{self, Bars, EpochMs, MarketError, SyntheticConfig, MS_PER_DAY};
use tallyho_oracle::qnet::{self, QNetConfig};
use tallyho_oracle::replay::{sum_tree_descend, sum_tree_is_consistent};
use tallyho_oracle::trainer::{
    trainer_metrics_step, trainer_metrics_update, MetricTotals, NonFinite, StepValues,
};

/// `|got - want| <= abs + rel |want|`, NaN never close.
#[track_caller]
fn assert_close(got: f64, want: f64, rel: f64, abs: f64) {
    let bound = abs + rel * want.abs();
    assert!(
        (got - want).abs() <= bound,
        "got {got}, want {want}: error {} above the bound {bound}",
        (got - want).abs()
    );
}

// ---- env: fill_step -------------------------------------------------------------------

#[test]
fn a_limit_sell_fills_above_the_bid_by_the_captured_share_of_the_spread() {
    // Bid 99.75, ask 100.25 (spread 0.5), capture 0.5: the sell rests at 99.75 + 0.25 = 100,
    // and with limit_fill_min = limit_fill_max = 1 it always fills (u01 < 1).
    let c = EnvConfig {
        envs: 1,
        limit_capture: 0.5,
        limit_fill_min: 1.0,
        limit_fill_max: 1.0,
        commission: 2.0,
        ..EnvConfig::default()
    };
    let m = EnvMarket {
        bars: 2,
        feature_dim: 1,
        features: vec![0.0; 2],
        bid: vec![99.75; 2],
        ask: vec![100.25; 2],
        high: vec![101.0; 2],
        low: vec![99.0; 2],
        close: vec![100.0; 2],
        volatility: vec![0.5; 2],
    };
    let mut st = EnvState::new(&c, Split { lo: 0, hi: 2 });
    // Sell 2 contracts (size index 1) from flat.
    let f = fill_step(&c, &m, &mut st, &[SELL, 1, LIMIT]);
    assert_eq!((f.filled[0], f.price[0]), (1, 100.0));
    assert_eq!((st.position[0], st.entry[0], st.fees[0]), (-2, 100.0, 4.0));
}

// ---- evaluate ---------------------------------------------------------------------------

/// Three bars: buying at bar 0's ask (100) and selling at bar 1's bid (103) earns 3; buying at
/// bar 1's ask (104) and selling at bar 2's bid (105) earns 1. Feature 0 is 1 everywhere, so
/// the planted rule (dead band 0.5) always buys one contract.
fn two_outcome_market() -> EnvMarket {
    EnvMarket {
        bars: 3,
        feature_dim: 1,
        features: vec![1.0; 3],
        bid: vec![99.0, 103.0, 105.0],
        ask: vec![100.0, 104.0, 106.0],
        high: vec![100.0, 104.0, 106.0],
        low: vec![99.0, 103.0, 105.0],
        close: vec![99.5, 103.5, 105.5],
        volatility: vec![1.0; 3],
    }
}

/// One-step episodes (max_steps 1) of one contract, no commission, point value 1, no
/// barriers. Split [0, 3) starts each episode at bar 0 or 1 (`lo + floor(w 2 / 2^32)`).
fn one_step_episodes(envs: usize) -> EnvConfig {
    EnvConfig {
        envs,
        max_steps: 1,
        point_value: 1.0,
        commission: 0.0,
        take_profit: 0.0,
        stop_loss: 0.0,
        ..EnvConfig::default()
    }
}

const PLANTED_LONG: Policy<'static> = Policy::Planted {
    feature: 0,
    dead_band: 0.5,
};

#[test]
fn evaluation_reports_the_mean_and_standard_error_of_the_episode_pnls() {
    let (envs, steps) = (50, 4);
    let e = evaluate(
        &one_step_episodes(envs),
        &ACTION_BRANCHES,
        &two_outcome_market(),
        Split { lo: 0, hi: 3 },
        PLANTED_LONG,
        steps,
    );
    // Every step ends every env's episode (time limit), each earning 3 (start at bar 0) or
    // 1 (start at bar 1). From the count k and the total, n3 = (total - k) / 2.
    let k = envs * steps;
    assert_eq!(e.episodes, k);
    let n3 = (e.total_pnl - k as f64) / 2.0;
    assert_eq!(
        n3,
        n3.round(),
        "total {} is not 3 n3 + (k - n3)",
        e.total_pnl
    );
    let n1 = k as f64 - n3;
    assert!(n3 > 0.0 && n1 > 0.0, "both starts occur: {n3} and {n1}");
    let k = k as f64;
    // Two values 2 apart: the squared deviations sum to n3 n1 2^2 / k; the sample variance
    // divides by k - 1, the standard error is sqrt(variance / k).
    let mean = (3.0 * n3 + n1) / k;
    let se = (4.0 * n3 * n1 / (k * (k - 1.0)) / k).sqrt();
    assert_close(e.mean_pnl, mean, 1e-12, 0.0);
    assert_close(e.std_error, se, 1e-12, 0.0);
    // Each episode pays half the 1-point spread on entry and on exit: cost 1, the same
    // spread of outcomes gross.
    assert_close(e.mean_cost, 1.0, 1e-12, 0.0);
    assert_close(e.mean_gross, mean + 1.0, 1e-12, 0.0);
    assert_close(e.gross_std_error, se, 1e-12, 0.0);
}

#[test]
fn evaluation_counts_env_steps_as_steps_times_envs() {
    let e = evaluate(
        &one_step_episodes(5),
        &ACTION_BRANCHES,
        &two_outcome_market(),
        Split { lo: 0, hi: 3 },
        PLANTED_LONG,
        7,
    );
    assert_eq!(e.env_steps, 35);
    assert_eq!(e.fills, 35, "one market buy per env step");
}

fn evaluation(episodes: usize, mean_pnl: f64, mean_gross: f64) -> Evaluation {
    Evaluation {
        episodes,
        mean_pnl,
        std_error: 1.0,
        total_pnl: mean_pnl * episodes as f64,
        mean_cost: mean_gross - mean_pnl,
        mean_gross,
        gross_std_error: 1.0,
        fills: 2 * episodes,
        env_steps: 10 * episodes,
    }
}

/// Planted z 10, random net -5 with gross z 0.5, greedy z 8 (at least half the planted
/// rule's 10), 500 episodes each: every condition of the judge holds.
fn sound_verdict() -> Verdict {
    Verdict {
        greedy: evaluation(500, 8.0, 12.0),
        planted: evaluation(500, 10.0, 14.0),
        random: evaluation(500, -5.0, 0.5),
    }
}

#[test]
fn a_verdict_that_meets_every_condition_has_no_failures() {
    assert_eq!(sound_verdict().failures(), Vec::<String>::new());
}

#[test]
fn a_random_evaluation_of_fewer_than_300_episodes_is_too_few() {
    let mut v = sound_verdict();
    v.random.episodes = 299;
    assert_eq!(v.failures(), vec!["too few episodes (500, 500, 299)"]);
}

// ---- features ---------------------------------------------------------------------------

#[test]
fn a_training_std_equal_to_the_floor_still_scales_the_feature() {
    // The floor replaces a std *below* STD_FLOOR; one exactly at it is kept. 63 bars,
    // train_fraction 0.7: floor(0.7 x 3) = 2 training bars (60, 61) and 1 test bar. The
    // sizes below (found by search) make the order-flow imbalance (b - a) / (b + a) exactly
    // +STD_FLOOR at bar 60 and -STD_FLOOR at bar 61 (swapped sizes negate it exactly): mean
    // 0, population std sqrt(STD_FLOOR^2) = STD_FLOOR.
    let (big, small) = (100.000001458067, 99.999999458067);
    assert_eq!((big - small) / (big + small), STD_FLOOR);
    assert_eq!((small - big) / (small + big), -STD_FLOOR);
    let n = WARMUP + 3;
    let mut bars = Bars {
        time_ms: (0..n as i64)
            .map(|i| 1_381_104_000_000 + 60_000 * i)
            .collect(),
        open: vec![100.0; n],
        high: vec![100.0; n],
        low: vec![100.0; n],
        close: vec![100.0; n],
        volume: vec![10.0; n],
        bid: vec![99.75; n],
        ask: vec![100.25; n],
        bid_size: vec![50.0; n],
        ask_size: vec![50.0; n],
    };
    (bars.bid_size[WARMUP], bars.ask_size[WARMUP]) = (big, small);
    (bars.bid_size[WARMUP + 1], bars.ask_size[WARMUP + 1]) = (small, big);
    let m = features::build(
        &bars,
        &FeatureConfig {
            train_fraction: 0.7,
        },
    )
    .unwrap();
    assert_eq!(m.train_end, WARMUP + 2);
    let ofi = FEATURE_NAMES.iter().position(|&s| s == "ofi").unwrap();
    assert_eq!((m.mean[ofi], m.std[ofi]), (0.0, STD_FLOOR));
    let f = |t: usize| m.features[t * m.feature_dim + ofi];
    assert_eq!((f(WARMUP), f(WARMUP + 1), f(WARMUP + 2)), (1.0, -1.0, 0.0));
    // A feature constant on the training bars (range = 0) has std 0 < floor: replaced by 1.
    let range = FEATURE_NAMES.iter().position(|&s| s == "range").unwrap();
    assert_eq!(m.std[range], 1.0);
}

// ---- gemm -------------------------------------------------------------------------------

const A23: [f32; 6] = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
const B32: [f32; 6] = [7.0, 8.0, 9.0, 10.0, 11.0, 12.0];
/// [1 2 3; 4 5 6] [7 8; 9 10; 11 12] = [58 64; 139 154].
const AB: [f64; 4] = [58.0, 64.0, 139.0, 154.0];

#[test]
fn gemm_adds_beta_times_c_to_alpha_times_the_product() {
    let c = [1.0f32, 2.0, 3.0, 4.0];
    let out = gemm(2, 2, 3, 2.0, &A23, 3, false, &B32, 2, false, 0.5, &c, 2);
    assert_eq!(out, vec![116.5, 129.0, 279.5, 310.0]);
}

#[test]
fn gemm_with_beta_zero_ignores_c_even_when_it_is_nan() {
    // BLAS semantics: beta = 0 means C is not read, so NaN in C does not propagate.
    let c = [f32::NAN; 4];
    let out = gemm(2, 2, 3, 1.0, &A23, 3, false, &B32, 2, false, 0.0, &c, 2);
    assert_eq!(out, AB.to_vec());
}

#[test]
fn gemm_f32_reversed_computes_the_matrix_product() {
    // Small integers: every partial sum is exact in float32, so the order does not matter.
    let out = gemm_f32_reversed(2, 2, 3, &A23, 3, false, &B32, 2, false);
    assert_eq!(out, AB.map(|x| x as f32).to_vec());
    // op(A) = A^T with A stored [3 x 2] (column j of the stored matrix is row j of op(A)).
    let at = [1.0f32, 4.0, 2.0, 5.0, 3.0, 6.0];
    let out = gemm_f32_reversed(2, 2, 3, &at, 2, true, &B32, 2, false);
    assert_eq!(out, AB.map(|x| x as f32).to_vec());
}

// ---- replay -----------------------------------------------------------------------------

#[test]
fn sum_tree_descent_finds_the_leaf_whose_prefix_interval_holds_t() {
    // Leaves 1, 2, 3, 4 (nodes 4..8), their sums 3 and 7, the root 10 (node 1; node 0 unused).
    // Prefix intervals: leaf 0 [0, 1), leaf 1 [1, 3), leaf 2 [3, 6), leaf 3 [6, 10).
    let tree = [0.0f32, 10.0, 3.0, 7.0, 1.0, 2.0, 3.0, 4.0];
    assert!(sum_tree_is_consistent(&tree));
    let want = |t: f32| match t {
        t if t < 1.0 => 0,
        t if t < 3.0 => 1,
        t if t < 6.0 => 2,
        _ => 3,
    };
    for i in 0..20 {
        let t = i as f32 * 0.5;
        assert_eq!(sum_tree_descend(&tree, 4, t), want(t), "t = {t}");
    }
}

// ---- qnet loss --------------------------------------------------------------------------

#[test]
fn the_c51_loss_has_no_td_errors_and_the_scalar_loss_one_per_row_and_branch() {
    let (b, s) = (3, 4);
    let states: Vec<f32> = (0..b * s).map(|i| (i as f32 * 0.37).sin()).collect();
    let next: Vec<f32> = (0..b * s).map(|i| (i as f32 * 0.53).cos()).collect();
    for (atoms, td_len) in [(5, 0), (1, b * 2)] {
        let cfg = QNetConfig {
            state_dim: s,
            h1: 6,
            h2: 5,
            value_hidden: 4,
            adv_hidden: 3,
            branches: vec![3, 2],
            atoms,
            v_min: -2.0,
            v_max: 2.0,
            ..QNetConfig::default()
        };
        let p = qnet::init_params(&cfg);
        let f = qnet::forward(&cfg, &p, &states);
        let f2 = qnet::forward(&cfg, &p, &next);
        let actions = [0, 1, 2, 0, 1, 1];
        let l = qnet::loss(
            &cfg,
            &f,
            &f2,
            &f2,
            &actions,
            &[0.5, -1.0, 0.0],
            &[0.99, 0.0, 0.99],
            &[1.0; 3],
        );
        assert_eq!(l.td.len(), td_len, "atoms {atoms}");
    }
}

// ---- trainer metrics --------------------------------------------------------------------

#[test]
fn a_metrics_step_sums_rewards_pnl_trades_episodes_and_greedy_values_over_the_envs() {
    let mut t = MetricTotals::default();
    // Branches [2, 1]: env 0's greedy values max(1, 3) and 5, mean 4; env 1's 2 and -1, mean
    // 0.5; env 2's 0 and 2, mean 1.
    let v = StepValues {
        reward: &[0.5, -1.0, 2.0],
        pnl: &[10.0, 0.0, -4.0],
        trade_done: &[1.0, 0.0, 0.0],
        episode_done: &[1.0, 0.0, 1.0],
        q: &[1.0, 3.0, 5.0, 2.0, -7.0, -1.0, 0.0, 0.0, 2.0],
        branches: &[2, 1],
        epsilon: 0.25,
    };
    trainer_metrics_step(&mut t, &v);
    trainer_metrics_step(&mut t, &v);
    let want = MetricTotals {
        steps: 2.0,
        reward: 3.0,
        pnl: 12.0,
        trades: 2.0,
        episodes: 4.0,
        q: 11.0,
        epsilon: 0.25,
        ..MetricTotals::default()
    };
    assert_eq!(t, want);
}

#[test]
fn a_metrics_update_sums_loss_and_gradient_norm_and_flags_non_finite_ones() {
    let mut t = MetricTotals::default();
    trainer_metrics_update(&mut t, 0.5, 2.0);
    trainer_metrics_update(&mut t, 0.25, 1.5);
    assert_eq!(
        (t.updates, t.loss, t.grad_norm, t.flags),
        (2.0, 0.75, 3.5, 0.0)
    );
    trainer_metrics_update(&mut t, f64::INFINITY, 1.0);
    assert_eq!(t.flags as u32, NonFinite::LOSS);
    trainer_metrics_update(&mut t, 1.0, f64::NAN);
    assert_eq!(t.flags as u32, NonFinite::LOSS | NonFinite::GRAD_NORM);
    assert_eq!(t.updates, 4.0);
}

// ---- market -----------------------------------------------------------------------------

fn flat_bars(times: &[i64]) -> Bars {
    let n = times.len();
    Bars {
        time_ms: times.to_vec(),
        open: vec![100.0; n],
        high: vec![100.0; n],
        low: vec![100.0; n],
        close: vec![100.0; n],
        volume: vec![1.0; n],
        bid: vec![99.75; n],
        ask: vec![100.25; n],
        bid_size: vec![1.0; n],
        ask_size: vec![1.0; n],
    }
}

#[test]
fn validate_rejects_bars_whose_time_does_not_increase() {
    assert!(flat_bars(&[0, 60_000, 120_000]).validate("mem").is_ok());
    match flat_bars(&[0, 60_000, 60_000]).validate("mem") {
        Err(MarketError::TimeNotIncreasing {
            line,
            time,
            prev_time,
            prev_at,
            ..
        }) => {
            assert_eq!(
                (line, time, prev_time),
                (3, EpochMs(60_000), EpochMs(60_000))
            );
            assert_eq!(prev_at, "mem:2");
        }
        other => panic!("expected TimeNotIncreasing at bar 3, got {other:?}"),
    }
}

/// Bars of a gap-free synthetic market with 20-minute sessions: each 60-minute break shows
/// as a 61-minute step between bar times.
fn short_sessions() -> (SyntheticConfig, Bars) {
    let cfg = SyntheticConfig {
        bars: 6000,
        session_minutes: 20,
        gap_prob: 0.0,
        ..SyntheticConfig::default()
    };
    let bars = market::synthetic(&cfg).unwrap();
    (cfg, bars)
}

#[test]
fn synthetic_sessions_open_with_a_jump_of_ten_sigma_and_minutes_continue_the_last_close() {
    let (cfg, b) = short_sessions();
    let mut jumps = Vec::new();
    for i in 1..b.len() {
        match (b.time_ms[i] - b.time_ms[i - 1]) / 60_000 {
            // Within a session the latent price carries over: open = the last close exactly.
            1 => assert_eq!(b.open[i], b.close[i - 1], "bar {i}"),
            61 => jumps.push((b.open[i] / b.close[i - 1]).ln()),
            d => panic!("bar {i}: {d} minutes after the last bar"),
        }
    }
    assert_eq!(jumps.len(), 6000 / 20 - 1);
    // The jump is 10 sigma z (plus tick rounding, ~1e-4 here against 2.4e-3): its RMS over
    // 299 sessions is 10 sigma within a few standard errors (relative SE ~ 1/sqrt(598)).
    let rms = (jumps.iter().map(|j| j * j).sum::<f64>() / jumps.len() as f64).sqrt();
    assert_close(rms, 10.0 * cfg.sigma, 0.2, 0.0);
}

#[test]
fn synthetic_book_depth_has_mean_150_and_log_sd_0_6() {
    // bid_size + ask_size = D (1 + I) + D (1 - I) = 2 D before rounding, with
    // D = 150 exp(0.6 z - 0.18): E[D] = 150 exp(-0.18 + 0.6^2 / 2) = 150, sd(ln D) = 0.6.
    let b = market::synthetic(&SyntheticConfig::default()).unwrap();
    let n = b.len() as f64;
    let depth: Vec<f64> = (0..b.len())
        .map(|i| (b.bid_size[i] + b.ask_size[i]) / 2.0)
        .collect();
    // The relative SE of the mean is sqrt(exp(0.36) - 1) / sqrt(20 000) ~ 0.5%.
    assert_close(depth.iter().sum::<f64>() / n, 150.0, 0.03, 0.0);
    let logs: Vec<f64> = depth.iter().map(|d| d.ln()).collect();
    let mean = logs.iter().sum::<f64>() / n;
    let sd = (logs.iter().map(|l| (l - mean).powi(2)).sum::<f64>() / n).sqrt();
    assert_close(sd, 0.6, 0.05, 0.0);
}

#[test]
fn displayed_times_follow_the_gregorian_calendar_from_1900_to_2101() {
    // Walk the calendar day by day from 1900-01-01, day -25 567 from 1970-01-01 (70 years of
    // 365 days and the 17 leap days of 1904 to 1968), by month lengths and the Gregorian
    // rule (2000 leap, 1900 and 2100 not). Covers both sides of 2000-03-01 and 2100-03-01,
    // where the 400-year era and its centuries begin.
    let leap = |y: i64| (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let days_in = |y: i64, m: i64| match m {
        2 if leap(y) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    };
    let (mut y, mut m, mut d) = (1900i64, 1i64, 1i64);
    let mut day = -25_567i64;
    while y < 2102 {
        if (y, m, d) == (1970, 1, 1) {
            assert_eq!(day, 0, "the walk's start is off");
        }
        let ms = day * MS_PER_DAY + 45_296_000; // 12:34:56
        assert_eq!(
            EpochMs(ms).to_string(),
            format!("{ms} ({y:04}-{m:02}-{d:02} 12:34:56)")
        );
        day += 1;
        d += 1;
        if d > days_in(y, m) {
            (d, m) = (1, m + 1);
            if m > 12 {
                (m, y) = (1, y + 1);
            }
        }
    }
}

#[test]
fn a_sum_tree_with_a_stale_internal_node_is_not_consistent() {
    use tallyho_oracle::replay::sum_tree_refresh;
    let build = |t: &mut Vec<f32>| sum_tree_refresh(t, 4, &[0, 1, 2, 3]);
    // Four leaves 1, 2, 3, 4: internal nodes 3 and 7 under the root 10.
    let mut tree = vec![0.0f32, 0.0, 0.0, 0.0, 1.0, 2.0, 3.0, 4.0];
    build(&mut tree);
    assert_eq!(&tree[1..4], &[10.0, 3.0, 7.0]);
    assert!(sum_tree_is_consistent(&tree));
    // A leaf changed without its ancestors: node 2 (3.0) no longer sums 1.5 + 2.
    tree[4] = 1.5;
    assert!(!sum_tree_is_consistent(&tree));
    build(&mut tree);
    assert!(sum_tree_is_consistent(&tree));
    // One ulp off at the root is inconsistent too (the rule is bitwise).
    tree[1] = f32::from_bits(tree[1].to_bits() + 1);
    assert!(!sum_tree_is_consistent(&tree));
}

#[test]
fn a_priority_is_the_absolute_td_error_plus_eps_to_the_alpha() {
    use tallyho_oracle::replay::replay_priority;
    // (|-3| + 1)^0.5 = 2; (0 + 0.25)^1 = 0.25; alpha 0 makes every priority 1.
    assert_eq!(replay_priority(-3.0, 0.5, 1.0), 2.0);
    assert_eq!(replay_priority(0.0, 1.0, 0.25), 0.25);
    assert_eq!(replay_priority(7.0, 0.0, 1e-6), 1.0);
    assert_eq!(replay_priority(3.0, 2.0, 1.0), 16.0);
}

#[test]
fn the_hold_controller_moves_the_bonus_by_gain_times_cap_times_the_duration_gap() {
    use tallyho_oracle::reward::{
        reward_stage, RewardConfig, RewardEnvs, RewardGlobal, RewardOut, Stage,
    };
    let cfg = RewardConfig {
        hold_gain: 0.2,
        hold_bonus_max: 0.01,
        target_duration: 20.0,
        ..RewardConfig::default()
    };
    let mut global = RewardGlobal::new(&cfg);
    (global.dones, global.ema_duration, global.hold_bonus) = (1.0, 10.0, 0.002);
    reward_stage(
        Stage::Controllers,
        &cfg,
        &[],
        &[],
        &mut RewardEnvs::new(0),
        &mut global,
        &mut RewardOut::new(0),
    );
    // Trades half the target length: 0.002 + 0.2 x 0.01 x (20 - 10) / 20 = 0.003.
    assert!(
        (global.hold_bonus - 0.003).abs() < 1e-9,
        "{}",
        global.hold_bonus
    );
}

#[test]
fn a_run_of_no_steps_or_keeping_no_checkpoint_is_refused() {
    use tallyho_oracle::RunConfig;
    assert!(RunConfig::default().validate().is_ok());
    for (run, key) in [
        (
            RunConfig {
                steps: 0,
                ..RunConfig::default()
            },
            "steps",
        ),
        (
            RunConfig {
                keep_checkpoints: 0,
                ..RunConfig::default()
            },
            "keep_checkpoints",
        ),
    ] {
        let e = run.validate().unwrap_err().to_string();
        assert!(e.contains(key), "{key}: {e}");
    }
}

#[test]
fn an_n_step_ring_count_advances_by_one_and_folds_back_from_2n_to_n() {
    use tallyho_oracle::transition::TransitionRing;
    let ring = TransitionRing::new(2, 3, 3, 0.9).unwrap();
    // n = 3: 0 -> 1 -> 2 -> 3 -> 4 -> 5 -> 3 (a full window stays full).
    let walk: Vec<u32> = std::iter::successors(Some(0u32), |&c| Some(ring.next_count(c)))
        .take(8)
        .collect();
    assert_eq!(walk, [0, 1, 2, 3, 4, 5, 3, 4]);
}

#[test]
fn a_lean_log_says_a_future_had_no_roll_and_says_nothing_of_rolls_for_an_equity() {
    use tallyho_oracle::market::{LeanAsset, LeanDay, LeanLog, LeanRoll};
    let day = |day: i64, contract: Option<&str>| LeanDay {
        day,
        symbol: "es".into(),
        contract: contract.map(String::from),
        first_bar: 0,
        bars: 10,
        shift: 0.0,
    };
    let has = |log: &LeanLog, text: &str| log.lines().iter().any(|l| l.contains(text));
    let future = LeanLog {
        asset: LeanAsset::Future,
        days: vec![day(15985, Some("201312"))],
        rolls: Vec::new(),
    };
    assert!(has(&future, "rolls: none"));
    let equity = LeanLog {
        asset: LeanAsset::Equity,
        days: vec![day(15985, None)],
        rolls: Vec::new(),
    };
    assert!(!has(&equity, "rolls"), "{:?}", equity.lines());
    let rolled = LeanLog {
        rolls: vec![LeanRoll {
            day: 15986,
            from: "201312".into(),
            to: "201403".into(),
            at_ms: 0,
            from_close: 1700.0,
            to_close: 1690.0,
        }],
        ..future
    };
    assert!(has(&rolled, "rolls (additive back-adjustment"));
    assert!(!has(&rolled, "rolls: none"), "{:?}", rolled.lines());
}

#[test]
fn metric_totals_round_trip_through_their_words_in_declaration_order() {
    use tallyho_oracle::trainer::MetricTotals;
    let t = MetricTotals {
        steps: 1.0,
        reward: 2.0,
        pnl: 3.0,
        trades: 4.0,
        episodes: 5.0,
        q: 6.0,
        updates: 7.0,
        loss: 8.0,
        grad_norm: 9.0,
        epsilon: 10.0,
        flags: 11.0,
    };
    let w = t.to_words();
    assert_eq!(w, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0]);
    assert_eq!(MetricTotals::of_words(&w), t);
}
