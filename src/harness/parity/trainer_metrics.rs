//! GPU-vs-oracle checks of the training metrics' kernels (spec: tallyho_oracle::trainer):
//! `trainer_metrics_step` (one step's sums over the envs) and `trainer_metrics_update` (one
//! update's loss and gradient norm), into the device block of `MetricTotals::WORDS` doubles.
//! A check runs a sequence of launches on fresh random inputs (several steps accumulated,
//! non-finite values where the case asks for them) and compares the block after every launch
//! with the oracle's totals: counts, flags and epsilon exactly, the loss and norm sums
//! bitwise, the sums over envs within `metric_env_sum`.

use super::{merge_step, uniform};
use crate::error::{Error, Result};
use crate::optimizer::OptCtl;
use crate::runtime::Gpu;
use crate::trainer::{DeviceMetrics, StepInputs};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tallyho_oracle::tolerance::{metric_env_sum, METRIC_COUNTS, METRIC_UPDATE_SUMS};
use tallyho_oracle::trainer::{
    trainer_metrics_step, trainer_metrics_update, MetricTotals, NonFinite, StepValues,
};
use tallyho_oracle::{compare_exact, compare_f64, Comparison};

/// The action branches of the checks: the project's action space, [3, 5, 3].
pub const BRANCHES: [usize; 3] = [3, 5, 3];

/// One step's inputs of `trainer_metrics_step`, on the host.
#[derive(Clone, Debug, PartialEq)]
pub struct MetricStep {
    pub reward: Vec<f32>,
    pub pnl: Vec<f32>,
    pub trade_done: Vec<f32>,
    pub episode_done: Vec<f32>,
    /// `[N x sum n_k]` acting Q-values.
    pub q: Vec<f32>,
    pub epsilon: f32,
}

impl MetricStep {
    pub fn values<'a>(&'a self, branches: &'a [usize]) -> StepValues<'a> {
        StepValues {
            reward: &self.reward,
            pnl: &self.pnl,
            trade_done: &self.trade_done,
            episode_done: &self.episode_done,
            q: &self.q,
            branches,
            epsilon: self.epsilon,
        }
    }
}

/// One launch of the metrics kernels, in the order the trainer makes them.
#[derive(Clone, Debug, PartialEq)]
pub enum MetricLaunch {
    Step(MetricStep),
    /// An update's batch loss and the global gradient norm its control block holds.
    Update {
        loss: f64,
        grad_norm: f32,
    },
}

/// A metrics check: `envs` envs of `branches`, `steps` steps each followed by
/// `updates_per_step` updates; with `special`, non-finite values where the flags must see
/// them (a NaN and a -inf Q-value at step min(1, steps - 1), an infinite reward at the last
/// step, a NaN loss at update min(1, updates - 1), an infinite gradient norm at the last).
#[derive(Clone, Debug, PartialEq)]
pub struct MetricsCase {
    pub envs: usize,
    pub branches: Vec<usize>,
    pub steps: usize,
    pub updates_per_step: usize,
    pub special: bool,
    pub seed: u64,
}

impl MetricsCase {
    /// A random case: N from 1 to 5000 (odd sizes around one block likely), [3, 5, 3].
    pub fn random(rng: &mut impl Rng) -> MetricsCase {
        let envs = match rng.gen_range(0..4) {
            0 => [1, 255, 256, 257, 4099][rng.gen_range(0..5)],
            _ => rng.gen_range(1..=5000),
        };
        MetricsCase {
            envs,
            branches: BRANCHES.to_vec(),
            steps: rng.gen_range(1..=6),
            updates_per_step: rng.gen_range(0..=3),
            special: rng.gen_bool(0.5),
            seed: rng.gen(),
        }
    }

    /// The case's launches, from its seed.
    pub fn launches(&self) -> Vec<MetricLaunch> {
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        let (n, width) = (self.envs, self.branches.iter().sum::<usize>());
        let updates = self.steps * self.updates_per_step;
        let (q_at, reward_at) = (1.min(self.steps - 1), self.steps - 1);
        let (loss_at, norm_at) = (1.min(updates.saturating_sub(1)), updates.saturating_sub(1));
        let flags01 = |rng: &mut ChaCha8Rng, p: f64| -> Vec<f32> {
            (0..n)
                .map(|_| f32::from(u8::from(rng.gen_bool(p))))
                .collect()
        };
        let mut out = Vec::new();
        let mut u = 0;
        for t in 0..self.steps {
            let mut s = MetricStep {
                reward: uniform(&mut rng, n, 3.0),
                pnl: uniform(&mut rng, n, 50.0),
                trade_done: flags01(&mut rng, 0.2),
                episode_done: flags01(&mut rng, 0.05),
                q: uniform(&mut rng, n * width, 5.0),
                epsilon: rng.gen_range(0.0f32..1.0),
            };
            if self.special && t == q_at {
                let i = rng.gen_range(0..n * width);
                s.q[i] = f32::NAN;
                s.q[(i + 1) % (n * width)] = f32::NEG_INFINITY;
            }
            if self.special && t == reward_at {
                s.reward[rng.gen_range(0..n)] = f32::INFINITY;
            }
            out.push(MetricLaunch::Step(s));
            for _ in 0..self.updates_per_step {
                let mut loss = rng.gen_range(0.01f64..3.0);
                let mut grad_norm = rng.gen_range(0.01f32..40.0);
                if self.special && u == loss_at {
                    loss = f64::NAN;
                }
                if self.special && u == norm_at {
                    grad_norm = f32::INFINITY;
                }
                out.push(MetricLaunch::Update { loss, grad_norm });
                u += 1;
            }
        }
        out
    }
}

/// The block after each launch, on the GPU (a fresh, zeroed block), and the block `take`
/// returns at the end and the one it leaves (zeroed).
pub struct GpuTotals {
    pub after: Vec<[f64; MetricTotals::WORDS]>,
    pub taken: [f64; MetricTotals::WORDS],
    pub left: [f64; MetricTotals::WORDS],
}

fn words(v: Vec<f64>) -> Result<[f64; MetricTotals::WORDS]> {
    let len = v.len();
    v.try_into().map_err(|_| {
        Error::Shape(format!(
            "the metrics block read back {len} doubles, MetricTotals has {}",
            MetricTotals::WORDS
        ))
    })
}

/// Run `launches` through `trainer_metrics_step` / `trainer_metrics_update` on a fresh
/// `DeviceMetrics` of `envs` envs and `branches`, reading the block after each launch.
pub fn gpu_totals(
    gpu: &Gpu,
    envs: usize,
    branches: &[usize],
    launches: &[MetricLaunch],
) -> Result<GpuTotals> {
    let s = &gpu.stream;
    let mut m = DeviceMetrics::new(gpu, envs, branches)?;
    let mut after = Vec::with_capacity(launches.len());
    for (j, l) in launches.iter().enumerate() {
        match l {
            MetricLaunch::Step(x) => {
                let (reward, pnl) = (s.clone_htod(&x.reward)?, s.clone_htod(&x.pnl)?);
                let (trade_done, episode_done) =
                    (s.clone_htod(&x.trade_done)?, s.clone_htod(&x.episode_done)?);
                let (q, epsilon) = (s.clone_htod(&x.q)?, s.clone_htod(&[x.epsilon])?);
                m.step(&StepInputs {
                    reward: &reward,
                    pnl: &pnl,
                    trade_done: &trade_done,
                    episode_done: &episode_done,
                    q: &q,
                    epsilon: &epsilon,
                })?;
            }
            MetricLaunch::Update { loss, grad_norm } => {
                let ctl = OptCtl {
                    norm: *grad_norm,
                    ..OptCtl::at_step(j as u32 + 1, 0.9, 0.999)
                };
                let (dl, dc) = (s.clone_htod(&[*loss])?, s.clone_htod(&ctl.to_words())?);
                m.update(&dl, &dc)?;
            }
        }
        after.push(words(s.clone_dtoh(m.totals())?)?);
    }
    let taken = m.take()?.to_words();
    let left = words(s.clone_dtoh(m.totals())?)?;
    Ok(GpuTotals { after, taken, left })
}

/// The oracle's totals after one launch and what bounds its sums over envs: the env terms
/// added so far and, for reward, PnL and the greedy value, the sum of their magnitudes.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct OracleTotals {
    pub totals: MetricTotals,
    pub terms: usize,
    pub abs_reward: f64,
    pub abs_pnl: f64,
    pub abs_q: f64,
}

/// The oracle's block after each launch, from zero.
pub fn oracle_totals(branches: &[usize], launches: &[MetricLaunch]) -> Vec<OracleTotals> {
    let mut o = OracleTotals::default();
    let mut out = Vec::with_capacity(launches.len());
    for l in launches {
        match l {
            MetricLaunch::Step(x) => {
                trainer_metrics_step(&mut o.totals, &x.values(branches));
                let width: usize = branches.iter().sum();
                for i in 0..x.reward.len() {
                    o.abs_reward += f64::from(x.reward[i]).abs();
                    o.abs_pnl += f64::from(x.pnl[i]).abs();
                    // Env i's greedy value estimate, as the spec computes it: the q sum of
                    // that one env from zero (0 + g is g exactly).
                    let mut one = MetricTotals::default();
                    let q = x.q.get(i * width..(i + 1) * width).unwrap_or(&[]);
                    trainer_metrics_step(
                        &mut one,
                        &StepValues {
                            reward: &x.reward[i..=i],
                            pnl: &x.pnl[i..=i],
                            trade_done: &x.trade_done[i..=i],
                            episode_done: &x.episode_done[i..=i],
                            q,
                            branches,
                            epsilon: x.epsilon,
                        },
                    );
                    o.abs_q += one.q.abs();
                }
                o.terms += x.reward.len();
            }
            MetricLaunch::Update { loss, grad_norm } => {
                trainer_metrics_update(&mut o.totals, *loss, f64::from(*grad_norm));
            }
        }
        out.push(o);
    }
    out
}

/// The flags the inputs up to each launch must raise, read off the inputs themselves
/// (independent of both sides' accumulation): REWARD, Q, LOSS, GRAD_NORM bits.
pub fn injected_flags(launches: &[MetricLaunch]) -> Vec<u32> {
    let mut f = 0u32;
    launches
        .iter()
        .map(|l| {
            match l {
                MetricLaunch::Step(x) => {
                    if x.reward.iter().any(|r| !r.is_finite()) {
                        f |= NonFinite::REWARD;
                    }
                    if x.q.iter().any(|v| !v.is_finite()) {
                        f |= NonFinite::Q;
                    }
                }
                MetricLaunch::Update { loss, grad_norm } => {
                    if !loss.is_finite() {
                        f |= NonFinite::LOSS;
                    }
                    if !grad_norm.is_finite() {
                        f |= NonFinite::GRAD_NORM;
                    }
                }
            }
            f
        })
        .collect()
}

/// One block against the oracle's, with the declared tolerances: the counts (steps, trades,
/// episodes, updates), the flags and epsilon exactly, reward, PnL and the greedy value within
/// `metric_env_sum`, the loss and gradient norm sums bitwise.
pub fn compare_totals(got: &[f64; MetricTotals::WORDS], want: &OracleTotals) -> Vec<Comparison> {
    let g = MetricTotals::of_words(got);
    let w = &want.totals;
    vec![
        compare_f64(
            "counts (steps, trades, episodes, updates)",
            &[g.steps, g.trades, g.episodes, g.updates],
            &[w.steps, w.trades, w.episodes, w.updates],
            METRIC_COUNTS,
        ),
        compare_f64("flags", &[g.flags], &[w.flags], METRIC_COUNTS),
        compare_f64("epsilon", &[g.epsilon], &[w.epsilon], METRIC_COUNTS),
        compare_f64(
            "reward",
            &[g.reward],
            &[w.reward],
            metric_env_sum(want.terms, want.abs_reward),
        ),
        compare_f64(
            "pnl",
            &[g.pnl],
            &[w.pnl],
            metric_env_sum(want.terms, want.abs_pnl),
        ),
        compare_f64(
            "q (greedy value)",
            &[g.q],
            &[w.q],
            metric_env_sum(want.terms, want.abs_q),
        ),
        compare_f64(
            "loss and gradient norm sums",
            &[g.loss, g.grad_norm],
            &[w.loss, w.grad_norm],
            METRIC_UPDATE_SUMS,
        ),
    ]
}

/// Every launch's block against the oracle's (merged per output across launches), the
/// flags against those the inputs raise, and `take`: it returns the last block and leaves
/// zeros.
fn check_launches(
    gpu: &Gpu,
    case: &MetricsCase,
    launches: &[MetricLaunch],
) -> Result<Vec<Comparison>> {
    let got = gpu_totals(gpu, case.envs, &case.branches, launches)?;
    let want = oracle_totals(&case.branches, launches);
    let flags = injected_flags(launches);
    let mut out = Vec::new();
    for (t, ((g, w), f)) in got.after.iter().zip(&want).zip(&flags).enumerate() {
        let mut c = compare_totals(g, w);
        c.push(compare_exact(
            "flags raised by the inputs",
            &[MetricTotals::of_words(g).flags as u32],
            &[*f],
        ));
        merge_step(&mut out, t, c);
    }
    // The doubles as 32-bit halves: bitwise, NaN payloads included.
    let bits = |w: &[f64]| -> Vec<u32> {
        w.iter()
            .flat_map(|x| [x.to_bits() as u32, (x.to_bits() >> 32) as u32])
            .collect()
    };
    let last = got
        .after
        .last()
        .copied()
        .unwrap_or([0.0; MetricTotals::WORDS]);
    out.push(compare_exact(
        "take returns the block",
        &bits(&got.taken),
        &bits(&last),
    ));
    out.push(compare_exact(
        "take leaves zeros",
        &bits(&got.left),
        &bits(&[0.0; MetricTotals::WORDS]),
    ));
    Ok(out)
}

fn check_case(case: &MetricsCase) -> Result<()> {
    if case.envs == 0 || case.steps == 0 || case.branches.is_empty() {
        return Err(Error::Shape(format!(
            "a metrics case of {} envs, {} steps and {} branches: each needs at least 1",
            case.envs,
            case.steps,
            case.branches.len()
        )));
    }
    Ok(())
}

/// `trainer_metrics_step`: the case's steps only (its updates left out), the block after
/// each step against the oracle's.
pub fn check_trainer_metrics_step(gpu: &Gpu, case: &MetricsCase) -> Result<Vec<Comparison>> {
    check_case(case)?;
    let steps_only = MetricsCase {
        updates_per_step: 0,
        ..case.clone()
    };
    check_launches(gpu, case, &steps_only.launches())
}

/// `trainer_metrics_update`: the case's steps each followed by its updates (at least one
/// each), so updates accumulate on top of the steps' sums and flags; the block after every
/// launch against the oracle's.
pub fn check_trainer_metrics_update(gpu: &Gpu, case: &MetricsCase) -> Result<Vec<Comparison>> {
    check_case(case)?;
    let with_updates = MetricsCase {
        updates_per_step: case.updates_per_step.max(1),
        ..case.clone()
    };
    check_launches(gpu, case, &with_updates.launches())
}
