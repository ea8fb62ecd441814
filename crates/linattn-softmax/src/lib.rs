//! Naive softmax attention `softmax(QKᵀ/√D)V` (SPEC §1): the O(N²) baseline that linear
//! attention is timed against.
//!
//! * [`oracle`]: f64 loops, one query row at a time; the reference for the baselines.
//! * [`cpu`]: `cpu/softmax/f32`, candle-core on the CPU, materialising `[B, H, N, N]` on
//!   purpose; gradients by candle's autograd.
//! * [`cuda`]: `cuda/softmax/f32`, `cuda/softmax/f16`, cuBLAS GEMMs plus the row kernels of
//!   `kernels/softmax.cu`.

pub mod cpu;
pub mod cuda;
mod gemm_plan;
pub mod oracle;
mod validate;

use linattn_core::Backend;

/// Every softmax backend. Those whose hardware is absent still appear; their `supports`
/// says `skipped: <reason>`.
pub fn backends() -> Vec<Box<dyn Backend>> {
    vec![
        Box::new(cpu::CandleCpuBackend::new()),
        Box::new(cuda::f32_backend()),
        Box::new(cuda::f16_backend()),
    ]
}

/// The variants of `kernels/softmax.cu` (f32 and f16 storage), for compile-all tests.
pub fn kernel_variants() -> Vec<linattn_cuda::runtime::KernelVariant> {
    cuda::kernel_variants()
}
