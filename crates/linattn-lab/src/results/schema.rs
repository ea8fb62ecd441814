//! A results file as serde reads and writes it, field by field as bench-results/SCHEMA.md
//! documents it: the file, its environment, grid and machine rates. Its cells are in
//! [`super::cell`], its profiles in [`super::profiles`]. Bump [`SCHEMA_VERSION`] when a field
//! changes meaning.

use linattn_core::{Causality, DeviceKind, Precision};
use serde::{Deserialize, Serialize};

use super::cell::{Cell, Mode};
use super::profiles::ProfileRecord;

/// 2 added `profiles`; 3 `gemm_adjacent_gflops`; 4 `sweep`, `Cell::wall` and the
/// build provenance of `environment` (`commit` is the binary's). Older files are still read.
pub const SCHEMA_VERSION: u32 = 4;
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
    /// `linattn bench`: how far the sweep got. The file is rewritten after every cell, so a
    /// sweep killed mid-way leaves `"state": "running"` and every finished cell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sweep: Option<SweepProgress>,
    #[serde(default)]
    pub cells: Vec<Cell>,
    /// `linattn profile`: counters and model per kernel (schema_version ≥ 2).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub profiles: Vec<ProfileRecord>,
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
    /// The commit the binary was built from (embedded at build time), with "-dirty" when its
    /// sources differed from it; "unknown" for a build outside a git checkout. Files of
    /// schema 3 and older hold the commit of the directory the binary ran in instead.
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

/// Where a sweep stands (`ResultsFile::sweep`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepProgress {
    pub state: SweepState,
    /// Cells of the full grid (backends × problems × modes).
    pub planned_cells: usize,
    /// Cells in `cells` (finished: measured, or recorded with why they did not run).
    pub finished_cells: usize,
    /// Seconds since the sweep started, when the file was written.
    pub elapsed_s: f64,
    /// `--deadline`, when given.
    #[serde(default)]
    pub deadline_s: Option<f64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SweepState {
    /// Cells still to run (a file left in this state was cut off: killed or crashed).
    Running,
    /// Every planned cell is in the file.
    Complete,
    /// `--deadline` ended the sweep; the cells not started are absent.
    Deadline,
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
