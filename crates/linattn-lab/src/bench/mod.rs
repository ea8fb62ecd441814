//! `linattn bench`: a sweep over N (and B, H, D, M, causality, map, mode) for the chosen
//! backends. Every cell records its raw samples, summary statistics, peak memory and
//! derived rates; a cell that cannot run records why and the sweep goes on.
//!
//! Conventions (also in bench-results/SCHEMA.md):
//! * forward+backward time = forward time + backward time of the same sample.
//! * TFLOP/s: forward from `Problem::linear_forward_flops` (or `softmax_forward_flops`);
//!   a backward counts as twice a forward, so forward+backward is 3× forward.
//! * GB/s: the minimal traffic at the backend's storage precision: forward reads q, k, v
//!   and writes o; backward reads q, k, v, dO and writes dq, dk, dv.
//! * % of copy: GB/s over the median bandwidth of a plain copy measured in the same run,
//!   which counts its buffer read once and written once.

mod args;
mod cell;
mod grid;
mod log;
mod parse;
mod probes;

/// Name, driver, CUDA/NVRTC versions and memory of device 0; `None` without a GPU.
pub(crate) fn gpu_environment() -> Option<crate::results::GpuEnvironment> {
    probes::gpu::environment()
}
mod rates;
mod render;

pub use args::BenchArgs;
pub(crate) use grid::{looks_like_json, parse_grid_text, resolve_grid_with};
pub(crate) use parse::parse_size_list;
pub(crate) use render::series_slopes;

use crate::registry;
use crate::results::{
    self, GpuEnvironment, ResultsFile, SweepProgress, SweepState, SCHEMA_VERSION,
};
use crate::term::progress_bar;
use cell::{bench_cell, CellContext, Sampling, SeriesState};
use grid::{resolve_grid, Grid};
use linattn_core::{AttnError, Backend, DeviceKind, Precision, Problem};
use log::cell_log_line;
use parse::invalid;
use probes::{cpu_copy_bandwidth, gpu, gpu_copy_bandwidth};
use render::render_tables;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Backends of the sweep: the user's patterns, or the fast default set.
fn choose_backends(grid: &Grid) -> Result<Vec<Box<dyn Backend>>, AttnError> {
    let chosen = match grid.backends.as_deref() {
        Some(sel) => registry::selected_backends(Some(sel))?,
        // By properties rather than names: every CPU f32 backend (linear and softmax) and
        // every CUDA backend; the f64 references would dominate the sweep's time.
        None => registry::all_backends()
            .into_iter()
            .filter(|b| {
                let i = b.info();
                i.device == DeviceKind::Cuda
                    || (i.device == DeviceKind::Cpu && i.precision == Precision::F32)
            })
            .collect(),
    };
    let chosen: Vec<_> = chosen
        .into_iter()
        .filter(|b| grid.precision.is_empty() || grid.precision.contains(&b.info().precision))
        .collect();
    if chosen.is_empty() {
        return Err(invalid(
            "no backend left to bench (check --backends and --precision)".into(),
        ));
    }
    Ok(chosen)
}

/// `bench-results/latest/<device>-<date>-<commit>.json` under the checkout (git-ignored):
/// a plain run never touches the committed results; `--out` puts a run anywhere.
fn default_out_path(env: &results::Environment) -> PathBuf {
    let date = env.date.get(..10).unwrap_or("undated");
    let commit = env.commit.get(..12).unwrap_or(&env.commit);
    let dirty = if env.commit.ends_with("-dirty") {
        "-dirty"
    } else {
        ""
    };
    let latest = PathBuf::from("bench-results").join("latest");
    results::checkout_root()
        .map_or(latest.clone(), |root| root.join(&latest))
        .join(format!(
            "{}-{date}-{commit}{dirty}.json",
            results::slug(&env.device_name)
        ))
}

// ---------------------------------------------------------------------------------------

/// `--mode decode`: a sweep of its own (context length instead of N, time per generated
/// token), so it may not be mixed with forward or forward+backward.
fn is_decode_mode(args: &BenchArgs) -> Result<bool, AttnError> {
    let Some(modes) = args.mode.as_deref() else {
        return Ok(false);
    };
    let listed = registry::split_patterns(modes);
    let decode = listed.iter().any(|m| m.eq_ignore_ascii_case("decode"));
    if decode && listed.len() > 1 {
        return Err(invalid(
            "--mode decode is a sweep of its own (context length, time per generated token); \
             run it apart from forward/forward+backward"
                .into(),
        ));
    }
    Ok(decode)
}

/// The decode sweep: each decoder (default `cpu/decode/f32`) and softmax with a KV cache,
/// time per generated token and carried bytes at every context length. `--n` (or
/// `--n-min`/`--n-max`, default 2^8..2^20) gives the contexts, `--batch`/`--heads`
/// (default 1 each) and `--dk`/`--dv` one shape, `--repeats` the repeats of 32 timed steps;
/// `--out` names the output directory.
fn run_decode(args: &BenchArgs) -> Result<ExitCode, AttnError> {
    let contexts = parse::seq_lengths(
        args.n.as_deref(),
        args.n_min.as_deref(),
        args.n_max.as_deref(),
        ("2^8", "2^20"),
    )?;
    let single = |text: Option<&str>, default: usize, what: &str| -> Result<usize, AttnError> {
        match text {
            None => Ok(default),
            Some(t) => match parse_size_list(t, what)?.as_slice() {
                [one] => Ok(*one),
                _ => Err(invalid(format!("{what}: --mode decode takes one value"))),
            },
        }
    };
    let batch = single(args.batch.as_deref(), 1, "--batch")?;
    let heads = single(args.heads.as_deref(), 1, "--heads")?;
    let d = single(args.dk.as_deref(), 64, "--dk")?;
    let m = single(args.dv.as_deref(), d, "--dv")?;
    let backends: Vec<String> =
        registry::split_patterns(args.backends.as_deref().unwrap_or("cpu/decode/f32"))
            .into_iter()
            .map(str::to_string)
            .collect();
    let out_dir = match args.out.as_deref() {
        Some(p) if p == Path::new("-") => {
            return Err(invalid(
                "--mode decode writes a directory (decode.json, decode.md, plots): \
                 --out - is not supported"
                    .into(),
            ))
        }
        Some(p) => p.to_path_buf(),
        None => results::checkout_root()
            .unwrap_or_default()
            .join("bench-results/latest/decode"),
    };
    results::prepare_output_dir(&out_dir)?;
    crate::decode_bench::run(
        &backends,
        &contexts,
        (batch, heads),
        d,
        m,
        32,
        args.repeats.unwrap_or(5),
        &out_dir,
    )
}

/// Everything `run` checks before the first cell: the grid, the backends, every problem.
pub(crate) fn validate(args: &BenchArgs) -> Result<(), AttnError> {
    resolved(args).map(|_| ())
}

/// A sweep ready to run: its grid, backends and problems.
type Resolved = (Grid, Vec<Box<dyn Backend>>, Vec<Problem>);

fn resolved(args: &BenchArgs) -> Result<Resolved, AttnError> {
    let grid = resolve_grid(args)?;
    let backends = choose_backends(&grid)?;
    let problems = grid.problems();
    for p in &problems {
        p.validate()?;
    }
    Ok((grid, backends, problems))
}

pub fn run(args: BenchArgs) -> Result<ExitCode, AttnError> {
    let started = Instant::now();
    if is_decode_mode(&args)? {
        return run_decode(&args);
    }
    let deadline = match args.deadline {
        None => None,
        Some(s) if s.is_finite() && s > 0.0 => Some(started + Duration::from_secs_f64(s)),
        Some(s) => {
            return Err(invalid(format!(
                "--deadline {s}: give a positive number of seconds"
            )))
        }
    };
    let (grid, mut backends, problems) = resolved(&args)?;

    let uses_gpu = backends.iter().any(|b| b.info().device == DeviceKind::Cuda);
    let uses_cpu = backends.iter().any(|b| b.info().device == DeviceKind::Cpu);
    let gpu_env: Option<GpuEnvironment> = if uses_gpu { gpu::environment() } else { None };
    let environment = results::probe_environment(gpu_env.clone());
    // Where the JSON goes, made sure of before the first cell: a sweep of an hour must not
    // end on a directory it cannot write. `None`: stdout.
    let out_path = match args.out.as_deref() {
        Some(p) if p == Path::new("-") => None,
        Some(p) => Some(p.to_path_buf()),
        None => Some(default_out_path(&environment)),
    };
    if let Some(path) = &out_path {
        results::prepare_output_file(path)?;
    }

    let mut copy_bandwidth = Vec::new();
    if uses_cpu {
        match cpu_copy_bandwidth(7) {
            Some(c) => copy_bandwidth.push(c),
            None => eprintln!("warning: host too short of memory to measure copy bandwidth"),
        }
    }
    if gpu_env.is_some() {
        match gpu_copy_bandwidth() {
            Ok(c) => copy_bandwidth.push(c),
            Err(e) => eprintln!("warning: GPU copy bandwidth not measured: {e}"),
        }
    }
    // The compute limit of the CPU cells: fp32 GEMM on every core, once per run.
    let gemm_rate = uses_cpu.then(probes::cpu_gemm_rate);
    let copy_gbps: HashMap<DeviceKind, f64> = copy_bandwidth
        .iter()
        .map(|c| (c.device, c.median_gbps))
        .collect();

    let sampling = Sampling {
        warmup: grid.warmup,
        repeats: grid.repeats,
        min_repeats: grid.min_repeats,
        cell_seconds: grid.cell_seconds,
        flush: grid.flush_l2,
        deadline,
    };
    let planned = problems.len() * backends.len() * grid.mode.len();
    let gemm_probe = gemm_rate.is_some();
    let progress = progress_bar(planned as u64, args.no_progress);
    let mut file = ResultsFile {
        schema_version: SCHEMA_VERSION,
        environment,
        grid: grid.record(),
        copy_bandwidth,
        gemm_rate,
        sweep: None,
        cells: Vec::new(),
        profiles: Vec::new(),
    };
    // The file stands for the sweep from the start and is rewritten after every cell: a
    // sweep killed mid-way loses only the cell in flight.
    let checkpoint = |file: &mut ResultsFile, state: SweepState| {
        file.sweep = Some(SweepProgress {
            state,
            planned_cells: planned,
            finished_cells: file.cells.len(),
            elapsed_s: started.elapsed().as_secs_f64(),
            deadline_s: args.deadline,
        });
        match &out_path {
            Some(path) => results::write_json_atomic(path, file),
            None => Ok(()),
        }
    };
    checkpoint(&mut file, SweepState::Running)?;

    let mut series: HashMap<String, SeriesState> = HashMap::new();
    let mut state = SweepState::Complete;
    'sweep: for problem in &problems {
        for backend in backends.iter_mut() {
            for &mode in &grid.mode {
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    state = SweepState::Deadline;
                    break 'sweep;
                }
                progress.set_message(format!(
                    "{} {} N={}",
                    backend.name(),
                    mode,
                    problem.shape.seq
                ));
                let ctx = CellContext {
                    problem,
                    seed: grid.seed,
                    mode,
                    sampling: &sampling,
                    max_cell_seconds: grid.max_cell_seconds,
                    copy_gbps: &copy_gbps,
                    gemm_probe,
                };
                let cell_started = Instant::now();
                let cell = bench_cell(backend.as_mut(), &ctx, &mut series);
                if let Some(line) =
                    cell_log_line(file.cells.len() + 1, planned, &cell, cell_started.elapsed())
                {
                    progress.suspend(|| eprintln!("{line}"));
                }
                file.cells.push(cell);
                checkpoint(&mut file, SweepState::Running)?;
                progress.inc(1);
            }
        }
    }
    progress.finish_and_clear();
    checkpoint(&mut file, state)?;
    if state == SweepState::Deadline {
        eprintln!(
            "--deadline {} s reached: {} of {planned} cells ran",
            args.deadline.unwrap_or_default(),
            file.cells.len()
        );
    }

    let table = render_tables(&file);
    let unavailable = file
        .cells
        .iter()
        .all(|c| c.status == results::CellStatus::Unavailable)
        .then(|| file.cells.first().and_then(|c| c.message.clone()))
        .flatten();
    match out_path {
        None => {
            eprint!("{table}");
            let text = serde_json::to_string_pretty(&file)
                .map_err(|e| AttnError::State(format!("cannot serialize results: {e}")))?;
            println!("{text}");
        }
        Some(path) => {
            print!("{table}");
            eprintln!("results written to {}", path.display());
        }
    }
    if let Some(reason) = unavailable {
        eprintln!("no selected backend can run on this machine: {reason}");
        return Ok(crate::exit::exit_unavailable(&reason));
    }
    Ok(ExitCode::SUCCESS)
}
