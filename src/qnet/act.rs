//! `qnet_act` (cuda/qnet_act.cu): the online network's acting forward in one launch, from
//! the states to Q, every activation in shared memory, its products in 3xTF32 on the tensor
//! cores. This module describes the network to the kernel (`ActNet`: each layer's weight
//! blocks, in the flat parameters for the trunk and in the online dense head matrix for the
//! heads' outputs, and the shared memory it needs), picks the rows per block, and launches
//! it. Spec: the same as the layer-by-layer acting path (tallyho_oracle::qnet
//! `forward`, `head_q`), within `tolerance::gemm_chain_3xtf32`.

use super::{spec, BranchShape, Dims, QNetConfig, MAX_BRANCHES};
use crate::error::{Error, Result};
use crate::runtime::Gpu;
use cudarc::driver::sys::{CUdevice_attribute, CUfunction_attribute};
use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, CudaView, LaunchConfig, PushKernelArg};
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
/// Floats of padding after the staged head rows and after their means (a head slot past NA
/// reads at most 31 values past its row).
const HEAD_PAD: usize = 32;
/// No ones row (`ACT_NO_ONES`).
const NO_ONES: u32 = u32::MAX;

/// The rows per block of the kernel's entry points, `qnet_act_rows{R}` (R = 16 MT: MT row
/// tiles of mma.m16n8k8 a warp).
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
/// the heads' outputs), biases (the head-output layer) at `bias + j` of it. `x_off` is a
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

/// `struct ActLayer`: the segments, the padded width, the slices per pass, the output row set
/// to ones (the next trunk layer's bias row multiplies it; NO_ONES: none), and whether every
/// segment's `w` and `ld` are multiples of 4 (16-byte copies; else 4-byte ones).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct ActLayer {
    count: u32,
    pwidth: u32,
    slices: u32,
    ones: u32,
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
        self.segments().iter().map(|s| s.x_off as usize + rows).max().unwrap_or(0)
    }

    /// The segment of padded column `p` (the last that starts at or before it), as the
    /// kernel's act_segment.
    #[cfg(test)]
    fn segment_of(&self, p: usize) -> ActSegment {
        *self.segments().iter().rev().find(|s| p >= s.pcol0 as usize).unwrap_or(&self.seg[0])
    }
}

/// The network's four layers as qnet_act reads them: the trunk from the flat parameters, the
/// heads' outputs from the dense head matrix (`[(H + 1) x O]`, qnet_heads.cu: head h's block
/// at its hidden rows and output columns, the biases in row H), each head's staging starting
/// at the multiple of 8 at or below its first hidden row and of 4 at or below its first
/// column (the rows and columns before are another head's: zero in this block's).
fn layers_of(cfg: &QNetConfig, d: Dims, heads: &[(usize, usize, usize, usize)]) -> Result<[ActLayer; 4]> {
    if heads.len() > SEGMENTS {
        return Err(Error::Usage(format!("{} heads: qnet_act takes at most {SEGMENTS}", heads.len())));
    }
    let at = |name: &str| {
        spec::tensor(cfg, name)
            .map(|t| t.offset)
            .ok_or_else(|| Error::Usage(format!("the Q-network layout has no tensor {name}")))
    };
    // A segment (x_off, fan_in, col0, lead, width, w, ld, bias).
    type Seg = (usize, usize, usize, usize, usize, usize, usize, usize);
    // A trunk layer: [w; b] ((fan_in + 1) x width, row-major) at `w`, its last row against
    // the input's ones row.
    let trunk = |w: usize, fan_in: usize, width: usize| -> Vec<Seg> { vec![(0, fan_in + 1, 0, 0, width, w, width, 0)] };
    let head_segments = heads
        .iter()
        .map(|&(row0, fan_in, col0, width)| {
            let (x0, lead) = (row0 - row0 % 8, col0 % 4);
            let c0 = col0 - lead;
            (x0, fan_in + row0 - x0, c0, lead, lead + width, x0 * d.ow + c0, d.ow, d.hw * d.ow + c0)
        })
        .collect();
    let described = [trunk(at("w1")?, d.s, d.h1), trunk(at("w2")?, d.h1, d.h2), trunk(at("wh")?, d.h2, d.hw), head_segments];
    let ones = [u32_of(d.h1)?, u32_of(d.h2)?];
    let mut layers = [ActLayer::default(); 4];
    for (l, (layer, segments)) in layers.iter_mut().zip(&described).enumerate() {
        let (mut pcol, mut kmax) = (0, 0);
        layer.count = segments.len() as u32;
        for (s, &(x_off, fan_in, col0, lead, width, w, ld, bias)) in layer.seg.iter_mut().zip(segments) {
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
        layer.ones = ones.get(l).copied().unwrap_or(NO_ONES);
        layer.vec4 = u32::from(segments.iter().all(|s| s.5 % 4 == 0 && s.6 % 4 == 0));
    }
    Ok(layers)
}

fn u32_of(i: usize) -> Result<u32> {
    u32::try_from(i).ok().filter(|&v| v != NO_ONES).ok_or_else(|| Error::Usage(format!("{i}: qnet_act indexes its parameters and columns below 2^32 - 1")))
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
    /// P and Q as the top of cuda/qnet_act.cu lays them out: the activations (act_at; each
    /// trunk output with its ones row, each layer's input as far as its slices read), the
    /// staged head rows and their means.
    fn of(d: Dims, layers: &[ActLayer; 4], rows: usize) -> Plan {
        let act = |inputs: usize| activation_floats(rows, inputs);
        let staged = rows * d.ow + HEAD_PAD;
        let means = rows * d.kk * d.na + HEAD_PAD;
        let p = [act(layers[0].span()), act(d.h2 + 1), act(layers[2].span()), staged];
        let q = [act(d.h1 + 1), act(layers[1].span()), act(d.hw), act(layers[3].span()), means];
        let floats = |v: &[usize]| v.iter().copied().max().unwrap_or(0).next_multiple_of(4);
        let (p_floats, q_floats) = (floats(&p), floats(&q));
        let smem = 4 * (p_floats + q_floats + STAGES * KT * STAGE_LD);
        let net = ActNet { layer: *layers, s: d.s as u32, x_ld: (d.s + 1) as u32, p_floats: p_floats as u32, q_floats: q_floats as u32 };
        Plan { rows, net, smem }
    }
}

/// The fused acting forward of one network: the entry points whose shared memory fits the
/// device, and the device's multiprocessor count (which the rows per block follow).
pub(super) struct Fused {
    /// (entry point, plan) for each rows-per-block that fits, fewest rows first.
    plans: Vec<(CudaFunction, Plan)>,
    sms: usize,
    /// Benchmarking: force this many rows per block (one of BLOCK_ROWS that fits).
    forced: Option<usize>,
}

impl Fused {
    /// The plans for the network of `d` that fit the device's shared memory (none: the
    /// network is too wide for one block, and acting runs layer by layer).
    pub(super) fn new(gpu: &Gpu, cfg: &QNetConfig, d: Dims, heads: &[(usize, usize, usize, usize)]) -> Result<Fused> {
        let optin = gpu.ctx.attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)? as usize;
        let sms = gpu.ctx.attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?.max(1) as usize;
        let layers = layers_of(cfg, d, heads)?;
        let mut plans = Vec::new();
        for rows in BLOCK_ROWS {
            let plan = Plan::of(d, &layers, rows);
            if plan.smem > optin {
                break;
            }
            let f = gpu.function("qnet_act", &format!("qnet_act_rows{rows}"))?;
            f.set_attribute(CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, plan.smem as i32)?;
            plans.push((f, plan));
        }
        Ok(Fused { plans, sms, forced: None })
    }

    /// The rows per block that fit, fewest first.
    pub(super) fn fitting(&self) -> Vec<usize> {
        self.plans.iter().map(|(_, p)| p.rows).collect()
    }

    /// Benchmarking: force `rows` rows per block, or (None) let the rule pick.
    pub(super) fn force_rows(&mut self, rows: Option<usize>) -> Result<()> {
        if let Some(r) = rows {
            if !self.plans.iter().any(|(_, p)| p.rows == r) {
                return Err(Error::Usage(format!(
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
        self.plans.last().filter(|(_, p)| n.div_ceil(p.rows) >= enough)
    }

    /// The rows per block that `n` rows would run with (None: layer by layer).
    pub(super) fn block_rows(&self, n: usize) -> Option<usize> {
        self.pick(n).map(|(_, p)| p.rows)
    }
}

/// `qnet_act`'s inputs and outputs: the states `x` (`rows x (S + 1)`, as state_gather writes
/// them), and y (head outputs, if wanted) and q.
pub(super) struct ActIo<'a> {
    pub x: &'a CudaSlice<f32>,
    pub rows: usize,
    pub y: Option<&'a mut CudaSlice<f32>>,
    pub q: &'a mut CudaSlice<f32>,
}

/// The head's constants: the branch shape, atoms, support and lanes per (row, action).
pub(super) struct ActHead<'a> {
    pub shape: &'a BranchShape,
    pub na: u32,
    pub v_min: f32,
    pub v_max: f32,
    pub lpa: u32,
}

/// The online network as qnet_act reads it: its flat parameters and its dense head matrix.
pub(super) struct ActParams<'a> {
    pub params: CudaView<'a, f32>,
    pub heads: CudaView<'a, f32>,
}

/// Launch `qnet_act` on `io.rows` rows (requires `fused.available()`).
pub(super) fn launch(stream: &Arc<CudaStream>, fused: &Fused, online: ActParams, head: ActHead, io: ActIo) -> Result<()> {
    let (f, plan) = fused
        .pick(io.rows)
        .ok_or_else(|| Error::Usage("qnet_act: the network does not fit one block's shared memory".into()))?;
    let blocks = u32::try_from(io.rows.div_ceil(plan.rows))
        .map_err(|_| Error::Usage(format!("acting on {} rows: too many for one grid", io.rows)))?;
    let (rows64, null) = (io.rows as u64, 0u64);
    let mut l = stream.launch_builder(f);
    l.arg(io.x).arg(&rows64).arg(&online.params).arg(&online.heads);
    l.arg(&plan.net).arg(head.shape).arg(&head.na).arg(&head.v_min).arg(&head.v_max).arg(&head.lpa);
    match io.y {
        Some(y) => l.arg(y),
        None => l.arg(&null),
    };
    l.arg(io.q);
    let cfg = LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (THREADS as u32, 1, 1), shared_mem_bytes: plan.smem as u32 };
    // SAFETY: follows qnet_act_rows{R}'s signature (x [rows x (S + 1)], u64 rows, the online
    // parameters and dense head matrix, ActNet and BranchShape by value, u32 na, f32 v_min,
    // v_max, u32 lpa, y [rows x ow] or null, q [rows x A]): the caller (QNet::act) checked
    // x's length, passes the online parameters and its (H + 1) x O head matrix (whose layouts
    // layers_of read, so every segment's weights and biases lie inside them) and its Acting's
    // y and q (rows x ow, rows x qw); the function's dynamic shared memory limit was raised to
    // plan.smem in Fused::new.
    unsafe { l.launch(cfg) }?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qnet::{heads_index, heads_of};
    use tallyho_oracle::qnet as spec;

    /// The staged column of padded column `pc` that qnet_act writes out (past a segment's
    /// lead, inside its width): (segment, staged column).
    fn written(layer: &ActLayer, pc: usize) -> Option<(ActSegment, usize)> {
        let seg = layer.segment_of(pc);
        let local = pc.checked_sub(seg.pcol0 as usize)?;
        (pc < layer.pwidth as usize && local >= seg.lead as usize && local < seg.width as usize).then_some((seg, local))
    }

    /// The weight of written padded column `pc` at input row `k` as qnet_act stages it: its
    /// index in the layer's source, None for a zero-filled copy.
    fn staged_index(layer: &ActLayer, pc: usize, k: usize) -> Option<usize> {
        let (seg, local) = written(layer, pc)?;
        (k < seg.fan_in as usize).then(|| seg.w as usize + k * seg.ld as usize + local)
    }

    /// The layers' sources as qnet_act reads them: the flat parameters (trunk) and the dense
    /// head matrix qnet_heads_scatter builds from them (heads' outputs), and for each dense
    /// position the parameter it holds.
    fn sources(cfg: &QNetConfig, params: &[f32]) -> (Vec<f32>, Vec<Option<usize>>) {
        let d = Dims::of(cfg, 1);
        let wv2 = spec::tensor(cfg, "wv2").unwrap().offset;
        let (mut dense, mut owner) = (vec![0.0; (d.hw + 1) * d.ow], vec![None; (d.hw + 1) * d.ow]);
        for (e, &pos) in heads_index(cfg).iter().enumerate() {
            dense[pos as usize] = params[wv2 + e];
            owner[pos as usize] = Some(wv2 + e);
        }
        (dense, owner)
    }

    /// The forward as qnet_act computes it from its sources (its segments, slices, zero
    /// fills, leads, ones rows and head biases), in f64: the head-output rows with their bias.
    fn staged_forward(cfg: &QNetConfig, params: &[f32], states: &[f32]) -> Vec<f64> {
        let d = Dims::of(cfg, 1);
        let layers = layers_of(cfg, d, &heads_of(cfg)).unwrap();
        let widths = [d.h1, d.h2, d.hw, d.ow];
        let (dense, _) = sources(cfg, params);
        let mut act: Vec<Vec<f64>> = states.chunks_exact(d.s).map(|r| r.iter().map(|&v| f64::from(v)).chain([1.0]).collect()).collect();
        for (l, (layer, &width)) in layers.iter().zip(&widths).enumerate() {
            let src = |i: usize| f64::from(if l == 3 { dense[i] } else { params[i] });
            act = act
                .iter()
                .map(|x| {
                    let mut out = vec![0.0; width];
                    for pc in 0..layer.passes() * COLS {
                        let Some((seg, local)) = written(layer, pc) else { continue };
                        let mut sum = if l == 3 { src(seg.bias as usize + local) } else { 0.0 };
                        for k in 0..layer.slices as usize * KT {
                            // Past the layer's input: a finite value the zero weight cancels.
                            let xin = x.get(seg.x_off as usize + k).copied().unwrap_or(7.0);
                            sum += xin * staged_index(layer, pc, k).map_or(0.0, src);
                        }
                        out[seg.col0 as usize + local] = if l < 3 { sum.max(0.0) } else { sum };
                    }
                    if layer.ones != NO_ONES {
                        assert_eq!(layer.ones as usize, width, "the ones row follows the output");
                        out.push(1.0);
                    }
                    out
                })
                .collect();
        }
        act.concat()
    }

    #[test]
    fn qnet_act_stages_every_parameter_once_where_the_oracle_uses_it() {
        let small = QNetConfig { state_dim: 6, h1: 16, h2: 12, value_hidden: 8, adv_hidden: 6, atoms: 11, ..QNetConfig::default() };
        let odd = QNetConfig { state_dim: 31, h1: 37, h2: 300, value_hidden: 13, adv_hidden: 29, branches: vec![4, 1], atoms: 7, ..QNetConfig::default() };
        for cfg in [QNetConfig::default(), small, odd] {
            let params = spec::init_params(&cfg);
            let d = Dims::of(&cfg, 1);
            let layers = layers_of(&cfg, d, &heads_of(&cfg)).unwrap();
            let (_, owner) = sources(&cfg, &params);
            // The parameter a staged weight holds: itself (trunk), or the dense position's
            // (heads' outputs; None off the blocks, where the matrix holds zeros: the rows
            // staged before a head's first, for alignment).
            let param = |l: usize, i: usize| if l == 3 { owner[i] } else { Some(i) };
            let mut seen = vec![0u32; params.len()];
            for (l, layer) in layers.iter().enumerate() {
                for pc in 0..layer.passes() * COLS {
                    for k in 0..layer.slices as usize * KT {
                        if let Some(p) = staged_index(layer, pc, k).and_then(|i| param(l, i)) {
                            seen[p] += 1;
                        }
                    }
                    if let (3, Some((seg, local))) = (l, written(layer, pc)) {
                        seen[param(l, seg.bias as usize + local).expect("the bias row is on the blocks")] += 1;
                    }
                }
                // A segment's warps never straddle two segments, its inputs start a block of
                // 8, and 16-byte copies start aligned.
                assert!(layer.segments().iter().all(|s| s.pcol0 as usize % WARP_COLS == 0 && s.x_off % 8 == 0), "{cfg:?}");
                assert!(layer.vec4 == 0 || layer.segments().iter().all(|s| s.w % 4 == 0 && s.ld % 4 == 0), "{cfg:?}");
            }
            assert!(seen.iter().all(|&n| n == 1), "{cfg:?}: a parameter staged {:?} times", seen.iter().find(|&&n| n != 1));
            let states: Vec<f32> = (0..3 * cfg.state_dim).map(|i| ((i * 7919) % 13) as f32 / 6.0 - 1.0).collect();
            let want = spec::head_rows(&cfg, &spec::forward(&cfg, &params, &states));
            let got = staged_forward(&cfg, &params, &states);
            assert_eq!(got.len(), want.len());
            for (g, w) in got.iter().zip(&want) {
                assert!((g - w).abs() <= 1e-12 * (1.0 + w.abs()), "{cfg:?}: {g} vs {w}");
            }
        }
    }

    #[test]
    fn the_default_network_fits_32_row_blocks_in_the_h200s_shared_memory() {
        let cfg = QNetConfig::default();
        let d = Dims::of(&cfg, 1);
        let layers = layers_of(&cfg, d, &heads_of(&cfg)).unwrap();
        // 227 KiB: the opt-in shared memory per block of sm_90.
        let smem = Plan::of(d, &layers, 32).smem;
        assert!(smem <= 227 * 1024, "{smem} bytes");
    }

    #[test]
    fn the_default_network_stages_every_layer_with_16_byte_copies() {
        let cfg = QNetConfig::default();
        let d = Dims::of(&cfg, 1);
        let layers = layers_of(&cfg, d, &heads_of(&cfg)).unwrap();
        for (l, layer) in layers.iter().enumerate() {
            assert_eq!(layer.vec4, 1, "layer {l}: {:?}", layer.segments());
        }
    }
}
