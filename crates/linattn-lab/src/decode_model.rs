//! What the simulator's latency model says a decode token costs on the part it simulates
//! (`linattn_ptxsim::model`): one token of a staged stream run with the simulator recording,
//! its launch modelled (occupancy, the CTAs' critical path in waves, the DRAM roofline, the
//! launch overhead). A model, never a measurement: infinite L2, one latency per instruction
//! class, PTX timed as written. `bench --mode decode` adds it to the stream cells of `sim/*`.

use linattn_core::{AttnError, DecodeSpec, Decoder};
use linattn_cuda::executor::sim::model::{self, occupancy};
use linattn_cuda::executor::sim::{self, Counters};
use serde::Serialize;

/// The modelled cost of one streamed token (its launches, usually one).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct DecodeModel {
    /// The simulated part (`H100 SXM5`, ...).
    pub part: &'static str,
    pub launches: usize,
    /// Modelled time per token, µs: max(latency/issue in waves, DRAM, FP32) + launch overhead.
    pub us_per_token: f64,
    /// What sets it: latency, issue, dram, tensor or fp32.
    pub bound: &'static str,
    /// The CTAs' critical path in waves, µs.
    pub latency_us: f64,
    /// DRAM time at the part's HBM bandwidth for the unique bytes moved, µs.
    pub dram_us: f64,
    /// Launch overhead of the model, µs (included in `us_per_token`).
    pub launch_us: f64,
    /// Unique DRAM bytes of the token.
    pub dram_bytes: u64,
    /// The state read and written once (2 × B·H·C·(M+1)·4): the least a token can move.
    pub state_bytes: u64,
    /// `state_bytes / us_per_token` as a share of the part's HBM bandwidth.
    pub hbm_share: f64,
    /// Resident CTAs per SM and what limits them.
    pub ctas_per_sm: u32,
    pub occupancy_limiter: &'static str,
}

/// Models token `first` of `decoder`'s staged stream (it advances the state by one token).
/// `None` unless the decoder runs on the simulator.
pub(crate) fn model_token(
    decoder: &mut dyn Decoder,
    spec: &DecodeSpec,
    first: usize,
) -> Result<Option<DecodeModel>, AttnError> {
    if !decoder.name().starts_with("sim/") {
        return Ok(None);
    }
    let executor = sim::shared().map_err(AttnError::Unsupported)?;
    executor.start_profile();
    let ran = decoder
        .run_stream(first, 1)
        .and_then(|()| decoder.finish_stream(false));
    let log = executor.finish_profile();
    ran?;
    let Some(first_launch) = log.first() else {
        return Err(AttnError::State(format!(
            "{}: a streamed token recorded no launch",
            decoder.name()
        )));
    };
    let arch = executor.sim_arch();
    let (mut total_s, mut latency_s, mut dram_s, mut launch_s) = (0.0, 0.0, 0.0, 0.0);
    let mut counters = Counters::default();
    let mut bound = "";
    let mut slowest = 0.0;
    let (block, regs) = (first_launch.block, first_launch.registers);
    let shared = first_launch.static_shared + u64::from(first_launch.dynamic_shared);
    let occ = occupancy(&arch, block.0 * block.1 * block.2, regs, shared);
    for l in &log {
        let ctas = u64::from(l.grid.0) * u64::from(l.grid.1) * u64::from(l.grid.2);
        let m = model::launch(&arch, &l.counters, ctas, &occ);
        total_s += m.total_s;
        latency_s += m.sm_s;
        dram_s += m.roofline.dram_s;
        launch_s += m.roofline.launch_s;
        if m.total_s > slowest {
            (slowest, bound) = (m.total_s, m.bound);
        }
        counters.add(&l.counters);
    }
    let (s_len, z_len) = spec.state_lens()?;
    let state_bytes = 2 * 4 * (s_len + z_len) as u64;
    Ok(Some(DecodeModel {
        part: arch.name,
        launches: log.len(),
        us_per_token: total_s * 1e6,
        bound,
        latency_us: latency_s * 1e6,
        dram_us: dram_s * 1e6,
        launch_us: launch_s * 1e6,
        dram_bytes: counters.unique_dram_bytes(),
        state_bytes,
        hbm_share: state_bytes as f64 / total_s.max(1e-12) / (arch.hbm_gbps * 1e9),
        ctas_per_sm: occ.ctas_per_sm,
        occupancy_limiter: occ.limiter,
    }))
}
