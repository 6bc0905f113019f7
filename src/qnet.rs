//! The Q-network on the device: forward, loss, backward and the optimizer step of one
//! update, as cuBLAS SGEMMs with the small kernels of cuda/qnet_*.cu between them. Spec:
//! tallyho_oracle::qnet (`forward`, `head`, `next_actions`, `loss_with_next_actions`,
//! `head_grad`, `backward_from_head_grad`, `update_step`).
//!
//! **Shape of the work.** The online and target parameters are one allocation (online
//! first, target at `param_count`), so each forward layer is ONE strided-batched GEMM over
//! both networks on the stacked rows `[s; s']` (the target's pass over s is computed and not
//! used: at these sizes a GEMM costs its launch, not its rows). Each layer with one input
//! multiplies an activation that carries a ones column by the layer's `[w; b]` block of the
//! flat buffer, so biases ride in the forward GEMMs and bias gradients come out of the
//! weight-gradient GEMMs; the heads' hidden layers are one matrix, and the heads' output
//! layers are one dense block-diagonal matrix with the output bias as its last row (a
//! working copy of the compact tensors, cuda/qnet_heads.cu): its weight gradient is one
//! dense GEMM; the forward and the hidden gradient are one GEMM per head that reads its block
//! in place (a dense product would multiply the zeros too: slower at these sizes). Per update:
//! 16 GEMMs (forward: trunk 2, the heads' hidden layer, one per head; backward: 10) and 9
//! kernels (`qnet_first_layer`, which also stages the input; `qnet_head`; `qnet_loss`;
//! `qnet_heads_gather`; 3 `qnet_relu_backward`; `qnet_grad_norm`, `qnet_adam`); the forward
//! ReLUs ride in the GEMM epilogues (with the cuBLAS engine, `qnet_relu` launches).
//!
//! **Hot path.** Every buffer is allocated in [`QNet::new`]; an update launches work only:
//! no allocation, no host copy, no synchronisation. All per-step values (the Adam step, the
//! clip scale) live in device memory, so [`QNet::update_graphed`] captures the whole update
//! once and replays it.

use crate::blas::{Blas, Engine, Epilogue, Layout};
use crate::env::ExperienceEnv;
use crate::error::{Error, Result};
use crate::graph::{GraphSlot, Phase};
use crate::optimizer::{Mirror, Optimizer};
use crate::replay::DeviceTransitions;
use crate::runtime::{grid_stride, Gpu};
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaEvent, CudaFunction, CudaSlice, CudaStream, CudaView, DevicePtr, LaunchConfig, PushKernelArg};
use std::sync::Arc;
use tallyho_oracle::qnet::{self as spec, QNetConfig};

mod act;

/// Most action branches a network may have (`QNET_MAX_BRANCHES` in cuda/common/qnet.cuh).
pub const MAX_BRANCHES: usize = 8;
/// Threads of a `qnet_loss` block per action branch (`QNET_LOSS_LANES`).
const LOSS_LANES: usize = 64;
/// The online network's forward for acting on N states (the experience step's Q-forward):
/// its own activations, so acting never touches the update's buffers.
pub struct Acting {
    rows: usize,
    /// Keep the head-output rows in `y` (tests, verify); [`Acting::q_only`] leaves them out of
    /// the one-launch forward, which then writes Q only.
    outputs: bool,
    a1: CudaSlice<f32>,
    a2: CudaSlice<f32>,
    ah: CudaSlice<f32>,
    y: CudaSlice<f32>,
    /// `[N x sum n_k]`: the Q-values (expected value over atoms) that `action_select` reads.
    pub q: CudaSlice<f32>,
}

impl Acting {
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// The same activations, acting for Q only: the one-launch forward (`qnet_act`) does not
    /// store the head-output rows (the experience step reads Q only).
    /// [`QNet::read_acting_outputs`] then refuses.
    pub fn q_only(mut self) -> Self {
        self.outputs = false;
        self
    }
}

/// Atoms a `qnet_head` lane holds in registers (QNET_HEAD_SLOTS in cuda/qnet_head.cu).
const HEAD_SLOTS: usize = 8;

/// Atoms a `qnet_head_q` lane holds in registers (QNET_HEAD_Q_SLOTS in cuda/qnet_head.cu).
const HEAD_Q_SLOTS: usize = 16;

/// Values of padding after a head block's shared rows: 32 (a slot past NA reads at most 31
/// values past its row).
const HEAD_PAD: usize = 32;

/// Threads a `qnet_head` block aims at: whole rows of (action, lane) groups up to this many.
const HEAD_THREADS: usize = 256;

/// Most dynamic shared memory a kernel may take without opting in (48 KiB).
const SMEM_DEFAULT: usize = 48 * 1024;

/// The two networks of a forward: online (0) and target (1).
const NETS: usize = 2;

/// Side streams the update forks independent GEMMs onto: at these sizes a GEMM fills a
/// fraction of the GPU and costs its latency, so independent ones run side by side (the
/// per-head forward products and hidden gradients; each backward weight gradient beside the
/// next data gradient).
const LANES: usize = 4;

/// A side stream with its own cuBLAS handle (so its own workspace) and the event that
/// marks its work done.
struct Lane {
    stream: Arc<CudaStream>,
    blas: Blas,
    done: CudaEvent,
}

/// `struct BranchShape` of cuda/common/qnet.cuh, a kernel argument: the branch sizes and
/// the row offsets of the head outputs, logits and Q values derived from them.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct BranchShape {
    count: u32,
    n: [u32; MAX_BRANCHES],
    out: [u32; MAX_BRANCHES + 2],
    logit: [u32; MAX_BRANCHES + 1],
    q: [u32; MAX_BRANCHES + 1],
}

// SAFETY: plain old data of u32 arrays, laid out as the kernels' struct (repr(C)).
unsafe impl cudarc::driver::DeviceRepr for BranchShape {}

impl BranchShape {
    /// Requires at most MAX_BRANCHES branches (checked by QNet::new).
    fn of(cfg: &QNetConfig) -> Self {
        let na = cfg.atoms as u32;
        let mut s = BranchShape {
            count: cfg.num_branches() as u32,
            n: [0; MAX_BRANCHES],
            out: [0; MAX_BRANCHES + 2],
            logit: [0; MAX_BRANCHES + 1],
            q: [0; MAX_BRANCHES + 1],
        };
        s.out[1] = na;
        for (k, &n) in cfg.branches.iter().enumerate().take(MAX_BRANCHES) {
            let n = n as u32;
            s.n[k] = n;
            s.out[k + 2] = s.out[k + 1] + n * na;
            s.logit[k + 1] = s.logit[k] + n * na;
            s.q[k + 1] = s.q[k] + n;
        }
        s
    }
}

/// Offsets in the flat parameter buffer of the tensors the launches address.
#[derive(Clone, Copy, Debug)]
struct Offsets {
    w1: usize,
    w2: usize,
    wh: usize,
    wv2: usize,
}

impl Offsets {
    fn of(cfg: &QNetConfig) -> Result<Self> {
        let at = |name: &str| {
            spec::tensor(cfg, name)
                .map(|t| t.offset)
                .ok_or_else(|| Error::Usage(format!("the Q-network layout has no tensor {name}")))
        };
        // qnet_heads_gather writes wv2, wa2_0.., bo as one run from wv2's offset.
        let wv2 = at("wv2")?;
        let mut end = wv2 + cfg.value_hidden * cfg.atoms;
        for (k, &n) in cfg.branches.iter().enumerate() {
            if at(&format!("wa2_{k}"))? != end {
                return Err(Error::Usage(format!("layout: wa2_{k} does not follow the previous head's weights")));
            }
            end += cfg.adv_hidden * n * cfg.atoms;
        }
        if at("bo")? != end || end + spec::output_width(cfg) != spec::param_count(cfg) {
            return Err(Error::Usage("layout: bo must follow the heads' output weights and end the buffer".into()));
        }
        Ok(Offsets { w1: at("w1")?, w2: at("w2")?, wh: at("wh")?, wv2 })
    }
}

/// Sizes derived from the config and the batch.
#[derive(Clone, Copy, Debug)]
struct Dims {
    b: usize,
    /// Rows per network in a forward: `2B`, s then s'.
    rows: usize,
    s: usize,
    h1: usize,
    h2: usize,
    /// Heads' hidden width `vh + K ah`.
    hw: usize,
    /// Head-output row width `NA (1 + sum n_k)`.
    ow: usize,
    /// Logits per row `sum n_k NA`.
    lw: usize,
    /// Q values per row `sum n_k`.
    qw: usize,
    na: usize,
    kk: usize,
    params: usize,
}

impl Dims {
    fn of(cfg: &QNetConfig, batch: usize) -> Dims {
        Dims {
            b: batch,
            rows: 2 * batch,
            s: cfg.state_dim,
            h1: cfg.h1,
            h2: cfg.h2,
            hw: spec::hidden_width(cfg),
            ow: spec::output_width(cfg),
            lw: spec::output_width(cfg) - cfg.atoms,
            qw: cfg.branches.iter().sum(),
            na: cfg.atoms,
            kk: cfg.num_branches(),
            params: spec::param_count(cfg),
        }
    }
}

/// Each head's (hidden column = dense row, fan-in, output column, width): the value head,
/// then one per branch.
fn heads_of(cfg: &QNetConfig) -> Vec<(usize, usize, usize, usize)> {
    let offsets = spec::output_offsets(cfg);
    let mut heads = vec![(0, cfg.value_hidden, 0, cfg.atoms)];
    for (k, &n) in cfg.branches.iter().enumerate() {
        heads.push((cfg.value_hidden + k * cfg.adv_hidden, cfg.adv_hidden, offsets[k + 1], n * cfg.atoms));
    }
    heads
}

struct Kernels {
    relu: CudaFunction,
    first_layer: CudaFunction,
    head: CudaFunction,
    head_q: CudaFunction,
    loss: CudaFunction,
    relu_backward: CudaFunction,
    heads_scatter: CudaFunction,
    heads_gather: CudaFunction,
}

/// The dense position in the `[(H + 1) x O]` head matrix of each compact head-output
/// parameter (wv2, wa2_0.., bo, in buffer order from wv2): qnet_heads.cu's index table.
fn heads_index(cfg: &QNetConfig) -> Vec<u32> {
    let (ow, hw, na) = (spec::output_width(cfg), spec::hidden_width(cfg), cfg.atoms);
    let offsets = spec::output_offsets(cfg);
    let mut index = Vec::with_capacity(spec::param_count(cfg));
    let mut block = |row0: usize, rows: usize, col0: usize, cols: usize| {
        for r in 0..rows {
            for c in 0..cols {
                index.push(((row0 + r) * ow + col0 + c) as u32);
            }
        }
    };
    block(0, cfg.value_hidden, 0, na);
    for (k, &n) in cfg.branches.iter().enumerate() {
        block(cfg.value_hidden + k * cfg.adv_hidden, cfg.adv_hidden, offsets[k + 1], n * na);
    }
    block(hw, 1, 0, ow);
    index
}

/// What the forward left on the device for one network, read back (tests, `verify`).
#[derive(Clone, Debug, PartialEq)]
pub struct ForwardOut {
    /// 2B x h1, rows s then s'.
    pub h1: Vec<f32>,
    pub h2: Vec<f32>,
    /// 2B x H.
    pub heads_hidden: Vec<f32>,
    /// 2B x O: the head-output rows (the GEMMs, before qnet_head adds the bias), value then
    /// each branch.
    pub y: Vec<f32>,
    /// 2B x (sum n_k NA), branch-major per row.
    pub logits: Vec<f32>,
    /// As logits; empty when NA = 1.
    pub log_probs: Vec<f32>,
    pub probs: Vec<f32>,
    /// 2B x (sum n_k).
    pub q: Vec<f32>,
}

/// What the loss left on the device, read back.
#[derive(Clone, Debug, PartialEq)]
pub struct LossOut {
    pub loss: f64,
    pub sample_loss: Vec<f64>,
    pub priorities: Vec<f32>,
    /// B x K.
    pub next_actions: Vec<i32>,
    /// B x (NA (1 + sum n_k)): the head-output gradient.
    pub head_grad: Vec<f32>,
}

pub struct QNet {
    cfg: QNetConfig,
    d: Dims,
    off: Offsets,
    stream: Arc<CudaStream>,
    blas: Blas,
    lanes: Vec<Lane>,
    /// Recorded on the main stream where lanes fork from it.
    forked: CudaEvent,
    /// Each head's (hidden column = dense row, fan-in, output column, width).
    heads: Vec<(usize, usize, usize, usize)>,
    k: Kernels,
    /// Online parameters in `[0, P)`, target in `[P, 2P)`.
    params: CudaSlice<f32>,
    grads: CudaSlice<f32>,
    pub opt: Optimizer,
    shape: BranchShape,
    /// qnet_heads' index table (compact element -> dense position).
    heads_index: CudaSlice<u32>,
    /// The dense head-output matrices `[(H + 1) x O]` of online then target.
    heads_w: CudaSlice<f32>,
    /// The dense gradient of the online one.
    heads_grad: CudaSlice<f32>,
    x: CudaSlice<f32>,
    a1: CudaSlice<f32>,
    a2: CudaSlice<f32>,
    ah: CudaSlice<f32>,
    y: CudaSlice<f32>,
    logits: CudaSlice<f32>,
    log_probs: CudaSlice<f32>,
    probs: CudaSlice<f32>,
    q: CudaSlice<f32>,
    next_actions: CudaSlice<i32>,
    sample_loss: CudaSlice<f64>,
    /// New replay priorities of the last update's batch, in batch order (device resident,
    /// the input of `PerBuffer::update_priorities`).
    pub priorities: CudaSlice<f32>,
    dy: CudaSlice<f32>,
    loss: CudaSlice<f64>,
    /// The last-block counter of `qnet_loss` (zero between launches).
    loss_done: CudaSlice<u32>,
    dhh: CudaSlice<f32>,
    dh2: CudaSlice<f32>,
    dh1: CudaSlice<f32>,
    graph: GraphSlot,
    /// Benchmarking only: launch the GEMMs and skip the kernels between them (the values
    /// are then meaningless), to time the GEMMs alone.
    gemms_only: bool,
    /// The launch shapes of `qnet_head` and `qnet_head_q`, fixed by the network's dimensions.
    head: HeadSplits,
    /// The one-launch acting forward (`qnet_act`), where the network fits a block.
    fused: act::Fused,
    /// Act with `fused` where it fits ([`QNet::set_act_fused`]).
    act_fused: bool,
}

impl QNet {
    /// A network pair for batches of `batch` transitions, online and target initialised
    /// from `cfg.seed` (the oracle's `init_params`), Adam at step 0.
    pub fn new(gpu: &Gpu, cfg: &QNetConfig, batch: usize) -> Result<Self> {
        cfg.validate()?;
        if batch == 0 {
            return Err(Error::Usage("Q-network batch 0: an update needs at least one transition".into()));
        }
        if cfg.num_branches() > MAX_BRANCHES {
            return Err(Error::Usage(format!(
                "{} action branches: the kernels take at most {MAX_BRANCHES}; merge branches or raise QNET_MAX_BRANCHES",
                cfg.num_branches()
            )));
        }
        let sizes = [batch, cfg.state_dim, cfg.h1, cfg.h2, spec::hidden_width(cfg), spec::output_width(cfg)];
        if sizes.iter().any(|&v| v >= i32::MAX as usize / 4) {
            return Err(Error::Usage(format!("Q-network sizes {sizes:?} exceed cuBLAS's 32-bit dimensions")));
        }
        let d = Dims::of(cfg, batch);
        // The heads' limits, refused here rather than at the first forward.
        let head = HeadSplits { head: head_split(d)?, head_q: head_q_split(d)? };
        let s = &gpu.stream;
        let f = |kernel: &str, entry: &str| gpu.function(kernel, entry);
        let k = Kernels {
            relu: f("qnet_forward", "qnet_relu")?,
            first_layer: f("qnet_forward", "qnet_first_layer")?,
            head: f("qnet_head", "qnet_head")?,
            head_q: f("qnet_head", "qnet_head_q")?,
            loss: f("qnet_loss", "qnet_loss")?,
            relu_backward: f("qnet_backward", "qnet_relu_backward")?,
            heads_scatter: f("qnet_heads", "qnet_heads_scatter")?,
            heads_gather: f("qnet_heads", "qnet_heads_gather")?,
        };

        let event = || gpu.ctx.new_event(Some(CUevent_flags::CU_EVENT_DISABLE_TIMING));
        let mut lanes = Vec::with_capacity(LANES);
        for _ in 0..LANES {
            let stream = gpu.ctx.new_stream()?;
            lanes.push(Lane { blas: Blas::new(&stream)?, stream, done: event()? });
        }
        let heads = heads_of(cfg);
        let fused = act::Fused::new(gpu, cfg, d, &heads)?;
        let init = spec::init_params(cfg);
        let mut pair = init.clone();
        pair.extend_from_slice(&init);
        let (r, n) = (d.rows, NETS);
        let mut net = QNet {
            cfg: cfg.clone(),
            off: Offsets::of(cfg)?,
            stream: s.clone(),
            blas: Blas::new(s)?,
            lanes,
            forked: event()?,
            heads,
            k,
            params: s.clone_htod(&pair)?,
            grads: s.alloc_zeros(d.params)?,
            opt: Optimizer::new(gpu, cfg, d.params)?,
            shape: BranchShape::of(cfg),
            heads_index: s.clone_htod(&heads_index(cfg))?,
            heads_w: s.alloc_zeros(NETS * (d.hw + 1) * d.ow)?,
            heads_grad: s.alloc_zeros((d.hw + 1) * d.ow)?,
            x: s.alloc_zeros(r * (d.s + 1))?,
            a1: s.alloc_zeros(n * r * (d.h1 + 1))?,
            a2: s.clone_htod(&with_ones(n * r, d.h2, 0.0))?,
            ah: s.clone_htod(&with_ones(n * r, d.hw, 0.0))?,
            y: s.alloc_zeros(n * r * d.ow)?,
            logits: s.alloc_zeros(n * r * d.lw)?,
            log_probs: s.alloc_zeros(n * r * d.lw)?,
            probs: s.alloc_zeros(n * r * d.lw)?,
            q: s.alloc_zeros(n * r * d.qw)?,
            next_actions: s.alloc_zeros(batch * d.kk)?,
            sample_loss: s.alloc_zeros(batch)?,
            priorities: s.alloc_zeros(batch)?,
            dy: s.alloc_zeros(batch * d.ow)?,
            loss: s.alloc_zeros(1)?,
            loss_done: s.alloc_zeros(1)?,
            dhh: s.alloc_zeros(batch * d.hw)?,
            dh2: s.alloc_zeros(batch * d.h2)?,
            dh1: s.alloc_zeros(batch * d.h1)?,
            graph: GraphSlot::new("qnet_update"),
            gemms_only: false,
            head,
            fused,
            act_fused: true,
            d,
        };
        net.set_params(&init, &init)?;
        Ok(net)
    }

    /// Benchmarking only: with `true`, forward, loss and backward launch their GEMMs and
    /// nothing else, so a timing of them is the GEMMs' time; the outputs are then garbage.
    pub fn set_gemms_only(&mut self, on: bool) {
        self.gemms_only = on;
    }

    /// The GEMM engine of every product: cuBLASLt (the default: a K split only for small
    /// outputs over a long K, the hidden layers' ReLU in the GEMM epilogue) or cuBLAS with
    /// `qnet_relu` launches. Like [`QNet::set_tf32`], it applies to launches made after it,
    /// not to a graph already captured.
    pub fn set_gemm_engine(&mut self, engine: Engine) {
        self.blas.set_engine(engine);
        self.lanes.iter().for_each(|l| l.blas.set_engine(engine));
    }

    /// TF32 tensor-core GEMMs (an option for speed, with its own error: ~3e-4 relative per
    /// product, ../shared/GPU.md), or strict fp32 (the default, what the tests check).
    pub fn set_tf32(&mut self, on: bool) -> Result<()> {
        self.blas.set_tf32(on)?;
        self.lanes.iter().try_for_each(|l| l.blas.set_tf32(on))
    }

    /// Are the products in TF32 ([`QNet::set_tf32`])?
    pub fn tf32(&self) -> bool {
        self.blas.tf32()
    }

    /// Floating-point operations of the GEMMs of one update (2 per multiply-add): the
    /// forward over both networks on 2B rows (from the second layer: `qnet_first_layer` is
    /// not a GEMM), the backward on B rows.
    pub fn update_gemm_flops(&self) -> f64 {
        let (d, c) = (self.d, &self.cfg);
        let per_head: usize = c.value_hidden * c.atoms + c.branches.iter().map(|&n| c.adv_hidden * n * c.atoms).sum::<usize>();
        let dense = (d.hw + 1) * d.ow; // the backward's dense weight gradient, zeros off the blocks included
        let fwd = (d.h1 + 1) * d.h2 + (d.h2 + 1) * d.hw + per_head;
        let bwd = dense + per_head + (d.h2 + 1) * d.hw + d.h2 * d.hw + (d.h1 + 1) * d.h2 + d.h1 * d.h2 + (d.s + 1) * d.h1;
        2.0 * (NETS * d.rows * fwd + d.b * bwd) as f64
    }

    pub fn config(&self) -> &QNetConfig {
        &self.cfg
    }

    pub fn batch(&self) -> usize {
        self.d.b
    }

    pub fn param_count(&self) -> usize {
        self.d.params
    }

    fn check_len(&self, what: &str, got: usize, want: usize) -> Result<()> {
        if got != want {
            return Err(Error::Usage(format!(
                "{what} has {got} values, this network (batch {}) takes {want}: size it from the batch and the config",
                self.d.b
            )));
        }
        Ok(())
    }

    /// Upload online and target parameters (each `param_count`, in the oracle's layout).
    pub fn set_params(&mut self, online: &[f32], target: &[f32]) -> Result<()> {
        let p = self.d.params;
        self.check_len("online parameters", online.len(), p)?;
        self.check_len("target parameters", target.len(), p)?;
        self.stream.memcpy_htod(online, &mut self.params.slice_mut(..p))?;
        self.stream.memcpy_htod(target, &mut self.params.slice_mut(p..))?;
        self.scatter_heads(NETS)
    }

    /// `qnet_heads_scatter`: rebuild the dense head matrices of the first `nets` networks
    /// (1: online, 2: both) from the flat parameters.
    fn scatter_heads(&mut self, nets: usize) -> Result<()> {
        if self.gemms_only {
            return Ok(());
        }
        let count = self.heads_index.len();
        let (p64, wv2, count32, stride, n32) =
            (self.d.params as u64, self.off.wv2 as u64, count as u32, ((self.d.hw + 1) * self.d.ow) as u64, nets as u32);
        let mut l = self.stream.launch_builder(&self.k.heads_scatter);
        l.arg(&self.params)
            .arg(&p64)
            .arg(&wv2)
            .arg(&self.heads_index)
            .arg(&count32)
            .arg(&stride)
            .arg(&n32)
            .arg(&mut self.heads_w);
        // SAFETY: qnet_heads_scatter(const float* params [2P], u64 P, u64 wv2 offset, const u32*
        // index [count], u32 count, u64 dense stride, u32 nets <= 2, float* dense [2 (H + 1) O]):
        // the index holds dense positions < (H + 1) O, wv2 + count = P (checked in Offsets::of).
        unsafe { l.launch(grid_stride(nets * count)) }?;
        Ok(())
    }

    /// `(online, target)` parameters.
    pub fn params(&self) -> Result<(Vec<f32>, Vec<f32>)> {
        let p = self.d.params;
        Ok((self.stream.clone_dtoh(&self.params.slice(..p))?, self.stream.clone_dtoh(&self.params.slice(p..))?))
    }

    /// The gradient of the last backward (before clipping).
    pub fn grads(&self) -> Result<Vec<f32>> {
        Ok(self.stream.clone_dtoh(&self.grads)?)
    }

    fn check_batch(&self, t: &DeviceTransitions, weights: &CudaSlice<f32>) -> Result<()> {
        let (b, s, kk) = (self.d.b, self.d.s, self.d.kk);
        self.check_len("states", t.states.len(), b * s)?;
        self.check_len("next_states", t.next_states.len(), b * s)?;
        self.check_len("actions", t.actions.len(), b * kk)?;
        self.check_len("rewards", t.rewards.len(), b)?;
        self.check_len("dones", t.dones.len(), b)?;
        self.check_len("weights", weights.len(), b)
    }

    /// The online network on s and s' and the target network on s' (and, unused, on s):
    /// input staging, 3 hidden layers (GEMM + ReLU), 1 + K head-output GEMMs, `qnet_head`.
    pub fn forward(&mut self, states: &CudaSlice<f32>, next_states: &CudaSlice<f32>) -> Result<()> {
        let d = self.d;
        self.check_len("states", states.len(), d.b * d.s)?;
        self.check_len("next_states", next_states.len(), d.b * d.s)?;
        let (p, r, off) = (d.params, d.rows, &self.off);
        // Hidden layers: a = relu([in | 1] [w; b]) for both networks (x is shared), the first
        // by qnet_first_layer (which stages x = [s | 1; s' | 1] and keeps it for the
        // backward), the others by one product with a ReLU epilogue.
        if !self.gemms_only {
            let input = FirstInput { s: states, s2: next_states, split: d.b, ld: d.s, x: Some(&mut self.x) };
            first_layer(&self.stream, &self.k.first_layer, input, d, &self.params.slice(off.w1..), NETS, r, p, &mut self.a1)?;
        }
        #[rustfmt::skip]
        hidden_layer(&self.blas, self.gemms_only, &self.k.relu, NETS, r, d.h2, d.h1 + 1,
            &self.a1, r * (d.h1 + 1), &self.params.slice(off.w2..), p, &mut self.a2)?;
        #[rustfmt::skip]
        hidden_layer(&self.blas, self.gemms_only, &self.k.relu, NETS, r, d.hw, d.h2 + 1,
            &self.a2, r * (d.h2 + 1), &self.params.slice(off.wh..), p, &mut self.ah)?;
        self.forward_heads()?;
        self.forward_head()
    }

    /// The heads' output layers without their bias (added by `qnet_head`): one GEMM per
    /// head over both networks, each reading its block of the dense head matrix in place.
    pub fn forward_heads(&mut self) -> Result<()> {
        let (d, pl) = (self.d, Layout::plain);
        let r = d.rows;
        let dense = (d.hw + 1) * d.ow;
        let side = (self.heads.len() - 1).min(LANES);
        self.fork(0..side)?;
        for (h, &(row, fan_in, col, width)) in self.heads.iter().enumerate() {
            // Head 0 on the main stream, the others across the lanes.
            let blas = if h == 0 { &self.blas } else { &self.lanes[(h - 1) % LANES].blas };
            #[rustfmt::skip]
            blas.gemm_batched(NETS, r, width, fan_in, 1.0,
                &self.ah.slice(row..), pl(d.hw + 1), r * (d.hw + 1),
                &self.heads_w.slice(row * d.ow + col..), pl(d.ow), dense,
                0.0, &mut self.y.slice_mut(col..), d.ow, r * d.ow, Epilogue::None)?;
        }
        self.join(0..side)
    }

    /// Lanes `lanes` wait for the work queued so far on the main stream.
    fn fork(&self, lanes: std::ops::Range<usize>) -> Result<()> {
        self.forked.record(&self.stream)?;
        for l in &self.lanes[lanes] {
            l.stream.wait(&self.forked)?;
        }
        Ok(())
    }

    /// The main stream waits for the work queued so far on lanes `lanes`.
    fn join(&self, lanes: std::ops::Range<usize>) -> Result<()> {
        for l in &self.lanes[lanes] {
            l.done.record(&l.stream)?;
            self.stream.wait(&l.done)?;
        }
        Ok(())
    }

    /// `qnet_head` on the head outputs y of both networks.
    pub fn forward_head(&mut self) -> Result<()> {
        if self.gemms_only {
            return Ok(());
        }
        let dists = Dists { logits: &mut self.logits, log_probs: &mut self.log_probs, probs: &mut self.probs };
        let out = HeadOutputs { dists: Some(dists), q: &mut self.q };
        launch_head(&self.stream, &self.k, &self.heads_w, &self.shape, &self.cfg, self.d, &self.head, NETS, self.d.rows, &self.y, out)
    }

    /// `qnet_loss` (ending in the batch loss) on the last forward, for the batch's actions,
    /// rewards, dones and importance weights.
    pub fn loss(&mut self, t: &DeviceTransitions, weights: &CudaSlice<f32>) -> Result<()> {
        self.check_batch(t, weights)?;
        if self.gemms_only {
            return Ok(());
        }
        let d = self.d;
        let (na, b32) = (d.na as u32, d.b as u32);
        let discount = self.cfg.discount();
        let mut l = self.stream.launch_builder(&self.k.loss);
        l.arg(&self.q)
            .arg(&self.log_probs)
            .arg(&self.probs)
            .arg(&t.actions)
            .arg(&t.rewards)
            .arg(&t.dones)
            .arg(weights)
            .arg(&self.shape)
            .arg(&na)
            .arg(&b32)
            .arg(&self.cfg.v_min)
            .arg(&self.cfg.v_max)
            .arg(&discount)
            .arg(&self.cfg.huber_kappa)
            .arg(&mut self.next_actions)
            .arg(&mut self.sample_loss)
            .arg(&mut self.priorities)
            .arg(&mut self.dy)
            .arg(&mut self.loss_done)
            .arg(&mut self.loss);
        let (kk, na) = (d.kk, d.na);
        let shared = (3 * kk * na + 2 * na) * 8 + 2 * na * 4 + (3 * d.qw + if na > 1 { 3 * d.lw } else { 0 }) * 4;
        let cfg = LaunchConfig {
            grid_dim: (b32, 1, 1),
            block_dim: ((LOSS_LANES * kk) as u32, 1, 1),
            shared_mem_bytes: shared as u32,
        };
        // SAFETY: follows qnet_loss's signature: q, log_probs, probs as written by qnet_head
        // for NETS x 2B rows; actions B x K (each in [0, n_k): the caller's batch, checked by
        // the oracle's check_batch where it is built), rewards, dones, weights B; outputs
        // next_actions B x K, sample_loss and priorities B, dy B x ow; loss_done a zero word
        // (zeroed at creation, returned to zero by each launch's last block), loss 1 double;
        // QNET_LOSS_LANES threads per branch, the dynamic shared memory the kernel lays out.
        unsafe { l.launch(cfg) }?;
        Ok(())
    }

    /// The gradient of the loss into `grads` from the loss's head-output gradient: 7 GEMMs
    /// (each writes its block with beta 0, so nothing needs zeroing), the head gradient
    /// gather and 3 ReLU backwards, on the online network's rows of s.
    pub fn backward(&mut self) -> Result<()> {
        let d = self.d;
        let (b, off, pl, tr) = (d.b, self.off, Layout::plain, Layout::transposed);
        // The data gradients run on the main stream, one after the other; each weight
        // gradient forks onto a lane as soon as its inputs exist, and all join at the end.
        // Heads' output layer: d[W_heads; bo] = [hh | 1]^T dy (dense), gathered into the
        // compact wv2, wa2_k, bo (lane 0); d hh = dy W_heads^T per head (below).
        self.fork(0..1)?;
        #[rustfmt::skip]
        self.lanes[0].blas.gemm(d.hw + 1, d.ow, b, 1.0, &self.ah, tr(d.hw + 1), &self.dy, pl(d.ow),
            0.0, &mut self.heads_grad, d.ow)?;
        if !self.gemms_only {
            let count = self.heads_index.len();
            let count32 = count as u32;
            let mut l = self.lanes[0].stream.launch_builder(&self.k.heads_gather);
            l.arg(&self.heads_grad).arg(&self.heads_index).arg(&count32);
            let mut compact = self.grads.slice_mut(off.wv2..);
            l.arg(&mut compact);
            // SAFETY: qnet_heads_gather(const float* dense [(H + 1) O], const u32* index [count],
            // u32 count, float* compact): writes `count` floats from wv2's offset, which is
            // where wv2, wa2_k and bo end the flat buffer (Offsets::of). Ordered after the
            // GEMM that writes heads_grad on the same lane.
            unsafe { l.launch(grid_stride(count)) }?;
        }
        // d hh = dy W_heads^T as one product per head, each with its block of the dense
        // matrix (the dense product multiplied the zero blocks too: 26 us under ncu at
        // B = 256, K = 612 walked by 128 tiles), side by side: the value head on the main
        // stream, the branches on lanes 1.., joined before the ReLU.
        let side = (self.heads.len() - 1).min(LANES - 1);
        self.fork(1..1 + side)?;
        for (h, &(row, fan_in, col, width)) in self.heads.iter().enumerate() {
            let blas = if h == 0 { &self.blas } else { &self.lanes[1 + (h - 1) % (LANES - 1)].blas };
            #[rustfmt::skip]
            blas.gemm(b, fan_in, width, 1.0, &self.dy.slice(col..), pl(d.ow), &self.heads_w.slice(row * d.ow + col..), tr(d.ow),
                0.0, &mut self.dhh.slice_mut(row..), d.hw)?;
        }
        self.join(1..1 + side)?;
        relu_backward(self.gemms_only, &self.stream, &self.k.relu_backward, &mut self.dhh, &self.ah, b, d.hw)?;
        // [wh; bh] (lane 1) and dh2.
        self.fork(1..2)?;
        #[rustfmt::skip]
        self.lanes[1].blas.gemm(d.h2 + 1, d.hw, b, 1.0, &self.a2, tr(d.h2 + 1), &self.dhh, pl(d.hw),
            0.0, &mut self.grads.slice_mut(off.wh..off.wh + (d.h2 + 1) * d.hw), d.hw)?;
        #[rustfmt::skip]
        self.blas.gemm(b, d.h2, d.hw, 1.0, &self.dhh, pl(d.hw), &self.params.slice(off.wh..off.wh + d.h2 * d.hw), tr(d.hw),
            0.0, &mut self.dh2, d.h2)?;
        relu_backward(self.gemms_only, &self.stream, &self.k.relu_backward, &mut self.dh2, &self.a2, b, d.h2)?;
        // [w2; b2] (lane 2) and dh1.
        self.fork(2..3)?;
        #[rustfmt::skip]
        self.lanes[2].blas.gemm(d.h1 + 1, d.h2, b, 1.0, &self.a1, tr(d.h1 + 1), &self.dh2, pl(d.h2),
            0.0, &mut self.grads.slice_mut(off.w2..off.w2 + (d.h1 + 1) * d.h2), d.h2)?;
        #[rustfmt::skip]
        self.blas.gemm(b, d.h1, d.h2, 1.0, &self.dh2, pl(d.h2), &self.params.slice(off.w2..off.w2 + d.h1 * d.h2), tr(d.h2),
            0.0, &mut self.dh1, d.h1)?;
        relu_backward(self.gemms_only, &self.stream, &self.k.relu_backward, &mut self.dh1, &self.a1, b, d.h1)?;
        // [w1; b1].
        #[rustfmt::skip]
        self.blas.gemm(d.s + 1, d.h1, b, 1.0, &self.x, tr(d.s + 1), &self.dh1, pl(d.h1),
            0.0, &mut self.grads.slice_mut(off.w1..off.w1 + (d.s + 1) * d.h1), d.h1)?;
        self.join(0..LANES)
    }

    /// Grad norm, clip and Adam on the online parameters; Adam also writes the new head
    /// parameters into the online dense head matrix (so it needs no rebuild).
    pub fn optimize(&mut self) -> Result<()> {
        let p = self.d.params;
        let dense = self.heads_w.slice_mut(..(self.d.hw + 1) * self.d.ow);
        let mirror = Mirror { from: self.off.wv2, index: &self.heads_index, to: dense };
        self.opt.step(&mut self.params.slice_mut(..p), &self.grads.as_view(), Some(mirror))
    }

    /// One whole update, eagerly: forward, loss, backward, optimizer step. The new
    /// priorities are in [`QNet::priorities`].
    pub fn update(&mut self, t: &DeviceTransitions, weights: &CudaSlice<f32>) -> Result<()> {
        self.check_batch(t, weights)?;
        self.forward(&t.states, &t.next_states)?;
        self.loss(t, weights)?;
        self.backward()?;
        self.optimize()
    }

    /// [`QNet::update`] through the network's graph slot: eager once, then captured, then
    /// replayed. The batch and weights must stay the same buffers (refilled in place).
    pub fn update_graphed(&mut self, t: &DeviceTransitions, weights: &CudaSlice<f32>) -> Result<()> {
        self.check_batch(t, weights)?;
        let binding = binding(&self.stream, t, weights);
        let stream = self.stream.clone();
        let mut slot = std::mem::replace(&mut self.graph, GraphSlot::new("qnet_update"));
        let r = slot.run(&stream, binding, || self.update(t, weights));
        self.graph = slot;
        r
    }

    pub fn graph_phase(&self) -> Phase {
        self.graph.phase()
    }

    /// Target sync: a copy of the online parameters, or the Polyak average (config).
    pub fn target_sync(&mut self) -> Result<()> {
        let p = self.d.params;
        let (online, mut target) = self.params.split_at_mut(p);
        self.opt.target_sync(&online.as_view(), &mut target, self.cfg.polyak_tau)?;
        self.scatter_heads(NETS)
    }

    /// Activations for acting on `rows` states at a time.
    pub fn acting(&self, rows: usize) -> Result<Acting> {
        if rows == 0 || rows >= i32::MAX as usize / 4 {
            return Err(Error::Usage(format!("acting on {rows} states: use 1 to 2^29")));
        }
        let (d, s) = (self.d, &self.stream);
        Ok(Acting {
            rows,
            outputs: true,
            a1: s.alloc_zeros(rows * (d.h1 + 1))?,
            a2: s.clone_htod(&with_ones(rows, d.h2, 0.0))?,
            ah: s.clone_htod(&with_ones(rows, d.hw, 0.0))?,
            y: s.alloc_zeros(rows * d.ow)?,
            q: s.alloc_zeros(rows * d.qw)?,
        })
    }

    /// The online network on `x` (`[N x (S + 1)]`: the states with a ones column, as
    /// `state_gather` writes them): the same stages as [`QNet::forward`] on N rows of one
    /// network (oracle `qnet::forward`, `head`), the Q-values left in `a.q`. In one launch
    /// (`qnet_act`, products in 3xTF32) where its blocks fill the GPU and the network fits
    /// one ([`QNet::act_block_rows`]); else layer by layer ([`QNet::act_layers`]).
    pub fn act(&self, x: &CudaSlice<f32>, a: &mut Acting) -> Result<()> {
        if self.act_block_rows(a.rows).is_none() {
            return self.act_layers(x, a);
        }
        let (d, r) = (self.d, a.rows);
        self.check_len("acting input", x.len(), r * (d.s + 1))?;
        let (online, head) = self.act_network();
        let io = act::ActIo { x, rows: r, y: if a.outputs { Some(&mut a.y) } else { None }, q: &mut a.q };
        act::launch(&self.stream, &self.fused, online, head, io)
    }

    /// The online network and head constants as the one-launch forward takes them
    /// (`qnet_act` and `experience_step`).
    fn act_network(&self) -> (act::ActParams<'_>, act::ActHead<'_>) {
        let d = self.d;
        let online = act::ActParams { params: self.params.slice(..d.params), heads: self.heads_w.slice(..(d.hw + 1) * d.ow) };
        let head = act::ActHead { shape: &self.shape, na: d.na as u32, v_min: self.cfg.v_min, v_max: self.cfg.v_max };
        (online, head)
    }

    /// The whole experience step of `env`'s envs in one launch (`experience_step`): their
    /// states gathered, the online Q-forward into `a.q`, their select, fill and barriers;
    /// the outputs of `state_gather`, [`QNet::act`] and `env_step` in a row, bit for bit.
    /// Only where acting on that many rows runs `qnet_act` ([`QNet::act_block_rows`]).
    pub fn act_experience(&self, env: &ExperienceEnv, a: &mut Acting) -> Result<()> {
        let d = self.d;
        if self.act_block_rows(env.envs()).is_none() {
            return Err(Error::Usage(format!(
                "the experience step in one launch at {} envs: acting on that many rows runs layer by layer; step the chain (Env::set_step_fused(false))",
                env.envs()
            )));
        }
        if a.rows != env.envs() {
            return Err(Error::Usage(format!("acting buffers of {} rows for {} envs", a.rows, env.envs())));
        }
        if env.state_dim() != d.s || env.actions() != d.qw {
            return Err(Error::Usage(format!(
                "envs of state width {} and {} actions for a network of {} inputs and {} actions: build the network from the env's state width and branches",
                env.state_dim(),
                env.actions(),
                d.s,
                d.qw
            )));
        }
        let (online, head) = self.act_network();
        let y = if a.outputs { Some(&mut a.y) } else { None };
        act::launch_step(&self.stream, &self.fused, online, head, env, y, &mut a.q)
    }

    /// The rows per `qnet_act` block that acting on `rows` states runs with, or None when it
    /// runs layer by layer ([`QNet::act`]): qnet_act where it is on ([`QNet::set_act_fused`]),
    /// the products are not TF32, and the rule of 32-row blocks filling the GPU picks it.
    pub fn act_block_rows(&self, rows: usize) -> Option<usize> {
        if self.tf32() || !self.act_fused {
            return None;
        }
        self.fused.block_rows(rows)
    }

    /// The arithmetic of the products that acting on `rows` states runs (which bound the
    /// result is held to).
    pub fn acting_products(&self, rows: usize) -> Products {
        if self.tf32() {
            Products::Tf32
        } else if self.act_block_rows(rows).is_some() {
            Products::Tf32x3
        } else {
            Products::Float32
        }
    }

    /// Acting in one launch (`qnet_act`, on by default) where its rule picks it; `false`:
    /// always layer by layer. Like [`QNet::set_tf32`], applies to launches made after it,
    /// not to a graph already captured. qnet_act reads the online parameters and the dense
    /// head matrix (which set_params and the optimizer step keep with them) as they are at
    /// each launch, so nothing needs rebuilding after either.
    pub fn set_act_fused(&mut self, on: bool) {
        self.act_fused = on;
    }

    /// The rows per `qnet_act` block this network fits (fewest first; empty: too wide for one
    /// block, acting runs layer by layer).
    pub fn act_block_rows_available(&self) -> Vec<usize> {
        self.fused.fitting()
    }

    /// Whether `qnet_act` stages this network's weights by the aligned feed
    /// (`qnet_act_aligned_rows{R}`: every staged row a run of whole 16-byte copies, as in the
    /// default network) rather than the general one (zero-filled 16- or 4-byte copies).
    pub fn act_aligned(&self) -> bool {
        self.fused.aligned()
    }

    /// Benchmarking: force `qnet_act`'s rows per block (16 or 32 where they fit), or
    /// (None) let the rule pick.
    pub fn set_act_block_rows(&mut self, rows: Option<usize>) -> Result<()> {
        self.fused.force_rows(rows)
    }

    /// The acting forward layer by layer, as the update's forward runs it (its products on
    /// the configured engine, TF32 when set): `qnet_first_layer`, trunk 2 and the heads'
    /// hidden layer, the head-output products side by side, `qnet_head_q`.
    pub fn act_layers(&self, x: &CudaSlice<f32>, a: &mut Acting) -> Result<()> {
        let (d, pl, r) = (self.d, Layout::plain, a.rows);
        self.check_len("acting input", x.len(), r * (d.s + 1))?;
        let off = &self.off;
        let (relu_k, st) = (&self.k.relu, &self.stream);
        let input = FirstInput { s: x, s2: x, split: r, ld: d.s + 1, x: None };
        first_layer(st, &self.k.first_layer, input, d, &self.params.slice(off.w1..), 1, r, 0, &mut a.a1)?;
        hidden_layer(&self.blas, false, relu_k, 1, r, d.h2, d.h1 + 1, &a.a1, 0, &self.params.slice(off.w2..), 0, &mut a.a2)?;
        hidden_layer(&self.blas, false, relu_k, 1, r, d.hw, d.h2 + 1, &a.a2, 0, &self.params.slice(off.wh..), 0, &mut a.ah)?;
        // The heads' output products side by side: the value head on the main stream, the
        // branches across the lanes (as in forward_heads).
        let side = (self.heads.len() - 1).min(LANES);
        self.fork(0..side)?;
        for (h, &(row, fan_in, col, width)) in self.heads.iter().enumerate() {
            let blas = if h == 0 { &self.blas } else { &self.lanes[(h - 1) % LANES].blas };
            #[rustfmt::skip]
            blas.gemm(r, width, fan_in, 1.0,
                &a.ah.slice(row..), pl(d.hw + 1),
                &self.heads_w.slice(row * d.ow + col..), pl(d.ow),
                0.0, &mut a.y.slice_mut(col..), d.ow)?;
        }
        self.join(0..side)?;
        self.act_head(a)
    }

    /// The last stage of [`QNet::act`]: `qnet_head_q` on `a`'s head-output rows. Acting reads
    /// the Q-values only, so the head, in float, writes nothing else.
    pub fn act_head(&self, a: &mut Acting) -> Result<()> {
        let out = HeadOutputs { dists: None, q: &mut a.q };
        launch_head(&self.stream, &self.k, &self.heads_w, &self.shape, &self.cfg, self.d, &self.head, 1, a.rows, &a.y, out)
    }

    /// Overwrite `a`'s head-output rows (`N x ow`, without bias), so that a fixture replay
    /// can run [`QNet::act_head`] on recorded inputs.
    pub fn load_acting_outputs(&self, a: &mut Acting, y: &[f32]) -> Result<()> {
        self.check_len("acting head outputs", y.len(), a.rows * self.d.ow)?;
        Ok(self.stream.memcpy_htod(y, &mut a.y)?)
    }

    /// The Q-values of the last [`QNet::act`].
    pub fn read_acting(&self, a: &Acting) -> Result<Vec<f32>> {
        Ok(self.stream.clone_dtoh(&a.q)?)
    }

    /// The head-output rows (`N x ow`, before the bias the head adds) of the last
    /// [`QNet::act`].
    pub fn read_acting_outputs(&self, a: &Acting) -> Result<Vec<f32>> {
        if !a.outputs {
            return Err(Error::Usage("these activations act for Q only (Acting::q_only): make them with QNet::acting".into()));
        }
        Ok(self.stream.clone_dtoh(&a.y)?)
    }

    /// Read one network's forward outputs (`net` 0 online, 1 target).
    pub fn read_forward(&self, net: usize) -> Result<ForwardOut> {
        if net >= NETS {
            return Err(Error::Usage(format!("network {net}: 0 is the online network, 1 the target")));
        }
        let d = self.d;
        let r = d.rows;
        let s = &self.stream;
        let strip = |buf: &CudaSlice<f32>, width: usize, ld: usize| -> Result<Vec<f32>> {
            let all = s.clone_dtoh(&buf.slice(net * r * ld..(net + 1) * r * ld))?;
            Ok(all.chunks_exact(ld).flat_map(|row| row[..width].iter().copied()).collect())
        };
        let c51 = d.na > 1;
        Ok(ForwardOut {
            h1: strip(&self.a1, d.h1, d.h1 + 1)?,
            h2: strip(&self.a2, d.h2, d.h2 + 1)?,
            heads_hidden: strip(&self.ah, d.hw, d.hw + 1)?,
            y: strip(&self.y, d.ow, d.ow)?,
            logits: strip(&self.logits, d.lw, d.lw)?,
            log_probs: if c51 { strip(&self.log_probs, d.lw, d.lw)? } else { Vec::new() },
            probs: if c51 { strip(&self.probs, d.lw, d.lw)? } else { Vec::new() },
            q: strip(&self.q, d.qw, d.qw)?,
        })
    }

    /// Overwrite one stage buffer of network `net` with `data` (all 2B rows of that
    /// network; for `Buffer::Input` and `Buffer::HeadGrad`, which are shared, `net` must be
    /// 0): fixture replays feed a stage its recorded inputs this way. Activations keep their
    /// ones column.
    pub fn load(&mut self, buffer: Buffer, net: usize, data: &[f32]) -> Result<()> {
        let d = self.d;
        let shared = matches!(buffer, Buffer::Input | Buffer::HeadGrad);
        if net >= NETS || (shared && net != 0) {
            return Err(Error::Usage(format!("load {buffer:?} into network {net}: 0 is online, 1 target; shared buffers take 0")));
        }
        let (buf, width, ones, rows) = match buffer {
            Buffer::Input => (&mut self.x, d.s, true, d.rows),
            Buffer::H1 => (&mut self.a1, d.h1, true, d.rows),
            Buffer::H2 => (&mut self.a2, d.h2, true, d.rows),
            Buffer::HeadsHidden => (&mut self.ah, d.hw, true, d.rows),
            Buffer::HeadOutputs => (&mut self.y, d.ow, false, d.rows),
            Buffer::LogProbs => (&mut self.log_probs, d.lw, false, d.rows),
            Buffer::Probs => (&mut self.probs, d.lw, false, d.rows),
            Buffer::Q => (&mut self.q, d.qw, false, d.rows),
            Buffer::HeadGrad => (&mut self.dy, d.ow, false, d.b),
        };
        if data.len() != rows * width {
            return Err(Error::Usage(format!(
                "load {buffer:?}: {} values, expected {rows} rows x {width}",
                data.len()
            )));
        }
        let ld = width + usize::from(ones);
        let mut rowed = Vec::with_capacity(rows * ld);
        for row in data.chunks_exact(width) {
            rowed.extend_from_slice(row);
            if ones {
                rowed.push(1.0);
            }
        }
        let at = net * rows * ld;
        self.stream.memcpy_htod(&rowed, &mut buf.slice_mut(at..at + rows * ld))?;
        Ok(())
    }

    pub fn read_loss(&self) -> Result<LossOut> {
        let s = &self.stream;
        Ok(LossOut {
            loss: s.clone_dtoh(&self.loss)?[0],
            sample_loss: s.clone_dtoh(&self.sample_loss)?,
            priorities: s.clone_dtoh(&self.priorities)?,
            next_actions: s.clone_dtoh(&self.next_actions)?,
            head_grad: s.clone_dtoh(&self.dy)?,
        })
    }

    /// Fill every output buffer with NaN (ints with -1), so a check can see that a launch
    /// wrote every element.
    pub fn poison_outputs(&mut self) -> Result<()> {
        let s = self.stream.clone();
        let (d, all) = (self.d, NETS * self.d.rows);
        // The activations' ones columns are constants of the layout (set at allocation,
        // rewritten by `load`), not outputs: they keep their ones.
        for (buf, width, rows) in [(&mut self.a1, d.h1, all), (&mut self.a2, d.h2, all), (&mut self.ah, d.hw, all), (&mut self.x, d.s, d.rows)] {
            s.memcpy_htod(&with_ones(rows, width, f32::NAN), buf)?;
        }
        for buf in [
            &mut self.y, &mut self.logits, &mut self.log_probs, &mut self.probs, &mut self.q, &mut self.priorities, &mut self.dy,
            &mut self.dhh, &mut self.dh2, &mut self.dh1, &mut self.grads,
        ] {
            let nan = vec![f32::NAN; buf.len()];
            s.memcpy_htod(&nan, buf)?;
        }
        s.memcpy_htod(&vec![-1i32; self.next_actions.len()], &mut self.next_actions)?;
        s.memcpy_htod(&vec![f64::NAN; self.sample_loss.len()], &mut self.sample_loss)?;
        s.memcpy_htod(&[f64::NAN], &mut self.loss)?;
        Ok(())
    }
}

/// The arithmetic of a forward's products, which decides the bound it is held to
/// (tallyho_oracle::tolerance): `gemm_chain`, `gemm_chain_3xtf32`, `gemm_chain_tf32`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Products {
    /// Float32 FMAs (cuBLAS's SIMT kernels, qnet_first_layer).
    Float32,
    /// qnet_act's 3xTF32 tensor-core products (float32-class).
    Tf32x3,
    /// The TF32 option on the layer-by-layer products (the first layer stays float32).
    Tf32,
}

/// The stage buffers [`QNet::load`] can fill.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Buffer {
    /// The stacked input rows [s; s'], 2B x S (shared by both networks).
    Input,
    H1,
    H2,
    HeadsHidden,
    HeadOutputs,
    LogProbs,
    Probs,
    Q,
    /// The head-output gradient, B x O (online only).
    HeadGrad,
}

/// The device addresses an update reads its batch from, folded into one graph binding.
fn binding(stream: &Arc<CudaStream>, t: &DeviceTransitions, weights: &CudaSlice<f32>) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    let mut mix = |p: u64| h = (h ^ p).wrapping_mul(0x0100_0000_01b3);
    mix(t.states.device_ptr(stream).0);
    mix(t.next_states.device_ptr(stream).0);
    mix(t.actions.device_ptr(stream).0);
    mix(t.rewards.device_ptr(stream).0);
    mix(t.dones.device_ptr(stream).0);
    mix(weights.device_ptr(stream).0);
    h
}

/// The distributions `qnet_head` writes beside Q, `nets x rows x lw` each.
struct Dists<'a> {
    logits: &'a mut CudaSlice<f32>,
    log_probs: &'a mut CudaSlice<f32>,
    probs: &'a mut CudaSlice<f32>,
}

/// The outputs of the head, `nets x rows` rows each: Q always; with the distributions,
/// `qnet_head` (double, the update's: its loss reads them), without, `qnet_head_q` (float,
/// Q only: acting's).
struct HeadOutputs<'a> {
    dists: Option<Dists<'a>>,
    q: &'a mut CudaSlice<f32>,
}

/// The head on the head-output rows `y` (`nets x rows x ow`) of the first `nets` networks:
/// the update's (`qnet_head`, both networks on 2B rows, with the distributions) and
/// acting's (`qnet_head_q`, the online one on N rows, Q only).
#[allow(clippy::too_many_arguments)]
fn launch_head(
    stream: &Arc<CudaStream>,
    k: &Kernels,
    heads_w: &CudaSlice<f32>,
    shape: &BranchShape,
    cfg: &QNetConfig,
    d: Dims,
    splits: &HeadSplits,
    nets: usize,
    rows: usize,
    y: &CudaSlice<f32>,
    out: HeadOutputs,
) -> Result<()> {
    let na = d.na as u32;
    let rows32 = u32::try_from(rows).map_err(|_| Error::Usage(format!("the head over {rows} rows: more than u32 rows")))?;
    let (bias_at, bias_stride) = (d.hw * d.ow, ((d.hw + 1) * d.ow) as u64);
    let bias = heads_w.slice(bias_at..);
    let s = if out.dists.is_some() { splits.head } else { splits.head_q };
    let chunks = u32::try_from(rows.div_ceil(s.block_rows))
        .map_err(|_| Error::Usage(format!("the head over {rows} rows: too many for one grid")))?;
    let (lpa, block_rows) = (s.lpa as u32, s.block_rows as u32);
    let launch = LaunchConfig {
        grid_dim: (chunks, nets as u32, 1),
        block_dim: (s.threads as u32, 1, 1),
        shared_mem_bytes: s.smem as u32,
    };
    match out.dists {
        Some(dists) => {
            let mut l = stream.launch_builder(&k.head);
            #[rustfmt::skip]
            l.arg(y).arg(&bias).arg(&bias_stride).arg(shape).arg(&na).arg(&cfg.v_min).arg(&cfg.v_max).arg(&rows32)
                .arg(&lpa).arg(&block_rows).arg(&1u32).arg(dists.logits).arg(dists.log_probs).arg(dists.probs).arg(out.q);
            // SAFETY: follows qnet_head's signature: y is nets x rows x ow, bias ow floats at
            // each net's stride (row H of its dense head matrix), the BranchShape by value, u32
            // lpa and block_rows as head_split chose them (a power of two <= 32 with NA <= lpa
            // HEAD_SLOTS; block_rows qw lpa <= threads <= 1024), u32 dists = 1, then the
            // outputs nets x rows x lw (logits, log_probs, probs) and nets x rows x qw (q), as
            // allocated by QNet::new (nets = NETS, rows = 2B); grid (row chunks, nets),
            // block_rows (ow + K NA) + 32 doubles of dynamic shared memory.
            unsafe { l.launch(launch) }?;
        }
        None => {
            let mut l = stream.launch_builder(&k.head_q);
            #[rustfmt::skip]
            l.arg(y).arg(&bias).arg(shape).arg(&na).arg(&cfg.v_min).arg(&cfg.v_max).arg(&rows32).arg(&lpa)
                .arg(&block_rows).arg(out.q);
            // SAFETY: follows qnet_head_q's signature: y is rows x ow (one network), bias the
            // online net's ow floats (row H of its dense head matrix), the BranchShape by value,
            // u32 lpa and block_rows as head_q_split chose them (a power of two <= 32 with NA <=
            // lpa HEAD_Q_SLOTS; block_rows qw lpa <= threads <= 1024), q rows x qw, as
            // allocated by QNet::acting; grid (row chunks, 1), block_rows (ow + K NA) + 32
            // floats of dynamic shared memory.
            unsafe { l.launch(launch) }?;
        }
    }
    Ok(())
}

#[derive(Clone, Copy, Debug)]
/// How the head splits its work (see cuda/qnet_head.cu): `lpa` lanes per (row, action),
/// `block_rows` rows per block of `threads` threads, `smem` bytes of shared memory.
struct HeadSplit {
    lpa: usize,
    block_rows: usize,
    threads: usize,
    smem: usize,
}

/// The split of each head kernel: `qnet_head` (double) and `qnet_head_q` (float).
#[derive(Clone, Copy, Debug)]
struct HeadSplits {
    head: HeadSplit,
    head_q: HeadSplit,
}

/// `qnet_head`'s work split for the network's dimensions, or why it has none.
fn head_split(d: Dims) -> Result<HeadSplit> {
    lane_split(d, HEAD_SLOTS, 8)
}

/// A lane-group head's split: `lpa` lanes per (row, action), the least power of two with NA
/// <= lpa `slots`, whole rows up to HEAD_THREADS threads, `real`-byte shared values.
fn lane_split(d: Dims, slots: usize, real: usize) -> Result<HeadSplit> {
    let lpa = d.na.div_ceil(slots).next_power_of_two();
    if lpa > 32 {
        return Err(Error::Usage(format!(
            "atoms = {}: the GPU head holds at most {} atoms per action ({slots} per lane of a warp); use at most that many",
            d.na,
            32 * slots
        )));
    }
    let row_threads = d.qw * lpa;
    let (row_smem, pad) = ((d.ow + d.kk * d.na) * real, HEAD_PAD * real);
    if row_threads > 1024 || row_smem + pad > SMEM_DEFAULT {
        return Err(Error::Usage(format!(
            "{} actions x {} atoms: one row of the GPU head needs {row_threads} threads and {row_smem} bytes of shared \
             memory (at most 1024 and {SMEM_DEFAULT}); use fewer actions or atoms",
            d.qw, d.na
        )));
    }
    let block_rows = (HEAD_THREADS / row_threads).clamp(1, (SMEM_DEFAULT - pad) / row_smem);
    let (threads, smem) = ((block_rows * row_threads).next_multiple_of(32), block_rows * row_smem + pad);
    Ok(HeadSplit { lpa, block_rows, threads, smem })
}

/// `qnet_head_q`'s work split: as `qnet_head`'s, with HEAD_Q_SLOTS atoms a lane and float
/// shared memory.
fn head_q_split(d: Dims) -> Result<HeadSplit> {
    lane_split(d, HEAD_Q_SLOTS, 4)
}

/// `rows` rows of `width` values and a ones column (each value `fill`).
fn with_ones(rows: usize, width: usize, fill: f32) -> Vec<f32> {
    let mut v = vec![fill; rows * (width + 1)];
    v.iter_mut().skip(width).step_by(width + 1).for_each(|x| *x = 1.0);
    v
}

/// A hidden layer after the first on `nets` networks (operand i at i * stride):
/// `out = relu([in | 1] [w; b])`, out's ones column left as allocated. cuBLASLt: one
/// product with a ReLU epilogue; cuBLAS: the product, then `qnet_relu` (which rewrites the
/// ones column too).
#[allow(clippy::too_many_arguments)]
fn hidden_layer(
    blas: &Blas,
    gemms_only: bool,
    relu_k: &CudaFunction,
    nets: usize,
    rows: usize,
    width: usize,
    fan_in: usize,
    input: &CudaSlice<f32>,
    input_stride: usize,
    w: &CudaView<f32>,
    w_stride: usize,
    out: &mut CudaSlice<f32>,
) -> Result<()> {
    let (pl, lt) = (Layout::plain, blas.engine() == Engine::Lt);
    let epilogue = if lt { Epilogue::Relu } else { Epilogue::None };
    #[rustfmt::skip]
    blas.gemm_batched(nets, rows, width, fan_in, 1.0, input, pl(fan_in), input_stride, w, pl(width), w_stride,
        0.0, out, width + 1, rows * (width + 1), epilogue)?;
    if lt {
        return Ok(());
    }
    relu(gemms_only, blas.stream(), relu_k, out, nets * rows, width)
}

/// Rows of a `qnet_first_layer` block (`QNET_FIRST_ROWS`).
const FIRST_ROWS: usize = 8;

/// `qnet_first_layer`'s input: row r's S values at `s` + r `ld` for r < `split`, else at
/// `s2` + (r - split) `ld`; the staged rows (with their ones column) are written to `x` if given.
struct FirstInput<'a> {
    s: &'a CudaSlice<f32>,
    s2: &'a CudaSlice<f32>,
    split: usize,
    ld: usize,
    x: Option<&'a mut CudaSlice<f32>>,
}

/// `qnet_first_layer`: a1 = relu([x | 1] [w1; b1]) for `nets` networks on `rows` input rows.
#[allow(clippy::too_many_arguments)]
fn first_layer(
    stream: &Arc<CudaStream>,
    k: &CudaFunction,
    input: FirstInput,
    d: Dims,
    w1: &CudaView<f32>,
    nets: usize,
    rows: usize,
    param_stride: usize,
    a1: &mut CudaSlice<f32>,
) -> Result<()> {
    let (dim, rows64, h1, stride) = (d.s as u32, rows as u64, d.h1 as u32, param_stride as u64);
    let blocks = u32::try_from(rows.div_ceil(FIRST_ROWS))
        .map_err(|_| Error::Usage(format!("first layer over {rows} rows: too many for one grid")))?;
    let (split, in_ld, null) = (input.split as u64, input.ld as u32, 0u64);
    let mut b = stream.launch_builder(k);
    b.arg(input.s).arg(input.s2).arg(&split).arg(&in_ld).arg(&dim).arg(&rows64).arg(w1).arg(&stride).arg(&h1).arg(a1);
    match input.x {
        Some(x) => b.arg(x),
        None => b.arg(&null),
    };
    let cfg = LaunchConfig {
        grid_dim: (blocks, nets as u32, 1),
        block_dim: (d.h1.next_multiple_of(32).min(256) as u32, 1, 1),
        shared_mem_bytes: (FIRST_ROWS * (d.s + 1) * 4) as u32,
    };
    // SAFETY: qnet_first_layer(const float* s, const float* s2, u64 split, u32 in_ld, u32 S,
    // u64 rows, const float* w1 (net n's (S + 1) x h1 at n * param_stride, inside the flat
    // parameters), u64 param_stride, u32 h1, float* a1 [nets x rows x (h1 + 1)], float* x
    // [rows x (S + 1)] or null): the update passes states and next_states (B x S each,
    // checked in forward), split B, in_ld S and its x (2B rows); acting passes its x (N x
    // (S + 1), checked in act) as both halves, split N, in_ld S + 1 and null; a1 the matching
    // activations (QNet::new, QNet::acting).
    unsafe { b.launch(cfg) }?;
    Ok(())
}

fn relu(skip: bool, stream: &Arc<CudaStream>, k: &CudaFunction, a: &mut CudaSlice<f32>, rows: usize, width: usize) -> Result<()> {
    if skip {
        return Ok(());
    }
    let (rows64, w32) = (rows as u64, width as u32);
    let mut b = stream.launch_builder(k);
    b.arg(a).arg(&rows64).arg(&w32);
    // SAFETY: qnet_relu(float* a [rows x (width + 1)], u64 rows, u32 width); every caller
    // passes an activation of `rows` x (width + 1): NETS x 2B rows (update) or N (acting).
    unsafe { b.launch(grid_stride(rows * (width + 1))) }?;
    Ok(())
}

fn relu_backward(
    skip: bool,
    stream: &Arc<CudaStream>,
    k: &CudaFunction,
    d: &mut CudaSlice<f32>,
    a: &CudaSlice<f32>,
    rows: usize,
    width: usize,
) -> Result<()> {
    if skip {
        return Ok(());
    }
    let (rows64, w32) = (rows as u64, width as u32);
    let mut b = stream.launch_builder(k);
    b.arg(d).arg(a).arg(&rows64).arg(&w32);
    // SAFETY: qnet_relu_backward(float* d [rows x width], const float* a [rows x (width + 1)],
    // u64, u32): d holds B x width, a holds NETS x 2B x (width + 1) and rows = B.
    unsafe { b.launch(grid_stride(rows * width)) }?;
    Ok(())
}
