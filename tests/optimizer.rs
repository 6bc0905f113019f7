//! The optimizer kernels against the oracle: `optimizer_grad_norm` (norm, clip scale, step),
//! `optimizer_adam` (one step from arbitrary moments), `optimizer_target_sync` (hard and Polyak),
//! `optimizer_target_sync_every` (the copy on the period's multiples of the device's update
//! count), and a captured optimizer step replaying bitwise like eager launches.

mod common;

mod gpu {
    use super::common::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;
    use tallyho::graph::{address, Binding, GraphSlot};
    use tallyho::harness::parity::optimizer::{
        check_optimizer_adam, check_optimizer_grad_norm, check_optimizer_target_sync,
        check_optimizer_target_sync_every,
    };
    use tallyho::harness::parity::uniform;
    use tallyho::optimizer::Optimizer;
    use tallyho_oracle::qnet::QNetConfig;
    use tallyho_oracle::{compare_bitwise, compare_exact};

    #[test]
    fn grad_norm_and_clip_scale_match_the_oracle_and_advance_the_step() {
        let gpu = gpu();
        for (i, (n, scale)) in [
            (1, 3.0),
            (3, 0.1),
            (50, 1.0),
            (783, 20.0),
            (4096, 0.01),
            (1_000_003, 0.05),
        ]
        .into_iter()
        .enumerate()
        {
            assert_all(&check_optimizer_grad_norm(&gpu, n, scale, 31 + i as u64).unwrap());
        }
    }

    #[test]
    fn one_adam_step_matches_the_oracle_from_arbitrary_moments() {
        let gpu = gpu();
        for (i, (n, step, gscale)) in [
            (1, 0, 1.0),
            (3, 7, 50.0),
            (783, 0, 0.3),
            (100_003, 1234, 5.0),
        ]
        .into_iter()
        .enumerate()
        {
            assert_all(&check_optimizer_adam(&gpu, n, step, gscale, 40 + i as u64).unwrap());
        }
    }

    #[test]
    fn target_sync_copies_or_averages_bitwise_like_the_oracle() {
        let gpu = gpu();
        for (i, n) in [1, 50, 4099].into_iter().enumerate() {
            assert_all(&check_optimizer_target_sync(&gpu, n, 50 + i as u64).unwrap());
        }
    }

    /// Sizes 1, 255, 257 and 4099 (not multiples of a block), periods 1 to 1000: at update
    /// counts on and off the period's multiples, the target is the online copy or untouched,
    /// bitwise as the oracle's `target_sync_every`.
    #[test]
    fn target_sync_every_copies_on_the_periods_multiples_bitwise_like_the_oracle() {
        let gpu = gpu();
        for (i, (n, period)) in [(1, 1), (255, 2), (257, 3), (4099, 1000)]
            .into_iter()
            .enumerate()
        {
            let c = check_optimizer_target_sync_every(&gpu, n, period, 60 + i as u64).unwrap();
            assert_all(&c);
            assert!(
                c.iter().any(|c| c.output.contains("copied"))
                    && (period == 1 || c.iter().any(|c| c.output.contains("untouched"))),
                "both branches checked at period {period}: {}",
                table(&c)
            );
        }
    }

    /// Random sizes, periods and seeds.
    #[test]
    fn target_sync_every_matches_the_oracle_on_random_periods() {
        use proptest::prelude::*;
        let gpu = gpu();
        runner(file!())
            .run(
                &(1usize..5000, 1u32..2000, any::<u64>()),
                |(n, period, seed)| {
                    for c in check_optimizer_target_sync_every(&gpu, n, period, seed)
                        .map_err(|e| TestCaseError::fail(e.to_string()))?
                    {
                        c.check().map_err(TestCaseError::fail)?;
                    }
                    Ok(())
                },
            )
            .unwrap_or_else(|e| panic!("{e}"));
    }

    #[test]
    fn a_captured_optimizer_step_replays_bitwise_like_eager_steps() {
        let gpu = gpu();
        let mut rng = ChaCha8Rng::seed_from_u64(34);
        let n = 50_000;
        let cfg = QNetConfig::default();
        let (p, g) = (uniform(&mut rng, n, 1.0), uniform(&mut rng, n, 30.0));
        let dg = gpu.stream.clone_htod(&g).unwrap();
        let (mut pe, mut pg) = (
            gpu.stream.clone_htod(&p).unwrap(),
            gpu.stream.clone_htod(&p).unwrap(),
        );
        let (mut eager, mut graphed) = (
            Optimizer::new(&gpu, &cfg, n).unwrap(),
            Optimizer::new(&gpu, &cfg, n).unwrap(),
        );
        let mut slot = GraphSlot::new("optimizer_step");
        let mut previous = p.clone();
        for step in 1..=20u32 {
            eager
                .step(&mut pe.as_view_mut(), &dg.as_view(), None)
                .unwrap();
            slot.run(
                &gpu.stream,
                Binding::of(&[address(&gpu.stream, &pg), address(&gpu.stream, &dg)]),
                || graphed.step(&mut pg.as_view_mut(), &dg.as_view(), None),
            )
            .unwrap();
            let (a, b) = (
                gpu.stream.clone_dtoh(&pe).unwrap(),
                gpu.stream.clone_dtoh(&pg).unwrap(),
            );
            assert_all(&[
                compare_bitwise("params", &b, &a),
                compare_exact("step", &[graphed.ctl().unwrap().step], &[step]),
            ]);
            assert_ne!(b, previous, "step {step} left the parameters unchanged");
            previous = b;
        }
    }
}
