//! NVRTC-compiled CUDA kernels for linear attention, run on a GPU (cudarc) or on the PTX
//! simulator (`linattn-ptxsim`), through one [`executor::Executor`] seam.
//!
//! * [`runtime`] — NVRTC availability and compilation (PTX + cubin + ptxas report, cached),
//!   kernel variants and the shared `-D` vocabulary.
//! * [`executor`] — the device seam: [`executor::cuda`] (a GPU) and [`executor::sim`] (the
//!   simulator); [`memory`] — counted device buffers on either.
//! * [`feature_map`] — the φ stage for maps that are not elementwise (softmax, 1+cos, FAVOR+,
//!   efficient attention) and its backward.
//! * [`noncausal`] — `{cuda,sim}/noncausal/{f32,f16,bf16}`: S = φ(K)ᵀV, z, O = φ(Q)S/(φ(Q)z+ε).
//! * [`causal_recurrent`], [`causal_cumsum`], [`causal_chunked`] — the causal forms.
//! * [`decode`] — `{cuda,sim}/decode/{f32,f16,bf16}`: streaming decode, one token per launch.
//!
//! Every backend exists once per [`Platform`]: `cuda/<form>/<precision>` runs on the GPU,
//! `sim/<form>/<precision>` runs the same kernels, compiled the same way, on the simulator.
//! Kernel sources live in `kernels/` at the repository root and are embedded at build time.

pub mod causal_chunked;
pub mod causal_cumsum;
pub mod causal_recurrent;
pub mod decode;
pub mod executor;
pub mod feature_map;
pub mod memory;
pub mod noncausal;
pub mod runtime;
mod staged;

use linattn_core::{AttnError, Backend, Decoder, Unsupported};

pub use executor::{DeviceInfo, Executor, KernelArg, Launch, Platform};
pub use runtime::{gpu_available, nvrtc_available, KernelVariant};

/// Every CUDA backend on every platform (GPU first, then simulator). On a machine without a
/// GPU (or NVRTC) they still appear, and their `supports` says `skipped: <reason>`.
pub fn backends() -> Vec<Box<dyn Backend>> {
    Platform::ALL.into_iter().flat_map(backends_on).collect()
}

/// Every backend of one platform.
pub fn backends_on(platform: Platform) -> Vec<Box<dyn Backend>> {
    let mut all = Vec::new();
    all.extend(noncausal::backends(platform));
    all.extend(causal_recurrent::backends(platform));
    all.extend(causal_cumsum::backends(platform));
    all.extend(causal_chunked::backends(platform));
    all
}

/// Every streaming decoder on every platform (GPU first, then simulator); absent hardware
/// shows in `supports` as `skipped: <reason>`.
pub fn decoders() -> Vec<Box<dyn Decoder>> {
    Platform::ALL
        .into_iter()
        .flat_map(decode::decoders)
        .collect()
}

/// Every kernel variant this crate can compile (what `tests/compile_all_kernels.rs` checks).
pub fn kernel_variants() -> Vec<KernelVariant> {
    let mut all = Vec::new();
    all.extend(feature_map::kernel_variants());
    all.extend(noncausal::kernel_variants());
    all.extend(causal_recurrent::kernel_variants());
    all.extend(causal_cumsum::kernel_variants());
    all.extend(causal_chunked::kernel_variants());
    all.extend(decode::kernel_variants());
    all
}

/// The device a platform's backends run on (name, compute capability, SMs, L2, memory,
/// driver and NVRTC).
pub fn device_info(platform: Platform) -> Result<DeviceInfo, Unsupported> {
    platform.executor().map(|e| e.info().clone())
}

/// (free, total) device memory in bytes.
pub fn memory_info(platform: Platform) -> Result<(u64, u64), AttnError> {
    platform.executor()?.memory_info()
}

/// Device-to-device copy bandwidth samples in GB/s, counted as read + write bytes.
pub fn measure_copy_bandwidth(
    platform: Platform,
    bytes: usize,
    repeats: usize,
) -> Result<Vec<f64>, AttnError> {
    executor::measure_copy_bandwidth(platform.executor()?.as_ref(), bytes, repeats)
}
