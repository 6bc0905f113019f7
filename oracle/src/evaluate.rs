//! Evaluation of a policy on a market split, deterministic: N envs stepped by the
//! environment's own stages (fill, barriers, auto-reset) with the policy's actions, every
//! ended episode's net PnL (fills and exits, after commissions) collected. The policies:
//! the greedy policy of a Q-network (epsilon 0), the uniformly random policy (epsilon 1,
//! the same Philox draws as the trainer's exploration), and the `Planted` rule that holds
//! one contract in the direction of a feature's sign (the known answer on a market whose
//! generator plants that feature's predictive power).

use crate::action::{BRANCH_COUNT, BUY, HOLD, MARKET, SELL};
use crate::env::{
    action_select, barriers, fill_step, state_gather, EnvConfig, EnvMarket, EnvState, Split,
    END_OF_DATA, TIME_LIMIT,
};
use crate::qnet::{branch_rows, forward, QNetConfig};

/// Who picks the actions.
#[derive(Clone, Copy, Debug)]
pub enum Policy<'a> {
    /// argmax of each branch's Q-values of `params`.
    Greedy {
        cfg: &'a QNetConfig,
        params: &'a [f32],
    },
    /// Uniform over each branch (Philox, as exploration).
    Random,
    /// Target position sign(feature `feature` of the bar) contracts (one), by market orders;
    /// flat where the feature is within `dead_band` of 0.
    Planted { feature: usize, dead_band: f32 },
}

/// What an evaluation measured.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Evaluation {
    pub episodes: usize,
    /// Mean net PnL per ended episode (account currency) and its standard error.
    pub mean_pnl: f64,
    pub std_error: f64,
    /// Sum over ended episodes.
    pub total_pnl: f64,
    /// Mean trading cost per ended episode: commissions, and for every contract traded at
    /// a price other than the bar's mid (fills, and exits at the touch at a time limit or the
    /// end of data) the distance to the mid.
    pub mean_cost: f64,
    /// Mean gross PnL per ended episode (net PnL + costs) and its standard error: what the
    /// policy's positions earned from price moves alone.
    pub mean_gross: f64,
    pub gross_std_error: f64,
    /// Filled orders.
    pub fills: usize,
    /// Env steps run.
    pub env_steps: usize,
}

impl Evaluation {
    /// `mean / std_error`: how many standard errors the mean PnL is from 0.
    pub fn z(&self) -> f64 {
        if self.std_error > 0.0 {
            self.mean_pnl / self.std_error
        } else {
            0.0
        }
    }

    /// `mean_gross / gross_std_error`.
    pub fn gross_z(&self) -> f64 {
        if self.gross_std_error > 0.0 {
            self.mean_gross / self.gross_std_error
        } else {
            0.0
        }
    }
}

/// Actions of the planted rule for env n: buy or sell the difference to the target.
fn planted_actions(m: &EnvMarket, st: &EnvState, feature: usize, dead_band: f32) -> Vec<i32> {
    let mut out = Vec::with_capacity(st.len() * BRANCH_COUNT);
    for n in 0..st.len() {
        let x = m.features[st.bar[n] as usize * m.feature_dim + feature];
        let target = if x > dead_band {
            1
        } else if x < -dead_band {
            -1
        } else {
            0
        };
        let q = target - st.position[n];
        let (side, size) = match q.signum() {
            1 => (BUY, q - 1),
            -1 => (SELL, -q - 1),
            _ => (HOLD, 0),
        };
        out.extend_from_slice(&[side, size, MARKET]);
    }
    out
}

/// The actions `[N x 3]` `policy` takes in the envs' states `st` (greedy: epsilon 0, the
/// Q-values of the f64 forward rounded to f32 as the trainer acts; random: epsilon 1, the
/// Philox draws of exploration keyed by `cfg.seed`).
pub fn policy_actions(
    cfg: &EnvConfig,
    branches: &[usize],
    m: &EnvMarket,
    st: &EnvState,
    policy: Policy,
) -> Vec<i32> {
    match policy {
        Policy::Greedy { cfg: q, params } => {
            let states = state_gather(cfg, m, st);
            let f = forward(q, params, &states);
            let rows: Vec<f32> = branch_rows(q, &f.q, st.len(), 1)
                .into_iter()
                .map(|v| v as f32)
                .collect();
            action_select(cfg.seed, branches, 0.0, &rows, st)
        }
        Policy::Random => action_select(
            cfg.seed,
            branches,
            1.0,
            &vec![0.0; st.len() * branches.iter().sum::<usize>()],
            st,
        ),
        Policy::Planted { feature, dead_band } => planted_actions(m, st, feature, dead_band),
    }
}

/// Mean and standard error of `xs` (0, 0 when empty).
fn mean_se(xs: &[f64]) -> (f64, f64) {
    let k = xs.len();
    let mean = if k > 0 {
        xs.iter().sum::<f64>() / k as f64
    } else {
        0.0
    };
    let var = if k > 1 {
        xs.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (k - 1) as f64
    } else {
        0.0
    };
    (mean, (var / k.max(1) as f64).sqrt())
}

/// Run `policy` on `split` of `m` for `steps` steps of `cfg.envs` envs (from the envs'
/// Philox starts with `cfg.seed`), collecting every ended episode's net PnL and costs.
pub fn evaluate(
    cfg: &EnvConfig,
    branches: &[usize],
    m: &EnvMarket,
    split: Split,
    policy: Policy,
    steps: usize,
) -> Evaluation {
    let mut st = EnvState::new(cfg, split);
    let (mut pnl, mut cost) = (vec![0.0f64; cfg.envs], vec![0.0f64; cfg.envs]);
    let (mut ended, mut ended_gross) = (Vec::new(), Vec::new());
    let mut fills = 0;
    let pv = f64::from(cfg.point_value);
    let mid = |b: usize| (f64::from(m.bid[b]) + f64::from(m.ask[b])) / 2.0;
    for _ in 0..steps {
        let actions = policy_actions(cfg, branches, m, &st, policy);
        let before = st.position.clone();
        let f = fill_step(cfg, m, &mut st, &actions);
        for n in 0..cfg.envs {
            if f.filled[n] == 1 {
                fills += 1;
                let q = f64::from((st.position[n] - before[n]).abs());
                cost[n] += q
                    * (f64::from(cfg.commission)
                        + (f64::from(f.price[n]) - mid(st.bar[n] as usize)).abs() * pv);
            }
        }
        let (held, bars) = (st.position.clone(), st.bar.clone());
        let out = barriers(cfg, m, split, &mut st, &f.net_before);
        for n in 0..cfg.envs {
            let size = f64::from(held[n].abs());
            if out.done[n] == 1.0 && size > 0.0 {
                let t = bars[n] as usize + 1;
                let at_touch = out.reason[n] == TIME_LIMIT || out.reason[n] == END_OF_DATA;
                let spread = if at_touch {
                    (f64::from(m.ask[t]) - f64::from(m.bid[t])) / 2.0 * pv
                } else {
                    0.0
                };
                cost[n] += size * (f64::from(cfg.commission) + spread);
            }
            pnl[n] += f64::from(out.pnl[n]);
            if out.done[n] == 1.0 {
                let (p, c) = (std::mem::take(&mut pnl[n]), std::mem::take(&mut cost[n]));
                ended.push((p, c));
                ended_gross.push(p + c);
            }
        }
    }
    let net: Vec<f64> = ended.iter().map(|e| e.0).collect();
    let (mean_pnl, std_error) = mean_se(&net);
    let (mean_gross, gross_std_error) = mean_se(&ended_gross);
    let k = ended.len().max(1) as f64;
    Evaluation {
        episodes: ended.len(),
        mean_pnl,
        std_error,
        total_pnl: net.iter().sum(),
        mean_cost: ended.iter().map(|e| e.1).sum::<f64>() / k,
        mean_gross,
        gross_std_error,
        fills,
        env_steps: steps * cfg.envs,
    }
}

/// The known-answer learning task: a synthetic market whose order-book imbalance feature
/// (`ofi`) leans toward the next minute's move (`SyntheticConfig::imbalance_signal` = 1,
/// correlation about 0.8), a run config that learns it on either backend, and the judge:
/// the greedy policy on the test split (never trained on) against the planted rule and the
/// random policy.
pub struct PlantedTask {
    pub market: crate::features::Market,
    pub cfg: crate::TrainConfig,
    /// Training steps of the run.
    pub steps: u64,
}

/// The three evaluations of a trained network on the task's test split.
#[derive(Clone, Debug)]
pub struct Verdict {
    pub greedy: Evaluation,
    pub planted: Evaluation,
    pub random: Evaluation,
}

impl Verdict {
    /// Why the network has not learned the task (empty: it has): the greedy policy's test
    /// PnL at least 3 standard errors above 0 and at least half the planted rule's; and the
    /// task itself sound (the planted rule earns, 3 standard errors; the random policy
    /// loses its costs and no more: gross PnL within 3 standard errors of 0).
    pub fn failures(&self) -> Vec<String> {
        let (g, p, r) = (&self.greedy, &self.planted, &self.random);
        let mut out = Vec::new();
        if p.z() < 3.0 {
            out.push(format!(
                "the planted rule does not earn (z {:.1}): the task has no answer",
                p.z()
            ));
        }
        if !(r.mean_pnl < 0.0 && r.gross_z().abs() < 3.0) {
            out.push(format!(
                "the random policy does not just lose its costs (net {:.1}, gross z {:.1})",
                r.mean_pnl,
                r.gross_z()
            ));
        }
        if g.episodes < 300 || p.episodes < 300 || r.episodes < 300 {
            out.push(format!(
                "too few episodes ({}, {}, {})",
                g.episodes, p.episodes, r.episodes
            ));
        }
        if g.z() < 3.0 {
            out.push(format!(
                "the greedy policy's test PnL {:.1} is not 3 standard errors above 0 (z {:.1})",
                g.mean_pnl,
                g.z()
            ));
        }
        if g.mean_pnl < 0.5 * p.mean_pnl {
            out.push(format!(
                "the greedy policy earns {:.1}, less than half the planted rule's {:.1}",
                g.mean_pnl, p.mean_pnl
            ));
        }
        out
    }

    /// One line per policy.
    pub fn table(&self) -> String {
        [("greedy", &self.greedy), ("planted", &self.planted), ("random", &self.random)]
            .iter()
            .map(|(name, e)| {
                format!(
                    "{name:<8} episodes {:>4}  mean PnL {:>8.1} (se {:>5.1}, z {:>5.1})  cost {:>7.1}  gross {:>7.1} (z {:>5.1})",
                    e.episodes,
                    e.mean_pnl,
                    e.std_error,
                    e.z(),
                    e.mean_cost,
                    e.mean_gross,
                    e.gross_z()
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// Envs and steps of each evaluation (about 500 ended episodes each).
pub const JUDGE_ENVS: usize = 64;
pub const JUDGE_STEPS: usize = 2000;

impl PlantedTask {
    /// The market (the default synthetic market with `imbalance_signal` = 1) and the run:
    /// 32 envs for 12 000 steps (384 000 transitions, about 11 000 updates of 64), a
    /// network of 64-wide layers and 21 atoms, Adam at 1e-3, epsilon from 1 to 0.05 over
    /// the first half, a hard target sync every 250 updates.
    pub fn new() -> Result<PlantedTask, crate::market::MarketError> {
        use crate::market::{synthetic, SyntheticConfig};
        let steps = 12_000u64;
        let bars = synthetic(&SyntheticConfig {
            imbalance_signal: 1.0,
            ..SyntheticConfig::default()
        })?;
        let market = crate::features::build(&bars, &crate::features::FeatureConfig::default())?;
        let mut cfg = crate::TrainConfig::default();
        cfg.env.envs = 32;
        (
            cfg.qnet.h1,
            cfg.qnet.h2,
            cfg.qnet.value_hidden,
            cfg.qnet.adv_hidden,
            cfg.qnet.atoms,
        ) = (64, 64, 32, 32, 21);
        cfg.qnet.lr = 1e-3;
        (cfg.replay.batch, cfg.replay.capacity, cfg.replay.beta_steps) =
            (64, 1 << 15, steps as u32);
        cfg.schedule.learn_start = 1024;
        cfg.schedule.target_period = 250;
        cfg.schedule.metrics_every = 1000;
        cfg.run.steps = steps;
        cfg.schedule.epsilon = crate::schedule::EpsilonSchedule {
            start: 1.0,
            end: 0.05,
            steps: steps as u32 / 2,
        };
        let cfg = cfg.resolve(market.feature_dim);
        Ok(PlantedTask { market, cfg, steps })
    }

    /// Evaluate the network `online` (of the task's config) on the test split, beside the
    /// planted rule and the random policy.
    pub fn judge(&self, online: &[f32]) -> Verdict {
        let em = EnvMarket::of(&self.market);
        let test = Split::test(&self.market);
        let cfg = EnvConfig {
            envs: JUDGE_ENVS,
            ..self.cfg.env.clone()
        };
        let branches = &self.cfg.qnet.branches;
        let run = |p: Policy| evaluate(&cfg, branches, &em, test, p, JUDGE_STEPS);
        Verdict {
            greedy: run(Policy::Greedy {
                cfg: &self.cfg.qnet,
                params: online,
            }),
            planted: run(Self::planted_rule()),
            random: run(Policy::Random),
        }
    }

    /// The task's planted rule: one contract in the direction of the `ofi` feature's sign.
    pub fn planted_rule() -> Policy<'static> {
        let ofi = crate::features::FEATURE_NAMES
            .iter()
            .position(|&n| n == "ofi")
            .unwrap_or(0);
        Policy::Planted {
            feature: ofi,
            dead_band: 0.0,
        }
    }
}
