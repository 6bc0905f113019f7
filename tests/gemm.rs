//! The row-major GEMM helper (cuBLASLt) against the naive oracle
//! under the FlashAttention rule.

mod common;

mod gpu {
    use super::common::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;
    use tallyho::gemm::{Epilogue, Gemm, Layout};
    use tallyho::harness::parity::uniform;
    use tallyho_oracle::compare_f32;
    use tallyho_oracle::gemm::{gemm, gemm_f32_reversed};
    use tallyho_oracle::tolerance::reduction_rule;

    #[test]
    fn row_major_gemm_matches_the_oracle_for_every_transpose_and_odd_sizes() {
        let gpu = gpu();
        let device = Gemm::new(&gpu.stream).unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        // (33, 256, 1024): a small output over a long K, where the cuBLASLt plan may split K.
        let shapes = [
            (1, 1, 1),
            (3, 50, 7),
            (50, 3, 783),
            (256, 612, 512),
            (783, 255, 33),
            (33, 256, 1024),
        ];
        for &(m, n, k) in &shapes {
            for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
                let (lda, ldb) = (if ta { m } else { k } + 3, if tb { k } else { n } + 1);
                let a = uniform(&mut rng, if ta { k } else { m } * lda, 1.0);
                let b = uniform(&mut rng, if tb { n } else { k } * ldb, 1.0);
                let c0 = uniform(&mut rng, m * n, 1.0);
                let (da, db) = (
                    gpu.stream.clone_htod(&a).unwrap(),
                    gpu.stream.clone_htod(&b).unwrap(),
                );
                let mut dc = gpu.stream.clone_htod(&c0).unwrap();
                let la = Layout { ld: lda, trans: ta };
                let lb = Layout { ld: ldb, trans: tb };
                device
                    .gemm(m, n, k, 1.0, &da, la, &db, lb, 0.5, &mut dc, n)
                    .unwrap();
                let got = gpu.stream.clone_dtoh(&dc).unwrap();
                let want = gemm(m, n, k, 1.0, &a, lda, ta, &b, ldb, tb, 0.5, &c0, n);
                let f32_ref: Vec<f32> = gemm_f32_reversed(m, n, k, &a, lda, ta, &b, ldb, tb)
                    .iter()
                    .zip(&c0)
                    .map(|(&x, &c)| x + 0.5 * c)
                    .collect();
                let c = compare_f32(
                    &format!("C {m}x{n}x{k} ta={ta} tb={tb}"),
                    &got,
                    &want,
                    reduction_rule(&f32_ref, &want),
                );
                assert_all(&[c]);
            }
        }
    }

    #[test]
    fn batched_gemm_shares_an_operand_with_stride_zero() {
        let gpu = gpu();
        let device = Gemm::new(&gpu.stream).unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(8);
        let (m, n, k) = (50, 31, 20);
        let x = uniform(&mut rng, m * k, 1.0);
        let w = uniform(&mut rng, 2 * k * n, 1.0);
        let (dx, dw) = (
            gpu.stream.clone_htod(&x).unwrap(),
            gpu.stream.clone_htod(&w).unwrap(),
        );
        {
            let mut dy = gpu.stream.alloc_zeros::<f32>(2 * m * n).unwrap();
            #[rustfmt::skip]
            device.gemm_batched(2, m, n, k, 1.0, &dx, Layout::plain(k), 0, &dw, Layout::plain(n), k * n,
                0.0, &mut dy, n, m * n, Epilogue::None).unwrap();
            let got = gpu.stream.clone_dtoh(&dy).unwrap();
            for i in 0..2 {
                let wi = &w[i * k * n..(i + 1) * k * n];
                let want = gemm(m, n, k, 1.0, &x, k, false, wi, n, false, 0.0, &[], n);
                let f32_ref = gemm_f32_reversed(m, n, k, &x, k, false, wi, n, false);
                let what = format!("Y{i}");
                assert_all(&[compare_f32(
                    &what,
                    &got[i * m * n..(i + 1) * m * n],
                    &want,
                    reduction_rule(&f32_ref, &want),
                )]);
            }
        }
    }

    #[test]
    fn the_relu_epilogue_matches_the_oracle_and_leaves_the_ones_column() {
        let gpu = gpu();
        let device = Gemm::new(&gpu.stream).unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        // Two networks' hidden layer as the update runs it: out = relu(x w), out in rows of
        // n + 1 whose last column (a ones column) the product must not touch.
        let (m, n, k) = (37, 70, 29);
        let x = uniform(&mut rng, m * k, 1.0);
        let w = uniform(&mut rng, 2 * k * n, 1.0);
        let (dx, dw) = (
            gpu.stream.clone_htod(&x).unwrap(),
            gpu.stream.clone_htod(&w).unwrap(),
        );
        let ones: Vec<f32> = (0..2 * m * (n + 1))
            .map(|i| if i % (n + 1) == n { 1.0 } else { f32::NAN })
            .collect();
        let mut dy = gpu.stream.clone_htod(&ones).unwrap();
        #[rustfmt::skip]
        device.gemm_batched(2, m, n, k, 1.0, &dx, Layout::plain(k), 0, &dw, Layout::plain(n), k * n,
            0.0, &mut dy, n + 1, m * (n + 1), Epilogue::Relu).unwrap();
        let got = gpu.stream.clone_dtoh(&dy).unwrap();
        for i in 0..2 {
            let wi = &w[i * k * n..(i + 1) * k * n];
            let want: Vec<f64> = gemm(m, n, k, 1.0, &x, k, false, wi, n, false, 0.0, &[], n)
                .iter()
                .map(|&v| v.max(0.0))
                .collect();
            let f32_ref: Vec<f32> = gemm_f32_reversed(m, n, k, &x, k, false, wi, n, false)
                .iter()
                .map(|&v| v.max(0.0))
                .collect();
            let rows = &got[i * m * (n + 1)..(i + 1) * m * (n + 1)];
            let values: Vec<f32> = rows
                .chunks_exact(n + 1)
                .flat_map(|r| r[..n].iter().copied())
                .collect();
            assert_all(&[compare_f32(
                &format!("relu Y{i}"),
                &values,
                &want,
                reduction_rule(&f32_ref, &want),
            )]);
            assert!(
                rows.chunks_exact(n + 1).all(|r| r[n] == 1.0),
                "the product wrote the ones column of Y{i}"
            );
        }
    }

    #[test]
    fn an_operand_too_short_for_its_shape_is_refused() {
        let gpu = gpu();
        let device = Gemm::new(&gpu.stream).unwrap();
        let a = gpu.stream.alloc_zeros::<f32>(10).unwrap();
        let mut c = gpu.stream.alloc_zeros::<f32>(100).unwrap();
        let err = device
            .gemm(
                10,
                10,
                10,
                1.0,
                &a,
                Layout::plain(10),
                &a,
                Layout::plain(10),
                0.0,
                &mut c,
                10,
            )
            .unwrap_err();
        assert!(
            err.to_string().contains("needs 100 elements, has 10"),
            "{err}"
        );
    }
}
