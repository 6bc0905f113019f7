//! `replay_sample` against the oracle (indices exact, weights within REPLAY_IS_WEIGHT), its edge
//! cases, and sampling frequencies against priorities.

mod common;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tallyho::harness::parity::replay::{
    chi_square, chi_square_critical, random_state, set_leaves, ReplayCase,
};
use tallyho_oracle::replay::{replay_sample, ReplayState};

/// 64 slots with priorities over two decades, B = 16.
fn frequency_state() -> ReplayState {
    let case = ReplayCase {
        capacity: 64,
        state_dim: 1,
        batch: 16,
        seed: 0x5eed,
    };
    let mut rng = ChaCha8Rng::seed_from_u64(case.seed);
    let mut st = random_state(&case.config(), &mut rng);
    let p: Vec<f32> = (0..64)
        .map(|_| 10f32.powf(rng.gen_range(-1.0..1.0)))
        .collect();
    set_leaves(&mut st, &p);
    st.ctl.size = 64;
    st
}

/// Chi-square of `steps` samples' index counts against B * steps * p_i / total, against the
/// 0.1% critical value (z = 3.09). Stratified sampling has less variance than independent
/// draws, so the statistic is conservative.
fn assert_frequencies_match(st: &ReplayState, counts: &[u64], steps: usize) {
    let total: f64 = (0..64).map(|i| f64::from(st.leaf(i))).sum();
    let draws = (st.cfg.batch * steps) as f64;
    let expected: Vec<f64> = (0..64)
        .map(|i| draws * f64::from(st.leaf(i)) / total)
        .collect();
    let stat = chi_square(counts, &expected);
    let critical = chi_square_critical(63, 3.09);
    assert!(
        stat < critical,
        "chi-square {stat:.1} >= critical {critical:.1} (63 dof, 0.1%)"
    );
    assert_eq!(counts.iter().sum::<u64>() as f64, draws);
}

#[test]
fn oracle_sampling_frequencies_match_priorities() {
    let mut st = frequency_state();
    let mut counts = vec![0u64; 64];
    let steps = 4000;
    for _ in 0..steps {
        for i in replay_sample(&mut st).indices {
            counts[i as usize] += 1;
        }
    }
    assert_frequencies_match(&st, &counts, steps);
}

mod gpu {
    use super::common::*;
    use super::*;
    use tallyho::harness::parity::replay::{check_replay_sample, check_replay_sample_on};
    use tallyho::replay::ReplayBuffer;

    #[test]
    fn replay_sample_matches_oracle_on_random_states() {
        let gpu = gpu();
        check_property(file!(), |case| check_replay_sample(&gpu, case));
    }

    fn state(capacity: usize, batch: usize, priorities: &[f32]) -> ReplayState {
        let case = ReplayCase {
            capacity,
            state_dim: 2,
            batch,
            seed: 0xabc,
        };
        let mut st = random_state(&case.config(), &mut ChaCha8Rng::seed_from_u64(1));
        set_leaves(&mut st, priorities);
        st.ctl.size = priorities.len() as u32;
        st.ctl.cursor = (priorities.len() % capacity) as u32;
        st
    }

    #[test]
    fn sampling_a_buffer_not_yet_full_stays_inside_it() {
        let gpu = gpu();
        let st = state(4096, 256, &vec![0.5; 300]);
        assert_all(&check_replay_sample_on(&gpu, &st).unwrap());
        let mut want = st.clone();
        assert!(replay_sample(&mut want).indices.iter().all(|&i| i < 300));
    }

    #[test]
    fn one_non_zero_priority_is_drawn_every_time_with_weight_one() {
        let gpu = gpu();
        let mut p = vec![0.0; 1000];
        p[783] = 0.25;
        let st = state(1000, 250, &p);
        assert_all(&check_replay_sample_on(&gpu, &st).unwrap());
        let s = replay_sample(&mut st.clone());
        assert!(s.indices.iter().all(|&i| i == 783));
        assert!(s.weights.iter().all(|&w| w == 1.0));
    }

    #[test]
    fn all_equal_priorities_give_unit_weights_and_one_index_per_stratum() {
        let gpu = gpu();
        let st = state(1024, 256, &vec![1.0; 1024]);
        assert_all(&check_replay_sample_on(&gpu, &st).unwrap());
        let s = replay_sample(&mut st.clone());
        assert!(s.weights.iter().all(|&w| w == 1.0));
        // Stratum i covers leaves 4i..4i+4.
        // (a threshold rounded up onto the next stratum's first leaf is also right)
        assert!(s
            .indices
            .iter()
            .enumerate()
            .all(|(i, &x)| x as usize / 4 == i || x as usize == 4 * i + 4));
    }

    #[test]
    fn a_total_priority_below_the_batch_size_samples_correctly() {
        let gpu = gpu();
        let p: Vec<f32> = (0..3000).map(|i| 1e-5 * (1.0 + (i % 7) as f32)).collect();
        let st = state(3000, 700, &p);
        assert!(st.total() < 700.0 * 1e-3);
        assert_all(&check_replay_sample_on(&gpu, &st).unwrap());
    }

    #[test]
    fn a_batch_larger_than_one_block_is_sampled_whole() {
        let gpu = gpu();
        let p: Vec<f32> = (0..9000).map(|i| 0.1 + (i % 13) as f32).collect();
        assert_all(&check_replay_sample_on(&gpu, &state(9000, 2049, &p)).unwrap());
    }

    #[test]
    fn gpu_sampling_frequencies_match_priorities() {
        let gpu = gpu();
        let st = frequency_state();
        let mut buf = ReplayBuffer::new(&gpu, &st.cfg, 1).unwrap();
        buf.upload_state(&st).unwrap();
        let mut counts = vec![0u64; 64];
        let steps = 4000;
        for _ in 0..steps {
            buf.sample().unwrap();
            for i in buf.read_sample().unwrap().0 {
                counts[i as usize] += 1;
            }
        }
        assert_frequencies_match(&st, &counts, steps);
    }

    #[test]
    fn sampling_an_empty_buffer_is_refused_with_the_fix() {
        let gpu = gpu();
        let cfg = ReplayCase {
            capacity: 64,
            state_dim: 1,
            batch: 16,
            seed: 1,
        }
        .config();
        let mut buf = ReplayBuffer::new(&gpu, &cfg, 1).unwrap();
        let err = buf.sample().unwrap_err().to_string();
        assert!(
            err.contains("empty replay buffer: insert transitions first"),
            "{err}"
        );
    }
}
