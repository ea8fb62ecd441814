//! Naive softmax attention `softmax(QKᵀ/√D)V` (SPEC §1): the O(N²) baseline that linear
//! attention is timed against.
//!
//! * [`oracle`]: f64 loops, one query row at a time; the reference for the baselines.
//! * [`cpu`]: `cpu/softmax/f32`, candle-core on the CPU, materialising `[B, H, N, N]` on
//!   purpose; gradients by candle's autograd.
//! * [`cuda`]: `{cuda,sim}/softmax/{f32,f16}` through the `linattn-cuda` executor seam:
//!   batched GEMMs (cuBLAS through the executor on a GPU, the `sm_gemm` kernel on
//!   the PTX simulator) plus the row kernels of `kernels/softmax.cu`; and
//!   `cuda/softmax+gemmkernel/{f32,f16}`, the GPU running the simulator's GEMM kernel.

pub mod cpu;
pub mod cuda;
pub mod oracle;
mod validate;

use linattn_core::Backend;

/// The CPU softmax baseline(s).
pub fn cpu_backends() -> Vec<Box<dyn Backend>> {
    vec![Box::new(cpu::CandleCpuBackend::new())]
}

/// Every softmax backend: the CPU ones, then `cuda/softmax/{f32,f16}`,
/// `cuda/softmax+gemmkernel/{f32,f16}`, then `sim/softmax/{f32,f16}`. Those whose hardware is absent still appear; their `supports`
/// says `skipped: <reason>`.
pub fn backends() -> Vec<Box<dyn Backend>> {
    let mut all = cpu_backends();
    all.extend(linattn_cuda::registry::backends_of(&[cuda::FORM]));
    all
}

/// The variants of `kernels/softmax.cu` (f32 and f16 storage), for compile-all tests.
pub fn kernel_variants() -> Vec<linattn_cuda::runtime::KernelVariant> {
    cuda::kernel_variants()
}
