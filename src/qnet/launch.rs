//! The launches the update and acting share: the first layer (`qnet_first_layer`), a hidden
//! layer (one cuBLASLt product with a ReLU epilogue), the head (`qnet_head`, `qnet_head_q`)
//! and its work split, and the ReLU backward.

use super::*;
use cudarc::driver::CudaFunction;

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

pub(super) struct Kernels {
    pub(super) first_layer: CudaFunction,
    pub(super) head: CudaFunction,
    pub(super) head_q: CudaFunction,
    pub(super) loss: CudaFunction,
    pub(super) relu_backward: CudaFunction,
    pub(super) head_matrix_scatter: CudaFunction,
    pub(super) head_matrix_gather: CudaFunction,
}

/// The distributions `qnet_head` writes beside Q, `nets x rows x lw` each.
pub(super) struct Dists<'a> {
    pub(super) logits: &'a mut CudaSlice<f32>,
    pub(super) log_probs: &'a mut CudaSlice<f32>,
    pub(super) probs: &'a mut CudaSlice<f32>,
}

/// The outputs of the head, `nets x rows` rows each: Q always; with the distributions,
/// `qnet_head` (double, the update's: its loss reads them), without, `qnet_head_q` (float,
/// Q only: acting's).
pub(super) struct HeadOutputs<'a> {
    pub(super) dists: Option<Dists<'a>>,
    pub(super) q: &'a mut CudaSlice<f32>,
}

/// The head on the head-output rows `y` (`nets x rows x ow`) of the first `nets` networks:
/// the update's (`qnet_head`, both networks on 2B rows, with the distributions) and
/// acting's (`qnet_head_q`, the online one on N rows, Q only).
#[allow(clippy::too_many_arguments)]
pub(super) fn launch_head(
    stream: &Arc<CudaStream>,
    k: &Kernels,
    head_matrix: &CudaSlice<f32>,
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
    let rows32 = u32::try_from(rows)
        .map_err(|_| Error::Shape(format!("the head over {rows} rows: more than u32 rows")))?;
    let (bias_at, bias_stride) = (d.hw * d.ow, ((d.hw + 1) * d.ow) as u64);
    let bias = head_matrix.slice(bias_at..);
    let s = if out.dists.is_some() {
        splits.head
    } else {
        splits.head_q
    };
    let chunks = u32::try_from(rows.div_ceil(s.block_rows))
        .map_err(|_| Error::Shape(format!("the head over {rows} rows: too many for one grid")))?;
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
                .arg(&lpa).arg(&block_rows).arg(dists.logits).arg(dists.log_probs).arg(dists.probs).arg(out.q);
            // SAFETY: follows qnet_head's signature: y is nets x rows x ow, bias ow floats at
            // each net's stride (row H of its dense head matrix), the BranchShape by value, u32
            // lpa and block_rows as head_split chose them (a power of two <= 32 with NA <= lpa
            // HEAD_SLOTS; block_rows qw lpa <= threads <= 1024), then the
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
pub(super) struct HeadSplit {
    pub(super) lpa: usize,
    pub(super) block_rows: usize,
    pub(super) threads: usize,
    pub(super) smem: usize,
}

/// The split of each head kernel: `qnet_head` (double) and `qnet_head_q` (float).
#[derive(Clone, Copy, Debug)]
pub(super) struct HeadSplits {
    pub(super) head: HeadSplit,
    pub(super) head_q: HeadSplit,
}

/// `qnet_head`'s work split for the network's dimensions, or why it has none.
pub(super) fn head_split(d: Dims) -> Result<HeadSplit> {
    lane_split(d, HEAD_SLOTS, 8)
}

/// A lane-group head's split: `lpa` lanes per (row, action), the least power of two with NA
/// <= lpa `slots`, whole rows up to HEAD_THREADS threads, `real`-byte shared values.
pub(super) fn lane_split(d: Dims, slots: usize, real: usize) -> Result<HeadSplit> {
    let lpa = d.na.div_ceil(slots).next_power_of_two();
    if lpa > 32 {
        return Err(Error::Shape(format!(
            "atoms = {}: the GPU head holds at most {} atoms per action ({slots} per lane of a warp); use at most that many",
            d.na,
            32 * slots
        )));
    }
    let row_threads = d.qw * lpa;
    let (row_smem, pad) = ((d.ow + d.kk * d.na) * real, HEAD_PAD * real);
    if row_threads > 1024 || row_smem + pad > SMEM_DEFAULT {
        return Err(Error::Shape(format!(
            "{} actions x {} atoms: one row of the GPU head needs {row_threads} threads and {row_smem} bytes of shared \
             memory (at most 1024 and {SMEM_DEFAULT}); use fewer actions or atoms",
            d.qw, d.na
        )));
    }
    let block_rows = (HEAD_THREADS / row_threads).clamp(1, (SMEM_DEFAULT - pad) / row_smem);
    let (threads, smem) = (
        (block_rows * row_threads).next_multiple_of(32),
        block_rows * row_smem + pad,
    );
    Ok(HeadSplit {
        lpa,
        block_rows,
        threads,
        smem,
    })
}

/// `qnet_head_q`'s work split: as `qnet_head`'s, with HEAD_Q_SLOTS atoms a lane and float
/// shared memory.
pub(super) fn head_q_split(d: Dims) -> Result<HeadSplit> {
    lane_split(d, HEAD_Q_SLOTS, 4)
}

/// A hidden layer after the first on `nets` networks (operand i at i * stride):
/// `out = relu([in | 1] [w; b])` as one cuBLASLt product with a ReLU epilogue, out's ones
/// column left as allocated.
#[allow(clippy::too_many_arguments)]
pub(super) fn hidden_layer(
    gemm: &Gemm,
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
    let (pl, out_stride) = (Layout::plain, rows * (width + 1));
    #[rustfmt::skip]
    let product = gemm.gemm_batched(nets, rows, width, fan_in, 1.0, input, pl(fan_in), input_stride, w, pl(width), w_stride,
        0.0, out, width + 1, out_stride, Epilogue::Relu);
    product
}

/// Rows of a `qnet_first_layer` block (`QNET_FIRST_ROWS`).
pub(super) const FIRST_ROWS: usize = 8;

/// `qnet_first_layer`'s input: row r's S values at `s` + r `ld` for r < `split`, else at
/// `s2` + (r - split) `ld`; the staged rows (with their ones column) are written to `x` if given.
pub(super) struct FirstInput<'a> {
    pub(super) s: &'a CudaSlice<f32>,
    pub(super) s2: &'a CudaSlice<f32>,
    pub(super) split: usize,
    pub(super) ld: usize,
    pub(super) x: Option<&'a mut CudaSlice<f32>>,
}

/// `qnet_first_layer`: a1 = relu([x | 1] [w1; b1]) for `nets` networks on `rows` input rows.
#[allow(clippy::too_many_arguments)]
pub(super) fn first_layer(
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
    let blocks = u32::try_from(rows.div_ceil(FIRST_ROWS)).map_err(|_| {
        Error::Shape(format!(
            "first layer over {rows} rows: too many for one grid"
        ))
    })?;
    let (split, in_ld, null) = (input.split as u64, input.ld as u32, 0u64);
    let mut b = stream.launch_builder(k);
    b.arg(input.s)
        .arg(input.s2)
        .arg(&split)
        .arg(&in_ld)
        .arg(&dim)
        .arg(&rows64)
        .arg(w1)
        .arg(&stride)
        .arg(&h1)
        .arg(a1);
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

pub(super) fn relu_backward(
    stream: &Arc<CudaStream>,
    k: &CudaFunction,
    d: &mut CudaSlice<f32>,
    a: &CudaSlice<f32>,
    rows: usize,
    width: usize,
) -> Result<()> {
    let (rows64, w32) = (rows as u64, width as u32);
    let mut b = stream.launch_builder(k);
    b.arg(d).arg(a).arg(&rows64).arg(&w32);
    // SAFETY: qnet_relu_backward(float* d [rows x width], const float* a [rows x (width + 1)],
    // u64, u32): d holds B x width, a holds NETS x 2B x (width + 1) and rows = B.
    unsafe { b.launch(grid_stride(rows * width)) }?;
    Ok(())
}
