//! It learns: the CPU trainer (the oracle backend of `tallyho train`) on the known-answer
//! task (`evaluate::PlantedTask`: a synthetic market with a planted predictable component)
//! yields a greedy policy that earns on the test split, which it never trained on, at
//! least half of what the planted rule earns; the task is sound (the planted rule earns,
//! the random policy loses its costs and no more). The GPU trainer runs the same task in
//! tests/trainer.rs.

use tallyho_oracle::evaluate::PlantedTask;
use tallyho_oracle::trainer::{train, Keep, OracleTrainer};

#[test]
fn the_cpu_trainer_learns_the_planted_component_and_earns_on_the_test_split() {
    let task = PlantedTask::new().unwrap();
    let mut t = OracleTrainer::new(&task.cfg, &task.market).unwrap();
    let mut windows = Keep::default();
    train(&task.cfg, 0, &mut t, &mut windows).unwrap();
    for w in &windows.0 {
        eprintln!(
            "step {:>6}  loss {:>6.3}  reward {:>8.4}  pnl {:>9.0}  epsilon {:.3}",
            w.step,
            w.loss.unwrap_or(f64::NAN),
            w.reward,
            w.pnl,
            w.epsilon
        );
    }
    let verdict = task.judge(&t.online);
    eprintln!("{}", verdict.table());
    let failures = verdict.failures();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
