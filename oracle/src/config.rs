//! Configuration errors: every size and constant a kernel uses is checked once, by its
//! stage's config ([`crate::env::EnvConfig`], [`crate::qnet::QNetConfig`],
//! [`crate::replay::ReplayConfig`], [`crate::reward::RewardConfig`]) and by
//! [`crate::train_config::TrainConfig`] for what ties them together, with errors that name
//! the value and the fix. This module is below every stage (it imports none of them).

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    #[error("{name} is 0: it must be at least 1")]
    Zero { name: &'static str },
    #[error("capacity {capacity} is below 4 x batch {batch} (= {need}): raise replay.capacity or lower replay.batch")]
    CapacityBelowFourBatches {
        capacity: usize,
        batch: usize,
        need: usize,
    },
    #[error(
        "capacity {capacity} exceeds the supported maximum {max} (2^30): lower replay.capacity"
    )]
    CapacityTooLarge { capacity: usize, max: usize },
    #[error("{name} = {value} is outside {range}: {fix}")]
    OutOfRange {
        name: &'static str,
        value: f64,
        range: &'static str,
        fix: &'static str,
    },
    #[error(
        "replay.capacity {capacity} is below 4 x envs {envs} (= {need}): raise replay.capacity or lower env.envs"
    )]
    CapacityBelowFourInserts {
        capacity: usize,
        envs: usize,
        need: usize,
    },
    #[error("{name} {value} is not the state width {want} ({features} market features + {portfolio} portfolio features): set it with TrainConfig::resolve, which derives it from the features")]
    StateDimMismatch {
        name: &'static str,
        value: usize,
        want: usize,
        features: usize,
        portfolio: usize,
    },
    #[error("qnet.branches {got:?} are not the action space {want:?} (direction, size, order type): use tallyho_oracle::action::ACTION_BRANCHES")]
    BranchesMismatch { got: Vec<usize>, want: Vec<usize> },
    /// A part's error, named by the part's section of the config (`qnet`, `replay`, ...):
    /// the message's leading key becomes `section.key`, as a config file spells it.
    #[error("{section}.{err}")]
    In {
        section: &'static str,
        err: Box<ConfigError>,
    },
}

impl ConfigError {
    /// This error as one of the config's `section`.
    pub fn in_section(self, section: &'static str) -> ConfigError {
        ConfigError::In {
            section,
            err: Box::new(self),
        }
    }
}

/// `Err(OutOfRange)` unless `ok` (callers write `ok` so that NaN fails it).
pub(crate) fn require(
    ok: bool,
    name: &'static str,
    value: impl Into<f64>,
    range: &'static str,
    fix: &'static str,
) -> Result<(), ConfigError> {
    if ok {
        Ok(())
    } else {
        Err(ConfigError::OutOfRange {
            name,
            value: value.into(),
            range,
            fix,
        })
    }
}
