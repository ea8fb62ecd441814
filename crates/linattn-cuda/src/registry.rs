//! The one list of this crate's forms (in the spirit of candle-kernels' `ALL_IDS`): every
//! list of backends, decoders, kernel variants and kernel signatures reads it, so a new form
//! is added in one place. Other crates with CUDA forms (linattn-softmax) export a
//! [`FormEntry`] of the same shape, and the lab's registry chains them.

use linattn_core::{Backend, Decoder};

use crate::executor::Platform;
use crate::params::ParamSpec;
use crate::runtime::{KernelHeader, KernelVariant};
use crate::{
    causal_chunked, causal_cumsum, causal_recurrent, decode, feature_map, latency_probe, mma_probe,
    mufu_probe, noncausal,
};

/// One kernel file and what is built from it.
#[derive(Clone, Copy)]
pub struct FormEntry {
    /// The form's name, the stem of its kernel file (`kernels/<name>.cu`) and of its module.
    pub name: &'static str,
    /// The kernel source.
    pub source: &'static str,
    /// The headers it includes (the parts of a long program).
    pub headers: &'static [KernelHeader],
    /// Its backends on a platform (none for the φ stage and for decode).
    pub backends: fn(Platform) -> Vec<Box<dyn Backend>>,
    /// Its streaming decoders on a platform (decode only).
    pub decoders: fn(Platform) -> Vec<Box<dyn Decoder>>,
    /// Every compile-time variant (what `linattn kernels` and the compile-all test build).
    pub variants: fn() -> Vec<KernelVariant>,
    /// The argument struct of every entry point, as `kernels/<name>.cu` declares it.
    pub kernel_params: &'static [ParamSpec],
}

impl std::fmt::Debug for FormEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FormEntry")
            .field("name", &self.name)
            .finish()
    }
}

fn no_backends(_: Platform) -> Vec<Box<dyn Backend>> {
    Vec::new()
}

fn no_decoders(_: Platform) -> Vec<Box<dyn Decoder>> {
    Vec::new()
}

/// Every form of this crate, in the order backends are listed.
pub const FORMS: [FormEntry; 9] = [
    FormEntry {
        name: "noncausal",
        source: noncausal::SOURCE,
        headers: &[],
        backends: noncausal::backends,
        decoders: no_decoders,
        variants: noncausal::kernel_variants,
        kernel_params: &noncausal::KERNEL_PARAMS,
    },
    FormEntry {
        name: "causal_recurrent",
        source: causal_recurrent::SOURCE,
        headers: &[],
        backends: causal_recurrent::backends,
        decoders: no_decoders,
        variants: causal_recurrent::kernel_variants,
        kernel_params: &causal_recurrent::KERNEL_PARAMS,
    },
    FormEntry {
        name: "causal_cumsum",
        source: causal_cumsum::SOURCE,
        headers: &[],
        backends: causal_cumsum::backends,
        decoders: no_decoders,
        variants: causal_cumsum::kernel_variants,
        kernel_params: &causal_cumsum::KERNEL_PARAMS,
    },
    FormEntry {
        name: "causal_chunked",
        source: causal_chunked::SOURCE,
        headers: causal_chunked::HEADERS,
        backends: causal_chunked::backends,
        decoders: no_decoders,
        variants: causal_chunked::kernel_variants,
        kernel_params: &causal_chunked::KERNEL_PARAMS,
    },
    FormEntry {
        name: "feature_map",
        source: feature_map::SOURCE,
        headers: &[],
        backends: no_backends,
        decoders: no_decoders,
        variants: feature_map::kernel_variants,
        kernel_params: &feature_map::KERNEL_PARAMS,
    },
    FormEntry {
        name: "decode",
        source: decode::SOURCE,
        headers: &[],
        backends: no_backends,
        decoders: decode::decoders,
        variants: decode::kernel_variants,
        kernel_params: &decode::KERNEL_PARAMS,
    },
    // Not a form: the microbenchmarks of the performance model's latencies.
    FormEntry {
        name: "latency_probe",
        source: latency_probe::SOURCE,
        headers: &[],
        backends: no_backends,
        decoders: no_decoders,
        variants: latency_probe::kernel_variants,
        kernel_params: &latency_probe::KERNEL_PARAMS,
    },
    // Not a form: the tensor-core accumulation probe.
    FormEntry {
        name: "mma_probe",
        source: mma_probe::SOURCE,
        headers: &[],
        backends: no_backends,
        decoders: no_decoders,
        variants: mma_probe::kernel_variants,
        kernel_params: &mma_probe::KERNEL_PARAMS,
    },
    // Not a form: the approximate functions' bits, for the simulator's MUFU tables.
    FormEntry {
        name: "mufu_probe",
        source: mufu_probe::SOURCE,
        headers: &[],
        backends: no_backends,
        decoders: no_decoders,
        variants: mufu_probe::kernel_variants,
        kernel_params: &mufu_probe::KERNEL_PARAMS,
    },
];

/// Every form's backends on every platform (GPU first, then simulator).
pub fn backends_of(forms: &[FormEntry]) -> Vec<Box<dyn Backend>> {
    Platform::ALL
        .into_iter()
        .flat_map(|platform| backends_on(forms, platform))
        .collect()
}

/// Every form's backends on one platform.
pub fn backends_on(forms: &[FormEntry], platform: Platform) -> Vec<Box<dyn Backend>> {
    forms.iter().flat_map(|f| (f.backends)(platform)).collect()
}

/// Every form's decoders on every platform (GPU first, then simulator).
pub fn decoders_of(forms: &[FormEntry]) -> Vec<Box<dyn Decoder>> {
    Platform::ALL
        .into_iter()
        .flat_map(|platform| forms.iter().flat_map(move |f| (f.decoders)(platform)))
        .collect()
}

/// Every form's kernel variants.
pub fn variants_of(forms: &[FormEntry]) -> Vec<KernelVariant> {
    forms.iter().flat_map(|f| (f.variants)()).collect()
}
