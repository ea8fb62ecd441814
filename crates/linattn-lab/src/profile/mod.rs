//! `linattn profile`: one or more `sim/*` backends on one or more shapes, run by the PTX
//! simulator with its counters on; per kernel: instructions and sectors per token, lane
//! utilisation, coalescing, bank conflicts, theoretical occupancy and a roofline *model* of
//! the time on the simulated part (never a measurement). `--json` writes the results schema
//! (`profiles`), which `linattn compare` gates on and `linattn report` renders.
//! `--against FILE.csv` puts every launch beside an Nsight Compute export of the same
//! launches (`against`, `ncu`).

pub mod against;
mod gate;
mod lines;
pub mod ncu;
mod record;
mod sass;
mod sass_cost;
mod sass_text;
mod stalls;
mod table;
pub mod times;

pub(crate) use gate::{compare_profiles, render_gate};
pub use record::{replay, simulate};
pub(crate) use table::{kernel_table, phase_table, render_profiles};

use record::profile_with_launches;

use std::path::PathBuf;
use std::process::ExitCode;

use linattn_core::{Algorithm, AttnError, Causality, FeatureMap, Problem, Shape};
use linattn_cuda::executor::sim;

use against::SimLaunch;

use crate::registry;
use crate::results::profiles::ProfileRecord;
use crate::results::{self, Mode, ResultsFile, SCHEMA_VERSION};

#[derive(clap::Args)]
#[command(after_help = "\
Counters are exact (the same PTX and inputs give the same counts on every run); the model \
is a model of the simulated part (H100 SXM for sm_90, A100 SXM4 80 GB for sm_80), per launch: \
max(CTA waves on the SMs, each the critical path of per-warp issue clocks with one latency \
per instruction class and the SM's warp instructions / 4 schedulers combined as max + min²/max \
(they add up when alike: fit on the H100 run of 2026-11-27); unique DRAM \
bytes / HBM bandwidth; tensor FLOPs / tensor peak; fp32 FLOPs / fp32 peak) + launch overhead, \
with an infinite L2 and no ptxas scheduling; the roofline alone is shown beside it. Memory counters count what ptxas makes of the PTX (adjacent accesses \
fused, repeated shared loads dropped; linattn-ptxsim's ptxas.rs); instruction counts are PTX's. \
--against FILE.csv puts each launch beside an Nsight Compute export of the same launches \
(bench-results/h100/2026-11-25/ncu-n4096.csv: cuda/causal_recurrent/f16, cuda/causal_chunked/f16, \
cuda/noncausal/f16 at --n 4096 --d 64).")]
pub struct ProfileArgs {
    /// Backends to profile: `sim/*` names or globs (comma-separated). With --replay: which
    /// of the trace's backends to replay (default: all).
    #[arg(
        long = "backend",
        visible_alias = "backends",
        value_name = "PATTERNS",
        required_unless_present = "replay"
    )]
    backends: Option<String>,
    /// Sequence lengths N, comma-separated (numbers or 2^k).
    #[arg(long, default_value = "4096")]
    n: String,
    /// Head dims D (comma-separated); M = D unless --dv is given.
    #[arg(long, default_value = "64")]
    d: String,
    /// Value dim M (default: M = D).
    #[arg(long)]
    dv: Option<usize>,
    #[arg(long, default_value_t = 1)]
    batch: usize,
    #[arg(long, default_value_t = 1)]
    heads: usize,
    /// Feature map (softmax backends ignore it).
    #[arg(long, default_value = "elu+1")]
    map: FeatureMap,
    /// causal or non-causal; default: what the backend's form computes (causal for softmax).
    #[arg(long)]
    causality: Option<Causality>,
    #[arg(long, default_value_t = 1.0)]
    decay: f64,
    /// forward, forward+backward, or both (comma-separated): each profiled in the order
    /// given, so that --against pairs them with an export of the same sequence.
    #[arg(long, value_delimiter = ',', default_value = "forward+backward")]
    mode: Vec<Mode>,
    /// Write the profiles as a results file (schema_version 2) to this path.
    #[arg(long, value_name = "PATH")]
    json: Option<PathBuf>,
    /// Print the per-kernel tables (the default prints them; --quiet only the totals).
    #[arg(long)]
    quiet: bool,
    /// Keep racecheck and initcheck on while profiling (the counters are the same either
    /// way; off, the simulator runs about twice as fast). Memcheck and synccheck always run.
    #[arg(long)]
    checkers: bool,
    /// Simulate only ROWS rows of grid y (the B·H axis of these kernels; first, last and
    /// evenly between, at least 2) of each launch that has more, and scale the counters to
    /// the whole grid; if the sampled rows did different work (traffic, sync, branches,
    /// arithmetic past 1%) the launch runs whole. For profiles at real shapes (B = 2, N =
    /// 16384, H = 16); outputs are not computed (not with --checkers). Sampled launches are listed.
    #[arg(long, value_name = "ROWS", conflicts_with = "checkers")]
    sample: Option<u32>,
    /// An Nsight Compute CSV export (`ncu --csv --metrics ...`) of the same launches on a GPU:
    /// print every launch's counters beside the hardware's, with the ratio, and the model's
    /// time beside the measured one. Launches pair per kernel name in order; exit 1 if any
    /// cannot be compared (on one side only, or another grid or block).
    #[arg(long, value_name = "FILE.csv")]
    against: Option<PathBuf>,
    /// With --against: also exit 1 when a held counter (sectors, requests, wavefronts,
    /// registers, theoretical occupancy) differs from the hardware's by more than this
    /// fraction (0.05 = 5%).
    #[arg(long, value_name = "FRACTION", requires = "against")]
    tolerance: Option<f64>,
    /// With --against: also exit 1 when a launch's modelled time is off its measured time by
    /// more than this factor either way (1.25: model/measured within [0.8, 1.25]), naming each.
    /// How a calibration of the model is held to an export (tests/model_vs_h100.rs).
    #[arg(long, value_name = "FACTOR", requires = "against")]
    model_within: Option<f64>,
    /// Also write a launch trace of the run to this folder: every allocation, upload and
    /// launch with its PTX and arguments, replayable on the simulator after the kernels
    /// change (how bench-results/h100/2026-11-25/trace-n4096 keeps the calibration's kernels). The
    /// jobs then run one at a time.
    #[arg(long, value_name = "DIR", conflicts_with = "sample")]
    record_trace: Option<PathBuf>,
    /// Instead of running backends, replay a launch trace (--record-trace) and put its
    /// launches beside --against's export: the simulator on the kernels the trace holds, as
    /// they were when the export was taken (bench-results/h100/2026-11-25/trace-n4096).
    #[arg(
        long,
        value_name = "DIR",
        requires = "against",
        conflicts_with_all = ["record_trace", "sample", "json"]
    )]
    replay: Option<PathBuf>,
    /// Also count warp instructions per CUDA source line (kernels compiled with -lineinfo:
    /// the same code) and print each kernel's TOP lines with their classes and text;
    /// --json keeps every line (`kernels[].source_lines`). PTX instructions, as the model
    /// counts them; code inlined from a helper counts at the helper's line.
    #[arg(long, value_name = "TOP", conflicts_with = "replay")]
    lines: Option<usize>,
    /// Also estimate each kernel's executed SASS warp instructions per token (its PTX warp
    /// instructions per PTX line, times the SASS ptxas makes of that line, corrected for the
    /// loops ptxas unrolls and the branches it predicates: `ptxas -lineinfo`, `nvdisasm -gp`,
    /// found through LINATTN_PTXAS and LINATTN_NVDISASM); with --against (and --replay), each
    /// launch's beside ncu's smsp__inst_executed. An estimate, not a count; --lines makes it
    /// too.
    #[arg(long)]
    sass: bool,
}

pub fn run(args: ProfileArgs) -> Result<ExitCode, AttnError> {
    check_bounds(&args)?;
    if let Some(dir) = &args.replay {
        return run_replay(dir, &args);
    }
    let backends = registry::selected_backends(args.backends.as_deref())?;
    if let Some(b) = backends
        .iter()
        .find(|b| registry::family(b.name()) != "sim")
    {
        return Err(AttnError::InvalidArgument(format!(
            "{} is not a simulated backend: profile counts what the PTX simulator executes \
             (use sim/*)",
            b.name()
        )));
    }
    if let Some(path) = &args.json {
        results::check_writable(path)?;
    }
    // A malformed export fails before minutes of simulation.
    let hardware = args.against.as_deref().map(ncu::read).transpose()?;
    let seqs = crate::bench::parse_size_list(&args.n, "--n")?;
    let dims = crate::bench::parse_size_list(&args.d, "--d")?;
    sim::set_checks(sim::Checks {
        racecheck: args.checkers,
        initcheck: args.checkers,
        globalcheck: args.checkers,
        ..sim::Checks::default()
    })?;
    let executor = sim::shared().map_err(AttnError::Unsupported)?;
    if let Some(rows) = args.sample {
        if rows < 2 {
            return Err(AttnError::InvalidArgument(format!(
                "--sample {rows}: at least 2 rows (two rows are compared to check they do \
                 the same work)"
            )));
        }
    }
    executor.set_sample(args.sample);
    executor.set_source_lines(args.lines.is_some());
    let sass_estimates = args.sass || args.lines.is_some();
    executor.set_ptx_lines(sass_estimates);
    let arch = executor.sim_arch();
    // One job per (backend, D, N), run concurrently: a launch of few CTAs (a recurrent scan
    // at B·H = 1) keeps one core busy, and the profiler records per thread.
    let mut jobs = Vec::new();
    for backend in &backends {
        let causality = args.causality.unwrap_or(match backend.info().algorithm {
            Algorithm::Linear(form) if !form.supports(Causality::Causal) => Causality::NonCausal,
            _ => Causality::Causal,
        });
        for &mode in &args.mode {
            for &d in &dims {
                for &n in &seqs {
                    let shape = Shape::new(args.batch, args.heads, n, d, args.dv.unwrap_or(d));
                    let problem = Problem::new(shape, causality, args.map).with_decay(args.decay);
                    jobs.push((backend.name().to_string(), problem, mode));
                }
            }
        }
    }
    let workers = if args.record_trace.is_some() {
        1 // a trace is one ordered stream of operations
    } else {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    };
    if args.record_trace.is_some() {
        executor.start_trace();
    }
    let results = run_longest_first(&jobs, workers, |(name, problem, mode)| {
        let mut backend = registry::selected_backends(Some(name))
            .map_err(|e| e.to_string())?
            .pop()
            .ok_or_else(|| format!("no backend {name}"))?;
        match profile_with_launches(backend.as_mut(), problem, *mode, &arch, sass_estimates) {
            Ok(done) => Ok(Some(done)),
            // A shape the backend does not take (head dim, map) is skipped, not a failure.
            Err(AttnError::Unsupported(why)) => {
                eprintln!("skipped: {name} {problem}: {why}");
                Ok(None)
            }
            Err(e) => Err(format!("{name} {problem}: {e}")),
        }
    });
    if let Some(dir) = &args.record_trace {
        let source = format!(
            "linattn {} ({})",
            std::env::args().skip(1).collect::<Vec<_>>().join(" "),
            crate::results::host::BUILD_COMMIT
        );
        executor.finish_trace(dir, &source)?;
        eprintln!("launch trace written to {}", dir.display());
    }
    let mut profiles = Vec::new();
    let mut launches = Vec::new();
    let mut failed = 0;
    for result in results {
        match result {
            Ok(Some((p, l))) => {
                profiles.push(p);
                launches.extend(l);
            }
            Ok(None) => {}
            Err(e) => {
                failed += 1;
                eprintln!("error: {e}");
            }
        }
    }
    if profiles.is_empty() {
        return Err(AttnError::InvalidArgument(
            "nothing was profiled (every backend refused every shape)".into(),
        ));
    }
    if args.lines.is_some() {
        if let Err(why) = sass::annotate(&mut profiles, linattn_cuda::Executor::arch(&*executor)) {
            eprintln!("--lines: no SASS beside the PTX: {why}");
        }
    }
    if let Some(why) = sass::unavailable() {
        eprintln!("no SASS estimate for some launches: {why}");
    }
    print!("{}", render_profiles(&profiles, args.quiet));
    if let Some(top) = args.lines {
        print!("{}", lines::render_source_lines(&profiles, top));
    } else if args.sass && !args.quiet {
        print!("{}", sass::render_estimates(&profiles));
    }
    if let Some(rows) = args.sample {
        print!("{}", render_sampled(&profiles));
        println!(
            "--sample {rows}: launches not listed ran every CTA (grid y of at most {rows} rows); \
             counters of the listed ones are scaled (exact where the rows agree; lane counts and \
             data-dependent arithmetic the sampled rows' mean); the model is computed from them"
        );
    }
    let profiled = profiles.len();
    if let Some(path) = &args.json {
        let file = ResultsFile {
            schema_version: SCHEMA_VERSION,
            environment: sim_environment(&executor),
            grid: Default::default(),
            copy_bandwidth: Vec::new(),
            gemm_rate: None,
            sweep: None,
            cells: Vec::new(),
            profiles,
        };
        results::write_json_atomic(path, &file)?;
        eprintln!("profiles written to {}", path.display());
    }
    // The others are written; the exit status still says that not everything ran.
    if failed > 0 {
        eprintln!("{failed} of {} profiles failed", failed + profiled);
        return Ok(ExitCode::from(1));
    }
    if let Some(hw) = &hardware {
        return Ok(print_against(hw, &launches, &args));
    }
    Ok(ExitCode::SUCCESS)
}

/// `--replay DIR --against FILE.csv`: the trace's launches (of the backends `--backend`
/// selects) beside the export.
fn run_replay(dir: &std::path::Path, args: &ProfileArgs) -> Result<ExitCode, AttnError> {
    let Some(file) = &args.against else {
        return Err(AttnError::InvalidArgument(
            "--replay needs --against".into(),
        ));
    };
    let hardware = ncu::read(file)?;
    let patterns: Vec<&str> = args
        .backends
        .as_deref()
        .map_or(vec!["*"], |b| b.split(',').map(str::trim).collect());
    let replayed = replay(dir, args.sass)?;
    if let Some(why) = sass::unavailable() {
        eprintln!("--sass: no SASS estimate for some launches: {why}");
    }
    let launches: Vec<SimLaunch> = replayed
        .into_iter()
        .filter(|l| {
            patterns
                .iter()
                .any(|p| registry::pattern_matches(p, &l.backend))
        })
        .collect();
    if launches.is_empty() {
        return Err(AttnError::InvalidArgument(format!(
            "the trace in {} has no launch of {}",
            dir.display(),
            patterns.join(",")
        )));
    }
    Ok(print_against(&hardware, &launches, args))
}

/// Per kernel whose launches were sampled: which rows ran and the scale (identical launches
/// once, with their count).
fn render_sampled(profiles: &[ProfileRecord]) -> String {
    let mut out = String::new();
    for p in profiles {
        for k in p.kernels.iter().filter(|k| !k.sampled.is_empty()) {
            let mut seen: Vec<(&String, usize)> = Vec::new();
            for s in &k.sampled {
                match seen.iter_mut().find(|(t, _)| *t == s) {
                    Some((_, n)) => *n += 1,
                    None => seen.push((s, 1)),
                }
            }
            for (s, n) in seen {
                out += &format!(
                    "sampled: {} {} {} ({n} of {} launches): {s}\n",
                    p.backend, k.phase, k.kernel, k.launches
                );
            }
        }
    }
    out
}

/// `--tolerance` a fraction ≥ 0, `--model-within` a factor ≥ 1: else an error naming it.
fn check_bounds(args: &ProfileArgs) -> Result<(), AttnError> {
    if let Some(t) = args.tolerance {
        if !(t.is_finite() && t >= 0.0) {
            return Err(AttnError::InvalidArgument(format!(
                "--tolerance {t}: a fraction ≥ 0 (0.05 = 5%)"
            )));
        }
    }
    if let Some(f) = args.model_within {
        if !(f.is_finite() && f >= 1.0) {
            return Err(AttnError::InvalidArgument(format!(
                "--model-within {f}: a factor ≥ 1 (1.25: model/measured within [0.8, 1.25])"
            )));
        }
    }
    Ok(())
}

/// Prints the launches beside the export's; exit 1 when some cannot be compared, or (with
/// `--tolerance`) a held counter is off by more, or (with `--model-within`) a launch's model.
fn print_against(hw: &[ncu::NcuLaunch], sim: &[SimLaunch], args: &ProfileArgs) -> ExitCode {
    let pairs = against::pair(hw, sim);
    println!(
        "\nSimulator beside the hardware ({} launches in the file, {} simulated; time: the \
         simulator's is the model, the hardware's measured)",
        hw.len(),
        sim.len()
    );
    println!("{}", against::render(&pairs));
    println!(
        "\nTime: the model (latency, issue, DRAM, tensor and fp32 bounds; never a measurement) \
         and the roofline alone, beside the measured gpu__time_duration"
    );
    let rows = times::rows(&pairs);
    println!("{}", times::render(&rows));
    if let Some(table) = stalls::render(&pairs) {
        println!(
            "\nWarp cycles per issued instruction, by what the warp waited for: the hardware's \
             stall reasons (ncu) beside the model's critical path (its CTA's last warp; no \
             contention in it, which the model adds per wave)"
        );
        println!("{table}");
    }
    let problems: Vec<&String> = pairs.iter().filter_map(|p| p.problem.as_ref()).collect();
    let mut code = ExitCode::SUCCESS;
    if !problems.is_empty() {
        eprintln!(
            "{} of {} launches could not be compared (marked above)",
            problems.len(),
            pairs.len()
        );
        code = ExitCode::from(1);
    }
    if let Some(t) = args.tolerance {
        let off = against::outside(&pairs, t);
        for line in &off {
            eprintln!("outside {:.1}%: {line}", 100.0 * t);
        }
        if !off.is_empty() {
            code = ExitCode::from(1);
        }
    }
    if let Some(f) = args.model_within {
        let off = times::outside(&rows, f);
        for line in &off {
            eprintln!("model off by more than {f}x: {line}");
        }
        if !off.is_empty() {
            code = ExitCode::from(1);
        }
    }
    code
}

/// Runs every job on a pool of one worker per core, the costliest first, and returns the
/// results in job order. A recurrent scan at B·H = 1 is a few CTAs working serially for
/// minutes: started last, it would leave every other core idle at the end.
fn run_longest_first<R: Send>(
    jobs: &[Job],
    workers: usize,
    work: impl Fn(&Job) -> R + Sync,
) -> Vec<R> {
    let mut order: Vec<usize> = (0..jobs.len()).collect();
    if workers > 1 {
        order.sort_by(|&a, &b| job_cost(&jobs[b]).total_cmp(&job_cost(&jobs[a])));
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let done = std::sync::Mutex::new(Vec::with_capacity(jobs.len()));
    std::thread::scope(|scope| {
        for _ in 0..workers.min(jobs.len()) {
            scope.spawn(|| loop {
                let slot = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(&index) = order.get(slot) else { break };
                let result = work(&jobs[index]);
                if let Ok(mut done) = done.lock() {
                    done.push((index, result));
                }
            });
        }
    });
    let mut done = done.into_inner().unwrap_or_else(|p| p.into_inner());
    done.sort_by_key(|(index, _)| *index);
    done.into_iter().map(|(_, result)| result).collect()
}

/// One profile: backend name, problem, mode.
type Job = (String, Problem, Mode);

/// A rough relative cost of a profile job for scheduling: tokens × D × M, times N / 64 for
/// softmax (quadratic), times 8 for the serial recurrent scans (few CTAs, one core).
fn job_cost((name, problem, _): &Job) -> f64 {
    let s = problem.shape;
    let base = (s.bh() * s.seq) as f64 * s.dk as f64 * s.dv as f64;
    if name.contains("softmax") {
        base * s.seq as f64 / 64.0
    } else if name.contains("recurrent") {
        base * 8.0
    } else {
        base
    }
}

/// The environment record of a simulated run: the "device" is the simulator and its arch.
fn sim_environment(executor: &sim::SimExecutor) -> results::Environment {
    let mut env = results::probe_environment(None);
    let info = linattn_cuda::Executor::info(executor);
    env.device_name = info.name.clone();
    env.nvrtc_version = Some(info.nvrtc_version.clone());
    env.gpu_memory_bytes = Some(info.total_memory_bytes);
    env
}
