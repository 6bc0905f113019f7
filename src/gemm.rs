//! Row-major SGEMM through cuBLASLt by operand swap, in one helper: a row-major `[r x c]`
//! matrix with leading dimension `ld` is the column-major `[c x r]` matrix with the same
//! `ld`, so `C = op(A) op(B)` is computed as the column-major `C^T = op(B)^T op(A)^T`.
//! Spec: tallyho_oracle::gemm.
//!
//! One plan per call shape, made on first use (descriptors, layouts and the heuristic's
//! algorithm, without a K split unless the product is a small output over a long K, see
//! `reduction_schemes`; a fixed summation order either way), which can also apply a ReLU
//! epilogue. Plans are made during a graph's warm-up run, never inside a capture.

use crate::error::{Error, Result};
use cudarc::cublaslt::result as lt;
use cudarc::cublaslt::sys as ltsys;
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

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
        let (r, c) = if self.trans {
            (cols, rows)
        } else {
            (rows, cols)
        };
        if r == 0 || c == 0 {
            0
        } else {
            (r - 1) * self.ld + c
        }
    }
    fn valid(&self, rows: usize, cols: usize) -> bool {
        self.ld >= if self.trans { rows } else { cols }
    }
}

/// What a product does to its result before storing it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Epilogue {
    None,
    /// `max(x, 0)`.
    Relu,
}

pub struct Gemm {
    lt: LtEngine,
}

impl Gemm {
    pub fn new(stream: &Arc<CudaStream>) -> Result<Self> {
        Ok(Gemm {
            lt: LtEngine::new(stream)?,
        })
    }

    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.lt.stream
    }

    /// TF32 tensor-core math for the products that follow (inputs rounded to 10 mantissa
    /// bits, fp32 accumulation), or back to strict fp32 (the default).
    pub fn set_tf32(&self, on: bool) {
        self.lt.set_tf32(on);
    }

    /// Are the products in TF32 ([`Gemm::set_tf32`])?
    pub fn tf32(&self) -> bool {
        *self.lt.tf32.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn check(what: &str, len: usize, l: Layout, rows: usize, cols: usize) -> Result<()> {
        if !l.valid(rows, cols) || l.span(rows, cols) > len {
            return Err(Error::Shape(format!(
                "gemm operand {what}: {rows} x {cols} (transposed: {}) with ld {} needs {} elements, has {len}",
                l.trans,
                l.ld,
                l.span(rows, cols)
            )));
        }
        Ok(())
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
        self.lt.run(
            Shape {
                m,
                n,
                k,
                la,
                lb,
                ldc,
                batch: 1,
                strides: (0, 0, 0),
            },
            alpha,
            a,
            b,
            beta,
            c,
            Epilogue::None,
        )
    }

    /// `count` products at once, operand i at offset `i * stride` of each buffer (a stride
    /// of 0 shares the operand): e.g. the online and target networks on the same input;
    /// `epilogue` applied to each result.
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
        epilogue: Epilogue,
    ) -> Result<()> {
        let last = count.saturating_sub(1);
        Self::check("A", a.len().saturating_sub(last * stride_a), la, m, k)?;
        Self::check("B", b.len().saturating_sub(last * stride_b), lb, k, n)?;
        Self::check(
            "C",
            c.len().saturating_sub(last * stride_c),
            Layout::plain(ldc),
            m,
            n,
        )?;
        if stride_c < m * ldc && count > 1 {
            return Err(Error::Shape(format!(
                "gemm_batched: output stride {stride_c} overlaps {m} rows of ld {ldc}"
            )));
        }
        let sh = Shape {
            m,
            n,
            k,
            la,
            lb,
            ldc,
            batch: count,
            strides: (stride_a, stride_b, stride_c),
        };
        self.lt.run(sh, alpha, a, b, beta, c, epilogue)
    }
}

/// A product's shape as [`Gemm`] takes it (row-major), the batch and its strides (A, B, C).
#[derive(Clone, Copy, Debug)]
struct Shape {
    m: usize,
    n: usize,
    k: usize,
    la: Layout,
    lb: Layout,
    ldc: usize,
    batch: usize,
    strides: (usize, usize, usize),
}

/// The plan cache key: everything a cuBLASLt plan depends on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct PlanKey {
    m: usize,
    n: usize,
    k: usize,
    lda: usize,
    ta: bool,
    ldb: usize,
    tb: bool,
    ldc: usize,
    batch: usize,
    strides: (usize, usize, usize),
    epilogue: Epilogue,
    tf32: bool,
}

/// A cuBLASLt matmul plan: its descriptors and the chosen algorithm.
struct Plan {
    desc: ltsys::cublasLtMatmulDesc_t,
    layouts: [ltsys::cublasLtMatrixLayout_t; 3],
    algo: ltsys::cublasLtMatmulAlgo_t,
}

// SAFETY: the descriptors are plain host objects owned by the plan, used only under the
// engine's mutex.
unsafe impl Send for Plan {}

impl Drop for Plan {
    fn drop(&mut self) {
        // SAFETY: created by LtEngine::plan, destroyed once here.
        unsafe {
            let _ = lt::destroy_matmul_desc(self.desc);
            for l in self.layouts {
                let _ = lt::destroy_matrix_layout(l);
            }
        }
    }
}

/// The K-split reductions a product may use (a cublasLtReductionScheme_t mask). A split
/// adds a reduction kernel after the product (~3-8 us at these sizes, measured), which pays
/// only when the output is too small to fill the GPU and the K loop is long: fewer 64 x 64
/// output tiles (over the batch) than half the H200's 132 SMs, and K of at least 1024 (at
/// B = 1024 the weight gradients, whose K is the batch, measured 20 us slower in all
/// without a split; at B = 256 every product measured faster without). Only the schemes
/// that reduce through the workspace in a fixed order are allowed, never the in-place one.
fn reduction_schemes(key: &PlanKey) -> u32 {
    use ltsys::cublasLtReductionScheme_t::{
        CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE, CUBLASLT_REDUCTION_SCHEME_NONE,
        CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE,
    };
    let tiles = key.m.div_ceil(64) * key.n.div_ceil(64) * key.batch;
    if tiles < 66 && key.k >= 1024 {
        CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE as u32 | CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE as u32
    } else {
        CUBLASLT_REDUCTION_SCHEME_NONE as u32
    }
}

/// Workspace of each cuBLASLt engine.
const LT_WORKSPACE: usize = 8 << 20;

struct LtEngine {
    handle: ltsys::cublasLtHandle_t,
    stream: Arc<CudaStream>,
    workspace: CudaSlice<u8>,
    plans: Mutex<HashMap<PlanKey, Plan>>,
    tf32: Mutex<bool>,
}

// SAFETY: the handle is used only through &self methods that serialize on the plan mutex,
// and cuBLASLt handles may be used from any thread.
unsafe impl Send for LtEngine {}
unsafe impl Sync for LtEngine {}

impl Drop for LtEngine {
    fn drop(&mut self) {
        self.plans.lock().unwrap_or_else(|e| e.into_inner()).clear();
        // SAFETY: created in new, destroyed once here after its plans.
        let _ = unsafe { lt::destroy_handle(self.handle) };
    }
}

fn lt_err(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Gemm {
        op: what.to_string(),
        detail: e.to_string(),
    }
}

impl LtEngine {
    fn new(stream: &Arc<CudaStream>) -> Result<Self> {
        // SAFETY: only probes for the shared library.
        if !unsafe { ltsys::is_culib_present() } {
            return Err(Error::NoBlas);
        }
        Ok(LtEngine {
            handle: lt::create_handle().map_err(|e| lt_err("handle", e))?,
            stream: stream.clone(),
            workspace: stream.alloc_zeros(LT_WORKSPACE)?,
            plans: Mutex::new(HashMap::new()),
            tf32: Mutex::new(false),
        })
    }

    fn set_tf32(&self, on: bool) {
        *self.tf32.lock().unwrap_or_else(|e| e.into_inner()) = on;
    }

    /// The column-major problem of row-major `C = op(A) op(B)`: `C^T = op(B)^T op(A)^T`,
    /// so Lt's A is our B and its B our A.
    fn plan(&self, key: &PlanKey) -> Result<Plan> {
        use ltsys::cublasLtMatmulDescAttributes_t::{
            CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_MATMUL_DESC_TRANSA, CUBLASLT_MATMUL_DESC_TRANSB,
        };
        use ltsys::cublasLtMatmulPreferenceAttributes_t::{
            CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
        };
        use ltsys::cublasLtMatrixLayoutAttribute_t::{
            CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
        };
        let f32t = ltsys::cudaDataType_t::CUDA_R_32F;
        let (m, n, k) = (key.m as u64, key.n as u64, key.k as u64);
        let compute = if key.tf32 {
            ltsys::cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32
        } else {
            ltsys::cublasComputeType_t::CUBLAS_COMPUTE_32F
        };
        let desc =
            lt::create_matmul_desc(compute, f32t).map_err(|e| lt_err("matmul descriptor", e))?;
        let mut plan = Plan {
            desc,
            layouts: [std::ptr::null_mut(); 3],
            algo: ltsys::cublasLtMatmulAlgo_t { data: [0; 8] },
        };
        // cublasOperation_t: CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 (a 32-bit enum).
        let op = |t: bool| -> i32 { i32::from(t) };
        let (opa, opb) = (op(key.tb), op(key.ta));
        let epilogue = match key.epilogue {
            Epilogue::None => ltsys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_DEFAULT,
            Epilogue::Relu => ltsys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_RELU,
        };
        // SAFETY: each attribute gets a pointer to a value of the type cuBLASLt documents
        // for it, with that type's size.
        unsafe {
            let set =
                |a, p: *const std::ffi::c_void, s| lt::set_matmul_desc_attribute(desc, a, p, s);
            set(CUBLASLT_MATMUL_DESC_TRANSA, (&opa as *const i32).cast(), 4)
                .map_err(|e| lt_err("transa", e))?;
            set(CUBLASLT_MATMUL_DESC_TRANSB, (&opb as *const i32).cast(), 4)
                .map_err(|e| lt_err("transb", e))?;
            set(
                CUBLASLT_MATMUL_DESC_EPILOGUE,
                (&epilogue as *const ltsys::cublasLtEpilogue_t).cast(),
                4,
            )
            .map_err(|e| lt_err("epilogue", e))?;
        }
        // Stored (pre-op) column-major shapes: Lt's A = our B, Lt's B = our A, D = C^T.
        let a_dims = if key.tb { (k, n) } else { (n, k) };
        let b_dims = if key.ta { (m, k) } else { (k, m) };
        let dims = [
            (a_dims, key.ldb, key.strides.1),
            (b_dims, key.lda, key.strides.0),
            ((n, m), key.ldc, key.strides.2),
        ];
        for (i, ((rows, cols), ld, stride)) in dims.into_iter().enumerate() {
            let l = lt::create_matrix_layout(f32t, rows, cols, ld as i64)
                .map_err(|e| lt_err("layout", e))?;
            plan.layouts[i] = l;
            if key.batch > 1 {
                let (count, offset) = (key.batch as i32, stride as i64);
                // SAFETY: i32 batch count and i64 stride, as documented.
                unsafe {
                    lt::set_matrix_layout_attribute(
                        l,
                        CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                        (&count as *const i32).cast(),
                        4,
                    )
                    .map_err(|e| lt_err("batch count", e))?;
                    lt::set_matrix_layout_attribute(
                        l,
                        CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                        (&offset as *const i64).cast(),
                        8,
                    )
                    .map_err(|e| lt_err("batch stride", e))?;
                }
            }
        }
        let pref = lt::create_matmul_pref().map_err(|e| lt_err("preference", e))?;
        let (ws, reduction) = (LT_WORKSPACE as u64, reduction_schemes(key));
        // SAFETY: u64 workspace bytes and a u32 reduction-scheme mask, as documented; the
        // descriptors and layouts are the ones just made; pref is destroyed right after.
        let heuristic = unsafe {
            let r = lt::set_matmul_pref_attribute(
                pref,
                CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                (&ws as *const u64).cast(),
                8,
            )
            .and_then(|_| {
                lt::set_matmul_pref_attribute(
                    pref,
                    CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                    (&reduction as *const u32).cast(),
                    4,
                )
            })
            .and_then(|_| {
                let [a, b, c] = plan.layouts;
                lt::get_matmul_algo_heuristic(self.handle, desc, a, b, c, c, pref)
            });
            let _ = lt::destroy_matmul_pref(pref);
            r.map_err(|e| {
                lt_err(
                    &format!(
                        "no algorithm for {}x{}x{} (batch {})",
                        key.m, key.n, key.k, key.batch
                    ),
                    e,
                )
            })?
        };
        plan.algo = heuristic.algo;
        Ok(plan)
    }

    #[allow(clippy::too_many_arguments)]
    fn run<A: DevicePtr<f32>, B: DevicePtr<f32>, C: DevicePtrMut<f32>>(
        &self,
        sh: Shape,
        alpha: f32,
        a: &A,
        b: &B,
        beta: f32,
        c: &mut C,
        epilogue: Epilogue,
    ) -> Result<()> {
        let tf32 = *self.tf32.lock().unwrap_or_else(|e| e.into_inner());
        let key = PlanKey {
            m: sh.m,
            n: sh.n,
            k: sh.k,
            lda: sh.la.ld,
            ta: sh.la.trans,
            ldb: sh.lb.ld,
            tb: sh.lb.trans,
            ldc: sh.ldc,
            batch: sh.batch,
            strides: sh.strides,
            epilogue,
            tf32,
        };
        let mut plans = self.plans.lock().unwrap_or_else(|e| e.into_inner());
        let plan = match plans.entry(key) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => e.insert(self.plan(&key)?),
        };
        let s = &self.stream;
        let (pa, _ga) = a.device_ptr(s);
        let (pb, _gb) = b.device_ptr(s);
        let (pc, _gc) = c.device_ptr_mut(s);
        let (pw, _gw) = self.workspace.device_ptr(s);
        let [la, lb, lc] = plan.layouts;
        // SAFETY: the operands' extents were checked by the caller against this shape, the
        // plan was made for exactly this shape, and D = C in place with C's layout.
        unsafe {
            lt::matmul(
                self.handle,
                plan.desc,
                (&alpha as *const f32).cast(),
                (&beta as *const f32).cast(),
                pb as *const _,
                la,
                pa as *const _,
                lb,
                pc as *const _,
                lc,
                pc as *mut _,
                lc,
                &plan.algo,
                pw as *mut _,
                LT_WORKSPACE,
                s.cu_stream() as *mut _,
            )
        }
        .map_err(|e| {
            lt_err(
                &format!("matmul {}x{}x{} (batch {})", sh.m, sh.n, sh.k, sh.batch),
                e,
            )
        })
    }
}
