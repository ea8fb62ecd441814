//! One bench cell of a results file (bench-results/SCHEMA.md, `cells`): what was timed, how
//! it went, what it measured; and the key `compare` matches cells on.

use linattn_core::{AttnError, Causality, DeviceKind, Precision};
use serde::{Deserialize, Serialize};
use std::fmt;

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
    /// Form label ("recurrent", "cumsum", "chunked", "noncausal", "quadratic") or, for softmax
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
    /// Wall time the harness spent on the cell, by phase (schema 4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wall: Option<CellWall>,
}

/// Where a cell's wall time went: the sweep's cost, as opposed to the timed runs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CellWall {
    /// Everything from the cell's start to its record.
    pub total_s: f64,
    /// Drawing the seeded inputs and staging them (upload, kernel loading, plan).
    pub stage_s: f64,
    /// The untimed warm-up runs.
    pub warmup_s: f64,
    /// The sampled runs (their measured times plus the harness's per-sample overhead).
    pub sampling_s: f64,
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
            wall: None,
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
