//! `{cuda,sim}/softmax/{f32,f16}`: naive softmax attention on any
//! [`Executor`](linattn_cuda::Executor) — five strided-batched GEMMs over the B·H sequences
//! and the row kernels of `kernels/softmax.cu`.
//!
//! Per (batch, head) the N×N score matrix is materialised in the storage precision (fp16 for
//! the f16 backend, as a naive fp16 attention stores it), with fp32 GEMM accumulation and fp32
//! softmax math. The probabilities are kept after the forward for the backward.
//!
//! The GEMMs ([`BatchedGemm`]) run on one of two engines ([`GemmEngine`]), both driven by the
//! same plans (`gemm_plan.rs`):
//! * [`GemmEngine::Cublas`] — cuBLAS `GemmStridedBatchedEx`, on `cuda` only and its default
//!   there (see `cublas.rs` for how it shares the executor's stream);
//! * [`GemmEngine::Kernel`] — `sm_gemm` of `kernels/softmax.cu`, a shared-memory tiled
//!   batched GEMM launched through the executor: what `sim/softmax` runs, and registered on
//!   `cuda` too as `cuda/softmax+gemmkernel/<p>` (or built with [`with_gemm`]).
//!
//! So the simulator verifies everything but the cuBLAS call mapping: the plans, the row
//! kernels, the buffer sizes and the pass structure. `cuda/softmax+gemmkernel/<p>` runs on
//! a GPU the very kernels `sim/softmax/<p>` simulates, so the simulator's numerics can be
//! compared with the hardware's like for like (scripts/check_vs_hardware.py pairs them);
//! `cuda/softmax/<p>` (cuBLAS) is the baseline's real timing. There is no
//! `sim/softmax+gemmkernel`: on the simulator the GEMM kernel is the default engine, so that
//! name would be a second one for `sim/softmax`.
//!
//! Device memory per run, beyond the staged inputs:
//! * forward: P (`B·H·N²` elements) and O;
//! * backward: P and O (still held), dP/dS (`B·H·N²`), dQ, dK, dV.
//!
//! Both are checked against the executor's free memory before anything is allocated, so a
//! problem that cannot fit is a typed `AttnError::OutOfMemory` and a sweep goes on. cuBLAS'
//! own workspace is allocated by cuBLAS and not counted.

mod checks;
mod form;
mod gemm;
mod kernels;

pub use checks::{device_bytes_needed, to_storage};
pub use form::{Probabilities, SoftmaxForm, SoftmaxPlan};
pub use gemm::{BatchedGemm, GemmEngine};
pub use kernels::{kernel_variant, kernel_variants, params, KERNEL_PARAMS, SOURCE};

use linattn_core::{Backend, Unsupported};
use linattn_cuda::executor::Platform;
use linattn_cuda::memory::StorageElem;
use linattn_cuda::registry::FormEntry;
use linattn_cuda::DeviceBackend;

/// This crate's CUDA form, for the lab's registry beside `linattn_cuda::FORMS`.
pub const FORM: FormEntry = FormEntry {
    name: "softmax",
    source: SOURCE,
    headers: &[],
    backends,
    decoders: |_| Vec::new(),
    variants: kernel_variants,
    kernel_params: &KERNEL_PARAMS,
};

/// `<platform>/softmax/<precision>` for storage `T` (f32 or `half::f16`).
pub type CudaSoftmaxBackend<T> = DeviceBackend<SoftmaxForm, T>;

/// `<platform>/softmax/f32`.
pub fn f32_backend(platform: Platform) -> CudaSoftmaxBackend<f32> {
    DeviceBackend::new(platform, SoftmaxForm::new(platform))
}

/// `<platform>/softmax/f16`.
pub fn f16_backend(platform: Platform) -> CudaSoftmaxBackend<half::f16> {
    DeviceBackend::new(platform, SoftmaxForm::new(platform))
}

/// With a chosen GEMM engine; a non-default one is named in the backend name
/// (`cuda/softmax+gemmkernel/f32`, like `causal_recurrent+storedbwd`). cuBLAS on the
/// simulator is refused.
pub fn with_gemm<T: StorageElem>(
    platform: Platform,
    engine: GemmEngine,
) -> Result<CudaSoftmaxBackend<T>, Unsupported> {
    Ok(DeviceBackend::new(
        platform,
        SoftmaxForm::with_gemm(platform, engine)?,
    ))
}

/// Every GEMM engine, in the order their backends are listed.
const ENGINES: [GemmEngine; 2] = [GemmEngine::Cublas, GemmEngine::Kernel];

/// `<platform>/softmax/{f32,f16}` with the platform's default GEMM engine, then
/// `<platform>/softmax+<engine>/{f32,f16}` for each other engine the platform can run: on
/// `cuda`, `softmax+gemmkernel` (the simulator's GEMM kernel on the GPU); on `sim`, nothing
/// more (the GEMM kernel is its default and cuBLAS cannot run there), so each engine has
/// one name per platform.
pub fn backends(platform: Platform) -> Vec<Box<dyn Backend>> {
    let mut all: Vec<Box<dyn Backend>> = vec![
        Box::new(f32_backend(platform)),
        Box::new(f16_backend(platform)),
    ];
    let default = GemmEngine::default_for(platform);
    let others = ENGINES
        .into_iter()
        .filter(|&engine| engine != default)
        .filter_map(|engine| SoftmaxForm::with_gemm(platform, engine).ok());
    for form in others {
        all.push(Box::new(CudaSoftmaxBackend::<f32>::new(platform, form)));
        all.push(Box::new(CudaSoftmaxBackend::<half::f16>::new(
            platform, form,
        )));
    }
    all
}
