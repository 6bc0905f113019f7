//! Philox4x32-10 on the GPU: the Random123 known-answer vectors and random counters
//! against the oracle, bit for bit.

mod common;

mod gpu {
    use super::common::*;
    use tallyho::philox::philox_kat;
    use tallyho_oracle::kat::load_philox_kat;

    #[test]
    fn philox_matches_every_random123_known_answer_vector() {
        let gpu = gpu();
        let kat = load_philox_kat().unwrap();
        let counters: Vec<[u32; 4]> = kat.iter().map(|v| v.counter).collect();
        let keys: Vec<[u32; 2]> = kat.iter().map(|v| v.key).collect();
        let got = philox_kat(&gpu, &counters, &keys).unwrap();
        for (g, v) in got.iter().zip(&kat) {
            assert_eq!(
                g, &v.expected,
                "counter {:08x?} key {:08x?}",
                v.counter, v.key
            );
        }
        assert_eq!(got.len(), kat.len());
    }

    #[test]
    fn philox_matches_oracle_on_random_counters_and_keys() {
        let gpu = gpu();
        for (n, seed) in [(1, 1), (3, 2), (50, 3), (783, 4), (4096, 5), (100_003, 6)] {
            assert_all(&tallyho::harness::parity::philox::check_philox(&gpu, n, seed).unwrap());
        }
    }
}
