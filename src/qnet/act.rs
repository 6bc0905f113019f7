//! `qnet_act` (cuda/qnet_act.cu): the online network's acting forward in one launch, from
//! the states to Q, every activation in shared memory, its products in 3xTF32 on the tensor
//! cores. This module describes the network to the kernel (`ActNet`: each layer's weight
//! blocks, in the flat parameters for the trunk and in the online dense head matrix for the
//! heads' outputs, and the shared memory it needs), picks the rows per block, and launches
//! it. Spec: the same as the layer-by-layer acting path (tallyho_oracle::qnet
//! `forward`, `head_q`), within `tolerance::gemm_chain_3xtf32`.

use super::{spec, BranchShape, Dims, QNetConfig, MAX_BRANCHES};
use crate::error::{Error, Result};
use crate::runtime::{entry, Entry, Gpu, Programmatic};
use cudarc::driver::sys::{CUdevice_attribute, CUfunction_attribute};
use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, CudaView, LaunchConfig};
use std::sync::Arc;

/// Threads of a block (`ACT_THREADS`: 2 groups of 8 warps).
const THREADS: usize = 512;
/// Columns of a warp in a pass (`ACT_WARP_COLS`): segments are padded to a multiple.
const WARP_COLS: usize = 32;
/// Padded columns of a pass (`ACT_COLS`).
const COLS: usize = 8 * WARP_COLS;
/// Input rows per staged slice (`ACT_KT`).
const KT: usize = 32;
/// Floats of a staged row (`ACT_STAGE_LD`).
const STAGE_LD: usize = COLS + 8;
/// Stages the slices stream through (`ACT_STAGES`): one in flight while one is computed.
const STAGES: usize = 2;
/// Segments a layer may have (`ACT_SEGMENTS`): the value head and one per branch.
const SEGMENTS: usize = MAX_BRANCHES + 1;

/// The rows per block of the kernel's entry points, `qnet_act_rows{R}` and
/// `qnet_act_aligned_rows{R}` (R = 16 MT: MT row tiles of mma.m16n8k8 a warp).
pub(super) const BLOCK_ROWS: [usize; 2] = [16, 32];

/// Floats of an activation buffer holding `inputs` inputs of `rows` rows (act_at: blocks of
/// 8 inputs, each `rows x 8` floats as the tiles' A fragments).
fn activation_floats(rows: usize, inputs: usize) -> usize {
    rows * inputs.next_multiple_of(8)
}

/// `struct ActSegment` of cuda/qnet_act.cu: input rows `[x_off, x_off + fan_in)` into `width`
/// staged columns at padded column `pcol0`, staged column j being output column `col0 + j`
/// (the first `lead` not written: another head's, staged so the copies start aligned), weights
/// at `w + k ld + j` of the layer's source (the flat parameters, or the dense head matrix for
/// the heads' outputs), biases at `bias + j` of it (added after the sum, every layer). `x_off` is a
/// multiple of 8 (the kernel's input blocks).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct ActSegment {
    x_off: u32,
    fan_in: u32,
    col0: u32,
    lead: u32,
    width: u32,
    pcol0: u32,
    w: u32,
    ld: u32,
    bias: u32,
}

/// `struct ActLayer`: the segments, the padded width, the slices per pass, and whether every
/// segment's `w` and `ld` are multiples of 4 (16-byte copies; else 4-byte ones).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct ActLayer {
    count: u32,
    pwidth: u32,
    slices: u32,
    vec4: u32,
    seg: [ActSegment; SEGMENTS],
}

/// `struct ActNet`: the four layers (first, trunk 2, heads' hidden, heads' outputs), the
/// state width and row stride of the input, and the floats of the two activation buffers.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct ActNet {
    layer: [ActLayer; 4],
    s: u32,
    x_ld: u32,
    p_floats: u32,
    q_floats: u32,
}

// SAFETY: plain old data of u32 fields, laid out as the kernel's structs (repr(C)).
unsafe impl cudarc::driver::DeviceRepr for ActNet {}

// The sizes of `struct ActSegment`, `ActLayer` and `ActNet` (cuda/common/qnet_act.cuh
// static_asserts the same).
const _: () = assert!(std::mem::size_of::<ActSegment>() == 36);
const _: () = assert!(std::mem::size_of::<ActLayer>() == 340);
const _: () = assert!(std::mem::size_of::<ActNet>() == 1376);

impl ActLayer {
    fn segments(&self) -> &[ActSegment] {
        &self.seg[..self.count as usize]
    }

    #[cfg(test)]
    fn passes(&self) -> usize {
        (self.pwidth as usize).div_ceil(COLS)
    }

    /// The input rows its slices read: each segment's x_off plus its slices.
    fn span(&self) -> usize {
        let rows = self.slices as usize * KT;
        self.segments()
            .iter()
            .map(|s| s.x_off as usize + rows)
            .max()
            .unwrap_or(0)
    }

    /// The segment of padded column `p` (the last that starts at or before it), as the
    /// kernel's act_segment.
    #[cfg(test)]
    fn segment_of(&self, p: usize) -> ActSegment {
        *self
            .segments()
            .iter()
            .rev()
            .find(|s| p >= s.pcol0 as usize)
            .unwrap_or(&self.seg[0])
    }
}

/// The floats of each layer's source as QNet::act passes them: the flat parameters (trunk)
/// and the `(H + 1) x O` dense head matrix (heads' outputs).
fn source_lens(d: Dims) -> [usize; 4] {
    [d.params, d.params, d.params, (d.hw + 1) * d.ow]
}

/// The network's four layers as qnet_act reads them: the trunk from the flat parameters, the
/// heads' outputs from the dense head matrix (`[(H + 1) x O]`, qnet_head_matrix.cu: head h's block
/// at its hidden rows and output columns, the biases in row H), each head's staging starting
/// at the multiple of 8 at or below its first hidden row and of 4 at or below its first
/// column (the rows and columns before are another head's: zero in this block's).
fn layers_of(
    cfg: &QNetConfig,
    d: Dims,
    heads: &[(usize, usize, usize, usize)],
) -> Result<[ActLayer; 4]> {
    if heads.len() > SEGMENTS {
        return Err(Error::Shape(format!(
            "{} heads: qnet_act takes at most {SEGMENTS}",
            heads.len()
        )));
    }
    let at = |name: &str| {
        spec::tensor(cfg, name)
            .map(|t| t.offset)
            .ok_or_else(|| Error::Shape(format!("the Q-network layout has no tensor {name}")))
    };
    // A segment (x_off, fan_in, col0, lead, width, w, ld, bias).
    type Seg = (usize, usize, usize, usize, usize, usize, usize, usize);
    // A trunk layer: [w; b] ((fan_in + 1) x width, row-major) at `w`, its last row the biases.
    let trunk = |w: usize, fan_in: usize, width: usize| -> Vec<Seg> {
        vec![(0, fan_in, 0, 0, width, w, width, w + fan_in * width)]
    };
    let head_segments = heads
        .iter()
        .map(|&(row0, fan_in, col0, width)| {
            let (x0, lead) = (row0 - row0 % 8, col0 % 4);
            let c0 = col0 - lead;
            (
                x0,
                fan_in + row0 - x0,
                c0,
                lead,
                lead + width,
                x0 * d.ow + c0,
                d.ow,
                d.hw * d.ow + c0,
            )
        })
        .collect();
    let described = [
        trunk(at("w1")?, d.s, d.h1),
        trunk(at("w2")?, d.h1, d.h2),
        trunk(at("wh")?, d.h2, d.hw),
        head_segments,
    ];
    let mut layers = [ActLayer::default(); 4];
    for (layer, segments) in layers.iter_mut().zip(&described) {
        let (mut pcol, mut kmax) = (0, 0);
        layer.count = segments.len() as u32;
        for (s, &(x_off, fan_in, col0, lead, width, w, ld, bias)) in
            layer.seg.iter_mut().zip(segments)
        {
            *s = ActSegment {
                x_off: u32_of(x_off)?,
                fan_in: u32_of(fan_in)?,
                col0: u32_of(col0)?,
                lead: u32_of(lead)?,
                width: u32_of(width)?,
                pcol0: u32_of(pcol)?,
                w: u32_of(w)?,
                ld: u32_of(ld)?,
                bias: u32_of(bias)?,
            };
            pcol += width.next_multiple_of(WARP_COLS);
            kmax = kmax.max(fan_in);
        }
        layer.pwidth = u32_of(pcol)?;
        layer.slices = u32_of(kmax.div_ceil(KT))?;
        layer.vec4 = u32::from(segments.iter().all(|s| s.5 % 4 == 0 && s.6 % 4 == 0));
    }
    Ok(layers)
}

/// Whether `layers` are aligned for qnet_act's aligned feed (cuda/qnet_act.cu,
/// qnet_act_aligned_rows{R}): every segment's staged rows start 16-byte aligned (w and ld
/// multiples of 4, from the start of their source) and its last row's width rounded up to 4
/// lies inside its source (`sources[l]` floats for layer l: the flat parameters for the
/// trunk, the dense head matrix for the heads' outputs), so every copy is a whole 16 bytes.
fn aligned_fits(layers: &[ActLayer; 4], sources: [usize; 4]) -> bool {
    layers.iter().zip(sources).all(|(layer, len)| {
        layer.segments().iter().all(|s| {
            let (w, ld, fan_in) = (s.w as usize, s.ld as usize, s.fan_in as usize);
            w % 4 == 0
                && ld % 4 == 0
                && fan_in > 0
                && w + (fan_in - 1) * ld + (s.width as usize).next_multiple_of(4) <= len
        })
    })
}

fn u32_of(i: usize) -> Result<u32> {
    u32::try_from(i).ok().ok_or_else(|| {
        Error::Shape(format!(
            "{i}: qnet_act indexes its parameters and columns below 2^32"
        ))
    })
}

/// The fused forward for one rows-per-block choice: its network description and its
/// shared memory.
#[derive(Clone, Copy, Debug)]
struct Plan {
    rows: usize,
    net: ActNet,
    smem: usize,
}

impl Plan {
    /// P and Q as the top of cuda/common/qnet_act.cuh lays them out: the activations (act_at;
    /// each layer's input as far as its slices read), the staged head rows and their means.
    fn of(d: Dims, layers: &[ActLayer; 4], rows: usize) -> Plan {
        let act = |inputs: usize| activation_floats(rows, inputs);
        let staged = rows * d.ow;
        let means = rows * d.kk * d.na;
        let p = [
            act(layers[0].span()),
            act(d.h2),
            act(layers[2].span()),
            staged,
        ];
        let q = [
            act(d.h1),
            act(layers[1].span()),
            act(d.hw),
            act(layers[3].span()),
            means,
        ];
        let floats = |v: &[usize]| v.iter().copied().max().unwrap_or(0).next_multiple_of(4);
        let (p_floats, q_floats) = (floats(&p), floats(&q));
        let smem = 4 * (p_floats + q_floats + STAGES * KT * STAGE_LD);
        let net = ActNet {
            layer: *layers,
            s: d.s as u32,
            x_ld: (d.s + 1) as u32,
            p_floats: p_floats as u32,
            q_floats: q_floats as u32,
        };
        Plan { rows, net, smem }
    }
}

/// The entry points of a kernel built on the fused forward, one per feed and rows per
/// block (`{file}_{aligned_,}rows{16,32}`): `qnet_act` and `experience_step`.
pub struct ForwardEntries {
    pub rows16: Entry,
    pub rows32: Entry,
    pub aligned_rows16: Entry,
    pub aligned_rows32: Entry,
}

impl ForwardEntries {
    fn of(&self, aligned: bool, rows: usize) -> Result<Entry> {
        match (aligned, rows) {
            (false, 16) => Ok(self.rows16),
            (false, 32) => Ok(self.rows32),
            (true, 16) => Ok(self.aligned_rows16),
            (true, 32) => Ok(self.aligned_rows32),
            _ => Err(Error::Shape(format!(
                "{rows} rows per block: the fused forward's entry points take {BLOCK_ROWS:?}"
            ))),
        }
    }
}

/// `qnet_act`'s entry points.
const QNET_ACT: ForwardEntries = ForwardEntries {
    rows16: entry::qnet_act::QNET_ACT_ROWS16,
    rows32: entry::qnet_act::QNET_ACT_ROWS32,
    aligned_rows16: entry::qnet_act::QNET_ACT_ALIGNED_ROWS16,
    aligned_rows32: entry::qnet_act::QNET_ACT_ALIGNED_ROWS32,
};

/// The fused acting forward of one network: the entry points whose shared memory fits the
/// device, and the device's multiprocessor count (which the rows per block follow).
pub(super) struct Fused {
    /// The entry point and plan of each rows-per-block that fits, fewest rows first.
    plans: Vec<(CudaFunction, Plan)>,
    /// The entry points are the aligned feed's ([`aligned_fits`]).
    aligned: bool,
    sms: usize,
    /// Verification: force this many rows per block (one of BLOCK_ROWS that fits).
    forced: Option<usize>,
}

impl Fused {
    /// The plans for the network of `d` that fit the device's shared memory (none: the
    /// network is too wide for one block, and acting runs layer by layer).
    pub(super) fn new(
        gpu: &Gpu,
        cfg: &QNetConfig,
        d: Dims,
        heads: &[(usize, usize, usize, usize)],
    ) -> Result<Fused> {
        let optin = gpu
            .ctx
            .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?
            as usize;
        let sms = gpu
            .ctx
            .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?
            .max(1) as usize;
        let layers = layers_of(cfg, d, heads)?;
        let aligned = aligned_fits(&layers, source_lens(d));
        let mut plans = Vec::new();
        for rows in BLOCK_ROWS {
            let plan = Plan::of(d, &layers, rows);
            if plan.smem > optin {
                break;
            }
            let f = gpu.function(QNET_ACT.of(aligned, rows)?)?;
            set_smem(&f, plan.smem)?;
            plans.push((f, plan));
        }
        Ok(Fused {
            plans,
            aligned,
            sms,
            forced: None,
        })
    }

    /// Whether the network is staged by the aligned feed (whole 16-byte copies).
    pub(super) fn aligned(&self) -> bool {
        self.aligned
    }

    /// The rows per block that fit, fewest first.
    pub(super) fn fitting(&self) -> Vec<usize> {
        self.plans.iter().map(|(_, p)| p.rows).collect()
    }

    /// Verification: force `rows` rows per block, or (None) let the rule pick.
    pub(super) fn force_rows(&mut self, rows: Option<usize>) -> Result<()> {
        if let Some(r) = rows {
            if !self.plans.iter().any(|(_, p)| p.rows == r) {
                return Err(Error::Shape(format!(
                    "{r} rows per qnet_act block: this network and device take one of {:?}",
                    self.fitting()
                )));
            }
        }
        self.forced = rows;
        Ok(())
    }

    /// The rows per block for `n` rows: the most rows a block fits, if their blocks occupy at
    /// least 3/4 of the multiprocessors; else None (layer by layer). Fewer rows a block stream
    /// the same weights for fewer rows, and a partly filled GPU leaves the layer-by-layer
    /// products ahead (docs/BENCHMARKS.md: N = 256 and 4096 on the H200).
    fn pick(&self, n: usize) -> Option<&(CudaFunction, Plan)> {
        if let Some(r) = self.forced {
            return self.plans.iter().find(|(_, p)| p.rows == r);
        }
        let enough = (3 * self.sms).div_ceil(4);
        self.plans
            .last()
            .filter(|(_, p)| n.div_ceil(p.rows) >= enough)
    }

    /// The rows per block that `n` rows would run with (None: layer by layer).
    pub(super) fn block_rows(&self, n: usize) -> Option<usize> {
        self.pick(n).map(|(_, p)| p.rows)
    }
}

/// Raise `f`'s dynamic shared memory limit to `smem` bytes (a plan's).
fn set_smem(f: &CudaFunction, smem: usize) -> Result<()> {
    Ok(f.set_attribute(
        CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
        smem as i32,
    )?)
}

/// One kernel built on the fused forward (`experience_step_*`, cuda/experience_step.cu):
/// its entry point for each rows-per-block that fits, loaded and given the plan's shared
/// memory by [`crate::qnet::QNet::load_forward_kernel`].
pub struct ForwardKernel {
    entries: Vec<(usize, CudaFunction)>,
}

/// `qnet_act`'s inputs and outputs: the states `x` (`rows x (S + 1)`, as state_gather writes
/// them), and y (head outputs, if wanted) and q.
pub(super) struct ActIo<'a> {
    pub x: &'a CudaSlice<f32>,
    pub rows: usize,
    pub y: Option<&'a mut CudaSlice<f32>>,
    pub q: &'a mut CudaSlice<f32>,
}

/// The head's constants: the branch shape, atoms and support.
pub(super) struct ActHead<'a> {
    pub shape: &'a BranchShape,
    pub na: u32,
    pub v_min: f32,
    pub v_max: f32,
}

/// The online network as qnet_act reads it: its flat parameters and its dense head matrix.
pub(super) struct ActParams<'a> {
    pub params: CudaView<'a, f32>,
    pub heads: CudaView<'a, f32>,
}

/// The online network and the launch shape of one fused forward over `rows` rows: what a
/// kernel built on the forward (`qnet_act`, `experience_step`) takes after its rows' inputs.
pub struct ForwardLaunch<'a> {
    online: ActParams<'a>,
    head: ActHead<'a>,
    plan: &'a Plan,
    cfg: LaunchConfig,
}

impl<'a> ForwardLaunch<'a> {
    /// The grid: `ceil(rows / R)` blocks of THREADS, the plan's shared memory.
    pub fn config(&self) -> LaunchConfig {
        self.cfg
    }

    /// Push the network's arguments, in the kernels' signature order after the rows'
    /// inputs: the online parameters and dense head matrix, ActNet and BranchShape by value,
    /// u32 na, f32 v_min, v_max.
    pub fn push_network(&'a self, l: &mut Programmatic<'a>) {
        l.input(&self.online.params).input(&self.online.heads);
        l.value(&self.plan.net)
            .value(self.head.shape)
            .value(&self.head.na)
            .value(&self.head.v_min)
            .value(&self.head.v_max);
    }

    /// The entry point of `kernel` for this launch's rows per block.
    pub fn entry<'k>(&self, kernel: &'k ForwardKernel) -> Result<&'k CudaFunction> {
        kernel
            .entries
            .iter()
            .find(|(rows, _)| *rows == self.plan.rows)
            .map(|(_, f)| f)
            .ok_or_else(|| {
                Error::Shape(format!(
                    "no entry point for {} rows per block: load the kernel from this network",
                    self.plan.rows
                ))
            })
    }
}

impl Fused {
    /// The forward launch for `rows` rows and qnet_act's entry point for it (None: acting
    /// on that many rows runs layer by layer).
    pub(super) fn launch_of<'a>(
        &'a self,
        rows: usize,
        online: ActParams<'a>,
        head: ActHead<'a>,
    ) -> Result<Option<(&'a CudaFunction, ForwardLaunch<'a>)>> {
        let Some((f, plan)) = self.pick(rows) else {
            return Ok(None);
        };
        let blocks = u32::try_from(rows.div_ceil(plan.rows))
            .map_err(|_| Error::Shape(format!("acting on {rows} rows: too many for one grid")))?;
        let cfg = LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (THREADS as u32, 1, 1),
            shared_mem_bytes: plan.smem as u32,
        };
        Ok(Some((
            f,
            ForwardLaunch {
                online,
                head,
                plan,
                cfg,
            },
        )))
    }

    /// Load `kernel`'s entry point for every plan that fits, each with its plan's shared
    /// memory.
    pub(super) fn load_kernel(&self, gpu: &Gpu, kernel: &ForwardEntries) -> Result<ForwardKernel> {
        let mut entries = Vec::with_capacity(self.plans.len());
        for (_, plan) in &self.plans {
            let f = gpu.function(kernel.of(self.aligned, plan.rows)?)?;
            set_smem(&f, plan.smem)?;
            entries.push((plan.rows, f));
        }
        Ok(ForwardKernel { entries })
    }
}

/// Launch `qnet_act` (entry point `f`) on `io.rows` rows by `launch`.
pub(super) fn launch(
    stream: &Arc<CudaStream>,
    f: &CudaFunction,
    launch: &ForwardLaunch,
    io: ActIo,
) -> Result<()> {
    let rows64 = io.rows as u64;
    let mut l = Programmatic::new(stream, f);
    l.input(io.x).value(&rows64);
    launch.push_network(&mut l);
    match io.y {
        Some(y) => l.output(y),
        None => l.null(),
    };
    l.output(io.q);
    // SAFETY: follows qnet_act_{aligned_,}rows{R}'s signature (x [rows x (S + 1)], u64 rows, the
    // network's arguments of push_network, y [rows x ow] or null, q [rows x A]): the caller
    // (QNet::act) checked x's length, passes the online parameters and its (H + 1) x O head
    // matrix (whose layouts layers_of read, so every segment's weights and biases lie inside
    // them; the aligned entry points only where aligned_fits found every 16-byte copy inside
    // those lengths) and its Acting's y and q (rows x ow, rows x qw); the function's dynamic
    // shared memory limit was raised to plan.smem in Fused::new; it calls
    // grid_wait_for_prior before it touches global memory (launched programmatically: its
    // launch and shared-memory set-up overlap the tail of the kernel ahead).
    unsafe { l.launch(launch.config()) }
}

#[cfg(test)]
mod tests;
