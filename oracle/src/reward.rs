//! The reward pipeline: the spec of the unfused chain of `reward_*` kernels (one per
//! stage, in the order of [`Stage::ALL`]) and of the fused kernel that must compute the same.
//! It is the one definition of the transition's reward: it runs after the env's step
//! (`barriers`), on each env's step PnL (the net realized PnL of its fill and any barrier
//! exit, [`crate::env::Outcome::pnl`]) and its position after the step (a reset env is
//! flat, as after an exit), and keeps a small global state vector of statistics and
//! controllers that adapt the reward. The differential Sharpe ratio (Moody and Saffell
//! 1998) is an option of its last per-env stage (`dsr_eta > 0`), not a second reward.
//!
//! **Numerics.** Per-env stages are float32, each operation written out in the kernels'
//! order without contraction, so they are bitwise reproducible (as the environment's, see
//! [`crate::env`]). The two reductions over envs (the EMAs on done, the dispersion
//! statistic) accumulate in double: the kernels sum in a block tree and across blocks in
//! a fixed order, the oracle sums sequentially; double sums of float inputs agree to
//! ~1e-16 relative, so each result, rounded once to float, is within one float ulp
//! ([`crate::tolerance::REWARD_REDUCTION`]).

use crate::config::{require, ConfigError};
use serde::{Deserialize, Serialize};

/// |differential Sharpe ratio reward| is clipped here: its denominator is tiny early on.
pub const DSR_CLIP: f32 = 10.0;
/// The variance below which the differential Sharpe ratio is taken as 0.
pub const DSR_MIN_VARIANCE: f32 = 1e-12;

/// The stages of the chain, in order. Each is one kernel of the unfused path (the two
/// reductions, `Ema` and `Dispersion`, a partial and a finalize launch) and one arm of
/// [`reward_stage`]; [`Stage::kernel`] is the name they share.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Stage {
    PnlDelta,
    Shaping,
    Snapshot,
    Abs,
    Duration,
    Ema,
    Outcome,
    Scale,
    Controllers,
    Dispersion,
}

impl Stage {
    pub const ALL: [Stage; 10] = [
        Stage::PnlDelta,
        Stage::Shaping,
        Stage::Snapshot,
        Stage::Abs,
        Stage::Duration,
        Stage::Ema,
        Stage::Outcome,
        Stage::Scale,
        Stage::Controllers,
        Stage::Dispersion,
    ];

    /// The stage's kernel name in cuda/reward_stages.cu (`reward_ema` and
    /// `reward_dispersion` name a `_partial` and a `_finalize` kernel).
    pub fn kernel(self) -> &'static str {
        match self {
            Stage::PnlDelta => "reward_pnl_delta",
            Stage::Shaping => "reward_shaping",
            Stage::Snapshot => "reward_snapshot",
            Stage::Abs => "reward_abs",
            Stage::Duration => "reward_duration",
            Stage::Ema => "reward_ema",
            Stage::Outcome => "reward_outcome",
            Stage::Scale => "reward_scale",
            Stage::Controllers => "reward_controllers",
            Stage::Dispersion => "reward_dispersion",
        }
    }

    /// Its position in [`Stage::ALL`] (a fixture's record of which stage ran).
    pub fn index(self) -> usize {
        self as usize
    }

    pub fn of_index(i: usize) -> Option<Stage> {
        Stage::ALL.get(i).copied()
    }
}

/// Constants of the reward pipeline.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RewardConfig {
    /// Subtracted from the reward of a step that opens a position from flat.
    pub entry_cost: f32,
    /// Initial hold bonus per step with an open position (then adapted by the controller).
    pub hold_bonus: f32,
    /// A trade closed after fewer steps than this pays `min_hold_penalty`.
    pub min_hold: u32,
    pub min_hold_penalty: f32,
    /// Rate of the three global EMAs (trade duration, |trade PnL|, outcome), per step with a done.
    pub ema_rate: f32,
    /// Rate of each env's recent-outcome EMA, per done of that env.
    pub outcome_rate: f32,
    /// Scale controller: drives `scale x ema_abs_pnl` towards this.
    pub target_abs_reward: f32,
    pub scale_gain: f32,
    pub scale_min: f32,
    pub scale_max: f32,
    /// Hold controller: raises the hold bonus while trades last shorter than this, lowers it
    /// while they last longer.
    pub target_duration: f32,
    pub hold_gain: f32,
    pub hold_bonus_max: f32,
    /// Floor of |mean reward| in the dispersion statistic `var / |mean|`.
    pub dispersion_floor: f32,
    /// Differential Sharpe ratio adaptation rate eta (Moody and Saffell 1998): with eta > 0
    /// the reward is the differential Sharpe ratio of the scaled shaped reward ([`dsr`]);
    /// 0: the scaled shaped reward itself.
    #[serde(default)]
    pub dsr_eta: f32,
}

impl Default for RewardConfig {
    fn default() -> Self {
        RewardConfig {
            entry_cost: 0.02,
            hold_bonus: 0.001,
            min_hold: 5,
            min_hold_penalty: 0.1,
            ema_rate: 0.01,
            outcome_rate: 0.1,
            target_abs_reward: 1.0,
            scale_gain: 0.05,
            scale_min: 1e-4,
            scale_max: 1.0,
            target_duration: 20.0,
            hold_gain: 0.05,
            hold_bonus_max: 0.01,
            dispersion_floor: 1e-6,
            dsr_eta: 0.0,
        }
    }
}

impl RewardConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        let unit = |v: f32| v > 0.0 && v <= 1.0;
        let checks: [(bool, &'static str, f32, &'static str, &'static str); 12] = [
            (
                self.entry_cost >= 0.0,
                "entry_cost",
                self.entry_cost,
                ">= 0",
                "a cost such as 0.02, or 0 for none",
            ),
            (
                self.hold_bonus >= 0.0 && self.hold_bonus <= self.hold_bonus_max,
                "hold_bonus",
                self.hold_bonus,
                "[0, hold_bonus_max]",
                "start at or below hold_bonus_max",
            ),
            (
                self.min_hold_penalty >= 0.0,
                "min_hold_penalty",
                self.min_hold_penalty,
                ">= 0",
                "a penalty such as 0.1, or 0 for none",
            ),
            (
                unit(self.ema_rate),
                "ema_rate",
                self.ema_rate,
                "(0, 1]",
                "a rate such as 0.01",
            ),
            (
                unit(self.outcome_rate),
                "outcome_rate",
                self.outcome_rate,
                "(0, 1]",
                "a rate such as 0.1",
            ),
            (
                self.target_abs_reward > 0.0,
                "target_abs_reward",
                self.target_abs_reward,
                "> 0",
                "a target such as 1",
            ),
            (
                (0.0..1.0).contains(&self.scale_gain),
                "scale_gain",
                self.scale_gain,
                "[0, 1)",
                "a gain such as 0.05, or 0 for a fixed scale",
            ),
            (
                self.scale_min > 0.0 && self.scale_min <= self.scale_max,
                "scale_min",
                self.scale_min,
                "(0, scale_max]",
                "a positive floor below scale_max",
            ),
            (
                self.target_duration > 0.0,
                "target_duration",
                self.target_duration,
                "> 0",
                "a duration in steps such as 20",
            ),
            (
                (0.0..1.0).contains(&self.hold_gain),
                "hold_gain",
                self.hold_gain,
                "[0, 1)",
                "a gain such as 0.05, or 0 for a fixed bonus",
            ),
            (
                self.dispersion_floor > 0.0,
                "dispersion_floor",
                self.dispersion_floor,
                "> 0",
                "a small floor such as 1e-6",
            ),
            (
                (0.0..1.0).contains(&self.dsr_eta),
                "dsr_eta",
                self.dsr_eta,
                "[0, 1)",
                "a rate such as 0.01, or 0 for none",
            ),
        ];
        checks
            .into_iter()
            .try_for_each(|(ok, name, v, range, fix)| require(ok, name, v, range, fix))
    }
}

/// Each env's reward state.
#[derive(Clone, Debug, PartialEq)]
pub struct RewardEnvs {
    /// Position at the last step.
    pub prev_position: Vec<i32>,
    /// Steps since the env's last closed trade.
    pub steps_since_done: Vec<u32>,
    /// Recent-outcome EMA (outcome = sign of the closed trade's PnL).
    pub outcome_ema: Vec<f32>,
    /// Differential Sharpe ratio moving moments A (mean) and B (second moment) of the scaled
    /// reward (moved only where `dsr_eta > 0`).
    pub dsr_a: Vec<f32>,
    pub dsr_b: Vec<f32>,
}

impl RewardEnvs {
    pub fn new(n: usize) -> Self {
        RewardEnvs {
            prev_position: vec![0; n],
            steps_since_done: vec![0; n],
            outcome_ema: vec![0.0; n],
            dsr_a: vec![0.0; n],
            dsr_b: vec![0.0; n],
        }
    }

    /// Each field's length, in declaration order (all N in a well-formed state).
    pub fn field_lens(&self) -> [usize; 5] {
        [
            self.prev_position.len(),
            self.steps_since_done.len(),
            self.outcome_ema.len(),
            self.dsr_a.len(),
            self.dsr_b.len(),
        ]
    }

    pub fn len(&self) -> usize {
        self.prev_position.len()
    }

    pub fn is_empty(&self) -> bool {
        self.prev_position.is_empty()
    }
}

/// The global state vector, in device memory as 8 floats in this order.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RewardGlobal {
    pub ema_duration: f32,
    pub ema_abs_pnl: f32,
    pub ema_outcome: f32,
    /// Current reward scale (scale controller).
    pub scale: f32,
    /// Current hold bonus (hold controller).
    pub hold_bonus: f32,
    /// `var(reward) / max(|mean(reward)|, floor)` over the envs of the last step.
    pub dispersion: f32,
    /// Trades closed at the last step.
    pub dones: f32,
    /// Steps with at least one closed trade so far (the EMAs' update count).
    pub updates: f32,
}

impl RewardGlobal {
    /// EMAs at their neutral values (duration = target, |PnL| = target / scale so the scale
    /// controller starts at rest), scale 1 clamped into its range, the initial hold bonus.
    pub fn new(cfg: &RewardConfig) -> Self {
        let scale = 1.0f32.clamp(cfg.scale_min, cfg.scale_max);
        RewardGlobal {
            ema_duration: cfg.target_duration,
            ema_abs_pnl: cfg.target_abs_reward / scale,
            ema_outcome: 0.0,
            scale,
            hold_bonus: cfg.hold_bonus,
            dispersion: 0.0,
            dones: 0.0,
            updates: 0.0,
        }
    }

    pub fn to_words(self) -> [f32; 8] {
        [
            self.ema_duration,
            self.ema_abs_pnl,
            self.ema_outcome,
            self.scale,
            self.hold_bonus,
            self.dispersion,
            self.dones,
            self.updates,
        ]
    }

    pub fn of_words(w: &[f32; 8]) -> Self {
        RewardGlobal {
            ema_duration: w[0],
            ema_abs_pnl: w[1],
            ema_outcome: w[2],
            scale: w[3],
            hold_bonus: w[4],
            dispersion: w[5],
            dones: w[6],
            updates: w[7],
        }
    }
}

/// One step's per-env outputs.
#[derive(Clone, Debug, PartialEq)]
pub struct RewardOut {
    /// The step's PnL, the input (stage 1).
    pub pnl: Vec<f32>,
    /// 1.0 where a trade closed this step (the position went to 0 or flipped).
    pub done: Vec<f32>,
    /// The chain's working reward between stages 1 and 3 (the fused kernel keeps it in a
    /// register and never writes this buffer).
    pub work: Vec<f32>,
    /// The shaped reward before scaling (stage 3's snapshot).
    pub raw: Vec<f32>,
    /// |raw| (stage 4).
    pub abs: Vec<f32>,
    /// The closed trade's duration in steps where done, else 0 (stage 5).
    pub duration: Vec<u32>,
    /// The final reward: raw x scale, or its differential Sharpe ratio (stage 8).
    pub reward: Vec<f32>,
}

impl RewardOut {
    pub fn new(n: usize) -> Self {
        RewardOut {
            pnl: vec![0.0; n],
            done: vec![0.0; n],
            work: vec![0.0; n],
            raw: vec![0.0; n],
            abs: vec![0.0; n],
            duration: vec![0; n],
            reward: vec![0.0; n],
        }
    }
}

fn sign(x: f32) -> f32 {
    if x > 0.0 {
        1.0
    } else if x < 0.0 {
        -1.0
    } else {
        0.0
    }
}

/// One stage for N envs with step PnL `pnl` (the env's [`crate::env::Outcome::pnl`]) and
/// positions `position` after the env's step, on the step's buffers `out`. The stages, in
/// [`Stage::ALL`] order:
/// 1. `reward_pnl_delta`: `out.pnl = pnl`; done where `prev_position != 0` and the position
///    is 0 or of the other sign (a trade closed); work = pnl.
/// 2. `reward_shaping` (on work): `- entry_cost` where a position opens from flat, `+ hold_bonus`
///    (the global's) where a position is held, `- min_hold_penalty` where a trade closed
///    after fewer than `min_hold` steps (`steps_since_done + 1 < min_hold`);
///    `prev_position = position`.
/// 3. `reward_snapshot`: raw = work. 4. `reward_abs`: abs = |raw|.
/// 5. `reward_duration`: where done, duration = steps_since_done + 1 and the count
///    restarts at 0, else it counts up and duration = 0.
/// 6. `reward_ema`: over the envs with a done (if any), the means of duration, |pnl| and
///    sign(pnl), each summed in double; each global EMA `e += ema_rate (mean - e)` in
///    double, rounded once; `dones` = their count, `updates` += 1.
/// 7. `reward_outcome`: where done, `o += outcome_rate (sign(pnl) - o)`.
/// 8. `reward_scale`: `r = raw x scale`; reward = r, or with `dsr_eta > 0` the
///    differential Sharpe ratio of r on the env's moments, `dsr(dsr_eta, r, dsr_a, dsr_b)`
///    ([`dsr`]), which moves them.
/// 9. `reward_controllers`: `scale = clamp(scale (1 + scale_gain (target_abs_reward /
///    (scale ema_abs_pnl) - 1)), scale_min, scale_max)` (a multiplicative step towards the
///    scale at which the mean |trade PnL| maps to the target), and `hold_bonus =
///    clamp(hold_bonus + hold_gain hold_bonus_max (target_duration - ema_duration) /
///    target_duration, 0, hold_bonus_max)`; both only at a step with a done.
/// 10. `reward_dispersion`: over all N final rewards, in one pass of double sums
///     `m = sum r / N`, `v = max(sum r^2 / N - m^2, 0)` (the form one fused reduction
///     computes): `dispersion = v / max(|m|, dispersion_floor)`.
pub fn reward_stage(
    stage: Stage,
    cfg: &RewardConfig,
    pnl: &[f32],
    position: &[i32],
    envs: &mut RewardEnvs,
    global: &mut RewardGlobal,
    out: &mut RewardOut,
) {
    let n = envs.len();
    let closed = |out: &RewardOut, i: usize| out.done[i] == 1.0;
    match stage {
        Stage::PnlDelta => {
            for i in 0..n {
                out.pnl[i] = pnl[i];
                let (before, now) = (envs.prev_position[i], position[i]);
                let closed = before != 0 && (now == 0 || (now > 0) != (before > 0));
                out.done[i] = if closed { 1.0 } else { 0.0 };
                out.work[i] = out.pnl[i];
            }
        }
        Stage::Shaping => {
            for i in 0..n {
                let (before, now) = (envs.prev_position[i], position[i]);
                if before == 0 && now != 0 {
                    out.work[i] -= cfg.entry_cost;
                }
                if now != 0 {
                    out.work[i] += global.hold_bonus;
                }
                if closed(out, i) && envs.steps_since_done[i] + 1 < cfg.min_hold {
                    out.work[i] -= cfg.min_hold_penalty;
                }
                envs.prev_position[i] = now;
            }
        }
        Stage::Snapshot => out.raw.copy_from_slice(&out.work),
        Stage::Abs => {
            for i in 0..n {
                out.abs[i] = out.raw[i].abs();
            }
        }
        Stage::Duration => {
            for i in 0..n {
                if closed(out, i) {
                    out.duration[i] = envs.steps_since_done[i] + 1;
                    envs.steps_since_done[i] = 0;
                } else {
                    out.duration[i] = 0;
                    envs.steps_since_done[i] += 1;
                }
            }
        }
        Stage::Ema => {
            let (mut count, mut dur, mut abs_pnl, mut outcome) = (0.0f64, 0.0f64, 0.0f64, 0.0f64);
            for i in (0..n).filter(|&i| closed(out, i)) {
                count += 1.0;
                dur += f64::from(out.duration[i]);
                abs_pnl += f64::from(out.pnl[i].abs());
                outcome += f64::from(sign(out.pnl[i]));
            }
            global.dones = count as f32;
            if count > 0.0 {
                let rate = f64::from(cfg.ema_rate);
                let step = |e: f32, mean: f64| (f64::from(e) + rate * (mean - f64::from(e))) as f32;
                global.ema_duration = step(global.ema_duration, dur / count);
                global.ema_abs_pnl = step(global.ema_abs_pnl, abs_pnl / count);
                global.ema_outcome = step(global.ema_outcome, outcome / count);
                global.updates += 1.0;
            }
        }
        Stage::Outcome => {
            for i in (0..n).filter(|&i| closed(out, i)) {
                let o = envs.outcome_ema[i];
                envs.outcome_ema[i] = o + cfg.outcome_rate * (sign(out.pnl[i]) - o);
            }
        }
        Stage::Scale => {
            for i in 0..n {
                let r = out.raw[i] * global.scale;
                out.reward[i] = if cfg.dsr_eta > 0.0 {
                    dsr(cfg.dsr_eta, r, &mut envs.dsr_a[i], &mut envs.dsr_b[i])
                } else {
                    r
                };
            }
        }
        Stage::Controllers => {
            if global.dones > 0.0 {
                let mapped = (global.scale * global.ema_abs_pnl).max(f32::MIN_POSITIVE);
                let scale =
                    global.scale * (1.0 + cfg.scale_gain * (cfg.target_abs_reward / mapped - 1.0));
                global.scale = scale.clamp(cfg.scale_min, cfg.scale_max);
                let hold = global.hold_bonus
                    + cfg.hold_gain
                        * cfg.hold_bonus_max
                        * ((cfg.target_duration - global.ema_duration) / cfg.target_duration);
                global.hold_bonus = hold.clamp(0.0, cfg.hold_bonus_max);
            }
        }
        Stage::Dispersion => {
            let count = n.max(1) as f64;
            let mean = out.reward.iter().map(|&r| f64::from(r)).sum::<f64>() / count;
            let var = (out
                .reward
                .iter()
                .map(|&r| f64::from(r) * f64::from(r))
                .sum::<f64>()
                / count
                - mean * mean)
                .max(0.0);
            global.dispersion = (var / mean.abs().max(f64::from(cfg.dispersion_floor))) as f32;
        }
    }
}

/// One step of the chain on step PnL `pnl` and positions `position`: every stage in order
/// on fresh buffers.
pub fn reward_step(
    cfg: &RewardConfig,
    pnl: &[f32],
    position: &[i32],
    envs: &mut RewardEnvs,
    global: &mut RewardGlobal,
) -> RewardOut {
    let mut out = RewardOut::new(envs.len());
    for stage in Stage::ALL {
        reward_stage(stage, cfg, pnl, position, envs, global, &mut out);
    }
    out
}

/// The differential Sharpe ratio of return `r` (Moody and Saffell 1998, "Reinforcement
/// Learning for Trading", eq. 4) with moving moments A, B at rate eta:
/// `D = (B dA - (A / 2) dB) / (B - A^2)^(3/2)`, `dA = r - A`, `dB = r^2 - B`, then
/// `A += eta dA`, `B += eta dB`. D is 0 while `B - A^2 <= DSR_MIN_VARIANCE`, and clipped to
/// `[-DSR_CLIP, DSR_CLIP]`. float32, in the kernels' order, without contraction.
pub fn dsr(eta: f32, r: f32, a: &mut f32, b: &mut f32) -> f32 {
    let da = r - *a;
    let db = r * r - *b;
    let var = *b - *a * *a;
    let d = if var > DSR_MIN_VARIANCE {
        (*b * da - *a * 0.5 * db) / (var * var.sqrt())
    } else {
        0.0
    };
    *a += eta * da;
    *b += eta * db;
    d.clamp(-DSR_CLIP, DSR_CLIP)
}
