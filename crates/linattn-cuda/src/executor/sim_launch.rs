//! What the simulator executor reports of a launch, and its errors as the harness's: shared
//! by the executor (`sim`) and the trace replay (`trace`).

use linattn_core::AttnError;
use linattn_ptxsim::{Counters, Sampled, SimError, SourceLines};

/// One launch as the profiler records it.
#[derive(Debug, Clone)]
pub struct LaunchRecord {
    pub entry: String,
    /// The variant's label (`causal_chunked.cu[LA_STORAGE=1,...]`).
    pub label: String,
    pub grid: (u32, u32, u32),
    pub block: (u32, u32, u32),
    pub dynamic_shared: u32,
    /// From ptxas' report for the simulated arch.
    pub static_shared: u64,
    pub registers: u32,
    pub counters: Counters,
    /// Which CTAs ran when the launch was sampled (`SimExecutor::set_sample`).
    pub sampled: Option<Sampled>,
    /// Warp instructions per CUDA source line, scaled as `counters`
    /// (`SimExecutor::set_source_lines`).
    pub source_lines: Option<SourceLines>,
    /// Warp instructions per line of the PTX it ran, with that text
    /// (`SimExecutor::set_ptx_lines`, or `set_source_lines`; a trace's replay with
    /// `ptx_lines`).
    pub ptx_lines: Option<PtxLines>,
}

/// A launch's warp instructions per line of its module's PTX text
/// (`linattn_ptxsim::SourceLines::of_ptx`), and the text: what ptxas's own line table
/// (`ptxas -lineinfo`) maps to SASS.
#[derive(Debug, Clone)]
pub struct PtxLines {
    pub lines: SourceLines,
    pub ptx: std::sync::Arc<str>,
}

/// Simulator errors as the harness's errors.
pub fn sim_error(error: SimError) -> AttnError {
    match error {
        SimError::Fault(fault) => AttnError::KernelFault(fault.to_string()),
        SimError::OutOfMemory {
            requested,
            free,
            total,
        } => AttnError::OutOfMemory {
            device: "ptxsim".into(),
            requested_bytes: requested,
            detail: format!("{free} bytes free of {total}"),
        },
        SimError::Launch { .. } => AttnError::InvalidArgument(error.to_string()),
        SimError::Parse { .. } | SimError::NoKernel { .. } => {
            AttnError::Compile(format!("ptxsim: {error}"))
        }
        SimError::Memory(_) => AttnError::State(format!("ptxsim: {error}")),
    }
}
