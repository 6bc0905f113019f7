//! `qnet_act` (cuda/qnet_act.cu): the online network's acting forward in one launch, from
//! the states to Q, every activation in shared memory. This module describes the network
//! to the kernel (`ActNet`: each layer's weight blocks, the shared memory it needs), picks
//! the rows per block, and launches it. Spec: the same as the layer-by-layer acting path
//! (tallyho_oracle::qnet `forward`, `head_q`).

use super::{spec, BranchShape, Dims, QNetConfig, MAX_BRANCHES};
use crate::error::{Error, Result};
use crate::runtime::{grid_stride, Gpu};
use cudarc::driver::sys::{CUdevice_attribute, CUfunction_attribute};
use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, CudaView, LaunchConfig, PushKernelArg};
use std::sync::Arc;

/// Threads of a block (`ACT_THREADS`: ACT_GROUPS groups of ACT_GROUP).
const THREADS: usize = 384;
/// Padded columns of a pass (`ACT_COLS`: 32 column threads x 8).
const COLS: usize = 256;
/// Input rows per staged slice (`ACT_KT`).
const KT: usize = 24;
/// Floats of a packed tile, one slice of one pass.
const TILE: usize = KT * COLS;
/// Slices in flight (`ACT_STAGES`).
const STAGES: usize = 3;
/// Segments a layer may have (`ACT_SEGMENTS`): the value head and one per branch.
const SEGMENTS: usize = MAX_BRANCHES + 1;
/// Columns of a thread's tile (`ACT_TILE_COLS`): segments are padded to a multiple.
const TILE_COLS: usize = 8;
/// Floats of padding after the staged head rows and after their means (a head slot past NA
/// reads at most 31 values past its row).
const HEAD_PAD: usize = 32;
/// A packed element with no parameter: zero (`ACT_NONE`).
const NONE: u32 = u32::MAX;

/// The rows per block of the kernel's entry points, `qnet_act_rows{R}` (R = 4 TR).
pub(super) const BLOCK_ROWS: [usize; 3] = [8, 16, 32];

/// `struct ActSegment` of cuda/qnet_act.cu: input rows `[x_off, x_off + fan_in)` into output
/// columns `[col0, col0 + width)`, at padded column `pcol0`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct ActSegment {
    x_off: u32,
    fan_in: u32,
    col0: u32,
    width: u32,
    pcol0: u32,
}

/// `struct ActLayer`: the segments, the padded width, the slices per pass, and where the
/// layer's tiles and biases start in the pack.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct ActLayer {
    count: u32,
    pwidth: u32,
    slices: u32,
    tile0: u64,
    bias0: u64,
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

// SAFETY: plain old data of u32 and u64 fields, laid out as the kernel's structs (repr(C)).
unsafe impl cudarc::driver::DeviceRepr for ActNet {}

/// Where a segment's parameters are in the flat buffer: its weights (row k of the segment at
/// `w + k ld`) and its biases.
#[derive(Clone, Copy, Debug)]
struct Source {
    w: usize,
    ld: usize,
    bias: usize,
}

impl ActLayer {
    fn passes(&self) -> usize {
        (self.pwidth as usize).div_ceil(COLS)
    }

    /// The input rows its slices read: each segment's x_off plus its slices.
    fn span(&self) -> usize {
        let rows = self.slices as usize * KT;
        self.seg[..self.count as usize].iter().map(|s| s.x_off as usize + rows).max().unwrap_or(0)
    }
}

/// The network as qnet_act reads it: its layers (tiles and biases addressed in the pack) and
/// the pack's index (the flat parameter each packed float copies, NONE for zeros).
struct Layout {
    layers: [ActLayer; 4],
    index: Vec<u32>,
}

impl Layout {
    fn of(cfg: &QNetConfig, d: Dims, heads: &[(usize, usize, usize, usize)]) -> Result<Layout> {
        if heads.len() > SEGMENTS {
            return Err(Error::Usage(format!("{} heads: qnet_act takes at most {SEGMENTS}", heads.len())));
        }
        let at = |name: &str| {
            spec::tensor(cfg, name)
                .map(|t| t.offset)
                .ok_or_else(|| Error::Usage(format!("the Q-network layout has no tensor {name}")))
        };
        // A trunk layer: [w; b] ((fan_in + 1) x width, row-major) at `w`.
        let trunk = |w: usize, fan_in: usize, width: usize| (vec![(0, fan_in, 0, width)], vec![Source { w, ld: width, bias: w + fan_in * width }]);
        let mut head_sources = Vec::with_capacity(heads.len());
        let bo = at("bo")?;
        for (h, &(_, _, col0, width)) in heads.iter().enumerate() {
            let w = if h == 0 { at("wv2")? } else { at(&format!("wa2_{}", h - 1))? };
            head_sources.push(Source { w, ld: width, bias: bo + col0 });
        }
        let described = [
            trunk(at("w1")?, d.s, d.h1),
            trunk(at("w2")?, d.h1, d.h2),
            trunk(at("wh")?, d.h2, d.hw),
            (heads.to_vec(), head_sources),
        ];
        let mut layers = [ActLayer::default(); 4];
        let (mut tiles, mut biases) = (0usize, 0usize);
        for (l, (segments, _)) in layers.iter_mut().zip(&described) {
            let mut pcol = 0u32;
            let mut kmax = 0;
            l.count = segments.len() as u32;
            for (s, &(x_off, fan_in, col0, width)) in l.seg.iter_mut().zip(segments) {
                *s = ActSegment { x_off: x_off as u32, fan_in: fan_in as u32, col0: col0 as u32, width: width as u32, pcol0: pcol };
                pcol += width.next_multiple_of(TILE_COLS) as u32;
                kmax = kmax.max(fan_in);
            }
            l.pwidth = pcol;
            l.slices = kmax.div_ceil(KT) as u32;
            l.tile0 = tiles as u64;
            l.bias0 = biases as u64; // made absolute below, after the tiles
            tiles += l.passes() * l.slices as usize;
            biases += l.passes() * COLS;
        }
        let mut index = vec![NONE; tiles * TILE + biases];
        for (l, (_, sources)) in layers.iter_mut().zip(&described) {
            l.bias0 += (tiles * TILE) as u64;
            for pc in 0..l.passes() * COLS {
                let Some(h) = (0..l.count as usize).rev().find(|&h| pc >= l.seg[h].pcol0 as usize) else { continue };
                let (seg, src) = (l.seg[h], sources[h]);
                let local = pc - seg.pcol0 as usize;
                if local >= seg.width as usize {
                    continue;
                }
                let (pass, c) = (pc / COLS, pc % COLS);
                index[l.bias0 as usize + pc] = u32_of(src.bias + local)?;
                for k in 0..seg.fan_in as usize {
                    let tile = l.tile0 as usize + pass * l.slices as usize + k / KT;
                    index[tile * TILE + (k % KT) * COLS + tile_column(c)] = u32_of(src.w + k * src.ld + local)?;
                }
            }
        }
        Ok(Layout { layers, index })
    }
}

/// Where column `c` of a pass sits in a tile row: column thread c / 8's first 4 columns at
/// 4 (c / 8), its last 4 at COLS / 2 + 4 (c / 8) (so a warp reads contiguous bytes).
fn tile_column(c: usize) -> usize {
    let (ct, half, e) = (c / TILE_COLS, (c % TILE_COLS) / 4, c % 4);
    half * (COLS / 2) + 4 * ct + e
}

fn u32_of(i: usize) -> Result<u32> {
    u32::try_from(i).ok().filter(|&v| v != NONE).ok_or_else(|| Error::Usage(format!("parameter {i}: qnet_act indexes at most 2^32 - 1")))
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
    fn of(d: Dims, layers: &[ActLayer; 4], rows: usize) -> Plan {
        let staged = rows * d.ow + HEAD_PAD;
        let means = rows * d.kk * d.na + HEAD_PAD;
        let p = [rows * layers[0].span(), rows * d.h2, rows * layers[2].span(), staged];
        let q = [rows * d.h1, rows * layers[1].span(), rows * d.hw, rows * layers[3].span(), means];
        let floats = |v: &[usize]| v.iter().copied().max().unwrap_or(0).next_multiple_of(4);
        let (p_floats, q_floats) = (floats(&p), floats(&q));
        let smem = 4 * (p_floats + q_floats + STAGES * TILE);
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
    pack_fn: CudaFunction,
    /// The online weights and biases in qnet_act's tile order (`qnet_act_pack`).
    pack: CudaSlice<f32>,
    /// The flat parameter of each packed float.
    index: CudaSlice<u32>,
}

impl Fused {
    /// The plans for the network of `d` that fit the device's shared memory (none: the
    /// network is too wide for one block, and acting runs layer by layer).
    pub(super) fn new(gpu: &Gpu, cfg: &QNetConfig, d: Dims, heads: &[(usize, usize, usize, usize)]) -> Result<Fused> {
        let optin = gpu.ctx.attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)? as usize;
        let sms = gpu.ctx.attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?.max(1) as usize;
        let layout = Layout::of(cfg, d, heads)?;
        let mut plans = Vec::new();
        for rows in BLOCK_ROWS {
            let plan = Plan::of(d, &layout.layers, rows);
            if plan.smem > optin {
                break;
            }
            let f = gpu.function("qnet_act", &format!("qnet_act_rows{rows}"))?;
            f.set_attribute(CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, plan.smem as i32)?;
            plans.push((f, plan));
        }
        let stream = &gpu.stream;
        // Nothing to pack for a network that acts layer by layer.
        let index = if plans.is_empty() { vec![NONE] } else { layout.index };
        Ok(Fused {
            plans,
            sms,
            forced: None,
            pack_fn: gpu.function("qnet_act", "qnet_act_pack")?,
            pack: stream.alloc_zeros(index.len())?,
            index: stream.clone_htod(&index)?,
        })
    }

    /// `qnet_act_pack`: copy the online parameters (`online`, the flat buffer's first
    /// `param_count`) into the pack, after every change of them.
    pub(super) fn pack(&mut self, stream: &Arc<CudaStream>, online: &CudaView<f32>) -> Result<()> {
        if self.plans.is_empty() {
            return Ok(());
        }
        let count = self.index.len() as u64;
        let mut l = stream.launch_builder(&self.pack_fn);
        l.arg(online).arg(&self.index).arg(&count).arg(&mut self.pack);
        // SAFETY: qnet_act_pack(const float* params, const u32* index [count], u64 count, float*
        // pack [count]): Layout::of built the index from the network's layout, so each entry is
        // NONE or a parameter offset below param_count, the length of `online`.
        unsafe { l.launch(grid_stride(self.index.len())) }?;
        Ok(())
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
    /// the same weights for fewer rows: measured on the H200 (docs/BENCHMARKS.md), qnet_act
    /// beats the layer-by-layer forward only with 32-row blocks filling the GPU (N = 4096:
    /// 98.3 against 100.7 us), and loses with 8-row blocks at N = 256 (48.5 against 34.0 us).
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

/// Launch `qnet_act` on `io.rows` rows (requires `fused.available()`).
pub(super) fn launch(stream: &Arc<CudaStream>, fused: &Fused, head: ActHead, io: ActIo) -> Result<()> {
    let (f, plan) = fused
        .pick(io.rows)
        .ok_or_else(|| Error::Usage("qnet_act: the network does not fit one block's shared memory".into()))?;
    let blocks = u32::try_from(io.rows.div_ceil(plan.rows))
        .map_err(|_| Error::Usage(format!("acting on {} rows: too many for one grid", io.rows)))?;
    let (rows64, null) = (io.rows as u64, 0u64);
    let mut l = stream.launch_builder(f);
    l.arg(io.x).arg(&rows64).arg(&fused.pack);
    l.arg(&plan.net).arg(head.shape).arg(&head.na).arg(&head.v_min).arg(&head.v_max).arg(&head.lpa);
    match io.y {
        Some(y) => l.arg(y),
        None => l.arg(&null),
    };
    l.arg(io.q);
    let cfg = LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (THREADS as u32, 1, 1), shared_mem_bytes: plan.smem as u32 };
    // SAFETY: follows qnet_act_rows{R}'s signature (x [rows x (S + 1)], u64 rows, the pack,
    // ActNet and BranchShape by value, u32 na, f32 v_min, v_max, u32 lpa, y [rows x ow] or
    // null, q [rows x A]): the caller (QNet::act) checked x's length and passes its Acting's y
    // and q (rows x ow, rows x qw); the plan's layers address the pack that Layout::of sized
    // (built from the same Dims); the function's dynamic shared memory limit was raised to
    // plan.smem in Fused::new.
    unsafe { l.launch(cfg) }?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qnet::heads_of;
    use tallyho_oracle::qnet as spec;

    /// The forward as qnet_act computes it from the pack (the same tiles, biases, segments and
    /// zero padding), in f64: the head-output rows with their bias.
    fn packed_forward(cfg: &QNetConfig, params: &[f32], states: &[f32]) -> Vec<f64> {
        let d = Dims::of(cfg, 1);
        let layout = Layout::of(cfg, d, &heads_of(cfg)).unwrap();
        let pack: Vec<f64> = layout.index.iter().map(|&i| if i == NONE { 0.0 } else { f64::from(params[i as usize]) }).collect();
        let widths = [d.h1, d.h2, d.hw, d.ow];
        let mut act: Vec<Vec<f64>> = states.chunks_exact(d.s).map(|r| r.iter().map(|&v| f64::from(v)).collect()).collect();
        for (l, (layer, &width)) in layout.layers.iter().zip(&widths).enumerate() {
            act = act
                .iter()
                .map(|x| {
                    let mut out = vec![0.0; width];
                    for pc in 0..layer.passes() * COLS {
                        let h = (0..layer.count as usize).rev().find(|&h| pc >= layer.seg[h].pcol0 as usize).unwrap();
                        let seg = layer.seg[h];
                        let local = pc - seg.pcol0 as usize;
                        if local >= seg.width as usize {
                            continue;
                        }
                        let mut sum = pack[layer.bias0 as usize + pc];
                        for k in 0..layer.slices as usize * KT {
                            let tile = layer.tile0 as usize + (pc / COLS) * layer.slices as usize + k / KT;
                            let xin = x.get(seg.x_off as usize + k).copied().unwrap_or(0.0);
                            sum += xin * pack[tile * TILE + (k % KT) * COLS + tile_column(pc % COLS)];
                        }
                        out[seg.col0 as usize + local] = if l < 3 { sum.max(0.0) } else { sum };
                    }
                    out
                })
                .collect();
        }
        act.concat()
    }

    #[test]
    fn the_pack_holds_every_parameter_once_where_qnet_act_reads_it() {
        let small = QNetConfig { state_dim: 6, h1: 16, h2: 12, value_hidden: 8, adv_hidden: 6, atoms: 11, ..QNetConfig::default() };
        let odd = QNetConfig { state_dim: 31, h1: 37, h2: 300, value_hidden: 13, adv_hidden: 29, branches: vec![4, 1], atoms: 7, ..QNetConfig::default() };
        for cfg in [QNetConfig::default(), small, odd] {
            let params = spec::init_params(&cfg);
            let d = Dims::of(&cfg, 1);
            let layout = Layout::of(&cfg, d, &heads_of(&cfg)).unwrap();
            let mut seen = vec![0u32; params.len()];
            for &i in layout.index.iter().filter(|&&i| i != NONE) {
                seen[i as usize] += 1;
            }
            assert!(seen.iter().all(|&n| n == 1), "{cfg:?}: a parameter packed {:?} times", seen.iter().find(|&&n| n != 1));
            let states: Vec<f32> = (0..3 * cfg.state_dim).map(|i| ((i * 7919) % 13) as f32 / 6.0 - 1.0).collect();
            let want = spec::head_rows(&cfg, &spec::forward(&cfg, &params, &states));
            let got = packed_forward(&cfg, &params, &states);
            assert_eq!(got.len(), want.len());
            for (g, w) in got.iter().zip(&want) {
                assert!((g - w).abs() <= 1e-12 * (1.0 + w.abs()), "{cfg:?}: {g} vs {w}");
            }
        }
    }
}
