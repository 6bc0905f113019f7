//! Launcher for cuda/philox.cu: Philox4x32-10 on explicit counters and keys (the GPU side
//! of the known-answer test). Spec: tallyho_oracle::philox.

use crate::error::{Error, Result};
use crate::runtime::{entry, Gpu};
use cudarc::driver::{LaunchConfig, PushKernelArg};

/// `philox_kat`: one Philox4x32-10 call per (counter, key) pair, on the GPU.
pub fn philox_kat(gpu: &Gpu, counters: &[[u32; 4]], keys: &[[u32; 2]]) -> Result<Vec<[u32; 4]>> {
    let n = counters.len();
    if keys.len() != n || n == 0 || n > u32::MAX as usize / 4 {
        return Err(Error::Shape(format!(
            "philox_kat: {n} counters and {} keys: give 1.. pairs",
            keys.len()
        )));
    }
    let f = gpu.function(entry::philox::PHILOX_KAT)?;
    let s = &gpu.stream;
    let c: Vec<u32> = counters.iter().flatten().copied().collect();
    let k: Vec<u32> = keys.iter().flatten().copied().collect();
    let c_dev = s.clone_htod(&c)?;
    let k_dev = s.clone_htod(&k)?;
    let mut out = s.clone_htod(&vec![0xDEAD_BEEFu32; 4 * n])?; // poison
    let n32 = n as u32;
    let mut b = s.launch_builder(&f);
    b.arg(&c_dev).arg(&k_dev).arg(&mut out).arg(&n32);
    let cfg = LaunchConfig {
        grid_dim: (n.div_ceil(256) as u32, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: philox_kat(const u32* counters [n*4], const u32* keys [n*2], u32* out [n*4], u32 n);
    // the buffers have exactly those lengths and the grid covers n threads.
    unsafe { b.launch(cfg) }?;
    let words = s.clone_dtoh(&out)?;
    Ok(words
        .chunks_exact(4)
        .map(|w| [w[0], w[1], w[2], w[3]])
        .collect())
}
