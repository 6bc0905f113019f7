//! Validated configurations. Every size and constant a kernel uses comes from here, checked
//! once, with errors that name the value and the fix.

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
