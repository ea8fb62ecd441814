//! One cell of the sweep: stage, warm up, sample adaptively, record time, memory and rates;
//! predict and skip cells that would be too slow; turn errors and panics into a status.

use super::probes::{self, gpu};
use super::rates::{flops, minimal_bytes, time_exponent};
use crate::results::{Cell, CellShape, CellStatus, CellWall, Mode, PeakSource};
use crate::stats::SampleStats;
use crate::term::panic_message;
use linattn_core::{
    Algorithm, AttnError, Backend, DeviceKind, HostMemory, Pass, Precision, Problem, SeededInputs,
    Shape, Unsupported,
};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Adaptive sampling never takes more than this many samples of one cell.
const MAX_ADAPTIVE_SAMPLES: usize = 1000;

pub(super) fn classify(err: &AttnError) -> CellStatus {
    match err {
        AttnError::OutOfMemory { .. } => CellStatus::Oom,
        AttnError::Unsupported(Unsupported::Unavailable(_)) => CellStatus::Unavailable,
        AttnError::Unsupported(Unsupported::Problem(_)) => CellStatus::Unsupported,
        AttnError::Cuda(msg) if msg.to_ascii_uppercase().contains("OUT_OF_MEMORY") => {
            CellStatus::Oom
        }
        _ => CellStatus::Error,
    }
}

/// Runs `f`, turning a panic inside a backend into an error so one broken backend does
/// not end the sweep.
pub(super) fn guarded<T>(
    what: &str,
    f: impl FnOnce() -> Result<T, AttnError>,
) -> Result<T, AttnError> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(payload) => Err(AttnError::State(format!(
            "{what} panicked: {}",
            panic_message(&payload)
        ))),
    }
}

/// What the sweep remembers of a series (backend, mode, every axis but N).
#[derive(Debug, Clone)]
pub(super) enum SeriesState {
    Ran { seq: usize, median_s: f64 },
    Stopped { seq: usize, status: CellStatus },
}

pub(super) struct Sampling {
    pub(super) warmup: usize,
    pub(super) repeats: Option<usize>,
    pub(super) min_repeats: usize,
    pub(super) cell_seconds: f64,
    pub(super) flush: bool,
    /// `--deadline`: warm-up and adaptive sampling stop at it (after --min-repeats samples).
    pub(super) deadline: Option<Instant>,
}

impl Sampling {
    fn past_deadline(&self) -> bool {
        self.deadline.is_some_and(|d| Instant::now() >= d)
    }
}

pub(super) struct Measured {
    pub(super) samples: Vec<f64>,
    pub(super) forward: Vec<f64>,
    pub(super) backward: Vec<f64>,
    pub(super) peak_bytes: Option<u64>,
    pub(super) peak_source: PeakSource,
    pub(super) free_drop: Option<u64>,
    /// Host bytes the backend kept after staging (its inputs, on a CPU backend).
    pub(super) staged_bytes: Option<u64>,
    /// Host bytes made only to stage and freed after it (an f64 copy of the inputs when the
    /// backend stages through [`Backend::stage`]).
    pub(super) harness_bytes: Option<u64>,
    pub(super) stage_s: f64,
    pub(super) warmup_s: f64,
    pub(super) sampling_s: f64,
}

/// One timed run (forward, plus backward in forward+backward mode) and its memory.
pub(super) struct OneRun {
    pub(super) forward_s: f64,
    pub(super) backward_s: f64,
    pub(super) peak_bytes: Option<u64>,
}

/// `staged_live`: host bytes live right after staging; a CPU run's peak is everything held
/// above it (outputs and gradients, reused from the previous run or not, and workspace).
pub(super) fn run_once(
    backend: &mut dyn Backend,
    mode: Mode,
    staged_live: usize,
) -> Result<OneRun, AttnError> {
    HostMemory::start();
    let fwd = backend.run_forward()?;
    let bwd = match mode {
        Mode::Forward => None,
        Mode::ForwardBackward => Some(backend.run_backward()?),
    };
    let host_peak = HostMemory::peak_live().saturating_sub(staged_live) as u64;
    let device_peak = match (fwd.device_bytes, bwd.and_then(|b| b.device_bytes)) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    };
    let peak_bytes = match backend.info().device {
        DeviceKind::Cpu => HostMemory::is_metered().then_some(host_peak),
        DeviceKind::Cuda | DeviceKind::Sim => device_peak,
    };
    Ok(OneRun {
        forward_s: fwd.elapsed.as_secs_f64(),
        backward_s: bwd.map_or(0.0, |b| b.elapsed.as_secs_f64()),
        peak_bytes,
    })
}

pub(super) fn measure(
    backend: &mut dyn Backend,
    problem: &Problem,
    inputs: &SeededInputs,
    mode: Mode,
    sampling: &Sampling,
) -> Result<Measured, AttnError> {
    let before_staging = HostMemory::start();
    let staging_started = Instant::now();
    backend.stage_seeded(problem, inputs)?;
    let stage_s = staging_started.elapsed().as_secs_f64();
    let staged_live = HostMemory::live();
    let staged = staged_live.saturating_sub(before_staging);
    let staging_rise = HostMemory::peak_above(before_staging);
    let metered = HostMemory::is_metered();
    let on_gpu = backend.info().device == DeviceKind::Cuda;
    let free_before = if on_gpu { gpu::memory_info() } else { None };
    let mut min_free = free_before.map(|(free, _)| free);
    // Warm-up: the first run pays for lazy set-up (kernel compilation, thread pools); a cell
    // whose warm-up already took the whole sampling budget needs no more of it.
    let warmup_started = Instant::now();
    for _ in 0..sampling.warmup {
        run_once(backend, mode, staged_live)?;
        if warmup_started.elapsed().as_secs_f64() >= sampling.cell_seconds
            || sampling.past_deadline()
        {
            break;
        }
    }
    let warmup_s = warmup_started.elapsed().as_secs_f64();
    let mut m = Measured {
        samples: Vec::new(),
        forward: Vec::new(),
        backward: Vec::new(),
        peak_bytes: None,
        peak_source: if backend.info().device != DeviceKind::Cpu {
            PeakSource::DeviceExact
        } else {
            PeakSource::CountingAllocator
        },
        free_drop: None,
        staged_bytes: metered.then_some(staged as u64),
        harness_bytes: metered.then_some(staging_rise.saturating_sub(staged) as u64),
        stage_s,
        warmup_s,
        sampling_s: 0.0,
    };
    let budget = Duration::from_secs_f64(sampling.cell_seconds);
    let started = Instant::now();
    loop {
        let enough = match sampling.repeats {
            Some(r) => m.samples.len() >= r,
            None => {
                m.samples.len() >= MAX_ADAPTIVE_SAMPLES
                    || (m.samples.len() >= sampling.min_repeats
                        && (started.elapsed() >= budget || sampling.past_deadline()))
            }
        };
        if enough {
            break;
        }
        if sampling.flush {
            backend.flush_cache()?;
        }
        let run = run_once(backend, mode, staged_live)?;
        m.samples.push(run.forward_s + run.backward_s);
        m.forward.push(run.forward_s);
        m.backward.push(run.backward_s);
        m.peak_bytes = match (m.peak_bytes, run.peak_bytes) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        if on_gpu {
            if let (Some(lowest), Some((free, _))) = (min_free, gpu::memory_info()) {
                min_free = Some(lowest.min(free));
            }
        }
    }
    if let (Some((before, _)), Some(lowest)) = (free_before, min_free) {
        m.free_drop = Some(before.saturating_sub(lowest));
    }
    m.sampling_s = started.elapsed().as_secs_f64();
    Ok(m)
}

pub(super) struct CellContext<'a> {
    pub(super) problem: &'a Problem,
    /// The run's seed: each backend makes the cell's inputs from it in its own precision.
    pub(super) seed: u64,
    pub(super) mode: Mode,
    pub(super) sampling: &'a Sampling,
    pub(super) max_cell_seconds: f64,
    pub(super) copy_gbps: &'a HashMap<DeviceKind, f64>,
    /// Whether the run measures fp32 GEMM rates (CPU backends are in it): CPU cells then
    /// take samples around their timed runs.
    pub(super) gemm_probe: bool,
}

/// GEMM rate samples taken before, and again after, a CPU cell's timed runs (≈ 0.1 s in
/// all on two cores).
const GEMM_SAMPLES_EACH_SIDE: usize = 2;

pub(super) fn bench_cell(
    backend: &mut dyn Backend,
    ctx: &CellContext,
    series: &mut HashMap<String, SeriesState>,
) -> Cell {
    let started = Instant::now();
    let mut cell = bench_cell_inner(backend, ctx, series);
    if let Some(wall) = cell.wall.as_mut() {
        wall.total_s = started.elapsed().as_secs_f64();
    }
    cell
}

fn bench_cell_inner(
    backend: &mut dyn Backend,
    ctx: &CellContext,
    series: &mut HashMap<String, SeriesState>,
) -> Cell {
    let info = backend.info().clone();
    let p = ctx.problem;
    let (algorithm, form) = match info.algorithm {
        Algorithm::Linear(f) => ("linear".to_string(), f.label().to_string()),
        Algorithm::Softmax => ("softmax".to_string(), "softmax".to_string()),
    };
    let mut cell = Cell::empty(
        info.name.clone(),
        info.device,
        info.precision,
        algorithm,
        form,
        ctx.mode,
        CellShape::from(p.shape),
        p.causality,
        p.map.label(),
        p.eps,
        p.decay,
    );
    let series_key = format!("{}|{}|{}", info.name, ctx.mode, series_axes(p));
    let fail = |mut cell: Cell, status: CellStatus, msg: String| {
        cell.status = status;
        cell.message = Some(msg);
        cell
    };
    // Out of memory also stops the series: a larger N will not fit either.
    let fail_stopping_on_oom =
        |series: &mut HashMap<String, SeriesState>, cell: Cell, e: &AttnError, msg: String| {
            let status = classify(e);
            if status == CellStatus::Oom {
                series.insert(
                    series_key.clone(),
                    SeriesState::Stopped {
                        seq: p.shape.seq,
                        status,
                    },
                );
            }
            fail(cell, status, msg)
        };

    if let Err(u) = guarded("supports", || backend.supports(p).map_err(AttnError::from)) {
        return fail(cell, classify(&u), u.to_string());
    }
    if info.algorithm == Algorithm::Softmax {
        if let Some(ignored) = p.softmax_ignores() {
            // Timing softmax again under another map or decay would repeat the elu+1 cell
            // under a label that claims a difference.
            return fail(
                cell,
                CellStatus::Unsupported,
                format!("n/a: softmax attention has no {ignored}"),
            );
        }
    }
    if ctx.mode == Mode::ForwardBackward && info.backward.is_none() {
        return fail(
            cell,
            CellStatus::Unsupported,
            "unsupported: this backend has no backward".into(),
        );
    }
    match series.get(&series_key).cloned() {
        Some(SeriesState::Stopped { seq, status }) => {
            return fail(
                cell,
                status,
                format!("not run: N={seq} was already {}", status.label()),
            );
        }
        Some(SeriesState::Ran { seq, median_s }) => {
            let scale = (p.shape.seq as f64 / seq as f64).powi(time_exponent(info.algorithm));
            let per_run = median_s * scale;
            // The least a cell costs: one warm-up (slow cells stop warming up after one run)
            // and the minimum number of samples.
            let runs = ctx.sampling.warmup.min(1)
                + ctx.sampling.repeats.unwrap_or(ctx.sampling.min_repeats);
            let predicted = per_run * runs as f64;
            let deadline_left = ctx
                .sampling
                .deadline
                .map(|d| d.saturating_duration_since(Instant::now()).as_secs_f64());
            if let Some(left) = deadline_left.filter(|&left| predicted > left) {
                // Only this series stops: a cheaper one may still fit before the deadline.
                series.insert(
                    series_key,
                    SeriesState::Stopped {
                        seq: p.shape.seq,
                        status: CellStatus::TooSlow,
                    },
                );
                return fail(
                    cell,
                    CellStatus::TooSlow,
                    format!(
                        "skipped: predicted {predicted:.1} s ({runs} runs of {per_run:.3} s), \
                         {left:.1} s left before --deadline"
                    ),
                );
            }
            if predicted > ctx.max_cell_seconds {
                series.insert(
                    series_key,
                    SeriesState::Stopped {
                        seq: p.shape.seq,
                        status: CellStatus::TooSlow,
                    },
                );
                return fail(
                    cell,
                    CellStatus::TooSlow,
                    format!(
                        "skipped: predicted {predicted:.1} s ({runs} runs of {per_run:.3} s, \
                         from {median_s:.3} s at N={seq}), above --max-cell-seconds {}",
                        ctx.max_cell_seconds
                    ),
                );
            }
        }
        None => {}
    }
    let with_grad = ctx.mode == Mode::ForwardBackward;
    let inputs = match SeededInputs::new(p.shape, ctx.seed, with_grad) {
        Ok(i) => i,
        Err(e) => return fail(cell, classify(&e), format!("inputs: {e}")),
    };
    if info.device != DeviceKind::Cuda {
        // Host backends and the simulator's device memory live in host memory: refuse a cell
        // that cannot fit before staging, not by an abort halfway through it.
        let need = cell_bytes(&p.shape, info.precision, ctx.mode);
        if let Err(e) = HostMemory::ensure_available(
            need,
            "the cell's staged inputs, outputs and gradients at the backend's precision",
        ) {
            return fail_stopping_on_oom(series, cell, &e, e.to_string());
        }
    }
    let probe_gemm = ctx.gemm_probe && info.device == DeviceKind::Cpu;
    let mut adjacent = if probe_gemm {
        probes::cpu_gemm_samples(GEMM_SAMPLES_EACH_SIDE)
    } else {
        Vec::new()
    };
    let result = guarded(&info.name, || {
        measure(backend, p, &inputs, ctx.mode, ctx.sampling)
    });
    backend.release();
    if probe_gemm {
        adjacent.extend(probes::cpu_gemm_samples(GEMM_SAMPLES_EACH_SIDE));
    }
    let m = match result {
        Ok(m) => m,
        Err(e) => return fail_stopping_on_oom(series, cell, &e, e.to_string()),
    };
    let Some(st) = SampleStats::of(&m.samples) else {
        return fail(cell, CellStatus::Error, "no finite time samples".into());
    };
    series.insert(
        series_key,
        SeriesState::Ran {
            seq: p.shape.seq,
            median_s: st.median,
        },
    );
    cell.status = CellStatus::Ok;
    cell.median_s = Some(st.median);
    cell.min_s = Some(st.min);
    cell.max_s = Some(st.max);
    cell.mean_s = Some(st.mean);
    cell.rel_stdev = Some(st.rel_stdev);
    if ctx.mode == Mode::ForwardBackward {
        cell.forward_median_s = SampleStats::of(&m.forward).map(|s| s.median);
        cell.backward_median_s = SampleStats::of(&m.backward).map(|s| s.median);
    }
    cell.wall = Some(CellWall {
        total_s: 0.0, // set by bench_cell
        stage_s: m.stage_s,
        warmup_s: m.warmup_s,
        sampling_s: m.sampling_s,
    });
    cell.samples_s = m.samples;
    cell.peak_bytes = m.peak_bytes;
    cell.peak_bytes_source = m.peak_bytes.map(|_| m.peak_source);
    cell.free_mem_drop_bytes = m.free_drop;
    cell.staged_bytes = m.staged_bytes;
    cell.harness_bytes = m.harness_bytes;
    if st.median > 0.0 {
        let gbps = minimal_bytes(&p.shape, info.precision, ctx.mode) / st.median / 1e9;
        cell.tokens_per_s = Some((p.shape.batch * p.shape.seq) as f64 / st.median);
        cell.tflops = Some(flops(p, info.algorithm, ctx.mode) / st.median / 1e12);
        cell.gbps = Some(gbps);
        cell.pct_of_copy = ctx.copy_gbps.get(&info.device).map(|c| 100.0 * gbps / c);
        if info.device == DeviceKind::Cpu {
            let pass = match ctx.mode {
                Mode::Forward => Pass::Forward,
                Mode::ForwardBackward => Pass::ForwardBackward,
            };
            let useful_gflops = p.useful_flops(info.algorithm, pass) / st.median / 1e9;
            let rate = SampleStats::of(&adjacent).map(|s| s.median);
            cell.pct_of_gemm = rate.map(|rate| 100.0 * useful_gflops / rate);
            cell.gemm_adjacent_gflops = adjacent;
        }
    }
    cell
}

/// The least a backend holds for one cell: q, k, v (and dO) staged, O (and dQ, dK, dV)
/// written, all at its storage precision; workspace comes on top.
pub(super) fn cell_bytes(shape: &Shape, precision: Precision, mode: Mode) -> u64 {
    let rows = (shape.bh() * shape.seq) as u64;
    let (d, m) = (shape.dk as u64, shape.dv as u64);
    let elements = match mode {
        Mode::Forward => rows * (2 * d + m) + rows * m,
        Mode::ForwardBackward => rows * (2 * d + 2 * m) + rows * (m + 2 * d + m),
    };
    elements.saturating_mul(precision.bytes() as u64)
}

/// Every axis of a problem but N (series identity for slopes and predictions).
pub(super) fn series_axes(p: &Problem) -> String {
    format!(
        "B={} H={} D={} M={} {} {} eps={} decay={}",
        p.shape.batch, p.shape.heads, p.shape.dk, p.shape.dv, p.causality, p.map, p.eps, p.decay
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_classified() {
        let oom = AttnError::OutOfMemory {
            device: "host".into(),
            requested_bytes: 1,
            detail: String::new(),
        };
        assert_eq!(classify(&oom), CellStatus::Oom);
        assert_eq!(
            classify(&AttnError::Cuda("CUDA_ERROR_OUT_OF_MEMORY".into())),
            CellStatus::Oom
        );
        assert_eq!(
            classify(&Unsupported::Unavailable("no driver".into()).into()),
            CellStatus::Unavailable
        );
        assert_eq!(
            classify(&Unsupported::Problem("D".into()).into()),
            CellStatus::Unsupported
        );
        assert_eq!(classify(&AttnError::State("x".into())), CellStatus::Error);
        let panicked = guarded::<()>("test", || panic!("boom"));
        assert!(matches!(panicked, Err(AttnError::State(m)) if m.contains("boom")));
    }
}
