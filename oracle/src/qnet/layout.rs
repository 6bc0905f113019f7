//! The flat parameter buffer: its tensors in the order of [`layout`], and [`init_params`],
//! which fills it from one ChaCha8 stream; the GPU uploads exactly those values.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::QNetConfig;

/// One tensor of the flat parameter buffer: `rows x cols` row-major from `offset`. A weight
/// is `[in, out]`; a bias is one row, `rows = 1`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorView {
    pub name: String,
    pub offset: usize,
    pub rows: usize,
    pub cols: usize,
}

impl TensorView {
    pub fn len(&self) -> usize {
        self.rows * self.cols
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn range(&self) -> std::ops::Range<usize> {
        self.offset..self.offset + self.len()
    }
}

/// A linear layer `y = x W + b`: its weight and bias positions in the flat buffer.
#[derive(Clone, Debug)]
pub(super) struct Layer {
    pub(super) weight: TensorView,
    pub(super) bias: TensorView,
}

impl Layer {
    pub(super) fn fan_in(&self) -> usize {
        self.weight.rows
    }

    pub(super) fn fan_out(&self) -> usize {
        self.weight.cols
    }
}

/// The network's layers and the tensors of the flat buffer they live in.
#[derive(Clone, Debug)]
pub(super) struct Net {
    pub(super) trunk1: Layer,
    pub(super) trunk2: Layer,
    /// Every head's hidden layer as one: `h2 -> vh + K ah`, value columns first.
    pub(super) heads: Layer,
    pub(super) value_out: Layer,
    pub(super) adv_out: Vec<Layer>,
    pub(super) tensors: Vec<TensorView>,
}

/// Width of the heads' hidden layer: `vh + K ah` (value head first, then branch k at
/// `vh + k ah`).
pub fn hidden_width(cfg: &QNetConfig) -> usize {
    cfg.value_hidden + cfg.num_branches() * cfg.adv_hidden
}

/// Column of each head's outputs in a head-output row: the value head's NA at 0, then branch
/// k's `n_k NA`; the last entry is the row width `NA (1 + sum_k n_k)`.
pub fn output_offsets(cfg: &QNetConfig) -> Vec<usize> {
    let mut offsets = vec![0, cfg.atoms];
    for &n in &cfg.branches {
        offsets.push(offsets.last().copied().unwrap_or(0) + n * cfg.atoms);
    }
    offsets
}

/// Width of a head-output row: `NA (1 + sum_k n_k)`.
pub fn output_width(cfg: &QNetConfig) -> usize {
    output_offsets(cfg).last().copied().unwrap_or(0)
}

pub(super) fn net(cfg: &QNetConfig) -> Net {
    let (na, hw, ow) = (cfg.atoms, hidden_width(cfg), output_width(cfg));
    let mut tensors = Vec::new();
    let mut offset = 0;
    let mut view = |name: String, rows: usize, cols: usize| {
        let v = TensorView {
            name,
            offset,
            rows,
            cols,
        };
        offset += rows * cols;
        tensors.push(v.clone());
        v
    };
    let mut layer = |w: &str, b: &str, fan_in: usize, fan_out: usize| Layer {
        weight: view(w.into(), fan_in, fan_out),
        bias: view(b.into(), 1, fan_out),
    };
    let trunk1 = layer("w1", "b1", cfg.state_dim, cfg.h1);
    let trunk2 = layer("w2", "b2", cfg.h1, cfg.h2);
    let heads = layer("wh", "bh", cfg.h2, hw);
    let wv2 = view("wv2".into(), cfg.value_hidden, na);
    let wa2: Vec<TensorView> = cfg
        .branches
        .iter()
        .enumerate()
        .map(|(k, &n)| view(format!("wa2_{k}"), cfg.adv_hidden, n * na))
        .collect();
    let bo = view("bo".into(), 1, ow);
    let offsets = output_offsets(cfg);
    let bias = |k: usize, cols: usize| TensorView {
        name: "bo".into(),
        offset: bo.offset + offsets[k],
        rows: 1,
        cols,
    };
    let value_out = Layer {
        weight: wv2,
        bias: bias(0, na),
    };
    let adv_out = wa2
        .into_iter()
        .enumerate()
        .map(|(k, w)| {
            let c = w.cols;
            Layer {
                weight: w,
                bias: bias(k + 1, c),
            }
        })
        .collect();
    Net {
        trunk1,
        trunk2,
        heads,
        value_out,
        adv_out,
        tensors,
    }
}

/// The tensors of the flat parameter buffer, contiguous, in this order:
///
/// ```text
/// w1 [S x h1]   b1 [h1]        trunk layer 1
/// w2 [h1 x h2]  b2 [h2]        trunk layer 2
/// wh [h2 x H]   bh [H]         every head's hidden layer, H = vh + K ah: value head in
///                              columns [0, vh), branch k in [vh + k ah, vh + (k + 1) ah)
/// wv2 [vh x NA]                value head output
/// wa2_k [ah x n_k NA]          branch k's advantage output (column j NA + z: action j, atom z)
/// bo [NA (1 + sum_k n_k)]      every head's output bias, at output_offsets
/// ```
///
/// Each weight is followed by its bias where a layer reads one input, so `[w; b]` is one
/// `(in + 1) x out` matrix: the GPU multiplies it by activations that carry a ones column and
/// gets the bias, and its gradient, out of the same GEMM. The heads' hidden layers all read
/// h2, so they are one matrix and one GEMM.
pub fn layout(cfg: &QNetConfig) -> Vec<TensorView> {
    net(cfg).tensors
}

/// The tensor called `name` in [`layout`].
pub fn tensor(cfg: &QNetConfig, name: &str) -> Option<TensorView> {
    layout(cfg).into_iter().find(|t| t.name == name)
}

/// Total number of parameters: the length of the flat buffer.
pub fn param_count(cfg: &QNetConfig) -> usize {
    layout(cfg).last().map_or(0, |t| t.offset + t.len())
}

/// The fan-in of every parameter's layer, in buffer order: the rows of its layer's weight
/// (a bias uses its layer's fan-in; `bo` is the value head's vh, then ah for the branches).
fn fan_ins(cfg: &QNetConfig) -> Vec<usize> {
    let n = net(cfg);
    let mut fan = vec![0; param_count(cfg)];
    for l in [&n.trunk1, &n.trunk2, &n.heads, &n.value_out]
        .into_iter()
        .chain(&n.adv_out)
    {
        for i in l.weight.range().chain(l.bias.range()) {
            fan[i] = l.fan_in();
        }
    }
    fan
}

/// PyTorch `nn.Linear`'s default scale: one `ChaCha8Rng::seed_from_u64(seed)` stream over the
/// buffer in order, each element `rng.gen_range(-bound..bound)` drawn as f64 and rounded to
/// f32, with `bound = 1 / sqrt(fan_in)` of the element's layer.
pub fn init_params(cfg: &QNetConfig) -> Vec<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    fan_ins(cfg)
        .into_iter()
        .map(|fan_in| {
            let bound = 1.0 / (fan_in as f64).sqrt();
            rng.gen_range(-bound..bound) as f32
        })
        .collect()
}
