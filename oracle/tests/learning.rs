//! It learns: the CPU trainer (the oracle backend of `tallyho train`) on a synthetic market
//! with a planted, known predictable component — the order-book imbalance feature (`ofi`)
//! leans toward the next minute's move (`SyntheticConfig::imbalance_signal` = 1, correlation
//! about 0.8) — yields a greedy policy that earns on the test split, which it never trained
//! on. Beside it, the two policies whose answer is known: the planted rule (hold one
//! contract in the direction of the imbalance) earns, and the uniformly random policy loses
//! its trading costs and no more.

use tallyho_oracle::env::{EnvConfig, EnvMarket, Split};
use tallyho_oracle::evaluate::{evaluate, Evaluation, Policy};
use tallyho_oracle::features::{build, FeatureConfig, FEATURE_NAMES};
use tallyho_oracle::market::{synthetic, SyntheticConfig};
use tallyho_oracle::schedule::EpsilonSchedule;
use tallyho_oracle::trainer::{train, Keep, OracleTrainer};
use tallyho_oracle::TrainConfig;

/// The run: 32 envs, 12 000 steps (384 000 transitions, 11 000 updates of 64), a network of
/// 64-wide layers and 21 atoms, Adam at 1e-3, epsilon from 1 to 0.05 over the first half.
fn config(feature_dim: usize) -> TrainConfig {
    let mut cfg = TrainConfig::default();
    cfg.env.envs = 32;
    (cfg.qnet.h1, cfg.qnet.h2, cfg.qnet.value_hidden, cfg.qnet.adv_hidden, cfg.qnet.atoms) = (64, 64, 32, 32, 21);
    cfg.qnet.lr = 1e-3;
    (cfg.replay.batch, cfg.replay.capacity, cfg.replay.beta_steps) = (64, 1 << 15, STEPS as u32);
    cfg.schedule.learn_start = 1024;
    cfg.schedule.target_period = 250;
    cfg.schedule.metrics_every = 1000;
    cfg.schedule.epsilon = EpsilonSchedule { start: 1.0, end: 0.05, steps: STEPS as u32 / 2 };
    cfg.resolve(feature_dim)
}

const STEPS: u64 = 12_000;
/// Evaluation: 64 envs for 2000 steps of the test split (about 500 ended episodes).
const EVAL_ENVS: usize = 64;
const EVAL_STEPS: usize = 2000;

fn show(name: &str, e: &Evaluation) {
    eprintln!(
        "{name:<8} episodes {:>4}  mean PnL {:>8.1} (se {:>5.1}, z {:>5.1})  cost {:>7.1}  gross {:>7.1} (z {:>5.1})",
        e.episodes,
        e.mean_pnl,
        e.std_error,
        e.z(),
        e.mean_cost,
        e.mean_gross,
        e.gross_z()
    );
}

#[test]
fn the_cpu_trainer_learns_the_planted_component_and_earns_on_the_test_split() {
    let bars = synthetic(&SyntheticConfig { imbalance_signal: 1.0, ..SyntheticConfig::default() }).unwrap();
    let market = build(&bars, &FeatureConfig::default()).unwrap();
    let cfg = config(market.feature_dim);
    let mut t = OracleTrainer::new(&cfg, &market).unwrap();
    let mut windows = Keep::default();
    train(&cfg, STEPS, &mut t, &mut windows).unwrap();
    for w in &windows.0 {
        eprintln!("step {:>6}  loss {:>6.3}  reward {:>8.4}  pnl {:>9.0}  epsilon {:.3}", w.step, w.loss.unwrap_or(f64::NAN), w.reward, w.pnl, w.epsilon);
    }

    let (em, test) = (EnvMarket::of(&market), Split::test(&market));
    let eval_cfg = EnvConfig { envs: EVAL_ENVS, ..cfg.env.clone() };
    let ofi = FEATURE_NAMES.iter().position(|&n| n == "ofi").unwrap();
    let run = |p: Policy| evaluate(&eval_cfg, &cfg.qnet.branches, &em, test, p, EVAL_STEPS);
    let greedy = run(Policy::Greedy { cfg: &cfg.qnet, params: &t.online });
    let planted = run(Policy::Planted { feature: ofi, dead_band: 0.0 });
    let random = run(Policy::Random);
    show("greedy", &greedy);
    show("planted", &planted);
    show("random", &random);

    assert!(planted.z() >= 3.0, "the planted component must be there to learn: {planted:?}");
    assert!(random.mean_pnl < 0.0 && random.gross_z().abs() < 3.0, "random loses its costs and no more: {random:?}");
    assert!(random.episodes >= 300 && greedy.episodes >= 300, "enough episodes for the errors to mean something");
    assert!(greedy.z() >= 3.0, "the greedy policy's test PnL is clearly positive: {greedy:?}");
    assert!(
        greedy.mean_pnl >= 0.5 * planted.mean_pnl,
        "the greedy policy earns at least half of the planted rule: {} against {}",
        greedy.mean_pnl,
        planted.mean_pnl
    );
}
