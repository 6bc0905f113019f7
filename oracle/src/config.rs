//! Validated configurations. Every size and constant a kernel uses comes from here, checked
//! once, with errors that name the value and the fix.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    #[error("{name} is 0: it must be at least 1")]
    Zero { name: &'static str },
    #[error("capacity {capacity} is below 4 x batch {batch} (= {need}): raise --capacity or lower --batch")]
    CapacityBelowFourBatches { capacity: usize, batch: usize, need: usize },
    #[error("capacity {capacity} exceeds the supported maximum {max} (2^30): lower --capacity")]
    CapacityTooLarge { capacity: usize, max: usize },
    #[error("{name} = {value} is outside {range}: {fix}")]
    OutOfRange { name: &'static str, value: f64, range: &'static str, fix: &'static str },
}

/// `Err(OutOfRange)` unless `ok` (callers write `ok` so that NaN fails it).
pub(crate) fn require(ok: bool, name: &'static str, value: impl Into<f64>, range: &'static str, fix: &'static str) -> Result<(), ConfigError> {
    if ok {
        Ok(())
    } else {
        Err(ConfigError::OutOfRange { name, value: value.into(), range, fix })
    }
}

/// The prioritized replay buffer (Schaul et al. 2016, "Prioritized Experience Replay").
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PerConfig {
    /// Ring capacity C (transitions).
    pub capacity: usize,
    /// State width S (floats per state).
    pub state_dim: usize,
    /// Batch size B of one sample.
    pub batch: usize,
    /// Priority exponent alpha: p = (|delta| + eps)^alpha.
    pub alpha: f32,
    /// Priority offset eps, so that no transition starves (0 allowed: then |delta| = 0 is never drawn).
    pub eps: f32,
    /// Initial importance exponent beta_0, annealed linearly to 1.
    pub beta0: f32,
    /// Number of samples over which beta reaches 1 (0: beta = 1 from the start).
    pub beta_steps: u32,
    /// Run seed: the Philox key.
    pub seed: u64,
}

pub const MAX_CAPACITY: usize = 1 << 30;

impl Default for PerConfig {
    fn default() -> Self {
        PerConfig {
            capacity: 1 << 17,
            state_dim: 32,
            batch: 256,
            alpha: 0.6,
            eps: 1e-6,
            beta0: 0.4,
            beta_steps: 100_000,
            seed: 0x7a11_1b0,
        }
    }
}

impl PerConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (name, v) in [("capacity", self.capacity), ("state_dim", self.state_dim), ("batch", self.batch)] {
            if v == 0 {
                return Err(ConfigError::Zero { name });
            }
        }
        if self.capacity < 4 * self.batch {
            return Err(ConfigError::CapacityBelowFourBatches {
                capacity: self.capacity,
                batch: self.batch,
                need: 4 * self.batch,
            });
        }
        if self.capacity > MAX_CAPACITY {
            return Err(ConfigError::CapacityTooLarge { capacity: self.capacity, max: MAX_CAPACITY });
        }
        let ranges = [
            ("alpha", self.alpha, 0.0, 1.0, "[0, 1]", "use 0 for uniform sampling, up to 1 for fully proportional"),
            ("eps", self.eps, 0.0, 1.0, "[0, 1]", "a small positive offset such as 1e-6"),
            ("beta0", self.beta0, 0.0, 1.0, "[0, 1]", "a start value such as 0.4"),
        ];
        for (name, v, lo, hi, range, fix) in ranges {
            if !(lo..=hi).contains(&v) {
                return Err(ConfigError::OutOfRange { name, value: f64::from(v), range, fix });
            }
        }
        Ok(())
    }

    /// Leaves of the sum tree: the capacity rounded up to a power of two.
    pub fn leaves(&self) -> usize {
        self.capacity.next_power_of_two()
    }

    /// Per-sample beta increment, rounded once to float; both sides use this value.
    pub fn beta_increment(&self) -> f32 {
        if self.beta_steps == 0 {
            1.0
        } else {
            ((1.0 - f64::from(self.beta0)) / f64::from(self.beta_steps)) as f32
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_below_four_batches_is_refused_with_the_fix() {
        let cfg = PerConfig { capacity: 512, batch: 256, ..PerConfig::default() };
        let msg = cfg.validate().unwrap_err().to_string();
        assert_eq!(msg, "capacity 512 is below 4 x batch 256 (= 1024): raise --capacity or lower --batch");
    }

    #[test]
    fn zero_sizes_and_out_of_range_constants_are_refused() {
        assert!(PerConfig { state_dim: 0, ..PerConfig::default() }.validate().is_err());
        assert!(PerConfig { alpha: 1.5, ..PerConfig::default() }.validate().is_err());
        assert!(PerConfig { eps: f32::NAN, ..PerConfig::default() }.validate().is_err());
        assert!(PerConfig::default().validate().is_ok());
    }
}
