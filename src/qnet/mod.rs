//! The Q-network on the device: its parameters (online and target in one allocation), the
//! update (forward, loss, backward, optimizer step: [`learner`]), acting on the experience
//! step's states ([`acting`], with the one-launch forward of [`act`]), and the read-back
//! that tests and fixtures use ([`readback`]). Spec: tallyho_oracle::qnet (`forward`,
//! `head`, `next_actions`, `loss_with_next_actions`, `head_grad`, `backward_from_head_grad`,
//! `update_step`).
//!
//! **Shape of the work.** The online and target parameters are one allocation (online
//! first, target at `param_count`), so each forward layer is ONE strided-batched GEMM over
//! both networks on the stacked rows `[s; s']` (the target's pass over s is computed and not
//! used: at these sizes a GEMM costs its launch, not its rows). Each layer with one input
//! multiplies an activation that carries a ones column by the layer's `[w; b]` block of the
//! flat buffer, so biases ride in the forward GEMMs and bias gradients come out of the
//! weight-gradient GEMMs; the heads' hidden layers are one matrix, and the heads' output
//! layers are one dense block-diagonal matrix with the output bias as its last row (a
//! working copy of the compact tensors, cuda/qnet_head_matrix.cu): its weight gradient is one
//! dense GEMM; the forward and the hidden gradient are one GEMM per head that reads its block
//! in place (a dense product would multiply the zeros too: slower at these sizes). Per update:
//! 16 GEMMs (forward: trunk 2, the heads' hidden layer, one per head; backward: 10) and 9
//! kernels (`qnet_first_layer`, which also stages the input; `qnet_head`; `qnet_loss`;
//! `qnet_head_matrix_gather`; 3 `qnet_relu_backward`; `optimizer_grad_norm`, `optimizer_adam`); the forward
//! ReLUs ride in the cuBLASLt epilogues.
//!
//! **Hot path.** Every buffer is allocated in [`QNet::new`]; an update launches work only:
//! no allocation, no host copy, no synchronisation. All per-step values (the Adam step, the
//! clip scale) live in device memory, so [`QNet::update_graphed`] captures the whole update
//! once and replays it.

use crate::error::{Error, Result};
use crate::gemm::{Epilogue, Gemm, Layout};
use crate::graph::{address, Binding, GraphSlot, Phase};
use crate::optimizer::{Mirror, Optimizer};
use crate::replay::DeviceTransitions;
use crate::runtime::{entry, grid_stride, Gpu};
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaEvent, CudaSlice, CudaStream, CudaView, LaunchConfig, PushKernelArg};
use std::sync::Arc;
use tallyho_oracle::qnet::{self as spec, QNetConfig};

pub mod act;
mod acting;
mod launch;
mod layout;
mod learner;
mod readback;

pub use acting::Acting;
use launch::{
    first_layer, head_q_split, head_split, hidden_layer, launch_head, relu_backward, Dists,
    FirstInput, HeadOutputs, HeadSplits, Kernels,
};
use layout::{head_matrix_index, heads_of, with_ones, BranchShape, Dims, Offsets};
pub use readback::{ForwardOut, LossOut};

/// Most action branches a network may have (`QNET_MAX_BRANCHES` in cuda/common/qnet.cuh).
pub const MAX_BRANCHES: usize = 8;

/// The two networks of a forward: online (0) and target (1).
const NETS: usize = 2;

/// Side streams the update forks independent GEMMs onto: at these sizes a GEMM fills a
/// fraction of the GPU and costs its latency, so independent ones run side by side (the
/// per-head forward products and hidden gradients; each backward weight gradient beside the
/// next data gradient).
const LANES: usize = 4;

/// A side stream with its own cuBLASLt handle (so its own workspace) and the event that
/// marks its work done.
struct Lane {
    stream: Arc<CudaStream>,
    gemm: Gemm,
    done: CudaEvent,
}

pub struct QNet {
    cfg: QNetConfig,
    d: Dims,
    off: Offsets,
    stream: Arc<CudaStream>,
    gemm: Gemm,
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
    /// qnet_head_matrix' index table (compact element -> dense position).
    head_matrix_index: CudaSlice<u32>,
    /// The dense head-output matrices `[(H + 1) x O]` of online then target.
    head_matrix: CudaSlice<f32>,
    /// The dense gradient of the online one.
    head_matrix_grad: CudaSlice<f32>,
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
    /// the input of `ReplayBuffer::update_priorities`).
    pub priorities: CudaSlice<f32>,
    dy: CudaSlice<f32>,
    loss: CudaSlice<f64>,
    /// The last-block counter of `qnet_loss` (zero between launches).
    loss_done: CudaSlice<u32>,
    dhh: CudaSlice<f32>,
    dh2: CudaSlice<f32>,
    dh1: CudaSlice<f32>,
    graph: GraphSlot,
    /// The launch shapes of `qnet_head` and `qnet_head_q`, fixed by the network's dimensions.
    head: HeadSplits,
    /// The one-launch acting forward (`qnet_act`), where the network fits a block.
    fused: act::Fused,
    /// Act with `fused` where it fits ([`QNet::set_act_fused`]).
    act_fused: bool,
}

/// The arithmetic of a forward's products, which decides the bound it is held to
/// (tallyho_oracle::tolerance): `gemm_chain`, `gemm_chain_3xtf32`, `gemm_chain_tf32`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Products {
    /// Float32 FMAs (cuBLASLt's float32 kernels, qnet_first_layer).
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

impl QNet {
    /// A network pair for batches of `batch` transitions, online and target initialised
    /// from `cfg.seed` (the oracle's `init_params`), Adam at step 0.
    pub fn new(gpu: &Gpu, cfg: &QNetConfig, batch: usize) -> Result<Self> {
        cfg.validate()?;
        if batch == 0 {
            return Err(Error::Shape(
                "Q-network batch 0: an update needs at least one transition".into(),
            ));
        }
        if cfg.num_branches() > MAX_BRANCHES {
            return Err(Error::Shape(format!(
                "{} action branches: the kernels take at most {MAX_BRANCHES}; merge branches or raise QNET_MAX_BRANCHES",
                cfg.num_branches()
            )));
        }
        let sizes = [
            batch,
            cfg.state_dim,
            cfg.h1,
            cfg.h2,
            spec::hidden_width(cfg),
            spec::output_width(cfg),
        ];
        if sizes.iter().any(|&v| v >= i32::MAX as usize / 4) {
            return Err(Error::Shape(format!("Q-network sizes {sizes:?} exceed cuBLASLt's 32-bit dimensions: use smaller layers or batches")));
        }
        let d = Dims::of(cfg, batch);
        // The heads' limits, refused here rather than at the first forward.
        let head = HeadSplits {
            head: head_split(d)?,
            head_q: head_q_split(d)?,
        };
        let s = &gpu.stream;
        let f = |e| gpu.function(e);
        let k = Kernels {
            first_layer: f(entry::qnet_forward::QNET_FIRST_LAYER)?,
            head: f(entry::qnet_head::QNET_HEAD)?,
            head_q: f(entry::qnet_head::QNET_HEAD_Q)?,
            loss: f(entry::qnet_loss::QNET_LOSS)?,
            relu_backward: f(entry::qnet_backward::QNET_RELU_BACKWARD)?,
            head_matrix_scatter: f(entry::qnet_head_matrix::QNET_HEAD_MATRIX_SCATTER)?,
            head_matrix_gather: f(entry::qnet_head_matrix::QNET_HEAD_MATRIX_GATHER)?,
        };

        let event = || {
            gpu.ctx
                .new_event(Some(CUevent_flags::CU_EVENT_DISABLE_TIMING))
        };
        let mut lanes = Vec::with_capacity(LANES);
        for _ in 0..LANES {
            let stream = gpu.ctx.new_stream()?;
            lanes.push(Lane {
                gemm: Gemm::new(&stream)?,
                stream,
                done: event()?,
            });
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
            gemm: Gemm::new(s)?,
            lanes,
            forked: event()?,
            heads,
            k,
            params: s.clone_htod(&pair)?,
            grads: s.alloc_zeros(d.params)?,
            opt: Optimizer::new(gpu, cfg, d.params)?,
            shape: BranchShape::of(cfg),
            head_matrix_index: s.clone_htod(&head_matrix_index(cfg))?,
            head_matrix: s.alloc_zeros(NETS * (d.hw + 1) * d.ow)?,
            head_matrix_grad: s.alloc_zeros((d.hw + 1) * d.ow)?,
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
            head,
            fused,
            act_fused: true,
            d,
        };
        net.set_params(&init, &init)?;
        Ok(net)
    }

    /// TF32 tensor-core GEMMs (an option for speed, with its own error: ~3e-4 relative per
    /// product, ../shared/GPU.md), or strict fp32 (the default, what the tests check).
    pub fn set_tf32(&mut self, on: bool) {
        self.gemm.set_tf32(on);
        self.lanes.iter().for_each(|l| l.gemm.set_tf32(on));
    }

    /// Are the products in TF32 ([`QNet::set_tf32`])?
    pub fn tf32(&self) -> bool {
        self.gemm.tf32()
    }

    /// The stream the network's launches go to (acting layer by layer included).
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
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
            return Err(Error::Shape(format!(
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
        self.stream
            .memcpy_htod(online, &mut self.params.slice_mut(..p))?;
        self.stream
            .memcpy_htod(target, &mut self.params.slice_mut(p..))?;
        self.scatter_head_matrix(NETS)
    }

    /// `qnet_head_matrix_scatter`: rebuild the dense head matrices of the first `nets` networks
    /// (1: online, 2: both) from the flat parameters.
    fn scatter_head_matrix(&mut self, nets: usize) -> Result<()> {
        let count = self.head_matrix_index.len();
        let (p64, wv2, count32, stride, n32) = (
            self.d.params as u64,
            self.off.wv2 as u64,
            count as u32,
            ((self.d.hw + 1) * self.d.ow) as u64,
            nets as u32,
        );
        let mut l = self.stream.launch_builder(&self.k.head_matrix_scatter);
        l.arg(&self.params)
            .arg(&p64)
            .arg(&wv2)
            .arg(&self.head_matrix_index)
            .arg(&count32)
            .arg(&stride)
            .arg(&n32)
            .arg(&mut self.head_matrix);
        // SAFETY: qnet_head_matrix_scatter(const float* params [2P], u64 P, u64 wv2 offset, const u32*
        // index [count], u32 count, u64 dense stride, u32 nets <= 2, float* dense [2 (H + 1) O]):
        // the index holds dense positions < (H + 1) O, wv2 + count = P (checked in Offsets::of).
        unsafe { l.launch(grid_stride(nets * count)) }?;
        Ok(())
    }

    /// `(online, target)` parameters.
    pub fn params(&self) -> Result<(Vec<f32>, Vec<f32>)> {
        let p = self.d.params;
        Ok((
            self.stream.clone_dtoh(&self.params.slice(..p))?,
            self.stream.clone_dtoh(&self.params.slice(p..))?,
        ))
    }

    /// The gradient of the last backward (before clipping).
    pub fn grads(&self) -> Result<Vec<f32>> {
        Ok(self.stream.clone_dtoh(&self.grads)?)
    }
}
