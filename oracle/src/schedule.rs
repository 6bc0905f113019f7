//! The training step's schedules: epsilon (advanced on the device, the spec of
//! cuda/schedule.cu), and the loop's cadence (updates per step, when updates start, the
//! target sync period, how often metrics are read), which decides what each step runs.

use crate::config::{require, ConfigError};
use serde::{Deserialize, Serialize};

/// Epsilon of epsilon-greedy acting, annealed linearly from `start` to `end` over `steps`
/// experience steps, then held at `end` (Mnih et al. 2015 anneal 1 to 0.1 over the first
/// million frames).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EpsilonSchedule {
    pub start: f32,
    pub end: f32,
    /// Steps from start to end; 0: `end` from the first step.
    pub steps: u32,
}

impl EpsilonSchedule {
    /// A constant rate.
    pub fn constant(epsilon: f32) -> Self {
        EpsilonSchedule {
            start: epsilon,
            end: epsilon,
            steps: 0,
        }
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

/// The loop's cadence: what a training step runs besides the experience, and how often the
/// host looks at the metrics.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TrainSchedule {
    /// Updates U per training step (each samples a batch of `replay.batch`).
    pub updates_per_step: u32,
    /// Updates start once the replay holds this many transitions (at least one batch).
    pub learn_start: usize,
    /// Hard target sync every this many updates (unused with `qnet.polyak_tau`, which
    /// averages after every update).
    pub target_period: u32,
    /// Epsilon of the experience step, annealed per step.
    pub epsilon: EpsilonSchedule,
    /// Steps between metric reads (the host's only look at the device during training).
    pub metrics_every: u32,
}

impl Default for TrainSchedule {
    fn default() -> Self {
        TrainSchedule {
            updates_per_step: 1,
            learn_start: 4096,
            target_period: 1000,
            epsilon: EpsilonSchedule {
                start: 1.0,
                end: 0.05,
                steps: 5000,
            },
            metrics_every: 100,
        }
    }
}

/// What one training step runs after the experience step, the reward pipeline and the
/// n-step assembly: decided by the step's index alone, so the host picks it without reading
/// the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StepKind {
    /// The n-step windows are not complete yet (steps before n - 1): nothing is inserted.
    Fill,
    /// The step's N transitions are inserted; no update yet (the replay is below `learn_start`).
    Collect,
    /// U updates (each with the target sync when due) on the replay as it was before this
    /// step, then the insert.
    Learn,
}

impl TrainSchedule {
    pub fn validate(&self, batch: usize) -> Result<(), ConfigError> {
        require(
            self.updates_per_step >= 1,
            "updates_per_step",
            self.updates_per_step,
            ">= 1",
            "one update per step is the default",
        )?;
        require(
            self.learn_start >= batch,
            "learn_start",
            self.learn_start as f64,
            ">= replay.batch",
            "start updates once the replay holds at least one batch",
        )?;
        require(
            self.target_period >= 1,
            "target_period",
            self.target_period,
            ">= 1",
            "sync every 1000 updates, say",
        )?;
        require(
            self.metrics_every >= 1,
            "metrics_every",
            self.metrics_every,
            ">= 1",
            "read metrics every 100 steps, say",
        )?;
        let e = self.epsilon;
        let p = |v: f32| (0.0..=1.0).contains(&v);
        require(
            p(e.start),
            "epsilon.start",
            e.start,
            "[0, 1]",
            "a rate such as 1.0",
        )?;
        require(
            p(e.end),
            "epsilon.end",
            e.end,
            "[0, 1]",
            "a rate such as 0.05",
        )
    }

    /// What step `step` (from 0) runs for `envs` envs, n-step windows of `n_step` steps: Fill
    /// before step n - 1; then Collect until the replay (which gains `envs` rows a step from
    /// step n - 1, up to its `capacity`) holds `learn_start` rows before the step; Learn after.
    pub fn kind(&self, step: u64, envs: usize, n_step: u32, capacity: usize) -> StepKind {
        let first_insert = u64::from(n_step.max(1) - 1);
        if step < first_insert {
            return StepKind::Fill;
        }
        let rows = ((step - first_insert).saturating_mul(envs as u64)).min(capacity as u64);
        if rows < self.learn_start as u64 {
            StepKind::Collect
        } else {
            StepKind::Learn
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epsilon_starts_at_start_reaches_end_and_falls_monotonically() {
        let s = EpsilonSchedule {
            start: 1.0,
            end: 0.05,
            steps: 1000,
        };
        assert_eq!(schedule_epsilon(&s, 0), 1.0);
        assert_eq!(schedule_epsilon(&s, 1000), 0.05);
        assert_eq!(schedule_epsilon(&s, u32::MAX), 0.05);
        let mid = schedule_epsilon(&s, 500);
        assert!((mid - 0.525).abs() < 1e-6, "{mid}");
        assert!((1..1000).all(|t| schedule_epsilon(&s, t) <= schedule_epsilon(&s, t - 1)));
        assert_eq!(schedule_epsilon(&EpsilonSchedule::constant(0.3), 7), 0.3);
    }

    #[test]
    fn step_kinds_fill_then_collect_then_learn() {
        let s = TrainSchedule {
            learn_start: 256,
            ..TrainSchedule::default()
        };
        // n = 3, 64 envs: steps 0, 1 fill; inserts from step 2; 256 rows before step 6.
        let kinds: Vec<StepKind> = (0..8).map(|t| s.kind(t, 64, 3, 1024)).collect();
        use StepKind::*;
        assert_eq!(
            kinds,
            [Fill, Fill, Collect, Collect, Collect, Collect, Learn, Learn]
        );
        // n = 1: the first step inserts, the second learns from it; capacity caps the count.
        assert_eq!(s.kind(0, 512, 1, 1024), Collect);
        assert_eq!(s.kind(1, 512, 1, 1024), Learn);
        assert_eq!(s.kind(2, 100, 1, 1024), Collect);
        assert_eq!(s.kind(3, 100, 1, 1024), Learn);
        let big = TrainSchedule {
            learn_start: 5000,
            ..TrainSchedule::default()
        };
        assert_eq!(
            big.kind(1_000_000, 100, 1, 4096),
            Collect,
            "learn_start above the capacity never learns (validate refuses it)"
        );
    }

    #[test]
    fn a_schedule_that_could_not_learn_is_refused_with_the_fix() {
        let s = TrainSchedule {
            learn_start: 10,
            ..TrainSchedule::default()
        };
        assert_eq!(
            s.validate(256).unwrap_err().to_string(),
            "learn_start = 10 is outside >= replay.batch: start updates once the replay holds at least one batch"
        );
        assert!(TrainSchedule {
            updates_per_step: 0,
            ..TrainSchedule::default()
        }
        .validate(256)
        .is_err());
        assert_eq!(TrainSchedule::default().validate(256), Ok(()));
    }
}
