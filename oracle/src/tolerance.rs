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
