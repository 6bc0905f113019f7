//! The replay's update path (sample + IS weights + gather + priority update) through the
//! graph slot: replays change their results step by step and match the oracle, which proves
//! every per-step value comes from device memory (no host round trip, no allocation); and
//! replay is bitwise equal to eager launches of the same kernels.

mod common;

mod gpu {
    use super::common::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;
    use tallyho::graph::Phase;
    use tallyho::harness::parity::replay::{compare_states, random_state, ReplayCase};
    use tallyho::replay::ReplayBuffer;
    use tallyho_oracle::replay::{self as replay_spec, ReplayState};
    use tallyho_oracle::tolerance::{REPLAY_IS_WEIGHT, REPLAY_PRIORITY};
    use tallyho_oracle::{compare_bitwise, compare_exact, compare_f32};

    fn setup(seed: u64) -> (ReplayState, Vec<f32>) {
        let case = ReplayCase {
            capacity: 3000,
            state_dim: 5,
            batch: 300,
            seed,
        };
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let st = random_state(&case.config(), &mut rng);
        let td: Vec<f32> = (0..300).map(|_| rng.gen_range(0.0..3.0)).collect();
        (st, td)
    }

    #[test]
    fn graph_replays_change_their_results_and_match_the_oracle_at_every_step() {
        let gpu = gpu();
        let (st, td_host) = setup(21);
        let mut buf = ReplayBuffer::new(&gpu, &st.cfg, 1).unwrap();
        buf.upload_state(&st).unwrap();
        let td = gpu.stream.clone_htod(&td_host).unwrap();
        let mut oracle = st.clone();
        let mut previous: Option<Vec<u32>> = None;
        for step in 0..12 {
            buf.sample_gather_update(&td).unwrap();
            let phase = buf.graph_phase();
            assert_eq!(
                phase,
                if step == 0 {
                    Phase::Capture
                } else {
                    Phase::Replay
                },
                "step {step}"
            );

            let (idx, w) = buf.read_sample().unwrap();
            let batch = buf.batch.download(&gpu.stream).unwrap();
            let tree = buf.tree().unwrap();
            let s = replay_spec::replay_sample(&mut oracle);
            let want_batch = replay_spec::replay_gather(&oracle, &s.indices);
            let p = replay_spec::replay_update_priorities(&mut oracle, &s.indices, &td_host);
            let mut want_leaves: Vec<f64> = oracle.tree[oracle.cfg.leaves()..]
                .iter()
                .map(|&x| f64::from(x))
                .collect();
            for (&i, &pj) in s.indices.iter().zip(&p) {
                want_leaves[i as usize] = pj;
            }
            assert_all(&[
                compare_exact("indices", &idx, &s.indices),
                compare_f32("weights", &w, &s.weights, REPLAY_IS_WEIGHT),
                compare_bitwise("batch states", &batch.states, &want_batch.states),
                compare_bitwise("batch rewards", &batch.rewards, &want_batch.rewards),
                compare_f32(
                    "leaves",
                    &tree[oracle.cfg.leaves()..],
                    &want_leaves,
                    REPLAY_PRIORITY,
                ),
            ]);
            // The oracle adopts the GPU's priorities (checked above to within one float ulp),
            // so a one-ulp pow difference cannot send later descents down different paths.
            oracle.tree = tree;
            oracle.ctl = buf.ctl().unwrap();
            if let Some(prev) = &previous {
                assert_ne!(
                    prev, &idx,
                    "step {step}: a replay drew the same indices as the step before"
                );
            }
            previous = Some(idx);
        }
        assert_eq!(buf.ctl().unwrap().sample_step, st.ctl.sample_step + 12);
    }

    #[test]
    fn graph_replay_is_bitwise_equal_to_eager_launches() {
        let gpu = gpu();
        let (st, td_host) = setup(22);
        let td = gpu.stream.clone_htod(&td_host).unwrap();
        let mut eager = ReplayBuffer::new(&gpu, &st.cfg, 1).unwrap();
        let mut graphed = ReplayBuffer::new(&gpu, &st.cfg, 1).unwrap();
        eager.upload_state(&st).unwrap();
        graphed.upload_state(&st).unwrap();
        for step in 0..20 {
            eager.sample().unwrap();
            eager.gather().unwrap();
            eager.update_priorities(&td).unwrap();
            graphed.sample_gather_update(&td).unwrap();
            let (ei, ew) = eager.read_sample().unwrap();
            let (gi, gw) = graphed.read_sample().unwrap();
            let (e, g) = (
                eager.download_state().unwrap(),
                graphed.download_state().unwrap(),
            );
            let mut c = vec![
                compare_exact("indices", &gi, &ei),
                compare_bitwise("weights", &gw, &ew),
            ];
            c.extend(compare_states(&g, &e));
            assert_all(&c);
            assert!(step < 2 || graphed.graph_phase() == Phase::Replay);
        }
    }

    #[test]
    fn two_runs_with_the_same_seed_are_bitwise_equal() {
        let gpu = gpu();
        let (st, td_host) = setup(23);
        let td = gpu.stream.clone_htod(&td_host).unwrap();
        let run = || {
            let mut buf = ReplayBuffer::new(&gpu, &st.cfg, 1).unwrap();
            buf.upload_state(&st).unwrap();
            for _ in 0..10 {
                buf.sample_gather_update(&td).unwrap();
            }
            (buf.download_state().unwrap(), buf.read_sample().unwrap())
        };
        let (a, (ai, aw)) = run();
        let (b, (bi, bw)) = run();
        let mut c = vec![
            compare_exact("indices", &ai, &bi),
            compare_bitwise("weights", &aw, &bw),
        ];
        c.extend(compare_states(&a, &b));
        assert_all(&c);
    }

    #[test]
    fn a_graph_replayed_over_other_buffers_is_refused() {
        let gpu = gpu();
        let (st, td_host) = setup(24);
        let td = gpu.stream.clone_htod(&td_host).unwrap();
        let other = gpu.stream.clone_htod(&td_host).unwrap();
        let mut buf = ReplayBuffer::new(&gpu, &st.cfg, 1).unwrap();
        buf.upload_state(&st).unwrap();
        buf.sample_gather_update(&td).unwrap();
        let err = buf.sample_gather_update(&other).unwrap_err().to_string();
        assert!(err.contains("use a new slot for new buffers"), "{err}");
    }

    #[test]
    fn stage_slots_nest_inside_an_enclosing_capture_and_replay_bitwise_like_eager() {
        use tallyho::graph::{address, Binding, GraphSlot};
        use tallyho::harness::parity::reward::{check_config, Mix, Trades};
        use tallyho::reward::{RewardPath, RewardPipeline};
        let gpu = gpu();
        let (st, td_host) = setup(25);
        let td = gpu.stream.clone_htod(&td_host).unwrap();
        let n = 777;
        let cfg = check_config();
        let (mut eager_buf, mut nested_buf) = (
            ReplayBuffer::new(&gpu, &st.cfg, 1).unwrap(),
            ReplayBuffer::new(&gpu, &st.cfg, 1).unwrap(),
        );
        eager_buf.upload_state(&st).unwrap();
        nested_buf.upload_state(&st).unwrap();
        let (mut eager_rw, mut nested_rw) = (
            RewardPipeline::new(&gpu, &cfg, n).unwrap(),
            RewardPipeline::new(&gpu, &cfg, n).unwrap(),
        );
        let mut trades = Trades::new(n, Mix::Mixed, 26);
        let mut pnl = gpu.stream.clone_htod(&trades.pnl).unwrap();
        let mut position = gpu.stream.clone_htod(&trades.position).unwrap();
        // The whole step: two stages' graphed paths inside one enclosing slot.
        let mut outer = GraphSlot::new("whole step");
        let binding = Binding::of(&[
            address(&gpu.stream, &td),
            address(&gpu.stream, &pnl),
            address(&gpu.stream, &position),
        ]);
        for step in 0..8 {
            trades.advance();
            gpu.stream.memcpy_htod(&trades.pnl, &mut pnl).unwrap();
            gpu.stream
                .memcpy_htod(&trades.position, &mut position)
                .unwrap();
            eager_buf.sample().unwrap();
            eager_buf.gather().unwrap();
            eager_buf.update_priorities(&td).unwrap();
            eager_rw.step(RewardPath::Fused, &pnl, &position).unwrap();
            outer
                .run(&gpu.stream, binding, || {
                    nested_buf.sample_gather_update(&td)?;
                    nested_rw.step_graphed(RewardPath::Fused, &pnl, &position)
                })
                .unwrap();
            let (ei, ew) = eager_buf.read_sample().unwrap();
            let (gi, gw) = nested_buf.read_sample().unwrap();
            let (eo, go) = (eager_rw.read_out().unwrap(), nested_rw.read_out().unwrap());
            let mut c = vec![
                compare_exact("indices", &gi, &ei),
                compare_bitwise("weights", &gw, &ew),
                compare_bitwise("reward", &go.reward, &eo.reward),
            ];
            c.extend(compare_states(
                &nested_buf.download_state().unwrap(),
                &eager_buf.download_state().unwrap(),
            ));
            assert_all(&c);
            assert!(
                eo.reward.iter().any(|&r| r != 0.0),
                "step {step}: an all-zero reward compares nothing"
            );
        }
        // The outer slot replays; the inner slots ran eagerly once (the outer's warm-up) and
        // were captured only as part of the outer graph, never on their own.
        assert_eq!(outer.phase(), Phase::Replay);
        assert_eq!(nested_buf.graph_phase(), Phase::Capture);
        assert_eq!(nested_rw.graph_phase(RewardPath::Fused), Phase::Capture);
    }

    #[test]
    fn a_captured_body_that_allocates_is_refused_naming_the_allocation() {
        use tallyho::graph::{Binding, GraphSlot};
        let gpu = gpu();
        let (st, td_host) = setup(27);
        let td = gpu.stream.clone_htod(&td_host).unwrap();
        let mut buf = ReplayBuffer::new(&gpu, &st.cfg, 1).unwrap();
        buf.upload_state(&st).unwrap();
        let mut slot = GraphSlot::new("allocating step");
        let mut run = |slot: &mut GraphSlot| {
            slot.run(&gpu.stream, Binding::of(&[]), || {
                let scratch = gpu.stream.alloc_zeros::<f32>(1 << 10)?;
                buf.sample_gather_update(&td)?;
                drop(scratch);
                Ok(())
            })
        };
        run(&mut slot).unwrap(); // warm-up: eager, allowed
        let err = run(&mut slot).unwrap_err().to_string();
        // Refused either way: as an allocation node found in the graph (stream-ordered
        // allocation, as on H100 and H200), or by the driver inside the capture.
        assert!(
            err.contains("allocate every buffer before the first run") || err.contains("CAPTURE"),
            "{err}"
        );
        assert_eq!(
            slot.phase(),
            Phase::Capture,
            "a refused capture must not be kept"
        );
    }
}
