//! Properties of the replay oracle itself: the invariants the kernels are held to.

use proptest::prelude::*;
use tallyho_oracle::replay::{self, ReplayState, Transitions};
use tallyho_oracle::ReplayConfig;

fn state_with(capacity: usize, batch: usize, leaves: &[f32], seed: u64) -> ReplayState {
    let cfg = ReplayConfig {
        capacity,
        batch,
        state_dim: 1,
        seed,
        ..ReplayConfig::default()
    };
    let mut st = ReplayState::new(&cfg);
    let l = cfg.leaves();
    st.tree[l..l + leaves.len()].copy_from_slice(leaves);
    let all: Vec<u32> = (0..l as u32).collect();
    replay::sum_tree_refresh(&mut st.tree, l, &all);
    st.ctl.size = leaves.len() as u32;
    st
}

/// Leaves with many zeros and values over six decades; at least one positive.
fn leaves() -> impl Strategy<Value = Vec<f32>> {
    prop::collection::vec(prop_oneof![Just(0.0f32), 1e-4f32..1e2], 4..3000)
        .prop_filter("some positive priority", |v| v.iter().any(|&x| x > 0.0))
}

proptest! {
    #[test]
    fn refreshing_touched_leaves_equals_rebuilding_the_tree(
        base in leaves(), changes in prop::collection::vec((0usize..3000, 0f32..10.0), 1..200)
    ) {
        let mut st = state_with(base.len().max(4), 1, &base, 1);
        let l = st.cfg.leaves();
        let touched: Vec<u32> = changes.iter().map(|&(i, _)| (i % base.len()) as u32).collect();
        for (&i, &(_, p)) in touched.iter().zip(&changes) {
            st.tree[l + i as usize] = p;
        }
        replay::sum_tree_refresh(&mut st.tree, l, &touched);
        prop_assert!(replay::sum_tree_is_consistent(&st.tree));
    }

    #[test]
    fn sampled_indices_have_positive_priority_and_weights_peak_at_one(
        p in leaves(), batch in 1usize..64, seed in any::<u64>(), step in 0u32..10_000
    ) {
        let capacity = p.len().max(4 * batch);
        let mut st = state_with(capacity, batch, &p, seed);
        st.ctl.sample_step = step;
        let s = replay::replay_sample(&mut st);
        prop_assert_eq!(s.indices.len(), batch);
        for &i in &s.indices {
            prop_assert!((i as usize) < p.len() && p[i as usize] > 0.0, "index {} has priority 0 or is unfilled", i);
        }
        prop_assert!(s.weights.iter().all(|&w| w > 0.0 && w <= 1.0));
        prop_assert!(s.weights.iter().any(|&w| w == 1.0));
        prop_assert_eq!(st.ctl.sample_step, step + 1);
    }

    #[test]
    fn thresholds_are_stratified_over_the_total(total in 1e-6f32..1e6, batch in 1usize..2000, seed in any::<u64>()) {
        let t = replay::replay_thresholds(total, batch, seed, 0);
        let seg = f64::from(total) / batch as f64;
        for (i, &x) in t.iter().enumerate() {
            // Each threshold lies in its stratum, up to float rounding of (i + u) * seg.
            let slack = 4.0 * f64::from(f32::EPSILON) * f64::from(total);
            prop_assert!(f64::from(x) >= i as f64 * seg - slack && f64::from(x) <= (i + 1) as f64 * seg + slack);
        }
    }

    #[test]
    fn inserting_keeps_size_cursor_and_tree_consistent(inserts in prop::collection::vec(1usize..300, 1..12)) {
        let cfg = ReplayConfig { capacity: 500, batch: 16, state_dim: 2, ..ReplayConfig::default() };
        let mut st = ReplayState::new(&cfg);
        let mut total = 0usize;
        for n in inserts {
            replay::replay_insert(&mut st, &Transitions::zeros(n, 2));
            total += n;
            prop_assert_eq!(st.ctl.size as usize, total.min(500));
            prop_assert_eq!(st.ctl.cursor as usize, total % 500);
            prop_assert!(replay::sum_tree_is_consistent(&st.tree));
            prop_assert_eq!(st.total(), st.ctl.size as f32 * st.ctl.max_priority);
        }
    }
}
