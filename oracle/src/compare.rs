//! One comparator for every check: GPU output against the oracle, element by element.

use crate::tolerance::Tolerance;

/// The outcome of comparing one output.
#[derive(Clone, Debug, PartialEq)]
pub struct Comparison {
    pub output: String,
    pub len: usize,
    pub max_abs: f64,
    pub max_rel: f64,
    pub max_ulp: u64,
    /// `||got - want|| / ||want||` (L2), for outputs under a norm tolerance; 0 otherwise.
    pub rel_norm: f64,
    /// The first element out of tolerance: (index, got, want, error, bound).
    pub first_failure: Option<(usize, f64, f64, f64, f64)>,
    pub tolerance: Tolerance,
}

impl Comparison {
    pub fn passed(&self) -> bool {
        self.first_failure.is_none()
    }

    /// Merge the comparison of another case of the same output.
    pub fn merge(&mut self, other: &Comparison) {
        self.len += other.len;
        self.max_abs = self.max_abs.max(other.max_abs);
        self.max_rel = self.max_rel.max(other.max_rel);
        self.max_ulp = self.max_ulp.max(other.max_ulp);
        self.rel_norm = self.rel_norm.max(other.rel_norm);
        if self.first_failure.is_none() {
            self.first_failure = other.first_failure;
        }
    }

    /// `Err` with the first failure spelled out, for tests and `?`.
    pub fn check(&self) -> Result<(), String> {
        match self.first_failure {
            None => Ok(()),
            Some((i, got, want, err, bound)) if self.tolerance.norm => Err(format!(
                "{}: relative L2 error {err:e} > bound {bound:e} over {} elements (largest error at element {i}: got {got:e}, want {want:e})",
                self.output, self.len
            )),
            Some((i, got, want, err, bound)) => Err(format!(
                "{}: element {i} of {}: got {got:e}, want {want:e}, error {err:e} > bound {bound:e} ({})",
                self.output,
                self.len,
                self.tolerance.describe()
            )),
        }
    }
}

/// Distance in float32 units in the last place between two finite floats.
pub fn ulp_distance(a: f32, b: f32) -> u64 {
    fn key(x: f32) -> i64 {
        let bits = x.to_bits() as i32;
        if bits < 0 {
            i64::from(i32::MIN) - i64::from(bits)
        } else {
            i64::from(bits)
        }
    }
    (key(a) - key(b)).unsigned_abs()
}

/// Compare float32 results with a reference. NaN and infinities pass only where both sides
/// agree exactly; a length mismatch is a failure at the first missing index.
pub fn compare_f32(output: &str, got: &[f32], want: &[f64], tol: Tolerance) -> Comparison {
    compare_values(output, got, want, tol)
}

/// A computed value's type: how it widens to the reference's f64, its distance in its own
/// units in the last place, and its bitwise equality with the reference rounded to it.
trait Computed: Copy {
    fn widen(self) -> f64;
    fn ulps_from(self, want: f64) -> u64;
    fn bits_equal(self, want: f64) -> bool;
}

impl Computed for f32 {
    fn widen(self) -> f64 {
        f64::from(self)
    }
    fn ulps_from(self, want: f64) -> u64 {
        ulp_distance(self, want as f32)
    }
    fn bits_equal(self, want: f64) -> bool {
        self.to_bits() == (want as f32).to_bits()
    }
}

impl Computed for f64 {
    fn widen(self) -> f64 {
        self
    }
    fn ulps_from(self, want: f64) -> u64 {
        ulp_distance_f64(self, want)
    }
    fn bits_equal(self, want: f64) -> bool {
        self.to_bits() == want.to_bits()
    }
}

/// [`compare_f32`] and [`compare_f64`]: one element-wise comparison for either width.
fn compare_values<T: Computed>(
    output: &str,
    got: &[T],
    want: &[f64],
    tol: Tolerance,
) -> Comparison {
    let mut c = Comparison {
        output: output.to_string(),
        len: got.len().max(want.len()),
        max_abs: 0.0,
        max_rel: 0.0,
        max_ulp: 0,
        rel_norm: 0.0,
        first_failure: None,
        tolerance: tol,
    };
    for i in 0..c.len {
        let (Some(&g), Some(&w)) = (got.get(i), want.get(i)) else {
            c.first_failure
                .get_or_insert((i, f64::NAN, f64::NAN, f64::INFINITY, 0.0));
            break;
        };
        let g64 = g.widen();
        let ok_special = (g64.is_nan() && w.is_nan()) || (g64.is_infinite() && g64 == w);
        let (err, bound, ok) = if ok_special {
            (0.0, 0.0, true)
        } else if !g64.is_finite() || !w.is_finite() {
            (f64::INFINITY, tol.bound(w), false)
        } else {
            let err = (g64 - w).abs();
            c.max_abs = c.max_abs.max(err);
            if w != 0.0 {
                c.max_rel = c.max_rel.max(err / w.abs());
            }
            c.max_ulp = c.max_ulp.max(g.ulps_from(w));
            let bound = tol.bound(w);
            let ok = if tol.exact {
                g.bits_equal(w)
            } else {
                err <= bound
            };
            (err, bound, ok)
        };
        if !ok && c.first_failure.is_none() {
            c.first_failure = Some((i, g64, w, err, bound));
        }
    }
    c
}

/// Compare float32 results with a reference under a relative-norm tolerance
/// (`tol.norm`): `||got - want|| / ||want|| <= tol.rtol`. Any non-finite value, on either
/// side, fails; so does a length mismatch. A failure reports the element with the largest
/// error.
pub fn compare_rel_norm(output: &str, got: &[f32], want: &[f64], tol: Tolerance) -> Comparison {
    let mut c = compare_f32(output, got, want, Tolerance::float32(""));
    c.tolerance = tol;
    c.first_failure = None;
    let (mut err2, mut ref2, mut worst) = (0.0f64, 0.0f64, (0usize, 0.0f64));
    let mut finite = got.len() == want.len();
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let e = f64::from(g) - w;
        finite &= e.is_finite();
        err2 += e * e;
        ref2 += w * w;
        if !(e.abs() <= worst.1) {
            worst = (i, e.abs());
        }
    }
    let rel = if ref2 > 0.0 {
        (err2 / ref2).sqrt()
    } else if err2 == 0.0 {
        0.0
    } else {
        f64::INFINITY
    };
    c.rel_norm = rel;
    if !finite || !(rel <= tol.rtol) {
        let i = worst.0;
        let g = got.get(i).map_or(f64::NAN, |&v| f64::from(v));
        let w = want.get(i).copied().unwrap_or(f64::NAN);
        c.first_failure = Some((i, g, w, if finite { rel } else { f64::INFINITY }, tol.rtol));
    }
    c
}

/// Compare integer results exactly.
pub fn compare_exact<T: Copy + PartialEq + Into<f64>>(
    output: &str,
    got: &[T],
    want: &[T],
) -> Comparison {
    let mut c = Comparison {
        output: output.to_string(),
        len: got.len().max(want.len()),
        max_abs: 0.0,
        max_rel: 0.0,
        max_ulp: 0,
        rel_norm: 0.0,
        first_failure: None,
        tolerance: crate::tolerance::EXACT,
    };
    for i in 0..c.len {
        match (got.get(i), want.get(i)) {
            (Some(&g), Some(&w)) if g == w => {}
            (g, w) => {
                let g = g.map_or(f64::NAN, |&v| v.into());
                let w = w.map_or(f64::NAN, |&v| v.into());
                c.max_abs = c.max_abs.max((g - w).abs());
                c.first_failure.get_or_insert((i, g, w, (g - w).abs(), 0.0));
            }
        }
    }
    c
}

/// Compare double results with a double reference (sums kept in double, such as the
/// training metrics). NaN and infinities pass only where both sides agree (NaN with NaN, an
/// infinity with the same one); `tol.exact` demands the same bits. `max_ulp` counts double
/// ulps here. A length mismatch is a failure at the first missing index.
pub fn compare_f64(output: &str, got: &[f64], want: &[f64], tol: Tolerance) -> Comparison {
    compare_values(output, got, want, tol)
}

/// Distance in double units in the last place between two finite doubles.
pub fn ulp_distance_f64(a: f64, b: f64) -> u64 {
    fn key(x: f64) -> i128 {
        let bits = x.to_bits() as i64;
        if bits < 0 {
            i128::from(i64::MIN) - i128::from(bits)
        } else {
            i128::from(bits)
        }
    }
    u64::try_from((key(a) - key(b)).unsigned_abs()).unwrap_or(u64::MAX)
}

/// Compare float32 results bitwise (graph replay against eager, run against run).
pub fn compare_bitwise(output: &str, got: &[f32], want: &[f32]) -> Comparison {
    let g: Vec<u32> = got.iter().map(|x| x.to_bits()).collect();
    let w: Vec<u32> = want.iter().map(|x| x.to_bits()).collect();
    let mut c = compare_exact(output, &g, &w);
    c.max_ulp = got
        .iter()
        .zip(want)
        .map(|(&a, &b)| ulp_distance(a, b))
        .max()
        .unwrap_or(0);
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tolerance::{Tolerance, EXACT};

    #[test]
    fn a_value_outside_the_bound_is_reported_with_its_index() {
        let tol = Tolerance::float32("test");
        let c = compare_f32("x", &[1.0, 2.0, 3.1], &[1.0, 2.0, 3.0], tol);
        let (i, got, want, _, _) = c.first_failure.unwrap();
        assert_eq!((i, got as f32, want), (2, 3.1, 3.0));
        assert!(c.check().unwrap_err().contains("element 2"));
    }

    #[test]
    fn nan_fails_against_a_number_and_a_short_output_fails() {
        let tol = Tolerance::float32("test");
        assert!(!compare_f32("x", &[f32::NAN], &[1.0], tol).passed());
        assert!(!compare_f32("x", &[1.0], &[1.0, 2.0], tol).passed());
        assert!(compare_f32("x", &[f32::NAN], &[f64::NAN], tol).passed());
    }

    #[test]
    fn exact_float_comparison_rejects_one_ulp() {
        let next = f32::from_bits(1.0f32.to_bits() + 1);
        let c = compare_f32("x", &[next], &[1.0], EXACT);
        assert!(!c.passed());
        assert_eq!(c.max_ulp, 1);
    }

    #[test]
    fn a_norm_tolerance_bounds_the_whole_output() {
        let tol = Tolerance::rel_norm(1e-3, "test");
        let want = [1.0, -2.0, 3.0, 4.0];
        assert!(compare_rel_norm("x", &[1.0, -2.0, 3.0, 4.001], &want, tol).passed());
        let c = compare_rel_norm("x", &[1.0, -2.0, 3.1, 4.0], &want, tol);
        assert_eq!(c.first_failure.unwrap().0, 2);
        assert!(c.check().unwrap_err().contains("relative L2 error"));
        assert!(!compare_rel_norm("x", &[1.0, f32::NAN, 3.0, 4.0], &want, tol).passed());
        assert!(!compare_rel_norm("x", &[1.0, -2.0, 3.0], &want, tol).passed());
    }

    #[test]
    fn double_comparison_applies_the_bound_and_matches_special_values_exactly() {
        let tol = Tolerance {
            atol: 1e-12,
            rtol: 0.0,
            exact: false,
            norm: false,
            reason: "test",
        };
        assert!(compare_f64("x", &[1.0 + 1e-13], &[1.0], tol).passed());
        let c = compare_f64("x", &[1.0, 2.0 + 1e-11], &[1.0, 2.0], tol);
        assert_eq!(c.first_failure.unwrap().0, 1);
        assert!(compare_f64(
            "x",
            &[f64::NAN, f64::INFINITY],
            &[f64::NAN, f64::INFINITY],
            tol
        )
        .passed());
        assert!(!compare_f64("x", &[f64::INFINITY], &[f64::NEG_INFINITY], tol).passed());
        assert!(!compare_f64("x", &[f64::NAN], &[1.0], tol).passed());
        assert!(!compare_f64("x", &[1.0], &[1.0, 2.0], tol).passed());
        let next = f64::from_bits(1.0f64.to_bits() + 1);
        let c = compare_f64("x", &[next], &[1.0], EXACT);
        assert!(!c.passed());
        assert_eq!(c.max_ulp, 1);
        assert_eq!(ulp_distance_f64(f64::from_bits(1), -f64::from_bits(1)), 2);
    }

    #[test]
    fn ulp_distance_crosses_zero() {
        assert_eq!(ulp_distance(0.0, -0.0), 0);
        assert_eq!(ulp_distance(f32::from_bits(1), -f32::from_bits(1)), 2);
    }

    // What each comparison must catch and must let through, one case per branch: these are
    // the gate's foundation, so each is held to the exact numbers it reports.

    fn abs_tol(atol: f64) -> Tolerance {
        Tolerance {
            atol,
            rtol: 0.0,
            exact: false,
            norm: false,
            reason: "test",
        }
    }

    fn next_up(x: f32) -> f32 {
        f32::from_bits(x.to_bits() + 1)
    }

    #[test]
    fn a_value_at_the_bound_passes_and_one_ulp_past_it_fails() {
        let tol = abs_tol(0.25);
        assert!(compare_f32("x", &[1.25], &[1.0], tol).passed());
        let c = compare_f32("x", &[next_up(1.25)], &[1.0], tol);
        let (i, got, want, err, bound) = c.first_failure.expect("one ulp past the bound");
        assert_eq!(
            (i, got, want, bound),
            (0, f64::from(next_up(1.25)), 1.0, 0.25)
        );
        assert_eq!(err, f64::from(next_up(1.25)) - 1.0);
        assert!(
            compare_f32("x", &[0.75], &[1.0], tol).passed(),
            "the bound is two-sided"
        );
        assert!(!compare_f32("x", &[0.75 - f32::EPSILON], &[1.0], tol).passed());
        // The relative part scales with |want|, of either sign.
        let rel = Tolerance {
            rtol: 0.5,
            ..abs_tol(0.0)
        };
        assert!(compare_f32("x", &[-3.0], &[-2.0], rel).passed());
        assert!(!compare_f32("x", &[-3.0 - 4.0 * f32::EPSILON], &[-2.0], rel).passed());
    }

    #[test]
    fn the_report_holds_the_largest_errors_and_the_first_failure() {
        let tol = abs_tol(0.1);
        let c = compare_f32("x", &[1.0, 2.5, 4.0, 0.5], &[1.0, 2.0, 3.0, 0.0], tol);
        assert_eq!(c.len, 4);
        assert_eq!(c.max_abs, 1.0);
        assert_eq!(c.max_rel, 1.0 / 3.0, "|0.5 - 0| has no relative error");
        assert_eq!(c.max_ulp, ulp_distance(0.5, 0.0));
        assert_eq!(
            c.first_failure,
            Some((1, 2.5, 2.0, 0.5, 0.1)),
            "the first, not the largest"
        );
        assert!(c
            .check()
            .unwrap_err()
            .starts_with("x: element 1 of 4: got 2.5e0, want 2e0"));
        let ok = compare_f32("y", &[1.0, 2.0], &[1.0, 2.0], tol);
        assert_eq!((ok.max_abs, ok.max_rel, ok.max_ulp), (0.0, 0.0, 0));
        assert_eq!(ok.check(), Ok(()));
    }

    #[test]
    fn non_finite_values_pass_only_where_both_sides_agree() {
        let tol = Tolerance::float32("test");
        let pass = |g: f32, w: f64| compare_f32("x", &[g], &[w], tol).passed();
        assert!(pass(f32::NAN, f64::NAN));
        assert!(pass(f32::INFINITY, f64::INFINITY));
        assert!(pass(f32::NEG_INFINITY, f64::NEG_INFINITY));
        assert!(!pass(f32::INFINITY, f64::NEG_INFINITY));
        assert!(!pass(f32::NAN, 0.0));
        assert!(!pass(0.0, f64::NAN));
        assert!(!pass(f32::INFINITY, 1e30));
        assert!(!pass(f32::MAX, f64::INFINITY));
        let c = compare_f32("x", &[1.0, f32::INFINITY], &[1.0, 2.0], tol);
        let (i, _, _, err, bound) = c.first_failure.unwrap();
        assert_eq!((i, err, bound), (1, f64::INFINITY, tol.bound(2.0)));
        assert_eq!(
            c.max_abs, 0.0,
            "a non-finite pair does not enter the finite maxima"
        );
    }

    #[test]
    fn a_length_mismatch_fails_at_the_first_missing_index_either_way() {
        let tol = Tolerance::float32("test");
        for (got, want) in [
            (&[1.0f32, 2.0][..], &[1.0, 2.0, 3.0][..]),
            (&[1.0, 2.0, 3.0][..], &[1.0, 2.0][..]),
        ] {
            let c = compare_f32("x", got, want, tol);
            assert_eq!(c.len, 3);
            assert_eq!(c.first_failure.map(|f| f.0), Some(2));
            let c = compare_f64(
                "x",
                &got.iter().map(|&v| f64::from(v)).collect::<Vec<_>>(),
                want,
                tol,
            );
            assert_eq!(c.first_failure.map(|f| f.0), Some(2));
        }
        assert!(
            compare_f32("x", &[], &[], tol).passed(),
            "nothing against nothing"
        );
    }

    #[test]
    fn an_all_zero_reference_is_held_to_the_absolute_bound() {
        let tol = Tolerance::float32("test");
        assert!(compare_f32("x", &[0.0, 0.0], &[0.0, 0.0], tol).passed());
        let c = compare_f32("x", &[1e-6, 0.0], &[0.0, 0.0], tol);
        assert!(c.passed() && c.max_rel == 0.0 && c.max_abs == f64::from(1e-6f32));
        assert!(!compare_f32("x", &[1e-4, 0.0], &[0.0, 0.0], tol).passed());
        let n = Tolerance::rel_norm(1e-3, "test");
        assert!(compare_rel_norm("x", &[0.0, 0.0], &[0.0, 0.0], n).passed());
        let c = compare_rel_norm("x", &[1e-30, 0.0], &[0.0, 0.0], n);
        assert_eq!(
            c.rel_norm,
            f64::INFINITY,
            "any error against a zero norm is unbounded"
        );
        assert!(!c.passed());
    }

    #[test]
    fn exact_comparisons_demand_the_same_bits() {
        assert!(compare_f32("x", &[1.5, -2.0], &[1.5, -2.0], EXACT).passed());
        assert!(!compare_f32("x", &[next_up(1.5)], &[1.5], EXACT).passed());
        assert!(
            !compare_f32("x", &[-0.0], &[0.0], EXACT).passed(),
            "the sign bit counts"
        );
        assert!(!compare_f64("x", &[-0.0], &[0.0], EXACT).passed());
        assert!(compare_f64("x", &[0.1], &[0.1], EXACT).passed());
        let b = compare_bitwise("x", &[1.0, f32::NAN, 3.0], &[1.0, f32::NAN, 3.0]);
        assert!(b.passed(), "the same NaN bits are the same result");
        let b = compare_bitwise("x", &[1.0, next_up(2.0), -0.0], &[1.0, 2.0, 0.0]);
        assert_eq!(b.first_failure.map(|f| f.0), Some(1));
        assert_eq!(b.max_ulp, 1);
        assert!(!compare_bitwise("x", &[1.0], &[1.0, 1.0]).passed());
    }

    #[test]
    fn integer_comparisons_catch_one_element_and_any_length_mismatch() {
        let c = compare_exact("x", &[1u32, 2, 3], &[1u32, 2, 3]);
        assert!(c.passed());
        assert_eq!((c.len, c.max_abs, c.tolerance), (3, 0.0, EXACT));
        let c = compare_exact("x", &[1i32, 5, 3, 9], &[1i32, 2, 3, 4]);
        assert_eq!(c.first_failure, Some((1, 5.0, 2.0, 3.0, 0.0)));
        assert_eq!(
            c.max_abs, 5.0,
            "the largest difference over every failing element"
        );
        let c = compare_exact("x", &[1u32, 2], &[1u32, 2, 3]);
        let (i, got, want, _, _) = c.first_failure.unwrap();
        assert!(i == 2 && got.is_nan() && want == 3.0);
        let c = compare_exact("x", &[1u32, 2, 7], &[1u32, 2]);
        let (i, got, want, _, _) = c.first_failure.unwrap();
        assert!(i == 2 && got == 7.0 && want.is_nan());
        assert_eq!(c.len, 3);
    }

    #[test]
    fn the_norm_comparison_reports_its_norm_and_the_worst_element() {
        let tol = Tolerance::rel_norm(1.0, "test");
        let c = compare_rel_norm("x", &[2.0, 0.0], &[1.0, 0.0], tol);
        assert_eq!(c.rel_norm, 1.0);
        assert!(c.passed(), "exactly at the bound");
        let c = compare_rel_norm(
            "x",
            &[2.0, 0.0],
            &[1.0, 0.0],
            Tolerance::rel_norm(0.999, "t"),
        );
        assert_eq!(c.first_failure, Some((0, 2.0, 1.0, 1.0, 0.999)));
        let want = [1.0, 1.0, 1.0, 1.0];
        let c = compare_rel_norm(
            "x",
            &[1.25, 0.5, 1.0, 1.25],
            &want,
            Tolerance::rel_norm(0.1, "t"),
        );
        assert_eq!(
            c.first_failure.map(|f| f.0),
            Some(1),
            "the largest error, first of equals"
        );
        assert_eq!(c.rel_norm, (0.0625f64 + 0.25 + 0.0625).sqrt() / 2.0);
        assert_eq!(c.tolerance, Tolerance::rel_norm(0.1, "t"));
        let c = compare_rel_norm(
            "x",
            &[1.0, f32::INFINITY],
            &[1.0, 1.0],
            Tolerance::rel_norm(1e9, "t"),
        );
        let (i, _, _, err, _) = c.first_failure.unwrap();
        assert_eq!((i, err), (1, f64::INFINITY));
        assert!(
            !compare_rel_norm("x", &[1.0], &[1.0, 0.0], Tolerance::rel_norm(1e9, "t")).passed()
        );
        assert!(
            !compare_rel_norm("x", &[1.0, 0.0], &[1.0], Tolerance::rel_norm(1e9, "t")).passed()
        );
    }

    #[test]
    fn merge_keeps_the_largest_figures_and_the_first_failure() {
        let tol = abs_tol(0.1);
        let mut a = compare_f32("x", &[1.0, 1.5], &[1.0, 1.0], tol);
        let b = compare_f32("x", &[3.0], &[1.0], tol);
        let a_failure = a.first_failure;
        a.merge(&b);
        assert_eq!(a.len, 3);
        assert_eq!((a.max_abs, a.max_rel, a.max_ulp), (2.0, 2.0, b.max_ulp));
        assert_eq!(
            a.first_failure, a_failure,
            "the earlier case's failure stays"
        );
        let mut ok = compare_f32("x", &[1.0], &[1.0], tol);
        ok.merge(&b);
        assert_eq!(
            ok.first_failure, b.first_failure,
            "a passing case takes the other's failure"
        );
        assert!(!ok.passed());
        let mut n = compare_rel_norm("x", &[1.0], &[1.0], Tolerance::rel_norm(1.0, "t"));
        n.merge(&compare_rel_norm(
            "x",
            &[1.5],
            &[1.0],
            Tolerance::rel_norm(1.0, "t"),
        ));
        assert_eq!(n.rel_norm, 0.5);
        let mut big = compare_f32("x", &[9.0], &[1.0], abs_tol(100.0));
        big.merge(&compare_f32("x", &[1.0], &[1.0], tol));
        assert_eq!(
            (big.max_abs, big.max_rel),
            (8.0, 8.0),
            "the larger side's figures stay"
        );
    }

    #[test]
    fn the_failure_message_names_the_tolerance_kind() {
        let c = compare_rel_norm("q", &[2.0], &[1.0], Tolerance::rel_norm(0.5, "t"));
        assert_eq!(
            c.check().unwrap_err(),
            "q: relative L2 error 1e0 > bound 5e-1 over 1 elements (largest error at element 0: got 2e0, want 1e0)"
        );
        let c = compare_f32("q", &[2.0], &[1.0], abs_tol(0.5));
        assert_eq!(
            c.check().unwrap_err(),
            "q: element 0 of 1: got 2e0, want 1e0, error 1e0 > bound 5e-1 (atol 5.0e-1 + rtol 0.0e0)"
        );
        let c = compare_f32("q", &[2.0], &[1.0], EXACT);
        assert!(c.check().unwrap_err().ends_with("(exact)"));
    }

    #[test]
    fn ulp_distances_count_representable_steps_both_ways() {
        assert_eq!(ulp_distance(1.0, next_up(1.0)), 1);
        assert_eq!(ulp_distance(next_up(1.0), 1.0), 1);
        assert_eq!(ulp_distance(1.0, 2.0), 1 << 23);
        assert_eq!(ulp_distance(-1.0, -2.0), 1 << 23);
        assert_eq!(
            ulp_distance(f32::MIN_POSITIVE, 0.0),
            u64::from(f32::MIN_POSITIVE.to_bits())
        );
        assert_eq!(ulp_distance_f64(1.0, 2.0), 1 << 52);
        assert_eq!(ulp_distance_f64(-1.0, -2.0), 1 << 52);
        assert_eq!(ulp_distance_f64(0.0, -0.0), 0);
        let two_up = f64::from_bits(1.0f64.to_bits() + 2);
        let c = compare_f64("x", &[two_up, 1.0], &[1.0, 1.0], EXACT);
        assert_eq!((c.max_ulp, c.first_failure.map(|f| f.0)), (2, Some(0)));
        assert_eq!(
            ulp_distance_f64(-f64::MAX, f64::MAX),
            u64::MAX - (1 << 53) - 1
        );
    }
}
