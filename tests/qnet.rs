//! The Q-network on the GPU against the f64 oracle: every stage at the batch sizes
//! `parity::qnet::QNET_BATCHES` with C51 (51 atoms) and scalar (1 atom) heads, random cases, a
//! 50-update trajectory, the whole update as a replayed graph, and run-to-run equality.
//! The tolerances and their reasons are in tallyho_oracle::tolerance (`gemm_chain`,
//! `QNET_LOSS`, `QNET_TRAJECTORY`).

mod common;

mod gpu {
    use super::common::{assert_all, gpu, runner};
    use proptest::prelude::*;
    use tallyho::harness::parity;
    use tallyho::harness::parity::qnet::{ActingPath, QNetCase, QNetSetup, QNET_BATCHES};
    use tallyho::Gpu;
    use tallyho_oracle::qnet::QNetConfig;
    use tallyho_oracle::{compare_bitwise, compare_exact, Comparison};

    const ATOMS: [usize; 2] = [51, 1];

    /// Run `check` at every required batch size and both atom settings.
    fn sweep(check: impl Fn(&Gpu, &QNetCase) -> tallyho::Result<Vec<Comparison>>) {
        let gpu = gpu();
        for atoms in ATOMS {
            for (i, &batch) in QNET_BATCHES.iter().enumerate() {
                let case = QNetCase {
                    atoms,
                    state_dim: 32,
                    batch,
                    seed: 0x0e7 + i as u64,
                };
                let comparisons = check(&gpu, &case).unwrap();
                let failures: Vec<String> =
                    comparisons.iter().filter_map(|c| c.check().err()).collect();
                assert!(failures.is_empty(), "{case:?}:\n{}", failures.join("\n"));
                assert!(!comparisons.is_empty());
            }
        }
    }

    #[test]
    fn qnet_forward_matches_the_oracle_at_every_batch_size_and_atom_setting() {
        sweep(parity::qnet::check_qnet_forward);
    }

    /// The acting forward (the online network on N states) as QNet::act runs it: layer by
    /// layer at the update's batch sizes, and by qnet_act at the experience step's N = 4096
    /// (32 rows a block and the aligned feed, asserted; and off when turned off), both atom
    /// settings.
    #[test]
    fn acting_forward_matches_the_oracle_at_every_size_and_atom_setting() {
        sweep(parity::qnet::check_acting);
        let gpu = gpu();
        for atoms in ATOMS {
            let case = QNetCase {
                atoms,
                state_dim: 15,
                batch: 4096,
                seed: 0x4096,
            };
            let mut st = QNetSetup::new(&gpu, &case).unwrap();
            assert_eq!(
                st.net.act_block_rows(4096),
                Some(32),
                "qnet_act is the default at N = 4096"
            );
            assert!(
                st.net.act_aligned(),
                "NA {atoms}: the default widths take the aligned feed"
            );
            st.net.set_act_fused(false);
            assert_eq!(
                st.net.act_block_rows(4096),
                None,
                "qnet_act off: layer by layer"
            );
            st.net.set_act_fused(true);
            assert_all(
                &parity::qnet::check_acting_with(&gpu, &case, ActingPath::Fused(None)).unwrap(),
            );
        }
    }

    /// The TF32 option on the acting forward, at the experience step's N = 256 and 4096:
    /// within the TF32 chain's bound (and Q on the GPU's own rows as in float32).
    #[test]
    fn acting_forward_with_tf32_products_matches_the_oracle_within_its_bound() {
        let gpu = gpu();
        for (atoms, batch) in [(51, 256), (51, 4096), (1, 4096)] {
            let case = QNetCase {
                atoms,
                state_dim: 15,
                batch,
                seed: 0x7f32,
            };
            assert_all(&parity::qnet::check_acting_with(&gpu, &case, ActingPath::Tf32).unwrap());
        }
    }

    /// The layer-by-layer acting forward in float32 (networks too wide for one qnet_act
    /// block act this way), at N = 256 and 4096.
    #[test]
    fn acting_forward_layer_by_layer_matches_the_oracle() {
        let gpu = gpu();
        for (atoms, batch) in [(51, 256), (51, 4096), (1, 4096)] {
            let case = QNetCase {
                atoms,
                state_dim: 15,
                batch,
                seed: 0x1a7e,
            };
            assert_all(&parity::qnet::check_acting_with(&gpu, &case, ActingPath::Layers).unwrap());
        }
    }

    /// A random network: every width from 1 (so widths that are not multiples of 4, value and
    /// advantage heads of different widths, fan-ins that are not multiples of the kernel's
    /// slice), one to four branches, scalar or C51 heads: atom counts of every remainder
    /// mod 4 (the fused head sums whole fours, then the up to 3 atoms past them).
    fn random_network() -> impl Strategy<Value = QNetConfig> {
        let widths = (
            1usize..=40,
            1usize..=300,
            1usize..=300,
            1usize..=150,
            1usize..=150,
        );
        let heads = (
            prop::collection::vec(1usize..=6, 1..=4),
            prop::sample::select(vec![1usize, 2, 5, 11, 51, 64]),
            any::<u64>(),
        );
        (widths, heads).prop_map(
            |((state_dim, h1, h2, value_hidden, adv_hidden), (branches, atoms, seed))| QNetConfig {
                state_dim,
                h1,
                h2,
                value_hidden,
                adv_hidden,
                branches,
                atoms,
                seed,
                ..QNetConfig::default()
            },
        )
    }

    /// The same with every staged row 16-byte aligned (the trunk's and heads' widths
    /// multiples of 4, head-output rows of a multiple of 4 floats), as the default network:
    /// the networks qnet_act stages by its aligned feed.
    fn aligned_network() -> impl Strategy<Value = QNetConfig> {
        (random_network(), prop::sample::select(vec![4usize, 12, 64])).prop_map(|(cfg, atoms)| {
            let up = |w: usize| w.next_multiple_of(4);
            QNetConfig {
                h1: up(cfg.h1),
                h2: up(cfg.h2),
                value_hidden: up(cfg.value_hidden),
                adv_hidden: up(cfg.adv_hidden),
                atoms,
                ..cfg
            }
        })
    }

    /// qnet_act, the one-launch acting forward, on random networks and row counts (a last
    /// block with fewer rows than the block takes, fewer rows than one block) at every rows-
    /// per-block the network fits, half of them aligned (the aligned feed, the rest
    /// mostly the general one): the head-output rows within the GEMM chain's bound and Q by the
    /// acting head's rule, as the layer-by-layer path.
    #[test]
    fn qnet_act_matches_the_oracle_on_random_networks_at_every_block_size() {
        let gpu = gpu();
        let mut r = runner(file!());
        let mut config = r.config().clone();
        config.cases = config.cases.min(16);
        r = proptest::test_runner::TestRunner::new(config);
        let networks = prop_oneof![
            random_network().prop_map(|c| (c, false)),
            aligned_network().prop_map(|c| (c, true))
        ];
        r.run(&(networks, 1usize..=300), |((cfg, aligned), rows)| {
            let setup = QNetSetup::of(&gpu, cfg.clone(), 1)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert!(
                !aligned || setup.net.act_aligned(),
                "{cfg:?}: aligned, yet not on the aligned feed"
            );
            let fits = setup.net.act_block_rows_available();
            prop_assert!(!fits.is_empty(), "{cfg:?} fits no qnet_act block");
            for block_rows in fits {
                let comparisons = parity::qnet::check_acting_net(
                    &gpu,
                    cfg.clone(),
                    rows,
                    ActingPath::Fused(Some(block_rows)),
                )
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
                for c in comparisons {
                    c.check().map_err(|e| {
                        TestCaseError::fail(format!("{block_rows} rows a block, {rows} rows: {e}"))
                    })?;
                }
            }
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
    }

    #[test]
    fn qnet_loss_matches_the_oracle_at_every_batch_size_and_atom_setting() {
        sweep(parity::qnet::check_qnet_loss);
    }

    #[test]
    fn qnet_backward_matches_the_oracle_at_every_batch_size_and_atom_setting() {
        sweep(parity::qnet::check_qnet_backward);
    }

    /// Random state widths (odd GEMM shapes), seeds, batch sizes and atom settings.
    #[test]
    fn qnet_stages_match_the_oracle_on_random_cases() {
        let gpu = gpu();
        let cases = (
            prop::sample::select(QNET_BATCHES.to_vec()),
            prop::sample::select(ATOMS.to_vec()),
            1usize..=64,
            any::<u64>(),
        )
            .prop_map(|(batch, atoms, state_dim, seed)| QNetCase {
                atoms,
                state_dim,
                batch,
                seed,
            });
        let mut r = runner(file!());
        let mut config = r.config().clone();
        config.cases = config.cases.min(12);
        r = proptest::test_runner::TestRunner::new(config);
        r.run(&cases, |case| {
            for check in [
                parity::qnet::check_qnet_forward,
                parity::qnet::check_qnet_loss,
                parity::qnet::check_qnet_backward,
            ] {
                for c in check(&gpu, &case).map_err(|e| TestCaseError::fail(e.to_string()))? {
                    c.check().map_err(TestCaseError::fail)?;
                }
            }
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
    }

    #[test]
    fn fifty_updates_track_the_oracle_at_every_step() {
        let gpu = gpu();
        for atoms in ATOMS {
            let case = QNetCase {
                atoms,
                state_dim: 32,
                batch: 64,
                seed: 50,
            };
            let comparisons = parity::qnet::check_qnet_update(&gpu, &case, 50).unwrap();
            for c in &comparisons {
                eprintln!(
                    "NA {atoms}: {}: max rel {:.2e}, rel norm {:.2e} ({})",
                    c.output,
                    c.max_rel,
                    c.rel_norm,
                    c.tolerance.describe()
                );
            }
            assert_all(&comparisons);
        }
    }

    /// Parameters, priorities, loss and Adam step after each of `steps` updates.
    fn trajectory(
        st: &mut QNetSetup,
        steps: u32,
        graphed: bool,
    ) -> Vec<(Vec<f32>, Vec<f32>, f64, u32)> {
        (0..steps)
            .map(|_| {
                if graphed {
                    st.net
                        .update_graphed(&st.device_batch, &st.device_weights)
                        .unwrap();
                } else {
                    st.net.update(&st.device_batch, &st.device_weights).unwrap();
                }
                let l = st.net.read_loss().unwrap();
                (
                    st.net.params().unwrap().0,
                    l.priorities,
                    l.loss,
                    st.net.opt.ctl().unwrap().step,
                )
            })
            .collect()
    }

    #[test]
    fn a_captured_update_replays_bitwise_like_eager_updates() {
        let gpu = gpu();
        for atoms in ATOMS {
            let case = QNetCase {
                atoms,
                state_dim: 32,
                batch: 256,
                seed: 20,
            };
            let mut eager = QNetSetup::new(&gpu, &case).unwrap();
            let mut graphed = QNetSetup::new(&gpu, &case).unwrap();
            let (a, b) = (
                trajectory(&mut eager, 20, false),
                trajectory(&mut graphed, 20, true),
            );
            assert_eq!(graphed.net.graph_phase(), tallyho::graph::Phase::Replay);
            let mut previous = graphed.online.clone();
            for (step, (e, g)) in a.iter().zip(&b).enumerate() {
                assert_all(&[
                    compare_bitwise(&format!("params, step {}", step + 1), &g.0, &e.0),
                    compare_bitwise(&format!("priorities, step {}", step + 1), &g.1, &e.1),
                    compare_exact(
                        &format!("loss bits, step {}", step + 1),
                        &[g.2.to_bits() as f64],
                        &[e.2.to_bits() as f64],
                    ),
                    compare_exact("adam step", &[g.3], &[step as u32 + 1]),
                ]);
                assert_ne!(
                    g.0,
                    previous,
                    "NA {atoms}: step {} left the parameters unchanged",
                    step + 1
                );
                previous = g.0.clone();
            }
        }
    }

    #[test]
    fn two_runs_with_the_same_seed_are_bitwise_equal() {
        let gpu = gpu();
        let case = QNetCase {
            atoms: 51,
            state_dim: 32,
            batch: 783,
            seed: 7,
        };
        let runs: Vec<_> = (0..2)
            .map(|_| trajectory(&mut QNetSetup::new(&gpu, &case).unwrap(), 5, true))
            .collect();
        for (step, (a, b)) in runs[0].iter().zip(&runs[1]).enumerate() {
            assert_all(&[
                compare_bitwise(&format!("params, step {}", step + 1), &b.0, &a.0),
                compare_bitwise(&format!("priorities, step {}", step + 1), &b.1, &a.1),
            ]);
            assert_eq!(a.2.to_bits(), b.2.to_bits(), "loss, step {}", step + 1);
        }
    }

    #[test]
    fn a_graph_refuses_other_buffers_and_bad_batches_are_refused() {
        let gpu = gpu();
        let case = QNetCase {
            atoms: 51,
            state_dim: 8,
            batch: 4,
            seed: 1,
        };
        let mut st = QNetSetup::new(&gpu, &case).unwrap();
        for _ in 0..3 {
            st.net
                .update_graphed(&st.device_batch, &st.device_weights)
                .unwrap();
        }
        let other = gpu.stream.clone_htod(&st.weights).unwrap();
        let e = st
            .net
            .update_graphed(&st.device_batch, &other)
            .unwrap_err()
            .to_string();
        assert!(e.contains("captured over buffers"), "{e}");
        let short = gpu.stream.clone_htod(&st.weights[..3]).unwrap();
        let e = st
            .net
            .update(&st.device_batch, &short)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("weights has 3 values") && e.contains("takes 4"),
            "{e}"
        );
        let e = tallyho::qnet::QNet::new(&gpu, &case.config(), 0)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("batch 0"), "{e}");
    }
}
