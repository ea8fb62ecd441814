//! cuBLAS for the GPU executor's [`Executor::gemm`](super::Executor::gemm).
//!
//! The handle is bound to the executor's own stream of its own context, so a GEMM is ordered
//! with every allocation, copy, launch and timing event the executor issues, and nothing
//! outside the executor touches cudarc. cudarc's per-buffer event tracking never runs on
//! these pointers: none is wrapped in a `CudaSlice`.
//!
//! Run on an H100 (2026-11-25): `cuda/softmax/f16` through this path passed `check --long`.

use std::ffi::c_void;
use std::sync::{Arc, OnceLock};

use cudarc::cublas::{result as cublas_result, sys as cublas_sys, CudaBlas};
use cudarc::driver::CudaStream;
use linattn_core::{AttnError, Precision, Unsupported};

use super::gemm::{ColumnMajorCall, GemmCall, Transpose};

/// cuBLAS loadable. cudarc panics on first use when it is not, so this runs before any call.
pub(crate) fn cublas_available() -> Result<(), Unsupported> {
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

/// A cuBLAS handle on the executor's stream.
pub(crate) struct Cublas {
    blas: CudaBlas,
}

impl Cublas {
    /// A handle on `stream` (the executor's; its context must be current).
    pub(crate) fn new(stream: Arc<CudaStream>) -> Result<Cublas, AttnError> {
        cublas_available()?;
        let blas = CudaBlas::new(stream).map_err(|e| cublas_error("cublasCreate", e))?;
        Ok(Cublas { blas })
    }

    /// `call` through the column-major `cublasGemmStridedBatchedEx`.
    ///
    /// # Safety
    /// `call`'s addresses must be live device allocations of this device holding `batch`
    /// matrices of `precision` elements with the sizes and strides of its plan.
    pub(crate) unsafe fn gemm_strided_batched(&self, call: &GemmCall<'_>) -> Result<(), AttnError> {
        let (plan, batch, what) = (&call.plan, call.batch, call.what);
        let (a, b, c) = (call.a, call.b, call.c);
        let data_type = match call.precision {
            Precision::F32 => cublas_sys::cudaDataType_t::CUDA_R_32F,
            Precision::F16 => cublas_sys::cudaDataType_t::CUDA_R_16F,
            other => {
                return Err(AttnError::Unsupported(Unsupported::Problem(format!(
                    "cuBLAS GEMMs run on f32 and f16 storage, not {other}"
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
