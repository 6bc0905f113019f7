//! The chronological backtest and its figures: figures against values worked out by hand,
//! walks of hand-made markets followed bar by bar, buy-and-hold, and the report of a
//! network on a synthetic market's test split (deterministic, JSON round trip).

use tallyho_oracle::backtest::{backtest, backtest_report, buy_and_hold, BacktestError};
use tallyho_oracle::env::{EnvConfig, EnvMarket, Split};
use tallyho_oracle::evaluate::{PlantedTask, Policy};
use tallyho_oracle::features::{build, FeatureConfig, Market};
use tallyho_oracle::figures::{Annualisation, Figures, Trade};
use tallyho_oracle::market::{synthetic, SyntheticConfig, MS_PER_DAY};
use tallyho_oracle::qnet::init_params;
use tallyho_oracle::TrainConfig;

#[track_caller]
fn assert_close(got: f64, want: f64) {
    assert!(
        (got - want).abs() <= 1e-9 * want.abs().max(1.0),
        "got {got}, want {want}"
    );
}

fn trade(entry_bar: usize, exit_bar: usize, pnl: f64) -> Trade {
    Trade {
        entry_bar,
        exit_bar,
        pnl,
    }
}

#[test]
fn figures_match_a_hand_computed_equity_curve_and_trades() {
    let equity = [0.0, 10.0, 4.0, 20.0, 12.0];
    let positions = [0, 1, 1, -2, 0];
    let trades = [
        trade(100, 103, 12.5),
        trade(103, 104, -2.5),
        trade(104, 110, 0.0),
    ];
    // bars_per_year 4: the annualisation factor is sqrt(4) = 2.
    let f = Figures::of(&equity, &positions, &trades, 4.0);
    // Changes from a start of 0: d = [0, 10, -6, 16, -8], sum 12 = the last equity.
    assert_close(f.total_pnl, 12.0);
    // mean 12 / 5 = 2.4; deviations -2.4, 7.6, -8.4, 13.6, -10.4; squares 5.76 + 57.76 +
    // 70.56 + 184.96 + 108.16 = 427.2; sample variance 427.2 / 4 = 106.8.
    // Sharpe = 2.4 / sqrt(106.8) x 2 = 0.464468...
    assert_close(f.sharpe, 2.4 / 106.8f64.sqrt() * 2.0);
    assert!((f.sharpe - 0.464_468).abs() < 1e-6, "{}", f.sharpe);
    // Peaks 0, 10, 10, 20, 20; falls 0, 0, 6, 0, 8: the later, deeper one.
    assert_close(f.max_drawdown, 8.0);
    // Trades: (12.5 - 2.5 + 0) / 3; one of three > 0 (a 0 is not a win); held 3, 1, 6 bars.
    assert_close(f.mean_trade_pnl.unwrap(), 10.0 / 3.0);
    assert_close(f.hit_rate.unwrap(), 1.0 / 3.0);
    assert_eq!(f.trades, 3);
    assert_close(f.mean_holding_bars.unwrap(), 10.0 / 3.0);
    // Positions 1, 1, -2 of 5 bars.
    assert_close(f.exposure, 0.6);
}

#[test]
fn drawdown_counts_a_fall_below_the_starting_zero() {
    // The account starts at 0: a curve that only falls, to -7, has drawn down 7.
    let f = Figures::of(&[-3.0, -7.0, -5.0], &[1, 1, 0], &[], 1.0);
    assert_close(f.max_drawdown, 7.0);
}

#[test]
fn figures_without_trades_or_variance_are_zero_and_null_not_nan() {
    for equity in [&[][..], &[0.0][..], &[0.0, 0.0, 0.0][..]] {
        let f = Figures::of(equity, &vec![0; equity.len()], &[], 252.0 * 390.0);
        let want = Figures {
            total_pnl: 0.0,
            mean_trade_pnl: None,
            sharpe: 0.0,
            max_drawdown: 0.0,
            hit_rate: None,
            trades: 0,
            mean_holding_bars: None,
            exposure: 0.0,
        };
        assert_eq!(f, want, "equity {equity:?}");
        let json = serde_json::to_value(&f).unwrap();
        assert!(json["hit_rate"].is_null() && json["mean_trade_pnl"].is_null());
        assert_eq!(json["sharpe"], 0.0);
    }
    // Equal changes (1, 1, 1): no variance, Sharpe 0 rather than infinite.
    let f = Figures::of(&[1.0, 2.0, 3.0], &[1, 1, 1], &[], 4.0);
    assert_eq!(f.sharpe, 0.0);
    assert_close(f.total_pnl, 3.0);
}

#[test]
fn annualisation_counts_bars_per_calendar_day() {
    let day = 1_381_104_000_000i64; // 2013-10-07 00:00, a day boundary
    assert_eq!(day % MS_PER_DAY, 0);
    let minute = 60_000;
    // Two bars on the first date, three on the second, one on the fourth: 6 bars, 3 dates.
    let times = [
        day,
        day + minute,
        day + MS_PER_DAY,
        day + MS_PER_DAY + minute,
        day + MS_PER_DAY + 2 * minute,
        day + 3 * MS_PER_DAY,
    ];
    let a = Annualisation::of_times(&times);
    assert_eq!(a.days, 3);
    assert_close(a.bars_per_day, 2.0);
    assert_close(a.bars_per_year, 504.0);
    assert_eq!(Annualisation::of_times(&[]).bars_per_year, 0.0);
}

/// Five bars of one feature, spread 1: bid 99, 100, 102, 101, 103 (ask + 1); high ask +
/// 0.25, low bid - 0.5; the feature +1, +1, -1, 0, 0 (the planted rule's target position).
fn walk_market() -> EnvMarket {
    let bid = vec![99.0, 100.0, 102.0, 101.0, 103.0];
    let ask: Vec<f32> = bid.iter().map(|b| b + 1.0).collect();
    EnvMarket {
        bars: 5,
        feature_dim: 1,
        features: vec![1.0, 1.0, -1.0, 0.0, 0.0],
        high: ask.iter().map(|a| a + 0.25).collect(),
        low: bid.iter().map(|b| b - 0.5).collect(),
        close: bid.iter().map(|b| b + 0.5).collect(),
        volatility: vec![0.5; 5],
        bid,
        ask,
    }
}

/// One point of currency per point, commission 0.5, no barriers but the end of data.
fn walk_cfg() -> EnvConfig {
    EnvConfig {
        envs: 7, // ignored: the walk is one account
        point_value: 1.0,
        commission: 0.5,
        take_profit: 0.0,
        stop_loss: 0.0,
        max_steps: 100,
        ..EnvConfig::default()
    }
}

const PLANTED: Policy = Policy::Planted {
    feature: 0,
    dead_band: 0.0,
};
const BRANCHES: [usize; 3] = [3, 5, 3];

#[test]
fn the_walk_books_fills_flips_and_marks_as_worked_out_by_hand() {
    let run = backtest(
        &walk_cfg(),
        &BRANCHES,
        &walk_market(),
        Split { lo: 0, hi: 5 },
        PLANTED,
    )
    .unwrap();
    // Bar 0: buy 1 at ask 100, fee 0.5. Bar 1's mid 100.5: equity -0.5 + 0.5 = 0.
    // Bar 1: hold. Bar 2's mid 102.5: -0.5 + 2.5 = 2.
    // Bar 2: sell 2 at bid 102 (flip): realized +2, fee 1; trade 1 = -0.5 + 2 - 0.5 = 1.0,
    //   trade 2 opens short at 102 with -0.5. Bar 3's mid 101.5: net realized 0.5, open +0.5: 1.
    // Bar 3: buy 1 at ask 102: realized 0, fee 0.5; trade 2 = -1.0. Bar 4 (the last): 0.
    assert_eq!(run.equity, [0.0, 0.0, 2.0, 1.0, 0.0]);
    assert_eq!(run.positions, [1, 1, -1, 0, 0]);
    assert_eq!(run.trades, [trade(0, 2, 1.0), trade(2, 3, -1.0)]);
}

#[test]
fn after_a_stop_loss_the_walk_continues_flat_at_the_next_bar() {
    let cfg = EnvConfig {
        stop_loss: 0.015625, // 2^-6: a long entered at 100 stops at 98.4375 exactly
        ..walk_cfg()
    };
    let mut m = walk_market();
    m.low[1] = 98.0;
    let run = backtest(&cfg, &BRANCHES, &m, Split { lo: 0, hi: 5 }, PLANTED).unwrap();
    // Bar 0: buy at 100 (fee 0.5); bar 1's low 98 touches the stop 98.4375: exit there,
    //   realized -1.5625, fee 0.5: trade 1 = -2.5625, equity -2.5625, flat at bar 1.
    // Bar 1 (not a random start: the next bar): buy at 101 (fee 0.5); bar 2's mid 102.5:
    //   -3.0625 + 1.5 = -1.5625 (its stop, 101 x (1 - 2^-6) = 99.42, is not touched).
    // Bar 2: sell 2 at 102: realized +1, fee 1: trade 2 = -0.5 + 1 - 0.5 = 0, trade 3 opens
    //   short at 102 (stop 103.59 > bar 3's high 102.25); bar 3's mid 101.5: -3.0625 + 0.5.
    // Bar 3: buy 1 at 102, fee 0.5: trade 3 = -1.0; the last bar: -3.5625.
    assert_eq!(run.equity, [0.0, -2.5625, -1.5625, -2.5625, -3.5625]);
    assert_eq!(run.positions, [1, 1, -1, 0, 0]);
    assert_eq!(
        run.trades,
        [trade(0, 1, -2.5625), trade(1, 2, 0.0), trade(2, 3, -1.0)]
    );
}

#[test]
fn buy_and_hold_earns_the_close_move_times_point_value_less_two_commissions() {
    let m = EnvMarket {
        close: vec![100.0, 101.5, 99.25, 103.75],
        ..walk_market()
    };
    let cfg = EnvConfig {
        point_value: 50.0,
        commission: 2.5,
        ..walk_cfg()
    };
    let run = buy_and_hold(&cfg, &m, Split { lo: 0, hi: 4 }).unwrap();
    // (103.75 - 100) x 50 - 2 x 2.5 = 187.5 - 5 = 182.5; before the last bar one commission.
    assert_eq!(run.equity, [-2.5, 72.5, -40.0, 182.5]);
    assert_eq!(run.positions, [1, 1, 1, 0]);
    assert_eq!(run.trades, [trade(0, 3, 182.5)]);
    let f = run.figures(1.0);
    assert_close(f.max_drawdown, 112.5); // peak 72.5 to -40
    assert_close(f.exposure, 0.75);
}

/// A 600-bar synthetic market (test split: 108 bars) and a small network for it.
fn small_run() -> (TrainConfig, Market) {
    let bars = synthetic(&SyntheticConfig {
        bars: 600,
        ..SyntheticConfig::default()
    })
    .unwrap();
    let market = build(&bars, &FeatureConfig::default()).unwrap();
    let mut cfg = TrainConfig::default();
    (
        cfg.qnet.h1,
        cfg.qnet.h2,
        cfg.qnet.value_hidden,
        cfg.qnet.adv_hidden,
    ) = (32, 32, 16, 16);
    cfg.qnet.atoms = 11;
    cfg.env.envs = 8;
    cfg.replay.capacity = 1 << 12;
    (cfg.replay.batch, cfg.schedule.learn_start) = (32, 256);
    let cfg = cfg.resolve(market.feature_dim);
    cfg.validate(market.feature_dim).unwrap();
    (cfg, market)
}

#[test]
fn the_report_is_deterministic_and_the_greedy_walk_differs_from_random() {
    let (cfg, market) = small_run();
    let online = init_params(&cfg.qnet);
    let a = backtest_report(&cfg, &online, &market, 11).unwrap();
    let b = backtest_report(&cfg, &online, &market, 11).unwrap();
    assert_eq!(a, b);
    let names: Vec<&str> = a.policies.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["greedy", "random", "buy_and_hold"]);
    let (greedy, random) = (&a.policies[0], &a.policies[1]);
    assert!(random.figures.trades > 0, "{:?}", random.figures);
    assert_ne!(greedy.equity, random.equity);
    // Another seed draws other random actions and fills.
    let c = backtest_report(&cfg, &online, &market, 12).unwrap();
    assert_ne!(c.policies[1].equity, random.equity);
    eprintln!("{}", a.table());
}

#[test]
fn the_report_covers_every_test_bar_and_round_trips_through_json() {
    let (cfg, market) = small_run();
    let online = init_params(&cfg.qnet);
    let r = backtest_report(&cfg, &online, &market, 3).unwrap();
    let (lo, hi) = (market.train_end, market.bars);
    assert_eq!(
        (r.split.first_bar, r.split.last_bar, r.split.bars),
        (lo, hi - 1, hi - lo)
    );
    assert_eq!(
        (r.split.first_time, r.split.last_time),
        (market.time_ms[lo], market.time_ms[hi - 1])
    );
    for p in &r.policies {
        assert_eq!(p.equity.len(), hi - lo, "{}", p.name);
        assert!(p.equity.iter().all(|e| e.is_finite()), "{}", p.name);
        assert_close(p.figures.total_pnl, p.equity[hi - lo - 1]);
    }
    let bh = &r.policies[2];
    let want = (f64::from(market.close[hi - 1]) - f64::from(market.close[lo]))
        * f64::from(cfg.env.point_value)
        - 2.0 * f64::from(cfg.env.commission);
    assert_close(bh.figures.total_pnl, want);
    assert!(r.annualisation.bars_per_day > 1.0);
    let json = serde_json::to_string(&r).unwrap();
    // serde_json parses a float to within an ulp, not always to the same bits.
    let back: tallyho_oracle::EvalReport = serde_json::from_str(&json).unwrap();
    assert_eq!((&back.split, back.seed), (&r.split, r.seed));
    for (b, p) in back.policies.iter().zip(&r.policies) {
        assert_eq!((&b.name, b.figures.trades), (&p.name, p.figures.trades));
        assert_eq!(b.equity.len(), p.equity.len());
        for (&x, &y) in b.equity.iter().zip(&p.equity) {
            assert_close(x, y);
        }
        assert_close(b.figures.sharpe, p.figures.sharpe);
    }
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert!(v["policies"][0]["equity"].is_array());
    assert!(v["annualisation"]["bars_per_year"].is_number());
    let table = r.table();
    assert_eq!(table.lines().count(), 5, "{table}");
    for name in ["greedy", "random", "buy_and_hold"] {
        assert!(table.contains(name), "{table}");
    }
}

#[test]
fn trade_pnls_sum_to_the_walks_total() {
    let (cfg, market) = small_run();
    let m = EnvMarket::of(&market);
    let run = backtest(
        &cfg.env,
        &cfg.qnet.branches,
        &m,
        Split::test(&market),
        Policy::Random,
    )
    .unwrap();
    let sum: f64 = run.trades.iter().map(|t| t.pnl).sum();
    let total = *run.equity.last().unwrap();
    assert!(
        (sum - total).abs() < 1e-6 * total.abs().max(1.0),
        "{sum} vs {total}"
    );
    assert_eq!(*run.positions.last().unwrap(), 0);
    for w in run.trades.windows(2) {
        assert!(w[0].exit_bar <= w[1].entry_bar, "{w:?}");
    }
}

#[test]
fn the_planted_rule_earns_on_the_planted_markets_test_split() {
    let task = PlantedTask::new().unwrap();
    let m = EnvMarket::of(&task.market);
    let test = Split::test(&task.market);
    let env = &task.cfg.env;
    let branches = &task.cfg.qnet.branches;
    let planted = backtest(env, branches, &m, test, PlantedTask::planted_rule()).unwrap();
    let random = backtest(env, branches, &m, test, Policy::Random).unwrap();
    let (p, r) = (planted.figures(1.0), random.figures(1.0));
    eprintln!("planted {p:?}\nrandom {r:?}");
    assert!(p.total_pnl > 0.0, "{p:?}");
    assert!(p.total_pnl > r.total_pnl, "{p:?} vs {r:?}");
}

#[test]
fn a_parameter_vector_of_another_network_is_refused_with_both_counts() {
    let (cfg, market) = small_run();
    let online = init_params(&cfg.qnet);
    let err = backtest_report(&cfg, &online[1..], &market, 0).unwrap_err();
    let want = online.len();
    assert_eq!(
        err,
        BacktestError::ParamCount {
            got: want - 1,
            want
        }
    );
    let msg = err.to_string();
    assert!(
        msg.contains(&want.to_string()) && msg.contains("online parameters"),
        "{msg}"
    );
}

#[test]
fn a_planted_rule_on_a_missing_feature_is_refused() {
    let err = backtest(
        &walk_cfg(),
        &BRANCHES,
        &walk_market(),
        Split { lo: 0, hi: 5 },
        Policy::Planted {
            feature: 3,
            dead_band: 0.0,
        },
    )
    .unwrap_err();
    assert_eq!(
        err,
        BacktestError::PlantedFeature {
            feature: 3,
            features: 1
        }
    );
}
