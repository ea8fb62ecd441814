//! The first H100 run's Nsight Compute export and the same launches on the simulator: what
//! counters_vs_h100 and model_vs_h100 both compare.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use linattn_lab::profile::against::SimLaunch;
use linattn_lab::profile::ncu::{self, NcuLaunch};
use linattn_lab::profile::replay;

/// bench-results/h100/ncu-n4096.csv.
pub fn csv() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench-results/h100/ncu-n4096.csv")
}

/// bench-results/h100/trace-n4096: the launches of the export (sim/causal_recurrent/f16,
/// sim/causal_chunked/f16, sim/noncausal/f16; B = H = 1, N = 4096, D = M = 64, elu+1,
/// forward + backward) as the simulator ran them with the kernels the H100 ran: their PTX,
/// shapes, arguments and input bytes (`linattn profile --record-trace`).
pub fn trace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench-results/h100/trace-n4096")
}

/// The export's launches and the simulator's (the trace's arch, sm_90) of the same runs,
/// replayed from the trace so that the comparison keeps measuring the simulator when the
/// kernels change.
pub fn hardware_and_simulated() -> Result<(Vec<NcuLaunch>, Vec<SimLaunch>), String> {
    let hw = ncu::read(&csv()).map_err(|e| e.to_string())?;
    let sim = replay(&trace()).map_err(|e| e.to_string())?;
    Ok((hw, sim))
}
