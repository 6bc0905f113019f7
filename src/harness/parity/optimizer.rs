//! GPU-vs-oracle checks of the Q-network's optimizer kernels (spec: tallyho_oracle::qnet):
//! `optimizer_grad_norm`, `optimizer_adam`, `optimizer_target_sync` (its Polyak form and its
//! `optimizer_target_sync_every` entry).

use super::uniform;
use crate::error::Result;
use crate::runtime::Gpu;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use tallyho_oracle::{compare_bitwise, compare_exact, compare_f32, Comparison};

/// Double arithmetic rounded once to float on the GPU against f64 from the same float
/// inputs: at most one float ulp (plus a floor far below any value the checks produce).
pub const ONE_ULP: tallyho_oracle::Tolerance = tallyho_oracle::Tolerance {
    atol: 1e-30,
    rtol: 1.2e-7,
    exact: false,
    norm: false,
    reason: "double arithmetic rounded once to float",
};

/// `optimizer_grad_norm` on `n` gradients of magnitude `scale`: norm and clip scale within one
/// ulp of the oracle's, the step advanced by one.
pub fn check_optimizer_grad_norm(
    gpu: &Gpu,
    n: usize,
    scale: f32,
    seed: u64,
) -> Result<Vec<Comparison>> {
    use tallyho_oracle::optimizer::clip_grads;
    use tallyho_oracle::optimizer::grad_norm;
    use tallyho_oracle::qnet::QNetConfig;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let cfg = QNetConfig::default();
    let g = uniform(&mut rng, n, scale);
    let mut opt = crate::optimizer::Optimizer::new(gpu, &cfg, n)?;
    opt.grad_norm(&gpu.stream.clone_htod(&g)?.as_view())?;
    let ctl = opt.ctl()?;
    let mut g64: Vec<f64> = g.iter().map(|&x| f64::from(x)).collect();
    let norm = grad_norm(&g64);
    let want_scale = clip_grads(&mut g64, f64::from(cfg.grad_clip));
    Ok(vec![
        compare_f32("norm", &[ctl.norm], &[norm], ONE_ULP),
        compare_f32("scale", &[ctl.scale as f32], &[want_scale], ONE_ULP),
        compare_exact("step", &[ctl.step], &[1]),
    ])
}

/// One `optimizer_grad_norm` + `optimizer_adam` step from random parameters, moments and step count.
pub fn check_optimizer_adam(
    gpu: &Gpu,
    n: usize,
    step: u32,
    grad_scale: f32,
    seed: u64,
) -> Result<Vec<Comparison>> {
    use tallyho_oracle::optimizer::adam_step;
    use tallyho_oracle::optimizer::clip_grads;
    use tallyho_oracle::optimizer::AdamState;
    use tallyho_oracle::qnet::QNetConfig;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let cfg = QNetConfig {
        lr: 1e-3,
        ..QNetConfig::default()
    };
    let (p, g, m) = (
        uniform(&mut rng, n, 1.0),
        uniform(&mut rng, n, grad_scale),
        uniform(&mut rng, n, 0.1),
    );
    let v: Vec<f32> = uniform(&mut rng, n, 0.1).iter().map(|x| x * x).collect();
    let mut opt = crate::optimizer::Optimizer::new(gpu, &cfg, n)?;
    opt.set_state(&m, &v, step)?;
    let mut dp = gpu.stream.clone_htod(&p)?;
    opt.step(
        &mut dp.as_view_mut(),
        &gpu.stream.clone_htod(&g)?.as_view(),
        None,
    )?;
    let wide = |x: &[f32]| x.iter().map(|&y| f64::from(y)).collect::<Vec<f64>>();
    let mut g64 = wide(&g);
    clip_grads(&mut g64, f64::from(cfg.grad_clip));
    let mut p64 = wide(&p);
    let mut st = AdamState {
        m: wide(&m),
        v: wide(&v),
        step,
    };
    adam_step(&cfg, &mut p64, &g64, &mut st);
    Ok(vec![
        compare_f32("params", &gpu.stream.clone_dtoh(&dp)?, &p64, ONE_ULP),
        compare_f32("m", &gpu.stream.clone_dtoh(&opt.m)?, &st.m, ONE_ULP),
        compare_f32("v", &gpu.stream.clone_dtoh(&opt.v)?, &st.v, ONE_ULP),
        compare_exact("step", &[opt.ctl()?.step], &[st.step]),
    ])
}

/// `optimizer_target_sync`, hard copy and Polyak averages, bitwise against the oracle.
pub fn check_optimizer_target_sync(gpu: &Gpu, n: usize, seed: u64) -> Result<Vec<Comparison>> {
    use tallyho_oracle::optimizer::target_sync;
    use tallyho_oracle::qnet::QNetConfig;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let (online, target) = (uniform(&mut rng, n, 1.0), uniform(&mut rng, n, 1.0));
    let opt = crate::optimizer::Optimizer::new(gpu, &QNetConfig::default(), n)?;
    let don = gpu.stream.clone_htod(&online)?;
    let mut out = Vec::new();
    for tau in [None, Some(0.005), Some(0.5)] {
        let mut dt = gpu.stream.clone_htod(&target)?;
        opt.target_sync(&don.as_view(), &mut dt.as_view_mut(), tau)?;
        let mut want = target.clone();
        target_sync(&online, &mut want, tau);
        let name = match tau {
            None => "target (hard copy)".to_string(),
            Some(t) => format!("target (tau {t})"),
        };
        out.push(compare_bitwise(&name, &gpu.stream.clone_dtoh(&dt)?, &want));
    }
    Ok(out)
}

/// `optimizer_target_sync_every` on `n` parameters with `period`, at update counts on and
/// off the period's multiples (0, period - 1, period, period + 1, 2 period, 7 period + 3 and
/// the largest count), each count set in the device control block (`Optimizer::set_state`):
/// the target copied bitwise where the count is a multiple, untouched elsewhere, as the
/// oracle's `target_sync_every`; and the oracle's decision itself against `step % period`.
pub fn check_optimizer_target_sync_every(
    gpu: &Gpu,
    n: usize,
    period: u32,
    seed: u64,
) -> Result<Vec<Comparison>> {
    use tallyho_oracle::optimizer::target_sync_every;
    use tallyho_oracle::qnet::QNetConfig;
    if period == 0 {
        return Err(crate::error::Error::Shape(
            "target sync period 0: check a period of 1 or more".into(),
        ));
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let (online, target) = (uniform(&mut rng, n, 1.0), uniform(&mut rng, n, 1.0));
    let mut opt = crate::optimizer::Optimizer::new(gpu, &QNetConfig::default(), n)?;
    let don = gpu.stream.clone_htod(&online)?;
    let zeros = vec![0.0f32; n];
    let steps = [
        0,
        period - 1,
        period,
        period.saturating_add(1),
        period.saturating_mul(2),
        period.saturating_mul(7).saturating_add(3),
        u32::MAX,
    ];
    let mut out = Vec::new();
    for (t, step) in steps.into_iter().enumerate() {
        opt.set_state(&zeros, &zeros, step)?;
        let mut dt = gpu.stream.clone_htod(&target)?;
        opt.target_sync_every(&don.as_view(), &mut dt.as_view_mut(), period)?;
        let mut want = target.clone();
        target_sync_every(step, period, &online, &mut want);
        let due = step % period == 0;
        let expected = if due { &online } else { &target };
        let what = if due { "copied" } else { "untouched" };
        let declared = |mut c: Comparison| {
            c.tolerance = tallyho_oracle::tolerance::TARGET_SYNC_EVERY;
            c
        };
        super::merge_step(
            &mut out,
            t,
            vec![
                declared(compare_bitwise(
                    &format!("target ({what})"),
                    &gpu.stream.clone_dtoh(&dt)?,
                    &want,
                )),
                declared(compare_bitwise(
                    &format!("oracle target ({what})"),
                    &want,
                    expected,
                )),
            ],
        );
    }
    Ok(out)
}
