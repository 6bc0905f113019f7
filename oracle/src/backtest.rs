//! The chronological backtest of a policy, deterministic: one account walks a split from its
//! first bar to its last, acting at every bar but the last through the environment's own
//! stages ([`state_gather`](crate::env::state_gather) for the greedy policy's state,
//! [`fill_step`], [`barriers`]), and the report of a trained network on the test split beside
//! the random policy and buy-and-hold ([`backtest_report`]).
//!
//! **The walk.** At bar b in `[lo, hi - 1)`: the policy's actions, the fill against bar b's
//! quote, then the barriers at bar b + 1 exactly as in training: take-profit and stop-loss
//! close a position at their price, the time limit (`max_steps` steps of an episode) and the
//! end of data (the last bar) at the touch. Where training would auto-reset a done env to a
//! random start, the walk continues at bar b + 1, flat, with a new episode (the portfolio
//! features the policy sees: position, open return, steps and net realized PnL of the
//! episode, as in training). The fill draws are the env's Philox draws of env 0 keyed by
//! `EnvConfig::seed`, counter the account's step; the random policy's draws too: a run is
//! deterministic.
//!
//! **Records.** `equity[i]` at bar `lo + i` (one value per bar of the split, 0 at the first):
//! the sum of every step's net realized PnL ([`crate::env::Outcome::pnl`]: fills and exits,
//! less commissions) plus the open position marked at the bar's mid, `(mid - entry) sign
//! |pos| point_value`. `positions[i]`: contracts held from bar `lo + i` to the next, after
//! the bar's fill (0 at the last bar, where the end of data has closed everything). Trades:
//! see [`Trade`].

use serde::{Deserialize, Serialize};

use crate::config::ConfigError;
use crate::env::{barriers, fill_step, EnvConfig, EnvMarket, EnvState, Split};
use crate::evaluate::{policy_actions, Policy};
use crate::features::Market;
use crate::figures::{Annualisation, Figures, Trade};
use crate::market::EpochMs;
use crate::qnet::param_count;
use crate::train_config::TrainConfig;

/// Why a backtest cannot run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BacktestError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("the parameter vector has {got} values but the Q-network of this config has {want}: pass the online parameters of a run made with this config's qnet")]
    ParamCount { got: usize, want: usize },
    #[error("the Q-network reads states of width {got} but this market's are {want} wide ({features} features + portfolio): resolve the config for this market (TrainConfig::resolve)")]
    StateDim {
        got: usize,
        want: usize,
        features: usize,
    },
    #[error("the planted rule reads feature {feature} but the market has {features}: pick a feature index below {features}")]
    PlantedFeature { feature: usize, features: usize },
    #[error("the market has {times} bar times for {bars} bars: build it with features::build, which keeps the bars' times")]
    TimeCount { times: usize, bars: usize },
}

/// What the walk of one policy recorded (module doc).
#[derive(Clone, Debug, PartialEq)]
pub struct Backtest {
    pub split: Split,
    /// Equity at each bar of the split, `hi - lo` values.
    pub equity: Vec<f64>,
    /// Contracts held from each bar of the split to the next, `hi - lo` values.
    pub positions: Vec<i32>,
    /// Closed trades in the order they closed.
    pub trades: Vec<Trade>,
}

impl Backtest {
    /// The figures of this walk, Sharpe scaled by `sqrt(bars_per_year)`.
    pub fn figures(&self, bars_per_year: f64) -> Figures {
        Figures::of(&self.equity, &self.positions, &self.trades, bars_per_year)
    }
}

/// The account's books besides the env state: the walk's net realized PnL and the open
/// trade.
struct Books {
    realized: f64,
    open: Option<Trade>,
    trades: Vec<Trade>,
}

/// The env's net realized amounts around a fill, read as f64.
#[derive(Clone, Copy)]
struct Ledger {
    position: i32,
    realized: f64,
    fees: f64,
}

impl Ledger {
    fn of(st: &EnvState) -> Ledger {
        Ledger {
            position: st.position[0],
            realized: f64::from(st.realized[0]),
            fees: f64::from(st.fees[0]),
        }
    }
}

impl Books {
    /// Book a fill at bar `b` that took the account from `before` to `after`: an opening
    /// fill starts a trade with its commission, an adding one charges it, a reducing one
    /// credits the realized PnL, and a closing or flipping one closes the trade at b (a
    /// flip shares the commission by contracts and opens the next trade).
    fn fill(&mut self, b: usize, before: Ledger, after: Ledger) {
        let (p0, p1) = (before.position, after.position);
        let realized = after.realized - before.realized;
        let fees = after.fees - before.fees;
        let traded = f64::from((p1 - p0).unsigned_abs());
        let (closing, opening) = if p0 == 0 || p0.signum() == p1.signum() && p1.abs() > p0.abs() {
            (0.0, fees)
        } else if p1 == 0 || p1.signum() == p0.signum() {
            (fees, 0.0)
        } else {
            let share = f64::from(p0.unsigned_abs()) / traded;
            (fees * share, fees * (1.0 - share))
        };
        if let Some(t) = self.open.as_mut() {
            t.pnl += realized - closing;
        }
        let closes = p0 != 0 && (p1 == 0 || p1.signum() != p0.signum());
        if closes {
            self.close(b);
        }
        match self.open.as_mut() {
            Some(t) => t.pnl -= opening,
            None if p1 != 0 => {
                self.open = Some(Trade {
                    entry_bar: b,
                    exit_bar: b,
                    pnl: -opening,
                })
            }
            None => {}
        }
    }

    /// Close the open trade at bar `b`.
    fn close(&mut self, b: usize) {
        if let Some(mut t) = self.open.take() {
            t.exit_bar = b;
            self.trades.push(t);
        }
    }
}

/// Check that `policy` can act on `m` with `branches`.
fn check_policy(m: &EnvMarket, policy: Policy) -> Result<(), BacktestError> {
    match policy {
        Policy::Greedy { cfg, params } => {
            let want = param_count(cfg);
            if params.len() != want {
                return Err(BacktestError::ParamCount {
                    got: params.len(),
                    want,
                });
            }
            if cfg.state_dim != m.state_dim() {
                return Err(BacktestError::StateDim {
                    got: cfg.state_dim,
                    want: m.state_dim(),
                    features: m.feature_dim,
                });
            }
            Ok(())
        }
        Policy::Planted { feature, .. } if feature >= m.feature_dim => {
            Err(BacktestError::PlantedFeature {
                feature,
                features: m.feature_dim,
            })
        }
        _ => Ok(()),
    }
}

/// The account at the split's first bar, flat, clock 0.
fn account_at_start(cfg: &EnvConfig, split: Split) -> EnvState {
    let mut st = EnvState::new(cfg, split);
    st.bar[0] = split.lo;
    st
}

/// The open position of `st` at bar `t`'s mid, `(mid - entry) pos point_value`.
fn mark_to_mid(cfg: &EnvConfig, m: &EnvMarket, st: &EnvState, t: usize) -> f64 {
    let pos = st.position[0];
    if pos == 0 {
        return 0.0;
    }
    let mid = (f64::from(m.bid[t]) + f64::from(m.ask[t])) / 2.0;
    (mid - f64::from(st.entry[0])) * f64::from(pos) * f64::from(cfg.point_value)
}

/// Walk `split` of `m` with `policy` (module doc): one account, the env constants of `cfg`
/// (its `envs` ignored), fill and random draws keyed by `cfg.seed`.
pub fn backtest(
    cfg: &EnvConfig,
    branches: &[usize],
    m: &EnvMarket,
    split: Split,
    policy: Policy,
) -> Result<Backtest, BacktestError> {
    let one = EnvConfig {
        envs: 1,
        ..cfg.clone()
    };
    one.validate(branches)?;
    split.validate(m.bars)?;
    check_policy(m, policy)?;
    let mut st = account_at_start(&one, split);
    let mut books = Books {
        realized: 0.0,
        open: None,
        trades: Vec::new(),
    };
    let (lo, hi) = (split.lo as usize, split.hi as usize);
    let mut equity = vec![0.0];
    let mut positions = Vec::with_capacity(hi - lo);
    for b in lo..hi - 1 {
        let actions = policy_actions(&one, branches, m, &st, policy);
        let before = Ledger::of(&st);
        let fills = fill_step(&one, m, &mut st, &actions);
        let after_fill = Ledger::of(&st);
        books.fill(b, before, after_fill);
        positions.push(st.position[0]);
        let out = barriers(&one, m, split, &mut st, &fills.net_before);
        let t = b + 1;
        books.realized += f64::from(out.pnl[0]);
        if out.done[0] == 1.0 {
            let fill_net = (after_fill.realized - after_fill.fees) - f64::from(fills.net_before[0]);
            if let Some(trade) = books.open.as_mut() {
                trade.pnl += f64::from(out.pnl[0]) - fill_net;
            }
            books.close(t);
            st.bar[0] = t as u32;
        }
        equity.push(books.realized + mark_to_mid(&one, m, &st, t));
    }
    positions.push(st.position[0]);
    Ok(Backtest {
        split,
        equity,
        positions,
        trades: books.trades,
    })
}

/// Buy-and-hold on `split`, computed directly (it is not an action of the walk: the env's
/// fills pay the spread and its barriers would close the position): long one contract
/// from the first bar's close to the last bar's, one commission at each end, marked at the
/// close. `equity[i] = (close[lo + i] - close[lo]) point_value - commission`, less a second
/// commission at the last bar; position 1 at every bar but the last; one trade.
pub fn buy_and_hold(cfg: &EnvConfig, m: &EnvMarket, split: Split) -> Result<Backtest, ConfigError> {
    split.validate(m.bars)?;
    let (lo, last) = (split.lo as usize, split.hi as usize - 1);
    let (pv, fee) = (f64::from(cfg.point_value), f64::from(cfg.commission));
    let first = f64::from(m.close[lo]);
    let mut equity: Vec<f64> = (lo..=last)
        .map(|t| (f64::from(m.close[t]) - first) * pv - fee)
        .collect();
    let mut positions = vec![1; equity.len()];
    if let (Some(e), Some(p)) = (equity.last_mut(), positions.last_mut()) {
        *e -= fee;
        *p = 0;
    }
    let pnl = equity.last().copied().unwrap_or(0.0);
    Ok(Backtest {
        split,
        equity,
        positions,
        trades: vec![Trade {
            entry_bar: lo,
            exit_bar: last,
            pnl,
        }],
    })
}

/// The bars a report covers: market bar indices (`last_bar` inclusive) and their times,
/// epoch milliseconds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SplitInfo {
    pub first_bar: usize,
    pub last_bar: usize,
    pub bars: usize,
    pub first_time: i64,
    pub last_time: i64,
}

/// One policy's backtest: its name, figures and equity curve (one value per bar).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PolicyEval {
    pub name: String,
    pub figures: Figures,
    pub equity: Vec<f64>,
}

/// The evaluation of a trained network on the test split: the split, how its Sharpe ratios
/// are annualised, the seed of the fill and random draws, and the policies "greedy",
/// "random" and "buy_and_hold", in that order. `eval.json` is this, serialised.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EvalReport {
    pub split: SplitInfo,
    pub annualisation: Annualisation,
    pub seed: u64,
    pub policies: Vec<PolicyEval>,
}

/// The backtests of the network `online` (parameters of `cfg.qnet`) acting greedily
/// (epsilon 0), of the uniformly random policy, and of buy-and-hold, on the test split of
/// `market` (`[train_end, bars)`), with the env constants of `cfg.env` and its seed replaced
/// by `seed`. Sharpe ratios are annualised with `252 x` the test split's bars per calendar
/// day ([`Annualisation`]).
pub fn backtest_report(
    cfg: &TrainConfig,
    online: &[f32],
    market: &Market,
    seed: u64,
) -> Result<EvalReport, BacktestError> {
    cfg.validate(market.feature_dim)?;
    if market.time_ms.len() != market.bars {
        return Err(BacktestError::TimeCount {
            times: market.time_ms.len(),
            bars: market.bars,
        });
    }
    let m = EnvMarket::of(market);
    let split = Split::test(market);
    split.validate(m.bars)?;
    let env = EnvConfig {
        envs: 1,
        seed,
        ..cfg.env.clone()
    };
    let (lo, hi) = (split.lo as usize, split.hi as usize);
    let annualisation = Annualisation::of_times(&market.time_ms[lo..hi]);
    let branches = &cfg.qnet.branches;
    let greedy = Policy::Greedy {
        cfg: &cfg.qnet,
        params: online,
    };
    let runs = [
        ("greedy", backtest(&env, branches, &m, split, greedy)?),
        (
            "random",
            backtest(&env, branches, &m, split, Policy::Random)?,
        ),
        ("buy_and_hold", buy_and_hold(&env, &m, split)?),
    ];
    let policies = runs
        .into_iter()
        .map(|(name, run)| PolicyEval {
            name: name.to_string(),
            figures: run.figures(annualisation.bars_per_year),
            equity: run.equity,
        })
        .collect();
    Ok(EvalReport {
        split: SplitInfo {
            first_bar: lo,
            last_bar: hi - 1,
            bars: hi - lo,
            first_time: market.time_ms[lo],
            last_time: market.time_ms[hi - 1],
        },
        annualisation,
        seed,
        policies,
    })
}

/// A figure that may be undefined: `-` for None.
fn or_dash(x: Option<f64>, decimals: usize) -> String {
    x.map_or_else(|| "-".to_string(), |v| format!("{v:.decimals$}"))
}

impl EvalReport {
    /// The figures as an aligned text table, one row per policy, under a line naming the
    /// split and the annualisation.
    pub fn table(&self) -> String {
        let s = &self.split;
        let a = &self.annualisation;
        let mut lines = vec![
            format!(
                "test split: bars {}..={} ({} bars), {} to {}; Sharpe annualised by sqrt(252 x {:.1} bars/day = {:.0} bars/year)",
                s.first_bar,
                s.last_bar,
                s.bars,
                EpochMs(s.first_time),
                EpochMs(s.last_time),
                a.bars_per_day,
                a.bars_per_year
            ),
            format!(
                "{:<12} {:>12} {:>10} {:>7} {:>11} {:>6} {:>7} {:>9} {:>8}",
                "policy", "total PnL", "per trade", "Sharpe", "max DD", "hit", "trades", "hold bars", "exposure"
            ),
        ];
        for p in &self.policies {
            let f = &p.figures;
            lines.push(format!(
                "{:<12} {:>12.2} {:>10} {:>7.2} {:>11.2} {:>6} {:>7} {:>9} {:>8.3}",
                p.name,
                f.total_pnl,
                or_dash(f.mean_trade_pnl, 2),
                f.sharpe,
                f.max_drawdown,
                or_dash(f.hit_rate, 3),
                f.trades,
                or_dash(f.mean_holding_bars, 1),
                f.exposure
            ));
        }
        lines.join("\n")
    }
}
