//! The training loop, written once over a [`Backend`]: the GPU crate's CUDA trainer and this
//! crate's [`OracleTrainer`] (the CPU backend) each implement the step; the loop around it
//! (which step runs what, when metrics are read, what stops a run) is this module's.
//!
//! **The loop** ([`train`]): for step `t = 0 .. steps`:
//! 1. `backend.step(kind)` with `kind = schedule.kind(t, ...)` ([`StepKind`]): the step is
//!    the experience step (epsilon from its schedule, state gather, acting forward,
//!    epsilon-greedy select, fill, barriers, auto-reset; s' kept from before the reset),
//!    the reward pipeline on the step's PnL and positions, the n-step assembly of one
//!    transition per env; then for `Learn` U updates (sample, gather, importance weights,
//!    the three forwards, the loss, backward, clip, Adam, the priority update), each followed
//!    by the target sync when due (Polyak after every update, else a copy when the update
//!    count is a multiple of `target_period`); then unless `Fill` the replay insert of the
//!    step's N transitions.
//!
//!    So the updates of step t learn from the replay as it was before step t (its newest
//!    rows are step t - 1's), and the first one's gradient is taken at the parameters step t
//!    acted with. That order is what lets the CUDA step run the experience half and the
//!    first update's sample, gather, forwards, loss and backward side by side (they share
//!    no buffer it writes), joining before Adam writes the parameters and the insert writes
//!    the replay; with the oracle defining it, the results are the same either way.
//! 2. Every `metrics_every` steps and after the last: `backend.take_metrics()` (sums since
//!    the last read), turned into [`Metrics`] and handed to the observer. A non-finite loss,
//!    reward, Q-value or gradient norm stops the run with [`TrainError::NonFinite`], after the
//!    observer has written that window, so what was written stays.
//!
//! The step's kind depends on the step index alone, so the host never reads the device to
//! decide it, and both backends run the same kinds in the same order.

mod cpu;
mod metrics;

pub use cpu::{Follow, OracleError, OracleTrainer, StepRecord, UpdateRecord};
pub use metrics::{
    trainer_metrics_step, trainer_metrics_update, MetricTotals, Metrics, NonFinite, StepValues,
};

use crate::schedule::StepKind;
use crate::train_config::TrainConfig;

/// One implementation of the training step: the CUDA trainer or the oracle.
pub trait Backend {
    type Error: std::error::Error + 'static;

    /// One training step of `kind` for all envs (the module doc says what it runs).
    fn step(&mut self, kind: StepKind) -> Result<(), Self::Error>;

    /// The metric sums since the last call (then zeroed).
    fn take_metrics(&mut self) -> Result<MetricTotals, Self::Error>;
}

/// What the loop reports to as it runs (the command line's progress bar and metrics file).
pub trait Observer {
    /// After every step (cheap: no device access).
    fn on_step(&mut self, _step: u64) {}
    /// After every metrics read.
    fn on_metrics(&mut self, m: &Metrics) -> std::io::Result<()>;
}

/// An observer that keeps every metrics window (tests).
#[derive(Default)]
pub struct Keep(pub Vec<Metrics>);

impl Observer for Keep {
    fn on_metrics(&mut self, m: &Metrics) -> std::io::Result<()> {
        self.0.push(m.clone());
        Ok(())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TrainError<E: std::error::Error + 'static> {
    #[error(transparent)]
    Backend(E),
    #[error("training diverged at step {step}: {what} became non-finite; lower qnet.lr or qnet.grad_clip, or check the data (the metrics up to here are written)")]
    NonFinite { step: u64, what: String },
    #[error("writing the metrics failed: {0}")]
    Observe(#[from] std::io::Error),
}

/// Run `steps` training steps of `cfg` on `backend`, reporting to `observer`; returns the
/// last metrics window. The module doc is the spec of the loop.
pub fn train<B: Backend, O: Observer>(
    cfg: &TrainConfig,
    steps: u64,
    backend: &mut B,
    observer: &mut O,
) -> Result<Option<Metrics>, TrainError<B::Error>> {
    let s = &cfg.schedule;
    let every = u64::from(s.metrics_every.max(1));
    let mut last = None;
    let mut since = 0u64;
    for t in 0..steps {
        backend
            .step(s.kind(t, cfg.env.envs, cfg.qnet.n_step, cfg.replay.capacity))
            .map_err(TrainError::Backend)?;
        observer.on_step(t + 1);
        since += 1;
        if since == every || t + 1 == steps {
            let m = Metrics::of(
                t + 1,
                cfg.env.envs,
                &backend.take_metrics().map_err(TrainError::Backend)?,
            );
            observer.on_metrics(&m)?;
            since = 0;
            if let Some(what) = m.non_finite.first() {
                return Err(TrainError::NonFinite {
                    step: t + 1,
                    what: what.to_string(),
                });
            }
            last = Some(m);
        }
    }
    Ok(last)
}

#[cfg(test)]
mod tests;
