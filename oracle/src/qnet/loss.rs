//! The Double DQN loss of a batch (`qnet_loss`): C51 cross-entropy or scalar Huber, and its
//! gradient with respect to the logits of s.

use super::forward::Forward;
use super::QNetConfig;

/// The loss of one batch, its targets, and its gradient with respect to the logits of s.
#[derive(Clone, Debug, PartialEq)]
pub struct Loss {
    /// `(1/B) sum_i w_i L_i`.
    pub loss: f64,
    /// `L_i = (1/K) sum_k l_ik`: B.
    pub replay_sample_loss: Vec<f64>,
    /// New replay priority of each row, unweighted: C51 `L_i`, scalar `mean_k |TD_ik|`. B.
    pub replay_sample_priority: Vec<f64>,
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
/// Algorithm 1) for reward r and the row's bootstrap discount `g` (gamma^k, or 0 after a
/// terminal: [`Transitions::discounts`](crate::replay::Transitions::discounts)), widened to
/// f64: for each atom i
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
pub fn c51_project(cfg: &QNetConfig, p: &[f64], reward: f32, discount: f32) -> Vec<f64> {
    let na = cfg.atoms;
    let (lo, hi) = (f64::from(cfg.v_min), f64::from(cfg.v_max));
    let dz = (hi - lo) / (na - 1) as f64;
    let g = f64::from(discount);
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
/// `y = r + g (1/K) sum_k Q_target_k(s', a*_k)` with g the row's discount,
/// `TD_k = y - Q_k(s, a_k)`,
/// `l_ik = huber(TD_k, kappa)`, priority `mean_k |TD_k|`.
///
/// Both: `L_i = (1/K) sum_k l_ik`, `loss = (1/B) sum_i w_i L_i` (sums in increasing index).
/// The logit gradient, with `c_i = w_i / (B K)`, at the taken action `a_k` only:
/// C51 `c_i (probs_z sum_z' m_z' - m_z)` (= `c_i (probs - m)` as `sum m = 1`),
/// scalar `-c_i huber_grad(TD_k, kappa)`.
///
/// `actions` is B x K (i32), `rewards`, `discounts` (the bootstrap discount g of each row:
/// gamma^k, or 0 after a terminal), `weights` (importance weights) are B.
/// Requires a batch that [`check_batch`](super::check_batch) accepts.
#[allow(clippy::too_many_arguments)]
pub fn loss(
    cfg: &QNetConfig,
    online_s: &Forward,
    online_s2: &Forward,
    target_s2: &Forward,
    actions: &[i32],
    rewards: &[f32],
    discounts: &[f32],
    weights: &[f32],
) -> Loss {
    let next = next_actions(cfg, online_s2);
    loss_with_next_actions(
        cfg, online_s, target_s2, &next, actions, rewards, discounts, weights,
    )
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
    discounts: &[f32],
    weights: &[f32],
) -> Loss {
    let (b, kk, na) = (online_s.batch, cfg.num_branches(), cfg.atoms);
    let mut out = Loss {
        loss: 0.0,
        replay_sample_loss: vec![0.0; b],
        replay_sample_priority: vec![0.0; b],
        branch_loss: vec![0.0; b * kk],
        next_actions: next.to_vec(),
        targets: vec![vec![0.0; b * na]; kk],
        td: if na > 1 {
            Vec::new()
        } else {
            vec![0.0; b * kk]
        },
        dlogits: cfg
            .branches
            .iter()
            .map(|&n| vec![0.0; b * n * na])
            .collect(),
    };
    for i in 0..b {
        let c = f64::from(weights[i]) / (b * kk) as f64;
        if na > 1 {
            c51_row(
                cfg,
                i,
                c,
                online_s,
                target_s2,
                actions,
                rewards[i],
                discounts[i],
                &mut out,
            );
        } else {
            scalar_row(
                cfg,
                i,
                c,
                online_s,
                target_s2,
                actions,
                rewards[i],
                discounts[i],
                &mut out,
            );
        }
        let li = out.branch_loss[i * kk..(i + 1) * kk].iter().sum::<f64>() / kk as f64;
        out.replay_sample_loss[i] = li;
        if na > 1 {
            out.replay_sample_priority[i] = li;
        }
    }
    let total: f64 = out
        .replay_sample_loss
        .iter()
        .zip(weights)
        .map(|(&l, &w)| f64::from(w) * l)
        .sum();
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
    discount: f32,
    out: &mut Loss,
) {
    let (kk, na) = (cfg.num_branches(), cfg.atoms);
    for (k, &n) in cfg.branches.iter().enumerate() {
        let a = actions[i * kk + k] as usize;
        let a_star = out.next_actions[i * kk + k] as usize;
        let row = |j: usize| (i * n + j) * na..(i * n + j + 1) * na;
        let m = c51_project(cfg, &target_s2.probs[k][row(a_star)], reward, discount);
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
    discount: f32,
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
    let y = f64::from(reward) + f64::from(discount) * next;
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
    out.replay_sample_priority[i] = abs_td / kk as f64;
}
