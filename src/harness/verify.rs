//! `tallyho verify`: the parity matrix on the GPU, one row per output checked. Every kernel
//! runs on fresh random inputs against the oracle (the same checks as the property tests,
//! from `parity`); each fused path against its unfused chain (the env step, the experience
//! step, the reward pipeline) and each graph against its eager launches; the whole training
//! step against the CPU trainer, and its fast paths against its slow ones, over N steps;
//! and the recorded fixtures through the kernels. The rows come in [`GROUPS`], each naming
//! the kernel files it checks, so that `--only` runs chosen rows and `tallyho mutants` the
//! rows that cover a changed file.

use crate::error::{Error, Result};
use crate::experience::ExperiencePath;
use crate::harness::fixtures::{self, Replayer};
use crate::harness::parity::{self, replay::ReplayCase};
use crate::reward::RewardPath;
use crate::runtime::Gpu;
use crate::trainer::{CudaTrainer, STEP_KERNELS};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use tallyho_oracle::Comparison;

#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub kernel: String,
    pub output: String,
    pub cases: usize,
    pub elements: usize,
    pub max_abs: f64,
    pub max_rel: f64,
    pub max_ulp: u64,
    /// Relative L2 error of the whole output, for outputs under a norm tolerance.
    pub rel_norm: Option<f64>,
    pub tolerance: String,
    pub passed: bool,
    pub first_failure: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub device: String,
    pub driver: String,
    pub seed: u64,
    /// The `--only` filters of the run (empty: every group).
    pub groups: Vec<String>,
    pub rows: Vec<Row>,
}

impl Report {
    pub fn passed(&self) -> bool {
        self.rows.iter().all(|r| r.passed)
    }
}

/// Accumulates comparisons into rows keyed by (kernel, output).
#[derive(Default)]
pub struct Matrix {
    rows: BTreeMap<(String, String), (usize, Comparison)>,
    order: Vec<(String, String)>,
}

impl Matrix {
    fn any_failed(&self) -> bool {
        self.rows.values().any(|(_, c)| !c.passed())
    }

    fn add(&mut self, kernel: &str, comparisons: Vec<Comparison>) {
        for c in comparisons {
            let key = (kernel.to_string(), c.output.clone());
            match self.rows.get_mut(&key) {
                Some((n, acc)) => {
                    *n += 1;
                    acc.merge(&c);
                }
                None => {
                    self.order.push(key.clone());
                    self.rows.insert(key, (1, c));
                }
            }
        }
    }

    fn into_rows(mut self) -> Vec<Row> {
        self.order
            .iter()
            .filter_map(|key| self.rows.remove(key).map(|(cases, c)| (key, cases, c)))
            .map(|((kernel, _), cases, c)| Row {
                kernel: kernel.clone(),
                output: c.output.clone(),
                cases,
                elements: c.len,
                max_abs: c.max_abs,
                max_rel: c.max_rel,
                max_ulp: c.max_ulp,
                rel_norm: c.tolerance.norm.then_some(c.rel_norm),
                tolerance: c.tolerance.describe(),
                passed: c.passed(),
                first_failure: c.check().err(),
            })
            .collect()
    }
}

/// What a run checks: the random cases per kernel, the steps of the whole-step rows, the
/// seed, the fixtures, and which groups (none given: every group).
#[derive(Clone, Debug)]
pub struct Options {
    pub cases: usize,
    pub steps: usize,
    pub seed: u64,
    pub fixture_dir: PathBuf,
    /// Group filters: a group runs where its name contains one of them, or one of them is a
    /// kernel file the group covers (`replay_sample` runs every group that checks it).
    pub only: Vec<String>,
    /// A fault planted in the CUDA trainer of the training-step rows (a test that those rows
    /// fail where the GPU's step is wrong): None in every real run.
    pub fault: Option<tallyho_oracle::trainer::trace::Fault>,
    /// Stop after the first group with a failing row (`tallyho mutants`: a caught mutant
    /// needs no more evidence).
    pub fail_fast: bool,
}

/// What a group's check needs.
pub struct Ctx<'a> {
    pub gpu: &'a Gpu,
    pub opts: &'a Options,
    progress: &'a dyn Fn(&str),
}

/// One group of rows of the matrix: its name, the kernel files (cuda/<file>.cu stems) whose
/// outputs it checks, and its check. `--only` selects groups by name or by a kernel file
/// they cover; `tallyho mutants` runs, for a planted fault in a file, the groups covering it.
pub struct Group {
    pub name: &'static str,
    covers: fn() -> Vec<&'static str>,
    check: fn(&Ctx, &mut Matrix) -> Result<()>,
}

impl Group {
    /// The kernel files whose outputs the group checks.
    pub fn covers(&self) -> Vec<&'static str> {
        (self.covers)()
    }

    fn selected_by(&self, filter: &str) -> bool {
        self.name.contains(filter) || self.covers().contains(&filter)
    }
}

const ENV_KERNELS: &[&str] = &[
    "state_gather",
    "action_select",
    "fill_step",
    "barriers",
    "env_step",
];
const QNET_KERNELS: &[&str] = &[
    "qnet_forward",
    "qnet_head",
    "qnet_head_matrix",
    "qnet_act",
    "qnet_loss",
    "qnet_backward",
    "optimizer_grad_norm",
    "optimizer_adam",
    "optimizer_target_sync",
];

/// Every group, in the order of the matrix (the whole training step, the slowest, last).
pub static GROUPS: &[Group] = &[
    Group {
        name: "philox",
        covers: || vec!["philox"],
        check: check_philox,
    },
    Group {
        name: "replay",
        covers: || {
            vec![
                "replay_insert",
                "replay_sample",
                "replay_gather",
                "replay_update_priorities",
            ]
        },
        check: check_replay,
    },
    Group {
        name: "transition",
        covers: || vec!["transition_assemble"],
        check: check_transition,
    },
    Group {
        name: "schedule",
        covers: || vec!["schedule"],
        check: check_schedule,
    },
    Group {
        name: "optimizer",
        covers: || {
            vec![
                "optimizer_grad_norm",
                "optimizer_adam",
                "optimizer_target_sync",
            ]
        },
        check: check_optimizer,
    },
    Group {
        name: "trainer_metrics",
        covers: || vec!["trainer_metrics"],
        check: check_trainer_metrics,
    },
    Group {
        name: "qnet",
        covers: || QNET_KERNELS.to_vec(),
        check: check_qnet,
    },
    Group {
        name: "env",
        covers: || ENV_KERNELS.to_vec(),
        check: check_env,
    },
    Group {
        name: "env fused vs unfused",
        covers: || ENV_KERNELS.to_vec(),
        check: check_env_fused,
    },
    Group {
        name: "experience",
        covers: || {
            vec![
                "experience_step",
                "state_gather",
                "qnet_forward",
                "qnet_head",
                "qnet_act",
                "env_step",
            ]
        },
        check: check_experience,
    },
    Group {
        name: "reward",
        covers: || vec!["reward_stages", "reward_fused"],
        check: check_reward,
    },
    Group {
        name: "fixtures",
        covers: || fixtures::kernels().collect(),
        check: check_fixtures,
    },
    Group {
        name: "training step",
        covers: || STEP_KERNELS.to_vec(),
        check: check_training_step,
    },
];

/// The groups `only` selects (every group where it is empty); a filter that selects none is
/// refused, naming the groups and kernel files there are.
pub fn select(only: &[String]) -> Result<Vec<&'static Group>> {
    for f in only {
        if !GROUPS.iter().any(|g| g.selected_by(f)) {
            let kernels: std::collections::BTreeSet<&str> =
                GROUPS.iter().flat_map(|g| g.covers()).collect();
            return Err(Error::Shape(format!(
                "--only {f:?} selects no group: give part of a group's name ({}) or a kernel file ({})",
                GROUPS.iter().map(|g| g.name).collect::<Vec<_>>().join(", "),
                kernels.into_iter().collect::<Vec<_>>().join(", ")
            )));
        }
    }
    Ok(GROUPS
        .iter()
        .filter(|g| only.is_empty() || only.iter().any(|f| g.selected_by(f)))
        .collect())
}

/// Run the groups `opts.only` selects (module doc), each on its own seeded stream.
pub fn run(gpu: &Gpu, opts: &Options, progress: impl Fn(&str)) -> Result<Report> {
    if opts.cases == 0 || opts.steps == 0 {
        return Err(Error::Shape(format!(
            "{} cases and {} steps check nothing: give at least 1 of each",
            opts.cases, opts.steps
        )));
    }
    let groups = select(&opts.only)?;
    gpu.load_all()?;
    let ctx = Ctx {
        gpu,
        opts,
        progress: &progress,
    };
    let mut m = Matrix::default();
    for g in groups {
        (g.check)(&ctx, &mut m)?;
        if opts.fail_fast && m.any_failed() {
            break;
        }
    }
    Ok(Report {
        device: gpu.name(),
        driver: gpu.driver_version(),
        seed: opts.seed,
        groups: opts.only.clone(),
        rows: m.into_rows(),
    })
}

impl Ctx<'_> {
    fn progress(&self, what: &str) {
        (self.progress)(what)
    }

    /// A stream of random cases of its own for each group, so that a group's cases do not
    /// depend on which groups ran before it.
    fn rng(&self, stream: u64) -> ChaCha8Rng {
        ChaCha8Rng::seed_from_u64(self.opts.seed.wrapping_add(stream))
    }
}

fn check_philox(ctx: &Ctx, m: &mut Matrix) -> Result<()> {
    ctx.progress("philox");
    let seed = ctx.opts.seed;
    for (i, n) in [1, 3, 50, 783, 4096, 100_003].into_iter().enumerate() {
        m.add(
            "philox",
            parity::philox::check_philox(ctx.gpu, n, seed.wrapping_add(i as u64))?,
        );
    }
    Ok(())
}

fn check_replay(ctx: &Ctx, m: &mut Matrix) -> Result<()> {
    let (gpu, cases) = (ctx.gpu, ctx.opts.cases);
    let mut rng = ctx.rng(0);
    for i in 0..cases {
        ctx.progress(&format!("replay case {}/{cases}", i + 1));
        let case = ReplayCase::random(&mut rng);
        m.add(
            "replay_insert",
            parity::replay::check_replay_insert(gpu, &case, case.batch * 3 / 2 + 1)?,
        );
        m.add(
            "replay_sample",
            parity::replay::check_replay_sample(gpu, &case)?,
        );
        m.add(
            "replay_gather",
            parity::replay::check_replay_gather(gpu, &case)?,
        );
        m.add(
            "replay_update_priorities",
            parity::replay::check_replay_update_priorities(gpu, &case)?,
        );
    }
    Ok(())
}

fn check_transition(ctx: &Ctx, m: &mut Matrix) -> Result<()> {
    let cases = ctx.opts.cases;
    let mut rng = ctx.rng(400);
    for i in 0..cases {
        ctx.progress(&format!("transition case {}/{cases}", i + 1));
        let case = parity::transition::TransitionCase::random(&mut rng);
        m.add(
            "transition_assemble",
            parity::transition::check_transition_assemble(ctx.gpu, &case)?,
        );
    }
    Ok(())
}

fn check_schedule(ctx: &Ctx, m: &mut Matrix) -> Result<()> {
    ctx.progress("schedules");
    for (i, s) in [(0.9, 0.05, 7), (1.0, 0.1, 1000), (0.3, 0.3, 0)]
        .into_iter()
        .enumerate()
    {
        let sched = tallyho_oracle::schedule::EpsilonSchedule {
            start: s.0,
            end: s.1,
            steps: s.2,
        };
        let steps = if i == 1 { 1003 } else { 12 };
        m.add(
            "schedule_epsilon",
            parity::schedule::check_schedule_epsilon(ctx.gpu, &sched, steps)?,
        );
    }
    Ok(())
}

fn check_optimizer(ctx: &Ctx, m: &mut Matrix) -> Result<()> {
    ctx.progress("optimizer");
    let (gpu, seed) = (ctx.gpu, ctx.opts.seed);
    for (i, (n, scale)) in [(1, 3.0), (783, 20.0), (4096, 0.01), (1_000_003, 0.05)]
        .into_iter()
        .enumerate()
    {
        m.add(
            "optimizer_grad_norm",
            parity::optimizer::check_optimizer_grad_norm(
                gpu,
                n,
                scale,
                seed.wrapping_add(100 + i as u64),
            )?,
        );
    }
    for (i, (n, step, g)) in [(3, 7, 50.0), (783, 0, 0.3), (100_003, 1234, 5.0)]
        .into_iter()
        .enumerate()
    {
        m.add(
            "optimizer_adam",
            parity::optimizer::check_optimizer_adam(
                gpu,
                n,
                step,
                g,
                seed.wrapping_add(200 + i as u64),
            )?,
        );
    }
    m.add(
        "optimizer_target_sync",
        parity::optimizer::check_optimizer_target_sync(gpu, 4099, seed.wrapping_add(300))?,
    );
    for (i, (n, period)) in [(1, 1), (4099, 3), (100_003, 1000)].into_iter().enumerate() {
        m.add(
            "optimizer_target_sync_every",
            parity::optimizer::check_optimizer_target_sync_every(
                gpu,
                n,
                period,
                seed.wrapping_add(310 + i as u64),
            )?,
        );
    }
    Ok(())
}

fn check_trainer_metrics(ctx: &Ctx, m: &mut Matrix) -> Result<()> {
    use parity::trainer_metrics::{self as pm, MetricsCase, BRANCHES};
    ctx.progress("training metrics");
    let seed = ctx.opts.seed;
    // Fixed sizes around one block, with and without non-finite inputs, then random cases
    // from a stream of their own.
    let mut metrics_rng = ctx.rng(600);
    let fixed = [1, 255, 257, 4099]
        .into_iter()
        .enumerate()
        .map(|(i, envs)| MetricsCase {
            envs,
            branches: BRANCHES.to_vec(),
            steps: 4,
            updates_per_step: 2,
            special: i % 2 == 1,
            seed: seed.wrapping_add(610 + i as u64),
        });
    let cases: Vec<MetricsCase> = fixed
        .chain((0..ctx.opts.cases).map(|_| MetricsCase::random(&mut metrics_rng)))
        .collect();
    for case in &cases {
        m.add(
            "trainer_metrics_step",
            pm::check_trainer_metrics_step(ctx.gpu, case)?,
        );
        m.add(
            "trainer_metrics_update",
            pm::check_trainer_metrics_update(ctx.gpu, case)?,
        );
    }
    Ok(())
}

fn check_qnet(ctx: &Ctx, m: &mut Matrix) -> Result<()> {
    let (gpu, seed) = (ctx.gpu, ctx.opts.seed);
    for atoms in [51, 1] {
        for (i, &batch) in parity::qnet::QNET_BATCHES.iter().enumerate() {
            ctx.progress(&format!("Q-network, {atoms} atoms, batch {batch}"));
            let case = parity::qnet::QNetCase {
                atoms,
                state_dim: 32,
                batch,
                seed: seed.wrapping_add(400 + i as u64),
            };
            let (trunk, head): (Vec<_>, Vec<_>) = parity::qnet::check_qnet_forward(gpu, &case)?
                .into_iter()
                .partition(|c| c.output.contains(" h"));
            m.add(&format!("qnet_forward (NA {atoms})"), trunk);
            m.add(&format!("qnet_head (NA {atoms})"), head);
            m.add(
                &format!("acting (NA {atoms})"),
                parity::qnet::check_acting(gpu, &case)?,
            );
            m.add(
                &format!("qnet_loss (NA {atoms})"),
                parity::qnet::check_qnet_loss(gpu, &case)?,
            );
            m.add(
                &format!("qnet_backward (NA {atoms})"),
                parity::qnet::check_qnet_backward(gpu, &case)?,
            );
        }
        ctx.progress(&format!("Q-network, {atoms} atoms: acting on 4096 states"));
        let case = parity::qnet::QNetCase {
            atoms,
            state_dim: 15,
            batch: 4096,
            seed: seed.wrapping_add(450),
        };
        m.add(
            &format!("qnet_act, acting (NA {atoms})"),
            parity::qnet::check_acting_with(gpu, &case, parity::qnet::ActingPath::Fused(None))?,
        );
        m.add(
            &format!("acting layer by layer (NA {atoms})"),
            parity::qnet::check_acting_with(gpu, &case, parity::qnet::ActingPath::Layers)?,
        );
        m.add(
            &format!("acting, tf32 option (NA {atoms})"),
            parity::qnet::check_acting_with(gpu, &case, parity::qnet::ActingPath::Tf32)?,
        );
        ctx.progress(&format!(
            "Q-network, {atoms} atoms: 10 updates against the oracle"
        ));
        let case = parity::qnet::QNetCase {
            atoms,
            state_dim: 32,
            batch: 64,
            seed: seed.wrapping_add(500),
        };
        m.add(
            &format!("qnet update x10 (NA {atoms})"),
            parity::qnet::check_qnet_update(gpu, &case, 10)?,
        );
    }
    Ok(())
}

fn check_env(ctx: &Ctx, m: &mut Matrix) -> Result<()> {
    let (gpu, cases) = (ctx.gpu, ctx.opts.cases);
    let mut rng = ctx.rng(700);
    for i in 0..cases {
        ctx.progress(&format!("environment case {}/{cases}", i + 1));
        let case = parity::env::EnvCase::random(&mut rng);
        m.add("state_gather", parity::env::check_state_gather(gpu, &case)?);
        m.add(
            "action_select",
            parity::env::check_action_select(gpu, &case)?,
        );
        m.add("fill_step", parity::env::check_fill_step(gpu, &case)?);
        m.add("barriers", parity::env::check_barriers(gpu, &case)?);
        m.add("env_step", parity::env::check_env_step(gpu, &case)?);
    }
    Ok(())
}

fn check_env_fused(ctx: &Ctx, m: &mut Matrix) -> Result<()> {
    let cases = ctx.opts.cases;
    let mut rng = ctx.rng(750);
    for i in 0..cases {
        ctx.progress(&format!(
            "env_step against its chain, case {}/{cases}",
            i + 1
        ));
        let case = parity::env::EnvCase::random(&mut rng);
        m.add(
            "env_step vs action_select, fill_step, barriers",
            parity::env::check_env_step_fused(ctx.gpu, &case)?,
        );
    }
    Ok(())
}

fn check_experience(ctx: &Ctx, m: &mut Matrix) -> Result<()> {
    use tallyho_oracle::env::{EnvConfig, EnvMarket, Split};
    ctx.progress("experience: 50 steps of 256 envs on the synthetic market, and its graph replay");
    let (gpu, seed) = (ctx.gpu, ctx.opts.seed);
    let market = crate::env::load_market(None)?;
    let (em, split) = (EnvMarket::of(&market), Split::train(&market));
    let cfg = EnvConfig {
        envs: 256,
        seed,
        ..EnvConfig::default()
    };
    m.add(
        "experience x50",
        parity::env::check_experience(gpu, &cfg, &em, split, 0.2, 50, 10)?.0,
    );
    m.add(
        "experience graph vs eager x10",
        parity::env::check_experience_graph(gpu, &cfg, &em, split, 10, None)?,
    );
    m.add(
        "experience graph vs eager x10, qnet_act",
        parity::env::check_experience_graph(gpu, &cfg, &em, split, 10, Some(32))?,
    );
    m.add(
        "experience_step vs state_gather, qnet_act, env_step x10",
        parity::env::check_experience_fused(gpu, &cfg, &em, split, 10, 16)?,
    );
    Ok(())
}

fn check_reward(ctx: &Ctx, m: &mut Matrix) -> Result<()> {
    use parity::reward::{self as pr, Mix};
    use tallyho_oracle::reward::Stage;
    let (gpu, seed, cases) = (ctx.gpu, ctx.opts.seed, ctx.opts.cases);
    ctx.progress("reward pipeline");
    let mut rng = ctx.rng(800);
    // The cases alternate between the differential Sharpe ratio option off and on.
    let configs = pr::check_configs();
    for i in 0..cases {
        ctx.progress(&format!("reward case {}/{cases}", i + 1));
        let (n, mix, s) = (
            rng.gen_range(1..=9000),
            Mix::ALL[rng.gen_range(0..3)],
            rng.gen::<u64>(),
        );
        let cfg = &configs[i % configs.len()];
        for stage in Stage::ALL {
            m.add(stage.kernel(), pr::check_stage(gpu, cfg, stage, n, mix, s)?);
        }
        m.add(
            "reward_stages (whole steps x6)",
            pr::check_steps(gpu, cfg, RewardPath::Unfused, n, mix, 6, s)?,
        );
        m.add(
            "reward_fused (whole steps x6)",
            pr::check_steps(gpu, cfg, RewardPath::Fused, n, mix, 6, s)?,
        );
        m.add(
            "reward_fused vs reward_stages x6",
            pr::check_fused_vs_unfused(gpu, cfg, n, 6, s)?,
        );
    }
    ctx.progress("reward pipeline: graph replay (the DSR option on), and 500 free-running steps");
    let (cfg, with_dsr) = (pr::check_config(), pr::check_config_with_dsr());
    for (path, name) in [
        (RewardPath::Unfused, "reward_stages"),
        (RewardPath::Fused, "reward_fused"),
    ] {
        m.add(
            &format!("{name} graph vs eager x10"),
            pr::check_graph(gpu, &with_dsr, path, 4096, 10, seed)?,
        );
        m.add(
            &format!("{name} EMAs x500 free-running"),
            pr::check_drift(gpu, &cfg, path, 4096, 500, seed)?,
        );
    }
    Ok(())
}

/// The whole training step (`parity::trainer`'s small run): the CUDA trainer against the
/// CPU trainer step by step, and the fast paths against the slow ones bitwise: graph replay
/// against eager launches, the update overlapped against one stream, the fused reward
/// against its chain, the one-launch experience step against its three launches.
fn check_training_step(ctx: &Ctx, m: &mut Matrix) -> Result<()> {
    use parity::trainer::{small_config, small_market, trainer_vs_oracle, twin_runs};
    let (gpu, steps) = (ctx.gpu, ctx.opts.steps);
    let market = small_market()?;
    let mut cfg = small_config(market.feature_dim);
    (cfg.env.seed, cfg.qnet.seed, cfg.replay.seed) = (ctx.opts.seed, ctx.opts.seed, ctx.opts.seed);
    ctx.progress(&format!(
        "training step: GPU against the CPU trainer, {steps} steps"
    ));
    let p = trainer_vs_oracle(gpu, &cfg, &market, steps, false, |_| Ok(()))?;
    let name = format!("training step, GPU vs CPU trainer x{steps}");
    m.add(&name, p.comparisons.clone());
    // A greedy pick the GPU made differently is accepted only at a near tie (module doc of
    // parity::trainer); one outside it is a failure, named by its step and env.
    let mut flips = tallyho_oracle::compare_exact::<u32>(
        "greedy flips outside the near-tie bound",
        &[p.bad_flips.len() as u32],
        &[0],
    );
    if let Some((t, n, k, gap, bound)) = p.bad_flips.first() {
        flips.output = format!(
            "{} (first at step {t}, env {n}, branch {k}: gap {gap:e} > {bound:e})",
            flips.output
        );
    }
    m.add(&name, vec![flips]);
    let twins: [(&str, [bool; 2], TwinSetup); 4] = [
        ("graph vs eager", [false; 2], |t, i| {
            t.set_graphs(i == 0);
            Ok(())
        }),
        ("overlapped vs one stream", [true, false], |t, i| {
            t.set_graphs(i == 0);
            Ok(())
        }),
        ("reward_fused vs reward_stages", [false; 2], |t, i| {
            t.set_reward_path(if i == 0 {
                RewardPath::Fused
            } else {
                RewardPath::Unfused
            });
            Ok(())
        }),
        // 64 envs act layer by layer by default; 16-row blocks make the fused path one
        // launch (experience_step), against state_gather, qnet_act and env_step.
        (
            "experience_step vs its three launches",
            [false; 2],
            |t, i| {
                t.net.set_act_block_rows(Some(16))?;
                if i == 1 {
                    t.set_experience_path(ExperiencePath::Unfused);
                }
                Ok(())
            },
        ),
    ];
    for (what, overlap, setup) in twins {
        ctx.progress(&format!("training step: {what}, {steps} steps"));
        let fault = ctx.opts.fault.clone();
        m.add(
            &format!("training step, {what} x{steps}"),
            twin_runs(gpu, &cfg, &market, steps, overlap, |t, i| {
                setup(t, i)?;
                // In the fast twin: its faulty step runs eagerly, the fault moves its output.
                t.plant_fault(if i == 0 { fault.clone() } else { None })
            })?,
        );
    }
    Ok(())
}

type TwinSetup = fn(&mut CudaTrainer, usize) -> Result<()>;

/// The recorded fixtures through the kernels: all of them, or where `--only` names kernel
/// files, theirs.
fn check_fixtures(ctx: &Ctx, m: &mut Matrix) -> Result<()> {
    ctx.progress("fixtures");
    let only = &ctx.opts.only;
    // Every fixture where no filter is given or one selects this group by name; else those
    // of the kernel files the filters name.
    let every = only.is_empty() || only.iter().any(|f| "fixtures".contains(f.as_str()));
    let keep = |k: &str| every || only.iter().any(|f| f == k);
    match fixtures::check_kernels(&ctx.opts.fixture_dir, Replayer::Gpu(ctx.gpu), keep) {
        Ok(pairs) => {
            for (kernel, c) in pairs {
                m.add(&format!("{kernel} (fixture)"), vec![c]);
            }
        }
        Err(e) => {
            let mut c = tallyho_oracle::compare_exact::<u32>("recorded outputs", &[1], &[0]);
            c.output = format!("fixtures: {e}");
            m.add("fixtures", vec![c]);
        }
    }
    Ok(())
}

fn table(report: &Report, markdown: bool) -> String {
    let head = [
        "kernel",
        "output",
        "cases",
        "elements",
        "max abs",
        "max rel",
        "max ULP",
        "rel L2",
        "tolerance",
        "verdict",
    ];
    let body: Vec<[String; 10]> = report
        .rows
        .iter()
        .map(|r| {
            [
                r.kernel.clone(),
                r.output.clone(),
                r.cases.to_string(),
                r.elements.to_string(),
                format!("{:.2e}", r.max_abs),
                format!("{:.2e}", r.max_rel),
                r.max_ulp.to_string(),
                r.rel_norm.map_or("-".into(), |v| format!("{v:.2e}")),
                r.tolerance.clone(),
                if r.passed {
                    "pass".into()
                } else {
                    "FAIL".into()
                },
            ]
        })
        .collect();
    let mut widths: Vec<usize> = head.iter().map(|h| h.len()).collect();
    for row in &body {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let line = |cells: Vec<&str>| -> String {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, &w)| format!("{c:<w$}"))
            .collect();
        if markdown {
            format!("| {} |\n", padded.join(" | "))
        } else {
            format!("{}\n", padded.join("  ").trim_end())
        }
    };
    let mut s = line(head.to_vec());
    if markdown {
        s += &line(
            widths
                .iter()
                .map(|&w| "-".repeat(w))
                .collect::<Vec<_>>()
                .iter()
                .map(|x| x.as_str())
                .collect(),
        );
    }
    for row in &body {
        s += &line(row.iter().map(|c| c.as_str()).collect());
    }
    s
}

pub fn text_table(report: &Report) -> String {
    let mut s = table(report, false);
    for r in report.rows.iter().filter(|r| !r.passed) {
        s += &format!(
            "FAIL {} {}: {}\n",
            r.kernel,
            r.output,
            r.first_failure.as_deref().unwrap_or("")
        );
    }
    s
}

pub fn markdown(report: &Report) -> String {
    format!(
        "# tallyho verify\n\nDevice: {} (driver {}), seed {}\n\n{}",
        report.device,
        report.driver,
        report.seed,
        table(report, true)
    )
}
