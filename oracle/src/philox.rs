//! Philox4x32-10, the counter-based generator of Salmon et al., "Parallel random numbers:
//! as easy as 1, 2, 3" (SC 2011), exactly as Random123 and cuRAND define it.
//!
//! One call maps a 128-bit counter and a 64-bit key to four independent 32-bit words:
//! ten rounds of `(c0, c1, c2, c3) -> (hi(M1*c2) ^ c1 ^ k0, lo(M1*c2), hi(M0*c0) ^ c3 ^ k1,
//! lo(M0*c0))`, the key bumped by the Weyl constants `(W0, W1)` between rounds.
//!
//! Counter layout (the same in cuda/common/philox.cuh): `(lane, step, stream, 0)` with
//! key = the run seed split into two words, so that every draw of every kernel is named by
//! which lane drew it, at which step, for which purpose, and the oracle reproduces it bit
//! for bit.

pub const M0: u32 = 0xD251_1F53;
pub const M1: u32 = 0xCD9E_8D57;
pub const W0: u32 = 0x9E37_79B9;
pub const W1: u32 = 0xBB67_AE85;

/// Philox streams: the third counter word, one per purpose of a draw.
pub mod stream {
    /// Stratified sampling thresholds of the prioritized replay (`replay_sample`).
    pub const REPLAY_SAMPLE: u32 = 1;
    /// Epsilon-greedy exploration tests of `action_select`, one word per branch.
    pub const ACTION_EXPLORE: u32 = 2;
    /// Random actions of `action_select`, one word per branch.
    pub const ACTION_RANDOM: u32 = 3;
    /// Fill draws of IOC and limit orders (`fill_step`).
    pub const FILL: u32 = 4;
    /// Start bars of episodes (`barriers`' auto-reset and the initial state).
    pub const ENV_RESET: u32 = 5;
}

#[inline]
fn mulhilo(a: u32, b: u32) -> (u32, u32) {
    let p = u64::from(a) * u64::from(b);
    ((p >> 32) as u32, p as u32)
}

#[inline]
fn round(c: [u32; 4], k: [u32; 2]) -> [u32; 4] {
    let (hi0, lo0) = mulhilo(M0, c[0]);
    let (hi1, lo1) = mulhilo(M1, c[2]);
    [hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0]
}

/// Philox4x32 with ten rounds: the four output words for `counter` under `key`.
pub fn philox4x32_10(counter: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    let mut c = counter;
    let mut k = key;
    for r in 0..10 {
        if r > 0 {
            k = [k[0].wrapping_add(W0), k[1].wrapping_add(W1)];
        }
        c = round(c, k);
    }
    c
}

/// The key for a run seed: low word first.
pub fn key_of_seed(seed: u64) -> [u32; 2] {
    [seed as u32, (seed >> 32) as u32]
}

/// The draw of `lane` at `step` for `stream`: `philox4x32_10((lane, step, stream, 0), seed)`.
pub fn draw(seed: u64, lane: u32, step: u32, stream: u32) -> [u32; 4] {
    philox4x32_10([lane, step, stream, 0], key_of_seed(seed))
}

/// A uniform float in [0, 1) from the top 24 bits of a word: `(x >> 8) * 2^-24`, exact in f32.
pub fn u01(x: u32) -> f32 {
    (x >> 8) as f32 * (1.0 / 16_777_216.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn u01_spans_zero_to_just_below_one() {
        assert_eq!(u01(0), 0.0);
        assert_eq!(u01(u32::MAX), 1.0 - 1.0 / 16_777_216.0);
    }

    #[test]
    fn different_counters_give_different_words() {
        assert_ne!(draw(7, 0, 0, 1), draw(7, 1, 0, 1));
        assert_ne!(draw(7, 0, 0, 1), draw(7, 0, 1, 1));
        assert_ne!(draw(7, 0, 0, 1), draw(8, 0, 0, 1));
    }
}
