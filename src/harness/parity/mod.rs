//! GPU-vs-oracle checks, one per kernel, written once and used by the property tests, the
//! fixture replays and `tallyho verify`. Each runs the kernel on fresh inputs, runs the
//! oracle on the same inputs, and returns one `Comparison` per output. One file per stage:
//! `philox`, `replay`, `optimizer`, `qnet`, `env`, `reward`, `schedule`, `transition`,
//! `trainer_metrics` (and the whole `trainer`); here the helpers they share.

pub mod env;
pub mod optimizer;
pub mod philox;
pub mod qnet;
pub mod replay;
pub mod reward;
pub mod schedule;
pub mod trainer;
pub mod trainer_metrics;
pub mod transition;

use rand::Rng;
use tallyho_oracle::Comparison;

/// `n` values uniform in [-scale, scale).
pub fn uniform(rng: &mut impl Rng, n: usize, scale: f32) -> Vec<f32> {
    (0..n).map(|_| rng.gen_range(-scale..scale)).collect()
}

/// Merge step `t`'s comparisons into one row per output across steps, a failing one
/// named with the step it first failed at.
pub(crate) fn merge_step(out: &mut Vec<Comparison>, t: usize, step: Vec<Comparison>) {
    for mut c in step {
        if !c.passed() {
            c.output = format!("{} (first failure at step {t})", c.output);
        }
        match out.iter_mut().find(|o| o.output == c.output) {
            Some(o) => o.merge(&c),
            None => out.push(c),
        }
    }
}
