//! `replay_gather` against the oracle: every gathered element bitwise.

mod common;

mod gpu {
    use super::common::*;
    use tallyho::harness::parity::replay::check_replay_gather;

    #[test]
    fn replay_gather_matches_oracle_on_random_indices() {
        let gpu = gpu();
        check_property(file!(), |case| check_replay_gather(&gpu, case));
    }
}
