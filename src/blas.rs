//! Row-major SGEMM through cuBLAS by operand swap, in one helper: a row-major `[r x c]`
//! matrix with leading dimension `ld` is the column-major `[c x r]` matrix with the same
//! `ld`, so `C = op(A) op(B)` is computed as the column-major `C^T = op(B)^T op(A)^T`.
//! Spec: tallyho_oracle::gemm.

use crate::error::{Error, Result};
use cudarc::cublas::sys::cublasOperation_t::{CUBLAS_OP_N, CUBLAS_OP_T};
use cudarc::cublas::{CudaBlas, Gemm, GemmConfig, StridedBatchedConfig};
use cudarc::driver::{CudaStream, DevicePtr, DevicePtrMut};
use std::sync::Arc;

/// A row-major operand: `rows x cols` as used (after `trans`), stored with row stride `ld`.
#[derive(Clone, Copy, Debug)]
pub struct Layout {
    pub ld: usize,
    pub trans: bool,
}

impl Layout {
    pub const fn plain(ld: usize) -> Self {
        Layout { ld, trans: false }
    }
    pub const fn transposed(ld: usize) -> Self {
        Layout { ld, trans: true }
    }
    /// Elements the stored matrix spans when used as `rows x cols`.
    fn span(&self, rows: usize, cols: usize) -> usize {
        let (r, c) = if self.trans { (cols, rows) } else { (rows, cols) };
        if r == 0 || c == 0 { 0 } else { (r - 1) * self.ld + c }
    }
    fn valid(&self, rows: usize, cols: usize) -> bool {
        self.ld >= if self.trans { rows } else { cols }
    }
}

pub struct Blas {
    blas: CudaBlas,
}

impl Blas {
    pub fn new(stream: &Arc<CudaStream>) -> Result<Self> {
        // SAFETY: only probes for the shared library.
        if !unsafe { cudarc::cublas::sys::is_culib_present() } {
            return Err(Error::Usage("cuBLAS (libcublas.so.13) could not be loaded: add CUDA 13's lib folder to LD_LIBRARY_PATH".into()));
        }
        Ok(Blas { blas: CudaBlas::new(stream.clone()).map_err(|e| Error::Usage(format!("cuBLAS handle: {e}")))? })
    }

    /// TF32 tensor-core math for the products (inputs rounded to 10 mantissa bits, fp32
    /// accumulation), or back to strict fp32 (the default).
    pub fn set_tf32(&self, on: bool) -> Result<()> {
        use cudarc::cublas::sys::cublasMath_t::{CUBLAS_DEFAULT_MATH, CUBLAS_TF32_TENSOR_OP_MATH};
        let mode = if on { CUBLAS_TF32_TENSOR_OP_MATH } else { CUBLAS_DEFAULT_MATH };
        // SAFETY: the handle is live for self's lifetime; setting the math mode has no other effect.
        let status = unsafe { cudarc::cublas::sys::cublasSetMathMode(*self.blas.handle(), mode) };
        if status != cudarc::cublas::sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
            return Err(Error::Usage(format!("cuBLAS math mode: {status:?}")));
        }
        Ok(())
    }

    fn check(what: &str, len: usize, l: Layout, rows: usize, cols: usize) -> Result<()> {
        if !l.valid(rows, cols) || l.span(rows, cols) > len {
            return Err(Error::Usage(format!(
                "gemm operand {what}: {rows} x {cols} (transposed: {}) with ld {} needs {} elements, has {len}",
                l.trans,
                l.ld,
                l.span(rows, cols)
            )));
        }
        Ok(())
    }

    fn config(m: usize, n: usize, k: usize, alpha: f32, a: Layout, b: Layout, beta: f32, ldc: usize) -> GemmConfig<f32> {
        GemmConfig {
            transa: if b.trans { CUBLAS_OP_T } else { CUBLAS_OP_N },
            transb: if a.trans { CUBLAS_OP_T } else { CUBLAS_OP_N },
            m: n as i32,
            n: m as i32,
            k: k as i32,
            alpha,
            lda: b.ld as i32,
            ldb: a.ld as i32,
            beta,
            ldc: ldc as i32,
        }
    }

    /// `C[m x n] = alpha op(A)[m x k] op(B)[k x n] + beta C`, all row-major.
    #[allow(clippy::too_many_arguments)]
    pub fn gemm<A: DevicePtr<f32>, B: DevicePtr<f32>, C: DevicePtrMut<f32>>(
        &self,
        m: usize,
        n: usize,
        k: usize,
        alpha: f32,
        a: &A,
        la: Layout,
        b: &B,
        lb: Layout,
        beta: f32,
        c: &mut C,
        ldc: usize,
    ) -> Result<()> {
        Self::check("A", a.len(), la, m, k)?;
        Self::check("B", b.len(), lb, k, n)?;
        Self::check("C", c.len(), Layout::plain(ldc), m, n)?;
        // SAFETY: the operand extents were checked against the buffers' lengths above, and
        // the column-major call computes C^T = op(B)^T op(A)^T over exactly those extents.
        unsafe { self.blas.gemm(Self::config(m, n, k, alpha, la, lb, beta, ldc), b, a, c) }
            .map_err(|e| Error::Usage(format!("cuBLAS sgemm {m}x{n}x{k}: {e}")))
    }

    /// `count` products at once, operand i at offset `i * stride` of each buffer (a stride
    /// of 0 shares the operand): e.g. the online and target networks on the same input.
    #[allow(clippy::too_many_arguments)]
    pub fn gemm_batched<A: DevicePtr<f32>, B: DevicePtr<f32>, C: DevicePtrMut<f32>>(
        &self,
        count: usize,
        m: usize,
        n: usize,
        k: usize,
        alpha: f32,
        a: &A,
        la: Layout,
        stride_a: usize,
        b: &B,
        lb: Layout,
        stride_b: usize,
        beta: f32,
        c: &mut C,
        ldc: usize,
        stride_c: usize,
    ) -> Result<()> {
        let last = count.saturating_sub(1);
        Self::check("A", a.len().saturating_sub(last * stride_a), la, m, k)?;
        Self::check("B", b.len().saturating_sub(last * stride_b), lb, k, n)?;
        Self::check("C", c.len().saturating_sub(last * stride_c), Layout::plain(ldc), m, n)?;
        if stride_c < m * ldc && count > 1 {
            return Err(Error::Usage(format!("gemm_batched: output stride {stride_c} overlaps {m} rows of ld {ldc}")));
        }
        let cfg = StridedBatchedConfig {
            gemm: Self::config(m, n, k, alpha, la, lb, beta, ldc),
            batch_size: count as i32,
            stride_a: stride_b as i64,
            stride_b: stride_a as i64,
            stride_c: stride_c as i64,
        };
        // SAFETY: each of the `count` operand triples lies inside its buffer (checked above
        // for the last one, the others precede it); outputs do not overlap.
        unsafe { self.blas.gemm_strided_batched(cfg, b, a, c) }
            .map_err(|e| Error::Usage(format!("cuBLAS sgemm_strided_batched {count}x {m}x{n}x{k}: {e}")))
    }
}
