//! GPU-vs-oracle check of the counter-based generator (spec: tallyho_oracle::philox).

use crate::error::Result;
use crate::runtime::Gpu;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tallyho_oracle::{compare_exact, philox, Comparison};

/// `philox_kat` on `n` random counters and keys against the oracle, exactly.
pub fn check_philox(gpu: &Gpu, n: usize, seed: u64) -> Result<Vec<Comparison>> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let counters: Vec<[u32; 4]> = (0..n).map(|_| rng.gen()).collect();
    let keys: Vec<[u32; 2]> = (0..n).map(|_| rng.gen()).collect();
    let got: Vec<u32> = crate::philox::philox_kat(gpu, &counters, &keys)?
        .into_iter()
        .flatten()
        .collect();
    let want: Vec<u32> = counters
        .iter()
        .zip(&keys)
        .flat_map(|(&c, &k)| philox::philox4x32_10(c, k))
        .collect();
    Ok(vec![compare_exact("words", &got, &want)])
}
