//! The CUDA trainer's state read back into the oracle trainer's fields (comparisons: the
//! oracle steps from the GPU's state; checkpoints). Host reads: never inside a step.

use super::CudaTrainer;
use crate::error::{Error, Result};
use tallyho_oracle::optimizer::AdamState;
use tallyho_oracle::schedule::StepKind;
use tallyho_oracle::trainer::trace::{step_trace, Trace};
use tallyho_oracle::trainer::{OracleTrainer, StepRecord, UpdateRecord};

impl CudaTrainer {
    /// Overwrite `o`'s training state (envs, reward state, n-step ring, replay, both
    /// networks, Adam, the epsilon counter) with the device's; its config, market and
    /// metric sums are left alone. Synchronizes.
    pub fn download_into(&self, o: &mut OracleTrainer) -> Result<()> {
        self.synchronize()?;
        o.env = self.env.download_state()?;
        (o.reward_envs, o.reward_global) = self.reward.download_state()?;
        o.ring = self.transition.download_ring()?;
        o.replay = self.replay.download_state()?;
        (o.online, o.target) = self.net.params()?;
        let s = &self.net.opt;
        let stream = self.env.stream();
        let widen = |v: Vec<f32>| v.into_iter().map(f64::from).collect::<Vec<f64>>();
        o.adam = AdamState {
            m: widen(stream.clone_dtoh(&s.m)?),
            v: widen(stream.clone_dtoh(&s.v)?),
            step: s.ctl()?.step,
        };
        o.epsilon_step = self.env.epsilon.read_step()?;
        Ok(())
    }

    /// The trace of the step of `kind` just run ([`tallyho_oracle::trainer::trace`]): its
    /// state read into `view`, its outputs read back as the oracle's step record. One update
    /// a step: the last update's buffers are the ones a step leaves. Synchronizes.
    pub fn trace(&self, kind: StepKind, view: &mut OracleTrainer) -> Result<Trace> {
        self.download_into(view)?;
        let outcome = self.env.read_outcome()?;
        let emitted = if kind == StepKind::Fill {
            None
        } else {
            Some(self.transition.download_out()?)
        };
        let updates = if kind == StepKind::Learn {
            let (indices, weights) = self.replay.read_sample()?;
            let loss = self.net.read_loss()?;
            vec![UpdateRecord {
                indices,
                weights,
                loss: loss.loss,
                grad_norm: f64::from(self.net.opt.ctl()?.norm),
                td_abs: loss.priorities,
                next_actions: loss.next_actions,
            }]
        } else {
            Vec::new()
        };
        view.last = Some(StepRecord {
            epsilon: self.env.epsilon.read()?,
            states: self.env.read_states()?,
            q: self.net.read_acting(&self.acting)?,
            actions: self.env.read_actions()?,
            pnl: outcome.pnl,
            next_states: outcome.next_states,
            done: outcome.done,
            reason: outcome.reason,
            reward: self.reward.read_out()?,
            emitted,
            updates,
        });
        step_trace(view).ok_or_else(|| Error::Train("no step was traced".into()))
    }

    /// Continue from `o`'s training state after `step` steps (a checkpoint): every state
    /// [`CudaTrainer::download_into`] reads is written back into the same buffers (so the
    /// captured graphs stay valid), the metric sums are zeroed and the host's counters set.
    /// `o` must be of this trainer's config (its `run` aside).
    pub fn restore(&mut self, o: &OracleTrainer, step: u64) -> Result<()> {
        let (mut mine, mut theirs) = (self.cfg.clone(), o.cfg.clone());
        (mine.run, theirs.run) = (Default::default(), Default::default());
        if mine != theirs {
            return Err(Error::Train(
                "the state to restore is of another config: build the trainer from the checkpoint's config".into(),
            ));
        }
        self.synchronize()?;
        self.env.upload_state(&o.env)?;
        self.reward.upload_state(&o.reward_envs, &o.reward_global)?;
        self.transition.upload_ring(&o.ring)?;
        self.replay.upload_state(&o.replay)?;
        self.net.set_params(&o.online, &o.target)?;
        let narrow = |v: &[f64]| v.iter().map(|&x| x as f32).collect::<Vec<f32>>();
        self.net
            .opt
            .set_state(&narrow(&o.adam.m), &narrow(&o.adam.v), o.adam.step)?;
        self.env.epsilon.write_step(o.epsilon_step)?;
        // The uploads went through each stage's stream: all done before the next step.
        self.learner.synchronize()?;
        self.synchronize()?;
        self.take_metrics()?;
        self.set_counters(step, o.replay.ctl.size as usize);
        Ok(())
    }
}
