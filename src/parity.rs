//! GPU-vs-oracle checks, one per kernel, written once and used by the property tests, the
//! fixture replays and `tallyho verify`. Each runs the kernel on fresh inputs, runs the
//! oracle on the same inputs, and returns one `Comparison` per output.

pub mod env;
pub mod reward;

use crate::error::Result;
use crate::qnet::Products;
use crate::replay::PerBuffer;
use crate::runtime::Gpu;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tallyho_oracle::action::BRANCH_COUNT;
use tallyho_oracle::replay::{self as replay_spec, ReplayState, Transitions};
use tallyho_oracle::qnet::branch_rows;
use tallyho_oracle::tolerance::{REPLAY_IS_WEIGHT, REPLAY_PRIORITY};
use tallyho_oracle::{compare_bitwise, compare_exact, compare_f32, philox, Comparison, ReplayConfig};

/// Sizes and seed of one replay case.
#[derive(Clone, Debug, PartialEq)]
pub struct PerCase {
    pub capacity: usize,
    pub state_dim: usize,
    pub batch: usize,
    pub seed: u64,
}

impl PerCase {
    pub fn config(&self) -> ReplayConfig {
        ReplayConfig {
            capacity: self.capacity,
            state_dim: self.state_dim,
            batch: self.batch,
            seed: self.seed,
            beta_steps: 1000,
            ..ReplayConfig::default()
        }
    }

    /// A random valid case: batch 1..=1100 (past one block of 1024), capacity 4B..4B+3000,
    /// state width 1..=40; none need be a multiple of the block or warp size.
    pub fn random(rng: &mut impl Rng) -> PerCase {
        let batch = rng.gen_range(1..=1100);
        PerCase {
            capacity: 4 * batch + rng.gen_range(0..3000),
            state_dim: rng.gen_range(1..=40),
            batch,
            seed: rng.gen(),
        }
    }
}

/// `n` random transitions: states in [-2, 2), actions in their branch ranges, done 0/1.
pub fn random_transitions(rng: &mut impl Rng, n: usize, state_dim: usize) -> Transitions {
    let mut t = Transitions::zeros(n, state_dim);
    t.states.iter_mut().chain(t.next_states.iter_mut()).for_each(|x| *x = rng.gen_range(-2.0..2.0));
    for (k, a) in t.actions.iter_mut().enumerate() {
        *a = rng.gen_range(0..(tallyho_oracle::action::ACTION_BRANCHES[k % BRANCH_COUNT] as i32));
    }
    t.rewards.iter_mut().for_each(|x| *x = rng.gen_range(-1.0..1.0));
    t.dones.iter_mut().for_each(|x| *x = if rng.gen_bool(0.1) { 1.0 } else { 0.0 });
    t
}

/// A random replay state: random fill level (full or not), cursor anywhere, priorities
/// spread over four decades, a consistent sum tree, a random sample step.
pub fn random_state(cfg: &ReplayConfig, rng: &mut impl Rng) -> ReplayState {
    let mut st = ReplayState::new(cfg);
    let c = cfg.capacity;
    let size = if rng.gen_bool(0.5) { c } else { rng.gen_range(1..=c) };
    st.store = random_transitions(rng, c, cfg.state_dim);
    let priorities: Vec<f32> = (0..size).map(|_| 10f32.powf(rng.gen_range(-3.0..1.0))).collect();
    set_leaves(&mut st, &priorities);
    st.ctl.size = size as u32;
    st.ctl.cursor = if size < c { size as u32 } else { rng.gen_range(0..c) as u32 };
    st.ctl.sample_step = rng.gen_range(0..2000);
    st.ctl.max_priority = priorities.iter().copied().fold(1.0, f32::max);
    st
}

/// Set leaves `0..p.len()` to `p`, the rest to 0, and rebuild the tree.
pub fn set_leaves(st: &mut ReplayState, p: &[f32]) {
    let l = st.cfg.leaves();
    st.tree.fill(0.0);
    st.tree[l..l + p.len()].copy_from_slice(p);
    sum_tree_build(&mut st.tree);
}

/// Rebuild every internal node from the leaves (the oracle's order: left + right).
pub fn sum_tree_build(tree: &mut [f32]) {
    let l = tree.len() / 2;
    let all: Vec<u32> = (0..l as u32).collect();
    replay_spec::sum_tree_refresh(tree, l, &all);
}

fn leaves_of(tree: &[f32]) -> &[f32] {
    &tree[tree.len() / 2..]
}

/// Two sets of transitions compared bitwise, one comparison per field.
pub fn compare_transitions(got: &Transitions, want: &Transitions) -> Vec<Comparison> {
    vec![
        compare_bitwise("states", &got.states, &want.states),
        compare_bitwise("next_states", &got.next_states, &want.next_states),
        compare_exact("actions", &got.actions, &want.actions),
        compare_bitwise("rewards", &got.rewards, &want.rewards),
        compare_bitwise("dones", &got.dones, &want.dones),
    ]
}

/// The whole replay state compared bitwise.
pub fn compare_states(got: &ReplayState, want: &ReplayState) -> Vec<Comparison> {
    let mut c = compare_transitions(&got.store, &want.store);
    c.push(compare_bitwise("tree", &got.tree, &want.tree));
    c.push(compare_exact("ctl", &crate::replay::ctl_words(&got.ctl), &crate::replay::ctl_words(&want.ctl)));
    c
}

/// `philox_kat` on `n` random counters and keys against the oracle, exactly.
pub fn check_philox(gpu: &Gpu, n: usize, seed: u64) -> Result<Vec<Comparison>> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let counters: Vec<[u32; 4]> = (0..n).map(|_| rng.gen()).collect();
    let keys: Vec<[u32; 2]> = (0..n).map(|_| rng.gen()).collect();
    let got: Vec<u32> = crate::philox::philox_kat(gpu, &counters, &keys)?.into_iter().flatten().collect();
    let want: Vec<u32> = counters.iter().zip(&keys).flat_map(|(&c, &k)| philox::philox4x32_10(c, k)).collect();
    Ok(vec![compare_exact("words", &got, &want)])
}

/// `per_insert` of `n` random transitions into `st`.
pub fn check_per_insert_on(gpu: &Gpu, st: &ReplayState, batch: &Transitions) -> Result<Vec<Comparison>> {
    let mut buf = PerBuffer::new(gpu, &st.cfg, batch.len().max(1))?;
    buf.upload_state(st)?;
    buf.insert_host(batch)?;
    let got = buf.download_state()?;
    let mut want = st.clone();
    replay_spec::replay_insert(&mut want, batch);
    Ok(compare_states(&got, &want))
}

pub fn check_per_insert(gpu: &Gpu, case: &PerCase, n: usize) -> Result<Vec<Comparison>> {
    let mut rng = ChaCha8Rng::seed_from_u64(case.seed);
    let cfg = case.config();
    let st = random_state(&cfg, &mut rng);
    let batch = random_transitions(&mut rng, n.clamp(1, cfg.capacity), cfg.state_dim);
    check_per_insert_on(gpu, &st, &batch)
}

/// `per_sample` from `st`: indices exact, weights within REPLAY_IS_WEIGHT, sample step exact.
pub fn check_per_sample_on(gpu: &Gpu, st: &ReplayState) -> Result<Vec<Comparison>> {
    let mut buf = PerBuffer::new(gpu, &st.cfg, 1)?;
    buf.upload_state(st)?;
    buf.poison_outputs()?;
    buf.sample()?;
    let (idx, w) = buf.read_sample()?;
    let ctl = buf.ctl()?;
    let mut want = st.clone();
    let s = replay_spec::replay_sample(&mut want);
    Ok(vec![
        compare_exact("indices", &idx, &s.indices),
        compare_f32("weights", &w, &s.weights, REPLAY_IS_WEIGHT),
        compare_exact("sample_step", &[ctl.sample_step], &[want.ctl.sample_step]),
    ])
}

pub fn check_per_sample(gpu: &Gpu, case: &PerCase) -> Result<Vec<Comparison>> {
    let mut rng = ChaCha8Rng::seed_from_u64(case.seed);
    check_per_sample_on(gpu, &random_state(&case.config(), &mut rng))
}

/// `per_gather` of random indices (repeats included): every output exact.
pub fn check_per_gather(gpu: &Gpu, case: &PerCase) -> Result<Vec<Comparison>> {
    let mut rng = ChaCha8Rng::seed_from_u64(case.seed);
    let cfg = case.config();
    let st = random_state(&cfg, &mut rng);
    let indices: Vec<u32> = (0..cfg.batch).map(|_| rng.gen_range(0..st.ctl.size)).collect();
    let mut buf = PerBuffer::new(gpu, &cfg, 1)?;
    buf.upload_state(&st)?;
    buf.poison_outputs()?;
    buf.set_indices(&indices)?;
    buf.gather()?;
    let got = buf.batch.download(&gpu.stream)?;
    Ok(compare_transitions(&got, &replay_spec::replay_gather(&st, &indices)))
}

/// `per_update_priorities` of `indices` with `td_abs` on `st`: leaves within REPLAY_PRIORITY
/// (the last occurrence of a repeated index winning), every internal node bitwise the sum of
/// its children, max priority within REPLAY_PRIORITY, the scratch left all zero.
pub fn check_per_update_priorities_on(gpu: &Gpu, st: &ReplayState, indices: &[u32], td_abs: &[f32]) -> Result<Vec<Comparison>> {
    let mut buf = PerBuffer::new(gpu, &st.cfg, 1)?;
    buf.upload_state(st)?;
    buf.set_indices(indices)?;
    let td = gpu.stream.clone_htod(td_abs)?;
    buf.update_priorities(&td)?;
    let tree = buf.tree()?;
    let ctl = buf.ctl()?;
    let winner = buf.winner_scratch()?;

    let mut want = st.clone();
    let p = replay_spec::replay_update_priorities(&mut want, indices, td_abs);
    let mut want_leaves: Vec<f64> = leaves_of(&st.tree).iter().map(|&x| f64::from(x)).collect();
    for (&i, &pj) in indices.iter().zip(&p) {
        want_leaves[i as usize] = pj;
    }
    let want_max = p.iter().copied().fold(f64::from(st.ctl.max_priority), f64::max);
    let mut rebuilt = tree.clone();
    sum_tree_build(&mut rebuilt);
    Ok(vec![
        compare_f32("leaves", leaves_of(&tree), &want_leaves, REPLAY_PRIORITY),
        compare_bitwise("tree", &tree, &rebuilt),
        compare_f32("max_priority", &[ctl.max_priority], &[want_max], REPLAY_PRIORITY),
        compare_exact("ctl", &[ctl.cursor, ctl.size, ctl.sample_step], &[want.ctl.cursor, want.ctl.size, want.ctl.sample_step]),
        compare_exact("winner_scratch", &winner, &vec![0; winner.len()]),
    ])
}

/// Random indices (about a quarter repeats) and |td| over four decades.
pub fn check_per_update_priorities(gpu: &Gpu, case: &PerCase) -> Result<Vec<Comparison>> {
    let mut rng = ChaCha8Rng::seed_from_u64(case.seed);
    let cfg = case.config();
    let st = random_state(&cfg, &mut rng);
    let mut indices: Vec<u32> = Vec::with_capacity(cfg.batch);
    for j in 0..cfg.batch {
        let repeat = j > 0 && rng.gen_bool(0.25);
        indices.push(if repeat { indices[rng.gen_range(0..j)] } else { rng.gen_range(0..st.ctl.size) });
    }
    let td: Vec<f32> = (0..cfg.batch).map(|_| 10f32.powf(rng.gen_range(-4.0..1.0))).collect();
    check_per_update_priorities_on(gpu, &st, &indices, &td)
}

/// Pearson's chi-square statistic of observed counts against expected counts.
pub fn chi_square(counts: &[u64], expected: &[f64]) -> f64 {
    counts.iter().zip(expected).filter(|(_, &e)| e > 0.0).map(|(&o, &e)| (o as f64 - e).powi(2) / e).sum()
}

/// Upper critical value of chi-square with `dof` degrees of freedom at standard-normal
/// quantile `z` (Wilson-Hilferty): z = 3.09 is the 0.1% tail.
pub fn chi_square_critical(dof: usize, z: f64) -> f64 {
    let k = dof as f64;
    let a = 2.0 / (9.0 * k);
    k * (1.0 - a + z * a.sqrt()).powi(3)
}

// ---- Q-network optimizer ------------------------------------------------------------------

/// Double arithmetic rounded once to float on the GPU against f64 from the same float
/// inputs: at most one float ulp (plus a floor far below any value the checks produce).
pub const ONE_ULP: tallyho_oracle::Tolerance =
    tallyho_oracle::Tolerance { atol: 1e-30, rtol: 1.2e-7, exact: false, norm: false, reason: "double arithmetic rounded once to float" };

/// `n` values uniform in [-scale, scale).
pub fn uniform(rng: &mut impl Rng, n: usize, scale: f32) -> Vec<f32> {
    (0..n).map(|_| rng.gen_range(-scale..scale)).collect()
}

/// `qnet_grad_norm` on `n` gradients of magnitude `scale`: norm and clip scale within one
/// ulp of the oracle's, the step advanced by one.
pub fn check_qnet_grad_norm(gpu: &Gpu, n: usize, scale: f32, seed: u64) -> Result<Vec<Comparison>> {
    use tallyho_oracle::optimizer::grad_norm;
    use tallyho_oracle::optimizer::clip_grads;
    use tallyho_oracle::qnet::QNetConfig;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let cfg = QNetConfig::default();
    let g = uniform(&mut rng, n, scale);
    let mut opt = crate::optimizer::Optimizer::new(gpu, &cfg, n)?;
    opt.grad_norm(&gpu.stream.clone_htod(&g)?.as_view())?;
    let ctl = opt.ctl()?;
    let mut g64: Vec<f64> = g.iter().map(|&x| f64::from(x)).collect();
    let norm = grad_norm(&g64);
    let want_scale = clip_grads(&mut g64, f64::from(cfg.grad_clip));
    Ok(vec![
        compare_f32("norm", &[ctl.norm], &[norm], ONE_ULP),
        compare_f32("scale", &[ctl.scale as f32], &[want_scale], ONE_ULP),
        compare_exact("step", &[ctl.step], &[1]),
    ])
}

/// One `qnet_grad_norm` + `qnet_adam` step from random parameters, moments and step count.
pub fn check_qnet_adam(gpu: &Gpu, n: usize, step: u32, grad_scale: f32, seed: u64) -> Result<Vec<Comparison>> {
    use tallyho_oracle::optimizer::clip_grads;
    use tallyho_oracle::optimizer::AdamState;
    use tallyho_oracle::optimizer::adam_step;
    use tallyho_oracle::qnet::QNetConfig;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let cfg = QNetConfig { lr: 1e-3, ..QNetConfig::default() };
    let (p, g, m) = (uniform(&mut rng, n, 1.0), uniform(&mut rng, n, grad_scale), uniform(&mut rng, n, 0.1));
    let v: Vec<f32> = uniform(&mut rng, n, 0.1).iter().map(|x| x * x).collect();
    let mut opt = crate::optimizer::Optimizer::new(gpu, &cfg, n)?;
    opt.set_state(&m, &v, step)?;
    let mut dp = gpu.stream.clone_htod(&p)?;
    opt.step(&mut dp.as_view_mut(), &gpu.stream.clone_htod(&g)?.as_view(), None)?;
    let wide = |x: &[f32]| x.iter().map(|&y| f64::from(y)).collect::<Vec<f64>>();
    let mut g64 = wide(&g);
    clip_grads(&mut g64, f64::from(cfg.grad_clip));
    let mut p64 = wide(&p);
    let mut st = AdamState { m: wide(&m), v: wide(&v), step };
    adam_step(&cfg, &mut p64, &g64, &mut st);
    Ok(vec![
        compare_f32("params", &gpu.stream.clone_dtoh(&dp)?, &p64, ONE_ULP),
        compare_f32("m", &gpu.stream.clone_dtoh(&opt.m)?, &st.m, ONE_ULP),
        compare_f32("v", &gpu.stream.clone_dtoh(&opt.v)?, &st.v, ONE_ULP),
        compare_exact("step", &[opt.ctl()?.step], &[st.step]),
    ])
}

/// `qnet_target_sync`, hard copy and Polyak averages, bitwise against the oracle.
pub fn check_qnet_target_sync(gpu: &Gpu, n: usize, seed: u64) -> Result<Vec<Comparison>> {
    use tallyho_oracle::optimizer::target_sync;
    use tallyho_oracle::qnet::QNetConfig;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let (online, target) = (uniform(&mut rng, n, 1.0), uniform(&mut rng, n, 1.0));
    let opt = crate::optimizer::Optimizer::new(gpu, &QNetConfig::default(), n)?;
    let don = gpu.stream.clone_htod(&online)?;
    let mut out = Vec::new();
    for tau in [None, Some(0.005), Some(0.5)] {
        let mut dt = gpu.stream.clone_htod(&target)?;
        opt.target_sync(&don.as_view(), &mut dt.as_view_mut(), tau)?;
        let mut want = target.clone();
        target_sync(&online, &mut want, tau);
        let name = match tau {
            None => "target (hard copy)".to_string(),
            Some(t) => format!("target (tau {t})"),
        };
        out.push(compare_bitwise(&name, &gpu.stream.clone_dtoh(&dt)?, &want));
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Q-network
// ---------------------------------------------------------------------------------------------

/// The batch sizes the Q-network is checked at: one row, a few, a partial block, a full
/// default batch and an odd large one.
pub const QNET_BATCHES: [usize; 5] = [1, 3, 50, 256, 783];

/// One Q-network case: the default network with `atoms` and `state_dim`, a batch, a seed.
#[derive(Clone, Debug, PartialEq)]
pub struct QNetCase {
    pub atoms: usize,
    pub state_dim: usize,
    pub batch: usize,
    pub seed: u64,
}

impl QNetCase {
    pub fn config(&self) -> tallyho_oracle::qnet::QNetConfig {
        tallyho_oracle::qnet::QNetConfig {
            atoms: self.atoms,
            state_dim: self.state_dim,
            seed: self.seed,
            ..Default::default()
        }
    }
}

/// Everything a Q-network check starts from: config, online and target parameters (two
/// seeds), a batch with importance weights in (0, 1], and the network on the device with the
/// batch uploaded.
pub struct QNetSetup {
    pub cfg: tallyho_oracle::qnet::QNetConfig,
    pub online: Vec<f32>,
    pub target: Vec<f32>,
    pub batch: Transitions,
    pub weights: Vec<f32>,
    pub net: crate::qnet::QNet,
    pub device_batch: crate::replay::DeviceTransitions,
    pub device_weights: cudarc::driver::CudaSlice<f32>,
}

impl QNetSetup {
    pub fn new(gpu: &Gpu, case: &QNetCase) -> Result<Self> {
        Self::of(gpu, case.config(), case.batch)
    }

    /// The setup of any network `cfg` (its seed seeds the batch too) on `batch` transitions.
    pub fn of(gpu: &Gpu, cfg: tallyho_oracle::qnet::QNetConfig, batch: usize) -> Result<Self> {
        use tallyho_oracle::qnet::{init_params, QNetConfig};
        let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed ^ 0x51e7);
        let online = init_params(&cfg);
        let target = init_params(&QNetConfig { seed: cfg.seed.wrapping_add(1), ..cfg.clone() });
        let transitions = random_transitions(&mut rng, batch, cfg.state_dim);
        let weights: Vec<f32> = (0..batch).map(|_| rng.gen_range(0.05f32..=1.0)).collect();
        let mut net = crate::qnet::QNet::new(gpu, &cfg, batch)?;
        net.set_params(&online, &target)?;
        let mut device_batch = crate::replay::DeviceTransitions::alloc(&gpu.stream, batch, cfg.state_dim)?;
        device_batch.upload(&gpu.stream, &transitions, cfg.state_dim)?;
        let batch = transitions;
        let device_weights = gpu.stream.clone_htod(&weights)?;
        Ok(QNetSetup { cfg, online, target, batch, weights, net, device_batch, device_weights })
    }

    /// The states then the next states: the 2B rows every forward runs on.
    pub fn stacked_states(&self) -> Vec<f32> {
        [self.batch.states.as_slice(), self.batch.next_states.as_slice()].concat()
    }

    pub fn forward(&mut self) -> Result<()> {
        self.net.forward(&self.device_batch.states, &self.device_batch.next_states)
    }
}

/// The inverse of `qnet::branch_rows` for the GPU's rows `range`, widened.
fn split_branches(
    cfg: &tallyho_oracle::qnet::QNetConfig,
    all: &[f32],
    range: std::ops::Range<usize>,
    per_action: usize,
) -> Vec<Vec<f64>> {
    let width: usize = cfg.branches.iter().sum::<usize>() * per_action;
    let mut out: Vec<Vec<f64>> = cfg.branches.iter().map(|_| Vec::new()).collect();
    if all.len() < range.end * width {
        return out; // not read back: empty
    }
    for i in range {
        let mut col = i * width;
        for (k, &n) in cfg.branches.iter().enumerate() {
            out[k].extend(all[col..col + n * per_action].iter().map(|&v| f64::from(v)));
            col += n * per_action;
        }
    }
    out
}

fn widen(x: &[f32]) -> Vec<f64> {
    x.iter().map(|&v| f64::from(v)).collect()
}

/// The oracle's `Forward` holding the GPU's outputs for rows `range` of one network: the
/// activations and head outputs the loss and the backward read.
pub fn forward_of_gpu(
    cfg: &tallyho_oracle::qnet::QNetConfig,
    out: &crate::qnet::ForwardOut,
    states: &[f32],
    range: std::ops::Range<usize>,
) -> tallyho_oracle::qnet::Forward {
    use tallyho_oracle::qnet::hidden_width;
    // Outputs a caller did not read back are empty and stay empty.
    let rows = |x: &[f32], w: usize| x.get(range.start * w..range.end * w).map_or_else(Vec::new, widen);
    let na = cfg.atoms;
    let c51 = na > 1;
    tallyho_oracle::qnet::Forward {
        batch: range.len(),
        states: widen(states),
        h1: rows(&out.h1, cfg.h1),
        h2: rows(&out.h2, cfg.h2),
        heads_hidden: rows(&out.heads_hidden, hidden_width(cfg)),
        value: Vec::new(),
        adv: Vec::new(),
        logits: split_branches(cfg, &out.logits, range.clone(), na),
        log_probs: if c51 { split_branches(cfg, &out.log_probs, range.clone(), na) } else { vec![Vec::new(); cfg.num_branches()] },
        probs: if c51 { split_branches(cfg, &out.probs, range.clone(), na) } else { vec![Vec::new(); cfg.num_branches()] },
        q: split_branches(cfg, &out.q, range, 1),
    }
}

/// The reduction lengths each forward output went through (for `tolerance::gemm_chain`).
pub(crate) fn forward_chain(cfg: &tallyho_oracle::qnet::QNetConfig) -> [Vec<usize>; 4] {
    let head_in = cfg.value_hidden.max(cfg.adv_hidden);
    let n_max = cfg.branches.iter().copied().max().unwrap_or(1);
    let h1 = vec![cfg.state_dim + 1];
    let h2 = [h1.clone(), vec![cfg.h1 + 1]].concat();
    let hh = [h2.clone(), vec![cfg.h2 + 1]].concat();
    // Head outputs: one more GEMM, then the dueling mean over n_k and the softmax over NA.
    let head = [hh.clone(), vec![head_in, n_max, cfg.atoms]].concat();
    [h1, h2, hh, head]
}

/// `qnet_forward` + `qnet_head` for both networks on the stacked rows [s; s'] against the
/// oracle's forward of each network's parameters.
pub fn check_qnet_forward(gpu: &Gpu, case: &QNetCase) -> Result<Vec<Comparison>> {
    use tallyho_oracle::compare_rel_norm;
    use tallyho_oracle::tolerance::gemm_chain;
    let mut st = QNetSetup::new(gpu, case)?;
    st.net.poison_outputs()?;
    st.forward()?;
    let (cfg, x) = (&st.cfg, st.stacked_states());
    let [t1, t2, th, tout] = forward_chain(cfg).map(|l| gemm_chain(&l));
    let mut out = Vec::new();
    for (net, name, params) in [(0, "online", &st.online), (1, "target", &st.target)] {
        let want = tallyho_oracle::qnet::forward(cfg, params, &x);
        let got = st.net.read_forward(net)?;
        let rows = 2 * case.batch;
        out.push(compare_rel_norm(&format!("{name} h1"), &got.h1, &want.h1, t1));
        out.push(compare_rel_norm(&format!("{name} h2"), &got.h2, &want.h2, t2));
        out.push(compare_rel_norm(&format!("{name} heads hidden"), &got.heads_hidden, &want.heads_hidden, th));
        let na = cfg.atoms;
        out.push(compare_rel_norm(&format!("{name} logits"), &got.logits, &branch_rows(cfg, &want.logits, rows, na), tout));
        if na > 1 {
            let lp = branch_rows(cfg, &want.log_probs, rows, na);
            out.push(compare_rel_norm(&format!("{name} log_probs"), &got.log_probs, &lp, tout));
            let p = branch_rows(cfg, &want.probs, rows, na);
            out.push(compare_rel_norm(&format!("{name} probs"), &got.probs, &p, tout));
        }
        out.push(compare_rel_norm(&format!("{name} q"), &got.q, &branch_rows(cfg, &want.q, rows, 1), tout));
    }
    Ok(out)
}

/// The acting forward (`QNet::act`: the online network on N states, `qnet_head_q` at its
/// end) on `case.batch` random states against the oracle: see [`acting_comparisons`].
pub fn check_acting(gpu: &Gpu, case: &QNetCase) -> Result<Vec<Comparison>> {
    check_acting_with(gpu, case, ActingPath::Act)
}

/// How an acting check runs the forward.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ActingPath {
    /// What [`crate::qnet::QNet::act`] runs by default: layer by layer.
    Act,
    /// `qnet_act`, one launch, with this many rows per block (None: the rule's choice, which
    /// must be qnet_act). The check fails if the network does not fit a block.
    Fused(Option<usize>),
    /// Layer by layer in float32 (acting on networks too wide for one block).
    Layers,
    /// Layer by layer with TF32 products (the option), held to the TF32 chain's bound.
    Tf32,
}

/// [`check_acting`] on the path `path`.
pub fn check_acting_with(gpu: &Gpu, case: &QNetCase, path: ActingPath) -> Result<Vec<Comparison>> {
    check_acting_net(gpu, case.config(), case.batch, path)
}

/// The acting forward of any network `cfg` on `rows` random states (seeded by the config's
/// seed) on `path`, against the oracle: the head-output rows plus bias and Q
/// ([`acting_comparisons`]).
pub fn check_acting_net(gpu: &Gpu, cfg: tallyho_oracle::qnet::QNetConfig, rows: usize, path: ActingPath) -> Result<Vec<Comparison>> {
    let mut st = QNetSetup::of(gpu, cfg, rows)?;
    st.net.set_tf32(path == ActingPath::Tf32)?;
    if let ActingPath::Fused(block_rows) = path {
        st.net.set_act_fused(true);
        st.net.set_act_block_rows(block_rows)?;
        if st.net.act_block_rows(rows).is_none() {
            return Err(crate::error::Error::Usage("acting check: this network does not fit one qnet_act block".into()));
        }
    }
    let cfg = &st.cfg;
    let states = &st.batch.states;
    let x: Vec<f32> = states.chunks_exact(cfg.state_dim).flat_map(|r| r.iter().copied().chain([1.0])).collect();
    let x = gpu.stream.clone_htod(&x)?;
    let mut acting = st.net.acting(rows)?;
    let products = match path {
        ActingPath::Act | ActingPath::Fused(_) => {
            st.net.act(&x, &mut acting)?;
            st.net.acting_products(rows)
        }
        ActingPath::Layers | ActingPath::Tf32 => {
            st.net.act_layers(&x, &mut acting)?;
            if st.net.tf32() { Products::Tf32 } else { Products::Float32 }
        }
    };
    let (y, q) = (st.net.read_acting_outputs(&acting)?, st.net.read_acting(&acting)?);
    acting_comparisons(cfg, products, &st.online, states, &y, &q)
}

/// An acting forward's outputs against the oracle, stage by stage: the head-output rows
/// plus bias against the oracle's forward of `states` (the GEMM chain's bound for the
/// arithmetic of its `products`), then Q by [`acting_q_comparison`].
pub(crate) fn acting_comparisons(
    cfg: &tallyho_oracle::qnet::QNetConfig,
    products: Products,
    online: &[f32],
    states: &[f32],
    y: &[f32],
    q: &[f32],
) -> Result<Vec<Comparison>> {
    use tallyho_oracle::compare_rel_norm;
    use tallyho_oracle::qnet as spec;
    use tallyho_oracle::tolerance::{gemm_chain, gemm_chain_3xtf32, gemm_chain_tf32};
    let bias = head_bias(cfg, online)?;
    let (yb, _) = rows_plus_bias(y, bias);
    let want_y = spec::head_rows(cfg, &spec::forward(cfg, online, states));
    let [h1, _, hh, _] = forward_chain(cfg);
    let head_in = cfg.value_hidden.max(cfg.adv_hidden);
    // Layer by layer, the first layer is qnet_first_layer's float32 FMA chain either way.
    let later = [&hh[h1.len()..], &[head_in + 1]].concat();
    let chain = match products {
        Products::Float32 => gemm_chain(&[h1, later].concat()),
        Products::Tf32x3 => gemm_chain_3xtf32(&[h1, later].concat()),
        Products::Tf32 => gemm_chain_tf32(&h1, &later),
    };
    Ok(vec![
        compare_rel_norm("acting head outputs", &yb, &want_y, chain),
        acting_q_comparison(cfg, y, bias, q),
    ])
}

/// `qnet_head_q`'s Q (`q`) against the oracle's head in f64 on the same head-output rows `y`
/// plus `bias`, by the FlashAttention rule (`tolerance::reduction_rule`) with
/// `qnet::head_q_f32`, the float reference: the acting head computes in float, so its error
/// is a few float ulps of sum_z p_z |z_z|, which a relative bound on Q itself (near 0 where
/// the distribution is centred) cannot express.
pub(crate) fn acting_q_comparison(cfg: &tallyho_oracle::qnet::QNetConfig, y: &[f32], bias: &[f32], q: &[f32]) -> Comparison {
    use tallyho_oracle::qnet as spec;
    use tallyho_oracle::tolerance::reduction_rule;
    let (yb32, yb64) = rows_plus_bias(y, bias);
    let want = spec::head_q(cfg, &yb64);
    compare_f32("acting q", q, &want, reduction_rule(&spec::head_q_f32(cfg, &yb32), &want))
}

/// The head-output bias `bo` of a network's parameters (row H of its dense head matrix).
pub(crate) fn head_bias<'a>(cfg: &tallyho_oracle::qnet::QNetConfig, params: &'a [f32]) -> Result<&'a [f32]> {
    let bo = tallyho_oracle::qnet::tensor(cfg, "bo").ok_or_else(|| crate::error::Error::Usage("the layout has no bo".into()))?;
    Ok(&params[bo.range()])
}

/// Head-output rows `y` plus the bias of each column: in float (the kernels' sum) and exactly.
pub(crate) fn rows_plus_bias(y: &[f32], bias: &[f32]) -> (Vec<f32>, Vec<f64>) {
    let width = bias.len().max(1);
    let f32s = y.chunks_exact(width).flat_map(|r| r.iter().zip(bias).map(|(&v, &b)| v + b)).collect();
    let exact = y.chunks_exact(width).flat_map(|r| r.iter().zip(bias).map(|(&v, &b)| f64::from(v) + f64::from(b))).collect();
    (f32s, exact)
}

/// `qnet_loss` (its batch loss included) against the oracle's loss evaluated on the GPU's own
/// forward outputs: the Double DQN actions exactly, then the loss at those actions.
pub fn check_qnet_loss(gpu: &Gpu, case: &QNetCase) -> Result<Vec<Comparison>> {
    use tallyho_oracle::qnet as spec;
    use tallyho_oracle::tolerance::QNET_LOSS;
    let mut st = QNetSetup::new(gpu, case)?;
    st.net.poison_outputs()?;
    st.forward()?;
    st.net.loss(&st.device_batch, &st.device_weights)?;
    let (cfg, b, t) = (&st.cfg, case.batch, &st.batch);
    let (on, tg) = (st.net.read_forward(0)?, st.net.read_forward(1)?);
    let on_s = forward_of_gpu(cfg, &on, &t.states, 0..b);
    let on_s2 = forward_of_gpu(cfg, &on, &t.next_states, b..2 * b);
    let tg_s2 = forward_of_gpu(cfg, &tg, &t.next_states, b..2 * b);
    let got = st.net.read_loss()?;
    let want_next = spec::next_actions(cfg, &on_s2);
    let want = spec::loss_with_next_actions(cfg, &on_s, &tg_s2, &want_next, &t.actions, &t.rewards, &t.dones, &st.weights);
    let sample_loss: Vec<f32> = got.sample_loss.iter().map(|&v| v as f32).collect();
    Ok(vec![
        compare_exact("next actions", &got.next_actions, &want_next),
        compare_f32("loss", &[got.loss as f32], &[want.loss], QNET_LOSS),
        compare_f32("sample loss", &sample_loss, &want.per_sample_loss, QNET_LOSS),
        compare_f32("priorities", &got.priorities, &want.per_sample_priority, QNET_LOSS),
        compare_f32("head gradient", &got.head_grad, &spec::head_grad(cfg, &want.dlogits, b), QNET_LOSS),
    ])
}

/// The backward GEMMs and `qnet_backward` against the oracle's backward from the GPU's own
/// activations and head-output gradient (so the ReLU masks are the same), tensor by tensor.
pub fn check_qnet_backward(gpu: &Gpu, case: &QNetCase) -> Result<Vec<Comparison>> {
    use tallyho_oracle::compare_rel_norm;
    use tallyho_oracle::qnet as spec;
    use tallyho_oracle::tolerance::gemm_chain;
    let mut st = QNetSetup::new(gpu, case)?;
    st.net.poison_outputs()?;
    st.forward()?;
    st.net.loss(&st.device_batch, &st.device_weights)?;
    st.net.backward()?;
    let (cfg, b) = (&st.cfg, case.batch);
    let fwd = forward_of_gpu(cfg, &st.net.read_forward(0)?, &st.batch.states, 0..b);
    let dy = widen(&st.net.read_loss()?.head_grad);
    let want = spec::backward_from_head_grad(cfg, &st.online, &fwd, &dy);
    let got = st.net.grads()?;
    // The deepest gradient (w1) went through every backward product: dy w2^T (fan-out of a
    // head, at most n_max NA), dhh wh^T (H), dh2 w2^T (h2), then x^T dh1 over the batch.
    let n_max = cfg.branches.iter().copied().max().unwrap_or(1);
    let tol = gemm_chain(&[n_max * cfg.atoms, spec::hidden_width(cfg), cfg.h2, cfg.h1, b]);
    Ok(spec::layout(cfg)
        .into_iter()
        .map(|v| compare_rel_norm(&format!("grad {}", v.name), &got[v.range()], &want[v.range()], tol))
        .collect())
}

/// `steps` full updates (forward, loss, backward, clip, Adam) of the GPU network and of the
/// oracle's `update_step` from the same parameters on the same batch. Per step: the
/// parameter displacement (`tolerance::QNET_TRAJECTORY`), the loss, the gradient norm and
/// the priorities. Each output's comparisons are merged over the steps; the output's name
/// says the first step that failed.
pub fn check_qnet_update(gpu: &Gpu, case: &QNetCase, steps: u32) -> Result<Vec<Comparison>> {
    use tallyho_oracle::compare_rel_norm;
    use tallyho_oracle::optimizer::AdamState;
    use tallyho_oracle::qnet as spec;
    use tallyho_oracle::tolerance::{gemm_chain, QNET_TRAJECTORY};
    let mut st = QNetSetup::new(gpu, case)?;
    let cfg = st.cfg.clone();
    let mut online = st.online.clone();
    let p0 = widen(&online);
    let mut adam = AdamState::new(online.len());
    let [.., fwd_chain] = forward_chain(&cfg);
    let n_max = cfg.branches.iter().copied().max().unwrap_or(1);
    let bwd_chain = [fwd_chain.clone(), vec![n_max * cfg.atoms, spec::hidden_width(&cfg), cfg.h2, cfg.h1, case.batch]].concat();
    let (loss_tol, grad_tol) = (gemm_chain(&fwd_chain), gemm_chain(&bwd_chain));
    let mut merged: Vec<Comparison> = Vec::new();
    for step in 1..=steps {
        st.net.update(&st.device_batch, &st.device_weights)?;
        let want = spec::update_step(&cfg, &mut online, &st.target, &mut adam, &st.batch, &st.weights)
            .map_err(|e| crate::Error::Usage(format!("oracle update: {e}")))?;
        let got = st.net.read_loss()?;
        let (got_p, _) = st.net.params()?;
        let disp = |p: &[f32]| -> Vec<f64> { p.iter().zip(&p0).map(|(&x, &x0)| f64::from(x) - x0).collect() };
        let got_disp: Vec<f32> = disp(&got_p).iter().map(|&v| v as f32).collect();
        let ctl = st.net.opt.ctl()?;
        let now = vec![
            compare_rel_norm("parameter displacement", &got_disp, &disp(&online), QNET_TRAJECTORY),
            compare_rel_norm("loss", &[got.loss as f32], &[want.loss], loss_tol),
            compare_rel_norm("priorities", &got.priorities, &want.priorities, loss_tol),
            compare_rel_norm("gradient norm", &[ctl.norm], &[want.grad_norm], grad_tol),
            compare_exact("adam step", &[ctl.step], &[adam.step]),
        ];
        if merged.is_empty() {
            merged = now;
        } else {
            for (m, c) in merged.iter_mut().zip(&now) {
                if m.passed() && !c.passed() {
                    m.output = format!("{} (first failed at step {step})", m.output);
                }
                m.merge(c);
            }
        }
    }
    Ok(merged)
}

/// Merge step `t`'s comparisons into one row per output across steps, a failing one
/// named with the step it first failed at.
pub(crate) fn merge_step(out: &mut Vec<Comparison>, t: usize, step: Vec<Comparison>) {
    for mut c in step {
        if !c.passed() {
            c.output = format!("{} (first failure at step {t})", c.output);
        }
        match out.iter_mut().find(|o| o.output == c.output) {
            Some(o) => o.merge(&c),
            None => out.push(c),
        }
    }
}
