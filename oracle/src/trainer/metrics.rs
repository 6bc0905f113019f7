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

/// What one step's metric sums read: per env the transition reward, the net realized PnL,
/// the trade-closed and episode-ended flags (0 or 1) and the acting Q-values `[N x sum n_k]`
/// of `branches`; the step's epsilon.
#[derive(Clone, Copy, Debug)]
pub struct StepValues<'a> {
    pub reward: &'a [f32],
    pub pnl: &'a [f32],
    pub trade_done: &'a [f32],
    pub episode_done: &'a [f32],
    pub q: &'a [f32],
    pub branches: &'a [usize],
    pub epsilon: f32,
}

/// **trainer_metrics_step** (cuda/trainer_metrics.cu): `steps += 1`; reward, PnL, trades and
/// episodes summed over the envs in double; the greedy value estimate `(1/K) sum_k max_j
/// Q_k(s, j)` (in double; a NaN never wins the max) summed over the envs; `epsilon` = the
/// step's; flags |= REWARD where a reward is not finite, Q where a Q-value is not. The
/// kernel sums per thread and then in a fixed tree, the oracle in env order: the sums agree
/// to double rounding.
pub fn trainer_metrics_step(t: &mut MetricTotals, v: &StepValues) {
    let mut flags = t.flags as u32;
    t.steps += 1.0;
    t.epsilon = f64::from(v.epsilon);
    let width: usize = v.branches.iter().sum();
    for i in 0..v.pnl.len() {
        let r = v.reward[i];
        t.reward += f64::from(r);
        t.pnl += f64::from(v.pnl[i]);
        t.trades += f64::from(v.trade_done[i]);
        t.episodes += f64::from(v.episode_done[i]);
        let row = &v.q[i * width..(i + 1) * width];
        let (mut off, mut greedy) = (0, 0.0f64);
        for &nk in v.branches {
            let mut best = f64::NEG_INFINITY;
            for &x in &row[off..off + nk] {
                let x = f64::from(x);
                if !x.is_finite() {
                    flags |= NonFinite::Q;
                }
                if x > best {
                    best = x;
                }
            }
            greedy += best;
            off += nk;
        }
        t.q += greedy / v.branches.len() as f64;
        if !r.is_finite() {
            flags |= NonFinite::REWARD;
        }
    }
    t.flags = f64::from(flags);
}

/// **trainer_metrics_update**: `updates += 1`, the batch loss and the gradient norm (before
/// clipping) added; flags |= LOSS or GRAD_NORM where one is not finite.
pub fn trainer_metrics_update(t: &mut MetricTotals, loss: f64, grad_norm: f64) {
    let mut flags = t.flags as u32;
    t.updates += 1.0;
    t.loss += loss;
    t.grad_norm += grad_norm;
    if !loss.is_finite() {
        flags |= NonFinite::LOSS;
    }
    if !grad_norm.is_finite() {
        flags |= NonFinite::GRAD_NORM;
    }
    t.flags = f64::from(flags);
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
