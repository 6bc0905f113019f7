//! The optimizer kernels against the oracle: `qnet_grad_norm` (norm, clip scale, step),
//! `qnet_adam` (one step from arbitrary moments), `qnet_target_sync` (hard and Polyak), and
//! a captured optimizer step replaying bitwise like eager launches.

mod common;

use tallyho_oracle::Tolerance;

/// Double arithmetic rounded once to float on the GPU, against f64 from the same float
/// inputs: at most one float ulp, plus a floor far below any value the tests produce.
const ONE_ULP: Tolerance = Tolerance { atol: 1e-30, rtol: 1.2e-7, exact: false, reason: "double arithmetic rounded once to float" };

mod gpu {
    use super::common::*;
    use super::ONE_ULP;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;
    use tallyho::graph::GraphSlot;
    use tallyho::optimizer::Optimizer;
    use tallyho_oracle::qnet::{adam_step, clip_grads, grad_norm, target_sync, AdamState, QNetConfig};
    use tallyho_oracle::{compare_bitwise, compare_exact, compare_f32};

    fn random(rng: &mut ChaCha8Rng, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| rng.gen_range(-scale..scale)).collect()
    }

    #[test]
    fn grad_norm_and_clip_scale_match_the_oracle_and_advance_the_step() {
        let gpu = gpu();
        let mut rng = ChaCha8Rng::seed_from_u64(31);
        for (n, scale) in [(1, 3.0), (3, 0.1), (50, 1.0), (783, 20.0), (4096, 0.01), (1_000_003, 0.05)] {
            let cfg = QNetConfig::default();
            let g = random(&mut rng, n, scale);
            let mut opt = Optimizer::new(&gpu, &cfg, n).unwrap();
            opt.grad_norm(&gpu.stream.clone_htod(&g).unwrap()).unwrap();
            let ctl = opt.ctl().unwrap();
            let mut g64: Vec<f64> = g.iter().map(|&x| f64::from(x)).collect();
            let norm = grad_norm(&g64);
            let want_scale = clip_grads(&mut g64, f64::from(cfg.grad_clip));
            assert_all(&[
                compare_f32("norm", &[ctl.norm], &[norm], ONE_ULP),
                compare_f32("scale", &[ctl.scale as f32], &[want_scale], ONE_ULP),
                compare_exact("step", &[ctl.step], &[1]),
            ]);
            assert!(ctl.norm > 0.0);
        }
    }

    #[test]
    fn one_adam_step_matches_the_oracle_from_arbitrary_moments() {
        let gpu = gpu();
        let mut rng = ChaCha8Rng::seed_from_u64(32);
        for (n, step, gscale) in [(1, 0, 1.0), (3, 7, 50.0), (783, 0, 0.3), (100_003, 1234, 5.0)] {
            let cfg = QNetConfig { lr: 1e-3, ..QNetConfig::default() };
            let (p, g, m) = (random(&mut rng, n, 1.0), random(&mut rng, n, gscale), random(&mut rng, n, 0.1));
            let v: Vec<f32> = random(&mut rng, n, 0.1).iter().map(|x| x * x).collect();
            let mut opt = Optimizer::new(&gpu, &cfg, n).unwrap();
            opt.set_state(&m, &v, step).unwrap();
            let mut dp = gpu.stream.clone_htod(&p).unwrap();
            opt.step(&mut dp, &gpu.stream.clone_htod(&g).unwrap()).unwrap();

            let mut g64: Vec<f64> = g.iter().map(|&x| f64::from(x)).collect();
            clip_grads(&mut g64, f64::from(cfg.grad_clip));
            let mut p64: Vec<f64> = p.iter().map(|&x| f64::from(x)).collect();
            let mut st = AdamState { m: m.iter().map(|&x| f64::from(x)).collect(), v: v.iter().map(|&x| f64::from(x)).collect(), step };
            adam_step(&cfg, &mut p64, &g64, &mut st);
            assert_all(&[
                compare_f32("params", &gpu.stream.clone_dtoh(&dp).unwrap(), &p64, ONE_ULP),
                compare_f32("m", &gpu.stream.clone_dtoh(&opt.m).unwrap(), &st.m, ONE_ULP),
                compare_f32("v", &gpu.stream.clone_dtoh(&opt.v).unwrap(), &st.v, ONE_ULP),
                compare_exact("step", &[opt.ctl().unwrap().step], &[st.step]),
            ]);
        }
    }

    #[test]
    fn target_sync_copies_or_averages_bitwise_like_the_oracle() {
        let gpu = gpu();
        let mut rng = ChaCha8Rng::seed_from_u64(33);
        let n = 4099;
        let (online, target) = (random(&mut rng, n, 1.0), random(&mut rng, n, 1.0));
        let opt = Optimizer::new(&gpu, &QNetConfig::default(), n).unwrap();
        let don = gpu.stream.clone_htod(&online).unwrap();
        for tau in [None, Some(0.005), Some(0.5)] {
            let mut dt = gpu.stream.clone_htod(&target).unwrap();
            opt.target_sync(&don, &mut dt, tau).unwrap();
            let mut want = target.clone();
            target_sync(&online, &mut want, tau);
            assert_all(&[compare_bitwise(&format!("target tau={tau:?}"), &gpu.stream.clone_dtoh(&dt).unwrap(), &want)]);
        }
    }

    #[test]
    fn a_captured_optimizer_step_replays_bitwise_like_eager_steps() {
        let gpu = gpu();
        let mut rng = ChaCha8Rng::seed_from_u64(34);
        let n = 50_000;
        let cfg = QNetConfig::default();
        let (p, g) = (random(&mut rng, n, 1.0), random(&mut rng, n, 30.0));
        let dg = gpu.stream.clone_htod(&g).unwrap();
        let (mut pe, mut pg) = (gpu.stream.clone_htod(&p).unwrap(), gpu.stream.clone_htod(&p).unwrap());
        let (mut eager, mut graphed) = (Optimizer::new(&gpu, &cfg, n).unwrap(), Optimizer::new(&gpu, &cfg, n).unwrap());
        let mut slot = GraphSlot::new("optimizer_step");
        let mut previous = p.clone();
        for step in 1..=20u32 {
            eager.step(&mut pe, &dg).unwrap();
            slot.run(&gpu.stream, 0, || graphed.step(&mut pg, &dg)).unwrap();
            let (a, b) = (gpu.stream.clone_dtoh(&pe).unwrap(), gpu.stream.clone_dtoh(&pg).unwrap());
            assert_all(&[
                compare_bitwise("params", &b, &a),
                compare_exact("step", &[graphed.ctl().unwrap().step], &[step]),
            ]);
            assert_ne!(b, previous, "step {step} left the parameters unchanged");
            previous = b;
        }
    }
}
