//! The loop's contract (with a scripted backend) and the CPU trainer's determinism and
//! transitions.

use super::*;
use crate::env::{state_gather, END_OF_DATA, STOP_LOSS, TAKE_PROFIT, TIME_LIMIT};
use crate::features::{build, FeatureConfig, Market};
use crate::market::{synthetic, SyntheticConfig};

/// A backend that records the kinds it ran and returns scripted metric sums.
struct Scripted {
    kinds: Vec<StepKind>,
    loss: f64,
}

impl Backend for Scripted {
    type Error = std::io::Error;

    fn step(&mut self, kind: StepKind) -> Result<(), std::io::Error> {
        self.kinds.push(kind);
        Ok(())
    }

    fn take_metrics(&mut self) -> Result<MetricTotals, std::io::Error> {
        let flags = if self.loss.is_finite() {
            0.0
        } else {
            f64::from(NonFinite::LOSS)
        };
        Ok(MetricTotals {
            steps: 1.0,
            updates: 1.0,
            loss: self.loss,
            flags,
            ..MetricTotals::default()
        })
    }

    fn state(&mut self) -> Result<&OracleTrainer, std::io::Error> {
        Err(std::io::Error::other("a scripted backend has no state"))
    }
}

/// An observer that keeps the metrics windows and, at each checkpoint, the step and (where
/// `copy`) a copy of the state; it asks to stop after step `stop_at`.
#[derive(Default)]
struct Checkpoints {
    windows: Vec<u64>,
    evals: Vec<u64>,
    taken: Vec<(u64, Option<Box<OracleTrainer>>)>,
    copy: bool,
    stop_at: Option<u64>,
    step: u64,
}

impl Observer for Checkpoints {
    fn on_step(&mut self, step: u64) {
        self.step = step;
    }

    fn on_metrics(&mut self, m: &Metrics) -> Result<(), ObserveError> {
        self.windows.push(m.step);
        Ok(())
    }

    fn on_eval(&mut self, step: u64, _: &mut dyn StateSource) -> Result<(), ObserveError> {
        self.evals.push(step);
        Ok(())
    }

    fn on_checkpoint(
        &mut self,
        step: u64,
        state: &mut dyn StateSource,
    ) -> Result<(), ObserveError> {
        let copy = if self.copy {
            Some(Box::new(state.get()?.clone()))
        } else {
            None
        };
        self.taken.push((step, copy));
        Ok(())
    }

    fn stop_requested(&self) -> bool {
        self.stop_at == Some(self.step)
    }
}

fn small_config() -> TrainConfig {
    let mut cfg = TrainConfig::default();
    cfg.env.envs = 8;
    (
        cfg.qnet.h1,
        cfg.qnet.h2,
        cfg.qnet.value_hidden,
        cfg.qnet.adv_hidden,
        cfg.qnet.atoms,
    ) = (16, 16, 8, 8, 11);
    (cfg.replay.capacity, cfg.replay.batch) = (256, 16);
    cfg.schedule = crate::schedule::TrainSchedule {
        learn_start: 32,
        target_period: 5,
        metrics_every: 10,
        ..cfg.schedule
    };
    cfg.schedule.epsilon = crate::schedule::EpsilonSchedule {
        start: 1.0,
        end: 0.1,
        steps: 40,
    };
    cfg
}

fn small_market() -> Market {
    let bars = synthetic(&SyntheticConfig {
        bars: 600,
        ..SyntheticConfig::default()
    })
    .expect("synthetic market");
    build(&bars, &FeatureConfig::default()).expect("features")
}

#[test]
fn the_loop_runs_each_kind_in_order_and_reads_metrics_every_k_and_at_the_end() {
    let mut cfg = small_config();
    cfg.qnet.n_step = 3;
    cfg.run.steps = 25;
    let mut b = Scripted {
        kinds: Vec::new(),
        loss: 0.5,
    };
    let mut keep = Keep::default();
    let finish = train(&cfg, 0, &mut b, &mut keep).expect("runs");
    // n = 3: steps 0, 1 fill; 8 rows a step from step 2, 32 rows (learn_start) before step 6.
    use StepKind::{Collect, Fill, Learn};
    assert_eq!(
        &b.kinds[..8],
        &[Fill, Fill, Collect, Collect, Collect, Collect, Learn, Learn]
    );
    assert_eq!(b.kinds.len(), 25);
    let steps: Vec<u64> = keep.0.iter().map(|m| m.step).collect();
    assert_eq!(steps, [10, 20, 25]);
    assert_eq!(finish.last.expect("a window").loss, Some(0.5));
    assert_eq!((finish.step, finish.stopped), (25, false));
}

#[test]
fn checkpoints_fall_every_k_and_at_the_end_and_each_closes_a_metrics_window() {
    let mut cfg = small_config();
    (cfg.run.steps, cfg.run.checkpoint_every, cfg.run.eval_every) = (25, 10, 12);
    cfg.schedule.metrics_every = 4;
    let mut b = Scripted {
        kinds: Vec::new(),
        loss: 0.5,
    };
    let mut obs = Checkpoints::default();
    let finish = train(&cfg, 0, &mut b, &mut obs).expect("runs");
    assert_eq!(obs.windows, [4, 8, 10, 12, 16, 20, 24, 25]);
    let taken: Vec<u64> = obs.taken.iter().map(|(k, _)| *k).collect();
    assert_eq!(taken, [10, 20, 25]);
    assert_eq!(obs.evals, [12, 24, 25]);
    assert_eq!((finish.step, finish.stopped), (25, false));
}

#[test]
fn a_stop_request_closes_the_window_checkpoints_the_step_and_returns() {
    let mut cfg = small_config();
    (cfg.run.steps, cfg.run.checkpoint_every) = (25, 0);
    let mut b = Scripted {
        kinds: Vec::new(),
        loss: 0.5,
    };
    let mut obs = Checkpoints {
        stop_at: Some(7),
        ..Checkpoints::default()
    };
    let finish = train(&cfg, 0, &mut b, &mut obs).expect("runs");
    assert_eq!(b.kinds.len(), 7, "no step after the stop");
    assert_eq!(obs.windows, [7]);
    assert_eq!(obs.taken.len(), 1);
    assert_eq!(obs.taken[0].0, 7);
    assert_eq!((finish.step, finish.stopped), (7, true));
    // Resumed at 7, the windows fall where the uninterrupted run's do.
    let mut obs = Checkpoints::default();
    train(&cfg, 7, &mut b, &mut obs).expect("resumes");
    assert_eq!(obs.windows, [10, 20, 25]);
    assert_eq!(b.kinds.len(), 25);
}

#[test]
fn a_cpu_run_resumed_from_its_checkpointed_state_ends_bitwise_equal_to_the_run_that_went_on() {
    let (mut cfg, market) = (small_config(), small_market());
    (cfg.run.steps, cfg.run.checkpoint_every) = (40, 13);
    let mut t = OracleTrainer::new(&cfg, &market).expect("valid");
    let mut whole = Checkpoints {
        copy: true,
        ..Checkpoints::default()
    };
    train(&cfg, 0, &mut t, &mut whole).expect("trains");
    let (k, state) = whole.taken.remove(1);
    assert_eq!(k, 26);
    let mut resumed = *state.expect("copied");
    assert!(resumed.adam.step > 0, "the checkpoint is past learn_start");
    let mut rest = Checkpoints::default();
    train(&cfg, k, &mut resumed, &mut rest).expect("resumes");
    assert_eq!(resumed.state_differences(&t), Vec::<&str>::new());
    assert_ne!(
        resumed.state_differences(&OracleTrainer::new(&cfg, &market).expect("valid")),
        Vec::<&str>::new(),
        "a fresh trainer is another state"
    );
    let after: Vec<u64> = whole.windows.iter().copied().filter(|&w| w > k).collect();
    assert_eq!(rest.windows, after);
}

#[test]
fn a_non_finite_loss_stops_the_run_after_its_window_is_written() {
    let mut cfg = small_config();
    cfg.run.steps = 100;
    let mut b = Scripted {
        kinds: Vec::new(),
        loss: f64::NAN,
    };
    let mut keep = Keep::default();
    let err = train(&cfg, 0, &mut b, &mut keep).unwrap_err();
    assert!(
        matches!(err, TrainError::NonFinite { step: 10, .. }),
        "{err}"
    );
    assert!(
        err.to_string().contains("the loss became non-finite"),
        "{err}"
    );
    assert_eq!(
        keep.0.len(),
        1,
        "the window that saw it was handed to the observer first"
    );
    assert_eq!(b.kinds.len(), 10, "no step after the window that diverged");
}

#[test]
fn two_cpu_runs_with_one_seed_are_bitwise_equal_and_another_seed_differs() {
    let (cfg, market) = (small_config(), small_market());
    let run = |cfg: &TrainConfig| {
        let mut t = OracleTrainer::new(cfg, &market).expect("valid");
        let mut keep = Keep::default();
        let mut cfg = cfg.clone();
        cfg.run.steps = 30;
        train(&cfg, 0, &mut t, &mut keep).expect("trains");
        (t, keep.0)
    };
    let (a, ma) = run(&cfg);
    let (b, mb) = run(&cfg);
    assert_eq!(a.online, b.online);
    assert_eq!(a.target, b.target);
    assert_eq!(a.replay, b.replay);
    assert_eq!(a.env, b.env);
    assert_eq!(ma, mb);
    assert!(a.adam.step > 0, "the run updated");
    assert_ne!(
        a.online,
        init_online(&cfg),
        "the updates moved the parameters"
    );
    let mut other = cfg.clone();
    other.env.seed ^= 1;
    assert_ne!(run(&other).0.env, a.env);
}

fn init_online(cfg: &TrainConfig) -> Vec<f32> {
    crate::qnet::init_params(&cfg.qnet)
}

#[test]
fn transitions_carry_the_pre_reset_next_state_and_bootstrap_only_past_truncations() {
    let mut cfg = small_config();
    // Short episodes, tight barriers: every end reason occurs within a few hundred steps.
    (cfg.env.max_steps, cfg.env.stop_loss, cfg.env.take_profit) = (6, 0.0004, 0.0006);
    cfg.schedule.epsilon = crate::schedule::EpsilonSchedule::constant(1.0);
    let market = small_market();
    let mut t = OracleTrainer::new(&cfg, &market).expect("valid");
    let gamma = cfg.qnet.gamma;
    let mut seen = [0usize; 5];
    for step in 0..300u64 {
        let kind = cfg
            .schedule
            .kind(step, cfg.env.envs, cfg.qnet.n_step, cfg.replay.capacity);
        let r = t.step_with(kind, None).expect("steps").clone();
        let next = state_gather(&cfg.env, &t.market, &t.env);
        let rows = r.emitted.as_ref().expect("n = 1 emits every step");
        let s = cfg.qnet.state_dim;
        for n in 0..cfg.env.envs {
            let reason = r.reason[n];
            seen[reason as usize] += 1;
            let row = |v: &[f32]| v[n * s..(n + 1) * s].to_vec();
            assert_eq!(
                row(&rows.states),
                row(&r.states),
                "s is the state the action was taken in"
            );
            assert_eq!(
                row(&rows.next_states),
                row(&r.next_states),
                "s' is the env's pre-reset state"
            );
            assert_eq!(
                rows.rewards[n], r.reward.reward[n],
                "the reward is the reward pipeline's"
            );
            let want = if reason == TAKE_PROFIT || reason == STOP_LOSS {
                0.0
            } else {
                gamma
            };
            assert_eq!(
                rows.discounts[n], want,
                "step {step} env {n} reason {reason}"
            );
            if reason == 0 {
                assert_eq!(
                    row(&r.next_states),
                    row(&next),
                    "a running env's s' is its next state"
                );
            } else {
                assert_ne!(
                    row(&r.next_states),
                    row(&next),
                    "a reset env's s' is not its new episode's first state"
                );
                let steps_feature = r.next_states[n * s + s - 2];
                assert!(
                    steps_feature > 0.0,
                    "s' keeps the ended episode's step count"
                );
            }
        }
    }
    for (reason, name) in [
        (TAKE_PROFIT, "take-profit"),
        (STOP_LOSS, "stop-loss"),
        (TIME_LIMIT, "time limit"),
    ] {
        assert!(
            seen[reason as usize] > 0,
            "no {name} end in the run: the check would be empty"
        );
    }
    let _ = END_OF_DATA;
}
