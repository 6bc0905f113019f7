//! The backtest environment: the spec of the experience kernels `state_gather`,
//! `action_select`, `fill_step` and `barriers` (cuda/), N environments stepped in parallel.
//!
//! **Numerics.** The environment branches on its values (does an order fill, is a barrier
//! touched), so GPU and oracle must take the same branches: everything here is float32 (or
//! integer) arithmetic, each operation written out in the order the kernels perform it,
//! with no fused multiply-add on either side (the kernels use the `__f*_rn` intrinsics).
//! IEEE float32 `+ - * /` and `sqrt` are correctly rounded on both, so every output, PnL
//! included, is bitwise equal ([`crate::tolerance::ENV`]).
//!
//! **Actions** ([`crate::action`]) are three branches (Tavakoli et al. 2018): direction
//! {hold, buy, sell}, size {1, ..., n} contracts, order type {market, IOC, limit}. An order is
//! clipped so that the position stays within `[-max_position, max_position]`.
//!
//! **Randomness**: Philox4x32-10 with counter `(env, clock[env], stream, 0)`, key = the run
//! seed; `clock` counts the env's steps, so every draw is named by env, step and purpose.
//!
//! **One timestep** of env n at bar t: [`state_gather`] (features of t, portfolio), the
//! Q-forward, [`action_select`], [`fill_step`] against the quote of bar t, then [`barriers`]
//! at bar t + 1: take-profit / stop-loss against its high and low, time limit, end of data,
//! mark-to-market at its mid, the step's net realized PnL, the state s' after the action
//! (before any reset), and auto-reset of a done env to a Philox-chosen start. The reward is
//! not the env's: the reward pipeline ([`crate::reward`]) makes it from the step's PnL and
//! the position.

use crate::action::{
    ACTION_BRANCHES, BRANCH_COUNT, BRANCH_DIRECTION, BRANCH_ORDER_TYPE, BRANCH_SIZE, BUY, IOC,
    MARKET, SELL,
};
use crate::config::{require, ConfigError};
use crate::philox::{self, stream};
use serde::{Deserialize, Serialize};

/// Why an env is done (0: not done).
pub const TAKE_PROFIT: i32 = 1;
pub const STOP_LOSS: i32 = 2;
pub const TIME_LIMIT: i32 = 3;
pub const END_OF_DATA: i32 = 4;
/// Portfolio features appended to the market features of a state.
pub const PORTFOLIO_FEATURES: usize = 4;

/// Constants of the environment. Money is in the account currency: PnL = price points x
/// contracts x `point_value`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EnvConfig {
    /// Parallel environments N.
    pub envs: usize,
    /// Largest |position| in contracts.
    pub max_position: i32,
    /// Currency per price point per contract (ES: 50).
    pub point_value: f32,
    /// Fee per contract traded.
    pub commission: f32,
    /// Fill probability of an IOC order at the touch.
    pub ioc_fill_prob: f32,
    /// Limit orders fill with probability `min + (max - min) vol / (vol + spread)`.
    pub limit_fill_min: f32,
    pub limit_fill_max: f32,
    /// Share of the spread a filled limit order captures: a buy fills at `ask - c spread`.
    pub limit_capture: f32,
    /// Take-profit distance as a fraction of the entry price (0: off).
    pub take_profit: f32,
    /// Stop-loss distance as a fraction of the entry price (0: off).
    pub stop_loss: f32,
    /// Steps after which an episode ends (time limit).
    pub max_steps: u32,
    /// Run seed: the Philox key.
    pub seed: u64,
}

impl Default for EnvConfig {
    fn default() -> Self {
        EnvConfig {
            envs: 256,
            max_position: 10,
            point_value: 50.0,
            commission: 2.5,
            ioc_fill_prob: 0.8,
            limit_fill_min: 0.2,
            limit_fill_max: 0.7,
            limit_capture: 0.5,
            take_profit: 0.003,
            stop_loss: 0.0015,
            max_steps: 240,
            seed: 0x7a11_1b0,
        }
    }
}

impl EnvConfig {
    /// Check the constants, and that `branches` (the Q-network's) are direction 3, size n,
    /// order type 3.
    pub fn validate(&self, branches: &[usize]) -> Result<(), ConfigError> {
        if self.envs == 0 {
            return Err(ConfigError::Zero { name: "envs" });
        }
        if self.max_steps == 0 {
            return Err(ConfigError::Zero { name: "max_steps" });
        }
        let p = |v: f32| (0.0..=1.0).contains(&v);
        require(
            self.envs <= 1 << 24,
            "envs",
            self.envs as f64,
            "[1, 2^24]",
            "lower --envs",
        )?;
        require(
            self.max_position >= 1,
            "max_position",
            self.max_position,
            ">= 1",
            "allow at least one contract",
        )?;
        require(
            self.point_value > 0.0 && self.point_value.is_finite(),
            "point_value",
            self.point_value,
            "> 0, finite",
            "the contract's currency per point (ES: 50)",
        )?;
        require(
            self.commission >= 0.0 && self.commission.is_finite(),
            "commission",
            self.commission,
            ">= 0, finite",
            "a fee per contract such as 2.5",
        )?;
        require(
            p(self.ioc_fill_prob),
            "ioc_fill_prob",
            self.ioc_fill_prob,
            "[0, 1]",
            "a probability such as 0.8",
        )?;
        require(
            p(self.limit_fill_min),
            "limit_fill_min",
            self.limit_fill_min,
            "[0, 1]",
            "a probability such as 0.2",
        )?;
        require(
            p(self.limit_fill_max) && self.limit_fill_max >= self.limit_fill_min,
            "limit_fill_max",
            self.limit_fill_max,
            "[limit_fill_min, 1]",
            "a probability at least limit_fill_min",
        )?;
        require(
            p(self.limit_capture),
            "limit_capture",
            self.limit_capture,
            "[0, 1]",
            "a share of the spread such as 0.5",
        )?;
        require(
            (0.0..1.0).contains(&self.take_profit),
            "take_profit",
            self.take_profit,
            "[0, 1)",
            "a fraction such as 0.003, or 0 for none",
        )?;
        require(
            (0.0..1.0).contains(&self.stop_loss),
            "stop_loss",
            self.stop_loss,
            "[0, 1)",
            "a fraction such as 0.0015, or 0 for none",
        )?;
        let ok = branches.len() == BRANCH_COUNT
            && branches[BRANCH_DIRECTION] == ACTION_BRANCHES[BRANCH_DIRECTION]
            && branches[BRANCH_ORDER_TYPE] == ACTION_BRANCHES[BRANCH_ORDER_TYPE]
            && branches[BRANCH_SIZE] >= 1;
        require(
            ok,
            "the action branches (direction, size, order type)",
            branches.len() as f64,
            "3 branches of sizes [3, n, 3]",
            "use branches [3, n, 3]: hold/buy/sell, 1..n contracts, market/IOC/limit",
        )
    }
}

/// What the environment kernels read of the market, uploaded once: float32, bar-major.
#[derive(Clone, Debug, PartialEq)]
pub struct EnvMarket {
    pub bars: usize,
    pub feature_dim: usize,
    /// `[bars x feature_dim]`, normalised.
    pub features: Vec<f32>,
    pub bid: Vec<f32>,
    pub ask: Vec<f32>,
    pub high: Vec<f32>,
    pub low: Vec<f32>,
    pub close: Vec<f32>,
    /// Per-bar volatility in price units, > 0.
    pub volatility: Vec<f32>,
}

impl EnvMarket {
    pub fn of(m: &crate::features::Market) -> Self {
        EnvMarket {
            bars: m.bars,
            feature_dim: m.feature_dim,
            features: m.features.clone(),
            bid: m.bid.clone(),
            ask: m.ask.clone(),
            high: m.high.clone(),
            low: m.low.clone(),
            close: m.close.clone(),
            volatility: m.volatility.clone(),
        }
    }

    /// The state width S: market features plus portfolio features.
    pub fn state_dim(&self) -> usize {
        self.feature_dim + PORTFOLIO_FEATURES
    }
}

/// The bars episodes run in: `[lo, hi)`, at least two (a start and the bar after it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Split {
    pub lo: u32,
    pub hi: u32,
}

impl Split {
    /// The training split of a market: `[first_bar, train_end)`.
    pub fn train(m: &crate::features::Market) -> Self {
        Split {
            lo: m.first_bar as u32,
            hi: m.train_end as u32,
        }
    }

    /// The test split: `[train_end, bars)`.
    pub fn test(m: &crate::features::Market) -> Self {
        Split {
            lo: m.train_end as u32,
            hi: m.bars as u32,
        }
    }

    pub fn validate(&self, bars: usize) -> Result<(), ConfigError> {
        require(
            self.lo < self.hi && self.hi - self.lo >= 2 && self.hi as usize <= bars,
            "the episode bar range",
            f64::from(self.hi) - f64::from(self.lo),
            "at least 2 bars inside the market",
            "use more bars, or a larger split",
        )
    }

    /// A start bar for env `env` at `clock`: `lo + floor(w (hi - 1 - lo) / 2^32)` of the
    /// first word of the RESET draw, so in `[lo, hi - 2]`: every episode has a next bar.
    pub fn start(&self, seed: u64, env: u32, clock: u32) -> u32 {
        let w = philox::draw(seed, env, clock, stream::ENV_RESET)[0];
        self.lo + ((u64::from(w) * u64::from(self.hi - 1 - self.lo)) >> 32) as u32
    }
}

/// The N environments' portfolios, structure of arrays.
#[derive(Clone, Debug, PartialEq)]
pub struct EnvState {
    /// Current bar.
    pub bar: Vec<u32>,
    /// Steps of the current episode.
    pub steps: Vec<u32>,
    /// Steps ever taken: the Philox step of every draw.
    pub clock: Vec<u32>,
    /// Contracts held, signed.
    pub position: Vec<i32>,
    /// Average entry price of the position (0 when flat).
    pub entry: Vec<f32>,
    /// Realized PnL of the episode (from fill prices, so spread costs included).
    pub realized: Vec<f32>,
    /// Commissions paid in the episode.
    pub fees: Vec<f32>,
    /// Equity at the last mark: realized - fees + unrealized.
    pub equity: Vec<f32>,
}

impl EnvState {
    /// Each field's length, in declaration order (all N in a well-formed state).
    pub fn field_lens(&self) -> [usize; 8] {
        [
            self.bar.len(),
            self.steps.len(),
            self.clock.len(),
            self.position.len(),
            self.entry.len(),
            self.realized.len(),
            self.fees.len(),
            self.equity.len(),
        ]
    }

    /// Every env flat at its Philox-chosen start (clock 0).
    pub fn new(cfg: &EnvConfig, split: Split) -> Self {
        let n = cfg.envs;
        EnvState {
            bar: (0..n as u32).map(|e| split.start(cfg.seed, e, 0)).collect(),
            steps: vec![0; n],
            clock: vec![0; n],
            position: vec![0; n],
            entry: vec![0.0; n],
            realized: vec![0.0; n],
            fees: vec![0.0; n],
            equity: vec![0.0; n],
        }
    }

    pub fn len(&self) -> usize {
        self.bar.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bar.is_empty()
    }
}

/// Sign of a position as float: 1, -1 or 0.
fn sign(p: i32) -> f32 {
    p.signum() as f32
}

/// **state_gather**: row n of `[N x S]` is bar `bar[n]`'s market features, then
/// `position / max_position`, the open return in percent `(close - entry) sign / entry x 100`
/// (0 when flat), `steps / max_steps`, and the episode's net realized PnL in percent of one
/// contract's notional `(realized - fees) / (close x point_value) x 100`.
pub fn state_gather(cfg: &EnvConfig, m: &EnvMarket, st: &EnvState) -> Vec<f32> {
    let (f, s) = (m.feature_dim, m.state_dim());
    let mut out = Vec::with_capacity(st.len() * s);
    for n in 0..st.len() {
        let b = st.bar[n] as usize;
        out.extend_from_slice(&m.features[b * f..(b + 1) * f]);
        out.extend_from_slice(&portfolio_features(cfg, m, st, n));
    }
    out
}

/// The portfolio part of env n's state, in the kernel's operation order.
pub fn portfolio_features(
    cfg: &EnvConfig,
    m: &EnvMarket,
    st: &EnvState,
    n: usize,
) -> [f32; PORTFOLIO_FEATURES] {
    let held = Held {
        position: st.position[n],
        entry: st.entry[n],
        steps: st.steps[n],
        realized: st.realized[n],
        fees: st.fees[n],
    };
    portfolio_row(cfg, m.close[st.bar[n] as usize], &held)
}

/// What a state row reads of a portfolio besides its bar.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Held {
    position: i32,
    entry: f32,
    steps: u32,
    realized: f32,
    fees: f32,
}

/// The portfolio features of `h` at a bar closing at `close` (the kernels' `portfolio_value`).
fn portfolio_row(cfg: &EnvConfig, close: f32, h: &Held) -> [f32; PORTFOLIO_FEATURES] {
    let pos = h.position;
    let open_return = if pos != 0 {
        (close - h.entry) * sign(pos) / h.entry * 100.0
    } else {
        0.0
    };
    [
        pos as f32 / cfg.max_position as f32,
        open_return,
        h.steps as f32 / cfg.max_steps as f32,
        (h.realized - h.fees) / (close * cfg.point_value) * 100.0,
    ]
}

/// **action_select**: epsilon-greedy per branch k of env n. With `w = Philox(n, clock[n],
/// ACTION_EXPLORE)` and `r = Philox(n, clock[n], ACTION_RANDOM)`: if `u01(w_k) < epsilon`
/// the action is `floor(r_k n_k / 2^32)`, else the argmax over the branch's Q-values (the
/// expected value over atoms, `q` as the Q-forward wrote it, `[N x sum n_k]`), the lowest
/// index on ties (a NaN never wins). Returns `[N x K]`.
pub fn action_select(
    seed: u64,
    branches: &[usize],
    epsilon: f32,
    q: &[f32],
    st: &EnvState,
) -> Vec<i32> {
    let width: usize = branches.iter().sum();
    let mut out = Vec::with_capacity(st.len() * branches.len());
    for n in 0..st.len() {
        let w = philox::draw(seed, n as u32, st.clock[n], stream::ACTION_EXPLORE);
        let r = philox::draw(seed, n as u32, st.clock[n], stream::ACTION_RANDOM);
        let mut off = 0;
        for (k, &nk) in branches.iter().enumerate() {
            let a = if philox::u01(w[k]) < epsilon {
                ((u64::from(r[k]) * nk as u64) >> 32) as i32
            } else {
                let row = &q[n * width + off..n * width + off + nk];
                let mut best = 0;
                for j in 1..nk {
                    if row[j] > row[best] {
                        best = j;
                    }
                }
                best as i32
            };
            out.push(a);
            off += nk;
        }
    }
    out
}

/// What `fill_step` did per env: 1 where an order filled, and its price (0 otherwise); and
/// every env's net realized PnL `realized - fees` before its fill, the reference the step's
/// PnL is measured from ([`barriers`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Fills {
    pub filled: Vec<i32>,
    pub price: Vec<f32>,
    pub net_before: Vec<f32>,
}

/// **fill_step**: env n's order from its actions `[N x 3]` against bar `bar[n]`'s quote.
/// The order is `q = clamp(pos + side (size + 1), -max, max) - pos` contracts (side +1 buy,
/// -1 sell, 0 hold); none if q = 0. With `spread = ask - bid` and the touch (ask for a buy,
/// bid for a sell):
/// - market: fills at the touch (paying the half spread over the mid);
/// - IOC: fills at the touch with probability `ioc_fill_prob`;
/// - limit: fills at `ask - c spread` (buy) or `bid + c spread` (sell), `c = limit_capture`,
///   with probability `p = min + (max - min) x`, `x = vol / (vol + spread)`: the more the
///   price moves relative to the spread, the likelier it trades through the limit;
///
/// where an order fills if `u01(Philox(n, clock[n], FILL)_0) < p` (market: always). A fill
/// pays `commission |q|`; opening a position enters at the fill price, adding to one averages it,
/// `(entry |pos| + price |q|) / (|pos| + |q|)`; reducing realizes
/// `((price - entry) sign(pos)) (min(|q|, |pos|) point_value)`, and a flip enters the rest
/// at the fill price. `net_before = realized - fees` is read before the fill, for every env.
pub fn fill_step(cfg: &EnvConfig, m: &EnvMarket, st: &mut EnvState, actions: &[i32]) -> Fills {
    let n_envs = st.len();
    let mut fills = Fills {
        filled: vec![0; n_envs],
        price: vec![0.0; n_envs],
        net_before: vec![0.0; n_envs],
    };
    for n in 0..n_envs {
        fills.net_before[n] = st.realized[n] - st.fees[n];
        let a = &actions[BRANCH_COUNT * n..BRANCH_COUNT * (n + 1)];
        let side = match a[BRANCH_DIRECTION] {
            BUY => 1,
            SELL => -1,
            _ => 0,
        };
        let pos = st.position[n];
        let q =
            (pos + side * (a[BRANCH_SIZE] + 1)).clamp(-cfg.max_position, cfg.max_position) - pos;
        if q == 0 {
            continue;
        }
        let b = st.bar[n] as usize;
        let (bid, ask) = (m.bid[b], m.ask[b]);
        let spread = ask - bid;
        let buy = q > 0;
        let touch = if buy { ask } else { bid };
        let (p, price) = match a[BRANCH_ORDER_TYPE] {
            MARKET => (1.0, touch),
            IOC => (cfg.ioc_fill_prob, touch),
            _ => {
                let vol = m.volatility[b];
                let x = vol / (vol + spread);
                let p = cfg.limit_fill_min + (cfg.limit_fill_max - cfg.limit_fill_min) * x;
                let improve = cfg.limit_capture * spread;
                (p, if buy { ask - improve } else { bid + improve })
            }
        };
        let u = philox::u01(philox::draw(cfg.seed, n as u32, st.clock[n], stream::FILL)[0]);
        if a[BRANCH_ORDER_TYPE] == MARKET || u < p {
            apply_fill(cfg, st, n, q, price);
            fills.filled[n] = 1;
            fills.price[n] = price;
        }
    }
    fills
}

/// A fill of `q` contracts at `price` into env n's position.
fn apply_fill(cfg: &EnvConfig, st: &mut EnvState, n: usize, q: i32, price: f32) {
    let pos = st.position[n];
    st.fees[n] += cfg.commission * q.unsigned_abs() as f32;
    if pos == 0 {
        st.entry[n] = price;
    } else if (pos > 0) == (q > 0) {
        let (held, add) = (pos.unsigned_abs() as f32, q.unsigned_abs() as f32);
        st.entry[n] = (st.entry[n] * held + price * add) / (held + add);
    } else {
        let closed = q.unsigned_abs().min(pos.unsigned_abs()) as f32;
        st.realized[n] += (price - st.entry[n]) * sign(pos) * (closed * cfg.point_value);
        let after = pos + q;
        if after == 0 {
            st.entry[n] = 0.0;
        } else if after.signum() != pos.signum() {
            st.entry[n] = price;
        }
    }
    st.position[n] = pos + q;
}

/// What `barriers` decided per env.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// The step's net realized PnL: `(realized - fees) - net_before`, after the fill and any
    /// barrier exit, before the auto-reset.
    pub pnl: Vec<f32>,
    /// s' `[N x S]`: each env's state row after the step, before the auto-reset.
    pub next_states: Vec<f32>,
    /// 1.0 where the episode ended this step, else 0.0.
    pub done: Vec<f32>,
    /// TAKE_PROFIT, STOP_LOSS, TIME_LIMIT, END_OF_DATA, or 0.
    pub reason: Vec<i32>,
}

/// **barriers**: env n moves to bar `t = bar[n] + 1` and its episode step count advances.
/// - An open position hits its stop-loss if the bar's low (long) or high (short) reaches
///   `entry (1 - sl)` (long) or `entry (1 + sl)` (short), else its take-profit at
///   `entry (1 + tp)` / `entry (1 - tp)` against the high / low; it exits at that price
///   (stop-loss first: within one bar the order of touches is unknown, so the conservative
///   one).
/// - Else the time limit (`steps >= max_steps`) or the end of data (`t + 1 >= hi`: no
///   bar to trade at next) ends the episode, an open position exiting at the touch (bid for
///   a long, ask for a short).
/// - An exit realizes `((exit - entry) sign) (|pos| point_value)` and pays commission.
/// - Equity = `(realized - fees) + ((mid - entry) sign) (|pos| point_value)`, mid of bar t.
/// - The step's PnL is `pnl = (realized - fees) - net_before[n]` (two float subtractions in
///   that order), `realized` and `fees` after the exit, `net_before` the fill step's
///   ([`Fills::net_before`]): the fill's and the exit's realized PnL net of their fees.
/// - s' (`next_states` row n) is [`state_gather`]'s row of the portfolio after the step and
///   before any reset: bar t, the position held after any exit (0 after one), its entry,
///   `steps + 1`, realized and fees with the exit. For an env that is not done it is the
///   next step's `state_gather` row, bit for bit.
/// - The clock advances; a done env resets flat to `Split::start(seed, n, clock)`, its
///   equity and episode counters to 0.
pub fn barriers(
    cfg: &EnvConfig,
    m: &EnvMarket,
    split: Split,
    st: &mut EnvState,
    net_before: &[f32],
) -> Outcome {
    let n_envs = st.len();
    let (f, s_dim) = (m.feature_dim, m.state_dim());
    let mut out = Outcome {
        pnl: vec![0.0; n_envs],
        next_states: Vec::with_capacity(n_envs * s_dim),
        done: vec![0.0; n_envs],
        reason: vec![0; n_envs],
    };
    for (n, &net0) in net_before[..n_envs].iter().enumerate() {
        let t = st.bar[n] as usize + 1;
        let pos = st.position[n];
        let (s, entry) = (sign(pos), st.entry[n]);
        let long = pos > 0;
        let mut reason = 0;
        let mut exit = 0.0f32;
        if pos != 0 && cfg.stop_loss > 0.0 {
            let px = if long {
                entry * (1.0 - cfg.stop_loss)
            } else {
                entry * (1.0 + cfg.stop_loss)
            };
            if (long && m.low[t] <= px) || (!long && m.high[t] >= px) {
                (reason, exit) = (STOP_LOSS, px);
            }
        }
        if pos != 0 && reason == 0 && cfg.take_profit > 0.0 {
            let px = if long {
                entry * (1.0 + cfg.take_profit)
            } else {
                entry * (1.0 - cfg.take_profit)
            };
            if (long && m.high[t] >= px) || (!long && m.low[t] <= px) {
                (reason, exit) = (TAKE_PROFIT, px);
            }
        }
        let steps = st.steps[n] + 1;
        if reason == 0 && steps >= cfg.max_steps {
            reason = TIME_LIMIT;
        }
        if reason == 0 && t + 1 >= split.hi as usize {
            reason = END_OF_DATA;
        }
        if reason == TIME_LIMIT || reason == END_OF_DATA {
            exit = if long { m.bid[t] } else { m.ask[t] };
        }
        let mut held = pos;
        if reason != 0 && pos != 0 {
            let size = pos.unsigned_abs() as f32;
            st.realized[n] += (exit - entry) * s * (size * cfg.point_value);
            st.fees[n] += cfg.commission * size;
            held = 0;
        }
        let mid = (m.bid[t] + m.ask[t]) * 0.5;
        let unrealized = if held != 0 {
            (mid - entry) * s * (held.unsigned_abs() as f32 * cfg.point_value)
        } else {
            0.0
        };
        let equity = (st.realized[n] - st.fees[n]) + unrealized;
        out.pnl[n] = (st.realized[n] - st.fees[n]) - net0;
        let after = Held {
            position: held,
            entry,
            steps,
            realized: st.realized[n],
            fees: st.fees[n],
        };
        out.next_states
            .extend_from_slice(&m.features[t * f..(t + 1) * f]);
        out.next_states
            .extend_from_slice(&portfolio_row(cfg, m.close[t], &after));
        st.clock[n] += 1;
        if reason != 0 {
            out.done[n] = 1.0;
            out.reason[n] = reason;
            st.bar[n] = split.start(cfg.seed, n as u32, st.clock[n]);
            st.steps[n] = 0;
            st.position[n] = 0;
            st.entry[n] = 0.0;
            st.realized[n] = 0.0;
            st.fees[n] = 0.0;
            st.equity[n] = 0.0;
        } else {
            st.bar[n] = t as u32;
            st.steps[n] = steps;
            st.position[n] = held;
            st.equity[n] = equity;
        }
    }
    out
}

/// Everything one timestep of the N envs produced (the Q-values are an input: the
/// Q-forward is the Q-network's stage, checked by its own tolerance).
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    pub states: Vec<f32>,
    pub actions: Vec<i32>,
    pub fills: Fills,
    pub outcome: Outcome,
}

/// One timestep after the Q-forward: `q` are the Q-values of `states` (as given by
/// `q_of(states)`), then action select, fill, barriers (on the fill's `net_before`).
pub fn env_step(
    cfg: &EnvConfig,
    branches: &[usize],
    epsilon: f32,
    m: &EnvMarket,
    split: Split,
    st: &mut EnvState,
    q_of: impl FnOnce(&[f32]) -> Vec<f32>,
) -> Step {
    let states = state_gather(cfg, m, st);
    let q = q_of(&states);
    let actions = action_select(cfg.seed, branches, epsilon, &q, st);
    let fills = fill_step(cfg, m, st, &actions);
    let outcome = barriers(cfg, m, split, st, &fills.net_before);
    Step {
        states,
        actions,
        fills,
        outcome,
    }
}
