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

use crate::registry;
use crate::results::{
    self, Cell, CellShape, CellStatus, CopyBandwidth, GpuEnvironment, GridRecord, Mode, PeakSource,
    ResultsFile, SCHEMA_VERSION,
};
use crate::stats::{log_log_slope, SampleStats};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use linattn_core::{
    Algorithm, AttnError, Backend, Causality, DeviceKind, FeatureMap, Form, HostMemory, Inputs,
    Precision, Problem, Shape, Unsupported, DEFAULT_EPS,
};
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug, Default)]
pub struct BenchArgs {
    /// Sequence lengths, comma-separated: numbers or powers written 2^k (overrides --n-min/--n-max).
    #[arg(long, value_name = "LIST")]
    n: Option<String>,
    /// Smallest N of a power-of-two sweep (a power of two, e.g. 1024 or 2^10). Default 2^10.
    #[arg(long, value_name = "N")]
    n_min: Option<String>,
    /// Largest N of a power-of-two sweep. Default 2^16.
    #[arg(long, value_name = "N")]
    n_max: Option<String>,
    /// Batch sizes (B), comma-separated. Default 1.
    #[arg(short = 'b', long, value_name = "LIST")]
    batch: Option<String>,
    /// Head counts (H), comma-separated. Default 8.
    #[arg(long, value_name = "LIST")]
    heads: Option<String>,
    /// Query/key head dims (D), comma-separated. Default 64.
    #[arg(short = 'd', long, value_name = "LIST")]
    dk: Option<String>,
    /// Value head dims (M), comma-separated. Default: equal to D.
    #[arg(short = 'm', long, value_name = "LIST")]
    dv: Option<String>,
    /// Backend patterns, comma-separated globs (`cuda/*`, `*f16`). Default: every CPU f32
    /// backend and every CUDA backend (the f64 references are left out: too slow to sweep).
    #[arg(long, value_name = "PATTERNS")]
    backends: Option<String>,
    /// Keep only backends storing in these precisions (f32, f16, bf16, f64).
    #[arg(long, value_name = "LIST")]
    precision: Option<String>,
    /// causal, non-causal, or both comma-separated. Default causal.
    #[arg(long, value_name = "LIST")]
    causality: Option<String>,
    /// Feature maps (elu+1, relu, favor:64, ...). Default elu+1.
    #[arg(long, value_name = "LIST")]
    map: Option<String>,
    /// forward, forward+backward, or both. Default both.
    #[arg(long, value_name = "LIST")]
    mode: Option<String>,
    /// Normaliser epsilon. Default 1e-6.
    #[arg(long)]
    eps: Option<f64>,
    /// Decay γ in (0, 1]. Default 1 (none).
    #[arg(long)]
    decay: Option<f64>,
    /// Untimed runs before the samples of each cell. Default 2.
    #[arg(long)]
    warmup: Option<usize>,
    /// Exactly this many samples per cell (default: adaptive, see --min-repeats).
    #[arg(long)]
    repeats: Option<usize>,
    /// Adaptive sampling: at least this many samples, more while within --cell-seconds. Default 5.
    #[arg(long)]
    min_repeats: Option<usize>,
    /// Adaptive sampling: time budget for one cell's samples. Default 1.
    #[arg(long)]
    cell_seconds: Option<f64>,
    /// Skip a cell as "too slow" when its minimal cost (one warm-up plus the minimum number of
    /// samples), predicted from the previous N, exceeds this many seconds. Default 60.
    #[arg(long)]
    max_cell_seconds: Option<f64>,
    /// Call the backend's flush_cache before each sample (cold-cache timing).
    #[arg(long)]
    flush_l2: bool,
    /// Seed of the random inputs.
    #[arg(long)]
    seed: Option<u64>,
    /// Sweep from a TOML or JSON file with the same fields as these flags (flags override it).
    #[arg(long, value_name = "FILE")]
    grid: Option<PathBuf>,
    /// Results JSON path; `-` writes it to stdout (the table then goes to stderr).
    /// Default bench-results/<device>/<date>-<commit>.json.
    #[arg(long, value_name = "PATH")]
    out: Option<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    no_progress: bool,
}

/// A grid file: every field optional; flags given on the command line win.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct GridFile {
    n: Option<NumberList>,
    n_min: Option<NumberOrPower>,
    n_max: Option<NumberOrPower>,
    batch: Option<NumberList>,
    heads: Option<NumberList>,
    dk: Option<NumberList>,
    dv: Option<NumberList>,
    backends: Option<StringList>,
    precision: Option<StringList>,
    causality: Option<StringList>,
    map: Option<StringList>,
    mode: Option<StringList>,
    eps: Option<f64>,
    decay: Option<f64>,
    warmup: Option<usize>,
    repeats: Option<usize>,
    min_repeats: Option<usize>,
    cell_seconds: Option<f64>,
    max_cell_seconds: Option<f64>,
    flush_l2: Option<bool>,
    seed: Option<u64>,
}

/// `[1024, "2^12"]` or `"1024,2^12"`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum NumberList {
    One(NumberOrPower),
    Many(Vec<NumberOrPower>),
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum NumberOrPower {
    Number(u64),
    Text(String),
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum StringList {
    One(String),
    Many(Vec<String>),
}

impl NumberOrPower {
    fn to_text(&self) -> String {
        match self {
            NumberOrPower::Number(n) => n.to_string(),
            NumberOrPower::Text(t) => t.clone(),
        }
    }
}

impl NumberList {
    fn to_text(&self) -> String {
        match self {
            NumberList::One(x) => x.to_text(),
            NumberList::Many(v) => v.iter().map(|x| x.to_text()).collect::<Vec<_>>().join(","),
        }
    }
}

impl StringList {
    fn to_text(&self) -> String {
        match self {
            StringList::One(s) => s.clone(),
            StringList::Many(v) => v.join(","),
        }
    }
}

/// The sweep after defaults, file and flags are combined and every value parsed.
#[derive(Debug, Clone)]
struct Grid {
    seq: Vec<usize>,
    batch: Vec<usize>,
    heads: Vec<usize>,
    dk: Vec<usize>,
    /// Empty: M = D.
    dv: Vec<usize>,
    backends: Option<String>,
    precision: Vec<Precision>,
    causality: Vec<Causality>,
    map: Vec<FeatureMap>,
    mode: Vec<Mode>,
    eps: f64,
    decay: f64,
    warmup: usize,
    repeats: Option<usize>,
    min_repeats: usize,
    cell_seconds: f64,
    max_cell_seconds: f64,
    flush_l2: bool,
    seed: u64,
}

const DEFAULT_SEED: u64 = 0x11_a77e;
/// Adaptive sampling never takes more than this many samples of one cell.
const MAX_ADAPTIVE_SAMPLES: usize = 1000;

fn invalid(msg: String) -> AttnError {
    AttnError::InvalidArgument(msg)
}

/// `1024` or `2^10`.
fn parse_size(text: &str, what: &str) -> Result<usize, AttnError> {
    let t = text.trim();
    let value = if let Some((base, exp)) = t.split_once('^') {
        let base: usize = base.trim().parse().map_err(|_| {
            invalid(format!(
                "{what}: '{t}' is not a number or a power like 2^10"
            ))
        })?;
        let exp: u32 = exp
            .trim()
            .parse()
            .map_err(|_| invalid(format!("{what}: '{t}' has a bad exponent")))?;
        base.checked_pow(exp)
            .ok_or_else(|| invalid(format!("{what}: '{t}' overflows")))?
    } else {
        t.parse::<usize>().map_err(|_| {
            invalid(format!(
                "{what}: '{t}' is not a number or a power like 2^10"
            ))
        })?
    };
    if value == 0 {
        return Err(invalid(format!("{what}: must be positive, got {t}")));
    }
    Ok(value)
}

/// The comma-separated items of `text` (blanks skipped) through `parse`; an empty list is
/// an error naming `what`.
fn split_list<T>(
    text: &str,
    what: &str,
    parse: impl Fn(&str) -> Result<T, AttnError>,
) -> Result<Vec<T>, AttnError> {
    let values: Vec<T> = text
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(parse)
        .collect::<Result<_, _>>()?;
    if values.is_empty() {
        return Err(invalid(format!("{what}: empty list")));
    }
    Ok(values)
}

pub(crate) fn parse_size_list(text: &str, what: &str) -> Result<Vec<usize>, AttnError> {
    Ok(dedup_sorted(split_list(text, what, |s| {
        parse_size(s, what)
    })?))
}

fn dedup_sorted<T: Ord>(mut v: Vec<T>) -> Vec<T> {
    v.sort();
    v.dedup();
    v
}

fn parse_list<T: std::str::FromStr<Err = AttnError>>(
    text: &str,
    what: &str,
) -> Result<Vec<T>, AttnError> {
    split_list(text, what, str::parse)
}

/// [`parse_list`] keeping the first occurrence of each value, in the order given.
fn parse_unique<T: std::str::FromStr<Err = AttnError> + PartialEq>(
    text: &str,
    what: &str,
) -> Result<Vec<T>, AttnError> {
    let mut unique = Vec::new();
    for value in parse_list::<T>(text, what)? {
        if !unique.contains(&value) {
            unique.push(value);
        }
    }
    Ok(unique)
}

/// Powers of two from `min` to `max` inclusive.
fn power_sweep(min: usize, max: usize) -> Result<Vec<usize>, AttnError> {
    for (name, v) in [("--n-min", min), ("--n-max", max)] {
        if !v.is_power_of_two() {
            return Err(invalid(format!("{name} must be a power of two, got {v}")));
        }
    }
    if min > max {
        return Err(invalid(format!("--n-min {min} exceeds --n-max {max}")));
    }
    let mut out = Vec::new();
    let mut n = min;
    while n <= max {
        out.push(n);
        match n.checked_mul(2) {
            Some(next) => n = next,
            None => break,
        }
    }
    Ok(out)
}

fn read_grid_file(path: &Path) -> Result<GridFile, AttnError> {
    let bad = |reason: String| AttnError::BadFile {
        path: path.display().to_string(),
        reason,
    };
    let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
    let is_json = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("json"))
        || text.trim_start().starts_with('{');
    if is_json {
        serde_json::from_str(&text).map_err(|e| bad(format!("grid JSON: {e}")))
    } else {
        toml::from_str(&text).map_err(|e| bad(format!("grid TOML: {e}")))
    }
}

fn resolve_grid(args: &BenchArgs) -> Result<Grid, AttnError> {
    let file = match &args.grid {
        Some(p) => read_grid_file(p)?,
        None => GridFile::default(),
    };
    // Flag text if given, else the file's, else None.
    let pick_nums = |flag: &Option<String>, f: &Option<NumberList>| {
        flag.clone().or_else(|| f.as_ref().map(NumberList::to_text))
    };
    let pick_strs = |flag: &Option<String>, f: &Option<StringList>| {
        flag.clone().or_else(|| f.as_ref().map(StringList::to_text))
    };

    let explicit_n = pick_nums(&args.n, &file.n);
    let n_min = args
        .n_min
        .clone()
        .or_else(|| file.n_min.as_ref().map(NumberOrPower::to_text));
    let n_max = args
        .n_max
        .clone()
        .or_else(|| file.n_max.as_ref().map(NumberOrPower::to_text));
    let seq = match explicit_n {
        Some(list) => parse_size_list(&list, "--n")?,
        None => power_sweep(
            parse_size(n_min.as_deref().unwrap_or("2^10"), "--n-min")?,
            parse_size(n_max.as_deref().unwrap_or("2^16"), "--n-max")?,
        )?,
    };
    let list_or = |text: Option<String>, default: &str, what: &str| {
        parse_size_list(text.as_deref().unwrap_or(default), what)
    };
    let batch = list_or(pick_nums(&args.batch, &file.batch), "1", "--batch")?;
    let heads = list_or(pick_nums(&args.heads, &file.heads), "8", "--heads")?;
    let dk = list_or(pick_nums(&args.dk, &file.dk), "64", "--dk")?;
    let dv = match pick_nums(&args.dv, &file.dv) {
        Some(t) => parse_size_list(&t, "--dv")?,
        None => Vec::new(),
    };
    let precision = match pick_strs(&args.precision, &file.precision) {
        Some(t) => dedup_sorted(parse_list::<Precision>(&t, "--precision")?),
        None => Vec::new(),
    };
    let strs_or = |flag: &Option<String>, f: &Option<StringList>, default: &str| {
        pick_strs(flag, f).unwrap_or_else(|| default.to_string())
    };
    let causality = parse_unique::<Causality>(
        &strs_or(&args.causality, &file.causality, "causal"),
        "--causality",
    )?;
    let map = parse_unique::<FeatureMap>(&strs_or(&args.map, &file.map, "elu+1"), "--map")?;
    let mode = dedup_sorted(parse_list::<Mode>(
        &strs_or(&args.mode, &file.mode, "forward,forward+backward"),
        "--mode",
    )?);
    let grid = Grid {
        seq,
        batch,
        heads,
        dk,
        dv,
        backends: pick_strs(&args.backends, &file.backends),
        precision,
        causality,
        map,
        mode,
        eps: args.eps.or(file.eps).unwrap_or(DEFAULT_EPS),
        decay: args.decay.or(file.decay).unwrap_or(1.0),
        warmup: args.warmup.or(file.warmup).unwrap_or(2),
        repeats: args.repeats.or(file.repeats),
        min_repeats: args.min_repeats.or(file.min_repeats).unwrap_or(5),
        cell_seconds: args.cell_seconds.or(file.cell_seconds).unwrap_or(1.0),
        max_cell_seconds: args
            .max_cell_seconds
            .or(file.max_cell_seconds)
            .unwrap_or(60.0),
        flush_l2: args.flush_l2 || file.flush_l2.unwrap_or(false),
        seed: args.seed.or(file.seed).unwrap_or(DEFAULT_SEED),
    };
    if grid.repeats == Some(0) || grid.min_repeats == 0 {
        return Err(invalid(
            "--repeats and --min-repeats must be at least 1".into(),
        ));
    }
    for (name, v) in [
        ("--cell-seconds", grid.cell_seconds),
        ("--max-cell-seconds", grid.max_cell_seconds),
    ] {
        if !(v.is_finite() && v > 0.0) {
            return Err(invalid(format!(
                "{name} must be a positive number, got {v}"
            )));
        }
    }
    Ok(grid)
}

impl Grid {
    fn record(&self) -> GridRecord {
        GridRecord {
            seq: self.seq.clone(),
            batch: self.batch.clone(),
            heads: self.heads.clone(),
            dk: self.dk.clone(),
            dv: self.dv.clone(),
            causality: self.causality.clone(),
            map: self.map.iter().map(FeatureMap::label).collect(),
            backends: self
                .backends
                .as_deref()
                .map(|s| {
                    registry::split_patterns(s)
                        .into_iter()
                        .map(String::from)
                        .collect()
                })
                .unwrap_or_default(),
            precision: self.precision.clone(),
            mode: self.mode.clone(),
            eps: Some(self.eps),
            decay: Some(self.decay),
            warmup: self.warmup,
            repeats: self.repeats,
            min_repeats: self.min_repeats,
            cell_seconds: self.cell_seconds,
            max_cell_seconds: self.max_cell_seconds,
            flush_l2: self.flush_l2,
            seed: self.seed,
        }
    }

    /// Every problem of the sweep, grouped so that N grows fastest: the too-slow
    /// prediction and the shared inputs rely on that order.
    fn problems(&self) -> Vec<Problem> {
        let mut out = Vec::new();
        for &causality in &self.causality {
            for map in &self.map {
                for &batch in &self.batch {
                    for &heads in &self.heads {
                        for &dk in &self.dk {
                            let dvs = if self.dv.is_empty() {
                                vec![dk]
                            } else {
                                self.dv.clone()
                            };
                            for dv in dvs {
                                for &seq in &self.seq {
                                    out.push(
                                        Problem::new(
                                            Shape::new(batch, heads, seq, dk, dv),
                                            causality,
                                            *map,
                                        )
                                        .with_eps(self.eps)
                                        .with_decay(self.decay),
                                    );
                                }
                            }
                        }
                    }
                }
            }
        }
        out
    }
}

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

// ---------------------------------------------------------------------------------------
// GPU probes. linattn-cuda provides the device queries; they stay behind these wrappers
// so that the sweep treats "no GPU" as one case.

mod gpu {
    use crate::results::GpuEnvironment;
    use linattn_core::AttnError;

    /// Name, driver, CUDA/NVRTC versions and memory of device 0; `None` without a GPU.
    pub fn environment() -> Option<GpuEnvironment> {
        let info = linattn_cuda::device_info(linattn_cuda::Platform::Cuda).ok()?;
        Some(GpuEnvironment {
            name: info.name,
            driver_version: kernel_driver_version(),
            // The CUDA version the driver API reports (cuDriverGetVersion).
            cuda_version: Some(info.driver_version),
            nvrtc_version: Some(info.nvrtc_version),
            memory_bytes: Some(info.total_memory_bytes),
        })
    }

    /// The NVIDIA kernel driver's version ("580.65.06"), from /proc on Linux.
    fn kernel_driver_version() -> Option<String> {
        let text = std::fs::read_to_string("/proc/driver/nvidia/version").ok()?;
        let line = text.lines().next()?;
        line.split_whitespace()
            .find(|w| w.chars().next().is_some_and(|c| c.is_ascii_digit()) && w.contains('.'))
            .map(str::to_string)
    }

    /// (free, total) device bytes.
    pub fn memory_info() -> Option<(u64, u64)> {
        linattn_cuda::memory_info(linattn_cuda::Platform::Cuda).ok()
    }

    /// Device-to-device copy bandwidth samples in GB/s.
    pub fn copy_bandwidth(bytes: u64, repeats: usize) -> Result<Vec<f64>, AttnError> {
        let bytes = usize::try_from(bytes)
            .map_err(|_| AttnError::SizeOverflow(format!("copy buffer of {bytes} bytes")))?;
        linattn_cuda::measure_copy_bandwidth(linattn_cuda::Platform::Cuda, bytes, repeats)
    }
}

/// Host memcpy bandwidth: `bytes` copied (read once, written once) `repeats` times.
fn cpu_copy_bandwidth(repeats: usize) -> Option<CopyBandwidth> {
    // 256 MiB defeats every cache; halve it when the host is short of memory.
    let mut bytes: usize = 256 << 20;
    while HostMemory::ensure_available(2 * bytes as u64, "copy-bandwidth buffers").is_err() {
        bytes /= 2;
        if bytes < (16 << 20) {
            return None;
        }
    }
    let src: Vec<u8> = (0..bytes).map(|i| i as u8).collect();
    let mut dst = vec![0u8; bytes];
    dst.copy_from_slice(&src); // fault the pages in before timing
    let mut samples = Vec::with_capacity(repeats);
    for _ in 0..repeats {
        let t = Instant::now();
        dst.copy_from_slice(std::hint::black_box(&src));
        std::hint::black_box(&mut dst);
        let secs = t.elapsed().as_secs_f64();
        if secs > 0.0 {
            samples.push(2.0 * bytes as f64 / secs / 1e9);
        }
    }
    let median = SampleStats::of(&samples)?.median;
    Some(CopyBandwidth {
        device: DeviceKind::Cpu,
        bytes: bytes as u64,
        samples_gbps: samples,
        median_gbps: median,
    })
}

fn gpu_copy_bandwidth() -> Result<CopyBandwidth, AttnError> {
    // 1 GiB, or a quarter of free memory on a small device.
    let bytes = match gpu::memory_info() {
        Some((free, _)) => (1u64 << 30).min(free / 4),
        None => 1u64 << 30,
    };
    let samples = gpu::copy_bandwidth(bytes, 10)?;
    let median = SampleStats::of(&samples)
        .ok_or_else(|| AttnError::State("copy bandwidth: no samples".into()))?
        .median;
    Ok(CopyBandwidth {
        device: DeviceKind::Cuda,
        bytes,
        samples_gbps: samples,
        median_gbps: median,
    })
}

// ---------------------------------------------------------------------------------------
// Derived rates.

/// Floating-point operations of one run (see the module docs for the convention).
pub(crate) fn flops(problem: &Problem, algorithm: Algorithm, mode: Mode) -> f64 {
    let forward = match algorithm {
        Algorithm::Softmax => problem.softmax_forward_flops(),
        Algorithm::Linear(_) => problem.linear_forward_flops(),
    };
    match mode {
        Mode::Forward => forward,
        Mode::ForwardBackward => 3.0 * forward,
    }
}

/// Minimal bytes moved by one run at `precision` storage.
pub(crate) fn minimal_bytes(shape: &Shape, precision: Precision, mode: Mode) -> f64 {
    let rows = (shape.bh() * shape.seq) as f64;
    let (d, m) = (shape.dk as f64, shape.dv as f64);
    let forward = rows * (2.0 * d + m) + rows * m;
    let backward = rows * (2.0 * d + 2.0 * m) + rows * (2.0 * d + m);
    let elements = match mode {
        Mode::Forward => forward,
        Mode::ForwardBackward => forward + backward,
    };
    elements * precision.bytes() as f64
}

/// Exponent of N in a backend's time: 2 for anything materialising N×N.
fn time_exponent(algorithm: Algorithm) -> i32 {
    match algorithm {
        Algorithm::Softmax | Algorithm::Linear(Form::Quadratic) => 2,
        Algorithm::Linear(_) => 1,
    }
}

// ---------------------------------------------------------------------------------------
// One cell.

fn classify(err: &AttnError) -> CellStatus {
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
fn guarded<T>(what: &str, f: impl FnOnce() -> Result<T, AttnError>) -> Result<T, AttnError> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(payload) => {
            let msg = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            Err(AttnError::State(format!("{what} panicked: {msg}")))
        }
    }
}

/// What the sweep remembers of a series (backend, mode, every axis but N).
#[derive(Debug, Clone)]
enum SeriesState {
    Ran { seq: usize, median_s: f64 },
    Stopped { seq: usize, status: CellStatus },
}

struct Sampling {
    warmup: usize,
    repeats: Option<usize>,
    min_repeats: usize,
    cell_seconds: f64,
    flush: bool,
}

struct Measured {
    samples: Vec<f64>,
    forward: Vec<f64>,
    backward: Vec<f64>,
    peak_bytes: Option<u64>,
    peak_source: PeakSource,
    free_drop: Option<u64>,
}

/// One timed run (forward, plus backward in forward+backward mode) and its memory.
struct OneRun {
    forward_s: f64,
    backward_s: f64,
    peak_bytes: Option<u64>,
}

fn run_once(backend: &mut dyn Backend, mode: Mode) -> Result<OneRun, AttnError> {
    let host_baseline = HostMemory::start();
    let fwd = backend.run_forward()?;
    let bwd = match mode {
        Mode::Forward => None,
        Mode::ForwardBackward => Some(backend.run_backward()?),
    };
    let host_peak = HostMemory::peak_above(host_baseline) as u64;
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

fn measure(
    backend: &mut dyn Backend,
    problem: &Problem,
    inputs: &Inputs,
    mode: Mode,
    sampling: &Sampling,
) -> Result<Measured, AttnError> {
    backend.stage(problem, inputs)?;
    let on_gpu = backend.info().device == DeviceKind::Cuda;
    let free_before = if on_gpu { gpu::memory_info() } else { None };
    let mut min_free = free_before.map(|(free, _)| free);
    // Warm-up: the first run pays for lazy set-up (kernel compilation, thread pools); a cell
    // whose warm-up already took the whole sampling budget needs no more of it.
    let warmup_started = Instant::now();
    for _ in 0..sampling.warmup {
        run_once(backend, mode)?;
        if warmup_started.elapsed().as_secs_f64() >= sampling.cell_seconds {
            break;
        }
    }
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
    };
    let budget = Duration::from_secs_f64(sampling.cell_seconds);
    let started = Instant::now();
    loop {
        let enough = match sampling.repeats {
            Some(r) => m.samples.len() >= r,
            None => {
                m.samples.len() >= MAX_ADAPTIVE_SAMPLES
                    || (m.samples.len() >= sampling.min_repeats && started.elapsed() >= budget)
            }
        };
        if enough {
            break;
        }
        if sampling.flush {
            backend.flush_cache()?;
        }
        let run = run_once(backend, mode)?;
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
    Ok(m)
}

struct CellContext<'a> {
    problem: &'a Problem,
    /// `Err` when the inputs of this shape could not be made (host memory).
    inputs: &'a Result<Inputs, AttnError>,
    mode: Mode,
    sampling: &'a Sampling,
    max_cell_seconds: f64,
    copy_gbps: &'a HashMap<DeviceKind, f64>,
}

fn bench_cell(
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
    let inputs = match ctx.inputs {
        Ok(i) => i,
        Err(e) => return fail_stopping_on_oom(series, cell, e, format!("inputs: {e}")),
    };

    let result = guarded(&info.name, || {
        measure(backend, p, inputs, ctx.mode, ctx.sampling)
    });
    backend.release();
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
    cell.samples_s = m.samples;
    cell.peak_bytes = m.peak_bytes;
    cell.peak_bytes_source = m.peak_bytes.map(|_| m.peak_source);
    cell.free_mem_drop_bytes = m.free_drop;
    if st.median > 0.0 {
        let gbps = minimal_bytes(&p.shape, info.precision, ctx.mode) / st.median / 1e9;
        cell.tokens_per_s = Some((p.shape.batch * p.shape.seq) as f64 / st.median);
        cell.tflops = Some(flops(p, info.algorithm, ctx.mode) / st.median / 1e12);
        cell.gbps = Some(gbps);
        cell.pct_of_copy = ctx.copy_gbps.get(&info.device).map(|c| 100.0 * gbps / c);
    }
    cell
}

/// Every axis of a problem but N (series identity for slopes and predictions).
fn series_axes(p: &Problem) -> String {
    format!(
        "B={} H={} D={} M={} {} {} eps={} decay={}",
        p.shape.batch, p.shape.heads, p.shape.dk, p.shape.dv, p.causality, p.map, p.eps, p.decay
    )
}

// ---------------------------------------------------------------------------------------
// Output.

pub(crate) fn fmt_seconds(s: f64) -> String {
    if s >= 1.0 {
        format!("{s:.3} s")
    } else if s >= 1e-3 {
        format!("{:.3} ms", s * 1e3)
    } else if s >= 1e-6 {
        format!("{:.2} µs", s * 1e6)
    } else {
        format!("{:.0} ns", s * 1e9)
    }
}

pub(crate) fn fmt_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

fn opt(v: Option<f64>, f: impl Fn(f64) -> String) -> String {
    v.map_or_else(|| "-".into(), f)
}

/// Series key for slopes: everything but N.
pub(crate) fn series_of(c: &Cell) -> (String, Mode, String) {
    let s = &c.shape;
    (
        c.backend.clone(),
        c.mode,
        format!(
            "B={} H={} D={} M={} {} {}{}{}",
            s.batch,
            s.heads,
            s.dk,
            s.dv,
            c.causality,
            c.map,
            if c.eps != DEFAULT_EPS {
                format!(" eps={:e}", c.eps)
            } else {
                String::new()
            },
            if c.decay != 1.0 {
                format!(" decay={}", c.decay)
            } else {
                String::new()
            }
        ),
    )
}

/// Slopes of log(time) and log(peak memory) against log(N) of one series' ok cells.
pub(crate) fn series_slopes(cells: &[&Cell]) -> (Option<f64>, Option<f64>) {
    let ok: Vec<&&Cell> = cells
        .iter()
        .filter(|c| c.status == CellStatus::Ok)
        .collect();
    let time: Vec<(f64, f64)> = ok
        .iter()
        .filter_map(|c| Some((c.shape.seq as f64, c.median_s?)))
        .collect();
    let mem: Vec<(f64, f64)> = ok
        .iter()
        .filter_map(|c| Some((c.shape.seq as f64, c.peak_bytes? as f64)))
        .collect();
    (log_log_slope(&time), log_log_slope(&mem))
}

fn render_tables(file: &ResultsFile) -> String {
    use tabled::builder::Builder;
    use tabled::settings::Style;
    let mut groups: BTreeMap<(String, Mode, String), Vec<&Cell>> = BTreeMap::new();
    for c in &file.cells {
        groups.entry(series_of(c)).or_default().push(c);
    }
    let mut cells_table = Builder::default();
    cells_table.push_record([
        "backend", "mode", "axes", "N", "median", "±", "peak mem", "tok/s", "TFLOP/s", "GB/s",
        "% copy", "status",
    ]);
    let mut slope_table = Builder::default();
    slope_table.push_record([
        "backend",
        "mode",
        "axes",
        "ok N",
        "time ~ N^",
        "memory ~ N^",
    ]);
    // Series that ran nowhere (no driver, unsupported problem) get one line each below.
    let mut not_run: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut any_simulated = false;
    for ((backend, mode, axes), mut cells) in groups {
        cells.sort_by_key(|c| c.shape.seq);
        let never_ran = cells
            .iter()
            .all(|c| matches!(c.status, CellStatus::Unavailable | CellStatus::Unsupported));
        if never_ran {
            let reason = cells
                .iter()
                .find_map(|c| c.message.clone())
                .unwrap_or_else(|| cells[0].status.label().to_string());
            let entry = not_run.entry(reason).or_default();
            if !entry.contains(&backend) {
                entry.push(backend.clone());
            }
            continue;
        }
        let simulated = registry::family(&backend) == "sim";
        any_simulated |= simulated;
        for c in &cells {
            let status = match (&c.status, &c.message) {
                (CellStatus::Ok, _) if simulated => "ok, simulated †".to_string(),
                (CellStatus::Ok, _) => "ok".to_string(),
                // Unsupported's own text already starts with "unsupported:" / "skipped:".
                (CellStatus::Unsupported | CellStatus::Unavailable, Some(m)) => truncate(m, 60),
                (s, Some(m)) => format!("{}: {}", s.label(), truncate(m, 60)),
                (s, None) => s.label().to_string(),
            };
            cells_table.push_record([
                backend.clone(),
                mode.to_string(),
                axes.clone(),
                c.shape.seq.to_string(),
                opt(c.ok_median(), fmt_seconds),
                opt(c.rel_stdev.filter(|_| c.status == CellStatus::Ok), |r| {
                    format!("{:.1}%", 100.0 * r)
                }),
                c.peak_bytes.map_or_else(|| "-".into(), fmt_bytes),
                opt(c.tokens_per_s, |t| format!("{t:.3e}")),
                opt(c.tflops, |t| format!("{t:.3}")),
                opt(c.gbps, |g| format!("{g:.2}")),
                opt(c.pct_of_copy, |p| format!("{p:.1}")),
                status,
            ]);
        }
        let (t, m) = series_slopes(&cells);
        let ok = cells.iter().filter(|c| c.status == CellStatus::Ok).count();
        slope_table.push_record([
            backend.clone(),
            mode.to_string(),
            axes.clone(),
            ok.to_string(),
            opt(t, |s| format!("{s:.2}")),
            opt(m, |s| format!("{s:.2}")),
        ]);
    }
    let mut out = cells_table.build().with(Style::sharp()).to_string();
    out.push('\n');
    out.push_str(&slope_table.build().with(Style::sharp()).to_string());
    out.push('\n');
    for (reason, backends) in &not_run {
        out.push_str(&format!("not run ({reason}): {}\n", backends.join(", ")));
    }
    if any_simulated {
        out.push_str(
            "† sim/*: the CUDA kernels run by the PTX simulator on the host. Their times are \
             host times of the simulation and say nothing about a GPU; their memory is the \
             exact device bytes the kernels allocate.\n",
        );
    }
    if !file.copy_bandwidth.is_empty() {
        for c in &file.copy_bandwidth {
            out.push_str(&format!(
                "copy bandwidth ({:?}, {}): median {:.1} GB/s over {} samples\n",
                c.device,
                fmt_bytes(c.bytes),
                c.median_gbps,
                c.samples_gbps.len()
            ));
        }
    }
    out
}

pub(crate) fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(max.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}

fn default_out_path(env: &results::Environment) -> PathBuf {
    let date = env.date.get(..10).unwrap_or("undated");
    let commit = env.commit.get(..12).unwrap_or(&env.commit);
    let dirty = if env.commit.ends_with("-dirty") {
        "-dirty"
    } else {
        ""
    };
    PathBuf::from("bench-results")
        .join(results::slug(&env.device_name))
        .join(format!("{date}-{commit}{dirty}.json"))
}

// ---------------------------------------------------------------------------------------

pub fn run(args: BenchArgs) -> Result<ExitCode, AttnError> {
    let grid = resolve_grid(&args)?;
    let mut backends = choose_backends(&grid)?;
    let problems = grid.problems();
    for p in &problems {
        p.validate()?;
    }

    let uses_gpu = backends.iter().any(|b| b.info().device == DeviceKind::Cuda);
    let uses_cpu = backends.iter().any(|b| b.info().device == DeviceKind::Cpu);
    let gpu_env: Option<GpuEnvironment> = if uses_gpu { gpu::environment() } else { None };
    let environment = results::probe_environment(gpu_env.clone());

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
    };
    let total = (problems.len() * backends.len() * grid.mode.len()) as u64;
    let progress = if args.no_progress || !std::io::stderr().is_terminal() {
        ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::hidden())
    } else {
        ProgressBar::new(total)
    };
    if let Ok(style) =
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {wide_msg}")
    {
        progress.set_style(style.progress_chars("=> "));
    }

    let with_grad = grid.mode.contains(&Mode::ForwardBackward);
    let mut series: HashMap<String, SeriesState> = HashMap::new();
    let mut cells = Vec::new();
    for problem in &problems {
        // One set of inputs per shape, shared by every backend (identical bytes for all).
        let inputs = make_inputs(problem, grid.seed, with_grad);
        for backend in backends.iter_mut() {
            for &mode in &grid.mode {
                progress.set_message(format!(
                    "{} {} N={}",
                    backend.name(),
                    mode,
                    problem.shape.seq
                ));
                let ctx = CellContext {
                    problem,
                    inputs: &inputs,
                    mode,
                    sampling: &sampling,
                    max_cell_seconds: grid.max_cell_seconds,
                    copy_gbps: &copy_gbps,
                };
                cells.push(bench_cell(backend.as_mut(), &ctx, &mut series));
                progress.inc(1);
            }
        }
    }
    progress.finish_and_clear();

    let file = ResultsFile {
        schema_version: SCHEMA_VERSION,
        environment,
        grid: grid.record(),
        copy_bandwidth,
        cells,
        profiles: Vec::new(),
    };
    let table = render_tables(&file);
    match args.out.as_deref() {
        Some(p) if p == Path::new("-") => {
            eprint!("{table}");
            let text = serde_json::to_string_pretty(&file)
                .map_err(|e| AttnError::State(format!("cannot serialize results: {e}")))?;
            println!("{text}");
        }
        out => {
            print!("{table}");
            let path = out
                .map(Path::to_path_buf)
                .unwrap_or_else(|| default_out_path(&file.environment));
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir)
                    .map_err(|e| AttnError::Io(format!("cannot create {}: {e}", dir.display())))?;
            }
            results::write_json_atomic(&path, &file)?;
            eprintln!("results written to {}", path.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn make_inputs(problem: &Problem, seed: u64, with_grad: bool) -> Result<Inputs, AttnError> {
    Inputs::random(problem.shape, seed, with_grad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_as_numbers_and_powers() {
        assert_eq!(parse_size("2^10", "n").unwrap(), 1024);
        assert_eq!(parse_size(" 4096 ", "n").unwrap(), 4096);
        assert!(parse_size("0", "n").is_err());
        assert!(parse_size("2^99", "n").is_err());
        assert!(parse_size("abc", "n").is_err());
        assert_eq!(
            parse_size_list("2^12,256,256", "n").unwrap(),
            vec![256, 4096]
        );
        assert_eq!(
            power_sweep(256, 4096).unwrap(),
            vec![256, 512, 1024, 2048, 4096]
        );
        assert!(power_sweep(300, 4096).is_err());
        assert!(power_sweep(4096, 256).is_err());
    }

    #[test]
    fn grid_files_parse_in_toml_and_json_and_flags_win() {
        let dir = tempfile::tempdir().unwrap();
        let toml_path = dir.path().join("grid.toml");
        std::fs::write(
            &toml_path,
            "n = [\"2^8\", 1024]\nbatch = 2\nheads = [4]\nmode = \"forward\"\n\
             causality = [\"causal\", \"non-causal\"]\nmap = \"relu\"\n",
        )
        .unwrap();
        let args = BenchArgs {
            grid: Some(toml_path),
            heads: Some("2".into()),
            ..BenchArgs::default()
        };
        let g = resolve_grid(&args).unwrap();
        assert_eq!(g.seq, vec![256, 1024]);
        assert_eq!(g.batch, vec![2]);
        assert_eq!(g.heads, vec![2]);
        assert_eq!(g.mode, vec![Mode::Forward]);
        assert_eq!(g.causality.len(), 2);
        assert_eq!(g.map, vec![FeatureMap::Relu]);
        assert_eq!(g.problems().len(), 4);

        let json_path = dir.path().join("grid.json");
        std::fs::write(
            &json_path,
            r#"{"n_min": "2^8", "n_max": 2048, "dk": [32, 64]}"#,
        )
        .unwrap();
        let g = resolve_grid(&BenchArgs {
            grid: Some(json_path),
            ..BenchArgs::default()
        })
        .unwrap();
        assert_eq!(g.seq, vec![256, 512, 1024, 2048]);
        assert_eq!(g.problems().len(), 8);
        assert!(g.problems().iter().all(|p| p.shape.dk == p.shape.dv));

        let typo = dir.path().join("typo.toml");
        std::fs::write(&typo, "heads_ = 3\n").unwrap();
        let err = resolve_grid(&BenchArgs {
            grid: Some(typo),
            ..BenchArgs::default()
        })
        .unwrap_err();
        assert!(matches!(err, AttnError::BadFile { .. }), "{err}");
    }

    #[test]
    fn derived_rate_conventions() {
        let shape = Shape::new(2, 3, 128, 16, 8);
        let p = Problem::new(shape, Causality::Causal, FeatureMap::Relu);
        let fwd = flops(&p, Algorithm::Linear(Form::Cumsum), Mode::Forward);
        assert_eq!(fwd, p.linear_forward_flops());
        assert_eq!(
            flops(&p, Algorithm::Linear(Form::Cumsum), Mode::ForwardBackward),
            3.0 * fwd
        );
        assert_eq!(
            flops(&p, Algorithm::Softmax, Mode::Forward),
            p.softmax_forward_flops()
        );
        let rows = 2.0 * 3.0 * 128.0;
        // forward: q, k (16 each), v (8) read; o (8) written; f16 = 2 bytes
        assert_eq!(
            minimal_bytes(&shape, Precision::F16, Mode::Forward),
            rows * (16.0 + 16.0 + 8.0 + 8.0) * 2.0
        );
        // backward adds q, k, v, dO read and dq, dk, dv written
        assert_eq!(
            minimal_bytes(&shape, Precision::F32, Mode::ForwardBackward),
            rows * ((40.0 + 8.0) + (16.0 + 16.0 + 8.0 + 8.0) + (16.0 + 16.0 + 8.0)) * 4.0
        );
    }

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

    #[test]
    fn formatting() {
        assert_eq!(fmt_seconds(1.5e-3), "1.500 ms");
        assert_eq!(fmt_seconds(2.0), "2.000 s");
        assert_eq!(fmt_bytes(512), "512 B");
        assert_eq!(fmt_bytes(3 << 20), "3.0 MiB");
        assert_eq!(truncate("abcdef", 4), "abc…");
    }
}
