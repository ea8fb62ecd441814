//! NVRTC-compiled CUDA kernels for linear attention, launched with cudarc.
//!
//! * [`runtime`] — availability checks, NVRTC compilation with ptxas reports, the device
//!   context/stream, counted device buffers, event timing (read its module docs first).
//! * [`feature_map`] — the φ stage for maps that are not elementwise (softmax, 1+cos, FAVOR+,
//!   efficient attention) and its backward.
//! * [`noncausal`] — `cuda/noncausal/{f32,f16,bf16}`: S = φ(K)ᵀV, z, O = φ(Q)S/(φ(Q)z+ε).
//! * [`causal_recurrent`], [`causal_cumsum`], [`causal_chunked`] — the causal forms.
//!
//! Kernel sources live in `kernels/` at the repository root and are embedded at build time.

pub mod causal_chunked;
pub mod causal_cumsum;
pub mod causal_recurrent;
pub mod feature_map;
pub mod noncausal;
pub mod runtime;
mod staged;

use linattn_core::{AttnError, Backend, Unsupported};

pub use runtime::{gpu_available, nvrtc_available, DeviceInfo, KernelVariant};

/// Every CUDA backend. On a machine without a driver or GPU they still appear, and their
/// `supports` says `skipped: <reason>`.
pub fn backends() -> Vec<Box<dyn Backend>> {
    let mut all = Vec::new();
    all.extend(noncausal::backends());
    all.extend(causal_recurrent::backends());
    all.extend(causal_cumsum::backends());
    all.extend(causal_chunked::backends());
    all
}

/// Every kernel variant this crate can compile (what `tests/compile_all_kernels.rs` checks).
pub fn kernel_variants() -> Vec<KernelVariant> {
    let mut all = Vec::new();
    all.extend(feature_map::kernel_variants());
    all.extend(noncausal::kernel_variants());
    all.extend(causal_recurrent::kernel_variants());
    all.extend(causal_cumsum::kernel_variants());
    all.extend(causal_chunked::kernel_variants());
    all
}

/// Device 0's description (name, compute capability, SMs, L2, memory, driver and NVRTC).
pub fn device_info() -> Result<DeviceInfo, Unsupported> {
    gpu_available()?;
    runtime::gpu()
        .map(|gpu| gpu.info().clone())
        .map_err(|e| Unsupported::Unavailable(format!("CUDA device unusable: {e}")))
}

/// (free, total) device memory in bytes.
pub fn memory_info() -> Result<(u64, u64), AttnError> {
    runtime::gpu()?.memory_info()
}

/// Device-to-device copy bandwidth samples in GB/s, counted as read + write bytes.
pub fn measure_copy_bandwidth(bytes: usize, repeats: usize) -> Result<Vec<f64>, AttnError> {
    runtime::measure_copy_bandwidth(bytes, repeats)
}
