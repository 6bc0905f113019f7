//! The training metrics: sums the step accumulates (in device memory on the GPU, the
//! `trainer_metrics` kernel's block), read every K steps and turned into per-window means.

use serde::Serialize;

/// Sums over the steps since the last read, as the device holds them: [`MetricTotals::WORDS`]
/// doubles in field order (cuda/trainer_metrics.cu mirrors it).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MetricTotals {
    pub steps: f64,
    /// Sum over env steps of the transition reward the reward pipeline made.
    pub reward: f64,
    /// Sum over env steps of the net realized PnL (fills and exits, after commissions).
    pub pnl: f64,
    /// Trades closed (the reward pipeline's trade-closed flags).
    pub trades: f64,
    /// Episodes ended (take-profit, stop-loss, time limit, end of data).
    pub episodes: f64,
    /// Sum over env steps of the greedy value estimate: the mean over branches of
    /// `max_j Q_k(s, j)` of the acting forward.
    pub q: f64,
    pub updates: f64,
    /// Sum over updates of the batch loss.
    pub loss: f64,
    /// Sum over updates of the global gradient norm before clipping.
    pub grad_norm: f64,
    /// Epsilon of the last step.
    pub epsilon: f64,
    /// [`NonFinite`] bits seen in the window.
    pub flags: f64,
}

impl MetricTotals {
    pub const WORDS: usize = 11;

    pub fn to_words(&self) -> [f64; Self::WORDS] {
        [
            self.steps,
            self.reward,
            self.pnl,
            self.trades,
            self.episodes,
            self.q,
            self.updates,
            self.loss,
            self.grad_norm,
            self.epsilon,
            self.flags,
        ]
    }

    pub fn of_words(w: &[f64; Self::WORDS]) -> Self {
        MetricTotals {
            steps: w[0],
            reward: w[1],
            pnl: w[2],
            trades: w[3],
            episodes: w[4],
            q: w[5],
            updates: w[6],
            loss: w[7],
            grad_norm: w[8],
            epsilon: w[9],
            flags: w[10],
        }
    }
}

/// Which values became non-finite (bits of [`MetricTotals::flags`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NonFinite;

impl NonFinite {
    pub const LOSS: u32 = 1;
    pub const GRAD_NORM: u32 = 2;
    pub const REWARD: u32 = 4;
    pub const Q: u32 = 8;

    /// The names of the bits set in `flags`.
    pub fn names(flags: u32) -> Vec<&'static str> {
        [
            (Self::LOSS, "the loss"),
            (Self::GRAD_NORM, "the gradient norm"),
            (Self::REWARD, "the reward"),
            (Self::Q, "a Q-value"),
        ]
        .into_iter()
        .filter(|(bit, _)| flags & bit != 0)
        .map(|(_, name)| name)
        .collect()
    }
}

/// One metrics window, as `metrics.jsonl` holds it (one object a line).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Metrics {
    /// Training steps done so far.
    pub step: u64,
    /// Transitions collected so far (envs x steps).
    pub transitions: u64,
    /// Steps in this window.
    pub window_steps: u64,
    pub updates: u64,
    /// Mean batch loss over the window's updates (None before updates start).
    pub loss: Option<f64>,
    /// Mean transition reward per env step.
    pub reward: f64,
    /// Net realized PnL of the window, summed over envs (account currency).
    pub pnl: f64,
    pub trades: u64,
    pub episodes: u64,
    pub epsilon: f64,
    /// Mean global gradient norm over the window's updates.
    pub grad_norm: Option<f64>,
    /// Mean greedy value estimate of the acting states.
    pub mean_q: f64,
    /// Names of the values that became non-finite (empty in a healthy run).
    pub non_finite: Vec<&'static str>,
}

impl Metrics {
    /// The window ending at `step` of `envs` envs from its sums.
    pub fn of(step: u64, envs: usize, t: &MetricTotals) -> Metrics {
        let env_steps = (t.steps * envs as f64).max(1.0);
        let per_update = |x: f64| {
            if t.updates > 0.0 {
                Some(x / t.updates)
            } else {
                None
            }
        };
        Metrics {
            step,
            transitions: step * envs as u64,
            window_steps: t.steps as u64,
            updates: t.updates as u64,
            loss: per_update(t.loss),
            reward: t.reward / env_steps,
            pnl: t.pnl,
            trades: t.trades as u64,
            episodes: t.episodes as u64,
            epsilon: t.epsilon,
            grad_norm: per_update(t.grad_norm),
            mean_q: t.q / env_steps,
            non_finite: NonFinite::names(t.flags as u32),
        }
    }
}
