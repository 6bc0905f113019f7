//! The network's layout as the kernels address it: the branch shape (a kernel argument),
//! the tensors' offsets in the flat parameters, the sizes of a forward, and the heads' places
//! in the dense head matrix.

use super::*;

/// `struct BranchShape` of cuda/common/qnet.cuh, a kernel argument: the branch sizes and
/// the row offsets of the head outputs, logits and Q values derived from them.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(super) struct BranchShape {
    pub(super) count: u32,
    pub(super) n: [u32; MAX_BRANCHES],
    pub(super) out: [u32; MAX_BRANCHES + 2],
    pub(super) logit: [u32; MAX_BRANCHES + 1],
    pub(super) q: [u32; MAX_BRANCHES + 1],
}

// SAFETY: plain old data of u32 arrays, laid out as the kernels' struct (repr(C)).
unsafe impl cudarc::driver::DeviceRepr for BranchShape {}
// The size of `struct BranchShape` (cuda/common/qnet.cuh static_asserts the same).
const _: () = assert!(std::mem::size_of::<BranchShape>() == 148);

impl BranchShape {
    /// Requires at most MAX_BRANCHES branches (checked by QNet::new).
    pub(super) fn of(cfg: &QNetConfig) -> Self {
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
pub(super) struct Offsets {
    pub(super) w1: usize,
    pub(super) w2: usize,
    pub(super) wh: usize,
    pub(super) wv2: usize,
}

impl Offsets {
    pub(super) fn of(cfg: &QNetConfig) -> Result<Self> {
        let at = |name: &str| {
            spec::tensor(cfg, name)
                .map(|t| t.offset)
                .ok_or_else(|| Error::Shape(format!("the Q-network layout has no tensor {name}")))
        };
        // qnet_head_matrix_gather writes wv2, wa2_0.., bo as one run from wv2's offset.
        let wv2 = at("wv2")?;
        let mut end = wv2 + cfg.value_hidden * cfg.atoms;
        for (k, &n) in cfg.branches.iter().enumerate() {
            if at(&format!("wa2_{k}"))? != end {
                return Err(Error::Shape(format!(
                    "layout: wa2_{k} does not follow the previous head's weights"
                )));
            }
            end += cfg.adv_hidden * n * cfg.atoms;
        }
        if at("bo")? != end || end + spec::output_width(cfg) != spec::param_count(cfg) {
            return Err(Error::Shape(
                "layout: bo must follow the heads' output weights and end the buffer".into(),
            ));
        }
        Ok(Offsets {
            w1: at("w1")?,
            w2: at("w2")?,
            wh: at("wh")?,
            wv2,
        })
    }
}

/// Sizes derived from the config and the batch.
#[derive(Clone, Copy, Debug)]
pub(super) struct Dims {
    pub(super) b: usize,
    /// Rows per network in a forward: `2B`, s then s'.
    pub(super) rows: usize,
    pub(super) s: usize,
    pub(super) h1: usize,
    pub(super) h2: usize,
    /// Heads' hidden width `vh + K ah`.
    pub(super) hw: usize,
    /// Head-output row width `NA (1 + sum n_k)`.
    pub(super) ow: usize,
    /// Logits per row `sum n_k NA`.
    pub(super) lw: usize,
    /// Q values per row `sum n_k`.
    pub(super) qw: usize,
    pub(super) na: usize,
    pub(super) kk: usize,
    pub(super) params: usize,
}

impl Dims {
    pub(super) fn of(cfg: &QNetConfig, batch: usize) -> Dims {
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
pub(super) fn heads_of(cfg: &QNetConfig) -> Vec<(usize, usize, usize, usize)> {
    let offsets = spec::output_offsets(cfg);
    let mut heads = vec![(0, cfg.value_hidden, 0, cfg.atoms)];
    for (k, &n) in cfg.branches.iter().enumerate() {
        heads.push((
            cfg.value_hidden + k * cfg.adv_hidden,
            cfg.adv_hidden,
            offsets[k + 1],
            n * cfg.atoms,
        ));
    }
    heads
}

/// The dense position in the `[(H + 1) x O]` head matrix of each compact head-output
/// parameter (wv2, wa2_0.., bo, in buffer order from wv2): qnet_head_matrix.cu's index table.
pub(super) fn head_matrix_index(cfg: &QNetConfig) -> Vec<u32> {
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
        block(
            cfg.value_hidden + k * cfg.adv_hidden,
            cfg.adv_hidden,
            offsets[k + 1],
            n * na,
        );
    }
    block(hw, 1, 0, ow);
    index
}

/// `rows` rows of `width` values and a ones column (each value `fill`).
pub(super) fn with_ones(rows: usize, width: usize, fill: f32) -> Vec<f32> {
    let mut v = vec![fill; rows * (width + 1)];
    v.iter_mut()
        .skip(width)
        .step_by(width + 1)
        .for_each(|x| *x = 1.0);
    v
}
