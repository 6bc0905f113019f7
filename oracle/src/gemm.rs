//! Row-major matrix product, the spec of `src/gemm.rs` (cuBLAS SGEMM by operand swap).
//!
//! `C[m x n] = alpha * op(A) op(B) + beta * C`, every matrix row-major with a leading
//! dimension (row stride); `op(X) = X` or `X^T`. With `trans_a`, A is stored `[k x m]`.

/// Element (r, c) of op(X) where X is stored row-major with leading dimension `ld`.
fn at(x: &[f32], ld: usize, trans: bool, r: usize, c: usize) -> f32 {
    if trans {
        x[c * ld + r]
    } else {
        x[r * ld + c]
    }
}

/// `alpha * op(A) op(B) + beta * C` in f64, returned as an `m x n` row-major matrix.
#[allow(clippy::too_many_arguments)]
pub fn gemm(
    m: usize,
    n: usize,
    k: usize,
    alpha: f64,
    a: &[f32],
    lda: usize,
    trans_a: bool,
    b: &[f32],
    ldb: usize,
    trans_b: bool,
    beta: f64,
    c: &[f32],
    ldc: usize,
) -> Vec<f64> {
    let mut out = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            let dot: f64 = (0..k)
                .map(|p| {
                    f64::from(at(a, lda, trans_a, i, p)) * f64::from(at(b, ldb, trans_b, p, j))
                })
                .sum();
            let prior = if beta == 0.0 {
                0.0
            } else {
                beta * f64::from(c[i * ldc + j])
            };
            out[i * n + j] = alpha * dot + prior;
        }
    }
    out
}

/// The same product in f32, summing over k in reverse order: a float32 reference whose
/// error (against the f64 [`gemm`]) bounds what a correct float32 GEMM may show (the
/// FlashAttention rule: the GPU's error may be at most k times this one's, k = 2).
#[allow(clippy::too_many_arguments)]
pub fn gemm_f32_reversed(
    m: usize,
    n: usize,
    k: usize,
    a: &[f32],
    lda: usize,
    trans_a: bool,
    b: &[f32],
    ldb: usize,
    trans_b: bool,
) -> Vec<f32> {
    let mut out = vec![0.0f32; m * n];
    for i in 0..m {
        for j in 0..n {
            out[i * n + j] = (0..k).rev().fold(0.0f32, |acc, p| {
                acc + at(a, lda, trans_a, i, p) * at(b, ldb, trans_b, p, j)
            });
        }
    }
    out
}
