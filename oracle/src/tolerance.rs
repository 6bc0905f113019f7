//! Declared tolerances: one per compared output, with the reason it holds. The tests and
//! `tallyho verify` read them from here, so a tolerance is stated once.

/// `|got - want| <= atol + rtol * |want|`, or bitwise equality when `exact`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tolerance {
    pub atol: f64,
    pub rtol: f64,
    pub exact: bool,
    pub reason: &'static str,
}

impl Tolerance {
    pub const fn exact(reason: &'static str) -> Self {
        Tolerance { atol: 0.0, rtol: 0.0, exact: true, reason }
    }

    /// PyTorch's float32 defaults for float32 results against an f64 reference.
    pub const fn float32(reason: &'static str) -> Self {
        Tolerance { atol: 1e-5, rtol: 1.3e-6, exact: false, reason }
    }

    pub fn bound(&self, want: f64) -> f64 {
        self.atol + self.rtol * want.abs()
    }

    pub fn describe(&self) -> String {
        if self.exact {
            "exact".to_string()
        } else {
            format!("atol {:.1e} + rtol {:.1e}", self.atol, self.rtol)
        }
    }
}

/// Integer results and float results that the oracle reproduces operation for operation.
pub const EXACT: Tolerance =
    Tolerance::exact("integer result, or float computed by the same IEEE operations in the same order");

/// Priorities `(|delta| + eps)^alpha`: the kernel evaluates `pow` in double and rounds once
/// to float, the oracle evaluates it in double; the two differ only where the double result
/// falls within a double ulp of a float rounding boundary, i.e. by at most one float ulp.
pub const PER_PRIORITY: Tolerance = Tolerance {
    atol: 0.0,
    rtol: 1.2e-7, // 2^-23: one float ulp relative
    exact: false,
    reason: "pow in double rounded once to float: at most 1 float ulp from the f64 oracle",
};

/// Importance weights `(p_i / p_min)^-beta` in [0, 1]: double pow rounded once to float on the
/// GPU against the f64 oracle; float32 policy defaults.
pub const PER_IS_WEIGHT: Tolerance =
    Tolerance::float32("double pow rounded once to float; float32 defaults of the numerics policy");

/// The FlashAttention rule for reductions and GEMMs: the GPU's max error against the f64
/// oracle may be at most `k = 2` times the max error of a float32 reference that sums in
/// another order, plus a floor of one float ulp of the largest reference value (so that a
/// reference that happens to be exact does not demand exactness).
pub fn reduction_rule(f32_reference: &[f32], f64_oracle: &[f64]) -> Tolerance {
    let ref_err = f32_reference.iter().zip(f64_oracle).map(|(&r, &o)| (f64::from(r) - o).abs()).fold(0.0, f64::max);
    let scale = f64_oracle.iter().fold(0.0f64, |m, &o| m.max(o.abs()));
    Tolerance {
        atol: 2.0 * ref_err + scale * f64::from(f32::EPSILON),
        rtol: 0.0,
        exact: false,
        reason: "FlashAttention rule: 2 x the max error of a float32 reference summing in reverse order",
    }
}
