//! The device schedules against the oracle (tallyho_oracle::schedule).

use crate::error::Result;
use crate::runtime::Gpu;
use crate::schedule::Epsilon;
use tallyho_oracle::schedule::{schedule_epsilon, EpsilonSchedule};
use tallyho_oracle::{compare_bitwise, Comparison};

/// The rates of `steps` launches of `schedule_epsilon` on `s`, from its step 0, on the GPU.
pub fn gpu_rates(gpu: &Gpu, s: &EpsilonSchedule, steps: u32) -> Result<Vec<f32>> {
    let mut eps = Epsilon::new(gpu, s.start)?;
    eps.set_schedule(s)?;
    (0..steps)
        .map(|_| eps.advance().and_then(|_| eps.read()))
        .collect()
}

/// The oracle's rates of the same steps.
pub fn oracle_rates(s: &EpsilonSchedule, steps: u32) -> Vec<f32> {
    (0..steps).map(|t| schedule_epsilon(s, t)).collect()
}

/// `schedule_epsilon` launched `steps` times on `s` against the oracle's rate of each step:
/// bitwise (the same float operations, each rounded to nearest).
pub fn check_schedule_epsilon(
    gpu: &Gpu,
    s: &EpsilonSchedule,
    steps: u32,
) -> Result<Vec<Comparison>> {
    Ok(vec![compare_bitwise(
        "epsilon",
        &gpu_rates(gpu, s, steps)?,
        &oracle_rates(s, steps),
    )])
}
