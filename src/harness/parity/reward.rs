//! GPU-vs-oracle checks of the reward pipeline (spec: tallyho_oracle::reward): each stage
//! of the chain alone, whole steps by either path, the fused path against the chain, graph
//! replay against eager, and the EMAs over a long free run.
//!
//! What is bitwise and what is not: every per-env output and state is float32 in the
//! oracle's order, so bitwise. The reductions' EMAs are within one float ulp
//! (`REWARD_REDUCTION`: double sums in another order), the dispersion within its
//! cancellation bound (`reward_dispersion`). The controllers are then checked bitwise from
//! the GPU's own EMAs: the oracle reruns `Stage::Controllers` on them, since one last ulp of
//! an EMA may pass through the cancellation in `target / mapped - 1`.

use super::merge_step;
use crate::error::Result;
use crate::reward::{RewardPath, RewardPipeline};
use crate::runtime::Gpu;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tallyho_oracle::reward::{
    reward_stage, reward_step, RewardConfig, RewardEnvs, RewardGlobal, RewardOut, Stage,
};
use tallyho_oracle::tolerance::{reward_dispersion, reward_ema_drift, REWARD_REDUCTION};
use tallyho_oracle::{compare_bitwise, compare_exact, compare_f32, Comparison};

/// The env counts of the reward tests: one env, a few, under a warp, one block, not a block
/// multiple, and many blocks.
pub const SIZES: [usize; 7] = [1, 3, 31, 256, 1000, 4096, 8192];

/// How the envs trade from step to step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mix {
    /// Every env opens at step 0 and holds: no trade ever closes.
    NoDones,
    /// Every env opens at even steps and closes at odd ones.
    AllDones,
    /// About 30% of the envs change position each step (opens, closes, flips, resizes).
    Mixed,
}

impl Mix {
    pub const ALL: [Mix; 3] = [Mix::NoDones, Mix::AllDones, Mix::Mixed];
}

/// Fast rates, so that a few steps move every EMA and both controllers.
pub fn check_config() -> RewardConfig {
    RewardConfig {
        ema_rate: 0.2,
        scale_gain: 0.2,
        hold_gain: 0.2,
        ..RewardConfig::default()
    }
}

/// [`check_config`] with the differential Sharpe ratio option on (eta 0.05).
pub fn check_config_with_dsr() -> RewardConfig {
    RewardConfig {
        dsr_eta: 0.05,
        ..check_config()
    }
}

/// Both configs every reward check runs: the differential Sharpe ratio off and on.
pub fn check_configs() -> [RewardConfig; 2] {
    [check_config(), check_config_with_dsr()]
}

/// The env step's outputs, step by step: each env's step PnL and position. A position
/// change from an open position realizes a random float PnL of the env's own magnitude,
/// `10^-(i mod 13)` for env i (double sums of floats spanning fewer than ~29 binades are
/// exact in any order, so only PnLs this far apart make the reductions round and the
/// one-ulp tolerance bite); an open from flat pays a fee of that magnitude; else 0.
pub struct Trades {
    mix: Mix,
    rng: ChaCha8Rng,
    t: usize,
    pub pnl: Vec<f32>,
    pub position: Vec<i32>,
}

impl Trades {
    pub fn new(n: usize, mix: Mix, seed: u64) -> Self {
        Trades {
            mix,
            rng: ChaCha8Rng::seed_from_u64(seed),
            t: 0,
            pnl: vec![0.0; n],
            position: vec![0; n],
        }
    }

    pub fn advance(&mut self) {
        let t = self.t;
        for i in 0..self.position.len() {
            let before = self.position[i];
            self.position[i] = match self.mix {
                Mix::NoDones => 1 + (i % 3) as i32,
                Mix::AllDones => (t % 2 == 0) as i32 * if i % 2 == 0 { 2 } else { -3 },
                Mix::Mixed if self.rng.gen_bool(0.3) => self.rng.gen_range(-3..=3),
                Mix::Mixed => before,
            };
            self.pnl[i] = if self.position[i] == before {
                0.0
            } else if before != 0 {
                self.rng.gen_range(-50.0f32..50.0) * magnitude(i)
            } else {
                -self.rng.gen_range(0.5f32..5.0) * magnitude(i)
            };
        }
        self.t += 1;
    }
}

/// Env i's PnL magnitude: 1 down to 1e-12.
pub fn magnitude(i: usize) -> f32 {
    10f32.powi(-((i % 13) as i32))
}

/// Per-env outputs, bitwise (`work` only where the path writes it).
pub fn compare_out(got: &RewardOut, want: &RewardOut, with_work: bool) -> Vec<Comparison> {
    let mut out = vec![
        compare_bitwise("pnl", &got.pnl, &want.pnl),
        compare_bitwise("done", &got.done, &want.done),
        compare_bitwise("raw", &got.raw, &want.raw),
        compare_bitwise("abs", &got.abs, &want.abs),
        compare_exact("duration", &got.duration, &want.duration),
        compare_bitwise("reward", &got.reward, &want.reward),
    ];
    if with_work {
        out.push(compare_bitwise("work", &got.work, &want.work));
    }
    out
}

/// Per-env state, bitwise.
pub fn compare_envs(got: &RewardEnvs, want: &RewardEnvs) -> Vec<Comparison> {
    vec![
        compare_exact("prev_position", &got.prev_position, &want.prev_position),
        compare_exact(
            "steps_since_done",
            &got.steps_since_done,
            &want.steps_since_done,
        ),
        compare_bitwise("outcome_ema", &got.outcome_ema, &want.outcome_ema),
        compare_bitwise("dsr_a", &got.dsr_a, &want.dsr_a),
        compare_bitwise("dsr_b", &got.dsr_b, &want.dsr_b),
    ]
}

/// The global state after `stages` ran from `before`: the EMAs within one ulp where
/// `Stage::Ema` ran, the counts exact, the controllers bitwise from the GPU's own EMAs
/// where `Stage::Controllers` ran, the dispersion of `rewards` within its bound where
/// `Stage::Dispersion` ran; every word a stage did not write, bitwise.
pub fn compare_global(
    cfg: &RewardConfig,
    stages: &[Stage],
    before: &RewardGlobal,
    got: &RewardGlobal,
    want: &RewardGlobal,
    rewards: &[f32],
) -> Vec<Comparison> {
    let ran = |s: Stage| stages.contains(&s);
    let emas = |g: &RewardGlobal| [g.ema_duration, g.ema_abs_pnl, g.ema_outcome];
    let mut out = Vec::new();
    if ran(Stage::Ema) {
        let want64 = emas(want).map(f64::from);
        out.push(compare_f32(
            "global EMAs",
            &emas(got),
            &want64,
            REWARD_REDUCTION,
        ));
    } else {
        out.push(compare_bitwise("global EMAs", &emas(got), &emas(want)));
    }
    out.push(compare_bitwise(
        "global dones, updates",
        &[got.dones, got.updates],
        &[want.dones, want.updates],
    ));
    let controlled = if ran(Stage::Controllers) {
        let mut mid = RewardGlobal {
            ema_duration: got.ema_duration,
            ema_abs_pnl: got.ema_abs_pnl,
            ema_outcome: got.ema_outcome,
            dones: got.dones,
            updates: got.updates,
            ..*before
        };
        let mut none = RewardEnvs::new(0);
        reward_stage(
            Stage::Controllers,
            cfg,
            &[],
            &[],
            &mut none,
            &mut mid,
            &mut RewardOut::new(0),
        );
        mid
    } else {
        *want
    };
    out.push(compare_bitwise(
        "global scale, hold_bonus",
        &[got.scale, got.hold_bonus],
        &[controlled.scale, controlled.hold_bonus],
    ));
    if ran(Stage::Dispersion) {
        let tol = reward_dispersion(rewards, cfg.dispersion_floor);
        out.push(compare_f32(
            "global dispersion",
            &[got.dispersion],
            &[f64::from(want.dispersion)],
            tol,
        ));
    } else {
        out.push(compare_bitwise(
            "global dispersion",
            &[got.dispersion],
            &[want.dispersion],
        ));
    }
    out
}

/// Each stage of the chain alone: the oracle runs `warm` whole steps and the stages before
/// `stage` of the next, the GPU starts from that state and those buffers and launches
/// `stage`'s kernel(s) only; every buffer and the state compared after.
pub fn check_stage(
    gpu: &Gpu,
    cfg: &RewardConfig,
    stage: Stage,
    n: usize,
    mix: Mix,
    seed: u64,
) -> Result<Vec<Comparison>> {
    let mut trades = Trades::new(n, mix, seed);
    let (mut envs, mut global) = (RewardEnvs::new(n), RewardGlobal::new(cfg));
    // Three warm steps (opens, then at least one close under every mix but NoDones).
    for _ in 0..3 {
        trades.advance();
        reward_step(cfg, &trades.pnl, &trades.position, &mut envs, &mut global);
    }
    trades.advance();
    let mut out = RewardOut::new(n);
    // The stages before `stage` fill the step buffers it reads.
    for s in Stage::ALL.into_iter().take_while(|&s| s != stage) {
        reward_stage(
            s,
            cfg,
            &trades.pnl,
            &trades.position,
            &mut envs,
            &mut global,
            &mut out,
        );
    }
    let mut chain = RewardPipeline::new(gpu, cfg, n)?;
    chain.upload_state(&envs, &global)?;
    chain.upload_out(&out)?;
    let (dr, dp) = (
        gpu.stream.clone_htod(&trades.pnl)?,
        gpu.stream.clone_htod(&trades.position)?,
    );
    chain.stage(stage, &dr, &dp)?;
    let before = global;
    reward_stage(
        stage,
        cfg,
        &trades.pnl,
        &trades.position,
        &mut envs,
        &mut global,
        &mut out,
    );
    let (genvs, gglobal) = chain.download_state()?;
    let mut c = compare_out(&chain.read_out()?, &out, true);
    c.extend(compare_envs(&genvs, &envs));
    c.extend(compare_global(
        cfg,
        &[stage],
        &before,
        &gglobal,
        &global,
        &out.reward,
    ));
    Ok(fold_unchanged(stage, c))
}

/// The outputs (comparison names) a stage writes.
fn writes(stage: Stage) -> &'static [&'static str] {
    match stage {
        Stage::PnlDelta => &["pnl", "done", "work"],
        Stage::Shaping => &["work", "prev_position"],
        Stage::Snapshot => &["raw"],
        Stage::Abs => &["abs"],
        Stage::Duration => &["duration", "steps_since_done"],
        Stage::Ema => &["global EMAs", "global dones, updates"],
        Stage::Outcome => &["outcome_ema"],
        Stage::Scale => &["reward", "dsr_a", "dsr_b"],
        Stage::Controllers => &["global scale, hold_bonus"],
        Stage::Dispersion => &["global dispersion"],
    }
}

/// One row per output `stage` writes; the buffers it must leave alone folded into one
/// passing row (a failing one keeps its own row and name).
fn fold_unchanged(stage: Stage, c: Vec<Comparison>) -> Vec<Comparison> {
    let (mut out, rest): (Vec<_>, Vec<_>) = c
        .into_iter()
        .partition(|c| writes(stage).contains(&c.output.as_str()));
    let mut unchanged: Option<Comparison> = None;
    for r in rest {
        match &mut unchanged {
            _ if !r.passed() => out.push(r),
            Some(u) => u.merge(&r),
            None => {
                unchanged = Some(Comparison {
                    output: "every other buffer and state word, unchanged".into(),
                    ..r
                })
            }
        }
    }
    out.extend(unchanged);
    out
}

/// `steps` whole steps by `path` against the oracle's chain, each step checked on its own
/// (the oracle continues from the GPU's global state). The fused path is run with the
/// chain's working buffer poisoned, which must stay poison: the chain did not run.
pub fn check_steps(
    gpu: &Gpu,
    cfg: &RewardConfig,
    path: RewardPath,
    n: usize,
    mix: Mix,
    steps: usize,
    seed: u64,
) -> Result<Vec<Comparison>> {
    let mut trades = Trades::new(n, mix, seed);
    let mut chain = RewardPipeline::new(gpu, cfg, n)?;
    let (mut envs, mut global) = (RewardEnvs::new(n), RewardGlobal::new(cfg));
    let poison = vec![f32::NAN; n];
    let mut c = Vec::new();
    for t in 0..steps {
        trades.advance();
        let (dr, dp) = (
            gpu.stream.clone_htod(&trades.pnl)?,
            gpu.stream.clone_htod(&trades.position)?,
        );
        if path == RewardPath::Fused {
            gpu.stream.memcpy_htod(&poison, chain.work())?;
        }
        chain.step(path, &dr, &dp)?;
        let before = global;
        let want = reward_step(cfg, &trades.pnl, &trades.position, &mut envs, &mut global);
        let (got, (genvs, gglobal)) = (chain.read_out()?, chain.download_state()?);
        let mut step = compare_out(&got, &want, path == RewardPath::Unfused);
        if path == RewardPath::Fused {
            step.push(compare_bitwise(
                "chain work buffer still poison",
                &got.work,
                &poison,
            ));
        }
        step.extend(compare_envs(&genvs, &envs));
        step.extend(compare_global(
            cfg,
            &Stage::ALL,
            &before,
            &gglobal,
            &global,
            &want.reward,
        ));
        if mix == Mix::AllDones && t % 2 == 1 {
            step.push(compare_bitwise(
                "every env closed",
                &[gglobal.dones],
                &[n as f32],
            ));
        }
        merge_step(&mut c, t, step);
        global = gglobal;
    }
    Ok(c)
}

/// The fused kernel against the chain on the same inputs: every output and the whole
/// state bitwise at every step (the same sums in the same trees, the same updates).
pub fn check_fused_vs_unfused(
    gpu: &Gpu,
    cfg: &RewardConfig,
    n: usize,
    steps: usize,
    seed: u64,
) -> Result<Vec<Comparison>> {
    let mut trades = Trades::new(n, Mix::Mixed, seed);
    let (mut a, mut b) = (
        RewardPipeline::new(gpu, cfg, n)?,
        RewardPipeline::new(gpu, cfg, n)?,
    );
    let mut c = Vec::new();
    for t in 0..steps {
        trades.advance();
        let (dr, dp) = (
            gpu.stream.clone_htod(&trades.pnl)?,
            gpu.stream.clone_htod(&trades.position)?,
        );
        a.step(RewardPath::Unfused, &dr, &dp)?;
        b.step(RewardPath::Fused, &dr, &dp)?;
        merge_step(&mut c, t, compare_bitwise_all(&a, &b, false)?);
    }
    Ok(c)
}

/// Everything two pipelines hold, bitwise: outputs (with `work` if asked), state, global.
fn compare_bitwise_all(
    want: &RewardPipeline,
    got: &RewardPipeline,
    with_work: bool,
) -> Result<Vec<Comparison>> {
    let ((ew, gw), (eg, gg)) = (want.download_state()?, got.download_state()?);
    let mut c = compare_out(&got.read_out()?, &want.read_out()?, with_work);
    c.extend(compare_envs(&eg, &ew));
    c.push(compare_bitwise("global", &gg.to_words(), &gw.to_words()));
    Ok(c)
}

/// `path` eagerly on one pipeline and through its graph slot on another, over the same
/// input buffers rewritten each step: bitwise equal at every step; the graph is in replay
/// from the third step on and holds exactly the path's launches (1 fused, 12 chained).
pub fn check_graph(
    gpu: &Gpu,
    cfg: &RewardConfig,
    path: RewardPath,
    n: usize,
    steps: usize,
    seed: u64,
) -> Result<Vec<Comparison>> {
    let mut trades = Trades::new(n, Mix::Mixed, seed);
    let (mut eager, mut graphed) = (
        RewardPipeline::new(gpu, cfg, n)?,
        RewardPipeline::new(gpu, cfg, n)?,
    );
    let mut dr = gpu.stream.alloc_zeros::<f32>(n)?;
    let mut dp = gpu.stream.alloc_zeros::<i32>(n)?;
    let mut c = Vec::new();
    for t in 0..steps {
        trades.advance();
        gpu.stream.memcpy_htod(&trades.pnl, &mut dr)?;
        gpu.stream.memcpy_htod(&trades.position, &mut dp)?;
        eager.step(path, &dr, &dp)?;
        graphed.step_graphed(path, &dr, &dp)?;
        merge_step(
            &mut c,
            t,
            compare_bitwise_all(&eager, &graphed, path == RewardPath::Unfused)?,
        );
    }
    let launches = match path {
        RewardPath::Unfused => 12,
        RewardPath::Fused => 1,
    };
    let nodes = graphed.graph_nodes(path)?.unwrap_or(0);
    c.push(compare_exact(
        "kernel launches in the captured step",
        &[nodes as u32],
        &[launches],
    ));
    Ok(c)
}

/// `steps` steps by `path` and by the oracle, both running free (neither resynchronised):
/// the three global EMAs at every step within `reward_ema_drift` of the oracle's, the
/// counts exact, the per-env state bitwise at the end. (Scale, hold bonus and rewards are
/// not compared: they follow the EMAs through the controllers, so they drift with them.)
pub fn check_drift(
    gpu: &Gpu,
    cfg: &RewardConfig,
    path: RewardPath,
    n: usize,
    steps: usize,
    seed: u64,
) -> Result<Vec<Comparison>> {
    let mut trades = Trades::new(n, Mix::Mixed, seed);
    let mut chain = RewardPipeline::new(gpu, cfg, n)?;
    let (mut envs, mut global) = (RewardEnvs::new(n), RewardGlobal::new(cfg));
    let (mut got, mut want) = ([vec![], vec![], vec![]], [vec![], vec![], vec![]]);
    let (mut got_counts, mut want_counts) = (vec![], vec![]);
    for _ in 0..steps {
        trades.advance();
        let (dr, dp) = (
            gpu.stream.clone_htod(&trades.pnl)?,
            gpu.stream.clone_htod(&trades.position)?,
        );
        chain.step(path, &dr, &dp)?;
        reward_step(cfg, &trades.pnl, &trades.position, &mut envs, &mut global);
        let g = chain.download_state()?.1;
        for (j, (x, y)) in [
            (g.ema_duration, global.ema_duration),
            (g.ema_abs_pnl, global.ema_abs_pnl),
            (g.ema_outcome, global.ema_outcome),
        ]
        .into_iter()
        .enumerate()
        {
            got[j].push(x);
            want[j].push(f64::from(y));
        }
        got_counts.extend([g.dones, g.updates]);
        want_counts.extend([global.dones, global.updates]);
    }
    let mut c = Vec::new();
    for (j, name) in ["ema_duration", "ema_abs_pnl", "ema_outcome"]
        .into_iter()
        .enumerate()
    {
        let m = want[j].iter().fold(0.0f64, |m, x| m.max(x.abs())) * (1.0 + 1e-6);
        c.push(compare_f32(
            &format!("{name} over {steps} steps"),
            &got[j],
            &want[j],
            reward_ema_drift(m, cfg.ema_rate),
        ));
    }
    c.push(compare_bitwise(
        &format!("dones, updates over {steps} steps"),
        &got_counts,
        &want_counts,
    ));
    c.extend(compare_envs(&chain.download_state()?.0, &envs));
    Ok(c)
}
