//! The Q-network and its optimizer: the spec of the `qnet_*` kernels in cuda/ and their
//! launchers. Everything here is computed in f64 from f32 inputs; every f32 constant of the
//! config enters the math widened exactly to f64 (`f64::from`), which is the value the GPU's
//! f32 holds.
//!
//! **Network.** A shared trunk, a value head and one advantage head per action branch
//! (action branching, Tavakoli et al. 2018, "Action Branching Architectures for Deep
//! Reinforcement Learning"), combined per branch by the dueling rule (Wang et al. 2016,
//! "Dueling Network Architectures for Deep Reinforcement Learning"). Each head outputs NA
//! atoms per action: NA > 1 is a categorical distribution over a fixed support (C51,
//! Bellemare et al. 2017, "A Distributional Perspective on Reinforcement Learning"); NA = 1
//! is a scalar Q trained with the Huber loss. A layer is `y = x W + b` on row vectors, W
//! row-major `[in, out]`; `relu(z) = z if z > 0 else 0`, whose derivative is taken as
//! `1 if relu(z) > 0 else 0` (0 at the kink).
//!
//! **Parameters** are one flat f32 buffer in the order of [`layout`]; [`init_params`] fills it
//! from one ChaCha8 stream, and the GPU uploads exactly those values.
//!
//! **One update** ([`update_step`]): forward s (online), s' (online and target), the loss with
//! Double DQN targets (van Hasselt et al. 2016, "Deep Reinforcement Learning with Double
//! Q-learning"), backward, global-norm clipping, Adam (Kingma and Ba 2015). The target
//! network follows by [`target_sync`].

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::config::{require, ConfigError};
use crate::per::Transitions;

// ---------------------------------------------------------------------------------------------
// Configuration
// ---------------------------------------------------------------------------------------------

/// Sizes and constants of the Q-network, its loss and its optimizer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QNetConfig {
    /// State width S (floats per state), the input of the trunk.
    pub state_dim: usize,
    /// Width of the first trunk layer.
    pub h1: usize,
    /// Width of the second trunk layer, the input of every head.
    pub h2: usize,
    /// Hidden width of the value head.
    pub value_hidden: usize,
    /// Hidden width of each advantage head.
    pub adv_hidden: usize,
    /// Action count n_k of each branch (default direction 3, size 5, order type 3).
    pub branches: Vec<usize>,
    /// Atoms NA per action: NA > 1 is C51 over `[v_min, v_max]`, NA = 1 is scalar Q with Huber.
    pub atoms: usize,
    /// Lowest atom of the C51 support (unused when NA = 1).
    pub v_min: f32,
    /// Highest atom of the C51 support (unused when NA = 1).
    pub v_max: f32,
    /// Discount per step, in [0, 1].
    pub gamma: f32,
    /// Steps n of the n-step return folded into the reward; the bootstrap discount is gamma^n.
    pub n_step: u32,
    /// Huber threshold kappa (NA = 1 only).
    pub huber_kappa: f32,
    /// Adam learning rate.
    pub lr: f32,
    /// Adam first-moment decay beta1.
    pub adam_beta1: f32,
    /// Adam second-moment decay beta2.
    pub adam_beta2: f32,
    /// Adam denominator offset eps (added after the square root, as PyTorch does).
    pub adam_eps: f32,
    /// Maximum global L2 norm of the gradient.
    pub grad_clip: f32,
    /// Polyak rate tau of the target network; None: hard copy at each sync.
    pub polyak_tau: Option<f32>,
    /// Seed of the parameter initialisation.
    pub seed: u64,
}

impl Default for QNetConfig {
    fn default() -> Self {
        QNetConfig {
            state_dim: 32,
            h1: 256,
            h2: 256,
            value_hidden: 128,
            adv_hidden: 128,
            branches: vec![3, 5, 3],
            atoms: 51,
            v_min: -10.0,
            v_max: 10.0,
            gamma: 0.99,
            n_step: 1,
            huber_kappa: 1.0,
            lr: 1e-4,
            adam_beta1: 0.9,
            adam_beta2: 0.999,
            adam_eps: 1e-8,
            grad_clip: 10.0,
            polyak_tau: None,
            seed: 0x7a11_1b0,
        }
    }
}

impl QNetConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        let sizes = [
            ("state_dim", self.state_dim),
            ("h1", self.h1),
            ("h2", self.h2),
            ("value_hidden", self.value_hidden),
            ("adv_hidden", self.adv_hidden),
            ("atoms", self.atoms),
            ("n_step", self.n_step as usize),
            ("the number of action branches (branches.len())", self.branches.len()),
        ];
        for (name, v) in sizes {
            if v == 0 {
                return Err(ConfigError::Zero { name });
            }
        }
        if self.branches.contains(&0) {
            return Err(ConfigError::Zero { name: "an action count in branches" });
        }
        if self.atoms > 1 {
            require(self.v_min.is_finite(), "v_min", self.v_min, "finite values", "give the support a finite lower end such as -10")?;
            require(
                self.v_max.is_finite() && self.v_max > self.v_min,
                "v_max",
                self.v_max,
                "(v_min, +inf), finite",
                "set v_max above v_min: the C51 support [v_min, v_max] needs a positive width",
            )?;
        }
        let (g, k, lr) = (self.gamma, self.huber_kappa, self.lr);
        require((0.0..=1.0).contains(&g), "gamma", g, "[0, 1]", "use a discount such as 0.99")?;
        require(k > 0.0 && k.is_finite(), "huber_kappa", k, "(0, +inf)", "use a threshold such as 1.0")?;
        require(lr > 0.0 && lr.is_finite(), "lr", lr, "(0, +inf)", "use a learning rate such as 1e-4")?;
        let b1 = self.adam_beta1;
        require((0.0..1.0).contains(&b1), "adam_beta1", b1, "[0, 1)", "use PyTorch's 0.9")?;
        let b2 = self.adam_beta2;
        require((0.0..1.0).contains(&b2), "adam_beta2", b2, "[0, 1)", "use PyTorch's 0.999")?;
        let e = self.adam_eps;
        require(e > 0.0 && e.is_finite(), "adam_eps", e, "(0, +inf)", "use PyTorch's 1e-8")?;
        let c = self.grad_clip;
        require(c > 0.0 && c.is_finite(), "grad_clip", c, "(0, +inf)", "use a max norm such as 10")?;
        if let Some(t) = self.polyak_tau {
            require(t > 0.0 && t <= 1.0, "polyak_tau", t, "(0, 1]", "use a rate such as 0.005, or None for a hard copy")?;
        }
        Ok(())
    }

    /// The bootstrap discount `gamma^n_step`, in f64 (`powf` of the widened gamma); the GPU
    /// receives this value as an argument.
    pub fn discount(&self) -> f64 {
        f64::from(self.gamma).powf(f64::from(self.n_step))
    }

    /// Number of action branches K.
    pub fn num_branches(&self) -> usize {
        self.branches.len()
    }
}

// ---------------------------------------------------------------------------------------------
// Parameter layout and initialisation
// ---------------------------------------------------------------------------------------------

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
struct Layer {
    weight: TensorView,
    bias: TensorView,
}

impl Layer {
    fn fan_in(&self) -> usize {
        self.weight.rows
    }

    fn fan_out(&self) -> usize {
        self.weight.cols
    }
}

/// The network's layers and the tensors of the flat buffer they live in.
#[derive(Clone, Debug)]
struct Net {
    trunk1: Layer,
    trunk2: Layer,
    /// Every head's hidden layer as one: `h2 -> vh + K ah`, value columns first.
    heads: Layer,
    value_out: Layer,
    adv_out: Vec<Layer>,
    tensors: Vec<TensorView>,
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

fn net(cfg: &QNetConfig) -> Net {
    let (na, hw, ow) = (cfg.atoms, hidden_width(cfg), output_width(cfg));
    let mut tensors = Vec::new();
    let mut offset = 0;
    let mut view = |name: String, rows: usize, cols: usize| {
        let v = TensorView { name, offset, rows, cols };
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
    let wa2: Vec<TensorView> =
        cfg.branches.iter().enumerate().map(|(k, &n)| view(format!("wa2_{k}"), cfg.adv_hidden, n * na)).collect();
    let bo = view("bo".into(), 1, ow);
    let offsets = output_offsets(cfg);
    let bias = |k: usize, cols: usize| TensorView { name: "bo".into(), offset: bo.offset + offsets[k], rows: 1, cols };
    let value_out = Layer { weight: wv2, bias: bias(0, na) };
    let adv_out = wa2.into_iter().enumerate().map(|(k, w)| { let c = w.cols; Layer { weight: w, bias: bias(k + 1, c) } }).collect();
    Net { trunk1, trunk2, heads, value_out, adv_out, tensors }
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
    for l in [&n.trunk1, &n.trunk2, &n.heads, &n.value_out].into_iter().chain(&n.adv_out) {
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

// ---------------------------------------------------------------------------------------------
// Forward
// ---------------------------------------------------------------------------------------------

/// Every intermediate of one forward pass over B states, row-major. Per-branch tensors are
/// indexed `[k]`, then `(i n_k + j) NA + z` for row i, action j, atom z.
#[derive(Clone, Debug, PartialEq)]
pub struct Forward {
    pub batch: usize,
    /// The input, widened: B x S.
    pub states: Vec<f64>,
    /// `relu(x w1 + b1)`: B x h1.
    pub h1: Vec<f64>,
    /// `relu(h1 w2 + b2)`: B x h2.
    pub h2: Vec<f64>,
    /// `relu(h2 wh + bh)`: B x H, the value head's hidden units then each branch's.
    pub heads_hidden: Vec<f64>,
    /// `vh wv2 + bo[value]`: B x NA.
    pub value: Vec<f64>,
    /// `[k]`: `ah_k wa2_k + bo[k]`, B x n_k x NA.
    pub adv: Vec<Vec<f64>>,
    /// `[k]`: the dueling combination, B x n_k x NA.
    pub logits: Vec<Vec<f64>>,
    /// `[k]`: log-softmax of the logits over z, B x n_k x NA; empty vectors when NA = 1.
    pub log_probs: Vec<Vec<f64>>,
    /// `[k]`: `exp(log_probs)`, B x n_k x NA; empty vectors when NA = 1.
    pub probs: Vec<Vec<f64>>,
    /// `[k]`: Q values, B x n_k.
    pub q: Vec<Vec<f64>>,
}

/// `y = x W + b` for the `rows` rows of x: `y[r][o] = (sum_i x[r][i] W[i][o]) + b[o]`, the sum
/// in increasing i.
fn linear<P: Copy + Into<f64>>(params: &[P], layer: &Layer, x: &[f64], rows: usize) -> Vec<f64> {
    let (n_in, n_out) = (layer.fan_in(), layer.fan_out());
    let w = &params[layer.weight.range()];
    let b = &params[layer.bias.range()];
    let mut y = vec![0.0; rows * n_out];
    for (yr, xr) in y.chunks_exact_mut(n_out).zip(x.chunks_exact(n_in)) {
        for (&xi, wi) in xr.iter().zip(w.chunks_exact(n_out)) {
            for (yo, &wio) in yr.iter_mut().zip(wi) {
                *yo += xi * wio.into();
            }
        }
        for (yo, &bo) in yr.iter_mut().zip(b) {
            *yo += bo.into();
        }
    }
    y
}

fn relu(mut v: Vec<f64>) -> Vec<f64> {
    for x in v.iter_mut() {
        *x = if *x > 0.0 { *x } else { 0.0 };
    }
    v
}

/// Dueling combination (Wang et al. 2016, eq. 9) per atom:
/// `logits[i, j, z] = (v[i, z] + a[i, j, z]) - mean_j' a[i, j', z]`, the mean as the sum over
/// j' in increasing order divided by n.
fn dueling(value: &[f64], adv: &[f64], b: usize, n: usize, na: usize) -> Vec<f64> {
    let mut out = vec![0.0; b * n * na];
    for i in 0..b {
        for z in 0..na {
            let at = |j: usize| (i * n + j) * na + z;
            let mean = (0..n).map(|j| adv[at(j)]).sum::<f64>() / n as f64;
            for j in 0..n {
                out[at(j)] = (value[i * na + z] + adv[at(j)]) - mean;
            }
        }
    }
    out
}

/// Log-softmax of each row of `na`: `x - (max + ln sum exp(x - max))`.
fn log_softmax(x: &[f64], na: usize) -> Vec<f64> {
    let mut out = Vec::with_capacity(x.len());
    for row in x.chunks_exact(na) {
        let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let lse = max + row.iter().map(|&v| (v - max).exp()).sum::<f64>().ln();
        out.extend(row.iter().map(|&v| v - lse));
    }
    out
}

/// The C51 support `z_i = v_min + i dz`, `dz = (v_max - v_min) / (NA - 1)`, i = 0..NA; empty
/// when NA = 1 (a scalar Q has no support).
pub fn support(cfg: &QNetConfig) -> Vec<f64> {
    if cfg.atoms < 2 {
        return Vec::new();
    }
    let (lo, hi) = (f64::from(cfg.v_min), f64::from(cfg.v_max));
    let dz = (hi - lo) / (cfg.atoms - 1) as f64;
    (0..cfg.atoms).map(|i| lo + i as f64 * dz).collect()
}

/// Columns `[col, col + width)` of a row-major matrix with rows of `ld`.
fn columns(x: &[f64], ld: usize, col: usize, width: usize) -> Vec<f64> {
    x.chunks_exact(ld).flat_map(|row| row[col..col + width].iter().copied()).collect()
}

impl Forward {
    /// The value head's hidden units `vh`: B x vh, columns `[0, vh)` of `heads_hidden`.
    pub fn value_hidden(&self, cfg: &QNetConfig) -> Vec<f64> {
        columns(&self.heads_hidden, hidden_width(cfg), 0, cfg.value_hidden)
    }

    /// Branch k's hidden units `ah_k`: B x ah, columns `[vh + k ah, vh + (k + 1) ah)`.
    pub fn adv_hidden(&self, cfg: &QNetConfig, k: usize) -> Vec<f64> {
        columns(&self.heads_hidden, hidden_width(cfg), cfg.value_hidden + k * cfg.adv_hidden, cfg.adv_hidden)
    }
}

/// `qnet_forward` of B = `states.len() / S` states (row-major B x S), params in [`layout`]:
///
/// ```text
/// h1 = relu(x w1 + b1)            h2 = relu(h1 w2 + b2)
/// hh = relu(h2 wh + bh) = [vh | ah_0 | ... | ah_{K-1}]                   (all heads' hidden)
/// v  = vh wv2 + bo[value]         a_k = ah_k wa2_k + bo[k]               [NA], [n_k, NA]
/// logits_k[j, z] = v[z] + a_k[j, z] - mean_j' a_k[j', z]                 (dueling, per branch)
/// NA > 1: probs_k[j, :] = softmax_z logits_k[j, :],  q_k[j] = sum_z probs_k[j, z] z_z   (C51)
/// NA = 1: q_k[j] = logits_k[j, 0]
/// ```
///
/// Generic over the parameter type so that the same code runs on the f32 buffer the GPU
/// holds and on f64 parameters (finite differences). Requires `params.len() ==
/// param_count(cfg)` and `states.len()` a multiple of S ([`check_batch`] checks a batch).
pub fn forward<P: Copy + Into<f64>>(cfg: &QNetConfig, params: &[P], states: &[f32]) -> Forward {
    debug_assert_eq!(params.len(), param_count(cfg), "parameter buffer of the wrong length: callers validate");
    let b = states.len() / cfg.state_dim;
    let n = net(cfg);
    let x: Vec<f64> = states.iter().map(|&v| f64::from(v)).collect();
    let h1 = relu(linear(params, &n.trunk1, &x, b));
    let h2 = relu(linear(params, &n.trunk2, &h1, b));
    let heads_hidden = relu(linear(params, &n.heads, &h2, b));
    let mut f = Forward {
        batch: b,
        states: x,
        h1,
        h2,
        heads_hidden,
        value: Vec::new(),
        adv: Vec::new(),
        logits: Vec::new(),
        log_probs: Vec::new(),
        probs: Vec::new(),
        q: Vec::new(),
    };
    head_outputs(cfg, params, &mut f);
    head(cfg, &mut f);
    f
}

/// The heads' output layers (`qnet_heads`' product): `value` and `adv` of `f` from its
/// `heads_hidden`.
pub fn head_outputs<P: Copy + Into<f64>>(cfg: &QNetConfig, params: &[P], f: &mut Forward) {
    let n = net(cfg);
    f.value = linear(params, &n.value_out, &f.value_hidden(cfg), f.batch);
    f.adv = (0..cfg.num_branches()).map(|k| linear(params, &n.adv_out[k], &f.adv_hidden(cfg, k), f.batch)).collect();
}

/// `qnet_head`: the dueling combination, softmax and Q of every branch from `value` and
/// `adv`, into `logits`, `log_probs`, `probs` and `q`.
pub fn head(cfg: &QNetConfig, f: &mut Forward) {
    let (b, na) = (f.batch, cfg.atoms);
    let z = support(cfg);
    f.logits.clear();
    f.log_probs.clear();
    f.probs.clear();
    f.q.clear();
    for (k, &n) in cfg.branches.iter().enumerate() {
        let logits = dueling(&f.value, &f.adv[k], b, n, na);
        let (log_probs, probs, q) = if na > 1 {
            let lp = log_softmax(&logits, na);
            let p: Vec<f64> = lp.iter().map(|&v| v.exp()).collect();
            let q = p.chunks_exact(na).map(|row| row.iter().zip(&z).map(|(pz, zz)| pz * zz).sum()).collect();
            (lp, p, q)
        } else {
            (Vec::new(), Vec::new(), logits.clone())
        };
        f.logits.push(logits);
        f.log_probs.push(log_probs);
        f.probs.push(probs);
        f.q.push(q);
    }
}

/// Q of each row from its head-output row plus bias `yb` (`rows x output_width`: the value,
/// then each branch's advantages), by [`head`], in the GPU's row layout: `rows x sum n_k`,
/// branch k's actions after branch k - 1's.
pub fn head_q(cfg: &QNetConfig, yb: &[f64]) -> Vec<f64> {
    let (width, offsets) = (output_width(cfg), output_offsets(cfg));
    let rows = yb.len() / width.max(1);
    let mut f = Forward {
        batch: rows,
        states: Vec::new(),
        h1: Vec::new(),
        h2: Vec::new(),
        heads_hidden: Vec::new(),
        value: columns(yb, width, 0, cfg.atoms),
        adv: (0..cfg.num_branches()).map(|k| columns(yb, width, offsets[k + 1], offsets[k + 2] - offsets[k + 1])).collect(),
        logits: Vec::new(),
        log_probs: Vec::new(),
        probs: Vec::new(),
        q: Vec::new(),
    };
    head(cfg, &mut f);
    branch_rows(cfg, &f.q, rows, 1)
}

/// Per-branch tensors (`[k]`: rows x n_k x `per_action`) as rows of all branches, branch k's
/// after branch k - 1's: the GPU's layout of logits and Q.
pub fn branch_rows(cfg: &QNetConfig, per_branch: &[Vec<f64>], rows: usize, per_action: usize) -> Vec<f64> {
    let mut out = Vec::new();
    for i in 0..rows {
        for (k, &n) in cfg.branches.iter().enumerate() {
            let w = n * per_action;
            out.extend_from_slice(&per_branch[k][i * w..(i + 1) * w]);
        }
    }
    out
}

/// The head-output rows `[value | adv_0 | ...]` (`rows x output_width`, bias included) of a
/// forward: the GPU's layout of y, the input [`head_q`] takes.
pub fn head_rows(cfg: &QNetConfig, f: &Forward) -> Vec<f64> {
    let na = cfg.atoms;
    let mut out = Vec::with_capacity(f.batch * output_width(cfg));
    for i in 0..f.batch {
        out.extend_from_slice(&f.value[i * na..(i + 1) * na]);
        for (k, &n) in cfg.branches.iter().enumerate() {
            out.extend_from_slice(&f.adv[k][i * n * na..(i + 1) * n * na]);
        }
    }
    out
}

/// The float32 reference of `qnet_head_q` (the acting head, float arithmetic) for
/// `tolerance::reduction_rule`: [`head_q`] in float, every sum (advantage mean, softmax
/// denominator, Q) in reverse order, so in another order than the kernel's; exp from libm.
pub fn head_q_f32(cfg: &QNetConfig, yb: &[f32]) -> Vec<f32> {
    let (na, width, offsets) = (cfg.atoms, output_width(cfg), output_offsets(cfg));
    let (lo, hi) = (cfg.v_min, cfg.v_max);
    let dz = if na > 1 { (hi - lo) / (na - 1) as f32 } else { 0.0 };
    let mut q = Vec::new();
    for row in yb.chunks_exact(width.max(1)) {
        let value = &row[..na];
        for (k, &n) in cfg.branches.iter().enumerate() {
            let adv = &row[offsets[k + 1]..offsets[k + 2]];
            let mean: Vec<f32> = (0..na).map(|z| (0..n).rev().map(|j| adv[j * na + z]).sum::<f32>() / n as f32).collect();
            for j in 0..n {
                let logits: Vec<f32> = (0..na).map(|z| (value[z] + adv[j * na + z]) - mean[z]).collect();
                if na == 1 {
                    q.push(logits[0]);
                    continue;
                }
                let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let e: Vec<f32> = logits.iter().map(|&l| (l - max).exp()).collect();
                let inv = 1.0 / e.iter().rev().sum::<f32>();
                q.push((0..na).rev().map(|z| e[z] * inv * (lo + z as f32 * dz)).sum());
            }
        }
    }
    q
}

// ---------------------------------------------------------------------------------------------
// Loss
// ---------------------------------------------------------------------------------------------

/// The loss of one batch, its targets, and its gradient with respect to the logits of s.
#[derive(Clone, Debug, PartialEq)]
pub struct Loss {
    /// `(1/B) sum_i w_i L_i`.
    pub loss: f64,
    /// `L_i = (1/K) sum_k l_ik`: B.
    pub per_sample_loss: Vec<f64>,
    /// New replay priority of each row, unweighted: C51 `L_i`, scalar `mean_k |TD_ik|`. B.
    pub per_sample_priority: Vec<f64>,
    /// `l_ik`: cross-entropy (C51) or Huber(TD) (scalar), B x K.
    pub branch_loss: Vec<f64>,
    /// Double DQN actions `a*_ik = argmax_j q_online_k(s'_i, j)`, lowest j on ties: B x K.
    pub next_actions: Vec<i32>,
    /// `[k]`: the constant targets, B x NA: the projected distribution m (C51) or y (NA = 1,
    /// the same for every branch).
    pub targets: Vec<Vec<f64>>,
    /// `TD_ik = y_i - Q_k(s_i, a_ik)`, B x K, NA = 1 only (empty for C51).
    pub td: Vec<f64>,
    /// `[k]`: d loss / d logits_k(s), B x n_k x NA; nonzero only at the taken action.
    pub dlogits: Vec<Vec<f64>>,
}

/// Index of the largest value, the lowest index on ties (and where comparisons fail, NaN).
fn argmax_lowest(q: &[f64]) -> usize {
    let mut best = 0;
    for (j, &v) in q.iter().enumerate().skip(1) {
        if v > q[best] {
            best = j;
        }
    }
    best
}

/// C51 projection of the target distribution `p` (NA atoms, Bellemare et al. 2017,
/// Algorithm 1) for reward r and done flag d, with `g = gamma^n (1 - d)`: for each atom i
///
/// ```text
/// Tz = clamp(r + g z_i, v_min, v_max)
/// b  = clamp((Tz - v_min) / dz, 0, NA - 1)       (the second clamp only absorbs rounding)
/// l  = floor(b),  u = ceil(b)
/// m_l += p_i (u - b),  m_u += p_i (b - l),  and m_l += p_i when l == u
/// ```
///
/// The `l == u` term (b an integer, e.g. Tz clamped to either end) keeps the mass that the
/// two fractional terms would lose, so `sum m = sum p`. Requires a validated config (NA > 1).
pub fn c51_project(cfg: &QNetConfig, p: &[f64], reward: f32, done: f32) -> Vec<f64> {
    let na = cfg.atoms;
    let (lo, hi) = (f64::from(cfg.v_min), f64::from(cfg.v_max));
    let dz = (hi - lo) / (na - 1) as f64;
    let g = cfg.discount() * (1.0 - f64::from(done));
    let r = f64::from(reward);
    let top = (na - 1) as f64;
    let mut m = vec![0.0; na];
    for (i, &pi) in p.iter().enumerate() {
        let z = lo + i as f64 * dz;
        let tz = (r + g * z).clamp(lo, hi);
        let b = ((tz - lo) / dz).clamp(0.0, top);
        let (l, u) = (b.floor(), b.ceil());
        let (li, ui) = (l as usize, u as usize);
        m[li] += pi * (u - b);
        m[ui] += pi * (b - l);
        if li == ui {
            m[li] += pi;
        }
    }
    m
}

/// Huber loss (Huber 1964): `0.5 d^2` if `|d| <= kappa`, else `kappa (|d| - 0.5 kappa)`.
pub fn huber(d: f64, kappa: f64) -> f64 {
    if d.abs() <= kappa {
        0.5 * d * d
    } else {
        kappa * (d.abs() - 0.5 * kappa)
    }
}

/// Derivative of [`huber`] in d: `d` if `|d| <= kappa`, else `kappa sign(d)`.
pub fn huber_grad(d: f64, kappa: f64) -> f64 {
    if d.abs() <= kappa {
        d
    } else {
        kappa * d.signum()
    }
}

/// `qnet_loss`: the Double DQN loss of a batch (van Hasselt et al. 2016), per branch, with
/// `a*_k = argmax_j q_k(s')` of the ONLINE net (lowest j on ties) evaluated by the TARGET net.
/// The targets are constants: no gradient flows through the two s' forwards.
///
/// C51 (NA > 1): `m = c51_project(probs_target(s')[k, a*_k, :], r, done)`,
/// `l_ik = CE_k = -sum_z m_z log probs_online(s)[k, a_k, z]` (log-softmax), priority `L_i`.
///
/// Scalar (NA = 1), the BDQ target of Tavakoli et al. 2018 (mean over branches):
/// `y = r + gamma^n (1 - done) (1/K) sum_k Q_target_k(s', a*_k)`, `TD_k = y - Q_k(s, a_k)`,
/// `l_ik = huber(TD_k, kappa)`, priority `mean_k |TD_k|`.
///
/// Both: `L_i = (1/K) sum_k l_ik`, `loss = (1/B) sum_i w_i L_i` (sums in increasing index).
/// The logit gradient, with `c_i = w_i / (B K)`, at the taken action `a_k` only:
/// C51 `c_i (probs_z sum_z' m_z' - m_z)` (= `c_i (probs - m)` as `sum m = 1`),
/// scalar `-c_i huber_grad(TD_k, kappa)`.
///
/// `actions` is B x K (i32), `rewards`, `dones` (0/1), `weights` (importance weights) are B.
/// Requires a batch that [`check_batch`] accepts.
#[allow(clippy::too_many_arguments)]
pub fn loss(
    cfg: &QNetConfig,
    online_s: &Forward,
    online_s2: &Forward,
    target_s2: &Forward,
    actions: &[i32],
    rewards: &[f32],
    dones: &[f32],
    weights: &[f32],
) -> Loss {
    let next = next_actions(cfg, online_s2);
    loss_with_next_actions(cfg, online_s, target_s2, &next, actions, rewards, dones, weights)
}

/// Double DQN action choice: `a*_ik = argmax_j q_online_k(s'_i, j)`, lowest j on ties: B x K.
pub fn next_actions(cfg: &QNetConfig, online_s2: &Forward) -> Vec<i32> {
    let mut out = Vec::with_capacity(online_s2.batch * cfg.num_branches());
    for i in 0..online_s2.batch {
        for (k, &n) in cfg.branches.iter().enumerate() {
            out.push(argmax_lowest(&online_s2.q[k][i * n..(i + 1) * n]) as i32);
        }
    }
    out
}

/// `qnet_loss` given the Double DQN actions `next` (B x K): [`loss`] without the argmax, so
/// that a check can evaluate the loss at the actions the GPU chose.
#[allow(clippy::too_many_arguments)]
pub fn loss_with_next_actions(
    cfg: &QNetConfig,
    online_s: &Forward,
    target_s2: &Forward,
    next: &[i32],
    actions: &[i32],
    rewards: &[f32],
    dones: &[f32],
    weights: &[f32],
) -> Loss {
    let (b, kk, na) = (online_s.batch, cfg.num_branches(), cfg.atoms);
    let mut out = Loss {
        loss: 0.0,
        per_sample_loss: vec![0.0; b],
        per_sample_priority: vec![0.0; b],
        branch_loss: vec![0.0; b * kk],
        next_actions: next.to_vec(),
        targets: vec![vec![0.0; b * na]; kk],
        td: if na > 1 { Vec::new() } else { vec![0.0; b * kk] },
        dlogits: cfg.branches.iter().map(|&n| vec![0.0; b * n * na]).collect(),
    };
    for i in 0..b {
        let c = f64::from(weights[i]) / (b * kk) as f64;
        if na > 1 {
            c51_row(cfg, i, c, online_s, target_s2, actions, rewards[i], dones[i], &mut out);
        } else {
            scalar_row(cfg, i, c, online_s, target_s2, actions, rewards[i], dones[i], &mut out);
        }
        let li = out.branch_loss[i * kk..(i + 1) * kk].iter().sum::<f64>() / kk as f64;
        out.per_sample_loss[i] = li;
        if na > 1 {
            out.per_sample_priority[i] = li;
        }
    }
    let total: f64 = out.per_sample_loss.iter().zip(weights).map(|(&l, &w)| f64::from(w) * l).sum();
    out.loss = total / b as f64;
    out
}

/// Row i of the C51 loss: the projected target, the cross-entropy and its logit gradient.
#[allow(clippy::too_many_arguments)]
fn c51_row(
    cfg: &QNetConfig,
    i: usize,
    c: f64,
    online_s: &Forward,
    target_s2: &Forward,
    actions: &[i32],
    reward: f32,
    done: f32,
    out: &mut Loss,
) {
    let (kk, na) = (cfg.num_branches(), cfg.atoms);
    for (k, &n) in cfg.branches.iter().enumerate() {
        let a = actions[i * kk + k] as usize;
        let a_star = out.next_actions[i * kk + k] as usize;
        let row = |j: usize| (i * n + j) * na..(i * n + j + 1) * na;
        let m = c51_project(cfg, &target_s2.probs[k][row(a_star)], reward, done);
        let logp = &online_s.log_probs[k][row(a)];
        let p = &online_s.probs[k][row(a)];
        out.branch_loss[i * kk + k] = -m.iter().zip(logp).map(|(mz, lz)| mz * lz).sum::<f64>();
        let mass: f64 = m.iter().sum();
        for (z, d) in out.dlogits[k][row(a)].iter_mut().enumerate() {
            *d = c * (p[z] * mass - m[z]);
        }
        out.targets[k][i * na..(i + 1) * na].copy_from_slice(&m);
    }
}

/// Row i of the scalar loss: the BDQ target y, the TD errors, Huber and its logit gradient.
#[allow(clippy::too_many_arguments)]
fn scalar_row(
    cfg: &QNetConfig,
    i: usize,
    c: f64,
    online_s: &Forward,
    target_s2: &Forward,
    actions: &[i32],
    reward: f32,
    done: f32,
    out: &mut Loss,
) {
    let kk = cfg.num_branches();
    let kappa = f64::from(cfg.huber_kappa);
    let next: f64 = cfg
        .branches
        .iter()
        .enumerate()
        .map(|(k, &n)| target_s2.q[k][i * n + out.next_actions[i * kk + k] as usize])
        .sum::<f64>()
        / kk as f64;
    let y = f64::from(reward) + cfg.discount() * (1.0 - f64::from(done)) * next;
    let mut abs_td = 0.0;
    for (k, &n) in cfg.branches.iter().enumerate() {
        let a = actions[i * kk + k] as usize;
        let td = y - online_s.q[k][i * n + a];
        out.td[i * kk + k] = td;
        out.branch_loss[i * kk + k] = huber(td, kappa);
        out.dlogits[k][i * n + a] = -c * huber_grad(td, kappa);
        out.targets[k][i] = y;
        abs_td += td.abs();
    }
    out.per_sample_priority[i] = abs_td / kk as f64;
}

// ---------------------------------------------------------------------------------------------
// Backward
// ---------------------------------------------------------------------------------------------

/// Backward of `y = x W + b` over `rows` rows: adds `dW = x^T dy` and `db = sum_r dy[r]` into
/// `grads` at the layer's place, returns `dx = dy W^T`.
fn linear_backward<P: Copy + Into<f64>>(
    params: &[P],
    layer: &Layer,
    x: &[f64],
    dy: &[f64],
    grads: &mut [f64],
) -> Vec<f64> {
    let (n_in, n_out) = (layer.fan_in(), layer.fan_out());
    let w = &params[layer.weight.range()];
    let mut dx = vec![0.0; x.len()];
    for ((xr, dyr), dxr) in x.chunks_exact(n_in).zip(dy.chunks_exact(n_out)).zip(dx.chunks_exact_mut(n_in)) {
        let gw = &mut grads[layer.weight.range()];
        for ((&xi, gwi), (dxi, wi)) in xr.iter().zip(gw.chunks_exact_mut(n_out)).zip(dxr.iter_mut().zip(w.chunks_exact(n_out))) {
            for ((g, &d), &wio) in gwi.iter_mut().zip(dyr).zip(wi) {
                *g += xi * d;
                *dxi += d * wio.into();
            }
        }
        for (g, &d) in grads[layer.bias.range()].iter_mut().zip(dyr) {
            *g += d;
        }
    }
    dx
}

/// `dz = dy * [relu(z) > 0]`, from the stored activation.
fn relu_backward(mut dy: Vec<f64>, activation: &[f64]) -> Vec<f64> {
    for (d, &a) in dy.iter_mut().zip(activation) {
        if !(a > 0.0) {
            *d = 0.0;
        }
    }
    dy
}

/// `qnet_loss`'s last stage, the backward of [`dueling`] for every branch, as one head-output
/// gradient row per sample (B x [`output_width`], columns at [`output_offsets`]):
/// `dv[i, z] = sum_k sum_j dl_k[i, j, z]` (branches in order), and
/// `da_k[i, j, z] = dl_k[i, j, z] - (1/n_k) sum_j' dl_k[i, j', z]`.
pub fn head_grad(cfg: &QNetConfig, dlogits: &[Vec<f64>], b: usize) -> Vec<f64> {
    let (na, width, offsets) = (cfg.atoms, output_width(cfg), output_offsets(cfg));
    let mut dy = vec![0.0; b * width];
    for i in 0..b {
        let row = &mut dy[i * width..(i + 1) * width];
        for (k, (&n, dl)) in cfg.branches.iter().zip(dlogits).enumerate() {
            for z in 0..na {
                let at = |j: usize| (i * n + j) * na + z;
                let sum = (0..n).map(|j| dl[at(j)]).sum::<f64>();
                row[z] += sum;
                let mean = sum / n as f64;
                for j in 0..n {
                    row[offsets[k + 1] + j * na + z] = dl[at(j)] - mean;
                }
            }
        }
    }
    dy
}

/// `qnet_backward`: the gradient of `loss.loss` with respect to every parameter, in
/// [`layout`] order, by the chain rule from `loss.dlogits`: [`head_grad`], then
/// [`backward_from_head_grad`]. `fwd_s` is the online forward of s that the loss used, with
/// the same `params`.
pub fn backward<P: Copy + Into<f64>>(cfg: &QNetConfig, params: &[P], fwd_s: &Forward, loss: &Loss) -> Vec<f64> {
    let dy = head_grad(cfg, &loss.dlogits, fwd_s.batch);
    backward_from_head_grad(cfg, params, fwd_s, &dy)
}

/// The backward from the head-output gradient `dy` (B x [`output_width`]) through each head's
/// output layer, the heads' hidden layer (one matrix, so dh2 is one product) and the trunk.
/// Reads `states`, `h1`, `h2` and `heads_hidden` of `fwd_s` (the ReLU masks come from them).
pub fn backward_from_head_grad<P: Copy + Into<f64>>(cfg: &QNetConfig, params: &[P], fwd_s: &Forward, dy: &[f64]) -> Vec<f64> {
    let n = net(cfg);
    let (b, width, hw, offsets) = (fwd_s.batch, output_width(cfg), hidden_width(cfg), output_offsets(cfg));
    let mut grads = vec![0.0; param_count(cfg)];
    let mut dhh = vec![0.0; b * hw];
    let mut scatter = |cols: &[f64], col: usize, w: usize| {
        for (dst, src) in dhh.chunks_exact_mut(hw).zip(cols.chunks_exact(w)) {
            dst[col..col + w].copy_from_slice(src);
        }
    };
    let dv = columns(dy, width, 0, cfg.atoms);
    let dvh = linear_backward(params, &n.value_out, &fwd_s.value_hidden(cfg), &dv, &mut grads);
    scatter(&dvh, 0, cfg.value_hidden);
    for (k, l) in n.adv_out.iter().enumerate() {
        let da = columns(dy, width, offsets[k + 1], l.fan_out());
        let dah = linear_backward(params, l, &fwd_s.adv_hidden(cfg, k), &da, &mut grads);
        scatter(&dah, cfg.value_hidden + k * cfg.adv_hidden, cfg.adv_hidden);
    }
    let dhh = relu_backward(dhh, &fwd_s.heads_hidden);
    let dh2 = linear_backward(params, &n.heads, &fwd_s.h2, &dhh, &mut grads);
    let dh2 = relu_backward(dh2, &fwd_s.h2);
    let dh1 = linear_backward(params, &n.trunk2, &fwd_s.h1, &dh2, &mut grads);
    let dh1 = relu_backward(dh1, &fwd_s.h1);
    linear_backward(params, &n.trunk1, &fwd_s.states, &dh1, &mut grads);
    grads
}

// ---------------------------------------------------------------------------------------------
// Optimizer
// ---------------------------------------------------------------------------------------------

/// Global L2 norm `sqrt(sum_i g_i^2)`, the sum in increasing i.
pub fn grad_norm(g: &[f64]) -> f64 {
    g.iter().map(|x| x * x).sum::<f64>().sqrt()
}

/// PyTorch `clip_grad_norm_`: `scale = min(1, max_norm / (norm + 1e-6))`, `g *= scale`;
/// returns the scale (exactly 1 when the norm is within the bound, leaving g unchanged).
pub fn clip_grads(g: &mut [f64], max_norm: f64) -> f64 {
    let scale = (max_norm / (grad_norm(g) + 1e-6)).min(1.0);
    if scale < 1.0 {
        for x in g.iter_mut() {
            *x *= scale;
        }
    }
    scale
}

/// Adam's moments and step count.
#[derive(Clone, Debug, PartialEq)]
pub struct AdamState {
    pub m: Vec<f64>,
    pub v: Vec<f64>,
    /// Updates applied so far.
    pub step: u32,
}

impl AdamState {
    pub fn new(n: usize) -> Self {
        AdamState { m: vec![0.0; n], v: vec![0.0; n], step: 0 }
    }
}

/// `qnet_adam` (Kingma and Ba 2015, Algorithm 1; PyTorch `Adam`, no weight decay): first
/// `t = step + 1` (so the first update uses t = 1), then per element
///
/// ```text
/// m = beta1 m + (1 - beta1) g          v = beta2 v + (1 - beta2) g^2
/// mhat = m / (1 - beta1^t)             vhat = v / (1 - beta2^t)
/// p -= lr mhat / (sqrt(vhat) + eps)
/// ```
///
/// with `beta^t = powf(beta, t)`. PyTorch's `p -= (lr / bc1) m / (sqrt(v) / sqrt(bc2) + eps)`
/// is the same expression. Requires params, grads, m and v of one length.
pub fn adam_step(cfg: &QNetConfig, params: &mut [f64], grads: &[f64], state: &mut AdamState) {
    state.step = state.step.saturating_add(1);
    let t = f64::from(state.step);
    let (b1, b2) = (f64::from(cfg.adam_beta1), f64::from(cfg.adam_beta2));
    let (lr, eps) = (f64::from(cfg.lr), f64::from(cfg.adam_eps));
    let (bc1, bc2) = (1.0 - b1.powf(t), 1.0 - b2.powf(t));
    for (((p, &g), m), v) in params.iter_mut().zip(grads).zip(state.m.iter_mut()).zip(state.v.iter_mut()) {
        *m = b1 * *m + (1.0 - b1) * g;
        *v = b2 * *v + (1.0 - b2) * g * g;
        let (mhat, vhat) = (*m / bc1, *v / bc2);
        *p -= lr * mhat / (vhat.sqrt() + eps);
    }
}

/// `qnet_target_sync`: `None` copies online into target; `Some(tau)` is the Polyak average
/// (Lillicrap et al. 2016) `target = tau online + (1 - tau) target`, in f64 rounded once to f32.
pub fn target_sync(online: &[f32], target: &mut [f32], tau: Option<f32>) {
    match tau {
        None => {
            for (t, &o) in target.iter_mut().zip(online) {
                *t = o;
            }
        }
        Some(tau) => {
            let tau = f64::from(tau);
            for (t, &o) in target.iter_mut().zip(online) {
                *t = (tau * f64::from(o) + (1.0 - tau) * f64::from(*t)) as f32;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// One full update
// ---------------------------------------------------------------------------------------------

/// A batch or buffer that does not fit the config.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum QNetError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("the batch is empty: pass at least one transition")]
    EmptyBatch,
    #[error("{name} has {got} values, expected {want} ({shape}): size it from the batch and the config")]
    Length { name: &'static str, got: usize, want: usize, shape: String },
    #[error("action {value} at row {row}, branch {branch} is outside [0, {choices}): each action indexes its branch's {choices} choices")]
    Action { row: usize, branch: usize, value: i32, choices: usize },
}

fn check_len(name: &'static str, got: usize, want: usize, shape: String) -> Result<(), QNetError> {
    if got == want {
        Ok(())
    } else {
        Err(QNetError::Length { name, got, want, shape })
    }
}

/// Checks a batch against a config: B = `rewards.len()` >= 1, states and next states B x S,
/// actions B x K with each in `[0, n_k)`, dones and weights B. Returns B.
pub fn check_batch(cfg: &QNetConfig, batch: &Transitions, weights: &[f32]) -> Result<usize, QNetError> {
    let (b, s, kk) = (batch.rewards.len(), cfg.state_dim, cfg.num_branches());
    if b == 0 {
        return Err(QNetError::EmptyBatch);
    }
    check_len("states", batch.states.len(), b * s, format!("batch {b} x state_dim {s}"))?;
    check_len("next_states", batch.next_states.len(), b * s, format!("batch {b} x state_dim {s}"))?;
    check_len("actions", batch.actions.len(), b * kk, format!("batch {b} x {kk} branches"))?;
    check_len("dones", batch.dones.len(), b, format!("batch {b}"))?;
    check_len("weights", weights.len(), b, format!("batch {b}"))?;
    for (row, acts) in batch.actions.chunks_exact(kk).enumerate() {
        for (branch, (&value, &choices)) in acts.iter().zip(&cfg.branches).enumerate() {
            if value < 0 || value as usize >= choices {
                return Err(QNetError::Action { row, branch, value, choices });
            }
        }
    }
    Ok(b)
}

/// What one update reports.
#[derive(Clone, Debug, PartialEq)]
pub struct Update {
    /// The batch loss before the update.
    pub loss: f64,
    /// New replay priorities, in batch order (see [`Loss::per_sample_priority`]).
    pub priorities: Vec<f64>,
    /// Global gradient norm before clipping.
    pub grad_norm: f64,
    /// The clip scale applied (1 when the norm was within `grad_clip`).
    pub clip_scale: f64,
}

/// One full update of the online parameters: forward s (online), s' (online and target),
/// [`loss`], [`backward`], [`clip_grads`] at `grad_clip`, [`adam_step`] on the parameters
/// widened to f64, each rounded once back to f32 (the buffer the GPU holds). The target
/// parameters are not changed (see [`target_sync`]). Validates the config, the batch and the
/// buffer lengths first; on error nothing is changed.
pub fn update_step(
    cfg: &QNetConfig,
    online: &mut [f32],
    target: &[f32],
    adam: &mut AdamState,
    batch: &Transitions,
    weights: &[f32],
) -> Result<Update, QNetError> {
    cfg.validate()?;
    check_batch(cfg, batch, weights)?;
    let n = param_count(cfg);
    let shape = || format!("param_count {n}");
    check_len("online parameters", online.len(), n, shape())?;
    check_len("target parameters", target.len(), n, shape())?;
    check_len("Adam m", adam.m.len(), n, shape())?;
    check_len("Adam v", adam.v.len(), n, shape())?;

    let fwd_s = forward(cfg, online, &batch.states);
    let online_s2 = forward(cfg, online, &batch.next_states);
    let target_s2 = forward(cfg, target, &batch.next_states);
    let l = loss(cfg, &fwd_s, &online_s2, &target_s2, &batch.actions, &batch.rewards, &batch.dones, weights);
    let mut g = backward(cfg, online, &fwd_s, &l);
    let norm = grad_norm(&g);
    let clip_scale = clip_grads(&mut g, f64::from(cfg.grad_clip));
    let mut p: Vec<f64> = online.iter().map(|&x| f64::from(x)).collect();
    adam_step(cfg, &mut p, &g, adam);
    for (o, &x) in online.iter_mut().zip(&p) {
        *o = x as f32;
    }
    Ok(Update { loss: l.loss, priorities: l.per_sample_priority, grad_norm: norm, clip_scale })
}
