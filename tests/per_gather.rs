//! `per_gather` against the oracle: every gathered element bitwise.

mod common;

mod gpu {
    use super::common::*;
    use tallyho::harness::parity::replay::check_per_gather;

    #[test]
    fn per_gather_matches_oracle_on_random_indices() {
        let gpu = gpu();
        check_property(file!(), |case| check_per_gather(&gpu, case));
    }
}
