//! The figures of a backtest: what a per-bar equity curve, its positions and its closed
//! trades say about a policy, in the account currency.
//!
//! **Equity** starts at 0 before the first bar; `equity[i]` is the account's equity at bar i
//! of the split (realized PnL net of commissions plus the open position marked to market).
//! The per-bar changes are `d_i = equity[i] - equity[i - 1]` with `equity[-1] = 0`, so they
//! sum to the total PnL.
//!
//! **Sharpe ratio**, annualised (Sharpe 1994, "The Sharpe Ratio"; Lo 2002, "The Statistics of
//! Sharpe Ratios", for the square-root scaling of i.i.d. returns): `mean(d) / std(d) x
//! sqrt(bars_per_year)` with the sample standard deviation (n - 1), of currency changes (the
//! account has no capital base, so the ratio of PnL changes stands for that of returns) and
//! no risk-free rate. `bars_per_year = 252 x bars_per_day` ([`Annualisation`]). Reported as
//! 0 where it is undefined: fewer than 2 changes, or a standard deviation of 0 (a flat
//! curve).
//!
//! **Max drawdown**: the largest fall of equity from its running peak, `max_i (peak_i -
//! equity[i])`, `peak_i = max(0, equity[0..=i])` (the account starts at 0), as a positive
//! amount; 0 for a curve that never falls.

use serde::{Deserialize, Serialize};

use crate::market::MS_PER_DAY;

/// Trading days in a year: the annualisation's convention.
pub const TRADING_DAYS_PER_YEAR: f64 = 252.0;

/// One round trip of the account, flat to flat. A flip (long to short in one fill) closes
/// one trade and opens the next at the same bar, the fill's commission shared between them
/// by contracts.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Trade {
    /// Market bar of the fill that opened it.
    pub entry_bar: usize,
    /// Market bar where it was closed: the closing fill's, or the bar of a barrier exit.
    pub exit_bar: usize,
    /// Net PnL: what its reductions and exit realized, less the commissions of its
    /// contracts (both sides).
    pub pnl: f64,
}

/// How per-bar figures scale to a year: `bars_per_year = 252 x bars_per_day`, with
/// `bars_per_day = bars / days` estimated from the bars' times, `days` the calendar dates
/// (UTC day of the epoch-ms time, exchange-local for LEAN data) with at least one bar.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Annualisation {
    pub trading_days_per_year: f64,
    pub days: usize,
    pub bars_per_day: f64,
    pub bars_per_year: f64,
}

impl Annualisation {
    /// The annualisation of bars at `times` (epoch ms); all 0 for no bars.
    pub fn of_times(times: &[i64]) -> Annualisation {
        let mut dates: Vec<i64> = times.iter().map(|t| t.div_euclid(MS_PER_DAY)).collect();
        dates.sort_unstable();
        dates.dedup();
        let days = dates.len();
        let bars_per_day = if days > 0 {
            times.len() as f64 / days as f64
        } else {
            0.0
        };
        Annualisation {
            trading_days_per_year: TRADING_DAYS_PER_YEAR,
            days,
            bars_per_day,
            bars_per_year: TRADING_DAYS_PER_YEAR * bars_per_day,
        }
    }
}

/// A policy's figures on a split. Where a figure is undefined it is reported as stated on
/// its field, never as NaN.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Figures {
    /// Equity at the last bar: the PnL net of commissions and spread (0 for no bars).
    pub total_pnl: f64,
    /// Mean net PnL of a closed trade; null without trades.
    pub mean_trade_pnl: Option<f64>,
    /// Annualised Sharpe ratio of the per-bar equity changes (module doc); 0 where undefined.
    pub sharpe: f64,
    /// Largest peak-to-trough fall of equity, currency, >= 0 (module doc).
    pub max_drawdown: f64,
    /// Share of closed trades with net PnL > 0; null without trades.
    pub hit_rate: Option<f64>,
    /// Closed trades.
    pub trades: usize,
    /// Mean of `exit_bar - entry_bar` over closed trades; null without trades.
    pub mean_holding_bars: Option<f64>,
    /// Share of bars whose position (held from the bar to the next) is not 0; 0 for no bars.
    pub exposure: f64,
}

impl Figures {
    /// The figures of an equity curve, its per-bar positions and its closed trades, the
    /// Sharpe ratio scaled by `sqrt(bars_per_year)`.
    pub fn of(equity: &[f64], positions: &[i32], trades: &[Trade], bars_per_year: f64) -> Figures {
        Figures {
            total_pnl: equity.last().copied().unwrap_or(0.0),
            mean_trade_pnl: mean(trades.iter().map(|t| t.pnl)),
            sharpe: sharpe(&equity_changes(equity), bars_per_year),
            max_drawdown: max_drawdown(equity),
            hit_rate: mean(trades.iter().map(|t| f64::from(u8::from(t.pnl > 0.0)))),
            trades: trades.len(),
            mean_holding_bars: mean(
                trades
                    .iter()
                    .map(|t| t.exit_bar.saturating_sub(t.entry_bar) as f64),
            ),
            exposure: exposure(positions),
        }
    }
}

/// `d_i = equity[i] - equity[i - 1]`, `equity[-1] = 0`: one change per bar.
pub fn equity_changes(equity: &[f64]) -> Vec<f64> {
    let mut before = 0.0;
    equity
        .iter()
        .map(|&e| {
            let d = e - before;
            before = e;
            d
        })
        .collect()
}

/// `mean(d) / std(d) x sqrt(bars_per_year)`, sample std; 0 for fewer than 2 changes or a
/// standard deviation that is 0 or not finite.
pub fn sharpe(changes: &[f64], bars_per_year: f64) -> f64 {
    let n = changes.len();
    if n < 2 {
        return 0.0;
    }
    let m = changes.iter().sum::<f64>() / n as f64;
    let var = changes.iter().map(|d| (d - m) * (d - m)).sum::<f64>() / (n - 1) as f64;
    let sd = var.sqrt();
    if sd > 0.0 && sd.is_finite() {
        m / sd * bars_per_year.max(0.0).sqrt()
    } else {
        0.0
    }
}

/// `max_i (peak_i - equity[i])`, `peak_i = max(0, equity[0..=i])`.
pub fn max_drawdown(equity: &[f64]) -> f64 {
    let mut peak = 0.0f64;
    let mut worst = 0.0f64;
    for &e in equity {
        peak = peak.max(e);
        worst = worst.max(peak - e);
    }
    worst
}

/// Share of `positions` that are not 0; 0 for none.
pub fn exposure(positions: &[i32]) -> f64 {
    mean(positions.iter().map(|&p| f64::from(u8::from(p != 0)))).unwrap_or(0.0)
}

/// The mean of `xs`; None when empty.
fn mean(xs: impl Iterator<Item = f64>) -> Option<f64> {
    let (sum, n) = xs.fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
    (n > 0).then(|| sum / n as f64)
}
