//! The environment's spec on hand-made markets: what a fill, a barrier and a reset do, the
//! step's PnL and s', checked against values worked out by hand.

use tallyho_oracle::action::*;
use tallyho_oracle::env::*;

/// `barriers` on a state the fill step did not change: the step's PnL is measured from the
/// state's own net realized PnL.
fn barriers_alone(c: &EnvConfig, st: &mut EnvState) -> Outcome {
    let net: Vec<f32> = st
        .realized
        .iter()
        .zip(&st.fees)
        .map(|(r, f)| r - f)
        .collect();
    barriers(c, &market(), SPLIT, st, &net)
}

/// Five bars, flat mid 100 (bid 99.75, ask 100.25), high 101, low 99, volatility 0.5.
fn market() -> EnvMarket {
    let bars = 5;
    EnvMarket {
        bars,
        feature_dim: 2,
        features: (0..bars * 2).map(|i| i as f32).collect(),
        bid: vec![99.75; bars],
        ask: vec![100.25; bars],
        high: vec![101.0; bars],
        low: vec![99.0; bars],
        close: vec![100.0; bars],
        volatility: vec![0.5; bars],
    }
}

fn cfg(envs: usize) -> EnvConfig {
    EnvConfig {
        envs,
        take_profit: 0.0,
        stop_loss: 0.0,
        max_steps: 100,
        point_value: 50.0,
        commission: 2.0,
        ..EnvConfig::default()
    }
}

const SPLIT: Split = Split { lo: 0, hi: 5 };

fn flat(cfg: &EnvConfig) -> EnvState {
    let mut st = EnvState::new(cfg, SPLIT);
    st.bar.iter_mut().for_each(|b| *b = 1);
    st
}

#[test]
fn a_market_buy_fills_at_the_ask_and_pays_commission() {
    let c = cfg(1);
    let mut st = flat(&c);
    let f = fill_step(&c, &market(), &mut st, &[BUY, 2, MARKET]);
    assert_eq!((f.filled[0], f.price[0]), (1, 100.25));
    assert_eq!((st.position[0], st.entry[0], st.fees[0]), (3, 100.25, 6.0));
}

#[test]
fn orders_are_clipped_to_the_position_limit_and_hold_does_nothing() {
    let c = EnvConfig {
        max_position: 4,
        ..cfg(2)
    };
    let mut st = flat(&c);
    st.position = vec![3, -4];
    st.entry = vec![100.0, 100.0];
    let f = fill_step(&c, &market(), &mut st, &[BUY, 4, MARKET, SELL, 0, MARKET]);
    assert_eq!(st.position, vec![4, -4]);
    assert_eq!(f.filled, vec![1, 0]);
    let before = st.clone();
    let f = fill_step(&c, &market(), &mut st, &[HOLD, 4, MARKET, HOLD, 0, LIMIT]);
    assert_eq!((f.filled, st), (vec![0, 0], before));
}

#[test]
fn reducing_realizes_pnl_and_a_flip_enters_the_rest_at_the_fill_price() {
    let c = cfg(1);
    let mut st = flat(&c);
    st.position[0] = 2;
    st.entry[0] = 99.0;
    // Sell 5 at the bid 99.75: 2 closed for (99.75 - 99) x 2 x 50 = 75, then short 3 at 99.75.
    fill_step(&c, &market(), &mut st, &[SELL, 4, MARKET]);
    assert_eq!(
        (st.position[0], st.entry[0], st.realized[0], st.fees[0]),
        (-3, 99.75, 75.0, 10.0)
    );
}

#[test]
fn adding_to_a_position_averages_the_entry() {
    let c = cfg(1);
    let mut st = flat(&c);
    st.position[0] = 1;
    st.entry[0] = 99.25;
    fill_step(&c, &market(), &mut st, &[BUY, 0, MARKET]);
    assert_eq!((st.position[0], st.entry[0]), (2, (99.25 + 100.25) / 2.0));
}

#[test]
fn a_limit_buy_captures_part_of_the_spread_with_the_stated_probability() {
    let c = EnvConfig {
        limit_capture: 0.5,
        limit_fill_min: 0.2,
        limit_fill_max: 0.7,
        ..cfg(20_000)
    };
    let mut st = flat(&c);
    st.clock = (0..20_000).collect();
    let actions: Vec<i32> = (0..20_000).flat_map(|_| [BUY, 0, LIMIT]).collect();
    let f = fill_step(&c, &market(), &mut st, &actions);
    assert!(
        f.price
            .iter()
            .zip(&f.filled)
            .all(|(&p, &x)| x == 0 || p == 100.0),
        "the mid: ask - 0.5 spread"
    );
    // p = 0.2 + 0.5 x vol / (vol + spread) = 0.2 + 0.5 x 0.5 / 1.0 = 0.45.
    let rate = f.filled.iter().sum::<i32>() as f64 / 20_000.0;
    assert!((rate - 0.45).abs() < 0.02, "fill rate {rate}");
}

#[test]
fn the_stop_loss_fires_before_the_take_profit_and_exits_at_its_price() {
    let c = EnvConfig {
        take_profit: 0.005,
        stop_loss: 0.005,
        ..cfg(2)
    };
    let mut st = flat(&c);
    st.position = vec![2, -2];
    st.entry = vec![100.0, 100.0];
    // High 101 and low 99 reach both barriers (99.5 and 100.5): the stop-loss wins.
    let o = barriers_alone(&c, &mut st);
    assert_eq!(o.reason, vec![STOP_LOSS, STOP_LOSS]);
    assert_eq!(o.done, vec![1.0, 1.0]);
    // Long: (99.5 - 100) x 2 x 50 - 4 commission = -54; short: (100 - 100.5) x 2 x 50 - 4.
    assert_eq!(o.pnl, vec![-54.0, -54.0]);
    // s' is the exited portfolio at bar 2, before the reset: flat, 1 step, -54 / 5000 x 100.
    assert_eq!(
        &o.next_states[..6],
        &[4.0, 5.0, 0.0, 0.0, 0.01, -54.0 / 5000.0 * 100.0]
    );
    assert_eq!(st.position, vec![0, 0]);
    assert_eq!(st.clock, vec![1, 1]);
    assert!(st.bar.iter().all(|&b| b <= 3), "reset into [lo, hi - 2]");
}

#[test]
fn a_take_profit_fires_when_only_it_is_touched() {
    let c = EnvConfig {
        take_profit: 0.005,
        stop_loss: 0.02,
        ..cfg(1)
    };
    let mut st = flat(&c);
    st.position[0] = 1;
    st.entry[0] = 100.0;
    let o = barriers_alone(&c, &mut st);
    assert_eq!(o.reason[0], TAKE_PROFIT);
    assert_eq!(o.pnl[0], (100.5 - 100.0) * 50.0 - 2.0);
}

#[test]
fn the_time_limit_and_the_end_of_data_close_at_the_touch() {
    let c = EnvConfig {
        max_steps: 3,
        ..cfg(2)
    };
    let mut st = flat(&c);
    st.position = vec![1, -1];
    st.entry = vec![100.0, 100.0];
    st.steps = vec![2, 0];
    st.bar = vec![1, 3];
    let o = barriers_alone(&c, &mut st);
    assert_eq!(o.reason, vec![TIME_LIMIT, END_OF_DATA]);
    // Long exits at the bid 99.75, short at the ask 100.25: both lose 12.5 + 2.
    assert_eq!(o.pnl, vec![-14.5, -14.5]);
    // s' counts the step that ended the episode: 3 of 3 steps, and 1 of 3.
    assert_eq!((o.next_states[4], o.next_states[10]), (1.0, 1.0 / 3.0));
}

#[test]
fn an_open_position_is_marked_at_the_mid_and_realizes_no_pnl_while_held() {
    let c = cfg(1);
    let mut st = flat(&c);
    st.position[0] = 2;
    st.entry[0] = 99.0;
    st.equity[0] = 40.0;
    let o = barriers_alone(&c, &mut st);
    assert_eq!(o.done[0], 0.0);
    assert_eq!(st.equity[0], 100.0); // (100 - 99) x 2 x 50
    assert_eq!(o.pnl[0], 0.0, "nothing realized");
    assert_eq!((st.bar[0], st.steps[0]), (2, 1));
    assert_eq!(
        o.next_states,
        state_gather(&c, &market(), &st),
        "not done: s' is the next state"
    );
}

#[test]
fn the_step_pnl_nets_the_fill_and_the_exit_against_the_state_before_the_fill() {
    // Long 2 at 99 with 30 realized and 5 fees; sell 3 at the bid 99.75: 2 closed for
    // (99.75 - 99) x 2 x 50 = 75, short 1 at 99.75, 6 commission; then the short's stop-loss
    // at 99.75 x 1.005 (bar high 101) exits 1 for (99.75 - 100.24875) x 50, 2 commission.
    let c = EnvConfig {
        stop_loss: 0.005,
        ..cfg(1)
    };
    let mut st = flat(&c);
    (st.position[0], st.entry[0], st.realized[0], st.fees[0]) = (2, 99.0, 30.0, 5.0);
    let f = fill_step(&c, &market(), &mut st, &[SELL, 2, MARKET]);
    assert_eq!(f.net_before, vec![25.0]);
    assert_eq!(
        (st.position[0], st.realized[0], st.fees[0]),
        (-1, 105.0, 11.0)
    );
    let stop = 99.75f32 * (1.0 + 0.005f32);
    // Short: (exit - entry) x sign -1 x (1 x 50), the sign flip exact.
    let (realized, fees) = (105.0f32 + -(stop - 99.75) * 50.0, 13.0f32);
    let o = barriers(&c, &market(), SPLIT, &mut st, &f.net_before);
    assert_eq!(o.reason, vec![STOP_LOSS]);
    assert_eq!(o.pnl, vec![(realized - fees) - 25.0]);
    assert_eq!(
        (st.realized[0], st.fees[0], st.position[0]),
        (0.0, 0.0, 0),
        "reset after the s' and the PnL"
    );
}

#[test]
fn greedy_selection_takes_the_lowest_best_action_and_epsilon_one_explores_uniformly() {
    let c = cfg(3000);
    let st = flat(&c);
    let q: Vec<f32> = (0..3000)
        .flat_map(|_| [1.0, 2.0, 2.0, 0.0, 0.0, 0.0, 0.0, f32::NAN, 5.0, -1.0, 5.0])
        .collect();
    let greedy = action_select(c.seed, &ACTION_BRANCHES, 0.0, &q, &st);
    assert!(
        greedy.chunks(3).all(|a| a == [1, 0, 0]),
        "{:?}",
        &greedy[..3]
    );
    let random = action_select(c.seed, &ACTION_BRANCHES, 1.0, &q, &st);
    for (k, n) in [(0, 3), (1, 5), (2, 3)] {
        for j in 0..n {
            let share = random.chunks(3).filter(|a| a[k] == j).count() as f64 / 3000.0;
            assert!(
                (share - 1.0 / n as f64).abs() < 0.04,
                "branch {k} action {j}: {share}"
            );
        }
    }
}

#[test]
fn state_gather_appends_the_portfolio_to_the_bar_features() {
    let c = EnvConfig {
        max_position: 4,
        max_steps: 10,
        ..cfg(1)
    };
    let mut st = flat(&c);
    st.position[0] = -2;
    st.entry[0] = 101.0;
    st.steps[0] = 5;
    st.realized[0] = 52.0;
    st.fees[0] = 2.0;
    let s = state_gather(&c, &market(), &st);
    // Bar 1's features, -2/4, (100 - 101) x -1 / 101 x 100, 5/10, 50 / (100 x 50) x 100.
    assert_eq!(s, vec![2.0, 3.0, -0.5, 1.0 / 101.0 * 100.0, 0.5, 1.0]);
}

#[test]
fn configs_and_splits_are_validated_with_the_fix() {
    let branches = ACTION_BRANCHES;
    assert!(EnvConfig::default().validate(&branches).is_ok());
    let err = EnvConfig::default()
        .validate(&[3, 5])
        .unwrap_err()
        .to_string();
    assert!(err.contains("use branches [3, n, 3]"), "{err}");
    let err = EnvConfig {
        limit_fill_max: 0.1,
        ..EnvConfig::default()
    }
    .validate(&branches)
    .unwrap_err()
    .to_string();
    assert!(err.contains("limit_fill_max = 0.1"), "{err}");
    assert!(EnvConfig {
        envs: 0,
        ..EnvConfig::default()
    }
    .validate(&branches)
    .is_err());
    assert!(EnvConfig {
        commission: f32::NAN,
        ..EnvConfig::default()
    }
    .validate(&branches)
    .is_err());
    assert!(Split { lo: 3, hi: 4 }.validate(10).is_err());
    assert!(Split { lo: 3, hi: 11 }.validate(10).is_err());
    let s = Split { lo: 3, hi: 10 };
    assert!((0..1000).all(|e| (3..=8).contains(&s.start(7, e, 0))));
}
