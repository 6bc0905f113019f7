//! The backward pass (`qnet_backward`): the gradient of the loss with respect to every
//! parameter, by the chain rule from the logit gradient.

use super::forward::{columns, Forward};
use super::layout::{hidden_width, net, output_offsets, output_width, param_count, Layer};
use super::loss::Loss;
use super::QNetConfig;

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
    for ((xr, dyr), dxr) in x
        .chunks_exact(n_in)
        .zip(dy.chunks_exact(n_out))
        .zip(dx.chunks_exact_mut(n_in))
    {
        let gw = &mut grads[layer.weight.range()];
        for ((&xi, gwi), (dxi, wi)) in xr
            .iter()
            .zip(gw.chunks_exact_mut(n_out))
            .zip(dxr.iter_mut().zip(w.chunks_exact(n_out)))
        {
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

/// `qnet_loss`'s last stage, the backward of the dueling combination ([`super::head`]) for every branch, as one head-output
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
/// [`layout`](super::layout::layout) order, by the chain rule from `loss.dlogits`: [`head_grad`], then
/// [`backward_from_head_grad`]. `fwd_s` is the online forward of s that the loss used, with
/// the same `params`.
pub fn backward<P: Copy + Into<f64>>(
    cfg: &QNetConfig,
    params: &[P],
    fwd_s: &Forward,
    loss: &Loss,
) -> Vec<f64> {
    let dy = head_grad(cfg, &loss.dlogits, fwd_s.batch);
    backward_from_head_grad(cfg, params, fwd_s, &dy)
}

/// The backward from the head-output gradient `dy` (B x [`output_width`]) through each head's
/// output layer, the heads' hidden layer (one matrix, so dh2 is one product) and the trunk.
/// Reads `states`, `h1`, `h2` and `heads_hidden` of `fwd_s` (the ReLU masks come from them).
pub fn backward_from_head_grad<P: Copy + Into<f64>>(
    cfg: &QNetConfig,
    params: &[P],
    fwd_s: &Forward,
    dy: &[f64],
) -> Vec<f64> {
    let n = net(cfg);
    let (b, width, hw, offsets) = (
        fwd_s.batch,
        output_width(cfg),
        hidden_width(cfg),
        output_offsets(cfg),
    );
    let mut grads = vec![0.0; param_count(cfg)];
    let mut dhh = vec![0.0; b * hw];
    let mut scatter = |cols: &[f64], col: usize, w: usize| {
        for (dst, src) in dhh.chunks_exact_mut(hw).zip(cols.chunks_exact(w)) {
            dst[col..col + w].copy_from_slice(src);
        }
    };
    let dv = columns(dy, width, 0, cfg.atoms);
    let dvh = linear_backward(
        params,
        &n.value_out,
        &fwd_s.value_hidden(cfg),
        &dv,
        &mut grads,
    );
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
