//! The env's kernel arguments: `#[repr(C)]` mirrors of the structs of cuda/common/env.cuh,
//! env_steps.cuh and cuda/experience_step.cu, each with its size asserted
//! on both sides.

use tallyho_oracle::env::PORTFOLIO_FEATURES;

/// `struct EnvParams` of cuda/common/env.cuh: the run's constants, a kernel argument.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(super) struct EnvParams {
    pub(super) envs: u32,
    pub(super) feature_dim: u32,
    pub(super) max_steps: u32,
    pub(super) bar_lo: u32,
    pub(super) bar_hi: u32,
    pub(super) max_position: i32,
    pub(super) point_value: f32,
    pub(super) commission: f32,
    pub(super) ioc_fill_prob: f32,
    pub(super) limit_fill_min: f32,
    pub(super) limit_fill_max: f32,
    pub(super) limit_capture: f32,
    pub(super) take_profit: f32,
    pub(super) stop_loss: f32,
    pub(super) key0: u32,
    pub(super) key1: u32,
}

// SAFETY: plain old data of 4-byte fields, laid out as the kernels' struct (repr(C)).
unsafe impl cudarc::driver::DeviceRepr for EnvParams {}
// The size of `struct EnvParams` (cuda/common/env.cuh static_asserts the same).
const _: () = assert!(std::mem::size_of::<EnvParams>() == 64);

/// `struct EnvState` of cuda/common/env.cuh: the device addresses of the state's fields.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(super) struct StatePtrs(pub(super) [u64; 8]);

// SAFETY: eight device addresses, the layout of the kernels' struct of eight pointers.
unsafe impl cudarc::driver::DeviceRepr for StatePtrs {}
// The size of `struct EnvState` (cuda/common/env.cuh static_asserts the same).
const _: () = assert!(std::mem::size_of::<StatePtrs>() == 64);

/// `struct ActionBranches` of cuda/common/env_steps.cuh.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(super) struct ActionBranches {
    pub(super) count: u32,
    pub(super) n: [u32; 4],
}

// SAFETY: plain old data of u32, laid out as the kernel's struct (repr(C)).
unsafe impl cudarc::driver::DeviceRepr for ActionBranches {}
// The size of `struct ActionBranches` (cuda/common/env_steps.cuh static_asserts the same).
const _: () = assert!(std::mem::size_of::<ActionBranches>() == 20);

impl ActionBranches {
    /// The Q-values row's width: every branch's actions (`branches_width`,
    /// cuda/common/env_steps.cuh).
    pub(super) fn width(&self) -> usize {
        self.n[..self.count as usize]
            .iter()
            .map(|&n| n as usize)
            .sum()
    }
}

/// `struct ActEnv` of cuda/experience_step.cu, field for field: what the experience step in
/// one launch (crate::experience) reads and writes of one [`Env`] (the device addresses of
/// its market, portfolios and outputs, and its constants), a kernel argument. Built by
/// [`Env::act_env`].
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ActEnv {
    pub(super) params: EnvParams,
    pub(super) state: StatePtrs,
    pub(super) branches: ActionBranches,
    pub(super) states: u64,
    pub(super) x: u64,
    // EnvStepIo (cuda/common/env_steps.cuh)
    pub(super) epsilon: u64,
    pub(super) features: u64,
    pub(super) close: u64,
    pub(super) bid: u64,
    pub(super) ask: u64,
    pub(super) volatility: u64,
    pub(super) high: u64,
    pub(super) low: u64,
    pub(super) actions: u64,
    pub(super) filled: u64,
    pub(super) fill_price: u64,
    pub(super) net_before: u64,
    pub(super) pnl: u64,
    pub(super) next_states: u64,
    pub(super) done: u64,
    pub(super) reason: u64,
}

// SAFETY: device addresses and the plain-old-data structs above, laid out as the kernel's
// struct (repr(C): the same fields in the same order, so the same padding).
unsafe impl cudarc::driver::DeviceRepr for ActEnv {}
// The size of `struct ActEnv` (cuda/experience_step.cu static_asserts the same).
const _: () = assert!(std::mem::size_of::<ActEnv>() == 296);
// Where `EnvStepIo` starts and its size (cuda/common/env_steps.cuh static_asserts the size):
// 16 addresses from `epsilon` on.
const _: () = assert!(
    std::mem::offset_of!(ActEnv, epsilon) == 168 && std::mem::size_of::<ActEnv>() - 168 == 128
);

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

    /// The device address of the states buffer: which env this is.
    pub fn states_address(&self) -> u64 {
        self.states
    }

    /// Every device address it holds (the market, the portfolios, the outputs): what a graph
    /// over the env binds to.
    pub fn addresses(&self) -> [u64; 26] {
        let s = self.state.0;
        [
            s[0],
            s[1],
            s[2],
            s[3],
            s[4],
            s[5],
            s[6],
            s[7],
            self.states,
            self.x,
            self.epsilon,
            self.features,
            self.close,
            self.bid,
            self.ask,
            self.volatility,
            self.high,
            self.low,
            self.actions,
            self.filled,
            self.fill_price,
            self.net_before,
            self.pnl,
            self.next_states,
            self.done,
            self.reason,
        ]
    }
}
