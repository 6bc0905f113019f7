//! `replay_insert` against the oracle: ring write, max priority, sum-tree refresh, cursor.

mod common;

mod gpu {
    use super::common::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;
    use tallyho::harness::parity::replay::{
        check_replay_insert, check_replay_insert_on, random_state, random_transitions, ReplayCase,
    };

    #[test]
    fn replay_insert_matches_oracle_on_random_states() {
        let gpu = gpu();
        check_property(file!(), |case| {
            check_replay_insert(&gpu, case, case.batch * 3 / 2 + 1)
        });
    }

    #[test]
    fn replay_insert_wraps_around_the_end_of_the_ring() {
        let gpu = gpu();
        let case = ReplayCase {
            capacity: 50,
            state_dim: 3,
            batch: 12,
            seed: 11,
        };
        let mut rng = ChaCha8Rng::seed_from_u64(case.seed);
        let mut st = random_state(&case.config(), &mut rng);
        st.ctl.cursor = 47;
        st.ctl.size = 50;
        let batch = random_transitions(&mut rng, 10, 3);
        assert_all(&check_replay_insert_on(&gpu, &st, &batch).unwrap());
    }

    #[test]
    fn replay_insert_into_a_partly_filled_buffer_grows_size_without_wrapping() {
        let gpu = gpu();
        let case = ReplayCase {
            capacity: 783,
            state_dim: 1,
            batch: 3,
            seed: 12,
        };
        let mut rng = ChaCha8Rng::seed_from_u64(case.seed);
        let mut st = random_state(&case.config(), &mut rng);
        st.ctl.cursor = 100;
        st.ctl.size = 100;
        let batch = random_transitions(&mut rng, 683, 1);
        assert_all(&check_replay_insert_on(&gpu, &st, &batch).unwrap());
    }
}
