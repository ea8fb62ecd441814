//! NVRTC-compiled CUDA kernels for linear attention, run on a GPU (cudarc) or on the PTX
//! simulator (`linattn-ptxsim`), through one [`executor::Executor`] seam.
//!
//! * [`runtime`] — NVRTC availability and compilation (PTX + cubin + ptxas report, cached),
//!   kernel variants and the shared `-D` vocabulary.
//! * [`executor`] — the device seam: [`executor::cuda`] (a GPU) and [`executor::sim`] (the
//!   simulator); [`memory`] — counted device buffers on either.
//! * [`form`] — the form seam: [`DeviceForm`] (what a form's kernels do) and
//!   [`DeviceBackend`] (the one backend that runs any form); [`params`] — one typed argument
//!   struct per kernel entry point; [`registry`] — the one list of forms.
//! * [`feature_map`] — the φ stage for maps that are not elementwise (softmax, 1+cos, FAVOR+,
//!   efficient attention) and its backward.
//! * [`noncausal`] — `{cuda,sim}/noncausal/{f32,f16,bf16}`: S = φ(K)ᵀV, z, O = φ(Q)S/(φ(Q)z+ε).
//! * [`causal_recurrent`], [`causal_cumsum`], [`causal_chunked`] — the causal forms.
//! * [`decode`] — `{cuda,sim}/decode/{f32,f16,bf16}`: streaming decode, one token per launch.
//! * [`limits`] — CUDA's grid limits and each launch's grid described against them, so
//!   `supports` refuses (naming value, limit, kernel) what a launch could not take.
//!
//! Every backend exists once per [`Platform`]: `cuda/<form>/<precision>` runs on the GPU,
//! `sim/<form>/<precision>` runs the same kernels, compiled the same way, on the simulator.
//! Kernel sources live in `kernels/` at the repository root and are embedded at build time.

pub mod causal_chunked;
pub mod causal_cumsum;
pub mod causal_recurrent;
pub mod decode;
pub mod device_backend;
pub mod executor;
pub mod feature_map;
pub mod form;
pub mod latency_probe;
pub mod limits;
pub mod memory;
pub mod mma_probe;
pub mod mufu_probe;
pub mod noncausal;
pub mod params;
pub mod registry;
pub mod runtime;
pub mod signature;

use linattn_core::{AttnError, Backend, Decoder, Unsupported};

pub use device_backend::DeviceBackend;
pub use executor::{DeviceInfo, Executor, KernelArg, Launch, Platform};
pub use form::{DeviceForm, FormInfo};
pub use params::{KernelParams, ParamKind, ParamSpec, Ptr};
pub use registry::{FormEntry, FORMS};
pub use runtime::{gpu_available, nvrtc_available, KernelHeader, KernelVariant};

/// Every CUDA backend on every platform (GPU first, then simulator). On a machine without a
/// GPU (or NVRTC) they still appear, and their `supports` says `skipped: <reason>`.
pub fn backends() -> Vec<Box<dyn Backend>> {
    registry::backends_of(&FORMS)
}

/// Every backend of one platform.
pub fn backends_on(platform: Platform) -> Vec<Box<dyn Backend>> {
    registry::backends_on(&FORMS, platform)
}

/// Every streaming decoder on every platform (GPU first, then simulator); absent hardware
/// shows in `supports` as `skipped: <reason>`.
pub fn decoders() -> Vec<Box<dyn Decoder>> {
    registry::decoders_of(&FORMS)
}

/// Every kernel variant this crate can compile (what `tests/compile_all_kernels.rs` checks).
pub fn kernel_variants() -> Vec<KernelVariant> {
    registry::variants_of(&FORMS)
}

/// The text of the kernel file `name` (`prelude.cuh`, a program's `.cu` or a header, as
/// `-lineinfo`'s `.file` names it less the directory) as a compile of one of `variants` reads
/// it ([`runtime::file_text`]); `None` for a name none of them compiles. `variants`: this
/// crate's [`kernel_variants`], and those of crates built on it (linattn-softmax's).
pub fn kernel_file_text(name: &str, variants: &[KernelVariant]) -> Option<String> {
    let embedded = if name == "prelude.cuh" {
        Some(runtime::PRELUDE)
    } else {
        variants.iter().find_map(|v| {
            if v.source_name == name {
                Some(v.source)
            } else {
                v.headers.iter().find(|h| h.name == name).map(|h| h.text)
            }
        })
    }?;
    Some(runtime::file_text(name, embedded))
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
