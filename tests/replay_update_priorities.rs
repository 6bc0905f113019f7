//! `replay_update_priorities` against the oracle: (|delta| + eps)^alpha, last occurrence of a
//! repeated index wins, the tree stays the exact sum of its leaves, running max priority.

mod common;

mod gpu {
    use super::common::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;
    use tallyho::harness::parity::replay::{
        check_replay_update_priorities, check_replay_update_priorities_on, random_state, ReplayCase,
    };
    use tallyho::replay::ReplayBuffer;
    use tallyho_oracle::replay::replay_priority;

    #[test]
    fn replay_update_priorities_matches_oracle_on_random_batches_with_repeats() {
        let gpu = gpu();
        check_property(file!(), |case| check_replay_update_priorities(&gpu, case));
    }

    #[test]
    fn repeated_indices_take_the_last_priority_in_batch_order() {
        let gpu = gpu();
        let case = ReplayCase {
            capacity: 200,
            state_dim: 1,
            batch: 50,
            seed: 3,
        };
        let cfg = case.config();
        let st = random_state(&cfg, &mut ChaCha8Rng::seed_from_u64(3));
        // Every index appears twice or more; its last |td| is the distinctive one.
        let indices: Vec<u32> = (0..50).map(|j| (j % 7) as u32).collect();
        let td: Vec<f32> = (0..50).map(|j| 0.01 * (j + 1) as f32).collect();
        assert_all(&check_replay_update_priorities_on(&gpu, &st, &indices, &td).unwrap());

        let mut buf = ReplayBuffer::new(&gpu, &cfg, 1).unwrap();
        buf.upload_state(&st).unwrap();
        buf.set_indices(&indices).unwrap();
        buf.update_priorities(&gpu.stream.clone_htod(&td).unwrap())
            .unwrap();
        let tree = buf.tree().unwrap();
        let l = cfg.leaves();
        for i in 0..7usize {
            let last = (0..50).rev().find(|j| j % 7 == i).unwrap();
            let want = replay_priority(td[last], cfg.alpha, cfg.eps) as f32;
            assert!(
                (tree[l + i] - want).abs() <= want * 2e-7,
                "leaf {i}: {} != {want}",
                tree[l + i]
            );
        }
    }

    #[test]
    fn a_batch_larger_than_one_block_updates_every_leaf() {
        let gpu = gpu();
        let case = ReplayCase {
            capacity: 12_000,
            state_dim: 1,
            batch: 3000,
            seed: 4,
        };
        let st = random_state(&case.config(), &mut ChaCha8Rng::seed_from_u64(4));
        let indices: Vec<u32> = (0..3000)
            .map(|j| (j * 3 % st.ctl.size as usize) as u32)
            .collect();
        let td: Vec<f32> = (0..3000).map(|j| 0.5 + (j % 11) as f32).collect();
        assert_all(&check_replay_update_priorities_on(&gpu, &st, &indices, &td).unwrap());
    }
}
