//! The forward pass: trunk, heads, the dueling combination, softmax and Q (`qnet_forward`,
//! `qnet_head_matrix`, `qnet_head`, `qnet_head_q`).

use super::layout::{hidden_width, net, output_offsets, output_width, param_count, Layer};
use super::QNetConfig;

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
pub(super) fn columns(x: &[f64], ld: usize, col: usize, width: usize) -> Vec<f64> {
    x.chunks_exact(ld)
        .flat_map(|row| row[col..col + width].iter().copied())
        .collect()
}

impl Forward {
    /// The value head's hidden units `vh`: B x vh, columns `[0, vh)` of `heads_hidden`.
    pub fn value_hidden(&self, cfg: &QNetConfig) -> Vec<f64> {
        columns(&self.heads_hidden, hidden_width(cfg), 0, cfg.value_hidden)
    }

    /// Branch k's hidden units `ah_k`: B x ah, columns `[vh + k ah, vh + (k + 1) ah)`.
    pub fn adv_hidden(&self, cfg: &QNetConfig, k: usize) -> Vec<f64> {
        columns(
            &self.heads_hidden,
            hidden_width(cfg),
            cfg.value_hidden + k * cfg.adv_hidden,
            cfg.adv_hidden,
        )
    }
}

/// `qnet_forward` of B = `states.len() / S` states (row-major B x S), params in [`layout`](super::layout::layout):
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
/// param_count(cfg)` and `states.len()` a multiple of S ([`check_batch`](super::check_batch) checks a batch).
pub fn forward<P: Copy + Into<f64>>(cfg: &QNetConfig, params: &[P], states: &[f32]) -> Forward {
    debug_assert_eq!(
        params.len(),
        param_count(cfg),
        "parameter buffer of the wrong length: callers validate"
    );
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

/// The heads' output layers (`qnet_head_matrix`' product): `value` and `adv` of `f` from its
/// `heads_hidden`.
pub fn head_outputs<P: Copy + Into<f64>>(cfg: &QNetConfig, params: &[P], f: &mut Forward) {
    let n = net(cfg);
    f.value = linear(params, &n.value_out, &f.value_hidden(cfg), f.batch);
    f.adv = (0..cfg.num_branches())
        .map(|k| linear(params, &n.adv_out[k], &f.adv_hidden(cfg, k), f.batch))
        .collect();
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
            let q = p
                .chunks_exact(na)
                .map(|row| row.iter().zip(&z).map(|(pz, zz)| pz * zz).sum())
                .collect();
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
        adv: (0..cfg.num_branches())
            .map(|k| columns(yb, width, offsets[k + 1], offsets[k + 2] - offsets[k + 1]))
            .collect(),
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
pub fn branch_rows(
    cfg: &QNetConfig,
    per_branch: &[Vec<f64>],
    rows: usize,
    per_action: usize,
) -> Vec<f64> {
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
    let dz = if na > 1 {
        (hi - lo) / (na - 1) as f32
    } else {
        0.0
    };
    let mut q = Vec::new();
    for row in yb.chunks_exact(width.max(1)) {
        let value = &row[..na];
        for (k, &n) in cfg.branches.iter().enumerate() {
            let adv = &row[offsets[k + 1]..offsets[k + 2]];
            let mean: Vec<f32> = (0..na)
                .map(|z| (0..n).rev().map(|j| adv[j * na + z]).sum::<f32>() / n as f32)
                .collect();
            for j in 0..n {
                let logits: Vec<f32> = (0..na)
                    .map(|z| (value[z] + adv[j * na + z]) - mean[z])
                    .collect();
                if na == 1 {
                    q.push(logits[0]);
                    continue;
                }
                let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let e: Vec<f32> = logits.iter().map(|&l| (l - max).exp()).collect();
                let inv = 1.0 / e.iter().rev().sum::<f32>();
                q.push(
                    (0..na)
                        .rev()
                        .map(|z| e[z] * inv * (lo + z as f32 * dz))
                        .sum(),
                );
            }
        }
    }
    q
}
