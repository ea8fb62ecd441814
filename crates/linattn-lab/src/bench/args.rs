//! The flags of `linattn bench`.

use std::path::PathBuf;

#[derive(clap::Args, Debug, Default)]
pub struct BenchArgs {
    /// Sequence lengths, comma-separated: numbers or powers written 2^k (overrides --n-min/--n-max).
    #[arg(long, value_name = "LIST")]
    pub(super) n: Option<String>,
    /// Smallest N of a power-of-two sweep (a power of two, e.g. 1024 or 2^10). Default 2^10.
    #[arg(long, value_name = "N")]
    pub(super) n_min: Option<String>,
    /// Largest N of a power-of-two sweep. Default 2^16.
    #[arg(long, value_name = "N")]
    pub(super) n_max: Option<String>,
    /// Batch sizes (B), comma-separated. Default 1 (--mode decode takes one value).
    #[arg(short = 'b', long, value_name = "LIST")]
    pub(super) batch: Option<String>,
    /// Head counts (H), comma-separated. Default 8 (1 with --mode decode, which takes one value).
    #[arg(long, value_name = "LIST")]
    pub(super) heads: Option<String>,
    /// Query/key head dims (D), comma-separated. Default 64.
    #[arg(short = 'd', long, value_name = "LIST")]
    pub(super) dk: Option<String>,
    /// Value head dims (M), comma-separated. Default: equal to D.
    #[arg(short = 'm', long, value_name = "LIST")]
    pub(super) dv: Option<String>,
    /// Backend patterns, comma-separated globs (`cuda/*`, `*f16`). Default: every CPU f32
    /// backend and every CUDA backend (the f64 references are left out: too slow to sweep).
    #[arg(long, value_name = "PATTERNS")]
    pub(super) backends: Option<String>,
    /// Keep only backends storing in these precisions (f32, f16, bf16, f64).
    #[arg(long, value_name = "LIST")]
    pub(super) precision: Option<String>,
    /// causal, non-causal, or both comma-separated. Default causal.
    #[arg(long, value_name = "LIST")]
    pub(super) causality: Option<String>,
    /// Feature maps (elu+1, relu, favor:64, ...). Default elu+1.
    #[arg(long, value_name = "LIST")]
    pub(super) map: Option<String>,
    /// forward, forward+backward, or both. Default both. Or `decode` alone: time per
    /// generated token against context length (decoders vs softmax with a KV cache); then
    /// --n is the context lengths (default 2^8..2^20) and --out a directory.
    #[arg(long, value_name = "LIST")]
    pub(super) mode: Option<String>,
    /// Normaliser epsilon. Default 1e-6.
    #[arg(long)]
    pub(super) eps: Option<f64>,
    /// Decay γ in (0, 1]. Default 1 (none).
    #[arg(long)]
    pub(super) decay: Option<f64>,
    /// Untimed runs before the samples of each cell. Default 2.
    #[arg(long)]
    pub(super) warmup: Option<usize>,
    /// Exactly this many samples per cell (default: adaptive, see --min-repeats).
    #[arg(long)]
    pub(super) repeats: Option<usize>,
    /// Adaptive sampling: at least this many samples, more while within --cell-seconds. Default 5.
    #[arg(long)]
    pub(super) min_repeats: Option<usize>,
    /// Adaptive sampling: time budget for one cell's samples. Default 1.
    #[arg(long)]
    pub(super) cell_seconds: Option<f64>,
    /// Skip a cell as "too slow" when its minimal cost (one warm-up plus the minimum number of
    /// samples), predicted from the previous N, exceeds this many seconds. Default 60.
    #[arg(long)]
    pub(super) max_cell_seconds: Option<f64>,
    /// Call the backend's flush_cache before each sample (cold-cache timing).
    #[arg(long)]
    pub(super) flush_l2: bool,
    /// Seed of the random inputs.
    #[arg(long)]
    pub(super) seed: Option<u64>,
    /// Sweep from a TOML or JSON file with the same fields as these flags (flags override it).
    #[arg(long, value_name = "FILE")]
    pub(super) grid: Option<PathBuf>,
    /// Results JSON path; `-` writes it to stdout (the table then goes to stderr).
    /// Default: bench-results/latest/<device>-<date>-<commit>.json (git-ignored; commit a run
    /// by naming its path under bench-results/<device>/ with --out).
    #[arg(long, value_name = "PATH")]
    pub(super) out: Option<PathBuf>,
    /// No progress bar (the one-line log of each finished cell still goes to stderr).
    #[arg(long)]
    pub(super) no_progress: bool,
    /// End the sweep cleanly this many seconds after it started: no cell starts past it, a
    /// cell predicted (from the previous N) to end past it is skipped, and a running cell
    /// stops sampling at it once it has --min-repeats samples. The results file, rewritten
    /// after every cell anyway, then says `"state": "deadline"`.
    #[arg(long, value_name = "SECONDS")]
    pub(super) deadline: Option<f64>,
}
