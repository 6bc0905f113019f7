//! Schedules advanced on the device: the spec of cuda/schedule.cu.

use serde::{Deserialize, Serialize};

/// Epsilon of epsilon-greedy acting, annealed linearly from `start` to `end` over `steps`
/// experience steps, then held at `end` (Mnih et al. 2015 anneal 1 to 0.1 over the first
/// million frames).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct EpsilonSchedule {
    pub start: f32,
    pub end: f32,
    /// Steps from start to end; 0: `end` from the first step.
    pub steps: u32,
}

impl EpsilonSchedule {
    /// A constant rate.
    pub fn constant(epsilon: f32) -> Self {
        EpsilonSchedule { start: epsilon, end: epsilon, steps: 0 }
    }
}

/// `schedule_epsilon`: the rate of step `step` (counted from 0; the device counter saturates
/// at `u32::MAX`, past any schedule's end), in float with every operation rounded to nearest
/// as the kernel does:
/// `start + (end - start) * (step / steps)` for `step < steps`, else `end`.
pub fn schedule_epsilon(s: &EpsilonSchedule, step: u32) -> f32 {
    if s.steps == 0 || step >= s.steps {
        return s.end;
    }
    let frac = step as f32 / s.steps as f32;
    s.start + (s.end - s.start) * frac
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epsilon_starts_at_start_reaches_end_and_falls_monotonically() {
        let s = EpsilonSchedule { start: 1.0, end: 0.05, steps: 1000 };
        assert_eq!(schedule_epsilon(&s, 0), 1.0);
        assert_eq!(schedule_epsilon(&s, 1000), 0.05);
        assert_eq!(schedule_epsilon(&s, u32::MAX), 0.05);
        let mid = schedule_epsilon(&s, 500);
        assert!((mid - 0.525).abs() < 1e-6, "{mid}");
        assert!((1..1000).all(|t| schedule_epsilon(&s, t) <= schedule_epsilon(&s, t - 1)));
        assert_eq!(schedule_epsilon(&EpsilonSchedule::constant(0.3), 7), 0.3);
    }
}
