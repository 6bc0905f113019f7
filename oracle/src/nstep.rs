//! n-step returns, assembled per env from its steps as they come: the spec of the trainer's
//! transition assembly (Sutton and Barto 2018, ch. 7; with time limits as truncations, Pardo
//! et al. 2018, "Time Limits in Reinforcement Learning").
//!
//! Env i keeps a window of its last steps. A step's transition is emitted once its return is
//! known:
//! - n steps later, with no end among them: `R = sum_{j<n} gamma^j r_{t+j}`, next state
//!   `s_{t+n}`, `steps = n`, not terminal;
//! - or when the episode ends first, at step `t + k - 1` (k <= n): `R` over those k rewards,
//!   next state the ending step's s' (the state after the action, before any auto-reset),
//!   `steps = k`, terminal only for a take-profit or stop-loss end. A time limit or the end of
//!   the data is a truncation: the target still bootstraps, from s' with `gamma^k`.
//!
//! So every step is emitted exactly once, in order per env, and no transition straddles an
//! episode end. The return is summed in float from the last reward back,
//! `ret = r_{t+j} + gamma * ret` (a multiply, then an add: no fused multiply-add), the order
//! a device assembler must follow to match bit for bit; `discount = gamma^k` is a float
//! product of k gammas.

use crate::config::ConfigError;

/// How a step ended its episode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// The episode goes on.
    None,
    /// Take-profit or stop-loss: the value after it is 0.
    Terminal,
    /// The time limit or the end of the data: the episode was cut, the value after it is not 0.
    Truncated,
}

/// One env step as the assembler takes it: the state, the action, the reward, the state
/// after the action (before any auto-reset) and how the step ended.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    pub state: Vec<f32>,
    pub action: Vec<i32>,
    pub reward: f32,
    pub next_state: Vec<f32>,
    pub end: End,
}

/// An assembled transition: (s, a, R, s', terminal) and the discount of its bootstrap.
#[derive(Clone, Debug, PartialEq)]
pub struct NStepTransition {
    pub state: Vec<f32>,
    pub action: Vec<i32>,
    /// `sum_{j<steps} gamma^j r_{t+j}`, summed from the last reward back in float.
    pub ret: f32,
    pub next_state: Vec<f32>,
    /// The episode ended in a take-profit or stop-loss within `steps`: no bootstrap.
    pub terminal: bool,
    /// Rewards summed, 1..=n.
    pub steps: u32,
    /// `gamma^steps` (float, k multiplications): the bootstrap's discount.
    pub discount: f32,
}

/// The assembler of `envs` envs' n-step transitions.
#[derive(Clone, Debug)]
pub struct NStep {
    n: usize,
    gamma: f32,
    windows: Vec<Vec<Step>>,
}

impl NStep {
    /// `n >= 1` steps a return, discount `gamma` in (0, 1], for `envs` envs.
    pub fn new(n: usize, gamma: f32, envs: usize) -> Result<NStep, ConfigError> {
        if n == 0 {
            return Err(ConfigError::Zero { name: "n_step" });
        }
        if envs == 0 {
            return Err(ConfigError::Zero { name: "envs" });
        }
        crate::config::require(gamma > 0.0 && gamma <= 1.0, "gamma", gamma, "(0, 1]", "use a discount such as 0.99")?;
        Ok(NStep { n, gamma, windows: vec![Vec::with_capacity(n); envs] })
    }

    /// Take env `env`'s next step; return the transitions it completes, oldest first.
    pub fn push(&mut self, env: usize, step: Step) -> Vec<NStepTransition> {
        let ends = step.end != End::None;
        let window = &mut self.windows[env];
        window.push(step);
        let mut out = Vec::new();
        if ends {
            // Every step in the window now knows its return: up to the end.
            for first in 0..window.len() {
                out.push(assemble(&window[first..], self.gamma));
            }
            window.clear();
        } else if window.len() == self.n {
            out.push(assemble(window, self.gamma));
            window.remove(0);
        }
        out
    }

    /// The steps waiting for their return, per env (for a checkpoint or a test).
    pub fn pending(&self, env: usize) -> usize {
        self.windows[env].len()
    }
}

/// The transition of `steps[0]` over all of `steps` (its last one either ends the episode or
/// completes the n).
fn assemble(steps: &[Step], gamma: f32) -> NStepTransition {
    let last = &steps[steps.len() - 1];
    let ret = steps.iter().rev().fold(0.0f32, |ret, s| s.reward + gamma * ret);
    let discount = steps.iter().fold(1.0f32, |d, _| d * gamma);
    NStepTransition {
        state: steps[0].state.clone(),
        action: steps[0].action.clone(),
        ret,
        next_state: last.next_state.clone(),
        terminal: last.end == End::Terminal,
        steps: steps.len() as u32,
        discount,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    fn step(t: usize, reward: f32, end: End) -> Step {
        Step { state: vec![t as f32], action: vec![t as i32 % 3, 0, 1], reward, next_state: vec![t as f32 + 0.5], end }
    }

    #[test]
    fn one_step_returns_are_each_step_itself() {
        let mut a = NStep::new(1, 0.9, 1).unwrap();
        for (t, end) in [End::None, End::Truncated, End::None, End::Terminal].into_iter().enumerate() {
            let out = a.push(0, step(t, t as f32 + 1.0, end));
            assert_eq!(out.len(), 1);
            let tr = &out[0];
            assert_eq!((tr.ret, tr.steps, tr.discount, tr.terminal), (t as f32 + 1.0, 1, 0.9, end == End::Terminal));
            assert_eq!((tr.state.clone(), tr.next_state.clone()), (vec![t as f32], vec![t as f32 + 0.5]));
            assert_eq!(a.pending(0), 0);
        }
    }

    #[test]
    fn a_return_sums_n_rewards_and_bootstraps_from_the_state_n_steps_later() {
        let mut a = NStep::new(3, 0.5, 1).unwrap();
        assert!(a.push(0, step(0, 1.0, End::None)).is_empty());
        assert!(a.push(0, step(1, 2.0, End::None)).is_empty());
        let out = a.push(0, step(2, 4.0, End::None));
        // 1 + 0.5 * 2 + 0.25 * 4 = 3, from s_0, to s_3 (step 2's next state).
        assert_eq!(out, vec![NStepTransition { state: vec![0.0], action: vec![0, 0, 1], ret: 3.0, next_state: vec![2.5], terminal: false, steps: 3, discount: 0.125 }]);
        assert_eq!(a.pending(0), 2);
    }

    #[test]
    fn an_end_flushes_the_window_terminal_or_truncated_and_never_straddles_it() {
        for end in [End::Terminal, End::Truncated] {
            let mut a = NStep::new(4, 0.5, 2).unwrap();
            a.push(1, step(0, 1.0, End::None));
            a.push(1, step(1, 2.0, End::None));
            let out = a.push(1, step(2, 4.0, end));
            let got: Vec<_> = out.iter().map(|t| (t.state[0], t.ret, t.steps, t.terminal, t.next_state[0], t.discount)).collect();
            let terminal = end == End::Terminal;
            assert_eq!(got, vec![(0.0, 3.0, 3, terminal, 2.5, 0.125), (1.0, 4.0, 2, terminal, 2.5, 0.25), (2.0, 4.0, 1, terminal, 2.5, 0.5)]);
            assert_eq!((a.pending(1), a.pending(0)), (0, 0));
            // The next episode starts afresh.
            assert!(a.push(1, step(3, 8.0, End::None)).is_empty());
        }
    }

    #[test]
    fn invalid_settings_are_refused_with_the_fix() {
        assert_eq!(NStep::new(0, 0.9, 1).unwrap_err().to_string(), "n_step is 0: it must be at least 1");
        assert!(NStep::new(3, 0.0, 1).unwrap_err().to_string().contains("use a discount such as 0.99"));
        assert!(NStep::new(3, f32::NAN, 1).is_err());
        assert!(NStep::new(3, 1.5, 1).is_err());
        assert!(NStep::new(3, 0.9, 0).is_err());
    }

    /// Random episodes on several envs: every step comes out exactly once, in order per env,
    /// with the return of its own episode's next k <= n rewards (against an f64 sum, within
    /// float rounding), and terminal only where its episode ended terminally within k.
    #[test]
    fn every_step_is_emitted_once_with_the_return_of_its_own_episode() {
        let mut rng = ChaCha8Rng::seed_from_u64(31);
        for &n in &[1usize, 2, 3, 5] {
            let (envs, steps, gamma) = (3, 200, 0.97f32);
            let mut a = NStep::new(n, gamma, envs).unwrap();
            let mut history: Vec<Vec<(f32, End)>> = vec![Vec::new(); envs];
            let mut emitted: Vec<Vec<NStepTransition>> = vec![Vec::new(); envs];
            for t in 0..steps {
                for e in 0..envs {
                    let end = match rng.gen_range(0..10) {
                        0 => End::Terminal,
                        1 => End::Truncated,
                        _ => End::None,
                    };
                    let r = rng.gen_range(-1.0f32..1.0);
                    history[e].push((r, end));
                    emitted[e].extend(a.push(e, step(t, r, end)));
                }
            }
            for e in 0..envs {
                let h = &history[e];
                let done = h.len() - a.pending(e);
                assert_eq!(emitted[e].len(), done, "n {n} env {e}");
                for (t, tr) in emitted[e].iter().enumerate() {
                    assert_eq!(tr.state[0], t as f32, "in order");
                    let k = tr.steps as usize;
                    assert!((1..=n).contains(&k));
                    let window = &h[t..t + k];
                    // No end before the window's last step; its last step ends it or completes n.
                    assert!(window[..k - 1].iter().all(|s| s.1 == End::None));
                    assert!(k == n || window[k - 1].1 != End::None);
                    assert_eq!(tr.terminal, window[k - 1].1 == End::Terminal);
                    assert_eq!(tr.next_state[0], (t + k - 1) as f32 + 0.5);
                    let want: f64 = window.iter().enumerate().map(|(j, s)| f64::from(gamma).powi(j as i32) * f64::from(s.0)).sum();
                    assert!((f64::from(tr.ret) - want).abs() <= 1e-5 * (1.0 + want.abs()), "{} vs {want}", tr.ret);
                    assert!((f64::from(tr.discount) - f64::from(gamma).powi(k as i32)).abs() <= 1e-6);
                }
            }
        }
    }
}
