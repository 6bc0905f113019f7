//! The device schedules against the oracle (tallyho_oracle::schedule).

use crate::error::Result;
use crate::runtime::Gpu;
use crate::schedule::Epsilon;
use tallyho_oracle::schedule::{schedule_epsilon, EpsilonSchedule};
use tallyho_oracle::{compare_bitwise, Comparison};

/// `schedule_epsilon` launched `steps` times on `s` against the oracle's rate of each step:
/// bitwise (the same float operations, each rounded to nearest).
pub fn check_schedule_epsilon(gpu: &Gpu, s: &EpsilonSchedule, steps: u32) -> Result<Vec<Comparison>> {
    let mut eps = Epsilon::new(gpu, s.start)?;
    eps.set_schedule(s)?;
    let (mut got, mut want) = (Vec::new(), Vec::new());
    for t in 0..steps {
        eps.advance()?;
        got.push(eps.read()?);
        want.push(schedule_epsilon(s, t));
    }
    Ok(vec![compare_bitwise("epsilon", &got, &want)])
}
