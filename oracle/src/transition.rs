//! n-step transition assembly per env (`transition_assemble`): the spec of
//! cuda/transition_assemble.cu and its launcher in src/transition.rs. n-step returns after
//! Sutton and Barto 2018, ch. 7; time limits as truncations after Pardo et al. 2018, "Time
//! Limits in Reinforcement Learning".
//!
//! Each env pushes one step per call. At its step t (0-based count of that env's pushes) the
//! stage receives `s_t` [S], `a_t` [K = 3, i32], `r_t` (the reward pipeline's reward), `s'_t`
//! [S] (the state after the action, before any auto-reset) and the env's done reason `c_t`:
//! 0 none; [`TAKE_PROFIT`] and [`STOP_LOSS`] are TERMINAL; [`TIME_LIMIT`] and [`END_OF_DATA`]
//! are TRUNCATIONS.
//!
//! The window starting at step i covers steps `i..=j`, where j is the first step `>= i` at
//! which the episode ended (`c_j != 0`), capped at `i + n - 1`; `k = j - i + 1` (1..=n). Its
//! transition is
//!
//! ```text
//! s = s_i,  a = a_i,  s' = s'_j,
//! G = sum_{m=0}^{k-1} gamma^m r_{i+m}     (float32, by Horner from the last back:
//!                                          G = r_j; G = r_m + gamma * G for m = j-1 down to i,
//!                                          a multiply then an add, each rounded: no FMA)
//! discount = 0                           if c_j is terminal (no bootstrap),
//!            gamma^k                     otherwise, truncations included (the target
//!                                          bootstraps from s'_j): 1.0f multiplied by gamma k
//!                                          times, each product rounded to float32.
//! ```
//!
//! At every step `t >= n - 1` the stage emits exactly one transition per env: the window
//! starting at `i = t - n + 1`, whose content is known by then (`j <= i + n - 1 = t`). So every
//! step emits N rows (row e is env e's), no window straddles an episode end, and after the
//! first `n - 1` steps every step starts exactly one emitted window: the first `n - 1` steps
//! of a new episode, which cannot emit their own windows yet, are the steps that emit the
//! previous episode's windows cut short by its end. For `t < n - 1` nothing is emitted. With
//! `n = 1` the transition is `(s_t, a_t, r_t, s'_t, terminal ? 0 : gamma)`.
//!
//! State: a ring of each env's last n steps (s, a, r, s', reason) and its push count. Step t
//! is written at ring slot `t mod n` before the window is assembled. The count is stored
//! folded into `[0, 2n)` (`t` while `t < n`, then `n + t mod n`): it gives the same slot and
//! the same emission rule as t and never wraps.

use crate::action::BRANCH_COUNT;
use crate::config::{require, ConfigError};
use crate::env::{END_OF_DATA, STOP_LOSS, TAKE_PROFIT, TIME_LIMIT};
use crate::replay::Transitions;

/// The longest n-step window a ring holds (its memory grows with n: `n x N x (2S + 5)` words).
pub const MAX_N_STEP: usize = 256;

/// n and gamma of the n-step returns.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TransitionConfig {
    /// Steps n of a window, 1..=[`MAX_N_STEP`].
    pub n: usize,
    /// Discount per step, in [0, 1].
    pub gamma: f32,
}

impl TransitionConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.n == 0 {
            return Err(ConfigError::Zero { name: "n_step" });
        }
        #[rustfmt::skip]
        require(self.n <= MAX_N_STEP, "n_step", self.n as f64, "[1, 256]", "use a window of at most 256 steps (n-step returns use a few, e.g. 3)")?;
        require(
            (0.0..=1.0).contains(&self.gamma),
            "gamma",
            self.gamma,
            "[0, 1]",
            "use a discount such as 0.99",
        )
    }
}

/// Step inputs that do not fit the ring.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TransitionError {
    #[error("{name} has {got} values, expected {want} ({shape}): pass one step of every env")]
    Length {
        name: &'static str,
        got: usize,
        want: usize,
        shape: String,
    },
    #[error("done reason {value} of env {env} is not one of 0 (none), 1 (take-profit), 2 (stop-loss), 3 (time limit), 4 (end of data): pass the env step's reasons")]
    Reason { env: usize, value: i32 },
    #[error("push count {count} of env {env} is not {first} (env 0's) or is past the folded range [0, {bound}): every env pushes one step per call; rebuild the ring with TransitionRing::new")]
    Count {
        env: usize,
        count: u32,
        first: u32,
        bound: u32,
    },
}

/// A done reason that ends the episode with no value after it: take-profit or stop-loss.
pub fn is_terminal(reason: i32) -> bool {
    reason == TAKE_PROFIT || reason == STOP_LOSS
}

/// A done reason that ends the episode, terminal or truncated.
pub fn ends_episode(reason: i32) -> bool {
    reason != 0
}

/// The length k of the window whose steps have done reasons `reasons[0..]` (at least
/// `min(n, until the first end)` of them): 1 + the index of the first end, capped at n.
pub fn window_len(reasons: &[i32], n: usize) -> usize {
    reasons
        .iter()
        .take(n)
        .position(|&c| ends_episode(c))
        .map_or(n.min(reasons.len()), |j| j + 1)
}

/// The return of a window's k rewards, `sum_m gamma^m r_m`, by Horner from the last back in
/// float32 (a multiply, then an add, each rounded). Empty: 0.
pub fn window_return(rewards: &[f32], gamma: f32) -> f32 {
    match rewards.split_last() {
        None => 0.0,
        Some((&last, rest)) => rest.iter().rev().fold(last, |g, &r| r + gamma * g),
    }
}

/// The bootstrap discount of a window of k steps whose last step has done reason `last`: 0 if
/// terminal, else gamma^k as k float32 products of 1.0 by gamma.
pub fn window_discount(k: usize, last: i32, gamma: f32) -> f32 {
    if is_terminal(last) {
        0.0
    } else {
        (0..k).fold(1.0f32, |d, _| d * gamma)
    }
}

/// One window's transition, from its steps in order (`rewards`, `reasons` of length >= k).
#[derive(Clone, Debug, PartialEq)]
pub struct Window {
    /// Steps k of the window.
    pub k: usize,
    /// G, [`window_return`] of its k rewards.
    pub ret: f32,
    /// [`window_discount`] of its last step.
    pub discount: f32,
}

/// The window starting at the first of `rewards` / `reasons` (steps i, i + 1, ...), n at most.
pub fn window(rewards: &[f32], reasons: &[i32], n: usize, gamma: f32) -> Window {
    let k = window_len(reasons, n).min(rewards.len());
    let last = k.checked_sub(1).map_or(0, |j| reasons[j]);
    Window {
        k,
        ret: window_return(&rewards[..k], gamma),
        discount: window_discount(k, last, gamma),
    }
}

/// The ring of every env's last n steps and push counts, in the device's layout: slot-major,
/// step t of env e at slot `t mod n`, element `(slot N + e) S + c` of `states` and
/// `next_states`, `(slot N + e) 3 + b` of `actions`, `slot N + e` of `rewards` and `reasons`.
#[derive(Clone, Debug, PartialEq)]
pub struct TransitionRing {
    pub cfg: TransitionConfig,
    /// Envs N.
    pub envs: usize,
    /// State width S.
    pub state_dim: usize,
    /// s of the ring's steps: n x N x S.
    pub states: Vec<f32>,
    /// s' of the ring's steps: n x N x S.
    pub next_states: Vec<f32>,
    /// a of the ring's steps: n x N x 3.
    pub actions: Vec<i32>,
    /// r of the ring's steps: n x N.
    pub rewards: Vec<f32>,
    /// Done reasons of the ring's steps: n x N.
    pub reasons: Vec<i32>,
    /// Each env's push count, folded into [0, 2n) (see the module doc): N.
    pub counts: Vec<u32>,
}

impl TransitionRing {
    /// An empty ring of `envs` envs of state width `state_dim`, windows of `n` steps, discount
    /// `gamma`.
    pub fn new(
        envs: usize,
        state_dim: usize,
        n: usize,
        gamma: f32,
    ) -> Result<TransitionRing, ConfigError> {
        let cfg = TransitionConfig { n, gamma };
        cfg.validate()?;
        for (name, v) in [("envs", envs), ("state_dim", state_dim)] {
            if v == 0 {
                return Err(ConfigError::Zero { name });
            }
        }
        let (rows, s) = (n * envs, state_dim);
        Ok(TransitionRing {
            cfg,
            envs,
            state_dim,
            states: vec![0.0; rows * s],
            next_states: vec![0.0; rows * s],
            actions: vec![0; rows * BRANCH_COUNT],
            rewards: vec![0.0; rows],
            reasons: vec![0; rows],
            counts: vec![0; envs],
        })
    }

    /// Push every env's step t and return the N transitions of the windows starting at
    /// `t - n + 1`, or None while `t < n - 1` ([`transition_assemble`]).
    pub fn push(
        &mut self,
        states: &[f32],
        actions: &[i32],
        rewards: &[f32],
        next_states: &[f32],
        reasons: &[i32],
    ) -> Result<Option<Transitions>, TransitionError> {
        transition_assemble(
            self,
            &StepInputs {
                states,
                actions,
                rewards,
                next_states,
                reasons,
            },
        )
    }

    /// Every buffer's length against n, N and S (the fields are public: a ring built by hand
    /// or read back is checked before use).
    pub fn check(&self) -> Result<(), TransitionError> {
        let (n, e, s) = (self.cfg.n, self.envs, self.state_dim);
        let lens = [
            ("ring states", self.states.len(), n * e * s),
            ("ring next_states", self.next_states.len(), n * e * s),
            ("ring actions", self.actions.len(), n * e * BRANCH_COUNT),
            ("ring rewards", self.rewards.len(), n * e),
            ("ring reasons", self.reasons.len(), n * e),
            ("ring counts", self.counts.len(), e),
        ];
        for (name, got, want) in lens {
            if got != want || n == 0 {
                return Err(TransitionError::Length {
                    name,
                    got,
                    want,
                    shape: format!("n {n} x {e} envs x state width {s}"),
                });
            }
        }
        Ok(())
    }

    /// The push count that follows `c` in the folded count: `c + 1`, back to n from 2n.
    pub fn next_count(&self, c: u32) -> u32 {
        let n = self.cfg.n as u32;
        if c.saturating_add(1) >= 2 * n {
            n
        } else {
            c + 1
        }
    }
}

/// One step of every env, as the stage takes it (row e is env e's).
#[derive(Clone, Copy, Debug)]
pub struct StepInputs<'a> {
    /// s_t: N x S.
    pub states: &'a [f32],
    /// a_t: N x 3.
    pub actions: &'a [i32],
    /// r_t: N.
    pub rewards: &'a [f32],
    /// s'_t: N x S.
    pub next_states: &'a [f32],
    /// Done reasons: N, each in 0..=4.
    pub reasons: &'a [i32],
}

impl StepInputs<'_> {
    /// Lengths against N envs of width S, and every reason in 0..=4.
    pub fn check(&self, envs: usize, state_dim: usize) -> Result<(), TransitionError> {
        let (n, s) = (envs, state_dim);
        let lens = [
            ("states", self.states.len(), n * s),
            ("actions", self.actions.len(), n * BRANCH_COUNT),
            ("rewards", self.rewards.len(), n),
            ("next_states", self.next_states.len(), n * s),
            ("reasons", self.reasons.len(), n),
        ];
        for (name, got, want) in lens {
            if got != want {
                return Err(TransitionError::Length {
                    name,
                    got,
                    want,
                    shape: format!("{n} envs, state width {s}"),
                });
            }
        }
        match self
            .reasons
            .iter()
            .position(|&c| !(0..=END_OF_DATA).contains(&c))
        {
            Some(env) => Err(TransitionError::Reason {
                env,
                value: self.reasons[env],
            }),
            None => Ok(()),
        }
    }
}

// The constants the module doc and `is_terminal` rely on: 1, 2 terminal; 3, 4 truncations.
const _: () = assert!(TAKE_PROFIT == 1 && STOP_LOSS == 2 && TIME_LIMIT == 3 && END_OF_DATA == 4);

/// `transition_assemble`: for each env e, with c its push count (step t): write the step at
/// slot `c mod n`; if `c >= n - 1`, assemble the window starting at slot `(c + 1) mod n`
/// (step `t - n + 1`) over the ring's slots in step order (see the module doc) into row e;
/// advance the count. Returns the N rows, or None while `t < n - 1` (the ring still takes the
/// step). Every env's count must be the same (every env pushes one step per call) and in the
/// folded range. On an error nothing is changed.
pub fn transition_assemble(
    ring: &mut TransitionRing,
    step: &StepInputs,
) -> Result<Option<Transitions>, TransitionError> {
    let (envs, s, n, gamma) = (ring.envs, ring.state_dim, ring.cfg.n, ring.cfg.gamma);
    step.check(envs, s)?;
    ring.check()?;
    let (first, bound) = (ring.counts.first().copied().unwrap_or(0), 2 * n as u32);
    if let Some(env) = ring.counts.iter().position(|&c| c != first || c >= bound) {
        return Err(TransitionError::Count {
            env,
            count: ring.counts[env],
            first,
            bound,
        });
    }
    let a = BRANCH_COUNT;
    let mut out = Transitions::zeros(envs, s);
    let mut emitted = false;
    for e in 0..envs {
        let c = ring.counts[e] as usize;
        let row = (c % n) * envs + e;
        ring.states[row * s..(row + 1) * s].copy_from_slice(&step.states[e * s..(e + 1) * s]);
        ring.next_states[row * s..(row + 1) * s]
            .copy_from_slice(&step.next_states[e * s..(e + 1) * s]);
        ring.actions[row * a..(row + 1) * a].copy_from_slice(&step.actions[e * a..(e + 1) * a]);
        ring.rewards[row] = step.rewards[e];
        ring.reasons[row] = step.reasons[e];
        if c + 1 >= n {
            // Steps i..=t in order are slots (c + 1 + m) mod n, m = 0..n.
            let slots: Vec<usize> = (0..n).map(|m| ((c + 1 + m) % n) * envs + e).collect();
            let rewards: Vec<f32> = slots.iter().map(|&r| ring.rewards[r]).collect();
            let reasons: Vec<i32> = slots.iter().map(|&r| ring.reasons[r]).collect();
            let w = window(&rewards, &reasons, n, gamma);
            let (first, last) = (slots[0], slots[w.k - 1]);
            out.states[e * s..(e + 1) * s]
                .copy_from_slice(&ring.states[first * s..(first + 1) * s]);
            out.next_states[e * s..(e + 1) * s]
                .copy_from_slice(&ring.next_states[last * s..(last + 1) * s]);
            out.actions[e * a..(e + 1) * a]
                .copy_from_slice(&ring.actions[first * a..(first + 1) * a]);
            out.rewards[e] = w.ret;
            out.discounts[e] = w.discount;
            emitted = true;
        }
        ring.counts[e] = ring.next_count(ring.counts[e]);
    }
    Ok(emitted.then_some(out))
}
