//! Naive softmax attention `softmax(QKᵀ/√D)V` (SPEC §1): the O(N²) baseline that linear
//! attention is timed against.
//!
//! * [`oracle`]: f64 loops, one query row at a time; the reference for the baselines.
//! * [`cpu`]: `cpu/softmax/f32`, candle-core on the CPU, materialising `[B, H, N, N]` on
//!   purpose; gradients by candle's autograd.
//! * [`cuda`]: `{cuda,sim}/softmax/{f32,f16}` through the `linattn-cuda` executor seam:
//!   batched GEMMs (cuBLAS on a GPU, the `sm_gemm` kernel on the PTX simulator) plus
//!   the row kernels of `kernels/softmax.cu`.
//! * [`gemm_plan`]: the row-major GEMM plans both GEMM engines carry out.

pub mod cpu;
mod cublas;
pub mod cuda;
pub mod gemm_plan;
pub mod oracle;
mod validate;

use linattn_core::Backend;
use linattn_cuda::Platform;

/// Every softmax backend: the CPU ones, then `cuda/softmax/{f32,f16}`, then
/// `sim/softmax/{f32,f16}`. Those whose hardware is absent still appear; their `supports`
/// says `skipped: <reason>`.
pub fn backends() -> Vec<Box<dyn Backend>> {
    let mut all: Vec<Box<dyn Backend>> = vec![Box::new(cpu::CandleCpuBackend::new())];
    for platform in [Platform::Cuda, Platform::Sim] {
        all.extend(cuda::backends(platform));
    }
    all
}

/// The variants of `kernels/softmax.cu` (f32 and f16 storage), for compile-all tests.
pub fn kernel_variants() -> Vec<linattn_cuda::runtime::KernelVariant> {
    cuda::kernel_variants()
}
