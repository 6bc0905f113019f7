//! The training loop, written once over a [`Backend`]: the GPU crate's CUDA trainer and this
//! crate's [`OracleTrainer`] (the CPU backend) each implement the step; the loop around it
//! (which step runs what, when metrics are read, what stops a run) is this module's.
//!
//! **The loop** ([`train`]): for step `t = from .. run.steps` (steps counted from 0; a run
//! resumed from a checkpoint of step k starts at `from = k`):
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
//! 2. With `k = t + 1` steps run: the metric sums since the last read are taken
//!    (`backend.take_metrics()`), turned into [`Metrics`] and handed to the observer when
//!    `k` is a multiple of `metrics_every`, a checkpoint is due, or the run ends. A
//!    non-finite loss, reward, Q-value or gradient norm stops the run with
//!    [`TrainError::NonFinite`], after the observer has written that window, so what was
//!    written stays.
//! 3. Then, when `run.eval_every` says or the run ends, the observer evaluates the state;
//!    when `run.checkpoint_every` says, the run ends or the observer asks to stop (Ctrl-C),
//!    it checkpoints it. A checkpoint always closes a metrics window, so a run resumed from
//!    it reads the same windows as the run that went on, and its metric sums start at 0.
//!    After a stop the loop returns ([`Finish::stopped`]).
//!
//! The backend's whole state ([`Backend::state`], as the oracle trainer holds it) is read
//! only where the observer asks for it, so a run without checkpoints never copies it.
//!
//! The step's kind depends on the step index alone, so the host never reads the device to
//! decide it, and both backends run the same kinds in the same order.

mod cpu;
mod metrics;
pub mod trace;

pub use cpu::{Follow, OracleError, OracleTrainer, StepRecord, UpdateRecord};
pub use metrics::{
    trainer_metrics_step, trainer_metrics_update, MetricTotals, Metrics, NonFinite, StepValues,
};

use crate::schedule::StepKind;
use crate::train_config::TrainConfig;

/// One implementation of the training step: the CUDA trainer or the oracle.
pub trait Backend {
    type Error: std::error::Error + Send + Sync + 'static;

    /// One training step of `kind` for all envs (the module doc says what it runs).
    fn step(&mut self, kind: StepKind) -> Result<(), Self::Error>;

    /// The metric sums since the last call (then zeroed).
    fn take_metrics(&mut self) -> Result<MetricTotals, Self::Error>;

    /// The whole training state as the oracle trainer holds it (what a checkpoint saves
    /// and an evaluation reads): the oracle is its own; the CUDA trainer copies the
    /// device's into a host mirror. Waits for the steps launched so far.
    fn state(&mut self) -> Result<&OracleTrainer, Self::Error>;
}

/// What an observer's checkpoint or evaluation reads: the backend's state, fetched only if
/// asked for (a device-to-host copy on the GPU).
pub trait StateSource {
    fn get(&mut self) -> Result<&OracleTrainer, ObserveError>;
}

impl<B: Backend> StateSource for B {
    fn get(&mut self) -> Result<&OracleTrainer, ObserveError> {
        self.state().map_err(|e| Box::new(e) as ObserveError)
    }
}

/// Why an observer failed (writing metrics or a checkpoint, an evaluation).
pub type ObserveError = Box<dyn std::error::Error + Send + Sync>;

/// What the loop reports to as it runs (the command line's progress bar and metrics file).
pub trait Observer {
    /// After every step (cheap: no device access).
    fn on_step(&mut self, _step: u64) {}
    /// After every metrics read.
    fn on_metrics(&mut self, m: &Metrics) -> Result<(), ObserveError>;
    /// After `step` steps where an evaluation is due (the module doc says when).
    fn on_eval(&mut self, _step: u64, _state: &mut dyn StateSource) -> Result<(), ObserveError> {
        Ok(())
    }
    /// After `step` steps where a checkpoint is due (the module doc says when).
    fn on_checkpoint(
        &mut self,
        _step: u64,
        _state: &mut dyn StateSource,
    ) -> Result<(), ObserveError> {
        Ok(())
    }
    /// Whether the run should stop after the step just run (checked after every step).
    fn stop_requested(&self) -> bool {
        false
    }
}

/// An observer that keeps every metrics window (tests).
#[derive(Default)]
pub struct Keep(pub Vec<Metrics>);

impl Observer for Keep {
    fn on_metrics(&mut self, m: &Metrics) -> Result<(), ObserveError> {
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
    #[error("{0}")]
    Observe(ObserveError),
}

/// How a run ended.
#[derive(Clone, Debug, PartialEq)]
pub struct Finish {
    /// Steps run in all (counted from the run's first, a resumed run's included).
    pub step: u64,
    /// Whether the observer stopped it before `run.steps`.
    pub stopped: bool,
    /// The last metrics window.
    pub last: Option<Metrics>,
}

/// Run steps `from .. cfg.run.steps` of `cfg` on `backend` (0 for a new run, k for one
/// resumed from a checkpoint of step k), reporting to `observer`. The module doc is the
/// spec of the loop.
pub fn train<B: Backend, O: Observer>(
    cfg: &TrainConfig,
    from: u64,
    backend: &mut B,
    observer: &mut O,
) -> Result<Finish, TrainError<B::Error>> {
    let (s, run) = (&cfg.schedule, &cfg.run);
    let every = u64::from(s.metrics_every.max(1));
    let mut last = None;
    for t in from..run.steps {
        backend
            .step(s.kind(t, cfg.env.envs, cfg.qnet.n_step, cfg.replay.capacity))
            .map_err(TrainError::Backend)?;
        let step = t + 1;
        observer.on_step(step);
        let stop = observer.stop_requested();
        let checkpoint = stop || run.checkpoint_due(step);
        if step.is_multiple_of(every) || checkpoint || step == run.steps {
            let m = Metrics::of(
                step,
                cfg.env.envs,
                &backend.take_metrics().map_err(TrainError::Backend)?,
            );
            observer.on_metrics(&m).map_err(TrainError::Observe)?;
            if let Some(what) = m.non_finite.first() {
                return Err(TrainError::NonFinite {
                    step,
                    what: what.to_string(),
                });
            }
            last = Some(m);
        }
        if run.eval_due(step) {
            observer
                .on_eval(step, backend)
                .map_err(TrainError::Observe)?;
        }
        if checkpoint {
            observer
                .on_checkpoint(step, backend)
                .map_err(TrainError::Observe)?;
        }
        if stop {
            return Ok(Finish {
                step,
                stopped: true,
                last,
            });
        }
    }
    Ok(Finish {
        step: run.steps.max(from),
        stopped: false,
        last,
    })
}

#[cfg(test)]
mod tests;
