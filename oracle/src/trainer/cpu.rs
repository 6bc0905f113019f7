//! The CPU backend: the training step on the oracle's stages, in the order the module doc of
//! [`crate::trainer`] gives, with the same Philox draws as the GPU (every draw is named by
//! the run seed and device-held counters that both sides advance alike).

use super::metrics::{trainer_metrics_step, trainer_metrics_update, MetricTotals, StepValues};
use super::trace::Fault;
use super::Backend;
use crate::config::ConfigError;
use crate::env::{action_select, barriers, fill_step, state_gather, EnvMarket, EnvState, Split};
use crate::features::Market;
use crate::optimizer::{target_sync, target_sync_every, AdamState};
use crate::qnet::{branch_rows, forward, init_params, update_step_at, QNetError};
use crate::replay::{
    replay_gather, replay_insert, replay_sample, replay_update_priorities, ReplayState, Transitions,
};
use crate::reward::{reward_step, RewardEnvs, RewardGlobal, RewardOut};
use crate::schedule::{schedule_epsilon, StepKind};
use crate::train_config::TrainConfig;
use crate::transition::{TransitionError, TransitionRing};

/// One update as the oracle ran it (the comparison of a GPU trainer reads these).
#[derive(Clone, Debug, PartialEq)]
pub struct UpdateRecord {
    pub indices: Vec<u32>,
    pub weights: Vec<f32>,
    pub loss: f64,
    pub grad_norm: f64,
    /// The priorities' inputs handed to the replay (`|TD|` or the row loss, as f32).
    pub td_abs: Vec<f32>,
    /// The Double DQN actions of the targets: B x K.
    pub next_actions: Vec<i32>,
}

/// Everything one step produced.
#[derive(Clone, Debug, PartialEq)]
pub struct StepRecord {
    pub epsilon: f32,
    pub states: Vec<f32>,
    /// The acting Q-values `[N x sum n_k]` (f64 forward rounded to f32).
    pub q: Vec<f32>,
    pub actions: Vec<i32>,
    pub pnl: Vec<f32>,
    pub next_states: Vec<f32>,
    pub done: Vec<f32>,
    pub reason: Vec<i32>,
    pub reward: RewardOut,
    /// The n-step transitions of the step (None before the first window completes).
    pub emitted: Option<Transitions>,
    pub updates: Vec<UpdateRecord>,
}

/// The GPU's choices for a comparison to follow where a float difference could flip a
/// discrete one: its acting Q-values (so epsilon-greedy picks from them) and each update's
/// Double DQN next actions.
#[derive(Clone, Copy, Debug)]
pub struct Follow<'a> {
    pub q: &'a [f32],
    pub next_actions: &'a [Vec<i32>],
}

/// The whole training state on the CPU.
#[derive(Clone, Debug)]
pub struct OracleTrainer {
    pub cfg: TrainConfig,
    pub market: EnvMarket,
    pub split: Split,
    pub env: EnvState,
    pub reward_envs: RewardEnvs,
    pub reward_global: RewardGlobal,
    pub ring: TransitionRing,
    pub replay: ReplayState,
    pub online: Vec<f32>,
    pub target: Vec<f32>,
    pub adam: AdamState,
    /// The epsilon schedule's step counter (as the device's, saturating).
    pub epsilon_step: u32,
    pub totals: MetricTotals,
    /// The last step's outputs.
    pub last: Option<StepRecord>,
    /// A planted fault (tests of the divergence finder only): None in every run.
    pub fault: Option<Fault>,
}

/// Why the CPU trainer stopped.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum OracleError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    QNet(#[from] QNetError),
    #[error(transparent)]
    Transition(#[from] TransitionError),
}

impl OracleTrainer {
    /// A run of `cfg` on the training split of `market`: envs at their Philox starts, the
    /// network from `qnet.seed` (target = online), Adam and every counter at 0.
    pub fn new(cfg: &TrainConfig, market: &Market) -> Result<Self, OracleError> {
        cfg.validate(market.feature_dim)?;
        let m = EnvMarket::of(market);
        let split = Split::train(market);
        split.validate(m.bars)?;
        let online = init_params(&cfg.qnet);
        let n = cfg.env.envs;
        Ok(OracleTrainer {
            env: EnvState::new(&cfg.env, split),
            reward_envs: RewardEnvs::new(n),
            reward_global: RewardGlobal::new(&cfg.reward),
            ring: TransitionRing::new(
                n,
                cfg.qnet.state_dim,
                cfg.qnet.n_step as usize,
                cfg.qnet.gamma,
            )?,
            replay: ReplayState::new(&cfg.replay),
            target: online.clone(),
            adam: AdamState::new(online.len()),
            online,
            epsilon_step: 0,
            totals: MetricTotals::default(),
            last: None,
            fault: None,
            market: m,
            split,
            cfg: cfg.clone(),
        })
    }

    /// The parts of the training state where `self` and `other` differ (empty: the same state
    /// bit for bit); the config, market, metric sums and last step's record are not state.
    pub fn state_differences(&self, other: &OracleTrainer) -> Vec<&'static str> {
        let parts = [
            ("online", self.online == other.online),
            ("target", self.target == other.target),
            ("adam", self.adam == other.adam),
            ("replay", self.replay == other.replay),
            ("env", self.env == other.env),
            ("ring", self.ring == other.ring),
            ("reward_envs", self.reward_envs == other.reward_envs),
            ("reward_global", self.reward_global == other.reward_global),
            ("epsilon_step", self.epsilon_step == other.epsilon_step),
        ];
        parts.iter().filter(|p| !p.1).map(|p| p.0).collect()
    }

    /// The acting Q-values of `states` by the online network: the f64 forward, rounded to f32
    /// in the GPU's row layout.
    pub fn acting_q(&self, states: &[f32]) -> Vec<f32> {
        let f = forward(&self.cfg.qnet, &self.online, states);
        branch_rows(&self.cfg.qnet, &f.q, self.env.len(), 1)
            .into_iter()
            .map(|v| v as f32)
            .collect()
    }

    /// One training step of `kind`, following `follow`'s choices where given (a comparison
    /// with the GPU; the run itself passes None).
    pub fn step_with(
        &mut self,
        kind: StepKind,
        follow: Option<Follow>,
    ) -> Result<&StepRecord, OracleError> {
        let cfg = self.cfg.clone();
        let t = u64::from(self.epsilon_step);
        let epsilon = schedule_epsilon(&cfg.schedule.epsilon, self.epsilon_step);
        self.epsilon_step = self.epsilon_step.saturating_add(1);
        let mut states = state_gather(&cfg.env, &self.market, &self.env);
        self.planted(t, "state_gather", &mut states);
        let mut q = match follow {
            Some(f) => f.q.to_vec(),
            None => self.acting_q(&states),
        };
        self.planted(t, "acting", &mut q);
        let actions = action_select(cfg.env.seed, &cfg.qnet.branches, epsilon, &q, &self.env);
        let fills = fill_step(&cfg.env, &self.market, &mut self.env, &actions);
        let mut outcome = barriers(
            &cfg.env,
            &self.market,
            self.split,
            &mut self.env,
            &fills.net_before,
        );
        self.planted(t, "env_step", &mut outcome.pnl);
        let mut reward = reward_step(
            &cfg.reward,
            &outcome.pnl,
            &self.env.position,
            &mut self.reward_envs,
            &mut self.reward_global,
        );
        self.planted(t, "reward", &mut reward.reward);
        let emitted = self.ring.push(
            &states,
            &actions,
            &reward.reward,
            &outcome.next_states,
            &outcome.reason,
        )?;
        let mut updates = Vec::new();
        if kind == StepKind::Learn {
            for u in 0..cfg.schedule.updates_per_step as usize {
                let next = follow
                    .and_then(|f| f.next_actions.get(u))
                    .map(Vec::as_slice);
                updates.push(self.update(t, next)?);
            }
        }
        if kind != StepKind::Fill {
            if let Some(t) = &emitted {
                replay_insert(&mut self.replay, t);
            }
        }
        self.accumulate(epsilon, &q, &outcome.pnl, &outcome.done, &reward, &updates);
        self.last = Some(StepRecord {
            epsilon,
            states,
            q,
            actions,
            pnl: outcome.pnl,
            next_states: outcome.next_states,
            done: outcome.done,
            reason: outcome.reason,
            reward,
            emitted,
            updates,
        });
        Ok(self.last.as_ref().expect("set just above"))
    }

    /// One update: sample, gather, the Double DQN update (at the next actions `next` where
    /// given), the priority update, the target sync when due.
    fn update(&mut self, t: u64, next: Option<&[i32]>) -> Result<UpdateRecord, OracleError> {
        let sample = replay_sample(&mut self.replay);
        let batch = replay_gather(&self.replay, &sample.indices);
        let mut weights: Vec<f32> = sample.weights.iter().map(|&w| w as f32).collect();
        self.planted(t, "replay_sample", &mut weights);
        let u = update_step_at(
            &self.cfg.qnet,
            &mut self.online,
            &self.target,
            &mut self.adam,
            &batch,
            &weights,
            next,
        )?;
        let mut online = std::mem::take(&mut self.online);
        self.planted(t, "optimizer", &mut online);
        self.online = online;
        let mut td_abs: Vec<f32> = u.priorities.iter().map(|&p| p as f32).collect();
        self.planted(t, "qnet_loss", &mut td_abs);
        replay_update_priorities(&mut self.replay, &sample.indices, &td_abs);
        match self.cfg.qnet.polyak_tau {
            Some(tau) => target_sync(&self.online, &mut self.target, Some(tau)),
            None => target_sync_every(
                self.adam.step,
                self.cfg.schedule.target_period,
                &self.online,
                &mut self.target,
            ),
        }
        let mut target = std::mem::take(&mut self.target);
        self.planted(t, "target_sync", &mut target);
        self.target = target;
        Ok(UpdateRecord {
            indices: sample.indices,
            weights,
            loss: u.loss,
            grad_norm: u.grad_norm,
            td_abs,
            next_actions: u.next_actions,
        })
    }

    /// Apply the planted fault, if it is `stage`'s and due at step `t`, to `out`.
    fn planted(&self, t: u64, stage: &str, out: &mut [f32]) {
        if let Some(f) = &self.fault {
            f.apply(t, stage, out);
        }
    }

    /// The step's metric sums ([`trainer_metrics_step`], then [`trainer_metrics_update`]
    /// per update).
    fn accumulate(
        &mut self,
        epsilon: f32,
        q: &[f32],
        pnl: &[f32],
        done: &[f32],
        reward: &RewardOut,
        updates: &[UpdateRecord],
    ) {
        let step = StepValues {
            reward: &reward.reward,
            pnl,
            trade_done: &reward.done,
            episode_done: done,
            q,
            branches: &self.cfg.qnet.branches,
            epsilon,
        };
        trainer_metrics_step(&mut self.totals, &step);
        for u in updates {
            trainer_metrics_update(&mut self.totals, u.loss, u.grad_norm);
        }
    }
}

impl Backend for OracleTrainer {
    type Error = OracleError;

    fn step(&mut self, kind: StepKind) -> Result<(), OracleError> {
        self.step_with(kind, None).map(|_| ())
    }

    fn take_metrics(&mut self) -> Result<MetricTotals, OracleError> {
        Ok(std::mem::take(&mut self.totals))
    }

    fn state(&mut self) -> Result<&OracleTrainer, OracleError> {
        Ok(self)
    }
}
