//! Philox4x32-10 against the Random123 known-answer vectors in ../shared/data.

use tallyho_oracle::kat::load_philox_kat;
use tallyho_oracle::philox::philox4x32_10;

#[test]
fn philox_matches_every_random123_known_answer_vector() {
    let kat = load_philox_kat().unwrap();
    assert!(
        kat.len() >= 3,
        "expected at least 3 vectors, found {}",
        kat.len()
    );
    for v in &kat {
        assert_eq!(
            philox4x32_10(v.counter, v.key),
            v.expected,
            "counter {:08x?} key {:08x?}",
            v.counter,
            v.key
        );
    }
}
