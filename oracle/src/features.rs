//! Per-bar features and next-bar targets, z-scored with training-split statistics: the
//! arrays the GPU environment uploads once.

use serde::{Deserialize, Serialize};

use crate::market::{Bars, MarketError, MS_PER_DAY};

pub const FEATURE_DIM: usize = 11;

/// The features of bar t, in order, all computed from bars <= t only (c = close):
/// - `ret_h` for h in 1, 5, 15, 60: ln(c_t / c_{t-h}), h bars back (not minutes);
/// - `range`: (high_t - low_t) / c_t;
/// - `log_volume`: ln(1 + volume_t);
/// - `spread_rel`: (ask_t - bid_t) / mid_t with mid_t = (ask_t + bid_t) / 2;
/// - `ofi`: (bid_size_t - ask_size_t) / (bid_size_t + ask_size_t), 0 if both are 0;
/// - `volatility`: population std of the last [`VOLATILITY_WINDOW`] 1-bar log returns;
/// - `tod_sin`, `tod_cos`: sin and cos of 2 pi (time_ms mod 1 day) / 1 day.
///
/// Before bar [`WARMUP`] a history index below 0 is clamped to bar 0.
pub const FEATURE_NAMES: [&str; FEATURE_DIM] = [
    "ret_1",
    "ret_5",
    "ret_15",
    "ret_60",
    "range",
    "log_volume",
    "spread_rel",
    "ofi",
    "volatility",
    "tod_sin",
    "tod_cos",
];

const RETURN_HORIZONS: [usize; 4] = [1, 5, 15, 60];

/// Bars in the rolling windows of the `volatility` feature and of [`Market::volatility`].
pub const VOLATILITY_WINDOW: usize = 30;

/// Bars of history the longest feature needs: the first usable bar.
pub const WARMUP: usize = 60;

/// A training-split standard deviation below this is replaced by 1 (the feature is constant
/// on the training bars, so it is only centred).
pub const STD_FLOOR: f64 = 1e-8;

/// [`Market::volatility`] is at least this fraction of the close (1 basis point).
pub const VOLATILITY_FLOOR_REL: f64 = 1e-4;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FeatureConfig {
    /// Fraction of the usable bars [WARMUP, bars) that form the training split.
    pub train_fraction: f64,
}

impl Default for FeatureConfig {
    fn default() -> Self {
        FeatureConfig {
            train_fraction: 0.8,
        }
    }
}

impl FeatureConfig {
    pub fn validate(&self) -> Result<(), MarketError> {
        if self.train_fraction > 0.0 && self.train_fraction < 1.0 {
            Ok(())
        } else {
            let fix = "use a fraction strictly between 0 and 1, e.g. 0.8";
            Err(MarketError::BadConfig {
                name: "train_fraction",
                value: self.train_fraction.to_string(),
                fix,
            })
        }
    }
}

/// What the GPU uploads once: float32 arrays, bar-major.
#[derive(Clone, Debug, PartialEq)]
pub struct Market {
    pub bars: usize,
    pub feature_dim: usize,
    /// [bars * feature_dim], bar-major, (x - mean) / std with training-split statistics.
    pub features: Vec<f32>,
    /// Per-feature mean and std over the training bars [first_bar, train_end) (population std,
    /// [`STD_FLOOR`] applied).
    pub mean: Vec<f64>,
    pub std: Vec<f64>,
    pub close: Vec<f32>,
    pub high: Vec<f32>,
    pub low: Vec<f32>,
    pub bid: Vec<f32>,
    pub ask: Vec<f32>,
    /// Price-unit volatility known at bar t: the mean of |c_i - c_{i-1}| over the last
    /// [`VOLATILITY_WINDOW`] bars i <= t (fewer at the start), at least
    /// [`VOLATILITY_FLOOR_REL`] * c_t.
    pub volatility: Vec<f32>,
    /// Targets: bar t+1's close, high, low and ask - bid (the last bar: its own).
    pub next_close: Vec<f32>,
    pub next_high: Vec<f32>,
    pub next_low: Vec<f32>,
    pub next_spread: Vec<f32>,
    /// First bar whose features have full history: [`WARMUP`].
    pub first_bar: usize,
    /// [first_bar, train_end) is the training split, [train_end, bars) the test split.
    pub train_end: usize,
    /// Each bar's time, epoch milliseconds (the bars' own, [`Bars::time_ms`]): the dates a
    /// report names and the bars per day its annualisation counts.
    pub time_ms: Vec<i64>,
}

/// The raw (unnormalised) features of bar t; see [`FEATURE_NAMES`].
fn raw_features(b: &Bars, t: usize) -> [f64; FEATURE_DIM] {
    let c = &b.close;
    let ret = |h: usize| (c[t] / c[t.saturating_sub(h)]).ln();
    let returns: Vec<f64> = window(t).map(|i| (c[i] / c[i - 1]).ln()).collect();
    let sizes = b.bid_size[t] + b.ask_size[t];
    let ofi = if sizes > 0.0 {
        (b.bid_size[t] - b.ask_size[t]) / sizes
    } else {
        0.0
    };
    let phase =
        std::f64::consts::TAU * b.time_ms[t].rem_euclid(MS_PER_DAY) as f64 / MS_PER_DAY as f64;
    let [r1, r5, r15, r60] = RETURN_HORIZONS.map(ret);
    [
        r1,
        r5,
        r15,
        r60,
        (b.high[t] - b.low[t]) / c[t],
        b.volume[t].ln_1p(),
        2.0 * (b.ask[t] - b.bid[t]) / (b.ask[t] + b.bid[t]),
        ofi,
        mean_std(&returns).1,
        phase.sin(),
        phase.cos(),
    ]
}

/// The bars i in (t - VOLATILITY_WINDOW, t] with i >= 1, whose 1-bar moves c_{i-1} -> c_i
/// the rolling windows use.
fn window(t: usize) -> std::ops::RangeInclusive<usize> {
    t.saturating_sub(VOLATILITY_WINDOW - 1).max(1)..=t
}

/// Mean and population standard deviation; (0, 0) for no values.
fn mean_std(x: &[f64]) -> (f64, f64) {
    if x.is_empty() {
        return (0.0, 0.0);
    }
    let n = x.len() as f64;
    let mean = x.iter().sum::<f64>() / n;
    (
        mean,
        (x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n).sqrt(),
    )
}

/// Builds the uploaded arrays from checked bars.
///
/// Split: n usable = bars - WARMUP, train_end = WARMUP + floor(train_fraction * n usable);
/// at least 2 training bars and 1 test bar. Normalisation: for each feature j,
/// mean_j and std_j over the training bars only (std_j < STD_FLOOR -> 1), and
/// features[t * F + j] = (x_tj - mean_j) / std_j for every bar, in f64, rounded once to f32.
pub fn build(bars: &Bars, cfg: &FeatureConfig) -> Result<Market, MarketError> {
    cfg.validate()?;
    bars.validate("feature input")?;
    let n = bars.len();
    let usable = n.saturating_sub(WARMUP);
    let train = (cfg.train_fraction * usable as f64).floor() as usize;
    if train < 2 || usable - train < 1 {
        return Err(MarketError::TooFewBars {
            bars: n,
            warmup: WARMUP,
            train,
            test: usable - train,
        });
    }
    let train_end = WARMUP + train;
    let raw: Vec<[f64; FEATURE_DIM]> = (0..n).map(|t| raw_features(bars, t)).collect();
    let (mean, std): (Vec<f64>, Vec<f64>) = (0..FEATURE_DIM)
        .map(|j| {
            let (m, s) = mean_std(
                &raw[WARMUP..train_end]
                    .iter()
                    .map(|x| x[j])
                    .collect::<Vec<_>>(),
            );
            (m, if s < STD_FLOOR { 1.0 } else { s })
        })
        .unzip();
    let features = raw
        .iter()
        .flat_map(|x| (0..FEATURE_DIM).map(|j| ((x[j] - mean[j]) / std[j]) as f32))
        .collect();

    let c = &bars.close;
    let volatility = (0..n)
        .map(|t| {
            let moves: Vec<f64> = window(t).map(|i| (c[i] - c[i - 1]).abs()).collect();
            mean_std(&moves).0.max(VOLATILITY_FLOOR_REL * c[t]) as f32
        })
        .collect();
    let f32s = |x: &[f64]| x.iter().map(|&v| v as f32).collect::<Vec<f32>>();
    let next = |x: &[f64]| {
        (0..n)
            .map(|t| x[(t + 1).min(n - 1)] as f32)
            .collect::<Vec<f32>>()
    };
    let spread: Vec<f64> = bars.ask.iter().zip(&bars.bid).map(|(a, b)| a - b).collect();
    Ok(Market {
        bars: n,
        feature_dim: FEATURE_DIM,
        features,
        mean,
        std,
        close: f32s(c),
        high: f32s(&bars.high),
        low: f32s(&bars.low),
        bid: f32s(&bars.bid),
        ask: f32s(&bars.ask),
        volatility,
        next_close: next(c),
        next_high: next(&bars.high),
        next_low: next(&bars.low),
        next_spread: next(&spread),
        first_bar: WARMUP,
        train_end,
        time_ms: bars.time_ms.clone(),
    })
}
