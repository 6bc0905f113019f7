//! The CUDA trainer against the oracle trainer, step by step: before each step the oracle
//! takes the GPU's whole state (so every comparison bounds one step's error, not an
//! accumulated drift), both run the step, and every output is compared with its stage's
//! tolerance. Where a float difference can flip a discrete choice, the oracle follows the
//! GPU: epsilon-greedy picks from the GPU's Q-values, and the loss takes the GPU's Double
//! DQN actions. Each greedy pick where the oracle's own Q-values would have chosen another
//! action is a flip; a flip is accepted only where the oracle's values of the two candidates
//! are within twice the step's largest GPU-vs-oracle Q difference (a near tie that the
//! GPU's rounding can decide), and the flips are counted.

use super::merge_step;
use super::qnet::forward_chain;
use super::reward::compare_global;
use crate::error::{Error, Result};
use crate::qnet::Products;
use crate::runtime::Gpu;
use crate::trainer::CudaTrainer;
use tallyho_oracle::env::action_select;
use tallyho_oracle::features::{build, FeatureConfig, Market};
use tallyho_oracle::market::{synthetic, SyntheticConfig};
use tallyho_oracle::philox::{self, stream};
use tallyho_oracle::qnet::hidden_width;
use tallyho_oracle::reward::Stage;
use tallyho_oracle::schedule::{EpsilonSchedule, StepKind, TrainSchedule};
use tallyho_oracle::tolerance::{
    gemm_chain, gemm_chain_3xtf32, gemm_chain_tf32, QNET_TRAJECTORY, REPLAY_IS_WEIGHT,
    REPLAY_PRIORITY, REWARD_REDUCTION,
};
use tallyho_oracle::trainer::{Follow, MetricTotals, OracleTrainer, StepRecord};
use tallyho_oracle::{
    compare_bitwise, compare_exact, compare_f32, compare_rel_norm, Comparison, Tolerance,
    TrainConfig,
};

/// The market of the trainer checks: 4000 synthetic bars (seeded), default features.
pub fn small_market() -> Result<Market> {
    let bars = synthetic(&SyntheticConfig {
        bars: 4000,
        ..SyntheticConfig::default()
    })
    .map_err(oracle_err)?;
    build(&bars, &FeatureConfig::default()).map_err(oracle_err)
}

/// A small run: 64 envs, a 64-wide network of 21 atoms, batch 64, updates from step 2,
/// a hard target sync every 16 updates, short episodes with tight barriers so that every
/// end occurs, epsilon annealed over the first 100 steps.
pub fn small_config(feature_dim: usize) -> TrainConfig {
    let mut cfg = TrainConfig::default();
    cfg.env.envs = 64;
    (cfg.env.max_steps, cfg.env.stop_loss, cfg.env.take_profit) = (30, 0.0008, 0.001);
    (
        cfg.qnet.h1,
        cfg.qnet.h2,
        cfg.qnet.value_hidden,
        cfg.qnet.adv_hidden,
        cfg.qnet.atoms,
    ) = (64, 64, 32, 32, 21);
    (cfg.replay.capacity, cfg.replay.batch) = (4096, 64);
    cfg.schedule = TrainSchedule {
        updates_per_step: 1,
        learn_start: 128,
        target_period: 16,
        epsilon: EpsilonSchedule {
            start: 1.0,
            end: 0.1,
            steps: 100,
        },
        metrics_every: 50,
    };
    cfg.resolve(feature_dim)
}

/// What a teacher-forced comparison found.
#[derive(Clone, Debug)]
pub struct TrainerParity {
    /// One row per output, merged over the steps (a failing row names its first step).
    pub comparisons: Vec<Comparison>,
    /// Greedy picks decided by a near tie that the GPU broke differently from the oracle.
    pub flips: usize,
    /// Greedy picks in all (the denominator of the flip rate).
    pub greedy: usize,
    /// Steps of each kind run (Fill, Collect, Learn).
    pub kinds: [usize; 3],
    /// A flip outside the near-tie bound: (step, env, branch, |q gap|, bound).
    pub bad_flips: Vec<(usize, usize, usize, f64, f64)>,
}

impl TrainerParity {
    pub fn passed(&self) -> bool {
        self.bad_flips.is_empty() && self.comparisons.iter().all(Comparison::passed)
    }
}

fn oracle_err(e: impl std::fmt::Display) -> Error {
    Error::Shape(format!("oracle trainer: {e}"))
}

/// Run `steps` steps of `cfg` on the training split of `market` on both trainers (the GPU's
/// through its graphs, its update on a stream of its own where `overlap`, after `setup`
/// chose its paths) and compare them (module doc). One update per step: only the last
/// update's buffers survive a step to be compared.
pub fn trainer_vs_oracle(
    gpu: &Gpu,
    cfg: &TrainConfig,
    market: &Market,
    steps: usize,
    overlap: bool,
    setup: impl FnOnce(&mut CudaTrainer) -> Result<()>,
) -> Result<TrainerParity> {
    trainer_vs_oracle_with(gpu, cfg, market, steps, overlap, setup, |_| true)
}

/// One step's rows of [`trainer_vs_oracle`], as they come.
pub struct TrainerStep<'a> {
    pub t: usize,
    pub comparisons: &'a [Comparison],
}

/// [`trainer_vs_oracle`], handing each step's rows to `on_step` as they come; it stops
/// after a step where `on_step` returns false (`tallyho diverge` stops at the first failure).
pub fn trainer_vs_oracle_with(
    gpu: &Gpu,
    cfg: &TrainConfig,
    market: &Market,
    steps: usize,
    overlap: bool,
    setup: impl FnOnce(&mut CudaTrainer) -> Result<()>,
    mut on_step: impl FnMut(TrainerStep) -> bool,
) -> Result<TrainerParity> {
    if cfg.schedule.updates_per_step != 1 {
        return Err(Error::Shape(
            "trainer_vs_oracle follows one update per step (only the last update's buffers survive a step): set schedule.updates_per_step = 1".into(),
        ));
    }
    let mut g = CudaTrainer::with_overlap(gpu, cfg, market, overlap)?;
    setup(&mut g)?;
    let mut o = OracleTrainer::new(cfg, market).map_err(oracle_err)?;
    let mut view = OracleTrainer::new(cfg, market).map_err(oracle_err)?;
    let tol = Tolerances::of(cfg, g.net.acting_products(cfg.env.envs));
    let mut out = TrainerParity {
        comparisons: Vec::new(),
        flips: 0,
        greedy: 0,
        kinds: [0; 3],
        bad_flips: Vec::new(),
    };
    for t in 0..steps {
        let kind = cfg
            .schedule
            .kind(t as u64, cfg.env.envs, cfg.qnet.n_step, cfg.replay.capacity);
        out.kinds[kind as usize] += 1;
        g.download_into(&mut o)?;
        g.step_kind(kind)?;
        let step = GpuStep::read(&g, kind, &mut view)?;
        let mut c = compare_taught(cfg, kind, &tol, &mut o, &step, t, &mut out)?;
        // The step's metric sums: counts and flags exactly, epsilon bitwise, the double sums
        // over envs (another order on each side) as floats, the greedy value within the
        // acting bound, the update's loss and gradient norm within their chains' bounds.
        let (gm, om) = (g.take_metrics()?, std::mem::take(&mut o.totals));
        let counts = |m: &MetricTotals| {
            [m.steps, m.trades, m.episodes, m.updates, m.flags].map(|x| x as u32)
        };
        c.push(compare_exact(
            "metric counts and flags",
            &counts(&gm),
            &counts(&om),
        ));
        c.push(compare_exact(
            "metric epsilon",
            &[(gm.epsilon as f32).to_bits()],
            &[(om.epsilon as f32).to_bits()],
        ));
        let sums = Tolerance {
            atol: 1e-12 * (om.reward.abs() + om.pnl.abs() + 1.0),
            rtol: 2.4e-7,
            exact: false,
            norm: false,
            reason: "double sums over the envs in another order, compared as float",
        };
        c.push(compare_f32(
            "metric reward, pnl",
            &[gm.reward as f32, gm.pnl as f32],
            &[om.reward, om.pnl],
            sums,
        ));
        c.push(compare_rel_norm(
            "metric q",
            &[gm.q as f32],
            &[om.q],
            tol.acting,
        ));
        if kind == StepKind::Learn {
            c.push(compare_rel_norm(
                "metric loss",
                &[gm.loss as f32],
                &[om.loss],
                tol.loss,
            ));
            c.push(compare_rel_norm(
                "metric gradient norm",
                &[gm.grad_norm as f32],
                &[om.grad_norm],
                tol.grad,
            ));
        }
        let go_on = on_step(TrainerStep { t, comparisons: &c });
        merge_step(&mut out.comparisons, t, c);
        if !go_on {
            break;
        }
    }
    Ok(out)
}

/// The tolerances of the taught comparison: the acting forward's (by the products it ran
/// on), the loss's forward chain, and the gradient norm's forward and backward chains.
pub struct Tolerances {
    pub acting: Tolerance,
    pub loss: Tolerance,
    pub grad: Tolerance,
}

impl Tolerances {
    pub fn of(cfg: &TrainConfig, acting: Products) -> Tolerances {
        let qc = &cfg.qnet;
        let [h1, .., fwd] = forward_chain(qc);
        let acting = match acting {
            Products::Float32 => gemm_chain(&fwd),
            Products::Tf32x3 => gemm_chain_3xtf32(&fwd),
            Products::Tf32 => gemm_chain_tf32(&h1, &fwd[h1.len()..]),
        };
        // The gradient norm went through the backward chain too (as check_qnet_update
        // bounds it).
        let n_max = qc.branches.iter().copied().max().unwrap_or(1);
        let grad = gemm_chain(
            &[
                fwd.clone(),
                vec![
                    n_max * qc.atoms,
                    hidden_width(qc),
                    qc.h2,
                    qc.h1,
                    cfg.replay.batch,
                ],
            ]
            .concat(),
        );
        Tolerances {
            acting,
            loss: gemm_chain(&fwd),
            grad,
        }
    }
}

/// What the GPU's step left, on the host: its state after the step as the oracle trainer
/// holds one, with the step's outputs (its Double DQN actions included, which the oracle
/// follows) as its record (`after.last`). Read from a trainer, or from a recorded
/// whole-step fixture.
pub struct GpuStep {
    pub after: OracleTrainer,
}

impl GpuStep {
    /// Read the step of `kind` that `g` just ran, through `view` (an oracle trainer of its
    /// config, whose state is overwritten).
    pub fn read(g: &CudaTrainer, kind: StepKind, view: &mut OracleTrainer) -> Result<GpuStep> {
        g.trace(kind, view)?;
        Ok(GpuStep {
            after: view.clone(),
        })
    }

    /// The step's outputs.
    pub fn record(&self) -> Result<&StepRecord> {
        self.after
            .last
            .as_ref()
            .ok_or_else(|| Error::Shape("the GPU's step left no record".into()))
    }
}

/// One step taught and compared: `o` holds the GPU's state before the step; it runs the
/// step following the GPU's choices where a float difference could flip a discrete one
/// (module doc) and every output and the state after are compared with the GPU's, each
/// with its stage's tolerance; greedy picks and flips are counted into `out` (step `t`).
pub fn compare_taught(
    cfg: &TrainConfig,
    kind: StepKind,
    tol: &Tolerances,
    o: &mut OracleTrainer,
    gpu: &GpuStep,
    t: usize,
    out: &mut TrainerParity,
) -> Result<Vec<Comparison>> {
    let qc = &cfg.qnet;
    let width: usize = qc.branches.iter().sum();
    let (online0, env0, global0) = (o.online.clone(), o.env.clone(), o.reward_global);
    let grec = gpu.record()?;
    let gq = &grec.q;
    let next: Vec<Vec<i32>> = grec
        .updates
        .iter()
        .map(|u| u.next_actions.clone())
        .collect();
    let rec = o
        .step_with(
            kind,
            Some(Follow {
                q: gq,
                next_actions: &next,
            }),
        )
        .map_err(oracle_err)?
        .clone();

    // Acting: the oracle's own Q-values (of the parameters the step acted with, before
    // its update) against the GPU's, and the flips.
    let updated = std::mem::replace(&mut o.online, online0.clone());
    let own_q = o.acting_q(&rec.states);
    o.online = updated;
    let max_diff = gq
        .iter()
        .zip(&own_q)
        .map(|(&a, &b)| (f64::from(a) - f64::from(b)).abs())
        .fold(0.0, f64::max);
    let own_actions = action_select(cfg.env.seed, &qc.branches, rec.epsilon, &own_q, &env0);
    for n in 0..cfg.env.envs {
        let explore = philox::draw(
            cfg.env.seed,
            n as u32,
            env0.clock[n],
            stream::ACTION_EXPLORE,
        );
        let mut off = 0;
        for (k, &nk) in qc.branches.iter().enumerate() {
            let greedy = philox::u01(explore[k]) >= rec.epsilon;
            let (a_gpu, a_own) = (
                rec.actions[n * qc.branches.len() + k],
                own_actions[n * qc.branches.len() + k],
            );
            if greedy {
                out.greedy += 1;
                if a_gpu != a_own {
                    let row = &own_q[n * width + off..n * width + off + nk];
                    let gap =
                        (f64::from(row[a_gpu as usize]) - f64::from(row[a_own as usize])).abs();
                    if gap <= 2.0 * max_diff {
                        out.flips += 1;
                    } else {
                        out.bad_flips.push((t, n, k, gap, 2.0 * max_diff));
                    }
                }
            }
            off += nk;
        }
    }
    let mut c = vec![
        compare_exact(
            "epsilon",
            &[grec.epsilon.to_bits()],
            &[rec.epsilon.to_bits()],
        ),
        compare_rel_norm(
            "acting q",
            gq,
            &own_q.iter().map(|&v| f64::from(v)).collect::<Vec<_>>(),
            tol.acting,
        ),
        compare_bitwise("states", &grec.states, &rec.states),
        compare_exact("actions", &grec.actions, &rec.actions),
    ];

    c.push(compare_bitwise("pnl", &grec.pnl, &rec.pnl));
    c.push(compare_bitwise(
        "next states",
        &grec.next_states,
        &rec.next_states,
    ));
    c.push(compare_bitwise("done", &grec.done, &rec.done));
    c.push(compare_exact("reason", &grec.reason, &rec.reason));
    c.extend(super::env::compare_env_states(&gpu.after.env, &o.env));
    let reward = &grec.reward;
    c.push(compare_f32(
        "reward",
        &reward.reward,
        &rec.reward
            .reward
            .iter()
            .map(|&v| f64::from(v))
            .collect::<Vec<_>>(),
        REWARD_REDUCTION,
    ));
    c.push(compare_bitwise(
        "trade closed",
        &reward.done,
        &rec.reward.done,
    ));
    let (genv, gglobal) = (&gpu.after.reward_envs, gpu.after.reward_global);
    // The EMAs within an ulp, the controllers re-run from the GPU's EMAs, the dispersion
    // within its cancellation bound: the reward stage's own comparison.
    c.extend(compare_global(
        &cfg.reward,
        &Stage::ALL,
        &global0,
        &gglobal,
        &o.reward_global,
        &rec.reward.reward,
    ));
    c.push(compare_exact(
        "reward steps since done",
        &genv.steps_since_done,
        &o.reward_envs.steps_since_done,
    ));
    if let Some(want) = &rec.emitted {
        let Some(got) = &grec.emitted else {
            return Err(Error::Shape(
                "the GPU's step assembled no transitions where the oracle's did".into(),
            ));
        };
        c.push(compare_bitwise(
            "transition states",
            &got.states,
            &want.states,
        ));
        c.push(compare_bitwise(
            "transition next states",
            &got.next_states,
            &want.next_states,
        ));
        c.push(compare_exact(
            "transition actions",
            &got.actions,
            &want.actions,
        ));
        c.push(compare_f32(
            "transition rewards",
            &got.rewards,
            &want
                .rewards
                .iter()
                .map(|&v| f64::from(v))
                .collect::<Vec<_>>(),
            REWARD_REDUCTION,
        ));
        c.push(compare_bitwise(
            "transition discounts",
            &got.discounts,
            &want.discounts,
        ));
    }
    let rep = &gpu.after.replay;
    c.push(compare_f32(
        "replay rewards",
        &rep.store.rewards,
        &o.replay
            .store
            .rewards
            .iter()
            .map(|&v| f64::from(v))
            .collect::<Vec<_>>(),
        REWARD_REDUCTION,
    ));
    c.push(compare_bitwise(
        "replay states",
        &rep.store.states,
        &o.replay.store.states,
    ));
    c.push(compare_exact(
        "replay actions",
        &rep.store.actions,
        &o.replay.store.actions,
    ));
    c.push(compare_exact(
        "replay cursor, size, sample step",
        &[rep.ctl.cursor, rep.ctl.size, rep.ctl.sample_step],
        &[
            o.replay.ctl.cursor,
            o.replay.ctl.size,
            o.replay.ctl.sample_step,
        ],
    ));
    c.push(compare_bitwise(
        "replay discounts",
        &rep.store.discounts,
        &o.replay.store.discounts,
    ));
    let leaves = cfg.replay.leaves();
    // New priorities come from each side's own forward (float32 on the GPU): the loss's
    // GEMM-chain bound, as check_qnet_update holds them; bitwise before any update.
    let prio_tol = if kind == StepKind::Learn {
        tol.loss
    } else {
        REPLAY_PRIORITY
    };
    let want_tree: Vec<f64> = o.replay.tree[leaves..]
        .iter()
        .map(|&v| f64::from(v))
        .collect();
    c.push(compare_rel_norm(
        "replay priorities",
        &rep.tree[leaves..],
        &want_tree,
        prio_tol,
    ));
    c.push(compare_rel_norm(
        "replay max priority",
        &[rep.ctl.max_priority],
        &[f64::from(o.replay.ctl.max_priority)],
        prio_tol,
    ));
    if let Some(u) = rec.updates.last() {
        let gu = grec.updates.last().ok_or_else(|| {
            Error::Shape("the GPU's step made no update where the oracle's did".into())
        })?;
        let (idx, w) = (&gu.indices, &gu.weights);
        c.push(compare_exact("sampled indices", idx, &u.indices));
        c.push(compare_f32(
            "importance weights",
            w,
            &u.weights.iter().map(|&v| f64::from(v)).collect::<Vec<_>>(),
            REPLAY_IS_WEIGHT,
        ));
        c.push(compare_rel_norm(
            "loss",
            &[gu.loss as f32],
            &[u.loss],
            tol.loss,
        ));
        let want_prio: Vec<f64> = u.td_abs.iter().map(|&v| f64::from(v)).collect();
        c.push(compare_rel_norm(
            "priorities",
            &gu.td_abs,
            &want_prio,
            tol.loss,
        ));
        let (gon, gtg) = (&gpu.after.online, &gpu.after.target);
        let disp = |p: &[f32]| -> Vec<f64> {
            p.iter()
                .zip(&online0)
                .map(|(&x, &x0)| f64::from(x) - f64::from(x0))
                .collect()
        };
        let got_disp: Vec<f32> = disp(gon).iter().map(|&v| v as f32).collect();
        c.push(compare_rel_norm(
            "parameter displacement",
            &got_disp,
            &disp(&o.online),
            QNET_TRAJECTORY,
        ));
        let tgt_disp: Vec<f32> = disp(gtg).iter().map(|&v| v as f32).collect();
        c.push(compare_rel_norm(
            "target displacement",
            &tgt_disp,
            &disp(&o.target),
            QNET_TRAJECTORY,
        ));
        c.push(compare_exact(
            "adam step",
            &[gpu.after.adam.step],
            &[o.adam.step],
        ));
    }
    Ok(c)
}

/// Every part of two trainers' states, bitwise: envs, reward state, n-step ring, replay,
/// both networks, Adam, the epsilon counter.
pub fn compare_states(a: &OracleTrainer, b: &OracleTrainer) -> Vec<Comparison> {
    let mut c = super::env::compare_env_states(&a.env, &b.env);
    c.push(compare_bitwise(
        "reward global",
        &a.reward_global.to_words(),
        &b.reward_global.to_words(),
    ));
    c.push(compare_bitwise(
        "reward outcome ema",
        &a.reward_envs.outcome_ema,
        &b.reward_envs.outcome_ema,
    ));
    c.push(compare_exact(
        "reward positions",
        &a.reward_envs.prev_position,
        &b.reward_envs.prev_position,
    ));
    c.push(compare_exact(
        "reward steps since done",
        &a.reward_envs.steps_since_done,
        &b.reward_envs.steps_since_done,
    ));
    c.push(compare_bitwise(
        "ring states",
        &a.ring.states,
        &b.ring.states,
    ));
    c.push(compare_bitwise(
        "ring rewards",
        &a.ring.rewards,
        &b.ring.rewards,
    ));
    c.push(compare_bitwise(
        "ring next states",
        &a.ring.next_states,
        &b.ring.next_states,
    ));
    c.push(compare_exact(
        "ring actions",
        &a.ring.actions,
        &b.ring.actions,
    ));
    c.push(compare_exact(
        "ring reasons",
        &a.ring.reasons,
        &b.ring.reasons,
    ));
    c.push(compare_exact("ring counts", &a.ring.counts, &b.ring.counts));
    c.push(compare_bitwise(
        "replay states",
        &a.replay.store.states,
        &b.replay.store.states,
    ));
    c.push(compare_bitwise(
        "replay rewards",
        &a.replay.store.rewards,
        &b.replay.store.rewards,
    ));
    c.push(compare_bitwise(
        "replay next states",
        &a.replay.store.next_states,
        &b.replay.store.next_states,
    ));
    c.push(compare_exact(
        "replay actions",
        &a.replay.store.actions,
        &b.replay.store.actions,
    ));
    c.push(compare_bitwise(
        "replay max priority",
        &[a.replay.ctl.max_priority],
        &[b.replay.ctl.max_priority],
    ));
    c.push(compare_bitwise(
        "replay discounts",
        &a.replay.store.discounts,
        &b.replay.store.discounts,
    ));
    c.push(compare_bitwise(
        "replay tree",
        &a.replay.tree,
        &b.replay.tree,
    ));
    c.push(compare_exact(
        "replay ctl",
        &[
            a.replay.ctl.cursor,
            a.replay.ctl.size,
            a.replay.ctl.sample_step,
        ],
        &[
            b.replay.ctl.cursor,
            b.replay.ctl.size,
            b.replay.ctl.sample_step,
        ],
    ));
    c.push(compare_bitwise("online parameters", &a.online, &b.online));
    c.push(compare_bitwise("target parameters", &a.target, &b.target));
    let f = |v: &[f64]| v.iter().map(|&x| x as f32).collect::<Vec<f32>>();
    c.push(compare_bitwise("adam m", &f(&a.adam.m), &f(&b.adam.m)));
    c.push(compare_bitwise("adam v", &f(&a.adam.v), &f(&b.adam.v)));
    c.push(compare_exact(
        "adam step, epsilon step",
        &[a.adam.step, a.epsilon_step],
        &[b.adam.step, b.epsilon_step],
    ));
    c
}

/// Two CUDA trainers of `cfg` (the update on a stream of its own where `overlap[i]`), each
/// set up by `setup` (given which one it is: 0 or 1), run `steps` steps side by side; after
/// every step their whole states compared bitwise (and their metric sums at the end).
pub fn twin_runs(
    gpu: &Gpu,
    cfg: &TrainConfig,
    market: &Market,
    steps: usize,
    overlap: [bool; 2],
    setup: impl Fn(&mut CudaTrainer, usize) -> Result<()>,
) -> Result<Vec<Comparison>> {
    let mut twins = [
        CudaTrainer::with_overlap(gpu, cfg, market, overlap[0])?,
        CudaTrainer::with_overlap(gpu, cfg, market, overlap[1])?,
    ];
    for (i, t) in twins.iter_mut().enumerate() {
        setup(t, i)?;
    }
    let mut views = [
        OracleTrainer::new(cfg, market).map_err(oracle_err)?,
        OracleTrainer::new(cfg, market).map_err(oracle_err)?,
    ];
    let mut out = Vec::new();
    for t in 0..steps {
        let kind = cfg
            .schedule
            .kind(t as u64, cfg.env.envs, cfg.qnet.n_step, cfg.replay.capacity);
        for (g, v) in twins.iter_mut().zip(views.iter_mut()) {
            g.step_kind(kind)?;
            g.download_into(v)?;
        }
        merge_step(&mut out, t, compare_states(&views[0], &views[1]));
    }
    let [a, b] = &mut twins;
    let (ma, mb) = (a.take_metrics()?, b.take_metrics()?);
    out.push(compare_exact(
        "metric sums (bits)",
        &f64_words(&ma.to_words()),
        &f64_words(&mb.to_words()),
    ));
    Ok(out)
}

/// Doubles as their bits in u32 halves (exact comparison of f64 values).
fn f64_words(v: &[f64]) -> Vec<u32> {
    v.iter()
        .flat_map(|x| {
            let b = x.to_bits();
            [(b >> 32) as u32, b as u32]
        })
        .collect()
}
