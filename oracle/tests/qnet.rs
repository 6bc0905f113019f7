//! Properties of the Q-network oracle: the backward is the derivative of the loss, the C51
//! projection keeps the mass, the dueling combination is centred, Adam and clipping follow
//! PyTorch, the initialisation and layout are what the GPU uploads.

use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tallyho_oracle::optimizer::{self, AdamState};
use tallyho_oracle::qnet::{self, Forward, QNetConfig, QNetError};
use tallyho_oracle::replay::Transitions;

/// A small network: S = 5, h1 = 7, h2 = 6, vh = 4, ah = 3, branches [3, 2, 2].
fn small(atoms: usize) -> QNetConfig {
    QNetConfig {
        state_dim: 5,
        h1: 7,
        h2: 6,
        value_hidden: 4,
        adv_hidden: 3,
        branches: vec![3, 2, 2],
        atoms,
        v_min: -2.0,
        v_max: 2.0,
        gamma: 0.9,
        n_step: 2,
        huber_kappa: 0.5,
        seed: 11,
        ..QNetConfig::default()
    }
}

/// A seeded batch of B rows: states in [-1, 1), random actions, rewards in [-3, 3) (large
/// enough that some C51 targets clamp and some Huber errors pass kappa), row 1 terminal
/// (discount 0), the others bootstrapping with gamma^k for k = 1, 2 (n_step 2; a window cut
/// short by a truncation has k < n).
fn batch(cfg: &QNetConfig, b: usize, seed: u64) -> (Transitions, Vec<f32>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let s = cfg.state_dim;
    let mut t = Transitions {
        states: (0..b * s).map(|_| rng.gen_range(-1.0..1.0)).collect(),
        next_states: (0..b * s).map(|_| rng.gen_range(-1.0..1.0)).collect(),
        actions: Vec::new(),
        rewards: (0..b).map(|_| rng.gen_range(-3.0..3.0)).collect(),
        discounts: (0..b)
            .map(|i| {
                if i == 1 {
                    0.0
                } else {
                    (0..1 + i % 2).fold(1.0f32, |d, _| d * cfg.gamma)
                }
            })
            .collect(),
    };
    for _ in 0..b {
        for &n in &cfg.branches {
            t.actions.push(rng.gen_range(0..n as i32));
        }
    }
    let w = (0..b).map(|_| rng.gen_range(0.3..1.0)).collect();
    (t, w)
}

fn widen(p: &[f32]) -> Vec<f64> {
    p.iter().map(|&x| f64::from(x)).collect()
}

/// The loss as a function of the online parameters with the targets held fixed: the two s'
/// forwards are computed once and passed unchanged.
fn loss_at(
    cfg: &QNetConfig,
    params: &[f64],
    t: &Transitions,
    w: &[f32],
    on2: &Forward,
    tg2: &Forward,
) -> qnet::Loss {
    let f = qnet::forward(cfg, params, &t.states);
    qnet::loss(cfg, &f, on2, tg2, &t.actions, &t.rewards, &t.discounts, w)
}

/// Central differences `(L(p + h e_i) - L(p - h e_i)) / 2h` for every parameter against the
/// backward. Bound `|g_fd - g| <= 1e-8 + 1e-6 |g|` with h = 1e-5 in f64: the truncation error
/// is `h^2 |L'''| / 6 ~ 2e-11 |L'''|` and the rounding error `~ eps |L| / h ~ 2e-11 |L|`, both
/// far below 1e-8 for these O(1) losses (observed: at most ~3e-11), while a wrong term or
/// index errs by O(|g|). The
/// loss is piecewise smooth: a step of h moves a pre-activation or a TD error by at most
/// ~1e-5, so a ReLU or Huber kink inside the stencil has probability ~1e-3 per case; the
/// seeds are fixed, so a pass is deterministic (the Huber margin is asserted below).
fn check_backward_against_finite_differences(atoms: usize, b: usize, init_seed: u64, seed: u64) {
    let cfg = QNetConfig {
        seed: init_seed,
        ..small(atoms)
    };
    cfg.validate().unwrap();
    let p = widen(&qnet::init_params(&cfg));
    let target = widen(&qnet::init_params(&QNetConfig {
        seed: cfg.seed + 1,
        ..cfg.clone()
    }));
    let (t, w) = batch(&cfg, b, seed);
    let on2 = qnet::forward(&cfg, &p, &t.next_states);
    let tg2 = qnet::forward(&cfg, &target, &t.next_states);
    let fwd = qnet::forward(&cfg, &p, &t.states);
    let l = qnet::loss(
        &cfg,
        &fwd,
        &on2,
        &tg2,
        &t.actions,
        &t.rewards,
        &t.discounts,
        &w,
    );
    if atoms == 1 {
        let kappa = f64::from(cfg.huber_kappa);
        assert!(
            l.td.iter().all(|d| (d.abs() - kappa).abs() > 1e-3),
            "a TD error sits at the Huber kink: {:?}",
            l.td
        );
    }
    let g = qnet::backward(&cfg, &p, &fwd, &l);
    assert_eq!(g.len(), p.len());

    let h = 1e-5;
    let mut worst = 0.0f64;
    for i in 0..p.len() {
        let mut q = p.clone();
        q[i] = p[i] + h;
        let up = loss_at(&cfg, &q, &t, &w, &on2, &tg2).loss;
        q[i] = p[i] - h;
        let down = loss_at(&cfg, &q, &t, &w, &on2, &tg2).loss;
        let fd = (up - down) / (2.0 * h);
        let err = (fd - g[i]).abs();
        let bound = 1e-8 + 1e-6 * g[i].abs();
        let name = qnet::layout(&cfg)
            .into_iter()
            .find(|v| v.range().contains(&i))
            .unwrap()
            .name;
        assert!(err <= bound, "NA {atoms}, B {b}: parameter {i} ({name}): backward {:e}, fd {fd:e}, error {err:e} > {bound:e}", g[i]);
        worst = worst.max(err);
    }
    let nonzero = g.iter().filter(|x| x.abs() > 1e-9).count();
    eprintln!(
        "NA {atoms}, B {b}: {} parameters, {nonzero} with nonzero gradient, worst error {worst:e}",
        p.len()
    );
    // Not vacuous: with three rows every tensor receives gradient (at B = 1 dead ReLUs
    // legitimately zero whole rows and columns).
    if b == 3 {
        for v in qnet::layout(&cfg) {
            assert!(
                g[v.range()].iter().any(|x| x.abs() > 1e-9),
                "NA {atoms}: {} has an all-zero gradient",
                v.name
            );
        }
    }
}

#[test]
fn scalar_backward_matches_finite_differences_for_every_parameter() {
    check_backward_against_finite_differences(1, 1, 11, 3);
    // Init seeds 16 (scalar) and 13 (C51): at this width (ah = 3) some seeds leave a whole
    // head dead on three rows (its biases all negative), which the non-vacuity check refuses.
    check_backward_against_finite_differences(1, 3, 16, 4);
}

#[test]
fn c51_backward_matches_finite_differences_for_every_parameter() {
    check_backward_against_finite_differences(5, 1, 11, 5);
    check_backward_against_finite_differences(5, 3, 13, 6);
}

#[test]
fn scalar_batch_exercises_both_huber_regimes() {
    let cfg = small(1);
    let p = qnet::init_params(&cfg);
    let (t, w) = batch(&cfg, 3, 7);
    let fwd = qnet::forward(&cfg, &p, &t.states);
    let s2 = qnet::forward(&cfg, &p, &t.next_states);
    let l = qnet::loss(
        &cfg,
        &fwd,
        &s2,
        &s2,
        &t.actions,
        &t.rewards,
        &t.discounts,
        &w,
    );
    let kappa = f64::from(cfg.huber_kappa);
    assert!(
        l.td.iter().any(|d| d.abs() <= kappa) && l.td.iter().any(|d| d.abs() > kappa),
        "td {:?}",
        l.td
    );
}

fn c51(atoms: usize, v_min: f32, v_max: f32, gamma: f32) -> QNetConfig {
    QNetConfig {
        atoms,
        v_min,
        v_max,
        gamma,
        n_step: 1,
        ..QNetConfig::default()
    }
}

fn normalised(raw: &[f64]) -> Vec<f64> {
    let s: f64 = raw.iter().sum();
    raw.iter().map(|x| x / s).collect()
}

#[test]
fn c51_projection_conserves_mass_at_integer_positions_and_both_clamps() {
    // Support -2, -1, 0, 1, 2 (dz = 1).
    let cfg = c51(5, -2.0, 2.0, 0.5);
    let p = normalised(&[0.1, 0.3, 0.2, 0.25, 0.15]);
    let sum = |m: &[f64]| m.iter().sum::<f64>();
    // Terminal (discount 0) with r = 1: every Tz = 1, b = 3 exactly, l == u: a point mass on atom 3.
    let m = qnet::c51_project(&cfg, &p, 1.0, 0.0);
    assert!(
        (m[3] - 1.0).abs() < 1e-15 && (sum(&m) - 1.0).abs() < 1e-15,
        "{m:?}"
    );
    // Clamped at the top and at the bottom: a point mass on the end atom.
    let m = qnet::c51_project(&cfg, &p, 100.0, 0.5);
    assert!((m[4] - 1.0).abs() < 1e-15, "{m:?}");
    let m = qnet::c51_project(&cfg, &p, -100.0, 0.5);
    assert!((m[0] - 1.0).abs() < 1e-15, "{m:?}");
    // Discount 0.5, r = 0: Tz = z / 2 mixes integer (l == u) and fractional positions.
    let m = qnet::c51_project(&cfg, &p, 0.0, 0.5);
    assert!((sum(&m) - 1.0).abs() < 1e-15, "{m:?}");
    // Partly clamped: r = 1.5, Tz = 1.5 + z / 2 clamps the upper atoms.
    let m = qnet::c51_project(&cfg, &p, 1.5, 0.5);
    assert!((sum(&m) - 1.0).abs() < 1e-15, "{m:?}");
}

#[test]
fn c51_projection_keeps_the_mean_when_nothing_clamps() {
    let cfg = c51(5, -2.0, 2.0, 0.5);
    let z = qnet::support(&cfg);
    let p = normalised(&[0.1, 0.3, 0.2, 0.25, 0.15]);
    let m = qnet::c51_project(&cfg, &p, 0.3, 0.5);
    let mean_m: f64 = m.iter().zip(&z).map(|(a, b)| a * b).sum();
    let mean_tz: f64 = p
        .iter()
        .zip(&z)
        .map(|(a, b)| a * (f64::from(0.3f32) + 0.5 * b))
        .sum();
    assert!((mean_m - mean_tz).abs() < 1e-14, "{mean_m} vs {mean_tz}");
}

proptest! {
    #[test]
    fn c51_projection_conserves_mass_for_any_support_and_reward(
        atoms in 2usize..64, v_min in -50f32..0.0, width in 0.1f32..100.0, reward in -200f32..200.0,
        gamma in 0f32..=1.0, k in 1i32..=5, terminal in any::<bool>(), seed in any::<u64>()
    ) {
        let cfg = c51(atoms, v_min, v_min + width, gamma);
        // The row's discount as the transition stage makes it: 0, or gamma^k in float.
        let discount = if terminal { 0.0 } else { (0..k).fold(1.0f32, |d, _| d * gamma) };
        prop_assume!(cfg.validate().is_ok());
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let raw: Vec<f64> = (0..atoms).map(|_| rng.gen_range(0.0..1.0)).collect();
        let p = normalised(&raw);
        let m = qnet::c51_project(&cfg, &p, reward, discount);
        let total: f64 = m.iter().sum();
        // NA additions of terms at most 1: a few ulps per atom.
        prop_assert!((total - 1.0).abs() <= 4.0 * atoms as f64 * f64::EPSILON, "sum m = {}", total);
        prop_assert!(m.iter().all(|&x| x >= 0.0));
    }
}

#[test]
fn dueling_advantages_are_centred_per_atom() {
    for atoms in [1, 5] {
        let cfg = small(atoms);
        let p = qnet::init_params(&cfg);
        let (t, _) = batch(&cfg, 3, 9);
        let f = qnet::forward(&cfg, &p, &t.states);
        let na = atoms;
        for (k, &n) in cfg.branches.iter().enumerate() {
            for i in 0..f.batch {
                for z in 0..na {
                    let mean = (0..n)
                        .map(|j| f.logits[k][(i * n + j) * na + z] - f.value[i * na + z])
                        .sum::<f64>()
                        / n as f64;
                    assert!(
                        mean.abs() < 1e-15,
                        "NA {na} branch {k} row {i} atom {z}: mean {mean:e}"
                    );
                }
            }
        }
    }
}

#[test]
fn c51_q_is_the_mean_of_a_distribution_on_the_support() {
    let cfg = small(5);
    let f = qnet::forward(&cfg, &qnet::init_params(&cfg), &batch(&cfg, 3, 2).0.states);
    for (probs, q) in f.probs.iter().zip(&f.q) {
        for (row, &qj) in probs.chunks_exact(5).zip(q) {
            assert!((row.iter().sum::<f64>() - 1.0).abs() < 1e-14);
            assert!((-2.0..=2.0).contains(&qj));
        }
    }
}

#[test]
fn double_dqn_ties_pick_the_lowest_action() {
    // Zero advantage outputs: every action has the same Q, so a* = 0 in every branch.
    let cfg = small(5);
    let mut p = qnet::init_params(&cfg);
    // Zero every branch's output weights and biases (bo after the value head's NA).
    for v in qnet::layout(&cfg)
        .into_iter()
        .filter(|v| v.name.starts_with("wa2_"))
    {
        p[v.range()].iter_mut().for_each(|x| *x = 0.0);
    }
    let bo = qnet::tensor(&cfg, "bo").unwrap();
    p[bo.offset + cfg.atoms..bo.offset + bo.len()]
        .iter_mut()
        .for_each(|x| *x = 0.0);
    let (t, w) = batch(&cfg, 3, 1);
    let f = qnet::forward(&cfg, &p, &t.states);
    let s2 = qnet::forward(&cfg, &p, &t.next_states);
    let l = qnet::loss(&cfg, &f, &s2, &s2, &t.actions, &t.rewards, &t.discounts, &w);
    assert!(
        l.next_actions.iter().all(|&a| a == 0),
        "{:?}",
        l.next_actions
    );
}

#[test]
fn double_dqn_selects_with_the_online_net_and_evaluates_with_the_target() {
    let cfg = small(1);
    let online = qnet::init_params(&cfg);
    let target = qnet::init_params(&QNetConfig {
        seed: 99,
        ..cfg.clone()
    });
    let (t, w) = batch(&cfg, 3, 7);
    let f = qnet::forward(&cfg, &online, &t.states);
    let on2 = qnet::forward(&cfg, &online, &t.next_states);
    let tg2 = qnet::forward(&cfg, &target, &t.next_states);
    let l = qnet::loss(
        &cfg,
        &f,
        &on2,
        &tg2,
        &t.actions,
        &t.rewards,
        &t.discounts,
        &w,
    );
    let kk = cfg.branches.len();
    for i in 0..3 {
        let mut next = 0.0;
        for (k, &n) in cfg.branches.iter().enumerate() {
            let q = &on2.q[k][i * n..(i + 1) * n];
            let best = (0..n).fold(0, |b, j| if q[j] > q[b] { j } else { b });
            assert_eq!(l.next_actions[i * kk + k] as usize, best);
            next += tg2.q[k][i * n + best];
        }
        let y = f64::from(t.rewards[i]) + f64::from(t.discounts[i]) * next / kk as f64;
        assert!((l.targets[0][i] - y).abs() < 1e-15);
    }
}

#[test]
fn adam_first_step_moves_each_parameter_by_lr_times_the_sign() {
    let cfg = QNetConfig::default();
    let lr = f64::from(cfg.lr);
    let g = [0.3, -2.0, 1e-1, -5e-1, 7.0];
    let mut p = [1.0, -0.5, 0.25, 0.0, 3.0];
    let before = p;
    let mut st = AdamState::new(p.len());
    optimizer::adam_step(&cfg, &mut p, &g, &mut st);
    assert_eq!(st.step, 1);
    for i in 0..p.len() {
        let moved = before[i] - p[i];
        // mhat = g, vhat = g^2 at t = 1: the step is lr g / (|g| + eps), within lr eps / |g|.
        assert!(
            (moved - lr * g[i].signum()).abs() <= 1e-6 * lr,
            "element {i}: moved {moved:e}"
        );
    }
}

#[test]
fn adam_steps_decrease_a_quadratic() {
    let cfg = QNetConfig {
        lr: 1e-2,
        ..QNetConfig::default()
    };
    let c = [1.0, 10.0, 0.1, 3.0];
    let goal = [1.0, -1.0, 2.0, 0.5];
    let f = |p: &[f64]| {
        p.iter()
            .zip(&goal)
            .zip(&c)
            .map(|((x, t), c)| 0.5 * c * (x - t) * (x - t))
            .sum::<f64>()
    };
    let mut p = vec![0.0; 4];
    let mut st = AdamState::new(4);
    let mut last = f(&p);
    for step in 0..20 {
        let g: Vec<f64> = p
            .iter()
            .zip(&goal)
            .zip(&c)
            .map(|((x, t), c)| c * (x - t))
            .collect();
        optimizer::adam_step(&cfg, &mut p, &g, &mut st);
        let now = f(&p);
        assert!(now < last, "step {step}: {now} >= {last}");
        last = now;
    }
}

#[test]
fn clipping_scales_to_max_norm_above_it_and_leaves_gradients_below_it() {
    let mut g = vec![12.0, -16.0]; // norm 20
    let scale = optimizer::clip_grads(&mut g, 10.0);
    assert!(
        (optimizer::grad_norm(&g) - 10.0).abs() <= 10.0 * 1e-6,
        "norm {}",
        optimizer::grad_norm(&g)
    );
    assert!((scale - 0.5).abs() < 1e-7);
    let mut g = vec![3.0, 4.0]; // norm 5
    assert_eq!(optimizer::clip_grads(&mut g, 10.0), 1.0);
    assert_eq!(g, vec![3.0, 4.0]);
}

#[test]
fn target_sync_copies_or_averages() {
    let online = [1.0f32, -2.0, 4.0];
    let mut target = [0.0f32, 0.0, 2.0];
    optimizer::target_sync(&online, &mut target, Some(0.5));
    assert_eq!(target, [0.5, -1.0, 3.0]);
    optimizer::target_sync(&online, &mut target, Some(1.0));
    assert_eq!(target, online);
    let mut target = [9.0f32; 3];
    optimizer::target_sync(&online, &mut target, None);
    assert_eq!(target, online);
}

#[test]
fn init_is_one_chacha8_stream_in_layout_order() {
    let cfg = small(5);
    let p = qnet::init_params(&cfg);
    assert_eq!(p.len(), qnet::param_count(&cfg));
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    // Each element's fan-in: its tensor's rows for a weight, the preceding weight's rows for
    // b1, b2, bh; bo's value columns use vh, the branch columns ah.
    let mut fan = 0;
    for v in qnet::layout(&cfg) {
        for (c, i) in v.range().enumerate() {
            if v.rows > 1 {
                fan = v.rows;
            }
            let fan_in = if v.name == "bo" {
                if c < cfg.atoms {
                    cfg.value_hidden
                } else {
                    cfg.adv_hidden
                }
            } else {
                fan
            };
            let bound = 1.0 / (fan_in as f64).sqrt();
            assert_eq!(
                p[i],
                rng.gen_range(-bound..bound) as f32,
                "element {i} of {}",
                v.name
            );
            assert!(p[i].abs() <= bound as f32);
        }
    }
}

#[test]
fn init_is_deterministic_for_a_seed_and_differs_across_seeds() {
    let cfg = small(5);
    assert_eq!(qnet::init_params(&cfg), qnet::init_params(&cfg));
    let other = qnet::init_params(&QNetConfig {
        seed: cfg.seed + 1,
        ..cfg.clone()
    });
    let same = qnet::init_params(&cfg)
        .iter()
        .zip(&other)
        .filter(|(a, b)| a == b)
        .count();
    assert_eq!(same, 0);
}

#[test]
fn layout_is_contiguous_in_the_documented_order() {
    let cfg = QNetConfig::default();
    let views = qnet::layout(&cfg);
    let names: Vec<&str> = views.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(
        names,
        ["w1", "b1", "w2", "b2", "wh", "bh", "wv2", "wa2_0", "wa2_1", "wa2_2", "bo"]
    );
    let mut end = 0;
    for v in &views {
        assert_eq!(
            v.offset, end,
            "{} does not start where the previous tensor ends",
            v.name
        );
        end += v.len();
    }
    assert_eq!(end, qnet::param_count(&cfg));
    let shape = |name: &str| {
        views
            .iter()
            .find(|v| v.name == name)
            .map(|v| (v.rows, v.cols))
            .unwrap()
    };
    assert_eq!(shape("w1"), (32, 256));
    assert_eq!(shape("wh"), (256, 128 + 3 * 128));
    assert_eq!(shape("bo"), (1, 51 * (1 + 3 + 5 + 3)));
    assert_eq!(qnet::output_offsets(&cfg), [0, 51, 51 * 4, 51 * 9, 51 * 12]);
    assert_eq!(shape("wa2_1"), (128, 5 * 51));
}

#[test]
fn config_errors_name_the_value_and_the_fix() {
    let d = QNetConfig::default();
    assert!(d.validate().is_ok());
    let msg = |c: QNetConfig| c.validate().unwrap_err().to_string();
    assert_eq!(
        msg(QNetConfig { h1: 0, ..d.clone() }),
        "h1 is 0: it must be at least 1"
    );
    assert_eq!(
        msg(QNetConfig {
            gamma: 1.5,
            ..d.clone()
        }),
        "gamma = 1.5 is outside (0, 1]: use a discount such as 0.99"
    );
    assert!(msg(QNetConfig {
        v_min: 1.0,
        v_max: 1.0,
        ..d.clone()
    })
    .starts_with("v_max = 1 is outside (v_min, +inf)"));
    assert!(msg(QNetConfig {
        branches: vec![3, 0],
        ..d.clone()
    })
    .contains("branches is 0"));
    assert!(msg(QNetConfig {
        branches: vec![],
        ..d.clone()
    })
    .contains("branches.len()"));
    assert!(msg(QNetConfig {
        polyak_tau: Some(0.0),
        ..d.clone()
    })
    .starts_with("polyak_tau = 0 is outside (0, 1]"));
    assert!(msg(QNetConfig {
        lr: f32::NAN,
        ..d.clone()
    })
    .starts_with("lr = NaN"));
    // The support is irrelevant for a scalar Q.
    assert!(QNetConfig {
        atoms: 1,
        v_min: 1.0,
        v_max: 1.0,
        ..d
    }
    .validate()
    .is_ok());
}

#[test]
fn one_update_lowers_the_loss_on_its_own_batch() {
    for atoms in [1, 5] {
        let cfg = QNetConfig {
            lr: 1e-3,
            ..small(atoms)
        };
        let mut online = qnet::init_params(&cfg);
        let target = online.clone();
        let mut adam = AdamState::new(online.len());
        let (t, w) = batch(&cfg, 3, 21);
        let first = qnet::update_step(&cfg, &mut online, &target, &mut adam, &t, &w).unwrap();
        assert!(first.grad_norm > 0.0 && first.clip_scale == 1.0);
        assert_eq!(first.priorities.len(), 3);
        let second = qnet::update_step(&cfg, &mut online, &target, &mut adam, &t, &w).unwrap();
        assert!(
            second.loss < first.loss,
            "NA {atoms}: {} -> {}",
            first.loss,
            second.loss
        );
        assert_eq!(adam.step, 2);
    }
}

#[test]
fn update_is_deterministic_and_refuses_bad_batches_without_changing_anything() {
    let cfg = small(5);
    let start = qnet::init_params(&cfg);
    let (t, w) = batch(&cfg, 3, 8);
    let run = || {
        let mut p = start.clone();
        let mut adam = AdamState::new(p.len());
        let u = qnet::update_step(&cfg, &mut p, &start, &mut adam, &t, &w).unwrap();
        (p, u)
    };
    assert_eq!(run(), run());

    let mut p = start.clone();
    let mut adam = AdamState::new(p.len());
    let mut bad = t.clone();
    bad.actions[4] = 2; // branch 1 has 2 actions
    let err = qnet::update_step(&cfg, &mut p, &start, &mut adam, &bad, &w).unwrap_err();
    assert_eq!(
        err,
        QNetError::Action {
            row: 1,
            branch: 1,
            value: 2,
            choices: 2
        }
    );
    assert!(err
        .to_string()
        .starts_with("action 2 at row 1, branch 1 is outside [0, 2)"));
    let err = qnet::update_step(&cfg, &mut p, &start, &mut adam, &t, &w[..2]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "weights has 2 values, expected 3 (batch 3): size it from the batch and the config"
    );
    assert_eq!((p, adam.step), (start, 0));
}

/// `head_q` is `forward`'s Q in row layout, and its float reference `head_q_f32` stays within
/// float error of it: a few ulps of max |z| per softmax term and sum (51 atoms: well under
/// 1e-5 of the support's reach), far below the O(1) of a wrong index or atom.
#[test]
fn head_q_is_the_forward_q_and_its_float_reference_is_within_float_error() {
    for atoms in [1, 5, 51] {
        let cfg = QNetConfig {
            v_min: -10.0,
            v_max: 10.0,
            ..small(atoms)
        };
        let p = qnet::init_params(&cfg);
        let mut rng = ChaCha8Rng::seed_from_u64(atoms as u64);
        let states: Vec<f32> = (0..9 * cfg.state_dim)
            .map(|_| rng.gen_range(-3.0..3.0))
            .collect();
        let f = qnet::forward(&cfg, &p, &states);
        let (width, offsets) = (qnet::output_width(&cfg), qnet::output_offsets(&cfg));
        let yb = qnet::head_rows(&cfg, &f);
        assert_eq!(yb.len(), f.batch * width);
        assert_eq!(offsets.len(), cfg.branches.len() + 2);
        // The value's atoms open each row, then branch k at offsets[k + 1].
        assert_eq!(yb[..atoms], f.value[..atoms]);
        assert_eq!(
            yb[offsets[2]..offsets[3]],
            f.adv[1][..offsets[3] - offsets[2]]
        );
        let q = qnet::head_q(&cfg, &yb);
        assert_eq!(q, qnet::branch_rows(&cfg, &f.q, f.batch, 1), "NA {atoms}");
        // Row 1 starts with branch 0's actions of row 1.
        let a: usize = cfg.branches.iter().sum();
        assert_eq!(
            q[a..a + cfg.branches[0]],
            f.q[0][cfg.branches[0]..2 * cfg.branches[0]]
        );
        let q32 = qnet::head_q_f32(&cfg, &yb.iter().map(|&v| v as f32).collect::<Vec<f32>>());
        let worst = q32
            .iter()
            .zip(&q)
            .map(|(&a, &b)| (f64::from(a) - b).abs())
            .fold(0.0, f64::max);
        assert!(
            worst < 1e-5 * 10.0,
            "NA {atoms}: float reference off by {worst:e}"
        );
        assert!(
            q.iter().any(|v| v.abs() > 1e-3),
            "NA {atoms}: Q all near zero, the check is vacuous"
        );
    }
}
