//! GPU-vs-oracle checks of the environment kernels (spec: tallyho_oracle::env): random
//! markets, portfolios, Q-values and actions, every output compared bitwise
//! (`tolerance::ENV`: both sides run the same float32 operations in the same order).

use super::merge_step;
use crate::env::Env;
use crate::error::{Error, Result};
use crate::experience::{Experience, ExperiencePath};
use crate::runtime::Gpu;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tallyho_oracle::env::{self as spec, EnvConfig, EnvMarket, EnvState, Fills, Outcome, Split};
use tallyho_oracle::{compare_bitwise, compare_exact, Comparison};

/// The action branches of every environment check (direction, size, order type).
pub const BRANCHES: [usize; 3] = tallyho_oracle::action::ACTION_BRANCHES;

/// Sizes and seed of one environment case.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct EnvCase {
    pub envs: usize,
    pub bars: usize,
    pub feature_dim: usize,
    pub seed: u64,
}

impl EnvCase {
    /// A random case: 1..=1100 envs (past one block), 3..=600 bars, 1..=12 features.
    pub fn random(rng: &mut impl Rng) -> EnvCase {
        EnvCase {
            envs: rng.gen_range(1..=1100),
            bars: rng.gen_range(3..=600),
            feature_dim: rng.gen_range(1..=12),
            seed: rng.gen(),
        }
    }

    /// Tight barriers and a short time limit, so that a few steps exercise every exit.
    pub fn config(&self) -> EnvConfig {
        EnvConfig {
            envs: self.envs,
            max_position: 7,
            take_profit: 0.0015,
            stop_loss: 0.001,
            max_steps: 12,
            seed: self.seed,
            ..EnvConfig::default()
        }
    }

    /// Episodes over all bars but the first.
    pub fn split(&self) -> Split {
        Split {
            lo: 1,
            hi: self.bars as u32,
        }
    }
}

/// A random market: mid a random walk on the 0.25 tick grid near 1650, spread 1-4 ticks,
/// high and low around the close, volatility in price units, features in [-3, 3).
pub fn random_market(rng: &mut impl Rng, bars: usize, feature_dim: usize) -> EnvMarket {
    let tick = 0.25f32;
    let mut mid = 1650.0f32;
    let mut m = EnvMarket {
        bars,
        feature_dim,
        features: (0..bars * feature_dim)
            .map(|_| rng.gen_range(-3.0..3.0))
            .collect(),
        bid: Vec::with_capacity(bars),
        ask: Vec::with_capacity(bars),
        high: Vec::with_capacity(bars),
        low: Vec::with_capacity(bars),
        close: Vec::with_capacity(bars),
        volatility: Vec::with_capacity(bars),
    };
    for _ in 0..bars {
        mid += tick * rng.gen_range(-6i32..=6) as f32;
        let half = tick * rng.gen_range(1..=4) as f32 * 0.5;
        m.bid.push(mid - half);
        m.ask.push(mid + half);
        m.close.push(mid + tick * rng.gen_range(-2i32..=2) as f32);
        m.high.push(mid + tick * rng.gen_range(0..=12) as f32);
        m.low.push(mid - tick * rng.gen_range(0..=12) as f32);
        m.volatility.push(rng.gen_range(0.05f32..3.0));
    }
    m
}

/// A random portfolio per env: bar in the start range, part of an episode gone, positions
/// of both signs (a third flat) entered near the bar's mid, PnL of both signs.
pub fn random_env_state(
    rng: &mut impl Rng,
    cfg: &EnvConfig,
    m: &EnvMarket,
    split: Split,
) -> EnvState {
    let mut st = EnvState::new(cfg, split);
    for n in 0..st.len() {
        let b = rng.gen_range(split.lo..split.hi - 1);
        st.bar[n] = b;
        st.steps[n] = rng.gen_range(0..cfg.max_steps);
        st.clock[n] = rng.gen();
        let pos = if rng.gen_bool(0.33) {
            0
        } else {
            rng.gen_range(-cfg.max_position..=cfg.max_position)
        };
        st.position[n] = pos;
        let mid = (m.bid[b as usize] + m.ask[b as usize]) * 0.5;
        st.entry[n] = if pos != 0 {
            mid + 0.25 * rng.gen_range(-8i32..=8) as f32
        } else {
            0.0
        };
        st.realized[n] = rng.gen_range(-2000.0..2000.0);
        st.fees[n] = rng.gen_range(0.0..100.0);
        st.equity[n] = rng.gen_range(-2000.0..2000.0);
    }
    st
}

/// A net realized PnL before the fill per env for `barriers` alone: the state's own
/// `realized - fees` (no fill) for a third of the envs, elsewhere that moved by a fill's
/// PnL net of its fee.
pub fn random_net_before(rng: &mut impl Rng, st: &EnvState) -> Vec<f32> {
    (0..st.len())
        .map(|n| {
            let net = st.realized[n] - st.fees[n];
            if rng.gen_bool(0.33) {
                net
            } else {
                net - rng.gen_range(-300.0f32..300.0)
            }
        })
        .collect()
}

/// Random actions `[N x 3]` within their branches.
pub fn random_actions(rng: &mut impl Rng, envs: usize) -> Vec<i32> {
    (0..envs * 3)
        .map(|i| rng.gen_range(0..BRANCHES[i % 3] as i32))
        .collect()
}

/// Everything a check starts from.
pub struct EnvSetup {
    pub cfg: EnvConfig,
    pub split: Split,
    pub market: EnvMarket,
    pub state: EnvState,
    pub env: Env,
    pub rng: ChaCha8Rng,
}

impl EnvSetup {
    pub fn new(gpu: &Gpu, case: &EnvCase) -> Result<Self> {
        let mut rng = ChaCha8Rng::seed_from_u64(case.seed ^ 0xe7e7);
        let (cfg, split) = (case.config(), case.split());
        let market = random_market(&mut rng, case.bars, case.feature_dim);
        let state = random_env_state(&mut rng, &cfg, &market, split);
        let mut env = Env::new(gpu, &cfg, &BRANCHES, &market, split)?;
        env.upload_state(&state)?;
        env.poison_outputs()?;
        Ok(EnvSetup {
            cfg,
            split,
            market,
            state,
            env,
            rng,
        })
    }
}

/// Every field of two portfolios compared bitwise.
pub fn compare_env_states(got: &EnvState, want: &EnvState) -> Vec<Comparison> {
    vec![
        compare_exact("bar", &got.bar, &want.bar),
        compare_exact("steps", &got.steps, &want.steps),
        compare_exact("clock", &got.clock, &want.clock),
        compare_exact("position", &got.position, &want.position),
        compare_bitwise("entry", &got.entry, &want.entry),
        compare_bitwise("realized", &got.realized, &want.realized),
        compare_bitwise("fees", &got.fees, &want.fees),
        compare_bitwise("equity", &got.equity, &want.equity),
    ]
}

/// The Q-forward input `x` of `states` (rows of `width`): each row and a ones column.
pub fn forward_input(states: &[f32], width: usize) -> Vec<f32> {
    states
        .chunks_exact(width.max(1))
        .flat_map(|r| r.iter().copied().chain([1.0]))
        .collect()
}

/// `state_gather`: states and the Q-forward input (states plus a ones column), bitwise.
pub fn check_state_gather(gpu: &Gpu, case: &EnvCase) -> Result<Vec<Comparison>> {
    let mut s = EnvSetup::new(gpu, case)?;
    s.env.state_gather()?;
    let want = spec::state_gather(&s.cfg, &s.market, &s.state);
    let want_x = forward_input(&want, s.market.state_dim());
    Ok(vec![
        compare_bitwise("states", &s.env.read_states()?, &want),
        compare_bitwise("x", &s.env.read_x()?, &want_x),
    ])
}

/// `action_select` on random Q-values with ties (values on a coarse grid), at epsilon 0, 1
/// and one in between: actions exact.
pub fn check_action_select(gpu: &Gpu, case: &EnvCase) -> Result<Vec<Comparison>> {
    let mut s = EnvSetup::new(gpu, case)?;
    let width: usize = BRANCHES.iter().sum();
    let q: Vec<f32> = (0..case.envs * width)
        .map(|_| s.rng.gen_range(-4i32..4) as f32 * 0.5)
        .collect();
    let dq = gpu.stream.clone_htod(&q)?;
    let mut out = Vec::new();
    let between = s.rng.gen_range(0.05..0.95);
    for (eps, name) in [
        (0.0f32, "actions (epsilon 0)"),
        (1.0, "actions (epsilon 1)"),
        (between, "actions (epsilon in (0, 1))"),
    ] {
        s.env.set_epsilon(eps)?;
        s.env.action_select(&dq)?;
        let want = spec::action_select(case.seed, &BRANCHES, eps, &q, &s.state);
        out.push(compare_exact(name, &s.env.read_actions()?, &want));
    }
    Ok(out)
}

/// A step's fills, `got` against `want`: which envs filled exactly, the prices and the net
/// PnL before the fill bitwise.
pub(crate) fn compare_fills(got: &Fills, want: &Fills) -> [Comparison; 3] {
    [
        compare_exact("filled", &got.filled, &want.filled),
        compare_bitwise("fill_price", &got.price, &want.price),
        compare_bitwise("net_before", &got.net_before, &want.net_before),
    ]
}

/// A step's outcome, `got` against `want`: the step's PnL, s' and dones bitwise, done
/// reasons exactly.
pub(crate) fn compare_outcome(got: &Outcome, want: &Outcome) -> [Comparison; 4] {
    [
        compare_bitwise("pnl", &got.pnl, &want.pnl),
        compare_bitwise("next_states", &got.next_states, &want.next_states),
        compare_bitwise("done", &got.done, &want.done),
        compare_exact("reason", &got.reason, &want.reason),
    ]
}

/// `fill_step` on random actions: fills, prices and the portfolios, bitwise.
pub fn check_fill_step(gpu: &Gpu, case: &EnvCase) -> Result<Vec<Comparison>> {
    let mut s = EnvSetup::new(gpu, case)?;
    let actions = random_actions(&mut s.rng, case.envs);
    s.env.upload_actions(&actions)?;
    s.env.fill_step()?;
    let mut want = s.state.clone();
    let fills = spec::fill_step(&s.cfg, &s.market, &mut want, &actions);
    let mut out = compare_fills(&s.env.read_fills()?, &fills).to_vec();
    out.extend(compare_env_states(&s.env.download_state()?, &want));
    Ok(out)
}

/// `barriers` on random net PnLs before the fill: the step's PnL, s', dones, reasons and
/// the portfolios (resets included), bitwise.
pub fn check_barriers(gpu: &Gpu, case: &EnvCase) -> Result<Vec<Comparison>> {
    let mut s = EnvSetup::new(gpu, case)?;
    let net_before = random_net_before(&mut s.rng, &s.state);
    s.env.upload_net_before(&net_before)?;
    s.env.barriers()?;
    let mut want = s.state.clone();
    let o = spec::barriers(&s.cfg, &s.market, s.split, &mut want, &net_before);
    let mut out = compare_outcome(&s.env.read_outcome()?, &o).to_vec();
    out.extend(compare_env_states(&s.env.download_state()?, &want));
    Ok(out)
}

/// `env_step` (action select, fill and barriers in one launch) on random Q-values against
/// the oracle's three steps in a row: actions, fills, the step's PnL, s', dones, reasons and
/// the portfolios, bitwise.
pub fn check_env_step(gpu: &Gpu, case: &EnvCase) -> Result<Vec<Comparison>> {
    let mut s = EnvSetup::new(gpu, case)?;
    let width: usize = BRANCHES.iter().sum();
    let q: Vec<f32> = (0..case.envs * width)
        .map(|_| s.rng.gen_range(-4i32..4) as f32 * 0.5)
        .collect();
    let eps = s.rng.gen_range(0.05..0.95);
    s.env.set_epsilon(eps)?;
    s.env.poison_outputs()?;
    s.env.env_step(&gpu.stream.clone_htod(&q)?)?;
    let mut want = s.state.clone();
    let actions = spec::action_select(case.seed, &BRANCHES, eps, &q, &want);
    let fills = spec::fill_step(&s.cfg, &s.market, &mut want, &actions);
    let o = spec::barriers(&s.cfg, &s.market, s.split, &mut want, &fills.net_before);
    let mut out = vec![compare_exact("actions", &s.env.read_actions()?, &actions)];
    out.extend(compare_fills(&s.env.read_fills()?, &fills));
    out.extend(compare_outcome(&s.env.read_outcome()?, &o));
    out.extend(compare_env_states(&s.env.download_state()?, &want));
    Ok(out)
}

/// `env_step` (action select, fill and barriers in one launch) against the three unfused
/// launches (`action_select`, `fill_step`, `barriers`) on a twin env of the same state and
/// the same random Q-values: actions, fills, the step's PnL, s', dones, reasons and the
/// portfolios bitwise equal.
pub fn check_env_step_fused(gpu: &Gpu, case: &EnvCase) -> Result<Vec<Comparison>> {
    let (mut one, mut chain) = (EnvSetup::new(gpu, case)?, EnvSetup::new(gpu, case)?);
    let width: usize = BRANCHES.iter().sum();
    let q: Vec<f32> = (0..case.envs * width)
        .map(|_| one.rng.gen_range(-4i32..4) as f32 * 0.5)
        .collect();
    let eps = one.rng.gen_range(0.05..0.95);
    let dq = gpu.stream.clone_htod(&q)?;
    // Both start with poisoned outputs (EnvSetup): one the single launch fails to write keeps
    // the poison where the chain's holds a value.
    one.env.set_epsilon(eps)?;
    chain.env.set_epsilon(eps)?;
    one.env.env_step(&dq)?;
    chain.env.action_select(&dq)?;
    chain.env.fill_step()?;
    chain.env.barriers()?;
    let mut out = vec![compare_exact(
        "actions",
        &one.env.read_actions()?,
        &chain.env.read_actions()?,
    )];
    out.extend(compare_fills(
        &one.env.read_fills()?,
        &chain.env.read_fills()?,
    ));
    out.extend(compare_outcome(
        &one.env.read_outcome()?,
        &chain.env.read_outcome()?,
    ));
    out.extend(compare_env_states(
        &one.env.download_state()?,
        &chain.env.download_state()?,
    ));
    Ok(out)
}

/// A Q-network for acting on states of `market`: the default network on its state width.
pub fn acting_config(market: &EnvMarket, seed: u64) -> tallyho_oracle::qnet::QNetConfig {
    tallyho_oracle::qnet::QNetConfig {
        state_dim: market.state_dim(),
        branches: BRANCHES.to_vec(),
        seed,
        ..Default::default()
    }
}

/// `steps` experience timesteps of `cfg.envs` envs on `market` (state gather, the online
/// Q-forward, action select, fill, barriers on the GPU) against the oracle stepped alongside
/// from the same start. The oracle takes the GPU's Q-values as its action-select input (an
/// argmax of near-tied float values is not stable under the GEMMs' summation order, so the
/// forward is compared on its own every `q_every` steps, `parity::qnet::acting_comparisons`);
/// everything else, states, actions, fills, step PnLs, s', dones and portfolios, bitwise at
/// every step. Also returns what happened, counted on the oracle's side (so that a test can
/// assert that the trajectory traded).
pub fn check_experience(
    gpu: &Gpu,
    cfg: &EnvConfig,
    market: &EnvMarket,
    split: Split,
    epsilon: f32,
    steps: usize,
    q_every: usize,
) -> Result<(Vec<Comparison>, Activity)> {
    use tallyho_oracle::qnet as qspec;
    let qcfg = acting_config(market, cfg.seed ^ 0x0a11);
    let net = crate::qnet::QNet::new(gpu, &qcfg, 1)?;
    let online = qspec::init_params(&qcfg);
    let mut acting = net.acting(cfg.envs)?;
    let mut env = Env::new(gpu, cfg, &BRANCHES, market, split)?;
    let exp = Experience::new(gpu, &env, &net)?;
    env.set_epsilon(epsilon)?;
    let mut oracle = EnvState::new(cfg, split);
    let mut out: Vec<Comparison> = Vec::new();
    let mut activity = Activity::default();
    for t in 0..steps {
        let before = oracle.clone();
        exp.step(&mut env, &net, &mut acting)?;
        let q = net.read_acting(&acting)?;
        let want = spec::env_step(cfg, &BRANCHES, epsilon, market, split, &mut oracle, |_| {
            q.clone()
        });
        activity.fills += want.fills.filled.iter().filter(|&&f| f == 1).count();
        for &r in &want.outcome.reason {
            activity.dones[r as usize] += 1;
        }
        activity.greedy_and_random_differ |=
            want.actions != spec::action_select(cfg.seed, &BRANCHES, 0.0, &q, &before);
        if q_every > 0 && t % q_every == 0 {
            let y = net.read_acting_outputs(&acting)?;
            merge_step(
                &mut out,
                t,
                super::qnet::acting_comparisons(
                    &qcfg,
                    net.acting_products(cfg.envs),
                    &online,
                    &want.states,
                    &y,
                    &q,
                )?,
            );
        }
        let mut c = vec![
            compare_bitwise("states", &env.read_states()?, &want.states),
            compare_exact("actions", &env.read_actions()?, &want.actions),
        ];
        c.extend(compare_fills(&env.read_fills()?, &want.fills));
        c.extend(compare_outcome(&env.read_outcome()?, &want.outcome));
        c.extend(compare_env_states(&env.download_state()?, &oracle));
        merge_step(&mut out, t, c);
    }
    Ok((out, activity))
}

/// What an experience trajectory did (oracle side).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Activity {
    /// Orders filled, over all envs and steps.
    pub fills: usize,
    /// Env-steps per done reason (index 0: not done).
    pub dones: [usize; 5],
    /// Exploration changed some action (epsilon took effect).
    pub greedy_and_random_differ: bool,
}

/// The experience step replayed from its graph against the same step launched eagerly on
/// a twin Env, `steps` times: every output and portfolio bitwise equal at every step. Its
/// Q-forward layer by layer (`block_rows` None) or by qnet_act with that many rows a block.
pub fn check_experience_graph(
    gpu: &Gpu,
    cfg: &EnvConfig,
    market: &EnvMarket,
    split: Split,
    steps: usize,
    block_rows: Option<usize>,
) -> Result<Vec<Comparison>> {
    let qcfg = acting_config(market, cfg.seed ^ 0x0a11);
    let mut net = crate::qnet::QNet::new(gpu, &qcfg, 1)?;
    net.set_act_fused(block_rows.is_some());
    net.set_act_block_rows(block_rows)?;
    // Q only, as the experience step acts in training and in the benchmark.
    let (mut a_eager, mut a_graph) = (
        net.acting(cfg.envs)?.q_only(),
        net.acting(cfg.envs)?.q_only(),
    );
    let mut eager = Env::new(gpu, cfg, &BRANCHES, market, split)?;
    let mut graph = Env::new(gpu, cfg, &BRANCHES, market, split)?;
    let (exp_eager, mut exp_graph) = (
        Experience::new(gpu, &eager, &net)?,
        Experience::new(gpu, &graph, &net)?,
    );
    eager.set_epsilon(0.2)?;
    graph.set_epsilon(0.2)?;
    let mut out = Vec::new();
    for t in 0..steps {
        exp_eager.step(&mut eager, &net, &mut a_eager)?;
        exp_graph.step_graphed(&mut graph, &net, &mut a_graph)?;
        let (ge, gg) = (eager.read_outcome()?, graph.read_outcome()?);
        let mut c = vec![
            compare_exact("actions", &graph.read_actions()?, &eager.read_actions()?),
            compare_bitwise(
                "q",
                &net.read_acting(&a_graph)?,
                &net.read_acting(&a_eager)?,
            ),
            compare_bitwise("pnl", &gg.pnl, &ge.pnl),
            compare_bitwise("next_states", &gg.next_states, &ge.next_states),
            compare_bitwise("done", &gg.done, &ge.done),
        ];
        c.extend(compare_env_states(
            &graph.download_state()?,
            &eager.download_state()?,
        ));
        merge_step(&mut out, t, c);
    }
    Ok(out)
}

/// The experience step in one launch (`experience_step`) against the three unfused launches
/// (`state_gather`, `qnet_act`, `env_step`) on a twin Env, `steps` times, both eager, the
/// forward by qnet_act with `block_rows` rows a block: states, x, Q-values and head outputs,
/// actions, fills, step PnLs, s', dones and portfolios bitwise equal at every step.
pub fn check_experience_fused(
    gpu: &Gpu,
    cfg: &EnvConfig,
    market: &EnvMarket,
    split: Split,
    steps: usize,
    block_rows: usize,
) -> Result<Vec<Comparison>> {
    let qcfg = acting_config(market, cfg.seed ^ 0x0a11);
    let mut net = crate::qnet::QNet::new(gpu, &qcfg, 1)?;
    net.set_act_block_rows(Some(block_rows))?;
    let (mut a_one, mut a_unfused) = (net.acting(cfg.envs)?, net.acting(cfg.envs)?);
    let mut one = Env::new(gpu, cfg, &BRANCHES, market, split)?;
    let mut unfused = Env::new(gpu, cfg, &BRANCHES, market, split)?;
    let (exp_one, mut exp_unfused) = (
        Experience::new(gpu, &one, &net)?,
        Experience::new(gpu, &unfused, &net)?,
    );
    exp_unfused.set_path(ExperiencePath::Unfused);
    if !exp_one.in_one_launch(&one, &net) || exp_unfused.in_one_launch(&unfused, &net) {
        return Err(Error::Shape(format!(
            "{} envs at {block_rows} rows a block: not one launch against the unfused",
            cfg.envs
        )));
    }
    // Only the one launch's outputs poisoned: one it failed to write differs from the unfused path's.
    one.poison_outputs()?;
    one.set_epsilon(0.2)?;
    unfused.set_epsilon(0.2)?;
    let mut out = Vec::new();
    for t in 0..steps {
        exp_one.step(&mut one, &net, &mut a_one)?;
        exp_unfused.step(&mut unfused, &net, &mut a_unfused)?;
        let (o, c) = (one.read_outcome()?, unfused.read_outcome()?);
        let mut cmp = vec![
            compare_bitwise("states", &one.read_states()?, &unfused.read_states()?),
            compare_bitwise("x", &one.read_x()?, &unfused.read_x()?),
            compare_bitwise(
                "q",
                &net.read_acting(&a_one)?,
                &net.read_acting(&a_unfused)?,
            ),
            compare_bitwise(
                "head outputs",
                &net.read_acting_outputs(&a_one)?,
                &net.read_acting_outputs(&a_unfused)?,
            ),
            compare_exact("actions", &one.read_actions()?, &unfused.read_actions()?),
        ];
        cmp.extend(compare_fills(&one.read_fills()?, &unfused.read_fills()?));
        cmp.extend(compare_outcome(&o, &c));
        cmp.extend(compare_env_states(
            &one.download_state()?,
            &unfused.download_state()?,
        ));
        merge_step(&mut out, t, cmp);
    }
    Ok(out)
}
