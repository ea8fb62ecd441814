//! The first H100 run's Nsight Compute export and the same launches on the simulator: what
//! counters_vs_h100 and model_vs_h100 both compare.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use linattn_core::{Causality, FeatureMap, Problem, Shape};
use linattn_cuda::runtime::Arch;
use linattn_lab::profile::against::SimLaunch;
use linattn_lab::profile::ncu::{self, NcuLaunch};
use linattn_lab::profile::simulate;

/// bench-results/h100/ncu-n4096.csv.
pub fn csv() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench-results/h100/ncu-n4096.csv")
}

/// The launches of the export: (sim backend, causality), B = H = 1, N = 4096, D = M = 64,
/// forward + backward.
pub const RUNS: [(&str, Causality); 3] = [
    ("sim/causal_recurrent/f16", Causality::Causal),
    ("sim/causal_chunked/f16", Causality::Causal),
    ("sim/noncausal/f16", Causality::NonCausal),
];

/// The export's launches and the simulator's (sm_90) of the same runs.
pub fn hardware_and_simulated() -> Result<(Vec<NcuLaunch>, Vec<SimLaunch>), String> {
    linattn_cuda::executor::sim::set_arch(Arch::SM90).map_err(|e| e.to_string())?;
    let hw = ncu::read(&csv()).map_err(|e| e.to_string())?;
    let mut sim = Vec::new();
    for (backend, causality) in RUNS {
        let problem = Problem::new(
            Shape::new(1, 1, 4096, 64, 64),
            causality,
            FeatureMap::EluPlusOne,
        );
        sim.extend(simulate(backend, &problem, true).map_err(|e| e.to_string())?);
    }
    Ok((hw, sim))
}
