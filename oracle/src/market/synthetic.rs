//! The seeded synthetic market, so that training runs with no data files.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::{Bars, MarketError, Row, MS_PER_MINUTE};

/// The synthetic market's parameters; see [`synthetic`] for the model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SyntheticConfig {
    /// Number of bars to emit.
    pub bars: usize,
    /// ChaCha8 seed: equal configs give equal bars.
    pub seed: u64,
    pub start_price: f64,
    /// Price grid: every price is an integer multiple of the tick.
    pub tick: f64,
    /// Time of the first simulated minute, epoch ms.
    pub start_time_ms: i64,
    /// Unconditional standard deviation of the 1-minute log return.
    pub sigma: f64,
    /// GARCH(1,1) weight of the last squared return.
    pub garch_alpha: f64,
    /// GARCH(1,1) weight of the last variance; garch_alpha + garch_beta < 1.
    pub garch_beta: f64,
    /// Minutes per session; a 60-minute break follows each session.
    pub session_minutes: usize,
    /// Probability that a minute has no trades and so no bar.
    pub gap_prob: f64,
    /// Loading of the quote-size imbalance on the next minute's standardised return.
    pub imbalance_signal: f64,
}

impl Default for SyntheticConfig {
    /// ES-like: 1680 index points, 0.25 tick, 2.4e-4 minute volatility (the ES front
    /// month, October 2013), 23-hour sessions, starting 2013-10-07 00:00.
    fn default() -> Self {
        SyntheticConfig {
            bars: 20_000,
            seed: 0x07a1_11b0,
            start_price: 1680.0,
            tick: 0.25,
            start_time_ms: 1_381_104_000_000,
            sigma: 2.4e-4,
            garch_alpha: 0.08,
            garch_beta: 0.9,
            session_minutes: 1380,
            gap_prob: 0.02,
            imbalance_signal: 0.06,
        }
    }
}

impl SyntheticConfig {
    pub fn validate(&self) -> Result<(), MarketError> {
        let persistence = self.garch_alpha + self.garch_beta;
        let checks = [
            (
                self.bars >= 1,
                "bars",
                self.bars as f64,
                "generate at least 1 bar",
            ),
            (
                self.tick > 0.0 && self.tick.is_finite(),
                "tick",
                self.tick,
                "use a positive tick such as 0.25",
            ),
            (
                self.start_price.is_finite(),
                "start_price",
                self.start_price,
                "use a finite price such as 1680",
            ),
            (
                self.start_price >= 100.0 * self.tick,
                "start_price",
                self.start_price,
                "use at least 100 ticks",
            ),
            (
                self.sigma > 0.0 && self.sigma <= 0.01,
                "sigma",
                self.sigma,
                "use a value in (0, 0.01], e.g. 2.4e-4",
            ),
            (
                (0.0..1.0).contains(&self.garch_alpha),
                "garch_alpha",
                self.garch_alpha,
                "use [0, 1), e.g. 0.08",
            ),
            (
                (0.0..1.0).contains(&self.garch_beta),
                "garch_beta",
                self.garch_beta,
                "use [0, 1), e.g. 0.9",
            ),
            (
                persistence < 1.0,
                "garch_alpha + garch_beta",
                persistence,
                "keep it below 1 (stationary variance)",
            ),
            (
                self.session_minutes >= 2,
                "session_minutes",
                self.session_minutes as f64,
                "use at least 2, e.g. 1380",
            ),
            (
                (0.0..=0.5).contains(&self.gap_prob),
                "gap_prob",
                self.gap_prob,
                "use [0, 0.5], e.g. 0.02",
            ),
            (
                self.imbalance_signal.is_finite(),
                "imbalance_signal",
                self.imbalance_signal,
                "use a finite value",
            ),
            (
                self.imbalance_signal >= 0.0,
                "imbalance_signal",
                self.imbalance_signal,
                "use >= 0, e.g. 0.06",
            ),
        ];
        match checks.into_iter().find(|c| !c.0) {
            Some((_, name, value, fix)) => Err(MarketError::BadConfig {
                name,
                value: value.to_string(),
                fix,
            }),
            None => Ok(()),
        }
    }
}

/// Sub-steps of the intrabar path.
const SUBSTEPS: usize = 6;

fn normal(rng: &mut ChaCha8Rng) -> f64 {
    let u1 = 1.0 - rng.gen::<f64>();
    let u2: f64 = rng.gen();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

fn shocks(rng: &mut ChaCha8Rng) -> [f64; SUBSTEPS] {
    std::array::from_fn(|_| normal(rng))
}

/// A seeded synthetic minute-bar market with the microstructure of a liquid future.
///
/// Minutes k = 0, 1, ... run in sessions of L = `session_minutes` minutes, each followed by a
/// 60-minute break; m = k mod L is the minute of the session. With sigma, alpha, beta from the
/// config, omega = sigma^2 (1 - alpha - beta), standard normals z (Box-Muller on ChaCha8
/// uniforms) and E ~ Exp(1):
/// - volatility, GARCH(1,1): s_k^2 = omega + alpha r_{k-1}^2 + beta s_{k-1}^2, s_0 = sigma;
/// - latent log price x: SUBSTEPS = 6 steps x += s_k z_{k,j} / sqrt(6), so the minute's
///   return is r_k = s_k Z_k with Z_k = sum_j z_{k,j} / sqrt(6) ~ N(0, 1); at each session
///   boundary x also jumps by 10 sigma z;
/// - trades on the tick grid, q = tick * max(1, round(exp(x) / tick)): open = q at the
///   minute's start, close = q at its end, high/low = max/min of q over the start and the
///   6 steps (so low <= open, close <= high);
/// - spread in ticks n_k = 1 + floor(0.3 (s_k / sigma) E): at least one tick, wider when
///   volatile; the last trade is at the ask if the last step rose (bid = close - n tick, floored
///   at one tick), else at the bid (ask = close + n tick);
/// - volume = max(1, round(200 u(m) (s_k / sigma) exp(z - 0.5))), U-shaped seasonality
///   u(m) = 0.5 + 1.5 (2 m / (L - 1) - 1)^2 (2 at the session's open and close, 0.5 at midday);
/// - depth D = 150 exp(0.6 z - 0.18), imbalance I = tanh(`imbalance_signal` Z_{k+1} + 0.6 z),
///   bid_size = max(1, round(D (1 + I))), ask_size = max(1, round(D (1 - I))): the book leans
///   toward the next minute's move, a little (correlation about
///   `imbalance_signal` / 0.6 for small values);
/// - a minute emits no bar with probability `gap_prob` (its price still moves), and no
///   bar is emitted during breaks, so bars have gaps of missing minutes.
pub fn synthetic(cfg: &SyntheticConfig) -> Result<Bars, MarketError> {
    cfg.validate()?;
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    let (sigma, tick, session) = (cfg.sigma, cfg.tick, cfg.session_minutes);
    let omega = sigma * sigma * (1.0 - cfg.garch_alpha - cfg.garch_beta);
    let on_grid = |x: f64| tick * (x.exp() / tick).round().max(1.0);
    let mut x = cfg.start_price.ln();
    let (mut var, mut r_prev) = (sigma * sigma, 0.0);
    let mut next_shocks = shocks(&mut rng);
    let mut bars = Bars::default();
    let mut k = 0;
    while bars.len() < cfg.bars {
        let m = k % session;
        let time = cfg.start_time_ms + MS_PER_MINUTE * (k + 60 * (k / session)) as i64;
        if m == 0 && k > 0 {
            x += 10.0 * sigma * normal(&mut rng);
        }
        var = omega + cfg.garch_alpha * r_prev * r_prev + cfg.garch_beta * var;
        let s = var.sqrt();
        let z = std::mem::replace(&mut next_shocks, shocks(&mut rng));
        let x0 = x;
        let open = on_grid(x);
        let (mut high, mut low) = (open, open);
        for zj in z {
            x += s * zj / (SUBSTEPS as f64).sqrt();
            let q = on_grid(x);
            high = high.max(q);
            low = low.min(q);
        }
        r_prev = x - x0;
        let close = on_grid(x);
        let spread = tick * (1.0 + (0.3 * s / sigma * -(1.0 - rng.gen::<f64>()).ln()).floor());
        let (bid, ask) = if z[SUBSTEPS - 1] > 0.0 {
            ((close - spread).max(tick), close)
        } else {
            (close, close + spread)
        };
        let u = 2.0 * m as f64 / (session - 1) as f64 - 1.0;
        let volume = (200.0 * (0.5 + 1.5 * u * u) * s / sigma * (normal(&mut rng) - 0.5).exp())
            .round()
            .max(1.0);
        let depth = 150.0 * (0.6 * normal(&mut rng) - 0.18).exp();
        let next_z = next_shocks.iter().sum::<f64>() / (SUBSTEPS as f64).sqrt();
        let imbalance = (cfg.imbalance_signal * next_z + 0.6 * normal(&mut rng)).tanh();
        let size = |sign: f64| (depth * (1.0 + sign * imbalance)).round().max(1.0);
        if rng.gen::<f64>() >= cfg.gap_prob {
            bars.push(Row {
                time,
                open,
                high,
                low,
                close,
                volume,
                bid,
                ask,
                bid_size: size(1.0),
                ask_size: size(-1.0),
            });
        }
        k += 1;
    }
    bars.validate("synthetic market")?;
    Ok(bars)
}
