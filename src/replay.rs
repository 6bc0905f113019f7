//! The prioritized replay buffer on the device: typed launchers for the `replay_*` kernels of
//! cuda/ (spec: tallyho_oracle::replay). Every buffer is allocated in `ReplayBuffer::new`; the
//! sample / gather / priority-update path reads its per-step values (cursor, size, sample
//! step, max priority) from the device control block, so it can be captured as a graph.

use crate::error::{Error, Result};
use crate::graph::{address, Binding, GraphSlot};
use crate::runtime::{entry, grid_stride, one_block, Gpu};
use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, PushKernelArg};
use std::sync::Arc;
use tallyho_oracle::action::BRANCH_COUNT;
use tallyho_oracle::philox::key_of_seed;
use tallyho_oracle::replay::{ReplayCtl, ReplayState, Transitions};
use tallyho_oracle::ReplayConfig;

/// Transitions in device memory, row-major, `rows` of them.
pub struct DeviceTransitions {
    pub rows: usize,
    pub states: CudaSlice<f32>,
    pub next_states: CudaSlice<f32>,
    pub actions: CudaSlice<i32>,
    pub rewards: CudaSlice<f32>,
    pub discounts: CudaSlice<f32>,
}

impl DeviceTransitions {
    pub fn alloc(stream: &Arc<CudaStream>, rows: usize, state_dim: usize) -> Result<Self> {
        Ok(DeviceTransitions {
            rows,
            states: stream.alloc_zeros(rows * state_dim)?,
            next_states: stream.alloc_zeros(rows * state_dim)?,
            actions: stream.alloc_zeros(rows * BRANCH_COUNT)?,
            rewards: stream.alloc_zeros(rows)?,
            discounts: stream.alloc_zeros(rows)?,
        })
    }

    /// Copy `t` into the first `t.len()` rows (not a hot-path operation).
    pub fn upload(
        &mut self,
        stream: &Arc<CudaStream>,
        t: &Transitions,
        state_dim: usize,
    ) -> Result<()> {
        let n = t.len();
        if n > self.rows {
            return Err(Error::Shape(format!(
                "{n} transitions do not fit a buffer of {} rows",
                self.rows
            )));
        }
        check_shape(t, n, state_dim)?;
        stream.memcpy_htod(&t.states, &mut self.states.slice_mut(..n * state_dim))?;
        stream.memcpy_htod(
            &t.next_states,
            &mut self.next_states.slice_mut(..n * state_dim),
        )?;
        stream.memcpy_htod(&t.actions, &mut self.actions.slice_mut(..n * BRANCH_COUNT))?;
        stream.memcpy_htod(&t.rewards, &mut self.rewards.slice_mut(..n))?;
        stream.memcpy_htod(&t.discounts, &mut self.discounts.slice_mut(..n))?;
        Ok(())
    }

    pub fn download(&self, stream: &Arc<CudaStream>) -> Result<Transitions> {
        Ok(Transitions {
            states: stream.clone_dtoh(&self.states)?,
            next_states: stream.clone_dtoh(&self.next_states)?,
            actions: stream.clone_dtoh(&self.actions)?,
            rewards: stream.clone_dtoh(&self.rewards)?,
            discounts: stream.clone_dtoh(&self.discounts)?,
        })
    }
}

fn check_shape(t: &Transitions, n: usize, s: usize) -> Result<()> {
    let ok = t.states.len() == n * s
        && t.next_states.len() == n * s
        && t.actions.len() == n * BRANCH_COUNT
        && t.discounts.len() == n;
    if ok {
        Ok(())
    } else {
        Err(Error::Shape(format!(
            "transitions are not {n} rows of state width {s}: states {}, next states {}, actions {} (want {}), discounts {}",
            t.states.len(),
            t.next_states.len(),
            t.actions.len(),
            n * BRANCH_COUNT,
            t.discounts.len()
        )))
    }
}

struct Kernels {
    insert_rows: CudaFunction,
    insert_tree: CudaFunction,
    sample: CudaFunction,
    gather: CudaFunction,
    update: CudaFunction,
}

/// The replay buffer. Outputs of the last sample: `indices`, `weights`, and after `gather`,
/// `batch`.
pub struct ReplayBuffer {
    cfg: ReplayConfig,
    stream: Arc<CudaStream>,
    k: Kernels,
    store: DeviceTransitions,
    tree: CudaSlice<f32>,
    /// The control block, as the four 32-bit words of `ReplayCtl` (max priority as float bits).
    ctl: CudaSlice<u32>,
    /// Scratch for the last-occurrence rule of `replay_update_priorities`; all 0 between launches.
    winner: CudaSlice<u32>,
    staging: DeviceTransitions,
    pub indices: CudaSlice<u32>,
    pub weights: CudaSlice<f32>,
    pub batch: DeviceTransitions,
    /// Whether an insert has been issued. Monotone (the size never shrinks), so it stays true
    /// under graph replay; the count itself lives on the device (the control block's size).
    filled: bool,
    step_graph: GraphSlot,
}

/// `ReplayCtl` as the four 32-bit words the device holds (max priority as float bits).
pub fn ctl_words(c: &ReplayCtl) -> [u32; 4] {
    [c.cursor, c.size, c.sample_step, c.max_priority.to_bits()]
}

/// The inverse of [`ctl_words`].
pub fn ctl_of_words(w: &[u32]) -> Result<ReplayCtl> {
    match *w {
        [cursor, size, sample_step, max] => Ok(ReplayCtl { cursor, size, sample_step, max_priority: f32::from_bits(max) }),
        _ => Err(Error::Fixture(format!(
            "a replay control block has 4 words, this one has {}: record the fixture again with this version",
            w.len()
        ))),
    }
}

// The device's `struct ReplayCtl` (cuda/common/replay.cuh static_asserts 16 bytes) is the
// oracle's repr(C) ReplayCtl, moved as the four words of ctl_words.
const _: () = assert!(std::mem::size_of::<ReplayCtl>() == 16);

impl ReplayBuffer {
    /// Allocate everything for `cfg`; `max_insert` is the largest host insert (staging rows).
    pub fn new(gpu: &Gpu, cfg: &ReplayConfig, max_insert: usize) -> Result<Self> {
        cfg.validate()?;
        if max_insert == 0 || max_insert > cfg.capacity {
            return Err(Error::Shape(format!(
                "max insert {max_insert} must be in 1..={} (the capacity)",
                cfg.capacity
            )));
        }
        let s = &gpu.stream;
        let k = Kernels {
            insert_rows: gpu.function(entry::replay_insert::REPLAY_INSERT_ROWS)?,
            insert_tree: gpu.function(entry::replay_insert::REPLAY_INSERT_TREE)?,
            sample: gpu.function(entry::replay_sample::REPLAY_SAMPLE)?,
            gather: gpu.function(entry::replay_gather::REPLAY_GATHER)?,
            update: gpu.function(entry::replay_update_priorities::REPLAY_UPDATE_PRIORITIES)?,
        };
        let ctl = s.clone_htod(&ctl_words(&ReplayCtl::default()))?;
        Self::allocate(s, cfg, max_insert, k, ctl).map_err(|e| match e {
            Error::Driver(d) if d.0 == cudarc::driver::sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY => {
                Error::OutOfMemory {
                    what: format!(
                        "a replay buffer of capacity {} x state width {}",
                        cfg.capacity, cfg.state_dim
                    ),
                    mib: Self::device_bytes(cfg, max_insert) >> 20,
                    fix: "lower --capacity or free the device".into(),
                }
            }
            other => other,
        })
    }

    /// Device bytes a buffer of `cfg` allocates.
    pub fn device_bytes(cfg: &ReplayConfig, max_insert: usize) -> usize {
        let row = (2 * cfg.state_dim + BRANCH_COUNT + 2) * 4;
        (cfg.capacity + max_insert + cfg.batch) * row
            + 2 * cfg.leaves() * 4
            + cfg.capacity * 4
            + cfg.batch * 8
    }

    fn allocate(
        s: &Arc<CudaStream>,
        cfg: &ReplayConfig,
        max_insert: usize,
        k: Kernels,
        ctl: CudaSlice<u32>,
    ) -> Result<Self> {
        Ok(ReplayBuffer {
            cfg: cfg.clone(),
            stream: s.clone(),
            k,
            store: DeviceTransitions::alloc(s, cfg.capacity, cfg.state_dim)?,
            tree: s.alloc_zeros(2 * cfg.leaves())?,
            ctl,
            winner: s.alloc_zeros(cfg.capacity)?,
            staging: DeviceTransitions::alloc(s, max_insert, cfg.state_dim)?,
            indices: s.alloc_zeros(cfg.batch)?,
            weights: s.alloc_zeros(cfg.batch)?,
            batch: DeviceTransitions::alloc(s, cfg.batch, cfg.state_dim)?,
            filled: false,
            step_graph: GraphSlot::new("replay_sample_update"),
        })
    }

    pub fn config(&self) -> &ReplayConfig {
        &self.cfg
    }

    fn leaves(&self) -> u32 {
        self.cfg.leaves() as u32
    }

    /// `replay_insert` of the first `n` rows of `rows`: ring write with max priority, tree
    /// refresh, cursor and size advance. Two launches, no host synchronization.
    pub fn insert(&mut self, rows: &DeviceTransitions, n: usize) -> Result<()> {
        self.insert_from(Some(rows), n)
    }

    /// Upload `t` to the staging rows and insert it (host data: not for the hot path).
    pub fn insert_host(&mut self, t: &Transitions) -> Result<()> {
        let n = t.len();
        if n > self.staging.rows {
            return Err(Error::Shape(format!(
                "insert of {n} host transitions exceeds the staging rows {} given at construction",
                self.staging.rows
            )));
        }
        self.staging.upload(&self.stream, t, self.cfg.state_dim)?;
        self.insert_from(None, n)
    }

    /// Insert from `rows`, or from the staging rows when `None`.
    fn insert_from(&mut self, rows: Option<&DeviceTransitions>, n: usize) -> Result<()> {
        let rows = rows.unwrap_or(&self.staging);
        if n == 0 || n > rows.rows || n > self.cfg.capacity {
            return Err(Error::Shape(format!(
                "insert of {n} transitions: must be 1..={} (rows given) and at most the capacity {}",
                rows.rows, self.cfg.capacity
            )));
        }
        let (n32, c32, s32) = (
            n as u32,
            self.cfg.capacity as u32,
            self.cfg.state_dim as u32,
        );
        let leaves = self.cfg.leaves() as u32;
        let width = self.cfg.state_dim.max(BRANCH_COUNT);
        let mut b = self.stream.launch_builder(&self.k.insert_rows);
        b.arg(&self.ctl)
            .arg(&rows.states)
            .arg(&rows.next_states)
            .arg(&rows.actions)
            .arg(&rows.rewards)
            .arg(&rows.discounts)
            .arg(&mut self.store.states)
            .arg(&mut self.store.next_states)
            .arg(&mut self.store.actions)
            .arg(&mut self.store.rewards)
            .arg(&mut self.store.discounts)
            .arg(&n32)
            .arg(&c32)
            .arg(&s32);
        // SAFETY: argument order and types follow replay_insert_rows in cuda/replay_insert.cu: ctl
        // is 4 u32 words laid out as struct ReplayCtl; inputs hold >= n rows (checked above),
        // the store holds C rows of width S / 3.
        unsafe { b.launch(grid_stride(n * width)) }?;
        let mut b = self.stream.launch_builder(&self.k.insert_tree);
        b.arg(&mut self.ctl)
            .arg(&mut self.tree)
            .arg(&leaves)
            .arg(&n32)
            .arg(&c32);
        // SAFETY: follows replay_insert_tree's signature; the tree holds 2 * leaves floats and
        // every slot (cursor + j) mod C < C <= leaves. One block, as the kernel requires.
        unsafe { b.launch(one_block(n)) }?;
        self.filled = true;
        Ok(())
    }

    /// `replay_sample`: indices and importance weights of B transitions; advances the sample step.
    pub fn sample(&mut self) -> Result<()> {
        if !self.filled {
            return Err(Error::Shape(
                "sample from an empty replay buffer: insert transitions first".into(),
            ));
        }
        let [key0, key1] = key_of_seed(self.cfg.seed);
        let (beta0, beta_inc) = (self.cfg.beta0, self.cfg.beta_increment());
        let (leaves, batch) = (self.leaves(), self.cfg.batch as u32);
        let mut b = self.stream.launch_builder(&self.k.sample);
        b.arg(&self.tree)
            .arg(&leaves)
            .arg(&mut self.ctl)
            .arg(&key0)
            .arg(&key1)
            .arg(&beta0)
            .arg(&beta_inc)
            .arg(&batch)
            .arg(&mut self.indices)
            .arg(&mut self.weights);
        // SAFETY: follows replay_sample's signature in cuda/replay_sample.cu; indices and weights
        // hold B elements; one block as the kernel requires.
        unsafe { b.launch(one_block(self.cfg.batch)) }?;
        Ok(())
    }

    /// `replay_gather`: the sampled transitions into `batch`.
    pub fn gather(&mut self) -> Result<()> {
        let (batch, s32) = (self.cfg.batch as u32, self.cfg.state_dim as u32);
        let width = self.cfg.state_dim.max(BRANCH_COUNT);
        let mut b = self.stream.launch_builder(&self.k.gather);
        b.arg(&self.indices)
            .arg(&self.store.states)
            .arg(&self.store.next_states)
            .arg(&self.store.actions)
            .arg(&self.store.rewards)
            .arg(&self.store.discounts)
            .arg(&mut self.batch.states)
            .arg(&mut self.batch.next_states)
            .arg(&mut self.batch.actions)
            .arg(&mut self.batch.rewards)
            .arg(&mut self.batch.discounts)
            .arg(&batch)
            .arg(&s32);
        // SAFETY: follows replay_gather's signature; indices come from replay_sample (< C) or from
        // `set_indices` (checked < C); batch buffers hold B rows.
        unsafe { b.launch(grid_stride(self.cfg.batch * width)) }?;
        Ok(())
    }

    /// `replay_update_priorities` of the last sample's indices with `td_abs` (B values).
    pub fn update_priorities(&mut self, td_abs: &CudaSlice<f32>) -> Result<()> {
        if td_abs.len() != self.cfg.batch {
            return Err(Error::Shape(format!(
                "td_abs has {} values, the batch is {}: give one |TD error| per sampled transition",
                td_abs.len(),
                self.cfg.batch
            )));
        }
        let (leaves, batch, c32) = (
            self.leaves(),
            self.cfg.batch as u32,
            self.cfg.capacity as u32,
        );
        let (alpha, eps) = (self.cfg.alpha, self.cfg.eps);
        let mut b = self.stream.launch_builder(&self.k.update);
        b.arg(&mut self.tree)
            .arg(&leaves)
            .arg(&mut self.ctl)
            .arg(&mut self.winner)
            .arg(&self.indices)
            .arg(td_abs)
            .arg(&batch)
            .arg(&c32)
            .arg(&alpha)
            .arg(&eps);
        // SAFETY: follows replay_update_priorities' signature; winner holds C zeros, indices and
        // td_abs hold B values; out-of-range indices are skipped by the kernel. One block.
        unsafe { b.launch(one_block(self.cfg.batch)) }?;
        Ok(())
    }

    /// The update-side replay step: sample, gather, priority update from `td_abs`, run
    /// through the buffer's graph slot (eager, then captured, then replayed).
    pub fn sample_gather_update(&mut self, td_abs: &CudaSlice<f32>) -> Result<()> {
        let stream = self.stream.clone();
        let (a, b) = (|x: &CudaSlice<f32>| address(&stream, x), &self.batch);
        // The input, and the outputs that are public fields (so replaceable).
        #[rustfmt::skip]
        let words = [a(td_abs), address(&stream, &self.indices), a(&self.weights), a(&b.states), a(&b.next_states),
            address(&stream, &b.actions), a(&b.rewards), a(&b.discounts)];
        let binding = Binding::of(&words);
        GraphSlot::run_on(
            self,
            |b| &mut b.step_graph,
            &stream,
            binding,
            |b| {
                b.sample()?;
                b.gather()?;
                b.update_priorities(td_abs)
            },
        )
    }

    pub fn graph_phase(&self) -> crate::graph::Phase {
        self.step_graph.phase()
    }

    /// Set the sample indices directly (tests and fixture replays); each must be < C.
    pub fn set_indices(&mut self, indices: &[u32]) -> Result<()> {
        if indices.len() != self.cfg.batch {
            return Err(Error::Shape(format!(
                "{} indices given, the batch is {}",
                indices.len(),
                self.cfg.batch
            )));
        }
        if let Some(&bad) = indices.iter().find(|&&i| i as usize >= self.cfg.capacity) {
            return Err(Error::Shape(format!(
                "index {bad} is outside the capacity {}",
                self.cfg.capacity
            )));
        }
        self.stream.memcpy_htod(indices, &mut self.indices)?;
        Ok(())
    }

    /// Replace the whole device state with `st` (tests, fixture replays).
    pub fn upload_state(&mut self, st: &ReplayState) -> Result<()> {
        if st.cfg.capacity != self.cfg.capacity
            || st.cfg.state_dim != self.cfg.state_dim
            || st.tree.len() != 2 * self.cfg.leaves()
        {
            return Err(Error::Shape(format!(
                "a replay state of capacity {}, state width {} and {} tree nodes for a buffer of capacity {}, width {} ({} nodes): upload a state of this buffer's config",
                st.cfg.capacity,
                st.cfg.state_dim,
                st.tree.len(),
                self.cfg.capacity,
                self.cfg.state_dim,
                2 * self.cfg.leaves()
            )));
        }
        self.store
            .upload(&self.stream, &st.store, self.cfg.state_dim)?;
        self.stream.memcpy_htod(&st.tree, &mut self.tree)?;
        self.stream
            .memcpy_htod(&ctl_words(&st.ctl), &mut self.ctl)?;
        self.filled = st.ctl.size > 0;
        Ok(())
    }

    /// The whole device state, on the host (synchronizes; tests and fixtures only).
    pub fn download_state(&self) -> Result<ReplayState> {
        Ok(ReplayState {
            cfg: self.cfg.clone(),
            store: self.store.download(&self.stream)?,
            tree: self.stream.clone_dtoh(&self.tree)?,
            ctl: self.ctl()?,
        })
    }

    pub fn ctl(&self) -> Result<ReplayCtl> {
        ctl_of_words(&self.stream.clone_dtoh(&self.ctl)?)
    }

    pub fn tree(&self) -> Result<Vec<f32>> {
        Ok(self.stream.clone_dtoh(&self.tree)?)
    }

    pub fn winner_scratch(&self) -> Result<Vec<u32>> {
        Ok(self.stream.clone_dtoh(&self.winner)?)
    }

    /// Last sample's indices and weights (synchronizes).
    pub fn read_sample(&self) -> Result<(Vec<u32>, Vec<f32>)> {
        Ok((
            self.stream.clone_dtoh(&self.indices)?,
            self.stream.clone_dtoh(&self.weights)?,
        ))
    }

    /// Poison the sample outputs and the batch so a test can tell every element was written.
    pub fn poison_outputs(&mut self) -> Result<()> {
        let b = self.cfg.batch;
        let s = self.cfg.state_dim;
        self.stream
            .memcpy_htod(&vec![u32::MAX; b], &mut self.indices)?;
        self.stream
            .memcpy_htod(&vec![f32::NAN; b], &mut self.weights)?;
        let mut poison = Transitions::zeros(b, s);
        poison.states.fill(f32::NAN);
        poison.next_states.fill(f32::NAN);
        poison.actions.fill(i32::MIN);
        poison.rewards.fill(f32::NAN);
        poison.discounts.fill(f32::NAN);
        self.batch.upload(&self.stream, &poison, s)
    }
}
