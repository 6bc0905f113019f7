//! The backtest environments on the device: typed launchers for `state_gather`,
//! `action_select`, `fill_step` and `barriers` (spec: tallyho_oracle::env), and `env_step`,
//! the last three in one launch. The experience step that runs them around the Q-forward is
//! crate::experience's.
//! Every buffer is allocated in `Env::new`; per-step values (each env's clock, epsilon) live
//! in device memory, so a captured step replays correctly.

use crate::error::{Error, Result};
use crate::runtime::{entry, grid_stride, Gpu, Programmatic};
use crate::schedule::Epsilon;
use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, DevicePtr, PushKernelArg};
use std::sync::Arc;
use tallyho_oracle::action::BRANCH_COUNT;
use tallyho_oracle::env::{
    EnvConfig, EnvMarket, EnvState, Fills, Outcome, Split, PORTFOLIO_FEATURES,
};
use tallyho_oracle::features::{self, FeatureConfig, Market};
use tallyho_oracle::market::{self, SyntheticConfig};
use tallyho_oracle::philox::key_of_seed;

mod args;
mod launch;
mod readback;

pub use args::ActEnv;
use args::{ActionBranches, EnvParams, StatePtrs};

/// The market of a run: the bars at `data` (a folder of LEAN zips or a headed CSV file) or,
/// with no path, the embedded synthetic default market; then its features and splits.
pub fn load_market(data: Option<&std::path::Path>) -> Result<Market> {
    let bars = match data {
        Some(path) => market::load(path)?,
        None => market::synthetic(&SyntheticConfig::default())?,
    };
    Ok(features::build(&bars, &FeatureConfig::default())?)
}

/// The market as the kernels read it, uploaded once.
struct DeviceMarket {
    features: CudaSlice<f32>,
    bid: CudaSlice<f32>,
    ask: CudaSlice<f32>,
    high: CudaSlice<f32>,
    low: CudaSlice<f32>,
    close: CudaSlice<f32>,
    volatility: CudaSlice<f32>,
}

/// The portfolios on the device, one buffer per field of `EnvState`.
struct DeviceState {
    bar: CudaSlice<u32>,
    steps: CudaSlice<u32>,
    clock: CudaSlice<u32>,
    position: CudaSlice<i32>,
    entry: CudaSlice<f32>,
    realized: CudaSlice<f32>,
    fees: CudaSlice<f32>,
    equity: CudaSlice<f32>,
}

struct Kernels {
    state_gather: CudaFunction,
    action_select: CudaFunction,
    fill_step: CudaFunction,
    barriers: CudaFunction,
    env_step: CudaFunction,
}

/// N environments over one market split, with the outputs of their last step.
pub struct Env {
    cfg: EnvConfig,
    split: Split,
    feature_dim: usize,
    stream: Arc<CudaStream>,
    k: Kernels,
    params: EnvParams,
    branches: ActionBranches,
    market: DeviceMarket,
    st: DeviceState,
    ptrs: StatePtrs,
    /// The exploration rate the kernels read from device memory, constant or annealed on
    /// the device (crate::schedule).
    pub epsilon: Epsilon,
    /// `[N x S]`, the states of the last `state_gather`.
    pub states: CudaSlice<f32>,
    /// `[N x (S + 1)]`: the same with a ones column, the Q-forward's input.
    pub x: CudaSlice<f32>,
    /// `[N x 3]`.
    pub actions: CudaSlice<i32>,
    pub filled: CudaSlice<i32>,
    pub fill_price: CudaSlice<f32>,
    /// `[N]`: each env's `realized - fees` before its fill (the fill step's; the step's PnL
    /// is measured from it).
    pub net_before: CudaSlice<f32>,
    /// `[N]`: the step's net realized PnL (the fill and any barrier exit, before the reset),
    /// the reward pipeline's input.
    pub pnl: CudaSlice<f32>,
    /// `[N x S]`: s', each env's state after the step and before the auto-reset.
    pub next_states: CudaSlice<f32>,
    pub done: CudaSlice<f32>,
    pub reason: CudaSlice<i32>,
}

fn check_market(m: &EnvMarket) -> Result<()> {
    let b = m.bars;
    let lens = [
        m.bid.len(),
        m.ask.len(),
        m.high.len(),
        m.low.len(),
        m.close.len(),
        m.volatility.len(),
    ];
    if b == 0 || lens.iter().any(|&l| l != b) || m.features.len() != b * m.feature_dim {
        return Err(Error::Shape(format!(
            "market arrays do not describe {b} bars of {} features: features {}, bid/ask/high/low/close/volatility {lens:?}",
            m.feature_dim,
            m.features.len()
        )));
    }
    if b >= u32::MAX as usize {
        return Err(Error::Shape(format!(
            "{b} bars exceed the 32-bit bar index: split the data"
        )));
    }
    Ok(())
}

impl Env {
    /// Upload `market` and allocate everything for `cfg.envs` environments on bars
    /// `split`, with action branches `branches` (the Q-network's); every env starts flat at
    /// its Philox-chosen bar (the oracle's `EnvState::new`), epsilon 1.
    pub fn new(
        gpu: &Gpu,
        cfg: &EnvConfig,
        branches: &[usize],
        market: &EnvMarket,
        split: Split,
    ) -> Result<Self> {
        cfg.validate(branches)?;
        check_market(market)?;
        split.validate(market.bars)?;
        let s = &gpu.stream;
        let k = Kernels {
            state_gather: gpu.function(entry::state_gather::STATE_GATHER)?,
            action_select: gpu.function(entry::action_select::ACTION_SELECT)?,
            fill_step: gpu.function(entry::fill_step::FILL_STEP)?,
            barriers: gpu.function(entry::barriers::BARRIERS)?,
            env_step: gpu.function(entry::env_step::ENV_STEP)?,
        };
        let [key0, key1] = key_of_seed(cfg.seed);
        let params = EnvParams {
            envs: cfg.envs as u32,
            feature_dim: market.feature_dim as u32,
            max_steps: cfg.max_steps,
            bar_lo: split.lo,
            bar_hi: split.hi,
            max_position: cfg.max_position,
            point_value: cfg.point_value,
            commission: cfg.commission,
            ioc_fill_prob: cfg.ioc_fill_prob,
            limit_fill_min: cfg.limit_fill_min,
            limit_fill_max: cfg.limit_fill_max,
            limit_capture: cfg.limit_capture,
            take_profit: cfg.take_profit,
            stop_loss: cfg.stop_loss,
            key0,
            key1,
        };
        let mut n = [0u32; 4];
        for (d, &b) in n.iter_mut().zip(branches) {
            *d = b as u32;
        }
        let dm = DeviceMarket {
            features: s.clone_htod(&market.features)?,
            bid: s.clone_htod(&market.bid)?,
            ask: s.clone_htod(&market.ask)?,
            high: s.clone_htod(&market.high)?,
            low: s.clone_htod(&market.low)?,
            close: s.clone_htod(&market.close)?,
            volatility: s.clone_htod(&market.volatility)?,
        };
        let (e, sd) = (cfg.envs, market.state_dim());
        let st = DeviceState {
            bar: s.alloc_zeros(e)?,
            steps: s.alloc_zeros(e)?,
            clock: s.alloc_zeros(e)?,
            position: s.alloc_zeros(e)?,
            entry: s.alloc_zeros(e)?,
            realized: s.alloc_zeros(e)?,
            fees: s.alloc_zeros(e)?,
            equity: s.alloc_zeros(e)?,
        };
        let ptrs = state_ptrs(s, &st);
        let mut env = Env {
            cfg: cfg.clone(),
            split,
            feature_dim: market.feature_dim,
            stream: s.clone(),
            k,
            params,
            branches: ActionBranches {
                count: branches.len() as u32,
                n,
            },
            market: dm,
            st,
            ptrs,
            epsilon: Epsilon::new(gpu, 1.0)?,
            states: s.alloc_zeros(e * sd)?,
            x: s.alloc_zeros(e * (sd + 1))?,
            actions: s.alloc_zeros(e * BRANCH_COUNT)?,
            filled: s.alloc_zeros(e)?,
            fill_price: s.alloc_zeros(e)?,
            net_before: s.alloc_zeros(e)?,
            pnl: s.alloc_zeros(e)?,
            next_states: s.alloc_zeros(e * sd)?,
            done: s.alloc_zeros(e)?,
            reason: s.alloc_zeros(e)?,
        };
        env.upload_state(&EnvState::new(cfg, split))?;
        Ok(env)
    }

    /// The stream the env's launches go on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    pub fn config(&self) -> &EnvConfig {
        &self.cfg
    }

    /// The state width S = features + portfolio features.
    pub fn state_dim(&self) -> usize {
        self.feature_dim + PORTFOLIO_FEATURES
    }

    /// Set a constant exploration rate (a host write between steps: not inside a capture),
    /// replacing any schedule ([`Epsilon::set_schedule`] anneals it on the device).
    pub fn set_epsilon(&mut self, epsilon: f32) -> Result<()> {
        self.epsilon.set_constant(epsilon)
    }

    /// `[N]`: each env's position after its last step (a done env's is 0, as after an exit):
    /// with [`Env::pnl`], the reward pipeline's input.
    pub fn position(&self) -> &CudaSlice<i32> {
        &self.st.position
    }

    /// The env as the experience step in one launch takes it (its addresses and constants).
    pub fn act_env(&self) -> ActEnv {
        let s = &self.stream;
        let (m, p) = (&self.market, |b: &CudaSlice<f32>| b.device_ptr(s).0);
        ActEnv {
            params: self.params,
            state: self.ptrs,
            branches: self.branches,
            states: p(&self.states),
            x: p(&self.x),
            epsilon: p(self.epsilon.value()),
            features: p(&m.features),
            close: p(&m.close),
            bid: p(&m.bid),
            ask: p(&m.ask),
            volatility: p(&m.volatility),
            high: p(&m.high),
            low: p(&m.low),
            actions: self.actions.device_ptr(s).0,
            filled: self.filled.device_ptr(s).0,
            fill_price: p(&self.fill_price),
            net_before: p(&self.net_before),
            pnl: p(&self.pnl),
            next_states: p(&self.next_states),
            done: p(&self.done),
            reason: self.reason.device_ptr(s).0,
        }
    }
}

fn state_ptrs(s: &Arc<CudaStream>, d: &DeviceState) -> StatePtrs {
    StatePtrs([
        d.bar.device_ptr(s).0,
        d.steps.device_ptr(s).0,
        d.clock.device_ptr(s).0,
        d.position.device_ptr(s).0,
        d.entry.device_ptr(s).0,
        d.realized.device_ptr(s).0,
        d.fees.device_ptr(s).0,
        d.equity.device_ptr(s).0,
    ])
}
