//! A training run's configuration: the parts, each beside its stage ([`EnvConfig`],
//! [`QNetConfig`], [`ReplayConfig`], [`RewardConfig`]), and one `validate` for what ties them
//! together.

use serde::{Deserialize, Serialize};

use crate::action::ACTION_BRANCHES;
use crate::config::ConfigError;
use crate::env::{EnvConfig, PORTFOLIO_FEATURES};
use crate::features::FEATURE_DIM;
use crate::qnet::QNetConfig;
use crate::replay::ReplayConfig;
use crate::reward::RewardConfig;
use crate::schedule::TrainSchedule;
use crate::transition::TransitionConfig;

/// A training run's configuration: one value per size, so that the parts cannot disagree.
///
/// - The state width S is `feature_dim + PORTFOLIO_FEATURES` (the market's features, then the
///   portfolio's); [`TrainConfig::resolve`] writes it into `qnet.state_dim` and
///   `replay.state_dim`, and [`TrainConfig::validate`] refuses any other value.
/// - The update batch is `replay.batch`: the replay samples it and the Q-network trains on it.
/// - The Q-network's branches are the action space, [`ACTION_BRANCHES`].
/// - The replay holds at least 4 inserts (`env.envs` transitions each step) and 4 batches.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TrainConfig {
    pub env: EnvConfig,
    pub qnet: QNetConfig,
    pub replay: ReplayConfig,
    pub reward: RewardConfig,
    /// The loop's cadence: updates per step, when they start, target sync, epsilon, metrics.
    pub schedule: TrainSchedule,
    /// The run around the loop: its length, checkpoints and evaluations.
    pub run: RunConfig,
}

/// The run around the loop: how many steps, and what it writes on the way.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RunConfig {
    /// Training steps (each steps every env once).
    pub steps: u64,
    /// Steps between checkpoints; one is also written after the last step (0: only then).
    pub checkpoint_every: u64,
    /// Checkpoints kept: the newest, older ones are removed as new ones are written.
    pub keep_checkpoints: u32,
    /// Steps between evaluations on the test split; one also runs after the last step (0:
    /// only then).
    pub eval_every: u64,
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            steps: 30_000,
            checkpoint_every: 5_000,
            keep_checkpoints: 3,
            eval_every: 0,
        }
    }
}

impl RunConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        crate::config::require(
            self.steps >= 1,
            "steps",
            self.steps as f64,
            ">= 1",
            "a run trains at least one step",
        )?;
        crate::config::require(
            self.keep_checkpoints >= 1,
            "keep_checkpoints",
            self.keep_checkpoints,
            ">= 1",
            "keep at least the newest checkpoint (3 is the default)",
        )
    }

    /// Whether step `step` (counted from 1, the steps run so far) writes a checkpoint.
    pub fn checkpoint_due(&self, step: u64) -> bool {
        step == self.steps
            || (self.checkpoint_every > 0 && step.is_multiple_of(self.checkpoint_every))
    }

    /// Whether step `step` (counted from 1) is followed by an evaluation.
    pub fn eval_due(&self, step: u64) -> bool {
        step == self.steps || (self.eval_every > 0 && step.is_multiple_of(self.eval_every))
    }
}

/// Every part's default, resolved for the built-in features ([`FEATURE_DIM`]), so valid.
impl Default for TrainConfig {
    fn default() -> Self {
        TrainConfig {
            env: EnvConfig::default(),
            qnet: QNetConfig::default(),
            replay: ReplayConfig::default(),
            reward: RewardConfig::default(),
            schedule: TrainSchedule::default(),
            run: RunConfig::default(),
        }
        .resolve(FEATURE_DIM)
    }
}

impl TrainConfig {
    /// The state width S of a market with `feature_dim` features: `feature_dim +
    /// PORTFOLIO_FEATURES`.
    pub fn state_dim(feature_dim: usize) -> usize {
        // Saturating: a feature count read from a damaged checkpoint is refused, not a panic.
        feature_dim.saturating_add(PORTFOLIO_FEATURES)
    }

    /// The n-step assembly's n and gamma: the Q-network's `n_step` and `gamma`, their one
    /// source.
    pub fn transition(&self) -> TransitionConfig {
        TransitionConfig {
            n: self.qnet.n_step as usize,
            gamma: self.qnet.gamma,
        }
    }

    /// Sets the derived sizes from their one source: `qnet.state_dim` and `replay.state_dim`
    /// from `feature_dim`.
    pub fn resolve(mut self, feature_dim: usize) -> Self {
        let s = Self::state_dim(feature_dim);
        self.qnet.state_dim = s;
        self.replay.state_dim = s;
        self
    }

    /// Checks the Q-network's branches against the action space, each part
    /// (`QNetConfig::validate`, `EnvConfig::validate`, `ReplayConfig::validate`,
    /// `RewardConfig::validate`), the state width of both `qnet` and `replay` against
    /// `feature_dim + PORTFOLIO_FEATURES`, and `capacity >= 4 x envs` (the batch bound,
    /// `capacity >= 4 x batch`, is the replay's own).
    pub fn validate(&self, feature_dim: usize) -> Result<(), ConfigError> {
        if self.qnet.branches != ACTION_BRANCHES {
            return Err(ConfigError::BranchesMismatch {
                got: self.qnet.branches.clone(),
                want: ACTION_BRANCHES.to_vec(),
            });
        }
        let within = |section| move |e: ConfigError| e.in_section(section);
        self.qnet.validate().map_err(within("qnet"))?;
        self.env
            .validate(&self.qnet.branches)
            .map_err(within("env"))?;
        self.replay.validate().map_err(within("replay"))?;
        self.reward.validate().map_err(within("reward"))?;
        self.transition().validate().map_err(within("qnet"))?;
        self.schedule
            .validate(self.replay.batch)
            .map_err(within("schedule"))?;
        self.run.validate().map_err(within("run"))?;
        let want = Self::state_dim(feature_dim);
        for (name, value) in [
            ("qnet.state_dim", self.qnet.state_dim),
            ("replay.state_dim", self.replay.state_dim),
        ] {
            if value != want {
                return Err(ConfigError::StateDimMismatch {
                    name,
                    value,
                    want,
                    features: feature_dim,
                    portfolio: PORTFOLIO_FEATURES,
                });
            }
        }
        let (capacity, envs) = (self.replay.capacity, self.env.envs);
        if capacity < 4 * envs {
            return Err(ConfigError::CapacityBelowFourInserts {
                capacity,
                envs,
                need: 4 * envs,
            });
        }
        crate::config::require(
            self.schedule.learn_start <= capacity,
            "schedule.learn_start",
            self.schedule.learn_start as f64,
            "<= replay.capacity",
            "start updates before the replay would have to hold more than it can",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(cfg: &TrainConfig) -> String {
        cfg.validate(FEATURE_DIM).unwrap_err().to_string()
    }

    #[test]
    fn the_default_is_valid_and_resolved_for_the_built_in_features() {
        let cfg = TrainConfig::default();
        assert_eq!(cfg.validate(FEATURE_DIM), Ok(()));
        assert_eq!(
            (cfg.qnet.state_dim, cfg.replay.state_dim),
            (FEATURE_DIM + 4, FEATURE_DIM + 4)
        );
        assert_eq!(cfg.qnet.branches, ACTION_BRANCHES);
    }

    #[test]
    fn resolve_sets_both_state_widths_from_the_features() {
        let mut cfg = TrainConfig::default();
        cfg.qnet.state_dim = 99;
        cfg.replay.state_dim = 98;
        let cfg = cfg.resolve(7);
        assert_eq!((cfg.qnet.state_dim, cfg.replay.state_dim), (11, 11));
        assert_eq!(cfg.validate(7), Ok(()));
    }

    #[test]
    fn a_state_width_other_than_the_features_is_refused_with_the_fix() {
        let mut cfg = TrainConfig::default();
        cfg.qnet.state_dim = 32;
        assert_eq!(
            refusal(&cfg),
            "qnet.state_dim 32 is not the state width 15 (11 market features + 4 portfolio features): \
             set it with TrainConfig::resolve, which derives it from the features"
        );
        let mut cfg = TrainConfig::default();
        cfg.replay.state_dim = 14;
        assert!(
            refusal(&cfg).starts_with("replay.state_dim 14 is not the state width 15 "),
            "{}",
            refusal(&cfg)
        );
        // A config resolved for one feature count is refused for another.
        assert!(TrainConfig::default().validate(FEATURE_DIM + 1).is_err());
    }

    #[test]
    fn branches_other_than_the_action_space_are_refused_with_the_fix() {
        let mut cfg = TrainConfig::default();
        cfg.qnet.branches = vec![3, 4, 3];
        assert_eq!(
            refusal(&cfg),
            "qnet.branches [3, 4, 3] are not the action space [3, 5, 3] (direction, size, order type): \
             use tallyho_oracle::action::ACTION_BRANCHES"
        );
    }

    #[test]
    fn capacity_below_four_batches_is_refused_with_the_fix() {
        let mut cfg = TrainConfig::default();
        (cfg.replay.capacity, cfg.replay.batch, cfg.env.envs) = (512, 256, 64);
        assert_eq!(
            refusal(&cfg),
            "replay.capacity 512 is below 4 x batch 256 (= 1024): raise replay.capacity or lower replay.batch"
        );
    }

    #[test]
    fn capacity_below_four_inserts_is_refused_with_the_fix() {
        let mut cfg = TrainConfig::default();
        (cfg.replay.capacity, cfg.replay.batch, cfg.env.envs) = (1024, 64, 512);
        assert_eq!(
            refusal(&cfg),
            "replay.capacity 1024 is below 4 x envs 512 (= 2048): raise replay.capacity or lower env.envs"
        );
    }

    #[test]
    fn each_part_is_validated() {
        let mut cfg = TrainConfig::default();
        cfg.env.envs = 0;
        assert_eq!(refusal(&cfg), "env.envs is 0: it must be at least 1");
        let mut cfg = TrainConfig::default();
        cfg.qnet.gamma = 1.5;
        assert_eq!(
            refusal(&cfg),
            "qnet.gamma = 1.5 is outside (0, 1]: use a discount such as 0.99"
        );
        let mut cfg = TrainConfig::default();
        cfg.qnet.n_step = 300;
        assert!(
            refusal(&cfg).starts_with("qnet.n_step = 300 is outside [1, 256]: "),
            "{}",
            refusal(&cfg)
        );
        assert_eq!(
            TrainConfig::default().transition(),
            TransitionConfig { n: 1, gamma: 0.99 }
        );
        let mut cfg = TrainConfig::default();
        cfg.replay.alpha = 2.0;
        assert!(
            refusal(&cfg).starts_with("replay.alpha = 2 is outside [0, 1]: "),
            "{}",
            refusal(&cfg)
        );
        let mut cfg = TrainConfig::default();
        cfg.reward.ema_rate = 0.0;
        assert_eq!(
            refusal(&cfg),
            "reward.ema_rate = 0 is outside (0, 1]: a rate such as 0.01"
        );
    }
}
