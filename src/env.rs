//! The backtest environments on the device: typed launchers for `state_gather`,
//! `action_select`, `fill_step` and `barriers` (spec: tallyho_oracle::env), and `env_step`,
//! the last three in one launch. The experience step that runs them around the Q-forward is
//! crate::experience's.
//! Every buffer is allocated in `Env::new`; per-step values (each env's clock, epsilon) live
//! in device memory, so a captured step replays correctly.

use crate::error::{Error, Result};
use crate::runtime::{entry, grid_stride, Gpu, Programmatic};
use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, DevicePtr, PushKernelArg};
use std::sync::Arc;
use tallyho_oracle::env::{EnvConfig, EnvMarket, EnvState, Fills, Outcome, Split, PORTFOLIO_FEATURES};
use tallyho_oracle::features::{self, FeatureConfig, Market};
use tallyho_oracle::market::{self, SyntheticConfig};
use tallyho_oracle::philox::key_of_seed;
use tallyho_oracle::schedule::EpsilonSchedule;

/// The market of a run: the bars at `data` (a folder of LEAN zips or a headed CSV file) or,
/// with no path, the embedded synthetic default market; then its features and splits.
pub fn load_market(data: Option<&std::path::Path>) -> Result<Market> {
    let bars = match data {
        Some(path) => market::load(path)?,
        None => market::synthetic(&SyntheticConfig::default())?,
    };
    Ok(features::build(&bars, &FeatureConfig::default())?)
}

/// `struct EnvParams` of cuda/common/env.cuh: the run's constants, a kernel argument.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct EnvParams {
    envs: u32,
    feature_dim: u32,
    max_steps: u32,
    bar_lo: u32,
    bar_hi: u32,
    max_position: i32,
    point_value: f32,
    commission: f32,
    ioc_fill_prob: f32,
    limit_fill_min: f32,
    limit_fill_max: f32,
    limit_capture: f32,
    take_profit: f32,
    stop_loss: f32,
    reward_scale: f32,
    dsr_eta: f32,
    key0: u32,
    key1: u32,
}

// SAFETY: plain old data of 4-byte fields, laid out as the kernels' struct (repr(C)).
unsafe impl cudarc::driver::DeviceRepr for EnvParams {}
// The size of `struct EnvParams` (cuda/common/env.cuh static_asserts the same).
const _: () = assert!(std::mem::size_of::<EnvParams>() == 72);

/// `struct EnvState` of cuda/common/env.cuh: the device addresses of the state's fields.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct StatePtrs([u64; 10]);

// SAFETY: ten device addresses, the layout of the kernels' struct of ten pointers.
unsafe impl cudarc::driver::DeviceRepr for StatePtrs {}
// The size of `struct EnvState` (cuda/common/env.cuh static_asserts the same).
const _: () = assert!(std::mem::size_of::<StatePtrs>() == 80);

/// `struct EpsilonSchedule` of cuda/schedule.cu, a kernel argument.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct EpsilonParams {
    start: f32,
    end: f32,
    steps: u32,
}

// SAFETY: plain old data of 4-byte fields, laid out as the kernel's struct (repr(C)).
unsafe impl cudarc::driver::DeviceRepr for EpsilonParams {}
// The size of `struct EpsilonSchedule` (cuda/schedule.cu static_asserts the same).
const _: () = assert!(std::mem::size_of::<EpsilonParams>() == 12);

/// `struct ActionBranches` of cuda/action_select.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct ActionBranches {
    count: u32,
    n: [u32; 4],
}

// SAFETY: plain old data of u32, laid out as the kernel's struct (repr(C)).
unsafe impl cudarc::driver::DeviceRepr for ActionBranches {}
// The size of `struct ActionBranches` (cuda/common/env_steps.cuh static_asserts the same).
const _: () = assert!(std::mem::size_of::<ActionBranches>() == 20);

impl ActionBranches {
    /// The Q-values row's width: every branch's actions (`branches_width`,
    /// cuda/common/env_steps.cuh).
    fn width(&self) -> usize {
        self.n[..self.count as usize].iter().map(|&n| n as usize).sum()
    }
}

/// `struct ActEnv` of cuda/experience_step.cu, field for field: what the experience step in
/// one launch (crate::experience) reads and writes of one [`Env`] (the device addresses of
/// its market, portfolios and outputs, and its constants), a kernel argument. Built by
/// [`Env::act_env`].
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ActEnv {
    features: u64,
    close: u64,
    params: EnvParams,
    state: StatePtrs,
    branches: ActionBranches,
    states: u64,
    x: u64,
    // EnvStepIo
    epsilon: u64,
    bid: u64,
    ask: u64,
    volatility: u64,
    high: u64,
    low: u64,
    actions: u64,
    filled: u64,
    fill_price: u64,
    reward: u64,
    done: u64,
    reason: u64,
}

// SAFETY: device addresses and the plain-old-data structs above, laid out as the kernel's
// struct (repr(C): the same fields in the same order, so the same padding).
unsafe impl cudarc::driver::DeviceRepr for ActEnv {}
// The size of `struct ActEnv` (cuda/experience_step.cu static_asserts the same).
const _: () = assert!(std::mem::size_of::<ActEnv>() == 304);

impl ActEnv {
    pub fn envs(&self) -> usize {
        self.params.envs as usize
    }

    /// S: the features and the portfolio's.
    pub fn state_dim(&self) -> usize {
        self.params.feature_dim as usize + PORTFOLIO_FEATURES
    }

    /// The Q-values row's width: every branch's actions.
    pub fn actions(&self) -> usize {
        self.branches.width()
    }

    /// The device address of the states buffer (with the env's other buffers, fixed for
    /// its life): what a graph over the env binds to.
    pub fn states_address(&self) -> u64 {
        self.states
    }
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
    dsr_a: CudaSlice<f32>,
    dsr_b: CudaSlice<f32>,
}

struct Kernels {
    state_gather: CudaFunction,
    action_select: CudaFunction,
    fill_step: CudaFunction,
    barriers: CudaFunction,
    env_step: CudaFunction,
    schedule_epsilon: CudaFunction,
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
    /// Exploration rate, read by `action_select` from device memory; written by
    /// `schedule_epsilon` each step where a schedule anneals it ([`Env::set_epsilon_schedule`]).
    epsilon: CudaSlice<f32>,
    /// The schedule's step counter (device memory: it advances under graph replay).
    epsilon_step: CudaSlice<u32>,
    /// The schedule; None: epsilon is a constant, and no schedule launch runs.
    schedule: Option<EpsilonParams>,
    /// `[N x S]`, the states of the last `state_gather`.
    pub states: CudaSlice<f32>,
    /// `[N x (S + 1)]`: the same with a ones column, the Q-forward's input.
    pub x: CudaSlice<f32>,
    /// `[N x 3]`.
    pub actions: CudaSlice<i32>,
    pub filled: CudaSlice<i32>,
    pub fill_price: CudaSlice<f32>,
    pub reward: CudaSlice<f32>,
    pub done: CudaSlice<f32>,
    pub reason: CudaSlice<i32>,
}

fn check_epsilon(name: &str, v: f32) -> Result<()> {
    if !(0.0..=1.0).contains(&v) {
        return Err(Error::Shape(format!("{name} {v} is outside [0, 1]: use a probability")));
    }
    Ok(())
}

fn check_market(m: &EnvMarket) -> Result<()> {
    let b = m.bars;
    let lens = [m.bid.len(), m.ask.len(), m.high.len(), m.low.len(), m.close.len(), m.volatility.len()];
    if b == 0 || lens.iter().any(|&l| l != b) || m.features.len() != b * m.feature_dim {
        return Err(Error::Shape(format!(
            "market arrays do not describe {b} bars of {} features: features {}, bid/ask/high/low/close/volatility {lens:?}",
            m.feature_dim,
            m.features.len()
        )));
    }
    if b >= u32::MAX as usize {
        return Err(Error::Shape(format!("{b} bars exceed the 32-bit bar index: split the data")));
    }
    Ok(())
}

impl Env {
    /// Upload `market` and allocate everything for `cfg.envs` environments on bars
    /// `split`, with action branches `branches` (the Q-network's); every env starts flat at
    /// its Philox-chosen bar (the oracle's `EnvState::new`), epsilon 1.
    pub fn new(gpu: &Gpu, cfg: &EnvConfig, branches: &[usize], market: &EnvMarket, split: Split) -> Result<Self> {
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
            schedule_epsilon: gpu.function(entry::schedule::SCHEDULE_EPSILON)?,
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
            reward_scale: cfg.reward_scale,
            dsr_eta: cfg.dsr_eta,
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
            dsr_a: s.alloc_zeros(e)?,
            dsr_b: s.alloc_zeros(e)?,
        };
        let ptrs = state_ptrs(s, &st);
        let mut env = Env {
            cfg: cfg.clone(),
            split,
            feature_dim: market.feature_dim,
            stream: s.clone(),
            k,
            params,
            branches: ActionBranches { count: branches.len() as u32, n },
            market: dm,
            st,
            ptrs,
            epsilon: s.clone_htod(&[1.0f32])?,
            epsilon_step: s.alloc_zeros(1)?,
            schedule: None,
            states: s.alloc_zeros(e * sd)?,
            x: s.alloc_zeros(e * (sd + 1))?,
            actions: s.alloc_zeros(e * 3)?,
            filled: s.alloc_zeros(e)?,
            fill_price: s.alloc_zeros(e)?,
            reward: s.alloc_zeros(e)?,
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
    /// replacing any schedule.
    pub fn set_epsilon(&mut self, epsilon: f32) -> Result<()> {
        check_epsilon("epsilon", epsilon)?;
        self.schedule = None;
        Ok(self.stream.memcpy_htod(&[epsilon], &mut self.epsilon)?)
    }

    /// Anneal the exploration rate on the device by `s` (tallyho_oracle::schedule), from its
    /// step 0: each [`Env::advance_epsilon`] sets the coming step's rate and advances the
    /// counter. A host write (not inside a capture).
    pub fn set_epsilon_schedule(&mut self, s: &EpsilonSchedule) -> Result<()> {
        check_epsilon("epsilon start", s.start)?;
        check_epsilon("epsilon end", s.end)?;
        self.schedule = Some(EpsilonParams { start: s.start, end: s.end, steps: s.steps });
        self.stream.memcpy_htod(&[0u32], &mut self.epsilon_step)?;
        Ok(self.stream.memcpy_htod(&[s.start], &mut self.epsilon)?)
    }

    /// Whether a schedule anneals epsilon (then [`Env::advance_epsilon`] launches).
    pub fn epsilon_scheduled(&self) -> bool {
        self.schedule.is_some()
    }

    /// `schedule_epsilon`: the coming step's rate from the schedule's device counter, and the
    /// counter's advance (one thread); nothing where epsilon is constant.
    pub fn advance_epsilon(&mut self) -> Result<()> {
        let Some(params) = self.schedule else { return Ok(()) };
        let mut l = self.stream.launch_builder(&self.k.schedule_epsilon);
        l.arg(&params).arg(&mut self.epsilon_step).arg(&mut self.epsilon);
        let one = cudarc::driver::LaunchConfig { grid_dim: (1, 1, 1), block_dim: (1, 1, 1), shared_mem_bytes: 0 };
        // SAFETY: schedule_epsilon(EpsilonSchedule by value, u32* step [1], float* epsilon
        // [1]): both buffers hold one value (new); one thread, as the kernel takes.
        unsafe { l.launch(one) }?;
        Ok(())
    }

    /// The exploration rate in device memory (synchronizes; tests).
    pub fn read_epsilon(&self) -> Result<f32> {
        Ok(self.stream.clone_dtoh(&self.epsilon)?[0])
    }

    /// Overwrite the portfolios (tests, fixtures); bars must lie inside the split.
    pub fn upload_state(&mut self, st: &EnvState) -> Result<()> {
        let n = self.cfg.envs;
        let lens = [
            st.bar.len(),
            st.steps.len(),
            st.clock.len(),
            st.position.len(),
            st.entry.len(),
            st.realized.len(),
            st.fees.len(),
            st.equity.len(),
            st.dsr_a.len(),
            st.dsr_b.len(),
        ];
        if lens.iter().any(|&l| l != n) {
            return Err(Error::Shape(format!("an env state with field lengths {lens:?} for an Env of {n} envs")));
        }
        if let Some(b) = st.bar.iter().find(|&&b| b < self.split.lo || b + 1 >= self.split.hi) {
            return Err(Error::Shape(format!(
                "env bar {b} is outside the split's start range [{}, {}): it needs a next bar",
                self.split.lo,
                self.split.hi - 1
            )));
        }
        let (s, d) = (&self.stream, &mut self.st);
        s.memcpy_htod(&st.bar, &mut d.bar)?;
        s.memcpy_htod(&st.steps, &mut d.steps)?;
        s.memcpy_htod(&st.clock, &mut d.clock)?;
        s.memcpy_htod(&st.position, &mut d.position)?;
        s.memcpy_htod(&st.entry, &mut d.entry)?;
        s.memcpy_htod(&st.realized, &mut d.realized)?;
        s.memcpy_htod(&st.fees, &mut d.fees)?;
        s.memcpy_htod(&st.equity, &mut d.equity)?;
        s.memcpy_htod(&st.dsr_a, &mut d.dsr_a)?;
        s.memcpy_htod(&st.dsr_b, &mut d.dsr_b)?;
        Ok(())
    }

    pub fn download_state(&self) -> Result<EnvState> {
        let (s, d) = (&self.stream, &self.st);
        Ok(EnvState {
            bar: s.clone_dtoh(&d.bar)?,
            steps: s.clone_dtoh(&d.steps)?,
            clock: s.clone_dtoh(&d.clock)?,
            position: s.clone_dtoh(&d.position)?,
            entry: s.clone_dtoh(&d.entry)?,
            realized: s.clone_dtoh(&d.realized)?,
            fees: s.clone_dtoh(&d.fees)?,
            equity: s.clone_dtoh(&d.equity)?,
            dsr_a: s.clone_dtoh(&d.dsr_a)?,
            dsr_b: s.clone_dtoh(&d.dsr_b)?,
        })
    }

    /// Upload actions `[N x 3]` (tests, fixtures: `fill_step` on chosen actions).
    pub fn upload_actions(&mut self, actions: &[i32]) -> Result<()> {
        if actions.len() != self.cfg.envs * 3 {
            return Err(Error::Shape(format!("{} actions for {} envs x 3 branches", actions.len(), self.cfg.envs)));
        }
        Ok(self.stream.memcpy_htod(actions, &mut self.actions)?)
    }

    pub fn read_states(&self) -> Result<Vec<f32>> {
        Ok(self.stream.clone_dtoh(&self.states)?)
    }

    pub fn read_x(&self) -> Result<Vec<f32>> {
        Ok(self.stream.clone_dtoh(&self.x)?)
    }

    pub fn read_actions(&self) -> Result<Vec<i32>> {
        Ok(self.stream.clone_dtoh(&self.actions)?)
    }

    pub fn read_fills(&self) -> Result<Fills> {
        Ok(Fills { filled: self.stream.clone_dtoh(&self.filled)?, price: self.stream.clone_dtoh(&self.fill_price)? })
    }

    pub fn read_outcome(&self) -> Result<Outcome> {
        Ok(Outcome {
            reward: self.stream.clone_dtoh(&self.reward)?,
            done: self.stream.clone_dtoh(&self.done)?,
            reason: self.stream.clone_dtoh(&self.reason)?,
        })
    }

    /// Fill every output with a poison value, so that a test sees any element not written.
    pub fn poison_outputs(&mut self) -> Result<()> {
        let s = &self.stream;
        let nan = |b: &mut CudaSlice<f32>| -> Result<()> { Ok(s.memcpy_htod(&vec![f32::NAN; b.len()], b)?) };
        nan(&mut self.states)?;
        nan(&mut self.x)?;
        nan(&mut self.fill_price)?;
        nan(&mut self.reward)?;
        nan(&mut self.done)?;
        let bad = |b: &mut CudaSlice<i32>| -> Result<()> { Ok(s.memcpy_htod(&vec![-7; b.len()], b)?) };
        bad(&mut self.actions)?;
        bad(&mut self.filled)?;
        bad(&mut self.reason)
    }

    /// `state_gather`: states and the Q-forward's input from the bars and portfolios.
    pub fn state_gather(&mut self) -> Result<()> {
        let elems = self.cfg.envs * self.state_dim();
        let mut l = self.stream.launch_builder(&self.k.state_gather);
        l.arg(&self.market.features)
            .arg(&self.market.close)
            .arg(&self.params)
            .arg(&self.ptrs)
            .arg(&mut self.states)
            .arg(&mut self.x);
        // SAFETY: state_gather(const float* features [bars x F], const float* close [bars],
        // EnvParams, EnvState (pointers into self.st, N each), float* states [N x S],
        // float* x [N x (S + 1)]): sizes from new(); every bar index lies in the split
        // (upload_state, barriers' resets), which lies inside the market.
        unsafe { l.launch(grid_stride(elems)) }?;
        Ok(())
    }

    /// `action_select` on Q-values `q` `[N x sum n_k]`.
    pub fn action_select(&mut self, q: &CudaSlice<f32>) -> Result<()> {
        let width = self.branches.width();
        if q.len() != self.cfg.envs * width {
            return Err(Error::Shape(format!("Q-values of {} floats for {} envs x {width} actions", q.len(), self.cfg.envs)));
        }
        let envs = self.params.envs;
        let mut l = self.stream.launch_builder(&self.k.action_select);
        l.arg(q)
            .arg(&self.branches)
            .arg(&self.epsilon)
            .arg(&self.st.clock)
            .arg(&envs)
            .arg(&self.params.key0)
            .arg(&self.params.key1)
            .arg(&mut self.actions);
        // SAFETY: action_select(const float* q [N x A], ActionBranches, const float* epsilon
        // [1], const u32* clock [N], u32 N, u32 key0, u32 key1, int* actions [N x K]): q's
        // length checked above, K = 3 branches (EnvConfig::validate).
        unsafe { l.launch(grid_stride(self.cfg.envs)) }?;
        Ok(())
    }

    /// `fill_step`: each env's order against its bar's quote.
    pub fn fill_step(&mut self) -> Result<()> {
        let mut l = self.stream.launch_builder(&self.k.fill_step);
        l.arg(&self.market.bid)
            .arg(&self.market.ask)
            .arg(&self.market.volatility)
            .arg(&self.params)
            .arg(&self.ptrs)
            .arg(&self.actions)
            .arg(&mut self.filled)
            .arg(&mut self.fill_price);
        // SAFETY: fill_step(const float* bid, ask, volatility [bars], EnvParams, EnvState,
        // const int* actions [N x 3], int* filled [N], float* fill_price [N]); bars in range
        // as for state_gather; actions within their branches (action_select or checked
        // uploads: an out-of-range size only changes the clipped quantity).
        unsafe { l.launch(grid_stride(self.cfg.envs)) }?;
        Ok(())
    }

    /// `barriers`: next bar, exits, mark, reward, done, auto-reset.
    pub fn barriers(&mut self) -> Result<()> {
        let mut l = self.stream.launch_builder(&self.k.barriers);
        l.arg(&self.market.bid)
            .arg(&self.market.ask)
            .arg(&self.market.high)
            .arg(&self.market.low)
            .arg(&self.params)
            .arg(&self.ptrs)
            .arg(&mut self.reward)
            .arg(&mut self.done)
            .arg(&mut self.reason);
        // SAFETY: barriers(const float* bid, ask, high, low [bars], EnvParams, EnvState,
        // float* reward [N], float* done [N], int* reason [N]); it reads bar + 1 <= hi - 1
        // (starts lie in [lo, hi - 2] and an env at hi - 2 is done), inside the market.
        unsafe { l.launch(grid_stride(self.cfg.envs)) }?;
        Ok(())
    }

    /// `env_step`: [`Env::action_select`] on `q`, [`Env::fill_step`] and [`Env::barriers`]
    /// as one launch (each env's three steps in one thread), the same outputs bit for bit.
    pub fn env_step(&mut self, q: &CudaSlice<f32>) -> Result<()> {
        let width = self.branches.width();
        if q.len() != self.cfg.envs * width {
            return Err(Error::Shape(format!("Q-values of {} floats for {} envs x {width} actions", q.len(), self.cfg.envs)));
        }
        let m = &self.market;
        // Launched programmatically: its launch overlaps the Q-forward's tail (env_step
        // waits for it before its first read).
        let mut l = Programmatic::new(&self.stream, &self.k.env_step);
        l.input(q)
            .value(&self.branches)
            .input(&self.epsilon)
            .input(&m.bid)
            .input(&m.ask)
            .input(&m.volatility)
            .input(&m.high)
            .input(&m.low)
            .value(&self.params)
            .value(&self.ptrs)
            .output(&mut self.actions)
            .output(&mut self.filled)
            .output(&mut self.fill_price)
            .output(&mut self.reward)
            .output(&mut self.done)
            .output(&mut self.reason);
        // SAFETY: env_step(const float* q [N x A], ActionBranches, const float* epsilon [1],
        // const float* bid, ask, volatility, high, low [bars], EnvParams, EnvState, int*
        // actions [N x 3], int* filled [N], float* fill_price [N], float* reward [N], float*
        // done [N], int* reason [N]): q's length checked above, the rest as for
        // action_select, fill_step and barriers, whose bodies it runs; it calls
        // grid_wait_for_prior before anything else.
        unsafe { l.launch(grid_stride(self.cfg.envs)) }
    }

    /// The env as the experience step in one launch takes it (its addresses and constants).
    pub fn act_env(&self) -> ActEnv {
        let s = &self.stream;
        let (m, p) = (&self.market, |b: &CudaSlice<f32>| b.device_ptr(s).0);
        ActEnv {
            features: p(&m.features),
            close: p(&m.close),
            params: self.params,
            state: self.ptrs,
            branches: self.branches,
            states: p(&self.states),
            x: p(&self.x),
            epsilon: p(&self.epsilon),
            bid: p(&m.bid),
            ask: p(&m.ask),
            volatility: p(&m.volatility),
            high: p(&m.high),
            low: p(&m.low),
            actions: self.actions.device_ptr(s).0,
            filled: self.filled.device_ptr(s).0,
            fill_price: p(&self.fill_price),
            reward: p(&self.reward),
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
        d.dsr_a.device_ptr(s).0,
        d.dsr_b.device_ptr(s).0,
    ])
}
