//! n-step transition assembly on the device: the typed launcher of
//! cuda/transition_assemble.cu (spec: tallyho_oracle::transition). Each step, every env's
//! (s, a, r, s', done reason) goes into a ring of its last n steps; from step n - 1 on, the
//! launch writes one transition per env (the window that starts n - 1 steps back) into
//! [`TransitionAssembler::out`], the N rows the replay inserts. The ring and each env's push
//! count live in device memory and are advanced by the kernel, so the launch is captured once
//! and replayed; everything is allocated in [`TransitionAssembler::new`].

use crate::error::{Error, Result};
use crate::graph::address;
use crate::replay::DeviceTransitions;
use crate::runtime::{entry, grid_stride, Gpu};
use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, PushKernelArg};
use std::sync::Arc;
use tallyho_oracle::action::BRANCH_COUNT;
use tallyho_oracle::replay::Transitions;
use tallyho_oracle::transition::{TransitionConfig, TransitionRing};

/// One step of every env in device memory, as the stage takes it (row e is env e's).
#[derive(Clone, Copy)]
pub struct DeviceStep<'a> {
    /// s_t: N x S.
    pub states: &'a CudaSlice<f32>,
    /// a_t: N x 3.
    pub actions: &'a CudaSlice<i32>,
    /// r_t, the reward pipeline's reward: N.
    pub rewards: &'a CudaSlice<f32>,
    /// s'_t, the state after the action and before any auto-reset: N x S.
    pub next_states: &'a CudaSlice<f32>,
    /// The env step's done reasons (0 none, 1 take-profit, 2 stop-loss, 3 time limit, 4 end
    /// of data): N.
    pub reasons: &'a CudaSlice<i32>,
}

/// The ring of every env's last n steps, in the oracle's layout ([`TransitionRing`]).
struct Ring {
    states: CudaSlice<f32>,
    next_states: CudaSlice<f32>,
    actions: CudaSlice<i32>,
    rewards: CudaSlice<f32>,
    reasons: CudaSlice<i32>,
    /// Each env's push count, folded into [0, 2n).
    counts: CudaSlice<u32>,
}

/// The n-step assembler of N envs.
pub struct TransitionAssembler {
    cfg: TransitionConfig,
    envs: usize,
    state_dim: usize,
    stream: Arc<CudaStream>,
    kernel: CudaFunction,
    ring: Ring,
    /// The N transitions of the last launch that emitted (from step n - 1 on).
    pub out: DeviceTransitions,
    /// Launches issued (the host's own count of steps t: no device read).
    steps: u64,
}

/// The largest N x S and n x N x S the kernel indexes (32-bit env and element counts).
const MAX_ELEMS: usize = u32::MAX as usize;

impl TransitionAssembler {
    /// Allocate the ring and the output rows for `envs` envs of state width `state_dim`.
    pub fn new(gpu: &Gpu, cfg: &TransitionConfig, envs: usize, state_dim: usize) -> Result<Self> {
        cfg.validate()?;
        if envs == 0 || state_dim == 0 {
            return Err(Error::Shape(format!(
                "a transition assembler of {envs} envs and state width {state_dim}: both must be at least 1 (set --envs and the state width)"
            )));
        }
        let ring_elems = cfg
            .n
            .checked_mul(envs)
            .and_then(|x| x.checked_mul(state_dim.max(BRANCH_COUNT)));
        if ring_elems.is_none_or(|x| x > MAX_ELEMS) {
            return Err(Error::Shape(format!(
                "a ring of n {} x {envs} envs x state width {state_dim} exceeds {MAX_ELEMS} elements: lower --envs or n_step",
                cfg.n
            )));
        }
        let s = &gpu.stream;
        let kernel = gpu.function(entry::transition_assemble::TRANSITION_ASSEMBLE)?;
        Self::allocate(s, cfg, envs, state_dim, kernel).map_err(|e| match e {
            Error::Driver(d) if d.0 == cudarc::driver::sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY => {
                Error::OutOfMemory {
                    what: format!(
                        "an n-step ring of n {} x {envs} envs x state width {state_dim}",
                        cfg.n
                    ),
                    mib: Self::device_bytes(cfg, envs, state_dim) >> 20,
                    fix: "lower --envs or n_step, or free the device".into(),
                }
            }
            other => other,
        })
    }

    /// Device bytes an assembler of this size allocates: the ring (n rows per env) and the
    /// N output rows, each `2S + 3 + 2` words, and the N counts.
    pub fn device_bytes(cfg: &TransitionConfig, envs: usize, state_dim: usize) -> usize {
        let row = (2 * state_dim + BRANCH_COUNT + 2) * 4;
        (cfg.n + 1) * envs * row + envs * 4
    }

    fn allocate(
        s: &Arc<CudaStream>,
        cfg: &TransitionConfig,
        envs: usize,
        state_dim: usize,
        kernel: CudaFunction,
    ) -> Result<Self> {
        let rows = cfg.n * envs;
        let ring = Ring {
            states: s.alloc_zeros(rows * state_dim)?,
            next_states: s.alloc_zeros(rows * state_dim)?,
            actions: s.alloc_zeros(rows * BRANCH_COUNT)?,
            rewards: s.alloc_zeros(rows)?,
            reasons: s.alloc_zeros(rows)?,
            counts: s.alloc_zeros(envs)?,
        };
        Ok(TransitionAssembler {
            cfg: *cfg,
            envs,
            state_dim,
            stream: s.clone(),
            kernel,
            ring,
            out: DeviceTransitions::alloc(s, envs, state_dim)?,
            steps: 0,
        })
    }

    pub fn config(&self) -> &TransitionConfig {
        &self.cfg
    }

    pub fn envs(&self) -> usize {
        self.envs
    }

    /// Calls of [`TransitionAssembler::assemble`] so far (or the count of an uploaded ring).
    /// A replayed graph launches without calling it: its owner counts those steps itself
    /// (see [`TransitionAssembler::emits_at`]).
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// Whether the next [`TransitionAssembler::assemble`] call emits rows (its step t >= n - 1).
    pub fn next_emits(&self) -> bool {
        self.emits_at(self.steps)
    }

    /// Whether the launch of step t (0-based) emits rows: t >= n - 1. A graph that inserts
    /// `out` into the replay must be captured at such a step.
    pub fn emits_at(&self, t: u64) -> bool {
        t + 1 >= self.cfg.n as u64
    }

    fn check_step(&self, step: &DeviceStep) -> Result<()> {
        let (n, s) = (self.envs, self.state_dim);
        let lens = [
            ("states", step.states.len(), n * s),
            ("actions", step.actions.len(), n * BRANCH_COUNT),
            ("rewards", step.rewards.len(), n),
            ("next_states", step.next_states.len(), n * s),
            ("reasons", step.reasons.len(), n),
        ];
        match lens.into_iter().find(|&(_, got, want)| got != want) {
            None => Ok(()),
            Some((name, got, want)) => Err(Error::Shape(format!(
                "transition step {name} has {got} values, expected {want} ({n} envs, state width {s}): pass one step of every env of this assembler"
            ))),
        }
    }

    /// `transition_assemble` of one step of every env: the ring takes it and, from step
    /// n - 1 on, `out` receives the N transitions of the windows starting n - 1 steps back.
    /// Returns whether this call emitted them (the host's own step count: a graph that inserts
    /// `out` must be captured at a step that emits). One launch, no host synchronization, no
    /// allocation.
    pub fn assemble(&mut self, step: &DeviceStep) -> Result<bool> {
        self.check_step(step)?;
        let emits = self.next_emits();
        let (envs, s32, n32) = (self.envs as u32, self.state_dim as u32, self.cfg.n as u32);
        let r = &mut self.ring;
        let o = &mut self.out;
        let mut b = self.stream.launch_builder(&self.kernel);
        b.arg(step.states)
            .arg(step.actions)
            .arg(step.rewards)
            .arg(step.next_states)
            .arg(step.reasons)
            .arg(&mut r.states)
            .arg(&mut r.next_states)
            .arg(&mut r.actions)
            .arg(&mut r.rewards)
            .arg(&mut r.reasons)
            .arg(&mut r.counts)
            .arg(&mut o.states)
            .arg(&mut o.next_states)
            .arg(&mut o.actions)
            .arg(&mut o.rewards)
            .arg(&mut o.discounts)
            .arg(&envs)
            .arg(&s32)
            .arg(&n32)
            .arg(&self.cfg.gamma);
        // SAFETY: argument order and types follow transition_assemble in
        // cuda/transition_assemble.cu: five step inputs (f32 N x S, i32 N x 3, f32 N, f32 N x S,
        // i32 N; lengths checked above), the ring (f32 n x N x S twice, i32 n x N x 3, f32 and
        // i32 n x N, u32 N counts; allocated in `new` for this n, N, S), the N output rows
        // (DeviceTransitions of N rows, width S), then u32 N, S, n and f32 gamma. N, n x N x S
        // fit 32 bits (checked in `new`); the kernel is grid-stride over N.
        unsafe { b.launch(grid_stride(self.envs)) }?;
        self.steps += 1;
        Ok(emits)
    }

    /// Replace the ring and counts with `ring` (tests, fixture replays); the host's step count
    /// follows the ring's (folded) count, which has the same emission rule.
    pub fn upload_ring(&mut self, ring: &TransitionRing) -> Result<()> {
        if ring.cfg != self.cfg || ring.envs != self.envs || ring.state_dim != self.state_dim {
            return Err(Error::Shape(format!(
                "a ring of {:?}, {} envs, state width {} for an assembler of {:?}, {} envs, width {}: upload a ring of this assembler's config",
                ring.cfg, ring.envs, ring.state_dim, self.cfg, self.envs, self.state_dim
            )));
        }
        ring.check().map_err(|e| Error::Shape(e.to_string()))?;
        let first = ring.counts.first().copied().unwrap_or(0);
        if ring
            .counts
            .iter()
            .any(|&c| c != first || c as usize >= 2 * self.cfg.n)
        {
            return Err(Error::Shape(format!(
                "ring counts {:?} are not one value in [0, {}): every env pushes one step per call; build the ring with TransitionRing::new and push",
                ring.counts,
                2 * self.cfg.n
            )));
        }
        let (s, r) = (&self.stream, &mut self.ring);
        s.memcpy_htod(&ring.states, &mut r.states)?;
        s.memcpy_htod(&ring.next_states, &mut r.next_states)?;
        s.memcpy_htod(&ring.actions, &mut r.actions)?;
        s.memcpy_htod(&ring.rewards, &mut r.rewards)?;
        s.memcpy_htod(&ring.reasons, &mut r.reasons)?;
        s.memcpy_htod(&ring.counts, &mut r.counts)?;
        self.steps = u64::from(first);
        Ok(())
    }

    /// The ring and counts, on the host (synchronizes; tests and fixtures only).
    pub fn download_ring(&self) -> Result<TransitionRing> {
        let (s, r) = (&self.stream, &self.ring);
        Ok(TransitionRing {
            cfg: self.cfg,
            envs: self.envs,
            state_dim: self.state_dim,
            states: s.clone_dtoh(&r.states)?,
            next_states: s.clone_dtoh(&r.next_states)?,
            actions: s.clone_dtoh(&r.actions)?,
            rewards: s.clone_dtoh(&r.rewards)?,
            reasons: s.clone_dtoh(&r.reasons)?,
            counts: s.clone_dtoh(&r.counts)?,
        })
    }

    /// The output rows, on the host (synchronizes; tests and fixtures only).
    pub fn download_out(&self) -> Result<Transitions> {
        self.out.download(&self.stream)
    }

    /// Fill the output rows with NaN / i32::MIN so a test can tell which were written.
    pub fn poison_out(&mut self) -> Result<()> {
        let poison = poison_rows(self.envs, self.state_dim);
        self.out.upload(&self.stream, &poison, self.state_dim)
    }

    /// The device addresses a graph over this launch binds to: the ring, the counts and the
    /// output rows (the step inputs are the caller's).
    pub fn addresses(&self) -> [u64; 11] {
        let (s, r, o) = (&self.stream, &self.ring, &self.out);
        [
            address(s, &r.states),
            address(s, &r.next_states),
            address(s, &r.actions),
            address(s, &r.rewards),
            address(s, &r.reasons),
            address(s, &r.counts),
            address(s, &o.states),
            address(s, &o.next_states),
            address(s, &o.actions),
            address(s, &o.rewards),
            address(s, &o.discounts),
        ]
    }
}

/// N rows of NaN (floats) and i32::MIN (actions): what [`TransitionAssembler::poison_out`]
/// writes, so a check can tell an unwritten row.
pub fn poison_rows(envs: usize, state_dim: usize) -> Transitions {
    let mut p = Transitions::zeros(envs, state_dim);
    p.states.fill(f32::NAN);
    p.next_states.fill(f32::NAN);
    p.actions.fill(i32::MIN);
    p.rewards.fill(f32::NAN);
    p.discounts.fill(f32::NAN);
    p
}
