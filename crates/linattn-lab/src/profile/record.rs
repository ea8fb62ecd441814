//! What `linattn profile` records: a backend's launches on the simulator, phase by phase
//! (or replayed from a trace), and the per-kernel profile record built from their counters
//! and the model.

use std::collections::{BTreeMap, HashMap};

use linattn_core::{AttnError, Backend, Inputs, Precision, Problem, Shape};
use linattn_cuda::executor::sim::model::{self, occupancy};
use linattn_cuda::executor::sim::{self, Counters, LaunchRecord, SimArch, SourceLines};

use super::against::SimLaunch;
use super::sass::LaunchSass;
use crate::registry;
use crate::results::profiles::{
    KernelProfile, ModelParams, ModelTime, PathRecord, PerToken, PhaseProfile, ProfileRecord,
    SourceLineRecord,
};
use crate::results::Mode;

/// The record and every launch on its own (for `--against`); with `sass`, each launch's
/// and kernel's executed SASS estimated (`profile --sass`, [`super::sass`]).
pub(super) fn profile_with_launches(
    backend: &mut dyn Backend,
    problem: &Problem,
    mode: Mode,
    arch: &SimArch,
    sass: bool,
) -> Result<(ProfileRecord, Vec<SimLaunch>), AttnError> {
    let phases = record_launches(backend, problem, mode == Mode::ForwardBackward)?;
    let name = backend.name().to_string();
    let estimates: Vec<Vec<Option<LaunchSass>>> = phases
        .iter()
        .map(|(_, log)| {
            log.iter()
                .map(|l| {
                    sass.then(|| super::sass::launch_estimate(l, arch.name))
                        .flatten()
                })
                .collect()
        })
        .collect();
    let record = build_record(
        &name,
        backend.info().precision,
        problem,
        mode,
        arch,
        &phases,
        &estimates,
    );
    let launches = phases
        .iter()
        .zip(&estimates)
        .flat_map(|((phase, log), est)| {
            log.iter().zip(est).map(|(l, e)| {
                let mut launch = SimLaunch::new(&name, phase, l, arch);
                launch.sass_estimate = e.as_ref().map(|e| e.total);
                launch
            })
        })
        .collect();
    Ok((record, launches))
}

/// Every launch of the `sim/*` backend `name` on `problem` (forward, then the backward when
/// `backward`), in the order it ran them, on the simulator's architecture.
pub fn simulate(
    name: &str,
    problem: &Problem,
    backward: bool,
) -> Result<Vec<SimLaunch>, AttnError> {
    let mut backend = registry::selected_backends(Some(name))?
        .pop()
        .ok_or_else(|| AttnError::InvalidArgument(format!("no backend {name}")))?;
    if registry::family(backend.name()) != "sim" {
        return Err(AttnError::InvalidArgument(format!(
            "{name} is not a sim/* backend"
        )));
    }
    let arch = sim::shared().map_err(AttnError::Unsupported)?.sim_arch();
    let phases = record_launches(backend.as_mut(), problem, backward)?;
    Ok(phases
        .iter()
        .flat_map(|(phase, log)| log.iter().map(|l| SimLaunch::new(name, phase, l, &arch)))
        .collect())
}

/// Every launch of the trace in `dir` (`--record-trace`), replayed on a fresh simulated
/// device of the trace's architecture, as [`simulate`] reports launches; with `sass`, each
/// with its estimated SASS warp instructions (ptxas and nvdisasm on the trace's PTX).
pub fn replay(dir: &std::path::Path, sass: bool) -> Result<Vec<SimLaunch>, AttnError> {
    let phases = linattn_cuda::executor::trace::replay(dir, sass)?;
    let arch = linattn_cuda::executor::trace::arch(dir)?;
    Ok(phases
        .iter()
        .flat_map(|p| {
            p.launches
                .iter()
                .map(|l| {
                    let mut launch = SimLaunch::new(&p.backend, &p.phase, l, &arch);
                    launch.sass_estimate =
                        super::sass::launch_estimate(l, arch.name).map(|e| e.total);
                    launch
                })
                .collect::<Vec<_>>()
        })
        .collect())
}

/// Stages `problem`, runs the forward (and the backward) with the simulator recording: the
/// launches of each phase.
fn record_launches(
    backend: &mut dyn Backend,
    problem: &Problem,
    backward: bool,
) -> Result<Vec<(&'static str, Vec<LaunchRecord>)>, AttnError> {
    backend.supports(problem)?;
    let inputs = Inputs::random(problem.shape, 1, backward)?;
    backend.stage(problem, &inputs)?;
    let executor = sim::shared().map_err(AttnError::Unsupported)?;
    executor.trace_phase(backend.name(), "forward");
    executor.start_profile();
    let forward = backend.run_forward();
    let forward_log = executor.finish_profile();
    forward?;
    let mut phases = vec![("forward", forward_log)];
    if backward {
        executor.trace_phase(backend.name(), "backward");
        executor.start_profile();
        let backward = backend.run_backward();
        let backward_log = executor.finish_profile();
        backward?;
        phases.push(("backward", backward_log));
    }
    backend.release();
    Ok(phases)
}

fn build_record(
    backend: &str,
    precision: Precision,
    problem: &Problem,
    mode: Mode,
    arch: &SimArch,
    phases: &[(&str, Vec<LaunchRecord>)],
    estimates: &[Vec<Option<LaunchSass>>],
) -> ProfileRecord {
    let shape = problem.shape;
    let tokens = (shape.bh() * shape.seq) as u64;
    let mut kernels = Vec::new();
    let mut phase_profiles = Vec::new();
    for ((phase, log), estimates) in phases.iter().zip(estimates) {
        // Launches of one entry point summed, in order of first appearance; their SASS
        // estimates summed (None unless every launch has one).
        let mut order: Vec<String> = Vec::new();
        let mut grouped: BTreeMap<String, (Vec<&LaunchRecord>, Counters)> = BTreeMap::new();
        let mut sass: BTreeMap<String, Option<f64>> = BTreeMap::new();
        let mut sass_lines: BTreeMap<String, HashMap<(String, u32), f64>> = BTreeMap::new();
        for (launch, estimate) in log.iter().zip(estimates) {
            let entry = grouped.entry(launch.entry.clone()).or_insert_with(|| {
                order.push(launch.entry.clone());
                (Vec::new(), Counters::default())
            });
            entry.0.push(launch);
            entry.1.add(&launch.counters);
            let sum = sass.entry(launch.entry.clone()).or_insert(Some(0.0));
            *sum = sum.zip(estimate.as_ref()).map(|(a, b)| a + b.total);
            let lines = sass_lines.entry(launch.entry.clone()).or_default();
            for (at, n) in estimate.iter().flat_map(|e| &e.by_source_line) {
                *lines.entry(at.clone()).or_default() += n;
            }
        }
        let mut phase_counters = Counters::default();
        let mut model_s = 0.0;
        for name in &order {
            let (launches, counters) = &grouped[name];
            let first = launches[0];
            let threads = first.block.0 * first.block.1 * first.block.2;
            let shared = first.static_shared + u64::from(first.dynamic_shared);
            let ctas: u64 = launches
                .iter()
                .map(|l| u64::from(l.grid.0) * u64::from(l.grid.1) * u64::from(l.grid.2))
                .sum();
            let occ = occupancy(arch, threads, first.registers, shared);
            // The latency model is per launch (waves, critical path): summed over them.
            let models: Vec<model::LaunchModel> = launches
                .iter()
                .map(|l| {
                    let ctas = u64::from(l.grid.0) * u64::from(l.grid.1) * u64::from(l.grid.2);
                    model::launch(arch, &l.counters, ctas, &occ)
                })
                .collect();
            let model = ModelTime::of(&models);
            model_s += model.total_s;
            phase_counters.add(counters);
            let requests = |r: u64| r.max(1) as f64;
            kernels.push(KernelProfile {
                phase: phase.to_string(),
                kernel: name.clone(),
                variant: first.label.clone(),
                launches: launches.len() as u64,
                ctas,
                threads_per_cta: threads,
                registers: first.registers,
                shared_bytes: shared,
                counters: counters.into(),
                per_token: PerToken::of(counters, tokens),
                lane_utilisation: counters.lane_utilisation(),
                global_sectors_per_request: (counters.global_load_sectors
                    + counters.global_store_sectors)
                    as f64
                    / requests(counters.global_load_requests + counters.global_store_requests),
                sector_efficiency: counters.global_sector_efficiency(),
                shared_wavefronts_per_request: (counters.shared_load_wavefronts
                    + counters.shared_store_wavefronts)
                    as f64
                    / requests(counters.shared_load_requests + counters.shared_store_requests),
                bank_conflict_factor: counters.shared_conflict_factor(),
                occupancy: occ.into(),
                model,
                critical_path: PathRecord::of(counters),
                sampled: launches
                    .iter()
                    .filter_map(|l| l.sampled.as_ref().map(|s| s.describe()))
                    .collect(),
                source_lines: source_lines(
                    launches,
                    tokens,
                    sass[name].is_some().then(|| &sass_lines[name]),
                ),
                sass_per_token_estimate: sass[name].map(|s| s / tokens as f64),
            });
        }
        let minimal = minimal_bytes_per_token(&shape, precision, phase);
        let per_token = PerToken::of(&phase_counters, tokens);
        phase_profiles.push(PhaseProfile {
            phase: phase.to_string(),
            launches: log.len() as u64,
            per_token,
            minimal_bytes_per_token: minimal,
            dram_over_minimum: per_token.unique_dram_bytes / minimal,
            model_s,
        });
    }
    ProfileRecord {
        backend: backend.to_string(),
        shape: shape.into(),
        causality: problem.causality,
        map: problem.map.label(),
        eps: problem.eps,
        decay: problem.decay,
        mode,
        tokens,
        arch: ModelParams::from(arch),
        kernels,
        phases: phase_profiles,
    }
}

/// The launches' warp instructions per source line, summed (none when no launch kept them),
/// with each line's executed SASS per token when every launch had an estimate (`sass`).
fn source_lines(
    launches: &[&LaunchRecord],
    tokens: u64,
    sass: Option<&HashMap<(String, u32), f64>>,
) -> Vec<SourceLineRecord> {
    let mut sum = SourceLines::default();
    for lines in launches.iter().filter_map(|l| l.source_lines.as_ref()) {
        sum.merge(lines);
    }
    let mut records = SourceLineRecord::of(&sum, tokens);
    if let Some(sass) = sass {
        for r in &mut records {
            let n = sass.get(&(r.file.clone(), r.line)).copied().unwrap_or(0.0);
            r.sass_per_token = Some(n / tokens.max(1) as f64);
        }
    }
    records
}

/// Inputs read once and outputs written once, per token, at the storage precision:
/// forward q, k, v, o (2D + 2M elements); backward q, k, v, dO, dq, dk, dv (4D + 3M).
fn minimal_bytes_per_token(shape: &Shape, precision: Precision, phase: &str) -> f64 {
    let (d, m) = (shape.dk as f64, shape.dv as f64);
    let elements = if phase == "forward" {
        2.0 * d + 2.0 * m
    } else {
        4.0 * d + 3.0 * m
    };
    elements * precision.bytes() as f64
}
