//! **One update** ([`update_step`]): forward s (online), s' (online and target), the loss with
//! Double DQN targets (van Hasselt et al. 2016, "Deep Reinforcement Learning with Double
//! Q-learning"), backward, global-norm clipping, Adam (Kingma and Ba 2015). The target
//! network follows by [`crate::optimizer::target_sync`].

use super::backward::backward;
use super::forward::forward;
use super::layout::param_count;
use super::loss::{loss_with_next_actions, next_actions};
use super::QNetConfig;
use crate::config::ConfigError;
use crate::optimizer::{adam_step, clip_grads, grad_norm, AdamState};
use crate::replay::Transitions;

/// A batch or buffer that does not fit the config.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum QNetError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("the batch is empty: pass at least one transition")]
    EmptyBatch,
    #[error(
        "{name} has {got} values, expected {want} ({shape}): size it from the batch and the config"
    )]
    Length {
        name: &'static str,
        got: usize,
        want: usize,
        shape: String,
    },
    #[error("action {value} at row {row}, branch {branch} is outside [0, {choices}): each action indexes its branch's {choices} choices")]
    Action {
        row: usize,
        branch: usize,
        value: i32,
        choices: usize,
    },
}

fn check_len(name: &'static str, got: usize, want: usize, shape: String) -> Result<(), QNetError> {
    if got == want {
        Ok(())
    } else {
        Err(QNetError::Length {
            name,
            got,
            want,
            shape,
        })
    }
}

/// Checks a batch against a config: B = `rewards.len()` >= 1, states and next states B x S,
/// actions B x K with each in `[0, n_k)`, discounts and weights B. Returns B.
pub fn check_batch(
    cfg: &QNetConfig,
    batch: &Transitions,
    weights: &[f32],
) -> Result<usize, QNetError> {
    let (b, s, kk) = (batch.rewards.len(), cfg.state_dim, cfg.num_branches());
    if b == 0 {
        return Err(QNetError::EmptyBatch);
    }
    check_len(
        "states",
        batch.states.len(),
        b * s,
        format!("batch {b} x state_dim {s}"),
    )?;
    check_len(
        "next_states",
        batch.next_states.len(),
        b * s,
        format!("batch {b} x state_dim {s}"),
    )?;
    check_len(
        "actions",
        batch.actions.len(),
        b * kk,
        format!("batch {b} x {kk} branches"),
    )?;
    check_len("discounts", batch.discounts.len(), b, format!("batch {b}"))?;
    check_len("weights", weights.len(), b, format!("batch {b}"))?;
    check_actions(cfg, &batch.actions)?;
    Ok(b)
}

/// Every action of `actions` (rows of K) within its branch's choices.
fn check_actions(cfg: &QNetConfig, actions: &[i32]) -> Result<(), QNetError> {
    for (row, acts) in actions.chunks_exact(cfg.num_branches()).enumerate() {
        for (branch, (&value, &choices)) in acts.iter().zip(&cfg.branches).enumerate() {
            if value < 0 || value as usize >= choices {
                return Err(QNetError::Action {
                    row,
                    branch,
                    value,
                    choices,
                });
            }
        }
    }
    Ok(())
}

/// What one update reports.
#[derive(Clone, Debug, PartialEq)]
pub struct Update {
    /// The batch loss before the update.
    pub loss: f64,
    /// New replay priorities, in batch order (see [`Loss::replay_sample_priority`](super::Loss::replay_sample_priority)).
    pub priorities: Vec<f64>,
    /// Global gradient norm before clipping.
    pub grad_norm: f64,
    /// The clip scale applied (1 when the norm was within `grad_clip`).
    pub clip_scale: f64,
    /// The Double DQN actions the targets were taken at (given, or the online argmax): B x K.
    pub next_actions: Vec<i32>,
}

/// One full update of the online parameters: forward s (online), s' (online and target),
/// [`loss`], [`backward`], [`clip_grads`] at `grad_clip`, [`adam_step`] on the parameters
/// widened to f64, each rounded once back to f32 (the buffer the GPU holds). The target
/// parameters are not changed (see [`target_sync`](crate::optimizer::target_sync)). Validates the config, the batch and the
/// buffer lengths first; on error nothing is changed.
pub fn update_step(
    cfg: &QNetConfig,
    online: &mut [f32],
    target: &[f32],
    adam: &mut AdamState,
    batch: &Transitions,
    weights: &[f32],
) -> Result<Update, QNetError> {
    update_step_at(cfg, online, target, adam, batch, weights, None)
}

/// [`update_step`] with the Double DQN actions `next` (B x K) where given, instead of the
/// argmax of the online network's s' forward: a comparison follows the GPU's choice where
/// a near tie let float rounding decide it. `next` must be B x K valid actions.
pub fn update_step_at(
    cfg: &QNetConfig,
    online: &mut [f32],
    target: &[f32],
    adam: &mut AdamState,
    batch: &Transitions,
    weights: &[f32],
    next: Option<&[i32]>,
) -> Result<Update, QNetError> {
    cfg.validate()?;
    check_batch(cfg, batch, weights)?;
    let n = param_count(cfg);
    let shape = || format!("param_count {n}");
    check_len("online parameters", online.len(), n, shape())?;
    check_len("target parameters", target.len(), n, shape())?;
    check_len("Adam m", adam.m.len(), n, shape())?;
    check_len("Adam v", adam.v.len(), n, shape())?;

    let fwd_s = forward(cfg, online, &batch.states);
    let online_s2 = forward(cfg, online, &batch.next_states);
    let target_s2 = forward(cfg, target, &batch.next_states);
    let next = match next {
        Some(a) => {
            let b = batch.rewards.len();
            check_len(
                "next actions",
                a.len(),
                b * cfg.num_branches(),
                format!("batch {b} x {} branches", cfg.num_branches()),
            )?;
            check_actions(cfg, a)?;
            a.to_vec()
        }
        None => next_actions(cfg, &online_s2),
    };
    let l = loss_with_next_actions(
        cfg,
        &fwd_s,
        &target_s2,
        &next,
        &batch.actions,
        &batch.rewards,
        &batch.discounts,
        weights,
    );
    let mut g = backward(cfg, online, &fwd_s, &l);
    let norm = grad_norm(&g);
    let clip_scale = clip_grads(&mut g, f64::from(cfg.grad_clip));
    let mut p: Vec<f64> = online.iter().map(|&x| f64::from(x)).collect();
    adam_step(cfg, &mut p, &g, adam);
    for (o, &x) in online.iter_mut().zip(&p) {
        *o = x as f32;
    }
    Ok(Update {
        loss: l.loss,
        priorities: l.replay_sample_priority,
        grad_norm: norm,
        clip_scale,
        next_actions: next,
    })
}
