//! GPU-vs-oracle checks of the replay buffer's kernels (spec: tallyho_oracle::replay): random
//! valid states and transitions, `replay_insert`, `replay_sample`, `replay_gather` and
//! `replay_update_priorities` against the oracle, and the statistics the sampler's tests use.

use crate::error::Result;
use crate::replay::ReplayBuffer;
use crate::runtime::Gpu;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tallyho_oracle::action::BRANCH_COUNT;
use tallyho_oracle::replay::{self as replay_spec, ReplayState, Transitions};
use tallyho_oracle::tolerance::{REPLAY_IS_WEIGHT, REPLAY_PRIORITY};
use tallyho_oracle::{compare_bitwise, compare_exact, compare_f32, Comparison, ReplayConfig};

/// Sizes and seed of one replay case.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplayCase {
    pub capacity: usize,
    pub state_dim: usize,
    pub batch: usize,
    pub seed: u64,
}

impl ReplayCase {
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
    pub fn random(rng: &mut impl Rng) -> ReplayCase {
        let batch = rng.gen_range(1..=1100);
        ReplayCase {
            capacity: 4 * batch + rng.gen_range(0..3000),
            state_dim: rng.gen_range(1..=40),
            batch,
            seed: rng.gen(),
        }
    }
}

/// `n` random transitions: states in [-2, 2), actions in their branch ranges, discounts 0
/// (a terminal, about 10%) or gamma^k for gamma 0.99 and k in 1..=5 (float products).
pub fn random_transitions(rng: &mut impl Rng, n: usize, state_dim: usize) -> Transitions {
    let mut t = Transitions::zeros(n, state_dim);
    t.states
        .iter_mut()
        .chain(t.next_states.iter_mut())
        .for_each(|x| *x = rng.gen_range(-2.0..2.0));
    for (k, a) in t.actions.iter_mut().enumerate() {
        *a = rng.gen_range(0..(tallyho_oracle::action::ACTION_BRANCHES[k % BRANCH_COUNT] as i32));
    }
    t.rewards
        .iter_mut()
        .for_each(|x| *x = rng.gen_range(-1.0..1.0));
    t.discounts
        .iter_mut()
        .for_each(|x| *x = random_discount(rng, 0.99, 5, 0.1));
    t
}

/// A bootstrap discount as the transition stage makes it: 0 with probability `terminal`,
/// else gamma^k (k float products of 1.0 by gamma) for k uniform in 1..=n.
pub fn random_discount(rng: &mut impl Rng, gamma: f32, n: usize, terminal: f64) -> f32 {
    if rng.gen_bool(terminal) {
        0.0
    } else {
        (0..rng.gen_range(1..=n)).fold(1.0f32, |d, _| d * gamma)
    }
}

/// A random replay state: random fill level (full or not), cursor anywhere, priorities
/// spread over four decades, a consistent sum tree, a random sample step.
pub fn random_state(cfg: &ReplayConfig, rng: &mut impl Rng) -> ReplayState {
    let mut st = ReplayState::new(cfg);
    let c = cfg.capacity;
    let size = if rng.gen_bool(0.5) {
        c
    } else {
        rng.gen_range(1..=c)
    };
    st.store = random_transitions(rng, c, cfg.state_dim);
    let priorities: Vec<f32> = (0..size)
        .map(|_| 10f32.powf(rng.gen_range(-3.0..1.0)))
        .collect();
    set_leaves(&mut st, &priorities);
    st.ctl.size = size as u32;
    st.ctl.cursor = if size < c {
        size as u32
    } else {
        rng.gen_range(0..c) as u32
    };
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
        compare_bitwise("discounts", &got.discounts, &want.discounts),
    ]
}

/// The whole replay state compared bitwise.
pub fn compare_states(got: &ReplayState, want: &ReplayState) -> Vec<Comparison> {
    let mut c = compare_transitions(&got.store, &want.store);
    c.push(compare_bitwise("tree", &got.tree, &want.tree));
    c.push(compare_exact(
        "ctl",
        &crate::replay::ctl_words(&got.ctl),
        &crate::replay::ctl_words(&want.ctl),
    ));
    c
}

/// `replay_insert` of `n` random transitions into `st`.
pub fn check_replay_insert_on(
    gpu: &Gpu,
    st: &ReplayState,
    batch: &Transitions,
) -> Result<Vec<Comparison>> {
    let mut buf = ReplayBuffer::new(gpu, &st.cfg, batch.len().max(1))?;
    buf.upload_state(st)?;
    buf.insert_host(batch)?;
    let got = buf.download_state()?;
    let mut want = st.clone();
    replay_spec::replay_insert(&mut want, batch);
    Ok(compare_states(&got, &want))
}

pub fn check_replay_insert(gpu: &Gpu, case: &ReplayCase, n: usize) -> Result<Vec<Comparison>> {
    let mut rng = ChaCha8Rng::seed_from_u64(case.seed);
    let cfg = case.config();
    let st = random_state(&cfg, &mut rng);
    let batch = random_transitions(&mut rng, n.clamp(1, cfg.capacity), cfg.state_dim);
    check_replay_insert_on(gpu, &st, &batch)
}

/// `replay_sample` from `st`: indices exact, weights within REPLAY_IS_WEIGHT, sample step exact.
pub fn check_replay_sample_on(gpu: &Gpu, st: &ReplayState) -> Result<Vec<Comparison>> {
    let mut buf = ReplayBuffer::new(gpu, &st.cfg, 1)?;
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

pub fn check_replay_sample(gpu: &Gpu, case: &ReplayCase) -> Result<Vec<Comparison>> {
    let mut rng = ChaCha8Rng::seed_from_u64(case.seed);
    check_replay_sample_on(gpu, &random_state(&case.config(), &mut rng))
}

/// `replay_gather` of random indices (repeats included): every output exact.
pub fn check_replay_gather(gpu: &Gpu, case: &ReplayCase) -> Result<Vec<Comparison>> {
    let mut rng = ChaCha8Rng::seed_from_u64(case.seed);
    let cfg = case.config();
    let st = random_state(&cfg, &mut rng);
    let indices: Vec<u32> = (0..cfg.batch)
        .map(|_| rng.gen_range(0..st.ctl.size))
        .collect();
    let mut buf = ReplayBuffer::new(gpu, &cfg, 1)?;
    buf.upload_state(&st)?;
    buf.poison_outputs()?;
    buf.set_indices(&indices)?;
    buf.gather()?;
    let got = buf.batch.download(&gpu.stream)?;
    Ok(compare_transitions(
        &got,
        &replay_spec::replay_gather(&st, &indices),
    ))
}

/// `replay_update_priorities` of `indices` with `td_abs` on `st`: leaves within REPLAY_PRIORITY
/// (the last occurrence of a repeated index winning), every internal node bitwise the sum of
/// its children, max priority within REPLAY_PRIORITY, the scratch left all zero.
pub fn check_replay_update_priorities_on(
    gpu: &Gpu,
    st: &ReplayState,
    indices: &[u32],
    td_abs: &[f32],
) -> Result<Vec<Comparison>> {
    let mut buf = ReplayBuffer::new(gpu, &st.cfg, 1)?;
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
    let want_max = p
        .iter()
        .copied()
        .fold(f64::from(st.ctl.max_priority), f64::max);
    let mut rebuilt = tree.clone();
    sum_tree_build(&mut rebuilt);
    Ok(vec![
        compare_f32("leaves", leaves_of(&tree), &want_leaves, REPLAY_PRIORITY),
        compare_bitwise("tree", &tree, &rebuilt),
        compare_f32(
            "max_priority",
            &[ctl.max_priority],
            &[want_max],
            REPLAY_PRIORITY,
        ),
        compare_exact(
            "ctl",
            &[ctl.cursor, ctl.size, ctl.sample_step],
            &[want.ctl.cursor, want.ctl.size, want.ctl.sample_step],
        ),
        compare_exact("winner_scratch", &winner, &vec![0; winner.len()]),
    ])
}

/// Random indices (about a quarter repeats) and |td| over four decades.
pub fn check_replay_update_priorities(gpu: &Gpu, case: &ReplayCase) -> Result<Vec<Comparison>> {
    let mut rng = ChaCha8Rng::seed_from_u64(case.seed);
    let cfg = case.config();
    let st = random_state(&cfg, &mut rng);
    let mut indices: Vec<u32> = Vec::with_capacity(cfg.batch);
    for j in 0..cfg.batch {
        let repeat = j > 0 && rng.gen_bool(0.25);
        indices.push(if repeat {
            indices[rng.gen_range(0..j)]
        } else {
            rng.gen_range(0..st.ctl.size)
        });
    }
    let td: Vec<f32> = (0..cfg.batch)
        .map(|_| 10f32.powf(rng.gen_range(-4.0..1.0)))
        .collect();
    check_replay_update_priorities_on(gpu, &st, &indices, &td)
}

/// Pearson's chi-square statistic of observed counts against expected counts.
pub fn chi_square(counts: &[u64], expected: &[f64]) -> f64 {
    counts
        .iter()
        .zip(expected)
        .filter(|(_, &e)| e > 0.0)
        .map(|(&o, &e)| (o as f64 - e).powi(2) / e)
        .sum()
}

/// Upper critical value of chi-square with `dof` degrees of freedom at standard-normal
/// quantile `z` (Wilson-Hilferty): z = 3.09 is the 0.1% tail.
pub fn chi_square_critical(dof: usize, z: f64) -> f64 {
    let k = dof as f64;
    let a = 2.0 / (9.0 * k);
    k * (1.0 - a + z * a.sqrt()).powi(3)
}
