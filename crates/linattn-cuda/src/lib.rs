//! NVRTC-compiled CUDA kernels for linear attention, launched with cudarc.
//! (Module layout fixed by the lead; each module is filled in by its owner.)

pub mod causal_chunked;
pub mod causal_cumsum;
pub mod causal_recurrent;

use linattn_core::Backend;

/// Every CUDA backend. On a machine without a driver or GPU they still appear, and their
/// `supports` says `skipped: <reason>`.
pub fn backends() -> Vec<Box<dyn Backend>> {
    let mut all = Vec::new();
    all.extend(causal_recurrent::backends());
    all.extend(causal_cumsum::backends());
    all.extend(causal_chunked::backends());
    all
}
