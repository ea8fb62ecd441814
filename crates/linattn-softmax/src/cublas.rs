//! The cuBLAS GEMM engine of `cuda/softmax` (a GPU only; the simulator has no cuBLAS).
//!
//! cuBLAS needs a CUDA stream, and the [`Executor`](linattn_cuda::Executor) seam exposes
//! none (no cudarc type crosses it). This engine therefore opens its own handles to the same
//! device, and relies on what the CUDA executor does (crates/linattn-cuda/src/executor/cuda.rs,
//! cudarc 0.19):
//!
//! * the executor's context is `CudaContext::new(0)`, which is `cuDevicePrimaryCtxRetain` of
//!   device 0: the device's *primary* context, one per device and process, reference-counted.
//!   [`Cublas::new`] calls `CudaContext::new(0)` too, so it gets the same `CUcontext` (another
//!   reference to it, released when the engine drops);
//! * the executor issues every allocation, copy, launch and timing event on
//!   `ctx.default_stream()`, which in cudarc is the null stream handle (`cu_stream` = 0, not
//!   owned). The null handle names the *legacy default stream of the current context*; the
//!   cuBLAS handle here is bound with `cublasSetStream(handle, 0)` and every call first makes
//!   the primary context current ([`Cublas::gemm_strided_batched`]), so cuBLAS' kernels go to
//!   that same stream;
//! * one stream means one order: a GEMM starts after the executor's uploads, launches and
//!   stream-ordered allocations (`cuMemAllocAsync` on the null stream) issued before it, the
//!   row kernels launched after it see its results, a later `cuMemFreeAsync` waits for it,
//!   and the executor's `time` events (recorded on the null stream) bracket it.
//!
//! A second, non-null stream (`ctx.new_stream()`) would break all of that, and so would an
//! executor that moved off the null stream or off the primary context: this module depends on
//! both facts of the executor's implementation, which the seam does not state as a contract.
//! No pointer passed here is wrapped in a cudarc `CudaSlice`, so cudarc's per-buffer event
//! tracking never runs on them.
//!
//! NOT YET RUN ON A GPU: no GPU has been available to this project. Everything up to the
//! [`ColumnMajorCall`] is checked on the host (gemm_plan.rs) and, through the same plans, by
//! `sm_gemm` on the simulator; the cuBLAS call itself is only checked on a GPU.

use std::ffi::c_void;
use std::sync::{Arc, OnceLock};

use cudarc::cublas::{result as cublas_result, sys as cublas_sys, CudaBlas};
use cudarc::driver::CudaContext;
use linattn_core::{AttnError, Precision, Unsupported};

use crate::gemm_plan::{ColumnMajorCall, RowMajorGemm, Transpose};

/// cuBLAS loadable. cudarc panics on first use when it is not, so this runs before any call.
pub fn cublas_available() -> Result<(), Unsupported> {
    static STATUS: OnceLock<Result<(), Unsupported>> = OnceLock::new();
    STATUS
        .get_or_init(|| {
            // SAFETY: only tries dlopen on cudarc's candidate names.
            if unsafe { cublas_sys::is_culib_present() } {
                Ok(())
            } else {
                Err(Unsupported::Unavailable(
                    "no cuBLAS (libcublas.so.13 not found on the loader path)".into(),
                ))
            }
        })
        .clone()
}

fn cublas_error(what: &str, error: cudarc::cublas::result::CublasError) -> AttnError {
    if error.0 == cublas_sys::cublasStatus_t::CUBLAS_STATUS_ALLOC_FAILED {
        AttnError::OutOfMemory {
            device: "cuda:0".into(),
            requested_bytes: 0,
            detail: format!("cuBLAS {what}: CUBLAS_STATUS_ALLOC_FAILED"),
        }
    } else {
        AttnError::Cuda(format!("cuBLAS {what}: {:?}", error.0))
    }
}

/// A cuBLAS handle on the null stream of device 0's primary context (see the module docs).
pub(crate) struct Cublas {
    ctx: Arc<CudaContext>,
    blas: CudaBlas,
}

impl Cublas {
    /// Only call once the CUDA executor exists (so device 0 is known to be usable).
    pub(crate) fn new() -> Result<Cublas, AttnError> {
        cublas_available()?;
        // The primary context of device 0: the executor's own context (module docs).
        let ctx = CudaContext::new(0)
            .map_err(|e| AttnError::Cuda(format!("cuDevicePrimaryCtxRetain(0) for cuBLAS: {e}")))?;
        // The null stream, i.e. the executor's stream. Never `ctx.new_stream()`.
        let stream = ctx.default_stream();
        let blas = CudaBlas::new(stream).map_err(|e| cublas_error("cublasCreate", e))?;
        Ok(Cublas { ctx, blas })
    }

    /// `C_z = op(A_z)·op(B_z)` for `z < batch`, row-major as `plan` states, through the
    /// column-major `cublasGemmStridedBatchedEx` (fp32 compute, storage `precision` in and out).
    ///
    /// # Safety
    /// `a`, `b` and `c` must be live device allocations of this device holding `batch`
    /// matrices of `precision` elements with the sizes and strides of `plan`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn gemm_strided_batched(
        &self,
        plan: &RowMajorGemm,
        batch: i32,
        precision: Precision,
        a: u64,
        b: u64,
        c: u64,
        what: &str,
    ) -> Result<(), AttnError> {
        self.ctx
            .bind_to_thread()
            .map_err(|e| AttnError::Cuda(format!("cuCtxSetCurrent for cuBLAS: {e}")))?;
        let data_type = match precision {
            Precision::F32 => cublas_sys::cudaDataType_t::CUDA_R_32F,
            Precision::F16 => cublas_sys::cudaDataType_t::CUDA_R_16F,
            other => {
                return Err(AttnError::Unsupported(Unsupported::Problem(format!(
                    "cuda/softmax runs cuBLAS on f32 and f16 storage, not {other}"
                ))))
            }
        };
        let op = |t: Transpose| match t {
            Transpose::No => cublas_sys::cublasOperation_t::CUBLAS_OP_N,
            Transpose::Yes => cublas_sys::cublasOperation_t::CUBLAS_OP_T,
        };
        let call: ColumnMajorCall = plan.column_major();
        // CUBLAS_COMPUTE_32F takes fp32 α and β (host pointers, the default pointer mode).
        let alpha: f32 = 1.0;
        let beta: f32 = 0.0;
        // Column-major Cᵀ = op(B)ᵀ·op(A)ᵀ: B's buffer goes first.
        // SAFETY: the caller guarantees the buffers; α and β outlive the (enqueueing) call.
        unsafe {
            cublas_result::gemm_strided_batched_ex(
                *self.blas.handle(),
                op(call.trans_first),
                op(call.trans_second),
                call.m,
                call.n,
                call.k,
                (&alpha as *const f32).cast::<c_void>(),
                b as *const c_void,
                data_type,
                call.ld_first,
                plan.stride_b(),
                a as *const c_void,
                data_type,
                call.ld_second,
                plan.stride_a(),
                (&beta as *const f32).cast::<c_void>(),
                c as *mut c_void,
                data_type,
                call.ldc,
                plan.stride_c(),
                batch,
                cublas_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                cublas_sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .map_err(|e| cublas_error(what, e))
    }
}
