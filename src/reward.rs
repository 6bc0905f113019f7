//! The reward pipeline on the device, the one definition of the transition's reward from
//! the env step's PnL and positions, by two paths over the same state and outputs: the
//! unfused stages of cuda/reward_stages.cu, one launch per [`Stage`] in `Stage::ALL` order
//! (spec: reward::reward_stage), and the fused kernel of cuda/reward_fused.cu, one launch
//! for the whole step (spec: reward::reward_step). Either runs eagerly or through its own
//! graph slot. Every buffer is allocated in `RewardPipeline::new`; the constants are one
//! kernel argument and every per-step value (the global state, the per-env state) lives
//! in device memory, so a captured step replays on whatever the buffers then hold.

use crate::error::{Error, Result};
use crate::graph::{address, Binding, GraphSlot, Phase};
use crate::runtime::{entry, grid_stride, Gpu};
use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg};
use std::sync::Arc;
use tallyho_oracle::reward::{RewardConfig, RewardEnvs, RewardGlobal, RewardOut, Stage};

/// Which path computes a reward step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RewardPath {
    /// The unfused stages (the verification path): twelve launches (ten stages, two of them
    /// reductions of two).
    Unfused,
    /// The fused kernel: one launch.
    Fused,
}

/// Threads per block of the reductions (REWARD_THREADS in the kernel file).
const THREADS: u32 = 256;
/// Most blocks a reduction's partial kernel uses (each thread then loops).
const MAX_BLOCKS: usize = 1024;

/// `struct RewardParams` of cuda/common/reward.cuh.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct RewardParams {
    entry_cost: f32,
    min_hold_penalty: f32,
    ema_rate: f32,
    outcome_rate: f32,
    target_abs_reward: f32,
    scale_gain: f32,
    scale_min: f32,
    scale_max: f32,
    target_duration: f32,
    hold_gain: f32,
    hold_bonus_max: f32,
    dispersion_floor: f32,
    dsr_eta: f32,
    min_hold: u32,
    envs: u32,
}

// SAFETY: plain old data of 4-byte fields, laid out as the kernels' struct (repr(C)).
unsafe impl cudarc::driver::DeviceRepr for RewardParams {}
// The size of `struct RewardParams` (cuda/common/reward.cuh static_asserts the same).
const _: () = assert!(std::mem::size_of::<RewardParams>() == 60);

struct Kernels {
    pnl_delta: CudaFunction,
    shaping: CudaFunction,
    snapshot: CudaFunction,
    abs: CudaFunction,
    duration: CudaFunction,
    ema_partial: CudaFunction,
    ema_finalize: CudaFunction,
    outcome: CudaFunction,
    scale: CudaFunction,
    controllers: CudaFunction,
    dispersion_partial: CudaFunction,
    dispersion_finalize: CudaFunction,
    fused: CudaFunction,
}

/// The reward pipeline for N envs: its state, its last step's outputs, and the kernels and
/// graph slots of both paths.
pub struct RewardPipeline {
    envs: usize,
    stream: Arc<CudaStream>,
    k: Kernels,
    p: RewardParams,
    blocks: u32,
    prev_position: CudaSlice<i32>,
    steps_since_done: CudaSlice<u32>,
    outcome_ema: CudaSlice<f32>,
    dsr_a: CudaSlice<f32>,
    dsr_b: CudaSlice<f32>,
    /// The 8 floats of `RewardGlobal`.
    pub global: CudaSlice<f32>,
    partial: CudaSlice<f64>,
    /// The fused kernel's six block partials and its last-block ticket (0 between launches).
    fused_partial: CudaSlice<f64>,
    ticket: CudaSlice<u32>,
    pub pnl: CudaSlice<f32>,
    pub done: CudaSlice<f32>,
    work: CudaSlice<f32>,
    pub raw: CudaSlice<f32>,
    pub abs: CudaSlice<f32>,
    pub duration: CudaSlice<u32>,
    pub reward: CudaSlice<f32>,
    unfused_graph: GraphSlot,
    fused_graph: GraphSlot,
}

impl RewardPipeline {
    pub fn new(gpu: &Gpu, cfg: &RewardConfig, envs: usize) -> Result<Self> {
        cfg.validate()?;
        if envs == 0 || envs > 1 << 24 {
            return Err(Error::Shape(format!(
                "{envs} envs for the reward pipeline: use 1 to 2^24"
            )));
        }
        use entry::reward_stages as stages;
        let f = |e| gpu.function(e);
        let k = Kernels {
            pnl_delta: f(stages::REWARD_PNL_DELTA)?,
            shaping: f(stages::REWARD_SHAPING)?,
            snapshot: f(stages::REWARD_SNAPSHOT)?,
            abs: f(stages::REWARD_ABS)?,
            duration: f(stages::REWARD_DURATION)?,
            ema_partial: f(stages::REWARD_EMA_PARTIAL)?,
            ema_finalize: f(stages::REWARD_EMA_FINALIZE)?,
            outcome: f(stages::REWARD_OUTCOME)?,
            scale: f(stages::REWARD_SCALE)?,
            controllers: f(stages::REWARD_CONTROLLERS)?,
            dispersion_partial: f(stages::REWARD_DISPERSION_PARTIAL)?,
            dispersion_finalize: f(stages::REWARD_DISPERSION_FINALIZE)?,
            fused: gpu.function(entry::reward_fused::REWARD_FUSED)?,
        };
        let p = RewardParams {
            entry_cost: cfg.entry_cost,
            min_hold_penalty: cfg.min_hold_penalty,
            ema_rate: cfg.ema_rate,
            outcome_rate: cfg.outcome_rate,
            target_abs_reward: cfg.target_abs_reward,
            scale_gain: cfg.scale_gain,
            scale_min: cfg.scale_min,
            scale_max: cfg.scale_max,
            target_duration: cfg.target_duration,
            hold_gain: cfg.hold_gain,
            hold_bonus_max: cfg.hold_bonus_max,
            dispersion_floor: cfg.dispersion_floor,
            dsr_eta: cfg.dsr_eta,
            min_hold: cfg.min_hold,
            envs: envs as u32,
        };
        let blocks = envs.div_ceil(THREADS as usize).clamp(1, MAX_BLOCKS);
        let s = &gpu.stream;
        Ok(RewardPipeline {
            envs,
            stream: s.clone(),
            k,
            p,
            blocks: blocks as u32,
            prev_position: s.alloc_zeros(envs)?,
            steps_since_done: s.alloc_zeros(envs)?,
            outcome_ema: s.alloc_zeros(envs)?,
            dsr_a: s.alloc_zeros(envs)?,
            dsr_b: s.alloc_zeros(envs)?,
            global: s.clone_htod(&RewardGlobal::new(cfg).to_words())?,
            partial: s.alloc_zeros(4 * blocks)?,
            fused_partial: s.alloc_zeros(6 * blocks)?,
            ticket: s.alloc_zeros(1)?,
            pnl: s.alloc_zeros(envs)?,
            done: s.alloc_zeros(envs)?,
            work: s.alloc_zeros(envs)?,
            raw: s.alloc_zeros(envs)?,
            abs: s.alloc_zeros(envs)?,
            duration: s.alloc_zeros(envs)?,
            reward: s.alloc_zeros(envs)?,
            unfused_graph: GraphSlot::new("reward_stages"),
            fused_graph: GraphSlot::new("reward_fused"),
        })
    }

    /// Overwrite the per-env and global state (tests, fixtures).
    pub fn upload_state(&mut self, envs: &RewardEnvs, global: &RewardGlobal) -> Result<()> {
        let lens = envs.field_lens();
        if lens.iter().any(|&l| l != self.envs) {
            return Err(Error::Shape(format!(
                "reward state with field lengths {lens:?} for a pipeline of {} envs: upload a state of that many envs",
                self.envs
            )));
        }
        let s = &self.stream;
        s.memcpy_htod(&envs.prev_position, &mut self.prev_position)?;
        s.memcpy_htod(&envs.steps_since_done, &mut self.steps_since_done)?;
        s.memcpy_htod(&envs.outcome_ema, &mut self.outcome_ema)?;
        s.memcpy_htod(&envs.dsr_a, &mut self.dsr_a)?;
        s.memcpy_htod(&envs.dsr_b, &mut self.dsr_b)?;
        s.memcpy_htod(&global.to_words(), &mut self.global)?;
        Ok(())
    }

    pub fn download_state(&self) -> Result<(RewardEnvs, RewardGlobal)> {
        let s = &self.stream;
        let w = s.clone_dtoh(&self.global)?;
        let words: [f32; 8] = w
            .as_slice()
            .try_into()
            .map_err(|_| Error::Shape("reward global is not 8 floats".into()))?;
        Ok((
            RewardEnvs {
                prev_position: s.clone_dtoh(&self.prev_position)?,
                steps_since_done: s.clone_dtoh(&self.steps_since_done)?,
                outcome_ema: s.clone_dtoh(&self.outcome_ema)?,
                dsr_a: s.clone_dtoh(&self.dsr_a)?,
                dsr_b: s.clone_dtoh(&self.dsr_b)?,
            },
            RewardGlobal::of_words(&words),
        ))
    }

    /// Set the step buffers (a stage test starts a stage from the oracle's buffers).
    pub fn upload_out(&mut self, out: &RewardOut) -> Result<()> {
        let n = self.envs;
        let lens = [
            out.pnl.len(),
            out.done.len(),
            out.work.len(),
            out.raw.len(),
            out.abs.len(),
            out.duration.len(),
            out.reward.len(),
        ];
        if lens.iter().any(|&l| l != n) {
            return Err(Error::Shape(format!("reward step buffers of lengths {lens:?} for a pipeline of {n} envs: give {n} values each")));
        }
        let s = &self.stream;
        s.memcpy_htod(&out.pnl, &mut self.pnl)?;
        s.memcpy_htod(&out.done, &mut self.done)?;
        s.memcpy_htod(&out.work, &mut self.work)?;
        s.memcpy_htod(&out.raw, &mut self.raw)?;
        s.memcpy_htod(&out.abs, &mut self.abs)?;
        s.memcpy_htod(&out.duration, &mut self.duration)?;
        s.memcpy_htod(&out.reward, &mut self.reward)?;
        Ok(())
    }

    pub fn read_out(&self) -> Result<RewardOut> {
        let s = &self.stream;
        Ok(RewardOut {
            pnl: s.clone_dtoh(&self.pnl)?,
            done: s.clone_dtoh(&self.done)?,
            work: s.clone_dtoh(&self.work)?,
            raw: s.clone_dtoh(&self.raw)?,
            abs: s.clone_dtoh(&self.abs)?,
            duration: s.clone_dtoh(&self.duration)?,
            reward: s.clone_dtoh(&self.reward)?,
        })
    }

    fn check_inputs(&self, pnl: &CudaSlice<f32>, position: &CudaSlice<i32>) -> Result<()> {
        if pnl.len() != self.envs || position.len() != self.envs {
            return Err(Error::Shape(format!(
                "reward inputs of {} step PnLs and {} positions for {} envs: give one of each per env (Env::pnl, Env::position)",
                pnl.len(),
                position.len(),
                self.envs
            )));
        }
        Ok(())
    }

    /// The unfused path's working reward buffer (the fused path never touches it: a test poisons
    /// it to prove which path ran).
    pub fn work(&mut self) -> &mut CudaSlice<f32> {
        &mut self.work
    }

    /// One reward step by `path`, eagerly, on the env step's outputs: `pnl`, each env's net
    /// realized PnL of the step (the env's `pnl` buffer), and `position`, its position after
    /// the step (the env's `position()`), N each.
    pub fn step(
        &mut self,
        path: RewardPath,
        pnl: &CudaSlice<f32>,
        position: &CudaSlice<i32>,
    ) -> Result<()> {
        self.check_inputs(pnl, position)?;
        match path {
            RewardPath::Unfused => Stage::ALL
                .into_iter()
                .try_for_each(|stage| self.launch_stage(stage, pnl, position)),
            RewardPath::Fused => self.launch_fused(pnl, position),
        }
    }

    /// [`RewardPipeline::step`] through the path's graph slot: eager once, then captured,
    /// then replayed. The inputs must stay the same buffers (their contents may change).
    pub fn step_graphed(
        &mut self,
        path: RewardPath,
        pnl: &CudaSlice<f32>,
        position: &CudaSlice<i32>,
    ) -> Result<()> {
        self.check_inputs(pnl, position)?;
        let stream = self.stream.clone();
        let a = |x: &CudaSlice<f32>| address(&stream, x);
        // The inputs, and the outputs that are public fields (so replaceable).
        #[rustfmt::skip]
        let words = [a(pnl), address(&stream, position), a(&self.global), a(&self.pnl), a(&self.done), a(&self.raw),
            a(&self.abs), address(&stream, &self.duration), a(&self.reward)];
        let binding = Binding::of(&words);
        let slot: fn(&mut Self) -> &mut GraphSlot = match path {
            RewardPath::Unfused => |r| &mut r.unfused_graph,
            RewardPath::Fused => |r| &mut r.fused_graph,
        };
        GraphSlot::run_on(self, slot, &stream, binding, |r| {
            r.step(path, pnl, position)
        })
    }

    pub fn graph_phase(&self, path: RewardPath) -> Phase {
        match path {
            RewardPath::Unfused => self.unfused_graph.phase(),
            RewardPath::Fused => self.fused_graph.phase(),
        }
    }

    /// The number of launches the path's captured step holds (None before capture).
    pub fn graph_nodes(&self, path: RewardPath) -> Result<Option<usize>> {
        match path {
            RewardPath::Unfused => self.unfused_graph.nodes(),
            RewardPath::Fused => self.fused_graph.nodes(),
        }
    }

    /// One unfused stage alone, on the state and step buffers as they are.
    pub fn stage(
        &mut self,
        stage: Stage,
        pnl: &CudaSlice<f32>,
        position: &CudaSlice<i32>,
    ) -> Result<()> {
        self.check_inputs(pnl, position)?;
        self.launch_stage(stage, pnl, position)
    }

    /// The fused kernel: the same state, outputs and results as the unfused stages from ONE
    /// launch.
    fn launch_fused(&mut self, pnl: &CudaSlice<f32>, position: &CudaSlice<i32>) -> Result<()> {
        let cfg = LaunchConfig {
            grid_dim: (self.blocks, 1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut l = self.stream.launch_builder(&self.k.fused);
        l.arg(pnl)
            .arg(position)
            .arg(&self.p)
            .arg(&mut self.prev_position)
            .arg(&mut self.steps_since_done)
            .arg(&mut self.outcome_ema)
            .arg(&mut self.dsr_a)
            .arg(&mut self.dsr_b)
            .arg(&mut self.global)
            .arg(&mut self.fused_partial)
            .arg(&mut self.ticket)
            .arg(&mut self.pnl)
            .arg(&mut self.done)
            .arg(&mut self.raw)
            .arg(&mut self.abs)
            .arg(&mut self.duration)
            .arg(&mut self.reward);
        // SAFETY: reward_fused's signature in order; per-env buffers of N, global 8 floats,
        // fused_partial 6 x blocks doubles, the ticket one word left 0 by the last block;
        // `blocks` blocks of THREADS threads, as the kernel requires.
        unsafe { l.launch(cfg) }?;
        Ok(())
    }

    /// The kernel (or, for the two reductions, the partial and the finalize kernels) of
    /// one stage.
    fn launch_stage(
        &mut self,
        stage: Stage,
        pnl: &CudaSlice<f32>,
        position: &CudaSlice<i32>,
    ) -> Result<()> {
        let (s, p, k) = (&self.stream, &self.p, &self.k);
        let each = grid_stride(self.envs);
        let reduce = LaunchConfig {
            grid_dim: (self.blocks, 1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let one_block = LaunchConfig {
            grid_dim: (1, 1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let one_thread = LaunchConfig {
            grid_dim: (1, 1, 1),
            block_dim: (1, 1, 1),
            shared_mem_bytes: 0,
        };
        let blocks = self.blocks;
        // SAFETY (every launch below): the signatures of cuda/reward_stages.cu, in their
        // argument order; every per-env buffer holds N = p.envs elements (new), `global` 8
        // floats, `partial` 4 x blocks doubles; the partial kernels run on `blocks` blocks
        // of THREADS threads and the finalize kernels on one block of THREADS.
        unsafe {
            match stage {
                Stage::PnlDelta => {
                    let mut l = s.launch_builder(&k.pnl_delta);
                    l.arg(pnl).arg(position).arg(p).arg(&self.prev_position);
                    l.arg(&mut self.pnl)
                        .arg(&mut self.done)
                        .arg(&mut self.work)
                        .launch(each)?;
                }
                Stage::Shaping => {
                    let mut l = s.launch_builder(&k.shaping);
                    l.arg(position)
                        .arg(p)
                        .arg(&self.global)
                        .arg(&mut self.prev_position)
                        .arg(&self.steps_since_done);
                    l.arg(&self.done).arg(&mut self.work).launch(each)?;
                }
                Stage::Snapshot => {
                    s.launch_builder(&k.snapshot)
                        .arg(&self.work)
                        .arg(p)
                        .arg(&mut self.raw)
                        .launch(each)?;
                }
                Stage::Abs => {
                    s.launch_builder(&k.abs)
                        .arg(&self.raw)
                        .arg(p)
                        .arg(&mut self.abs)
                        .launch(each)?;
                }
                Stage::Duration => {
                    let mut l = s.launch_builder(&k.duration);
                    l.arg(&self.done)
                        .arg(p)
                        .arg(&mut self.steps_since_done)
                        .arg(&mut self.duration)
                        .launch(each)?;
                }
                Stage::Ema => {
                    let mut l = s.launch_builder(&k.ema_partial);
                    l.arg(&self.done)
                        .arg(&self.duration)
                        .arg(&self.pnl)
                        .arg(p)
                        .arg(&mut self.partial)
                        .launch(reduce)?;
                    let mut l = s.launch_builder(&k.ema_finalize);
                    l.arg(&self.partial)
                        .arg(&blocks)
                        .arg(p)
                        .arg(&mut self.global)
                        .launch(one_block)?;
                }
                Stage::Outcome => {
                    let mut l = s.launch_builder(&k.outcome);
                    l.arg(&self.done)
                        .arg(&self.pnl)
                        .arg(p)
                        .arg(&mut self.outcome_ema)
                        .launch(each)?;
                }
                Stage::Scale => {
                    let mut l = s.launch_builder(&k.scale);
                    l.arg(&self.raw)
                        .arg(p)
                        .arg(&self.global)
                        .arg(&mut self.dsr_a)
                        .arg(&mut self.dsr_b);
                    l.arg(&mut self.reward).launch(each)?;
                }
                Stage::Controllers => {
                    s.launch_builder(&k.controllers)
                        .arg(p)
                        .arg(&mut self.global)
                        .launch(one_thread)?;
                }
                Stage::Dispersion => {
                    let mut l = s.launch_builder(&k.dispersion_partial);
                    l.arg(&self.reward)
                        .arg(p)
                        .arg(&mut self.partial)
                        .launch(reduce)?;
                    let mut l = s.launch_builder(&k.dispersion_finalize);
                    l.arg(&self.partial)
                        .arg(&blocks)
                        .arg(p)
                        .arg(&mut self.global)
                        .launch(one_block)?;
                }
            }
        }
        Ok(())
    }
}
