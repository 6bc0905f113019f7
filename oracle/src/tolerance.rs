//! Declared tolerances: one per compared output, with the reason it holds. The tests and
//! `tallyho verify` read them from here, so a tolerance is stated once.

/// `|got - want| <= atol + rtol * |want|`, or bitwise equality when `exact`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tolerance {
    pub atol: f64,
    pub rtol: f64,
    pub exact: bool,
    /// A bound on the whole output, `||got - want|| / ||want|| <= rtol` (L2 norms), rather
    /// than on each element.
    pub norm: bool,
    pub reason: &'static str,
}

impl Tolerance {
    pub const fn exact(reason: &'static str) -> Self {
        Tolerance {
            atol: 0.0,
            rtol: 0.0,
            exact: true,
            norm: false,
            reason,
        }
    }

    /// PyTorch's float32 defaults for float32 results against an f64 reference.
    pub const fn float32(reason: &'static str) -> Self {
        Tolerance {
            atol: 1e-5,
            rtol: 1.3e-6,
            exact: false,
            norm: false,
            reason,
        }
    }

    /// `||got - want|| / ||want|| <= bound`.
    pub const fn rel_norm(bound: f64, reason: &'static str) -> Self {
        Tolerance {
            atol: 0.0,
            rtol: bound,
            exact: false,
            norm: true,
            reason,
        }
    }

    pub fn bound(&self, want: f64) -> f64 {
        self.atol + self.rtol * want.abs()
    }

    pub fn describe(&self) -> String {
        if self.exact {
            "exact".to_string()
        } else if self.norm {
            format!("rel. L2 norm {:.1e}", self.rtol)
        } else {
            format!("atol {:.1e} + rtol {:.1e}", self.atol, self.rtol)
        }
    }
}

/// Integer results and float results that the oracle reproduces operation for operation.
pub const EXACT: Tolerance = Tolerance::exact(
    "integer result, or float computed by the same IEEE operations in the same order",
);

/// Priorities `(|delta| + eps)^alpha`: the kernel evaluates `pow` in double and rounds once
/// to float, the oracle evaluates it in double; the two differ only where the double result
/// falls within a double ulp of a float rounding boundary, i.e. by at most one float ulp.
pub const REPLAY_PRIORITY: Tolerance = Tolerance {
    atol: 0.0,
    rtol: 1.2e-7, // 2^-23: one float ulp relative
    exact: false,
    norm: false,
    reason: "pow in double rounded once to float: at most 1 float ulp from the f64 oracle",
};

/// Importance weights `(p_i / p_min)^-beta` in [0, 1]: double pow rounded once to float on the
/// GPU against the f64 oracle; float32 policy defaults.
pub const REPLAY_IS_WEIGHT: Tolerance =
    Tolerance::float32("double pow rounded once to float; float32 defaults of the numerics policy");

/// The FlashAttention rule for reductions and GEMMs: the GPU's max error against the f64
/// oracle may be at most `k = 2` times the max error of a float32 reference that sums in
/// another order, plus a floor of one float ulp of the largest reference value (so that a
/// reference that happens to be exact does not demand exactness).
pub fn reduction_rule(f32_reference: &[f32], f64_oracle: &[f64]) -> Tolerance {
    let ref_err = f32_reference
        .iter()
        .zip(f64_oracle)
        .map(|(&r, &o)| (f64::from(r) - o).abs())
        .fold(0.0, f64::max);
    let scale = f64_oracle.iter().fold(0.0f64, |m, &o| m.max(o.abs()));
    Tolerance {
        atol: 2.0 * ref_err + scale * f64::from(f32::EPSILON),
        rtol: 0.0,
        exact: false,
        norm: false,
        reason:
            "FlashAttention rule: 2 x the max error of a float32 reference summing in reverse order",
    }
}

/// Float32 unit roundoff, 2^-24.
pub const F32_UNIT_ROUNDOFF: f64 = 5.960_464_477_539_063e-8;

/// A float32 GEMM chain against the f64 oracle, as a bound on the relative L2 norm of the
/// error of the whole output. A dot product of length L accumulated in float32 errs by at most
/// `L u` relative to `sum |x_i w_i|` (Higham, "Accuracy and Stability of Numerical
/// Algorithms", 3.1), and in these networks (Linear-scale init, ReLU) each layer carries its
/// input's relative error through with a gain of order one; so the bound is twice the sum of
/// `L u` over every reduction the output went through (`lengths`). Observed errors sit far
/// below it (errors add like a random walk, ~sqrt(L) u); a wrong index, stride or term errs by
/// O(1) and fails it.
pub fn gemm_chain(lengths: &[usize]) -> Tolerance {
    let total: usize = lengths.iter().sum();
    Tolerance::rel_norm(
        2.0 * F32_UNIT_ROUNDOFF * total as f64,
        "float32 GEMM chain: 2 x the sum of L u over its reductions of length L (relative L2 norm)",
    )
}

/// The same chain as [`gemm_chain`] with its products in TF32 (the option `QNet::set_tf32`):
/// each product's inputs are rounded to TF32's 11 significant bits (by truncation at worst,
/// 2^-10 relative each), so each product errs by at most 2^-9 |a b| = 2^15 u, and the float32
/// accumulation on the tensor cores (truncating adds) by 2 u per addition: `(2^15 + 2L) u`
/// per reduction of length L in TF32 (`tf32`), `L u` for those in float32 (`float32`: the
/// first layer's kernel), twice their sum as for float32. About 1e-2 for the default
/// network (observed errors are random-walk sized, ~1e-4); a wrong index or term errs by O(1).
pub fn gemm_chain_tf32(float32: &[usize], tf32: &[usize]) -> Tolerance {
    let total =
        float32.iter().sum::<usize>() + tf32.iter().map(|&l| (1 << 15) + 2 * l).sum::<usize>();
    Tolerance::rel_norm(
        2.0 * F32_UNIT_ROUNDOFF * total as f64,
        "TF32 GEMM chain: 2 x the sum of (2^15 + 2L) u over its TF32 products (inputs rounded to 11 bits), L u in float32",
    )
}

/// The same chain as [`gemm_chain`] with its products in 3xTF32 (`qnet_act`): each float x is
/// hi = x, which the tensor core reads truncated to TF32 (within 2^-10 |x|), plus lo = x -
/// trunc(x) (exact in float, read truncated in turn: within 2^-10 |lo| <= 2^-20 |x|), and a b
/// is taken as lo_a hi_b + hi_a lo_b + hi_a hi_b: the two truncated lo terms err by 2^-20 |a b|
/// each and the dropped lo_a lo_b is at most 2^-20 |a b|, so each product errs by 3 2^-20
/// |a b| = 48 u |a b| (the TF32 products themselves are exact in float). Its 3L products are
/// summed on the tensor cores in float (truncating adds, 2 u each as for TF32), and the two
/// K groups' sums added once more (2 u): `(50 + 6L) u` per reduction of length L, twice their
/// sum as for float32. About 5e-4 for the default network (observed errors are
/// float32-sized); a wrong index, stride or term errs by O(1).
pub fn gemm_chain_3xtf32(lengths: &[usize]) -> Tolerance {
    let total: usize = lengths.iter().map(|&l| 50 + 6 * l).sum();
    Tolerance::rel_norm(
        2.0 * F32_UNIT_ROUNDOFF * total as f64,
        "3xTF32 GEMM chain: 2 x the sum of (50 + 6L) u over its reductions of length L (truncated hi/lo split)",
    )
}

/// The loss stage (`qnet_loss`) against the oracle evaluated on the same float32 forward
/// outputs: both compute in double from identical inputs and round once; only the block
/// reductions (cross-entropy, target mass) sum in another order, in double, which moves a
/// result by ~1e-16 relative. So two float ulps, with an absolute floor of 1e-12 for results
/// that cancel to near zero (a logit gradient `c (p - m)` with p close to m).
pub const QNET_LOSS: Tolerance = Tolerance {
    atol: 1e-12,
    rtol: 2.4e-7,
    exact: false,
    norm: false,
    reason:
        "double arithmetic on the same float32 inputs, rounded once; reductions reordered in double",
};

/// Many full updates, GPU against the f64 oracle from the same start: the relative L2 norm of
/// the difference of the parameter displacements `p_t - p_0`. Adam's step
/// `m_hat / (sqrt(v_hat) + eps)` is invariant to the gradient's scale, so a relative gradient
/// error e moves each step by about e; the gradients agree within the backward's GEMM-chain
/// bound (at most ~2e-4 for the default network, observed ~1e-6), and where a
/// pre-activation sits within float error of a ReLU kink, the two sides may take different
/// masks for that one unit, which moves a few entries by up to a step. 1e-3 allows both with
/// margin; a wrong gradient, moment or step count errs by O(1).
pub const QNET_TRAJECTORY: Tolerance = Tolerance::rel_norm(
    1e-3,
    "Adam steps are scale-free: relative gradient error (GEMM chain) plus rare ReLU-kink flips, relative L2",
);

/// The environment kernels (`state_gather`, `action_select`, `fill_step`, `barriers`):
/// float32 and integer arithmetic written out operation by operation in the same order on
/// both sides, without contraction, so actions, fills, dones and PnL are all bitwise equal.
pub const ENV: Tolerance = Tolerance::exact(
    "float32 IEEE operations in the kernel's order without FMA, and integers: bitwise equal",
);

/// n-step transition assembly (`transition_assemble`): copies, integer slot arithmetic, and
/// the return and discount as float32 multiplies and adds (`__fmul_rn` / `__fadd_rn`, no FMA)
/// in the oracle's order (Horner from the last reward back; k products of 1.0 by gamma), so
/// every row and the whole ring are bitwise equal.
pub const TRANSITION: Tolerance = Tolerance::exact(
    "copies, integers and float32 IEEE operations in the oracle's order without FMA: bitwise equal",
);

/// The reward pipeline's reductions over envs (the EMAs on done, the dispersion
/// statistic): double sums of float inputs in another order (block tree on the GPU,
/// sequential in the oracle) agree to ~1e-16 relative, so the float results, rounded once,
/// differ by at most one float ulp.
pub const REWARD_REDUCTION: Tolerance = Tolerance {
    atol: 0.0,
    rtol: 1.2e-7, // 2^-23: one float ulp relative
    exact: false,
    norm: false,
    reason: "double sums in another order, rounded once to float: at most 1 float ulp",
};

/// The dispersion statistic `max(E r^2 - m^2, 0) / max(|m|, floor)` of the reward pipeline:
/// its one-pass double sums err by at most `(N - 1) u sum r^2` each (Higham 4.2, u =
/// 2^-53) in either summation order, and the difference `E r^2 - m^2` cancels, so the two
/// sides may differ by twice that over N, divided by the denominator; plus one float ulp
/// of the result.
pub fn reward_dispersion(rewards: &[f32], floor: f32) -> Tolerance {
    let n = rewards.len().max(1) as f64;
    let sq: f64 = rewards.iter().map(|&r| f64::from(r) * f64::from(r)).sum();
    let m = rewards.iter().map(|&r| f64::from(r)).sum::<f64>() / n;
    let u = f64::EPSILON / 2.0;
    Tolerance {
        atol: 4.0 * (n - 1.0).max(1.0) * u * (sq / n) / m.abs().max(f64::from(floor)),
        rtol: 1.2e-7,
        exact: false,
        norm: false,
        reason: "one-pass double variance in another order: 2 (N - 1) u E r^2 / |m| absolute, 1 float ulp relative",
    }
}

/// The three global EMAs of the reward pipeline after many steps run free (neither side
/// resynchronised). Their inputs (the means over the closed trades) do not depend on the
/// global state, so the two sides differ only by their rounding: each step both round a
/// double `(1 - r) e + r m` once to float (at most `2^-24 M` each, `M` the largest |EMA|
/// on the way, the means' double sums adding ~`2^-50 M`), and the difference carried from
/// the step before shrinks by `1 - r`. So `delta <= (1 - r) delta + (2^-23 + 2^-50) M`,
/// whose fixed point is the bound: `(2^-23 + 2^-50) M / r`, absolute.
pub fn reward_ema_drift(max_abs: f64, ema_rate: f32) -> Tolerance {
    Tolerance {
        atol: (2f64.powi(-23) + 2f64.powi(-50)) * max_abs / f64::from(ema_rate),
        rtol: 0.0,
        exact: false,
        norm: false,
        reason: "each step rounds once per side and the EMA shrinks the carried error by 1 - rate: (2^-23 + 2^-50) max|EMA| / rate",
    }
}

/// `optimizer_target_sync_every`: a copy of the online parameters where the update count is
/// a multiple of the period, else nothing; the oracle does the same, so every word is equal.
pub const TARGET_SYNC_EVERY: Tolerance =
    Tolerance::exact("a copy of the online parameters, or no write at all: bitwise equal");

/// The training metrics' counts and flags (`trainer_metrics_step`, `trainer_metrics_update`):
/// steps and updates add 1.0 per launch, trades and episodes add flags of 0 or 1, all in
/// double, whose sums are exact integers in any order below 2^53; the flags are an OR of
/// bits (the same bits in any order); epsilon is the step's float widened to double, a copy.
pub const METRIC_COUNTS: Tolerance = Tolerance::exact(
    "integer counts summed in double (exact below 2^53 in any order), OR-ed flag bits, epsilon copied: bitwise",
);

/// The training metrics' loss and gradient-norm sums (`trainer_metrics_update`): each update
/// adds its given loss (a double) and gradient norm (the control block's float, widened) to
/// the running sum with one double addition, in update order on both sides: the same IEEE
/// operations on the same values, so equal bit for bit.
pub const METRIC_UPDATE_SUMS: Tolerance = Tolerance::exact(
    "one double addition per update of the given value, in update order on both sides: bitwise",
);

/// Double unit roundoff, 2^-53.
pub const F64_UNIT_ROUNDOFF: f64 = 1.110_223_024_625_156_5e-16;

/// The training metrics' sums over envs (`trainer_metrics_step`'s reward, PnL and greedy
/// value estimate), after `terms` env values of absolute sum `abs_sum` have been added (all
/// the steps since the last read, N per step). Each term is the same double on both sides:
/// a float widened, or for the greedy value the same double operations (K maxima added in
/// branch order, divided by K). Only the summation order differs: the kernel sums each
/// thread's envs, then a fixed tree, then adds that to the running total; the oracle adds
/// every term to the running total in env order. Any order of summing M terms errs by at
/// most `gamma_(M-1) sum |x_i|` with `gamma_k = k u / (1 - k u)`, `u = 2^-53` (Higham,
/// "Accuracy and Stability of Numerical Algorithms", 4.2), so the two sides differ by at most
/// twice that: `2 gamma_M abs_sum`, absolute, on the doubles (M for M - 1 covers the rounding
/// of `abs_sum` itself). About 4.4e-12 relative to `abs_sum` for 4099 envs over 5 steps; a
/// missing, doubled or wrong term errs by a whole term.
pub fn metric_env_sum(terms: usize, abs_sum: f64) -> Tolerance {
    let ku = terms as f64 * F64_UNIT_ROUNDOFF;
    Tolerance {
        atol: 2.0 * ku / (1.0 - ku) * abs_sum,
        rtol: 0.0,
        exact: false,
        norm: false,
        reason: "double sums of the same terms in another order (tree vs sequential): 2 gamma_M sum |x_i|, u = 2^-53 (Higham 4.2)",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_env_sum_bound_grows_with_the_terms_and_their_magnitude() {
        let one = metric_env_sum(1, 1.0);
        assert!(one.atol > 0.0 && one.atol < 3e-16, "{}", one.atol);
        let many = metric_env_sum(4099 * 5, 1000.0);
        let want = 2.0 * 4099.0 * 5.0 * F64_UNIT_ROUNDOFF * 1000.0;
        assert!(
            (many.atol - want).abs() <= 1e-6 * want,
            "{} vs {want}",
            many.atol
        );
        assert_eq!(metric_env_sum(10, 0.0).atol, 0.0);
        // gamma_k = k u / (1 - k u): where k u = 1/4 it is 1/3, so 2 gamma abs_sum = 2 for 3.
        let quarter = metric_env_sum(1 << 51, 3.0);
        assert!((quarter.atol - 2.0).abs() < 1e-12, "{}", quarter.atol);
        assert_eq!(F64_UNIT_ROUNDOFF, f64::EPSILON / 2.0);
    }

    /// A tree sum and a sequential sum of the same doubles stay within the bound, and one
    /// term left out does not.
    #[test]
    fn a_reordered_sum_passes_and_a_missing_term_fails_the_env_sum_bound() {
        let x: Vec<f64> = (0..4099)
            .map(|i| f64::from(((i * 7919) % 2003) as f32 * 0.37 - 370.0))
            .collect();
        let seq: f64 = x.iter().sum();
        let mut tree = x.clone();
        while tree.len() > 1 {
            tree = tree.chunks(2).map(|c| c.iter().sum()).collect();
        }
        let abs: f64 = x.iter().map(|v| v.abs()).sum();
        let tol = metric_env_sum(x.len(), abs);
        assert!((seq - tree[0]).abs() <= tol.bound(seq));
        let missing: f64 = x[1..].iter().sum();
        assert!((seq - missing).abs() > tol.bound(seq));
    }

    // Each rule's bound as its formula gives it, by hand: a bound that drifts (a sign, a
    // factor, a term dropped) changes what the gate accepts.

    #[test]
    fn a_bound_is_atol_plus_rtol_times_the_reference_magnitude() {
        let t = Tolerance {
            atol: 0.5,
            rtol: 0.25,
            exact: false,
            norm: false,
            reason: "t",
        };
        assert_eq!(t.bound(4.0), 1.5);
        assert_eq!(t.bound(-4.0), 1.5);
        assert_eq!(t.bound(0.0), 0.5);
        assert_eq!(Tolerance::exact("t").bound(7.0), 0.0);
        let f = Tolerance::float32("t");
        assert_eq!(
            (f.atol, f.rtol, f.exact, f.norm),
            (1e-5, 1.3e-6, false, false)
        );
        let n = Tolerance::rel_norm(0.01, "t");
        assert_eq!((n.atol, n.rtol, n.exact, n.norm), (0.0, 0.01, false, true));
        assert!(EXACT.exact && ENV.exact && TRANSITION.exact && TARGET_SYNC_EVERY.exact);
    }

    #[test]
    fn each_kind_describes_itself() {
        assert_eq!(Tolerance::exact("t").describe(), "exact");
        assert_eq!(
            Tolerance::rel_norm(0.01, "t").describe(),
            "rel. L2 norm 1.0e-2"
        );
        assert_eq!(
            Tolerance::float32("t").describe(),
            "atol 1.0e-5 + rtol 1.3e-6"
        );
    }

    #[test]
    fn the_reduction_rule_is_twice_the_reference_error_plus_one_epsilon_of_scale() {
        let t = reduction_rule(&[1.0, 2.0, -4.0], &[1.0, 2.5, -3.0]);
        assert_eq!(t.atol, 2.0 * 1.0 + 3.0 * f64::from(f32::EPSILON));
        assert_eq!((t.rtol, t.exact, t.norm), (0.0, false, false));
        let exact = reduction_rule(&[1.0, -2.0], &[1.0, -2.0]);
        assert_eq!(exact.atol, 2.0 * f64::from(f32::EPSILON));
    }

    #[test]
    fn gemm_chains_sum_their_reductions_in_units_of_float_roundoff() {
        let u = F32_UNIT_ROUNDOFF;
        assert_eq!(u, f64::from(f32::EPSILON) / 2.0);
        let t = gemm_chain(&[16, 256]);
        assert_eq!((t.rtol, t.norm), (2.0 * u * 272.0, true));
        let t = gemm_chain_tf32(&[10], &[100, 3]);
        let total = 10 + (32768 + 200) + (32768 + 6);
        assert_eq!((t.rtol, t.norm), (2.0 * u * total as f64, true));
        let t = gemm_chain_3xtf32(&[10, 1]);
        assert_eq!((t.rtol, t.norm), (2.0 * u * (110.0 + 56.0), true));
    }

    #[test]
    fn the_reward_bounds_follow_their_formulas() {
        // rewards 1, 2, 3: n 3, E r^2 = 14 / 3, mean 2.
        let t = reward_dispersion(&[1.0, 2.0, 3.0], 0.5);
        let u = f64::EPSILON / 2.0;
        assert_eq!(t.atol, 4.0 * 2.0 * u * (14.0 / 3.0) / 2.0);
        assert_eq!(t.rtol, 1.2e-7);
        // A mean below the floor divides by the floor.
        let t = reward_dispersion(&[1.0, -1.0], 0.5);
        assert_eq!(t.atol, 4.0 * 1.0 * u * 1.0 / 0.5);
        // One reward: N - 1 is held at 1.
        let t = reward_dispersion(&[2.0], 0.5);
        assert_eq!(t.atol, 4.0 * u * 4.0 / 2.0);
        let t = reward_ema_drift(8.0, 0.5);
        assert_eq!(t.atol, (2f64.powi(-23) + 2f64.powi(-50)) * 16.0);
        assert_eq!(t.rtol, 0.0);
    }
}
