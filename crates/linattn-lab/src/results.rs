//! The results JSON written by `linattn bench` and scripts/peers.py, read by `compare` and
//! `report`. Documented field by field in bench-results/SCHEMA.md; bump
//! [`SCHEMA_VERSION`] when a field changes meaning.

use linattn_core::{AttnError, Causality, DeviceKind, Precision};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// 2 added `profiles`; files of version 1 (bench cells only) are still read.
pub const SCHEMA_VERSION: u32 = 3;
/// The oldest version this linattn reads.
pub const OLDEST_SCHEMA_VERSION: u32 = 1;

/// One results file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResultsFile {
    pub schema_version: u32,
    pub environment: Environment,
    /// The sweep that produced the cells (as given, before expansion).
    pub grid: GridRecord,
    /// Copy bandwidth measured in the same run, one entry per device kind timed.
    #[serde(default)]
    pub copy_bandwidth: Vec<CopyBandwidth>,
    /// The host's fp32 GEMM rate measured once at the start of the run (runs with CPU
    /// backends). Each CPU cell also carries the rate measured around it
    /// (`Cell::gemm_adjacent_gflops`), which its `pct_of_gemm` reads against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gemm_rate: Option<GemmRateRecord>,
    #[serde(default)]
    pub cells: Vec<Cell>,
    /// `linattn profile`: counters and model per kernel (schema_version ≥ 2).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub profiles: Vec<crate::profile::ProfileRecord>,
}

/// Where and how the numbers were taken.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Environment {
    /// "linattn" or "peers.py".
    #[serde(default)]
    pub producer: String,
    /// GPU name when one was used, else the CPU model. `compare` warns when these differ.
    pub device_name: String,
    #[serde(default)]
    pub driver_version: Option<String>,
    #[serde(default)]
    pub cuda_version: Option<String>,
    #[serde(default)]
    pub nvrtc_version: Option<String>,
    #[serde(default)]
    pub gpu_memory_bytes: Option<u64>,
    #[serde(default)]
    pub cpu_model: String,
    #[serde(default)]
    pub cpu_cores: usize,
    #[serde(default)]
    pub host_memory_bytes: Option<u64>,
    /// `git rev-parse HEAD`, with "-dirty" when tracked files were modified.
    #[serde(default)]
    pub commit: String,
    #[serde(default)]
    pub rustc_version: Option<String>,
    /// "release" or "debug" (cfg!(debug_assertions) of the binary).
    #[serde(default)]
    pub build_profile: String,
    /// UTC, RFC 3339, seconds precision.
    pub date: String,
    #[serde(default)]
    pub command_line: Vec<String>,
    /// Versions of peer libraries (torch, fla, ...) when the file comes from peers.py.
    #[serde(default)]
    pub peers: Vec<PeerVersion>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerVersion {
    pub name: String,
    pub version: String,
}

/// The sweep as requested. Every field has a default so files written by other tools parse.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct GridRecord {
    pub seq: Vec<usize>,
    pub batch: Vec<usize>,
    pub heads: Vec<usize>,
    pub dk: Vec<usize>,
    pub dv: Vec<usize>,
    pub causality: Vec<Causality>,
    pub map: Vec<String>,
    pub backends: Vec<String>,
    pub precision: Vec<Precision>,
    pub mode: Vec<Mode>,
    pub eps: Option<f64>,
    pub decay: Option<f64>,
    pub warmup: usize,
    /// `None`: adaptive (at least `min_repeats`, more while within `cell_seconds`).
    pub repeats: Option<usize>,
    pub min_repeats: usize,
    pub cell_seconds: f64,
    pub max_cell_seconds: f64,
    pub flush_l2: bool,
    pub seed: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CopyBandwidth {
    pub device: DeviceKind,
    /// Size of the buffer copied; bandwidth counts it read once and written once.
    pub bytes: u64,
    pub samples_gbps: Vec<f64>,
    pub median_gbps: f64,
}

/// The fp32 GEMM rate of the host: `samples_gflops` from products of two `shape × shape`
/// matrices through linattn-cpu's GEMM engine on every core (2·shape³ flops each).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GemmRateRecord {
    pub shape: usize,
    pub samples_gflops: Vec<f64>,
    pub median_gflops: f64,
}

/// What is timed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Mode {
    #[serde(rename = "forward")]
    Forward,
    /// run_forward then run_backward, timed separately and summed per sample.
    #[serde(rename = "forward+backward")]
    ForwardBackward,
}

impl Mode {
    pub fn label(self) -> &'static str {
        match self {
            Mode::Forward => "forward",
            Mode::ForwardBackward => "forward+backward",
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

impl std::str::FromStr for Mode {
    type Err = AttnError;
    fn from_str(s: &str) -> Result<Self, AttnError> {
        match s.to_ascii_lowercase().as_str() {
            "forward" | "fwd" | "f" => Ok(Mode::Forward),
            "forward+backward" | "fwd+bwd" | "fb" => Ok(Mode::ForwardBackward),
            "backward" | "bwd" | "b" => Err(AttnError::InvalidArgument(format!(
                "mode '{s}': a backward is not timed alone (it needs its forward); use \
                 forward+backward, whose cells also record the forward and backward medians \
                 separately"
            ))),
            _ => Err(AttnError::InvalidArgument(format!(
                "unknown mode '{s}' (expected forward or forward+backward)"
            ))),
        }
    }
}

/// Outcome of one cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CellStatus {
    Ok,
    /// The backend does not handle this problem (head dim, causality, map...).
    Unsupported,
    /// The machine lacks what the backend needs (no CUDA driver...).
    Unavailable,
    Oom,
    Error,
    /// Skipped: predicted to exceed --max-cell-seconds from the previous N.
    TooSlow,
}

impl CellStatus {
    pub fn label(self) -> &'static str {
        match self {
            CellStatus::Ok => "ok",
            CellStatus::Unsupported => "unsupported",
            CellStatus::Unavailable => "unavailable",
            CellStatus::Oom => "oom",
            CellStatus::Error => "error",
            CellStatus::TooSlow => "too-slow",
        }
    }
}

/// Shape of one cell (the core `Shape`'s fields under the same names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct CellShape {
    pub batch: usize,
    pub heads: usize,
    pub seq: usize,
    pub dk: usize,
    pub dv: usize,
}

impl From<linattn_core::Shape> for CellShape {
    fn from(s: linattn_core::Shape) -> Self {
        CellShape {
            batch: s.batch,
            heads: s.heads,
            seq: s.seq,
            dk: s.dk,
            dv: s.dv,
        }
    }
}

/// Source of `peak_bytes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PeakSource {
    /// Host bytes above the baseline, from the counting global allocator.
    CountingAllocator,
    /// Device bytes the backend itself allocated (RunStats::device_bytes).
    DeviceExact,
    /// torch.cuda.max_memory_allocated above the inputs (peers.py).
    TorchAllocator,
}

/// One (backend, problem, mode) measurement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cell {
    pub backend: String,
    pub device: DeviceKind,
    pub precision: Precision,
    /// "linear" or "softmax".
    pub algorithm: String,
    /// Form label ("recurrent", "cumsum", "chunked", "parallel", "quadratic") or, for softmax
    /// backends, "softmax" (peers: e.g. "sdpa-flash").
    pub form: String,
    pub mode: Mode,
    pub shape: CellShape,
    pub causality: Causality,
    /// Feature-map label as `linattn` parses it ("elu+1", "favor:64", ...).
    pub map: String,
    pub eps: f64,
    pub decay: f64,
    pub status: CellStatus,
    #[serde(default)]
    pub message: Option<String>,
    /// Raw per-sample seconds (forward+backward: the sum of both phases per sample).
    #[serde(default)]
    pub samples_s: Vec<f64>,
    #[serde(default)]
    pub median_s: Option<f64>,
    #[serde(default)]
    pub min_s: Option<f64>,
    #[serde(default)]
    pub max_s: Option<f64>,
    #[serde(default)]
    pub mean_s: Option<f64>,
    #[serde(default)]
    pub rel_stdev: Option<f64>,
    /// forward+backward only: the medians of each phase alone.
    #[serde(default)]
    pub forward_median_s: Option<f64>,
    #[serde(default)]
    pub backward_median_s: Option<f64>,
    #[serde(default)]
    pub peak_bytes: Option<u64>,
    #[serde(default)]
    pub peak_bytes_source: Option<PeakSource>,
    /// GPU: drop of cudaMemGetInfo's free bytes across the timed runs (a cross-check of
    /// peak_bytes; pools and other processes make it approximate).
    #[serde(default)]
    pub free_mem_drop_bytes: Option<u64>,
    /// Host bytes the backend kept after staging the cell's inputs (measured by the
    /// counting allocator; a CPU backend's inputs in its precision).
    #[serde(default)]
    pub staged_bytes: Option<u64>,
    /// Host bytes made only to stage the inputs and freed after it (measured): an f64 copy
    /// when the backend stages from f64, about 0 when it makes its inputs in its own
    /// precision. Not part of `peak_bytes` or `staged_bytes`.
    #[serde(default)]
    pub harness_bytes: Option<u64>,
    #[serde(default)]
    pub tokens_per_s: Option<f64>,
    #[serde(default)]
    pub tflops: Option<f64>,
    #[serde(default)]
    pub gbps: Option<f64>,
    #[serde(default)]
    pub pct_of_copy: Option<f64>,
    /// CPU cells: useful FLOPs of the form (`Problem::useful_flops`) / time / the run's GEMM
    /// rate measured around the cell (median of `gemm_adjacent_gflops`), in percent: how
    /// close to the machine's compute limit the cell ran.
    #[serde(default)]
    pub pct_of_gemm: Option<f64>,
    /// CPU cells: fp32 GEMM rate samples (GFLOP/s, the products of `gemm_rate`) taken just
    /// before and just after the cell's timed runs, half each. A shared machine's speed
    /// drifts by tens of percent over minutes; the rate next to the cell tracks that drift
    /// where the run's single rate cannot.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gemm_adjacent_gflops: Vec<f64>,
}

impl Cell {
    /// A cell with no measurement yet.
    #[allow(clippy::too_many_arguments)]
    pub fn empty(
        backend: String,
        device: DeviceKind,
        precision: Precision,
        algorithm: String,
        form: String,
        mode: Mode,
        shape: CellShape,
        causality: Causality,
        map: String,
        eps: f64,
        decay: f64,
    ) -> Cell {
        Cell {
            backend,
            device,
            precision,
            algorithm,
            form,
            mode,
            shape,
            causality,
            map,
            eps,
            decay,
            status: CellStatus::Error,
            message: None,
            samples_s: Vec::new(),
            median_s: None,
            min_s: None,
            max_s: None,
            mean_s: None,
            rel_stdev: None,
            forward_median_s: None,
            backward_median_s: None,
            peak_bytes: None,
            peak_bytes_source: None,
            free_mem_drop_bytes: None,
            staged_bytes: None,
            harness_bytes: None,
            tokens_per_s: None,
            tflops: None,
            gbps: None,
            pct_of_copy: None,
            pct_of_gemm: None,
            gemm_adjacent_gflops: Vec::new(),
        }
    }

    /// Everything that identifies a cell across runs (`compare` matches on it).
    pub fn key(&self) -> CellKey {
        CellKey {
            backend: self.backend.clone(),
            mode: self.mode,
            shape: self.shape,
            causality: self.causality.label(),
            map: self.map.clone(),
            precision: self.precision,
            eps_bits: self.eps.to_bits(),
            decay_bits: self.decay.to_bits(),
        }
    }

    /// The median when the cell ran.
    pub fn ok_median(&self) -> Option<f64> {
        if self.status == CellStatus::Ok {
            self.median_s
        } else {
            None
        }
    }
}

/// Identity of a cell (floats by bit pattern: files round-trip them exactly).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CellKey {
    pub backend: String,
    pub mode: Mode,
    pub shape: CellShape,
    /// `Causality::label` (a string so that keys sort).
    pub causality: &'static str,
    pub map: String,
    pub precision: Precision,
    pub eps_bits: u64,
    pub decay_bits: u64,
}

impl fmt::Display for CellKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.shape;
        write!(
            f,
            "{} {} B={} H={} N={} D={} M={} {} map={}",
            self.backend, self.mode, s.batch, s.heads, s.seq, s.dk, s.dv, self.causality, self.map
        )?;
        let eps = f64::from_bits(self.eps_bits);
        if eps != linattn_core::DEFAULT_EPS {
            write!(f, " eps={eps:e}")?;
        }
        let decay = f64::from_bits(self.decay_bits);
        if decay != 1.0 {
            write!(f, " decay={decay}")?;
        }
        Ok(())
    }
}

impl ResultsFile {
    /// Reads and validates a results file; every failure is a `BadFile` naming the path.
    pub fn load(path: &Path) -> Result<ResultsFile, AttnError> {
        let bad = |reason: String| AttnError::BadFile {
            path: path.display().to_string(),
            reason,
        };
        let text = fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
        let file: ResultsFile =
            serde_json::from_str(&text).map_err(|e| bad(format!("not a results file: {e}")))?;
        if !(OLDEST_SCHEMA_VERSION..=SCHEMA_VERSION).contains(&file.schema_version) {
            return Err(bad(format!(
                "schema_version {} (this linattn reads {OLDEST_SCHEMA_VERSION} to \
                 {SCHEMA_VERSION})",
                file.schema_version
            )));
        }
        Ok(file)
    }
}

/// Refuses an output path whose directory does not exist (or that names no file) before a
/// long run, rather than after it.
pub fn check_writable(path: &Path) -> Result<(), AttnError> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
    if dir.is_some_and(|d| !d.is_dir()) || path.file_name().is_none() {
        return Err(AttnError::InvalidArgument(format!(
            "{}: the directory does not exist or no file is named",
            path.display()
        )));
    }
    Ok(())
}

/// Makes sure `path` can be written before a long run produces it: creates its directory
/// and writes (then removes) a probe file there. Errors name the path and the reason.
pub(crate) fn prepare_output_file(path: &Path) -> Result<(), AttnError> {
    if path.file_name().is_none() || path.is_dir() {
        return Err(AttnError::InvalidArgument(format!(
            "{}: names a directory, not a file",
            path.display()
        )));
    }
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    prepare_output_dir(dir)
}

/// Creates `dir` (and its parents) and checks that a file can be written in it.
pub(crate) fn prepare_output_dir(dir: &Path) -> Result<(), AttnError> {
    let unwritable = |e: std::io::Error| {
        AttnError::InvalidArgument(format!("{}: cannot write there: {e}", dir.display()))
    };
    std::fs::create_dir_all(dir).map_err(unwritable)?;
    let probe = dir.join(format!(".linattn-write-probe-{}", std::process::id()));
    std::fs::write(&probe, b"").map_err(unwritable)?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// Serializes `value` as pretty JSON and writes it atomically: into a temporary file in the
/// target's directory, flushed and fsynced, then renamed over the target. A reader (or a
/// crash) sees the old file or the new one, never half of one; on any failure the target
/// is untouched and the temporary file is removed.
pub fn write_json_atomic<T: Serialize>(path: &Path, value: &T) -> Result<(), AttnError> {
    // Serialize first: a serialization error must not even create a file.
    let mut text = serde_json::to_string_pretty(value)
        .map_err(|e| AttnError::State(format!("cannot serialize results: {e}")))?;
    text.push('\n');
    write_bytes_atomic(path, text.as_bytes())
}

/// Moved to linattn-core, where decode states are saved with it too.
pub use linattn_core::write_bytes_atomic;

// ---------------------------------------------------------------------------------------
// Environment probing.

/// Output of a command's stdout, trimmed, when it ran and succeeded.
fn command_output(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program).args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (!text.is_empty()).then_some(text)
}

/// `git rev-parse HEAD`, plus "-dirty" when tracked files differ from HEAD. Asked in the
/// working directory, else beside the executable (a bench run from elsewhere still names
/// the checkout it was built in); "unknown" when neither is in a git checkout.
pub fn git_commit() -> String {
    let exe_dir = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf));
    let dirs = std::iter::once(PathBuf::from(".")).chain(exe_dir);
    for dir in dirs {
        let Some(dir_text) = dir.to_str() else {
            continue;
        };
        if let Some(hash) = command_output("git", &["-C", dir_text, "rev-parse", "HEAD"]) {
            let dirty = Command::new("git")
                .args([
                    "-C",
                    dir_text,
                    "status",
                    "--porcelain",
                    "--untracked-files=no",
                ])
                .output()
                .ok()
                .filter(|o| o.status.success())
                .is_some_and(|o| !o.stdout.is_empty());
            return if dirty { format!("{hash}-dirty") } else { hash };
        }
    }
    "unknown".into()
}

pub fn cpu_model() -> String {
    fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .and_then(|rest| rest.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
}

pub fn host_memory_bytes() -> Option<u64> {
    linattn_core::HostMemory::total()
}

/// What the GPU side can say about itself (filled by the bench from linattn-cuda).
#[derive(Debug, Clone, Default)]
pub struct GpuEnvironment {
    pub name: String,
    pub driver_version: Option<String>,
    pub cuda_version: Option<String>,
    pub nvrtc_version: Option<String>,
    pub memory_bytes: Option<u64>,
}

/// The environment of this process; `gpu` when a GPU was used.
pub fn probe_environment(gpu: Option<GpuEnvironment>) -> Environment {
    let cpu = cpu_model();
    let mut env = Environment {
        producer: "linattn".into(),
        device_name: cpu.clone(),
        cpu_model: cpu,
        cpu_cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        host_memory_bytes: host_memory_bytes(),
        commit: git_commit(),
        rustc_version: command_output("rustc", &["-V"]),
        build_profile: if cfg!(debug_assertions) {
            "debug".into()
        } else {
            "release".into()
        },
        date: rfc3339_utc(std::time::SystemTime::now()),
        command_line: std::env::args().collect(),
        ..Environment::default()
    };
    if let Some(gpu) = gpu {
        env.device_name = gpu.name;
        env.driver_version = gpu.driver_version;
        env.cuda_version = gpu.cuda_version;
        env.nvrtc_version = gpu.nvrtc_version;
        env.gpu_memory_bytes = gpu.memory_bytes;
    }
    env
}

/// Civil date (year, month, day) of a day count since 1970-01-01 (proleptic Gregorian;
/// the era arithmetic of H. Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// `2026-11-22T04:39:00Z`.
pub fn rfc3339_utc(t: std::time::SystemTime) -> String {
    let secs = match t.duration_since(std::time::UNIX_EPOCH) {
        Ok(d) => d.as_secs() as i64,
        Err(e) => -(e.duration().as_secs() as i64),
    };
    let (y, mo, d) = civil_from_days(secs.div_euclid(86_400));
    let s = secs.rem_euclid(86_400);
    format!(
        "{y:04}-{mo:02}-{d:02}T{:02}:{:02}:{:02}Z",
        s / 3600,
        s / 60 % 60,
        s % 60
    )
}

/// Lower-case letters, digits and '-' only: a device name usable as a directory.
/// The nearest directory at or above the working directory holding both `bench-results/`
/// and a `Cargo.toml`: the linattn checkout.
pub(crate) fn checkout_root() -> Option<PathBuf> {
    let cwd = std::env::current_dir().ok()?;
    cwd.ancestors()
        .find(|d| d.join("bench-results").is_dir() && d.join("Cargo.toml").is_file())
        .map(Path::to_path_buf)
}

pub fn slug(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') && !out.is_empty() {
            out.push('-');
        }
    }
    let trimmed = out.trim_end_matches('-').to_string();
    if trimmed.is_empty() {
        "unknown-device".into()
    } else {
        trimmed
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    pub(crate) fn sample_cell(backend: &str, seq: usize, median: f64) -> Cell {
        let mut c = Cell::empty(
            backend.into(),
            DeviceKind::Cpu,
            Precision::F32,
            "linear".into(),
            "recurrent".into(),
            Mode::Forward,
            CellShape {
                batch: 1,
                heads: 2,
                seq,
                dk: 16,
                dv: 16,
            },
            Causality::Causal,
            "elu+1".into(),
            linattn_core::DEFAULT_EPS,
            1.0,
        );
        c.status = CellStatus::Ok;
        c.samples_s = vec![median * 0.99, median, median * 1.01];
        c.median_s = Some(median);
        c.rel_stdev = Some(0.01);
        c.peak_bytes = Some(4096);
        c.peak_bytes_source = Some(PeakSource::CountingAllocator);
        c
    }

    fn sample_file() -> ResultsFile {
        let mut oom = sample_cell("cpu/softmax/f32", 8192, 0.0);
        oom.status = CellStatus::Oom;
        oom.message = Some("out of memory on host".into());
        oom.median_s = None;
        oom.samples_s.clear();
        ResultsFile {
            schema_version: SCHEMA_VERSION,
            environment: probe_environment(None),
            grid: GridRecord {
                seq: vec![256, 512],
                mode: vec![Mode::Forward, Mode::ForwardBackward],
                causality: vec![Causality::Causal],
                ..GridRecord::default()
            },
            copy_bandwidth: vec![CopyBandwidth {
                device: DeviceKind::Cpu,
                bytes: 1 << 20,
                samples_gbps: vec![10.0, 11.0],
                median_gbps: 10.5,
            }],
            gemm_rate: Some(GemmRateRecord {
                shape: 1024,
                samples_gflops: vec![60.0, 61.5, 59.0],
                median_gflops: 60.0,
            }),
            cells: vec![sample_cell("cpu/recurrent/f32", 256, 1e-3), oom],
            profiles: Vec::new(),
        }
    }

    #[test]
    fn json_round_trip_is_exact() {
        let file = sample_file();
        let text = serde_json::to_string_pretty(&file).unwrap();
        let back: ResultsFile = serde_json::from_str(&text).unwrap();
        assert_eq!(back, file);
        // Field spellings the schema documents.
        assert!(text.contains("\"forward+backward\""));
        assert!(text.contains("\"status\": \"oom\""));
        assert!(text.contains("\"peak_bytes_source\": \"counting-allocator\""));
        assert!(text.contains("\"causality\": \"causal\""));
    }

    #[test]
    fn load_rejects_other_schema_versions_and_garbage() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.json");
        let mut file = sample_file();
        file.schema_version = SCHEMA_VERSION + 1;
        write_json_atomic(&path, &file).unwrap();
        assert!(matches!(
            ResultsFile::load(&path),
            Err(AttnError::BadFile { .. })
        ));
        fs::write(&path, "{\"cells\": [").unwrap();
        assert!(matches!(
            ResultsFile::load(&path),
            Err(AttnError::BadFile { .. })
        ));
        let missing = dir.path().join("absent.json");
        assert!(matches!(
            ResultsFile::load(&missing),
            Err(AttnError::BadFile { .. })
        ));
    }

    #[test]
    fn version_one_files_still_load_without_profiles() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v1.json");
        let mut file = sample_file();
        file.schema_version = 1;
        write_json_atomic(&path, &file).unwrap();
        let back = ResultsFile::load(&path).unwrap();
        assert_eq!((back.schema_version, back.profiles.len()), (1, 0));
        assert!(!fs::read_to_string(&path).unwrap().contains("profiles"));
    }

    struct FailsToSerialize;
    impl Serialize for FailsToSerialize {
        fn serialize<S: serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
            Err(serde::ser::Error::custom("refused on purpose"))
        }
    }

    fn dir_entries(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn atomic_write_keeps_old_content_when_serialization_fails() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("results.json");
        write_json_atomic(&path, &sample_file()).unwrap();
        let before = fs::read_to_string(&path).unwrap();
        assert!(write_json_atomic(&path, &FailsToSerialize).is_err());
        assert_eq!(fs::read_to_string(&path).unwrap(), before);
        assert_eq!(dir_entries(dir.path()), vec!["results.json".to_string()]);
        // The survivor is a whole, loadable file.
        assert_eq!(ResultsFile::load(&path).unwrap().cells.len(), 2);
    }

    #[test]
    fn atomic_write_leaves_no_temp_file_when_rename_fails() {
        let dir = tempfile::tempdir().unwrap();
        // A directory in the target's place: the temp file is written, the rename fails.
        let target = dir.path().join("taken");
        fs::create_dir(&target).unwrap();
        fs::write(target.join("keep"), "x").unwrap();
        assert!(write_json_atomic(&target, &sample_file()).is_err());
        assert_eq!(dir_entries(dir.path()), vec!["taken".to_string()]);
        assert_eq!(fs::read_to_string(target.join("keep")).unwrap(), "x");
    }

    #[test]
    fn atomic_write_replaces_whole_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.json");
        fs::write(&path, "x".repeat(100_000)).unwrap();
        let file = sample_file();
        write_json_atomic(&path, &file).unwrap();
        assert_eq!(ResultsFile::load(&path).unwrap(), file);
        assert_eq!(dir_entries(dir.path()), vec!["r.json".to_string()]);
    }

    #[test]
    fn dates_are_rfc3339_utc() {
        assert_eq!(rfc3339_utc(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        // 2000-02-29 12:34:56 UTC (leap day) = 951827696
        let t = UNIX_EPOCH + Duration::from_secs(951_827_696);
        assert_eq!(rfc3339_utc(t), "2000-02-29T12:34:56Z");
        let t = UNIX_EPOCH + Duration::from_secs(1_798_761_599);
        assert_eq!(rfc3339_utc(t), "2026-12-31T23:59:59Z");
    }

    #[test]
    fn slugs_are_path_safe() {
        assert_eq!(slug("NVIDIA H100 80GB HBM3"), "nvidia-h100-80gb-hbm3");
        assert_eq!(slug("  AMD EPYC(tm) 7B13 "), "amd-epyc-tm-7b13");
        assert_eq!(slug("///"), "unknown-device");
    }
}
