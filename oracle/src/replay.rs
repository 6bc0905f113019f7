//! Prioritized experience replay (Schaul et al. 2016, "Prioritized Experience Replay"): the
//! spec of the `replay_*` kernels in cuda/ (insert, sample, gather, update priorities) and
//! their launchers in src/replay.rs.
//!
//! Storage is a ring of capacity C. Each slot holds a transition (s, a, r, s', discount): the
//! state and next state as `S` f32 each (f32, not bf16, so that the gather is a bitwise copy
//! the oracle checks exactly; at the default sizes the ring is a few hundred MB of the
//! H200's 141 GB), the [`BRANCH_COUNT`] action branches (direction, size, order type) as i32, the
//! (n-step) reward as f32 and the bootstrap discount as f32, read directly by the loss as the
//! factor of the target's next-state value (see [`Transitions::discounts`]).
//!
//! Priorities live in a sum tree of `L = next_pow2(C)` leaves stored as `2L` f32: node 1 is
//! the root (the total), node `n` has children `2n` and `2n + 1`, leaf `i` is node `L + i`,
//! node 0 is unused and 0. Every internal node is the float sum `left + right` of its
//! children, computed in exactly that order whenever a leaf below it changes, so the tree is
//! a deterministic function of its leaves and the oracle reproduces every node bit for bit.
//!
//! The control block `ReplayCtl` (cursor, size, sample step, running max priority) lives in
//! device memory and is advanced only by kernels, so the whole path can be captured in a
//! CUDA graph and replayed without any host value changing.

use serde::{Deserialize, Serialize};

use crate::action::BRANCH_COUNT;
use crate::config::ConfigError;
use crate::philox::{self, stream};

/// The prioritized replay buffer (Schaul et al. 2016, "Prioritized Experience Replay").
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReplayConfig {
    /// Ring capacity C (transitions).
    pub capacity: usize,
    /// State width S (floats per state).
    pub state_dim: usize,
    /// Batch size B of one sample.
    pub batch: usize,
    /// Priority exponent alpha: p = (|delta| + eps)^alpha.
    pub alpha: f32,
    /// Priority offset eps, so that no transition starves (0 allowed: then |delta| = 0 is never drawn).
    pub eps: f32,
    /// Initial importance exponent beta_0, annealed linearly to 1.
    pub beta0: f32,
    /// Number of samples over which beta reaches 1 (0: beta = 1 from the start).
    pub beta_steps: u32,
    /// Run seed: the Philox key.
    pub seed: u64,
}

pub const MAX_CAPACITY: usize = 1 << 30;

impl Default for ReplayConfig {
    fn default() -> Self {
        ReplayConfig {
            capacity: 1 << 17,
            state_dim: 32,
            batch: 256,
            alpha: 0.6,
            eps: 1e-6,
            beta0: 0.4,
            beta_steps: 100_000,
            seed: 0x7a11_1b0,
        }
    }
}

impl ReplayConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (name, v) in [
            ("capacity", self.capacity),
            ("state_dim", self.state_dim),
            ("batch", self.batch),
        ] {
            if v == 0 {
                return Err(ConfigError::Zero { name });
            }
        }
        if self.batch > MAX_CAPACITY / 4 {
            return Err(ConfigError::OutOfRange {
                name: "batch",
                value: self.batch as f64,
                range: "[1, 2^28]",
                fix:
                    "lower replay.batch: the replay holds at least 4 batches and at most 2^30 rows",
            });
        }
        if self.capacity < 4 * self.batch {
            return Err(ConfigError::CapacityBelowFourBatches {
                capacity: self.capacity,
                batch: self.batch,
                need: 4 * self.batch,
            });
        }
        if self.capacity > MAX_CAPACITY {
            return Err(ConfigError::CapacityTooLarge {
                capacity: self.capacity,
                max: MAX_CAPACITY,
            });
        }
        let ranges = [
            (
                "alpha",
                self.alpha,
                0.0,
                1.0,
                "[0, 1]",
                "use 0 for uniform sampling, up to 1 for fully proportional",
            ),
            (
                "eps",
                self.eps,
                0.0,
                1.0,
                "[0, 1]",
                "a small positive offset such as 1e-6",
            ),
            (
                "beta0",
                self.beta0,
                0.0,
                1.0,
                "[0, 1]",
                "a start value such as 0.4",
            ),
        ];
        for (name, v, lo, hi, range, fix) in ranges {
            if !(lo..=hi).contains(&v) {
                return Err(ConfigError::OutOfRange {
                    name,
                    value: f64::from(v),
                    range,
                    fix,
                });
            }
        }
        Ok(())
    }

    /// Leaves of the sum tree: the capacity rounded up to a power of two.
    pub fn leaves(&self) -> usize {
        self.capacity.next_power_of_two()
    }

    /// Per-sample beta increment, rounded once to float; both sides use this value.
    pub fn beta_increment(&self) -> f32 {
        if self.beta_steps == 0 {
            1.0
        } else {
            ((1.0 - f64::from(self.beta0)) / f64::from(self.beta_steps)) as f32
        }
    }
}

/// The replay's device-resident control block, mirrored by `struct ReplayCtl` in
/// cuda/common/replay.cuh.
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C)]
pub struct ReplayCtl {
    /// Next slot to write.
    pub cursor: u32,
    /// Number of valid transitions, at most C.
    pub size: u32,
    /// Number of samples drawn so far: the Philox step and the beta schedule's clock.
    pub sample_step: u32,
    /// Running maximum of every priority ever assigned (starts at 1); new transitions get it.
    pub max_priority: f32,
}

impl Default for ReplayCtl {
    fn default() -> Self {
        ReplayCtl {
            cursor: 0,
            size: 0,
            sample_step: 0,
            max_priority: 1.0,
        }
    }
}

/// A set of `n` transitions, row-major, in the replay's storage layout.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Transitions {
    pub states: Vec<f32>,
    pub next_states: Vec<f32>,
    pub actions: Vec<i32>,
    pub rewards: Vec<f32>,
    /// The bootstrap discount of the row: gamma^k for a window of k steps that ended without a
    /// terminal (including truncations: the time limit and end of data bootstrap from s',
    /// Pardo et al. 2018), 0 where the window ended in a terminal; the n-step assembly
    /// (`transition`) makes it.
    pub discounts: Vec<f32>,
}

impl Transitions {
    pub fn zeros(n: usize, state_dim: usize) -> Self {
        Transitions {
            states: vec![0.0; n * state_dim],
            next_states: vec![0.0; n * state_dim],
            actions: vec![0; n * BRANCH_COUNT],
            rewards: vec![0.0; n],
            discounts: vec![0.0; n],
        }
    }

    pub fn len(&self) -> usize {
        self.rewards.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rewards.is_empty()
    }

    /// Copy row `from` of `src` into row `to` of `self`.
    fn copy_row(&mut self, to: usize, src: &Transitions, from: usize, s: usize) {
        self.states[to * s..(to + 1) * s].copy_from_slice(&src.states[from * s..(from + 1) * s]);
        self.next_states[to * s..(to + 1) * s]
            .copy_from_slice(&src.next_states[from * s..(from + 1) * s]);
        let a = BRANCH_COUNT;
        self.actions[to * a..(to + 1) * a].copy_from_slice(&src.actions[from * a..(from + 1) * a]);
        self.rewards[to] = src.rewards[from];
        self.discounts[to] = src.discounts[from];
    }
}

/// The whole replay state: what the GPU holds, on the host.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplayState {
    pub cfg: ReplayConfig,
    pub store: Transitions,
    pub tree: Vec<f32>,
    pub ctl: ReplayCtl,
}

/// One sample: indices, importance weights, and the thresholds they came from.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub thresholds: Vec<f32>,
    pub indices: Vec<u32>,
    pub weights: Vec<f64>,
}

impl ReplayState {
    pub fn new(cfg: &ReplayConfig) -> Self {
        ReplayState {
            cfg: cfg.clone(),
            store: Transitions::zeros(cfg.capacity, cfg.state_dim),
            tree: vec![0.0; 2 * cfg.leaves()],
            ctl: ReplayCtl::default(),
        }
    }

    pub fn leaf(&self, i: usize) -> f32 {
        self.tree[self.cfg.leaves() + i]
    }

    pub fn total(&self) -> f32 {
        self.tree[1]
    }
}

/// Recompute every ancestor of the `touched` leaves, level by level from the bottom:
/// `tree[n] = tree[2n] + tree[2n + 1]` in float. The result depends only on the leaves.
pub fn sum_tree_refresh(tree: &mut [f32], leaves: usize, touched: &[u32]) {
    let mut nodes: Vec<usize> = touched.iter().map(|&i| leaves + i as usize).collect();
    while leaves > 1 && nodes.first().is_some_and(|&n| n > 1) {
        for n in nodes.iter_mut() {
            *n /= 2;
            tree[*n] = tree[2 * *n] + tree[2 * *n + 1];
        }
    }
}

/// Every internal node equals the float sum of its children.
pub fn sum_tree_is_consistent(tree: &[f32]) -> bool {
    let leaves = tree.len() / 2;
    (1..leaves).all(|n| tree[n].to_bits() == (tree[2 * n] + tree[2 * n + 1]).to_bits())
}

/// `replay_insert`: write the `n` transitions at slots `(cursor + j) mod C`, give each the running
/// max priority, refresh their ancestors, then `cursor <- (cursor + n) mod C` and
/// `size <- min(size + n, C)`. Requires `n <= C` (a larger batch would overwrite itself).
pub fn replay_insert(st: &mut ReplayState, batch: &Transitions) {
    let (c, s, l) = (st.cfg.capacity, st.cfg.state_dim, st.cfg.leaves());
    let n = batch.len();
    debug_assert!(
        n <= c,
        "insert of {n} transitions exceeds capacity {c}: callers validate"
    );
    let slots: Vec<u32> = (0..n)
        .map(|j| ((st.ctl.cursor as usize + j) % c) as u32)
        .collect();
    for (j, &slot) in slots.iter().enumerate() {
        st.store.copy_row(slot as usize, batch, j, s);
        st.tree[l + slot as usize] = st.ctl.max_priority;
    }
    sum_tree_refresh(&mut st.tree, l, &slots);
    st.ctl.cursor = ((st.ctl.cursor as usize + n) % c) as u32;
    st.ctl.size = (st.ctl.size as usize + n).min(c) as u32;
}

/// Importance exponent at a sample step: `min(1, fma(step, beta_inc, beta0))` in float, with
/// `beta_inc = (1 - beta0) / beta_steps` rounded once (`ReplayConfig::beta_increment`).
pub fn replay_beta(cfg: &ReplayConfig, step: u32) -> f32 {
    (step as f32)
        .mul_add(cfg.beta_increment(), cfg.beta0)
        .min(1.0)
}

/// Stratified thresholds in [0, total): `t_i = (i + u_i) * (total / B)` in float, each
/// operation rounded to nearest, with `u_i = u01(word 0 of philox((i, step, REPLAY_SAMPLE, 0), seed))`.
/// One threshold per stratum keeps the batch spread over the whole priority mass.
pub fn replay_thresholds(total: f32, batch: usize, seed: u64, step: u32) -> Vec<f32> {
    let seg = total / batch as f32;
    (0..batch)
        .map(|i| {
            let u = philox::u01(philox::draw(seed, i as u32, step, stream::REPLAY_SAMPLE)[0]);
            (i as f32 + u) * seg
        })
        .collect()
}

/// Descend from the root to the leaf whose prefix-sum interval holds `t`: at each node go
/// left when `t < left` or the right subtree is empty, else subtract `left` and go right.
/// With a positive total this always ends on a leaf of positive priority, even when float
/// rounding puts `t` at or past the total.
pub fn sum_tree_descend(tree: &[f32], leaves: usize, mut t: f32) -> u32 {
    let mut node = 1;
    while node < leaves {
        let left = tree[2 * node];
        let right = tree[2 * node + 1];
        if t < left || right <= 0.0 {
            node = 2 * node;
        } else {
            t -= left;
            node = 2 * node + 1;
        }
    }
    (node - leaves) as u32
}

/// Importance weights normalised by their batch maximum: `w_i = (N P_i)^-beta / max_j (N P_j)^-beta
/// = (p_i / p_min)^-beta`, with `p` the sampled leaf priorities and `p_min` the batch minimum
/// (N and the total cancel). Evaluated in f64.
pub fn replay_is_weights(priorities: &[f32], beta: f32) -> Vec<f64> {
    let p_min = priorities.iter().copied().fold(f32::INFINITY, f32::min);
    priorities
        .iter()
        .map(|&p| (f64::from(p) / f64::from(p_min)).powf(-f64::from(beta)))
        .collect()
}

/// `replay_sample`: B thresholds by Philox at the current sample step, a descent for each, the
/// importance weights with beta at that step; then the sample step advances by one.
/// Requires `size >= 1` (a positive total).
pub fn replay_sample(st: &mut ReplayState) -> Sample {
    let cfg = &st.cfg;
    let step = st.ctl.sample_step;
    let thresholds = replay_thresholds(st.total(), cfg.batch, cfg.seed, step);
    let indices: Vec<u32> = thresholds
        .iter()
        .map(|&t| sum_tree_descend(&st.tree, cfg.leaves(), t))
        .collect();
    let priorities: Vec<f32> = indices.iter().map(|&i| st.leaf(i as usize)).collect();
    let weights = replay_is_weights(&priorities, replay_beta(cfg, step));
    st.ctl.sample_step = step.wrapping_add(1);
    Sample {
        thresholds,
        indices,
        weights,
    }
}

/// `replay_gather`: the transitions at `indices`, in batch order.
pub fn replay_gather(st: &ReplayState, indices: &[u32]) -> Transitions {
    let mut out = Transitions::zeros(indices.len(), st.cfg.state_dim);
    for (j, &i) in indices.iter().enumerate() {
        out.copy_row(j, &st.store, i as usize, st.cfg.state_dim);
    }
    out
}

/// Priority of a TD error: `(|delta| + eps)^alpha`, in f64.
pub fn replay_priority(td_abs: f32, alpha: f32, eps: f32) -> f64 {
    (f64::from(td_abs.abs()) + f64::from(eps)).powf(f64::from(alpha))
}

/// `replay_update_priorities`: for j = 0..B in order, `leaf[idx_j] <- round_f32(replay_priority(td_j))`,
/// so when an index repeats the last occurrence in the batch wins; the running max priority
/// takes the max of every assigned priority; then the ancestors are refreshed. Returns the
/// f64 priorities in batch order.
pub fn replay_update_priorities(st: &mut ReplayState, indices: &[u32], td_abs: &[f32]) -> Vec<f64> {
    let l = st.cfg.leaves();
    let p: Vec<f64> = td_abs
        .iter()
        .map(|&d| replay_priority(d, st.cfg.alpha, st.cfg.eps))
        .collect();
    for (&i, &pj) in indices.iter().zip(&p) {
        st.tree[l + i as usize] = pj as f32;
        st.ctl.max_priority = st.ctl.max_priority.max(pj as f32);
    }
    sum_tree_refresh(&mut st.tree, l, indices);
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_below_four_batches_is_refused_with_the_fix() {
        let cfg = ReplayConfig {
            capacity: 512,
            batch: 256,
            ..ReplayConfig::default()
        };
        let msg = cfg.validate().unwrap_err().to_string();
        assert_eq!(
            msg,
            "capacity 512 is below 4 x batch 256 (= 1024): raise replay.capacity or lower replay.batch"
        );
    }

    #[test]
    fn zero_sizes_and_out_of_range_constants_are_refused() {
        assert!(ReplayConfig {
            state_dim: 0,
            ..ReplayConfig::default()
        }
        .validate()
        .is_err());
        assert!(ReplayConfig {
            alpha: 1.5,
            ..ReplayConfig::default()
        }
        .validate()
        .is_err());
        assert!(ReplayConfig {
            eps: f32::NAN,
            ..ReplayConfig::default()
        }
        .validate()
        .is_err());
        assert!(ReplayConfig::default().validate().is_ok());
    }

    fn cfg(capacity: usize, batch: usize) -> ReplayConfig {
        ReplayConfig {
            capacity,
            batch,
            state_dim: 2,
            ..ReplayConfig::default()
        }
    }

    fn transitions(n: usize, s: usize, base: f32) -> Transitions {
        let mut t = Transitions::zeros(n, s);
        for j in 0..n {
            t.rewards[j] = base + j as f32;
            t.states[j * s] = base + j as f32;
        }
        t
    }

    #[test]
    fn insert_wraps_around_the_ring_and_size_saturates() {
        let mut st = ReplayState::new(&cfg(8, 2));
        replay_insert(&mut st, &transitions(6, 2, 0.0));
        replay_insert(&mut st, &transitions(5, 2, 100.0));
        assert_eq!((st.ctl.cursor, st.ctl.size), (3, 8));
        assert_eq!(&st.store.rewards[..4], &[102.0, 103.0, 104.0, 3.0]);
        assert_eq!(st.total(), 8.0);
        assert!(sum_tree_is_consistent(&st.tree));
    }

    #[test]
    fn descent_never_lands_on_an_empty_leaf() {
        let mut st = ReplayState::new(&cfg(13, 2));
        replay_insert(&mut st, &transitions(5, 2, 0.0));
        // Thresholds at and past the total still land on a filled slot.
        for t in [0.0, 2.5, 4.999, 5.0, 7.0, f32::MAX] {
            let i = sum_tree_descend(&st.tree, st.cfg.leaves(), t);
            assert!(i < 5, "threshold {t} gave leaf {i}");
        }
    }

    #[test]
    fn repeated_indices_take_the_last_priority() {
        let mut st = ReplayState::new(&cfg(8, 2));
        replay_insert(&mut st, &transitions(8, 2, 0.0));
        replay_update_priorities(&mut st, &[3, 5, 3], &[0.5, 2.0, 0.25]);
        let want = replay_priority(0.25, st.cfg.alpha, st.cfg.eps) as f32;
        assert_eq!(st.leaf(3), want);
        assert_eq!(
            st.ctl.max_priority,
            replay_priority(2.0, st.cfg.alpha, st.cfg.eps) as f32
        );
        assert!(sum_tree_is_consistent(&st.tree));
    }

    #[test]
    fn weights_are_one_at_the_minimum_and_at_most_one() {
        let w = replay_is_weights(&[0.5, 2.0, 1.0], 0.4);
        assert_eq!(w[0], 1.0);
        assert!(w.iter().all(|&x| x > 0.0 && x <= 1.0));
    }

    #[test]
    fn beta_anneals_to_one_and_stays() {
        let c = ReplayConfig {
            beta0: 0.4,
            beta_steps: 10,
            ..ReplayConfig::default()
        };
        assert_eq!(replay_beta(&c, 0), 0.4);
        assert!((replay_beta(&c, 5) - 0.7).abs() < 1e-6);
        assert_eq!(replay_beta(&c, 10), 1.0);
        assert_eq!(replay_beta(&c, 1000), 1.0);
    }
}
