//! The Q-network's optimizer: the spec of the kernels `optimizer_grad_norm` (global L2 norm and
//! clipping), `optimizer_adam` (Adam, Kingma and Ba 2015) and `optimizer_target_sync` in cuda/, and of
//! their launchers in src/optimizer.rs. One update ([`crate::qnet::update_step`]) clips and
//! steps; the target network follows by [`target_sync`], or in the training step by
//! [`target_sync_every`].

use crate::qnet::QNetConfig;

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
        AdamState {
            m: vec![0.0; n],
            v: vec![0.0; n],
            step: 0,
        }
    }
}

/// `optimizer_adam` (Kingma and Ba 2015, Algorithm 1; PyTorch `Adam`, no weight decay): first
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
    for (((p, &g), m), v) in params
        .iter_mut()
        .zip(grads)
        .zip(state.m.iter_mut())
        .zip(state.v.iter_mut())
    {
        *m = b1 * *m + (1.0 - b1) * g;
        *v = b2 * *v + (1.0 - b2) * g * g;
        let (mhat, vhat) = (*m / bc1, *v / bc2);
        *p -= lr * mhat / (vhat.sqrt() + eps);
    }
}

/// `optimizer_target_sync`: `None` copies online into target; `Some(tau)` is the Polyak average
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

/// `optimizer_target_sync_every` (the training step's hard sync, decided on the device):
/// `target = online`, element for element, where the update count `step` (Adam updates
/// applied so far: the control block's step after this update) is a multiple of `period`;
/// otherwise `target` is left untouched. A copy: bitwise on both sides. `period` is at least
/// 1 (the launcher refuses 0; here 0 copies only at step 0, the one multiple of 0).
/// Copies `min(online.len(), target.len())` values.
pub fn target_sync_every(step: u32, period: u32, online: &[f32], target: &mut [f32]) {
    if step.is_multiple_of(period) {
        target_sync(online, target, None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vals(n: usize, base: f32) -> Vec<f32> {
        (0..n).map(|i| base + i as f32 * 0.25 - 3.0).collect()
    }

    #[test]
    fn target_sync_every_copies_exactly_on_multiples_of_the_period() {
        let online = vals(7, 1.5);
        for (step, period) in [(0, 1), (1, 1), (6, 3), (1000, 1000), (2000, 1000)] {
            let mut target = vals(7, -9.0);
            target_sync_every(step, period, &online, &mut target);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&target), bits(&online), "step {step} period {period}");
        }
    }

    #[test]
    fn target_sync_every_leaves_the_target_untouched_between_multiples() {
        let online = vals(7, 1.5);
        for (step, period) in [(1, 2), (5, 3), (999, 1000), (1001, 1000), (u32::MAX, 2)] {
            let before = vec![f32::NAN, -0.0, 1.0, f32::INFINITY, 2.5, -7.0, 3.0];
            let mut target = before.clone();
            target_sync_every(step, period, &online, &mut target);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&target), bits(&before), "step {step} period {period}");
        }
    }

    #[test]
    fn target_sync_every_copies_special_values_bit_for_bit() {
        let online = vec![f32::NAN, -0.0, f32::NEG_INFINITY, f32::from_bits(1), 1e38];
        let mut target = vec![1.0; 5];
        target_sync_every(12, 4, &online, &mut target);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&target), bits(&online));
    }

    #[test]
    fn target_sync_every_at_period_one_is_the_hard_target_sync() {
        let online = vals(5, 0.3);
        let (mut a, mut b) = (vals(5, 8.0), vals(5, 8.0));
        target_sync_every(17, 1, &online, &mut a);
        target_sync(&online, &mut b, None);
        assert_eq!(a, b);
    }
}
