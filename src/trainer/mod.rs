//! The CUDA trainer: the training step of tallyho_oracle::trainer (whose module doc is the
//! spec of the loop and the step) on the device, every stage launched on the GPU's stream
//! with no host read, and each kind of step captured once as one graph and replayed.
//!
//! A step: [`Experience::step`] (epsilon's schedule, the one-launch experience step, s'
//! kept before the auto-reset) -> [`RewardPipeline::step`] (fused by default) on the step's
//! PnL and positions -> [`TransitionAssembler::assemble`] (one n-step transition per env) and
//! the step's metric sums -> U x (sample, gather, [`QNet::update`], priority update,
//! [`QNet::target_sync_due`], the update's metrics) on the replay as it was before the step
//! -> the replay insert of the step's N rows. Every per-step value (epsilon and its
//! counter, Philox clocks, the replay's cursor and sample step, Adam's step, the n-step
//! counts) lives in device memory and is advanced by kernels, so the captured step replays.
//! The metrics are read every K steps by [`Backend::take_metrics`], outside the replay.

mod fault;
mod metrics;
mod readback;

pub use metrics::{DeviceMetrics, StepInputs};

use crate::env::Env;
use crate::error::{Error, Result};
use crate::experience::{Experience, ExperiencePath};
use crate::graph::{address, Binding, GraphSlot, Phase};
use crate::qnet::{Acting, QNet};
use crate::replay::ReplayBuffer;
use crate::reward::{RewardPath, RewardPipeline};
use crate::runtime::Gpu;
use crate::transition::{DeviceStep, TransitionAssembler};
use cudarc::driver::{CudaEvent, CudaSlice, CudaStream};
use std::sync::Arc;
use tallyho_oracle::env::{EnvMarket, Split};
use tallyho_oracle::features::Market;
use tallyho_oracle::schedule::StepKind;
use tallyho_oracle::trainer::{Backend, MetricTotals, OracleTrainer};
use tallyho_oracle::TrainConfig;

/// Words of a step graph's binding: 5 switches, the env's 26 addresses, acting's 5, the
/// n-step assembler's 11 and 9 more buffers.
const BINDING_WORDS: usize = 5 + 26 + 5 + 11 + 9;

/// Each kind's graph slot (index: `StepKind as usize`).
const KINDS: usize = 3;

/// The kernel files a training step launches, on one path or another (graph or eager,
/// fused or unfused, one launch or three): what a change to any of them can move.
pub const STEP_KERNELS: &[&str] = &[
    "schedule",
    "state_gather",
    "qnet_forward",
    "qnet_head",
    "qnet_head_matrix",
    "qnet_act",
    "env_step",
    "experience_step",
    "reward_fused",
    "reward_stages",
    "transition_assemble",
    "trainer_metrics",
    "replay_sample",
    "replay_gather",
    "qnet_loss",
    "qnet_backward",
    "optimizer_grad_norm",
    "optimizer_adam",
    "optimizer_target_sync",
    "replay_update_priorities",
    "replay_insert",
];

/// The training state on the device and the step's graphs.
pub struct CudaTrainer {
    cfg: TrainConfig,
    pub env: Env,
    pub net: QNet,
    pub acting: Acting,
    experience: Experience,
    pub reward: RewardPipeline,
    reward_path: RewardPath,
    pub transition: TransitionAssembler,
    pub replay: ReplayBuffer,
    metrics: DeviceMetrics,
    graphs: bool,
    slots: [GraphSlot; KINDS],
    /// Steps run and replay rows inserted, counted on the host (never read from the device).
    steps: u64,
    inserted: usize,
    /// The update's stream (the step's own where the halves do not overlap), and the
    /// events of the fork, the hand-over after the experience half, and the join.
    learner: Arc<CudaStream>,
    /// The step's stream (the env's): the one graphs are captured on and replayed from.
    main: Arc<CudaStream>,
    forked: CudaEvent,
    acted: CudaEvent,
    joined: CudaEvent,
    /// The market the envs step (the host mirror's).
    market: Market,
    /// The host mirror of the whole state ([`Backend::state`]) and the step it was copied at.
    mirror: Option<Box<OracleTrainer>>,
    mirror_at: Option<u64>,
    /// A planted fault (tests of `tallyho diverge`; see `fault`): None in every run.
    fault: Option<tallyho_oracle::trainer::trace::Fault>,
}

/// `to` waits for the work queued on `from` so far (nothing where they are one stream).
fn hand_over(event: &CudaEvent, from: &Arc<CudaStream>, to: &Arc<CudaStream>) -> Result<()> {
    if !Arc::ptr_eq(from, to) {
        event.record(from)?;
        to.wait(event)?;
    }
    Ok(())
}

fn kind_index(kind: StepKind) -> usize {
    match kind {
        StepKind::Fill => 0,
        StepKind::Collect => 1,
        StepKind::Learn => 2,
    }
}

impl CudaTrainer {
    /// A run of `cfg` on the training split of `market`: the same initial state as
    /// tallyho_oracle::trainer::OracleTrainer::new (envs at their Philox starts, the network
    /// from `qnet.seed`, every counter at 0), the fused reward, graphs on, the two halves of
    /// a step in order on one stream ([`CudaTrainer::with_overlap`]).
    pub fn new(gpu: &Gpu, cfg: &TrainConfig, market: &Market) -> Result<Self> {
        Self::with_overlap(gpu, cfg, market, false)
    }

    /// [`CudaTrainer::new`], with `overlap` choosing where the update runs: on a second
    /// stream, so that a step's experience half (experience, reward, n-step assembly, its
    /// metrics) and its first update's sample, gather, forwards, loss and backward run side
    /// by side, as two branches of the step's graph; or (false) on the experience's stream,
    /// one after the other. The oracle's order makes the two halves independent (the
    /// updates read the replay as it was before the step and the parameters the step acts
    /// with), so both give the same bits; the branches join before Adam writes the
    /// parameters and before the insert writes the replay.
    pub fn with_overlap(
        gpu: &Gpu,
        cfg: &TrainConfig,
        market: &Market,
        overlap: bool,
    ) -> Result<Self> {
        cfg.validate(market.feature_dim)?;
        let m = EnvMarket::of(market);
        let split = Split::train(market);
        split.validate(m.bars)?;
        let n = cfg.env.envs;
        // Every module first, so that the update's device handle shares them.
        gpu.load_all()?;
        let learner = gpu.with_stream(if overlap {
            gpu.ctx.new_stream()?
        } else {
            gpu.stream.clone()
        });
        let mut env = Env::new(gpu, &cfg.env, &cfg.qnet.branches, &m, split)?;
        env.epsilon.set_schedule(&cfg.schedule.epsilon)?;
        let net = QNet::new(&learner, &cfg.qnet, cfg.replay.batch)?;
        let acting = net.acting(n)?.q_only();
        let experience = Experience::new(gpu, &env, &net)?;
        let mut metrics = DeviceMetrics::new(gpu, n, &cfg.qnet.branches)?;
        metrics.set_update_stream(learner.stream.clone());
        let t = CudaTrainer {
            reward: RewardPipeline::new(gpu, &cfg.reward, n)?,
            reward_path: RewardPath::Fused,
            transition: TransitionAssembler::new(gpu, &cfg.transition(), n, cfg.qnet.state_dim)?,
            replay: ReplayBuffer::new(&learner, &cfg.replay, n)?,
            metrics,
            graphs: true,
            fault: None,
            steps: 0,
            inserted: 0,
            slots: [
                GraphSlot::new("train_fill"),
                GraphSlot::new("train_collect"),
                GraphSlot::new("train_learn"),
            ],
            forked: gpu.ctx.new_event(None)?,
            acted: gpu.ctx.new_event(None)?,
            joined: gpu.ctx.new_event(None)?,
            learner: learner.stream.clone(),
            main: gpu.stream.clone(),
            cfg: cfg.clone(),
            env,
            net,
            acting,
            experience,
            market: market.clone(),
            mirror: None,
            mirror_at: None,
        };
        // Buffers were made on both streams: both idle before the first step.
        gpu.ctx.synchronize()?;
        Ok(t)
    }

    /// Whether the update runs on its own stream beside the experience half.
    pub fn overlaps(&self) -> bool {
        !Arc::ptr_eq(&self.learner, self.env.stream())
    }

    /// Run steps eagerly (false) or through the graphs (true, the default). Choose before
    /// the first step: a graph already captured keeps its path.
    pub fn set_graphs(&mut self, on: bool) {
        self.graphs = on;
    }

    /// The reward pipeline's path (fused by default; the unfused chain for verification).
    pub fn set_reward_path(&mut self, path: RewardPath) {
        self.reward_path = path;
    }

    /// The experience step's path (the one launch by default).
    pub fn set_experience_path(&mut self, path: ExperiencePath) {
        self.experience.set_path(path);
    }

    pub fn config(&self) -> &TrainConfig {
        &self.cfg
    }

    /// Where the graph of a kind of step is in its life.
    pub fn graph_phase(&self, kind: StepKind) -> Phase {
        self.slots[kind_index(kind)].phase()
    }

    /// The captured graph's node count for a kind of step, once captured.
    pub fn graph_nodes(&self, kind: StepKind) -> Result<Option<usize>> {
        self.slots[kind_index(kind)].nodes()
    }

    /// One step of `kind`, eagerly, no host read. The update's stream (the learner) forks
    /// from the step's; on it, the first update's sample, gather and gradients; on the
    /// step's stream meanwhile, the experience half. The learner then waits for the
    /// experience half (the acting forward read the parameters Adam writes, the n-step rows
    /// the insert reads) and runs Adam, the priority update, the sync, the other updates
    /// and the insert; the step's stream joins it at the end. Where both are one stream the
    /// hand-overs are nothing and this is the oracle's order with the two independent
    /// halves swapped.
    pub fn step_eager(&mut self, kind: StepKind) -> Result<()> {
        hand_over(&self.forked, &self.main, &self.learner)?;
        let learn = kind == StepKind::Learn;
        if learn {
            self.replay.sample()?;
            self.planted("replay_sample")?;
            self.replay.gather()?;
            self.net
                .gradients(&self.replay.batch, &self.replay.weights)?;
            self.planted("qnet_loss")?;
        }
        self.phase_experience()?;
        for stage in ["state_gather", "acting", "env_step"] {
            self.planted(stage)?;
        }
        self.phase_reward()?;
        self.planted("reward")?;
        hand_over(&self.acted, &self.main, &self.learner)?;
        if learn {
            self.finish_update()?;
            for _ in 1..self.cfg.schedule.updates_per_step {
                self.phase_update()?;
            }
        }
        if kind != StepKind::Fill {
            self.phase_insert()?;
        }
        hand_over(&self.joined, &self.learner, &self.main)
    }

    /// After [`QNet::gradients`]: Adam, the priority update, the sync when due, the update's
    /// metrics.
    fn finish_update(&mut self) -> Result<()> {
        self.net.optimize()?;
        self.planted("optimizer")?;
        self.replay.update_priorities(&self.net.priorities)?;
        self.phase_sync()?;
        self.planted("target_sync")?;
        self.metrics
            .update(self.net.loss_buffer(), self.net.opt.ctl_buffer())
    }

    /// The experience step: epsilon, state gather, acting forward, select, fill, barriers, s'.
    pub fn phase_experience(&mut self) -> Result<()> {
        self.experience
            .step(&mut self.env, &self.net, &mut self.acting)
    }

    /// The reward pipeline, the n-step assembly of the step's N transitions and the step's
    /// metric sums.
    pub fn phase_reward(&mut self) -> Result<()> {
        self.reward
            .step(self.reward_path, &self.env.pnl, self.env.position())?;
        self.transition.assemble(&DeviceStep {
            states: &self.env.states,
            actions: &self.env.actions,
            rewards: &self.reward.reward,
            next_states: &self.env.next_states,
            reasons: &self.env.reason,
        })?;
        self.metrics.step(&StepInputs {
            reward: &self.reward.reward,
            pnl: &self.env.pnl,
            trade_done: &self.reward.done,
            episode_done: &self.env.done,
            q: &self.acting.q,
            epsilon: self.env.epsilon.value(),
        })
    }

    /// The replay insert of the step's N transitions.
    pub fn phase_insert(&mut self) -> Result<()> {
        self.replay.insert(&self.transition.out, self.cfg.env.envs)
    }

    /// One whole update on the learner's stream: sample, gather, gradients, Adam, the
    /// priority update, the target sync when due (Polyak: every update), its metrics.
    pub fn phase_update(&mut self) -> Result<()> {
        self.replay.sample()?;
        self.replay.gather()?;
        self.net
            .gradients(&self.replay.batch, &self.replay.weights)?;
        self.finish_update()
    }

    /// The target sync when due (Polyak: every update).
    pub fn phase_sync(&mut self) -> Result<()> {
        self.net.target_sync_due(self.cfg.schedule.target_period)
    }

    /// One step of `kind` through its graph slot (eager once, captured, then replayed), or
    /// eagerly where graphs are off. The binding holds the kind, every switch that changes
    /// the step's launches (reward path, one-launch experience and its rows per block, TF32)
    /// and the device addresses of the buffers the step reads and writes, so a replay over
    /// anything else is refused rather than run on stale arguments.
    ///
    /// The kind must be one the step can run: nothing is inserted before the n-step windows
    /// complete, and no update samples a replay below one batch (the host counts its own
    /// steps and inserted rows; a replayed graph is never asked).
    pub fn step_kind(&mut self, kind: StepKind) -> Result<()> {
        self.check_kind(kind)?;
        self.steps += 1;
        if kind != StepKind::Fill {
            self.inserted = (self.inserted + self.cfg.env.envs).min(self.cfg.replay.capacity);
        }
        if !self.graphs {
            return self.step_eager(kind);
        }
        let stream = &self.main;
        let envs = self.cfg.env.envs;
        let a = |b: &CudaSlice<f32>| address(stream, b);
        let switches = [
            kind_index(kind) as u64,
            self.reward_path as u64,
            self.experience.in_one_launch(&self.env, &self.net) as u64,
            self.net.act_block_rows(envs).unwrap_or(0) as u64,
            self.net.tf32() as u64,
        ];
        let (params, heads) = self.net.act_addresses();
        let buffers = [
            params,
            heads,
            a(&self.env.pnl),
            a(&self.env.next_states),
            a(&self.reward.reward),
            a(&self.reward.done),
            a(&self.replay.weights),
            a(&self.net.priorities),
            address(stream, self.metrics.totals()),
        ];
        // A fixed array, filled in place: no allocation on the step's path.
        let mut words = [0u64; BINDING_WORDS];
        let parts: [&[u64]; 5] = [
            &switches,
            &self.env.act_env().addresses(),
            &self.acting.addresses(stream),
            &self.transition.addresses(),
            &buffers,
        ];
        if parts.iter().map(|p| p.len()).sum::<usize>() != BINDING_WORDS {
            return Err(Error::Graph {
                name: "train step",
                why: "the binding's parts changed size: update BINDING_WORDS".into(),
            });
        }
        for (w, v) in words.iter_mut().zip(parts.into_iter().flatten()) {
            *w = *v;
        }
        let slot: fn(&mut CudaTrainer) -> &mut GraphSlot = match kind {
            StepKind::Fill => |t| &mut t.slots[0],
            StepKind::Collect => |t| &mut t.slots[1],
            StepKind::Learn => |t| &mut t.slots[2],
        };
        let stream = self.main.clone();
        GraphSlot::run_on(self, slot, &stream, Binding::of(&words), |t| {
            t.step_eager(kind)
        })
    }

    /// Refuse a kind the step cannot run at this point of the run (see [`CudaTrainer::step_kind`]).
    fn check_kind(&self, kind: StepKind) -> Result<()> {
        if kind != StepKind::Fill && !self.transition.emits_at(self.steps) {
            return Err(Error::Shape(format!(
                "step {} of n-step windows of {} steps inserts nothing yet: run StepKind::Fill until step n - 1 (TrainSchedule::kind decides)",
                self.steps, self.cfg.qnet.n_step
            )));
        }
        if kind == StepKind::Learn && self.inserted < self.cfg.replay.batch {
            return Err(Error::Shape(format!(
                "an update at step {} would sample a replay of {} rows for a batch of {}: collect until the replay holds a batch (TrainSchedule::kind decides)",
                self.steps, self.inserted, self.cfg.replay.batch
            )));
        }
        Ok(())
    }

    /// Wait for the steps launched so far. A step ends with the step's stream joining the
    /// learner's, so this covers both; read the stages' buffers (each through its own
    /// stream) only after it.
    pub fn synchronize(&self) -> Result<()> {
        Ok(self.env.stream().synchronize()?)
    }

    /// The host's counts after `steps` steps with `inserted` replay rows (a restore).
    fn set_counters(&mut self, steps: u64, inserted: usize) {
        (self.steps, self.inserted) = (steps, inserted);
        self.mirror_at = None;
    }

    /// Training steps run so far (the host's own count).
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// The metric sums since the last read (a host read; then zeroed).
    pub fn take_metrics(&mut self) -> Result<MetricTotals> {
        self.metrics.take()
    }
}

impl Backend for CudaTrainer {
    type Error = Error;

    fn step(&mut self, kind: StepKind) -> Result<()> {
        self.step_kind(kind)
    }

    fn take_metrics(&mut self) -> Result<MetricTotals> {
        CudaTrainer::take_metrics(self)
    }

    /// The device's state copied into the host mirror (once per step count: a checkpoint
    /// and an evaluation of one step share the copy).
    fn state(&mut self) -> Result<&OracleTrainer> {
        let mut mirror = match self.mirror.take() {
            Some(m) => m,
            None => Box::new(
                OracleTrainer::new(&self.cfg, &self.market)
                    .map_err(|e| Error::Train(e.to_string()))?,
            ),
        };
        if self.mirror_at != Some(self.steps) {
            self.download_into(&mut mirror)?;
            self.mirror_at = Some(self.steps);
        }
        Ok(self.mirror.insert(mirror))
    }
}
