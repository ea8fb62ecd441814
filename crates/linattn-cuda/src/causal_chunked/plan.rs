//! The launch geometry of `causal_chunked.cu` for one shape: which program (tile widths) a
//! head dim runs on, every grid, the shared memory of every kernel and the chunk-state
//! workspace. Host-testable without a GPU (`tests/causal_chunked_host.rs`).

use linattn_core::{AttnError, Precision, Problem, Shape, Unsupported};

use super::entries::params;
use crate::executor::Launch;
use crate::limits::{Axis, Grid};
use crate::runtime::as_i32;

/// Tokens per chunk (`CC_L`).
pub const CHUNK: usize = 64;
/// Threads of a `cc_backward_go` block (`CC_GO_THREADS`), and its tokens (8 lanes each).
pub const GO_THREADS: u32 = 256;
pub const GO_TOKENS: usize = GO_THREADS as usize / 8;
/// Width of the slice of M (forward, dV) or of D (dQ, dK, R state) one CTA computes.
pub const TILE: usize = 64;
/// The head dims D and M the kernels take, in any combination.
pub const HEAD_DIMS: [usize; 5] = [16, 32, 64, 128, 256];
/// The compile-time tile widths (`CC_D`, `CC_M`): one program per (precision, width of D,
/// width of M). D, M = 16, 32 run on the 64-wide program with their real row widths as
/// kernel arguments, so 18 programs serve the 50 (precision, D, M).
pub const TILE_WIDTHS: [usize; 3] = [64, 128, 256];

/// Chunk-CTAs (⌈N/64⌉·B·H) from which each CTA of the gradient kernels loops over every
/// 64-wide slice of its output, the score tile computed and q, k, v, G read once per chunk.
/// Below it each CTA takes one slice (grid z = the slices, the scores computed once per
/// slice): at B = H = 1, N = 1024 the 16 chunks alone would leave most of an H100's 132 SMs
/// idle (the model puts cc_backward_dk at 32.8 µs looped against 19.6 split). 1024 is ~2.6
/// waves of 3 CTAs on 132 SMs; fla's shapes have 2048–49152.
pub const GRAD_LOOP_MIN_CTAS: usize = 1024;

/// How a gradient kernel's CTAs share a chunk's 64-wide output slices: `auto` by
/// [`GRAD_LOOP_MIN_CTAS`], or forced (`LINATTN_CC_GRAD_SLICES=loop|split`: to time both on a
/// GPU, or to run the looped kernels on the simulator at a shape small enough for it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GradSlices {
    Auto,
    /// Grid z = 1: each CTA over every slice.
    Loop,
    /// Grid z = the slices: one each.
    Split,
}

/// The environment variable [`GradSlices::from_env`] reads.
pub const GRAD_SLICES_VAR: &str = "LINATTN_CC_GRAD_SLICES";

impl GradSlices {
    /// `LINATTN_CC_GRAD_SLICES` (unset or empty: `auto`); another value is an error naming
    /// the variable and what it takes.
    pub fn from_env() -> Result<Self, AttnError> {
        match env_choice(GRAD_SLICES_VAR)?.as_deref() {
            None => Ok(GradSlices::Auto),
            Some("loop") => Ok(GradSlices::Loop),
            Some("split") => Ok(GradSlices::Split),
            Some(other) => Err(AttnError::InvalidArgument(format!(
                "{GRAD_SLICES_VAR}={other}: give auto, loop or split"
            ))),
        }
    }

    /// Whether the gradient kernels loop over their output slices at `shape`.
    pub fn looped(self, shape: &Shape) -> bool {
        match self {
            GradSlices::Auto => grad_slices_looped(shape),
            GradSlices::Loop => true,
            GradSlices::Split => false,
        }
    }
}

/// Whether the gradient kernels loop over their output slices at `shape` by default (else one
/// slice per CTA): [`GRAD_LOOP_MIN_CTAS`].
pub fn grad_slices_looped(shape: &Shape) -> bool {
    shape.seq.div_ceil(CHUNK).saturating_mul(shape.bh()) >= GRAD_LOOP_MIN_CTAS
}

/// The segment lengths (chunks) the default chooses among ([`auto_seg_chunks`]).
pub const SEG_LENGTHS: [usize; 7] = [1, 2, 4, 8, 16, 32, 64];
/// Resident `cc_forward_seg` (and `cc_seg_sums`) CTAs per SM the default assumes: 2 (256
/// threads of ≤ 128 registers) on sm_90, and on sm_80 at D = 64.
pub const SEG_CTAS_PER_SM: usize = 2;
/// The SM count a plan made without a device assumes (the H100 SXM's); a backend's plan
/// takes its device's.
pub const DEFAULT_SM_COUNT: usize = 132;

/// The segment length of the inference forward by default at `shape` on `sm_count` SMs.
/// Each CTA of `cc_forward_seg` runs its segment's chunks in order after loading its S⁰
/// (about one chunk's time), so the kernel takes about (waves of its ⌈NC/BS⌉·B·H·M/64 CTAs)
/// × (BS + 1) chunk-times, and `cc_seg_sums` (one CTA per segment but the last) a third of
/// that per wave (its chunk is about a third of the forward's in the sm_90 model); the
/// length with the fewest, the longest among equals (fewer segments: less to scan). In the
/// sm_90 model it picked the fastest length tried at fla's five shapes and at (1, 4096, 1,
/// 64), (1, 1024, 1, 128), (2, 256, 4, 64), (1, 65536, 2, 64), and segments beat the
/// per-chunk forward at every one of them (e.g. 29 µs against 42 at (8, 1024, 8, 64), 61
/// against 1512 at (1, 65536, 2, 64): the per-chunk walk is one chain over every chunk).
pub fn auto_seg_chunks(shape: &Shape, sm_count: usize) -> usize {
    let chunks = shape.seq.div_ceil(CHUNK).max(1);
    let slices = tile_width(shape.dv).unwrap_or(TILE) / TILE;
    let per_segment = shape.bh().saturating_mul(slices).max(1);
    let slots = sm_count.max(1).saturating_mul(SEG_CTAS_PER_SM);
    let waves = |ctas: usize| ctas.div_ceil(slots);
    // Three times the chunk-times, in integers.
    let cost = |bs: usize| {
        let segments = chunks.div_ceil(bs);
        let forward = waves(segments.saturating_mul(per_segment));
        let sums = waves((segments - 1).saturating_mul(per_segment));
        (3 * forward + sums).saturating_mul(bs + 1)
    };
    SEG_LENGTHS
        .iter()
        .copied()
        .min_by_key(|&bs| (cost(bs), std::cmp::Reverse(bs)))
        .unwrap_or(1)
}

/// Threads of a `cc_forward_seg` block (`CC_SEG_THREADS`) and of a `cc_seg_scan` block.
pub const SEG_THREADS: u32 = 256;
pub const SCAN_THREADS: u32 = 256;

/// The environment variable [`seg_slices_override`] reads.
pub const SEG_SLICES_VAR: &str = "LINATTN_CC_SEG_SLICES";

/// `LINATTN_CC_SEG_SLICES=1`: every segmented CTA takes one value slice, as the kernels did
/// before D = M = 128 paired them on sm_90 (the programs are then compiled with
/// `CC_SEG_SLICES` 1: to time both on one GPU, and to hold the model to the 2026-11-27 H100
/// run, which measured the one-slice kernels). Unset, empty or `auto`: None, the program's
/// own rule ([`SegmentPlan::slices_per_cta`]). Another value is an error naming the variable.
pub fn seg_slices_override() -> Result<Option<u32>, AttnError> {
    match env_choice(SEG_SLICES_VAR)?.as_deref() {
        None => Ok(None),
        Some("1") => Ok(Some(1)),
        Some(other) => Err(AttnError::InvalidArgument(format!(
            "{SEG_SLICES_VAR}={other}: give auto or 1 (one value slice per CTA)"
        ))),
    }
}

/// What the environment variable `var` asks for beyond the default: None when it is unset,
/// empty or `auto`, else its trimmed value; an error naming it when it is not Unicode. The
/// one reader of the chunked form's switches (`LINATTN_CC_GRAD_SLICES`, `_SEGMENTS`,
/// `_SEG_SLICES`), which each name the values they take.
fn env_choice(var: &str) -> Result<Option<String>, AttnError> {
    match std::env::var(var) {
        Err(std::env::VarError::NotPresent) => Ok(None),
        Ok(v) => match v.trim() {
            "" | "auto" => Ok(None),
            other => Ok(Some(other.to_string())),
        },
        Err(e) => Err(AttnError::InvalidArgument(format!("{var}: {e}"))),
    }
}

/// How the inference forward is split: `auto` by [`auto_seg_chunks`], or forced
/// (`LINATTN_CC_SEGMENTS=off|BS`: to time both on a GPU, or to run short segments on the
/// simulator at a small shape).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Segments {
    #[default]
    Auto,
    /// The per-chunk states: `cc_forward_h` + `cc_forward`.
    Off,
    /// Segments of this many chunks (≥ 1), where the program allows them (D ≤ 128).
    Chunks(usize),
}

/// The environment variable [`Segments::from_env`] reads.
pub const SEGMENTS_VAR: &str = "LINATTN_CC_SEGMENTS";

impl Segments {
    /// `LINATTN_CC_SEGMENTS` (unset or empty: `auto`); another value is an error naming the
    /// variable and what it takes.
    pub fn from_env() -> Result<Self, AttnError> {
        let bad = |what: &str| {
            AttnError::InvalidArgument(format!(
                "{SEGMENTS_VAR}={what}: give auto, off or a segment length in chunks (1..=65536)"
            ))
        };
        match env_choice(SEGMENTS_VAR)?.as_deref() {
            None => Ok(Segments::Auto),
            Some("off") => Ok(Segments::Off),
            Some(other) => match other.parse::<usize>() {
                Ok(bs) if (1..=65536).contains(&bs) => Ok(Segments::Chunks(bs)),
                _ => Err(bad(other)),
            },
        }
    }

    /// The segment length (chunks) of the inference forward at `shape` on `sm_count` SMs, or
    /// `None` for the per-chunk forward: always `None` where D's tile width is 256
    /// (`cc_forward_seg` holds a 64 × D fp32 state slice in registers).
    pub fn seg_chunks(self, shape: &Shape, sm_count: usize) -> Option<usize> {
        if tile_width(shape.dk)? > 128 {
            return None;
        }
        match self {
            Segments::Off => None,
            Segments::Chunks(bs) => Some(bs),
            Segments::Auto => Some(auto_seg_chunks(shape, sm_count)),
        }
    }
}

/// The segmented inference forward at one shape: `cc_seg_sums` and `cc_seg_scan` (when there
/// are two or more segments), `cc_forward_seg`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentPlan {
    /// Chunks per segment (BS) and segments (⌈NC/BS⌉).
    pub seg_chunks: usize,
    pub num_segments: usize,
    /// fp32 elements of the segment-state buffer (B·H·segments·state stride; 0 with one
    /// segment, which starts from zero and reads none).
    pub state_len: usize,
    /// (segments − 1, B·H, M/64), `SEG_THREADS` per block: cc_seg_sums (the last segment's sum
    /// is never read); not launched with one segment.
    pub grid_sums: (u32, u32, u32),
    /// cc_seg_sums with one slice per CTA: the weighted k̃ᵀ, the v slice, z
    /// (`CC_SEG_SUMS_SMEM`); each further slice adds `smem_sums_slice`, its v slice and z
    /// (`CC_SEG_SUMS_SLICE_SMEM`). Launched by [`sums_launch`](Self::sums_launch).
    pub smem_sums: u32,
    pub smem_sums_slice: u32,
    /// (⌈(D·M + D)/256⌉, B·H, 1), `SCAN_THREADS` per block; not launched with one segment.
    pub grid_scan: (u32, u32, u32),
    /// (segments, B·H, M/64), `SEG_THREADS` per block: one value slice per CTA (the launch
    /// takes [`forward_launch`](Self::forward_launch)'s, which may pair them).
    pub grid_forward: (u32, u32, u32),
    /// cc_forward_seg with one slice per CTA: q̃, k̃, the weighted k̃ᵀ, the v slice, the
    /// packed Sᵀ slice, z (fp32, two parities) and z's packed records (`CC_SEG_SMEM`).
    pub smem_forward: u32,
    /// The part of `smem_forward` each further slice of a CTA adds: its v slice, packed Sᵀ
    /// slice, z and z's records (`CC_SEG_SLICE_SMEM`).
    pub smem_forward_slice: u32,
    /// Whether D's and M's tile widths are both 128, where kernels compiled for sm_90 and
    /// newer take both value slices in one CTA of the sums and of the forward
    /// ([`slices_per_cta`](Self::slices_per_cta)).
    pub pairs_slices: bool,
    /// The training forward's (`cc_seg_sums_train`, `cc_forward_seg_train`): each also the
    /// residue tile of the split k̃ᵀ, D × 64 16-bit (`CC_SEG_SUMS_TRAIN_SMEM`,
    /// `CC_SEG_TRAIN_SMEM`).
    pub smem_sums_train: u32,
    pub smem_forward_train: u32,
}

impl SegmentPlan {
    /// Whether a device of `compute_capability` whose per-block opt-in is `max_optin` bytes
    /// (dynamic + static) runs the training forward in segments; else the split walk and
    /// `cc_forward_train` run. sm_90 and newer: there the model puts the segmented training
    /// forward at 0.57–0.81× of the per-chunk one at fla's shapes (two CTAs of
    /// `cc_forward_seg_train` per SM), on sm_80 at 1.00× ((8, 1024, 8, 64)) and 1.21×
    /// ((2, 16384, 16, 128), where one CTA fits per SM). And where the opt-in holds it:
    /// 113,664 dynamic bytes at D = 128, beyond sm_86/89's 99 KB. The H100 (2026-11-27) did
    /// not bear the model out: forward+backward 1.01–1.035× the per-chunk one's at three of
    /// fla's shapes, equal at (8, 1024, 8, 64), 0.96× at (4, 4096, 64, 128); the recalibrated
    /// model says 0.93×. Kept until a second run settles the 1–3.5% (CHUNKED-DESIGN.md).
    /// `slices`: the value slices per CTA the program's segmented kernels take
    /// ([`slices_per_cta`](Self::slices_per_cta), or `LINATTN_CC_SEG_SLICES`'s), whose
    /// shared memory must fit.
    pub fn trains_on(&self, compute_capability: (u32, u32), max_optin: u64, slices: u32) -> bool {
        compute_capability.0 >= 9
            && u64::from(
                self.forward_shared(slices, true)
                    .max(self.sums_shared(slices, true)),
            ) + STATIC_SHARED_MAX
                <= max_optin
    }

    /// Value slices per `cc_seg_sums` and `cc_forward_seg` CTA in kernels compiled for `arch`
    /// (major, minor): `CC_SEG_SLICES`'s rule, 2 where D and M are 128 on sm_90 and newer (a
    /// CTA of 2 × 8 warps stages k̃ (and q̃) once for both slices), else 1.
    pub fn slices_per_cta(&self, arch: (u32, u32)) -> u32 {
        if self.pairs_slices && arch.0 >= 9 {
            2
        } else {
            1
        }
    }

    /// Dynamic shared bytes of the sums (`train`: the training form) with `slices` per CTA.
    pub fn sums_shared(&self, slices: u32, train: bool) -> u32 {
        let one = if train {
            self.smem_sums_train
        } else {
            self.smem_sums
        };
        sliced_bytes(one, self.smem_sums_slice, slices)
    }

    /// Dynamic shared bytes of the forward (`train`: the training form) with `slices` per CTA.
    pub fn forward_shared(&self, slices: u32, train: bool) -> u32 {
        let one = if train {
            self.smem_forward_train
        } else {
            self.smem_forward
        };
        sliced_bytes(one, self.smem_forward_slice, slices)
    }

    /// The sums' launch with `slices` per CTA: grid z over M/64 / slices, blocks of
    /// `SEG_THREADS` × slices (threadIdx.y the slice).
    pub fn sums_launch(&self, slices: u32, train: bool) -> Launch {
        sliced_launch(self.grid_sums, slices, self.sums_shared(slices, train))
    }

    /// The forward's launch with `slices` per CTA, as [`sums_launch`](Self::sums_launch).
    pub fn forward_launch(&self, slices: u32, train: bool) -> Launch {
        sliced_launch(
            self.grid_forward,
            slices,
            self.forward_shared(slices, train),
        )
    }
}

/// Shared bytes of a segmented CTA of `slices` value slices: `one` for a one-slice CTA, and
/// `per_slice` more for each further slice.
fn sliced_bytes(one: u32, per_slice: u32, slices: u32) -> u32 {
    one + (slices.max(1) - 1) * per_slice
}

/// A segmented launch of the one-slice `grid` with `slices` value slices per CTA: grid z over
/// M/64 / slices, blocks of `SEG_THREADS` × slices (threadIdx.y the slice).
fn sliced_launch(grid: (u32, u32, u32), slices: u32, shared_bytes: u32) -> Launch {
    let slices = slices.max(1);
    let (x, y, z) = grid;
    Launch {
        grid: (x, y, z.div_ceil(slices)),
        block: (SEG_THREADS, slices, 1),
        shared_bytes,
    }
}

/// The segmented forward's grids at `shape` with segments of `seg_chunks` chunks (tile
/// widths as [`grids`]).
pub(crate) fn seg_grids(shape: &Shape, seg_chunks: usize) -> [Grid; 3] {
    let tiles = |dim: usize| tile_width(dim).unwrap_or(TILE) / TILE;
    let tile = |dim: usize| tile_width(dim).unwrap_or(TILE);
    let segments = shape.seq.div_ceil(CHUNK).div_ceil(seg_chunks.max(1));
    let bh = || Axis::each("B·H", shape.bh());
    let value_tiles = || Axis::each("M/64", tiles(shape.dv));
    let state_words = (tile(shape.dk) * tile(shape.dv) + tile(shape.dk)) as u64;
    [
        Grid::of::<params::SegSums>(
            Axis::each("segments − 1", segments.saturating_sub(1)),
            bh(),
            value_tiles(),
        ),
        Grid::of::<params::SegScan>(
            Axis::covering("D·M + D", state_words, u64::from(SCAN_THREADS)),
            bh(),
            Axis::one(),
        ),
        Grid::of::<params::ForwardSeg>(Axis::each("segments", segments), bh(), value_tiles()),
    ]
}

/// Whether the program of tile widths (`tile_d`, `tile_m`) has the segmented training forward
/// (`cc_seg_sums_train`, `cc_forward_seg_train`; `CC_SEG_TRAINS`): D's tile width ≤ 128
/// (as every segmented kernel), but not D = 128 with M = 64, where it spilled at 2 CTAs per
/// SM on sm_90 and the per-chunk training forward runs.
pub fn trains_in_segments(tile_d: usize, tile_m: usize) -> bool {
    tile_d <= 128 && (tile_d, tile_m) != (128, 64)
}

/// The tile width (`CC_D` or `CC_M`) of the program that runs head dim `dim`, or why none does.
pub fn tile_width(dim: usize) -> Option<usize> {
    HEAD_DIMS.contains(&dim).then_some(dim.max(TILE))
}

pub(crate) fn check_head_dims(
    dk: usize,
    dv: usize,
    precision: Precision,
) -> Result<(), Unsupported> {
    if tile_width(dk).is_some() && tile_width(dv).is_some() {
        Ok(())
    } else {
        Err(Unsupported::Problem(format!(
            "chunked tensor-core path needs D, M in {{16, 32, 64, 128, 256}}; use \
             cuda/causal_recurrent/{precision} for D={dk}, M={dv}"
        )))
    }
}

/// The grid of every chunked launch, each axis named for the limit check (`limits`): the
/// state walks (D/64, B·H, M/64); the forward's chunk kernels (⌈N/64⌉ chunks, B·H, M/64);
/// the gradient kernels (⌈N/64⌉ chunks, B·H, 1 where each CTA loops over its output's
/// 64-wide slices, else D/64 for dQ, dK and M/64 for dV: [`grad_slices_looped`]) and the
/// G·O pre-pass (⌈N/32⌉ token groups, B·H, M/64), with
/// D and M their tile widths (16 and 32 take one tile). [`LaunchPlan`] takes its grids from
/// here, so the check and the launch cannot part. Head dims outside [`HEAD_DIMS`] count as
/// one tile (the head-dim check refuses them first).
pub(crate) fn grids(shape: &Shape, slices: GradSlices) -> [Grid; 8] {
    let tiles = |dim: usize| tile_width(dim).unwrap_or(TILE) / TILE;
    let chunks = || Axis::covering("N", shape.seq as u64, CHUNK as u64);
    let bh = || Axis::each("B·H", shape.bh());
    let value_tiles = || Axis::each("M/64", tiles(shape.dv));
    let key_tiles = || Axis::each("D/64", tiles(shape.dk));
    let looped = slices.looped(shape);
    let grad_slices = |split: Axis| if looped { Axis::one() } else { split };
    [
        Grid::of::<params::ForwardH>(key_tiles(), bh(), value_tiles()),
        Grid::of::<params::BackwardH>(key_tiles(), bh(), value_tiles()),
        Grid::of::<params::Forward>(chunks(), bh(), value_tiles()),
        Grid::of::<params::ForwardTrain>(chunks(), bh(), value_tiles()),
        Grid::of::<params::BackwardGo>(
            Axis::covering("N", shape.seq as u64, GO_TOKENS as u64),
            bh(),
            value_tiles(),
        ),
        Grid::of::<params::BackwardDv>(chunks(), bh(), grad_slices(value_tiles())),
        Grid::of::<params::BackwardDq>(chunks(), bh(), grad_slices(key_tiles())),
        Grid::of::<params::BackwardDk>(chunks(), bh(), grad_slices(key_tiles())),
    ]
}

/// Grid, block and shared-memory sizes of every launch for one shape, and the workspace.
/// Mirrors the `CC_*_SMEM` formulas of the kernel source, which are in the program's tile
/// widths (`tile_d`, `tile_m`), not the head dims.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchPlan {
    pub num_chunks: usize,
    /// B·H.
    pub heads: usize,
    /// The program's `CC_D` and `CC_M` (the head dims rounded up to 64).
    pub tile_d: usize,
    pub tile_m: usize,
    /// 32-bit words per chunk state, in the tile widths: the matrix (fp32, or 16-bit hi + lo
    /// pairs in the packed form), the vector, then the packed form's exponents (one per 64×64
    /// tile, rounded up to 8 words: each chunk's base stays on a 32-byte sector).
    pub state_stride: usize,
    /// fp32 elements of one state buffer (all heads, all chunks).
    pub state_len: usize,
    /// (NC, B·H, M/64): cc_forward, cc_forward_train.
    pub grid_value_tiles: (u32, u32, u32),
    /// (⌈N/32⌉, B·H, M/64): cc_backward_go, `GO_THREADS` per block.
    pub grid_go: (u32, u32, u32),
    /// (NC, B·H, 1) where the gradient kernels loop over their output's 64-wide slices
    /// ([`grad_slices_looped`]), else (NC, B·H, D/64): cc_backward_dq, cc_backward_dk.
    pub grid_grad_keys: (u32, u32, u32),
    /// (NC, B·H, 1) looped, else (NC, B·H, M/64): cc_backward_dv.
    pub grid_grad_values: (u32, u32, u32),
    /// (D/64, B·H, M/64): the state walks cc_forward_h, cc_backward_h.
    pub grid_walk: (u32, u32, u32),
    /// cc_forward_h, cc_backward_h: three 64-row transposed 16-bit tiles.
    pub smem_walk: u32,
    /// The segmented inference forward, where it runs ([`Segments::seg_chunks`]).
    pub segments: Option<SegmentPlan>,
    /// cc_forward: q̃, k̃, the v slice, z⁰ and (D = 64) one packed 64×64 state tile.
    pub smem_forward: u32,
    /// cc_forward_train: q̃, a region for the fp32 state slice or k̃ and the v slice, z⁰.
    pub smem_train: u32,
    pub smem_dq: u32,
    pub smem_dk: u32,
    pub smem_dv: u32,
}

impl LaunchPlan {
    /// The plan at `shape` on [`DEFAULT_SM_COUNT`] SMs: the gradients' slices as
    /// `LINATTN_CC_GRAD_SLICES` says ([`GradSlices::from_env`]; by default by
    /// [`GRAD_LOOP_MIN_CTAS`]), the inference forward's segments as `LINATTN_CC_SEGMENTS` says
    /// ([`Segments::from_env`]; by default by [`auto_seg_chunks`]).
    pub fn new(shape: &Shape) -> Result<Self, AttnError> {
        Self::with_segments(shape, Segments::Auto, DEFAULT_SM_COUNT)
    }

    /// [`new`](Self::new) with the segments a backend was built with, on a device of
    /// `sm_count` SMs: `Auto` defers to `LINATTN_CC_SEGMENTS` (and its default rule), `Off`
    /// or a length is taken as given.
    pub fn with_segments(
        shape: &Shape,
        segments: Segments,
        sm_count: usize,
    ) -> Result<Self, AttnError> {
        let segments = match segments {
            Segments::Auto => Segments::from_env()?,
            fixed => fixed,
        };
        Self::with_sms(shape, GradSlices::from_env()?, segments, sm_count)
    }

    /// The plan at `shape` with the gradients' slices spread as `slices` says (segments
    /// `auto`).
    pub fn with_grad_slices(shape: &Shape, slices: GradSlices) -> Result<Self, AttnError> {
        Self::with(shape, slices, Segments::Auto)
    }

    /// The plan at `shape`, the gradients' slices and the inference forward's segments given
    /// ([`DEFAULT_SM_COUNT`] SMs for `Segments::Auto`).
    pub fn with(shape: &Shape, slices: GradSlices, segs: Segments) -> Result<Self, AttnError> {
        Self::with_sms(shape, slices, segs, DEFAULT_SM_COUNT)
    }

    /// [`with`](Self::with) on a device of `sm_count` SMs.
    pub fn with_sms(
        shape: &Shape,
        slices: GradSlices,
        segs: Segments,
        sm_count: usize,
    ) -> Result<Self, AttnError> {
        shape.validate()?;
        let (d, m) = match (tile_width(shape.dk), tile_width(shape.dv)) {
            (Some(d), Some(m)) => (d, m),
            _ => {
                return Err(AttnError::Unsupported(Unsupported::Problem(format!(
                "chunked tensor-core path needs D, M in {{16, 32, 64, 128, 256}}, got D={}, M={}",
                shape.dk, shape.dv
            ))))
            }
        };
        let heads = shape.bh();
        let [walk, _, value_tiles, _, go, grad_values, grad_keys, _] = grids(shape, slices);
        let num_chunks = shape.seq.div_ceil(CHUNK);
        // Kernels take N and the chunk count as int and index in 64 bits.
        as_i32("sequence length N", shape.seq)?;
        let exp_words = ((d / TILE) * (m / TILE)).div_ceil(8) * 8;
        let state_stride = d * m + d + exp_words;
        let state_len = heads
            .checked_mul(num_chunks)
            .and_then(|x| x.checked_mul(state_stride))
            .ok_or_else(|| AttnError::SizeOverflow(format!("chunk states of {shape}")))?;
        let u = |x: usize, what: &str| {
            u32::try_from(x).map_err(|_| AttnError::SizeOverflow(format!("{what} = {x}")))
        };
        const PAD: usize = 8;
        let (ld_t, ld_d, ld_m) = (CHUNK + PAD, d + PAD, m + PAD);
        // Bytes of a 16-bit element.
        let half = 2;
        // CC_STATE_REGION: the fp32 state slice, or a 16-bit tile (score columns; k̃) and
        // `t_tiles` transposed tiles, whichever is larger.
        let state_region = |ld: usize, t_tiles: usize| {
            (TILE * ld * 4).max(CHUNK * ld * half + t_tiles * TILE * ld_t * half)
        };
        // dQ and dK share one layout (CC_QK_SMEM).
        let smem_qk = u(
            CHUNK * ld_m * half + state_region(ld_m, 2) + TILE * 4 + SCORES_PARK,
            "shared bytes",
        )?;
        let segments = match segs.seg_chunks(shape, sm_count) {
            None => None,
            Some(seg_chunks) => {
                let num_segments = num_chunks.div_ceil(seg_chunks);
                let [sums, scan, forward] = seg_grids(shape, seg_chunks);
                as_i32("chunks per segment", seg_chunks)?;
                let sums_slice_bytes = TILE * ld_t * half + 2 * d * 4;
                let sums_bytes = d * ld_t * half + sums_slice_bytes;
                // CC_SEG_SLICE_SMEM: the v slice, the packed Sᵀ slice, z, z's records.
                let slice_bytes =
                    TILE * ld_t * half + TILE * d * 4 + 2 * d * 4 + d / TILE * 2 * 16 * 16;
                let forward_bytes = 2 * CHUNK * ld_d * half + d * ld_t * half + slice_bytes;
                // The split k̃ᵀ's residue, unpadded (cc_seg_lo_word).
                let lo_tile = d * CHUNK * half;
                // One segment launches neither the sums nor the scan: no grid for them.
                let (grid_sums, grid_scan) = if num_segments > 1 {
                    (sums.dims()?, scan.dims()?)
                } else {
                    ((0, 0, 0), (0, 0, 0))
                };
                Some(SegmentPlan {
                    seg_chunks,
                    num_segments,
                    state_len: heads
                        .checked_mul(if num_segments > 1 { num_segments } else { 0 })
                        .and_then(|x| x.checked_mul(state_stride))
                        .ok_or_else(|| {
                            AttnError::SizeOverflow(format!("segment states of {shape}"))
                        })?,
                    grid_sums,
                    smem_sums: u(sums_bytes, "shared bytes")?,
                    smem_sums_slice: u(sums_slice_bytes, "shared bytes")?,
                    grid_scan,
                    grid_forward: forward.dims()?,
                    smem_forward: u(forward_bytes, "shared bytes")?,
                    smem_forward_slice: u(slice_bytes, "shared bytes")?,
                    pairs_slices: d == 128 && m == 128,
                    smem_sums_train: u(sums_bytes + lo_tile, "shared bytes")?,
                    smem_forward_train: u(forward_bytes + lo_tile, "shared bytes")?,
                })
            }
        };
        Ok(LaunchPlan {
            segments,
            num_chunks,
            heads,
            tile_d: d,
            tile_m: m,
            state_stride,
            state_len,
            grid_value_tiles: value_tiles.dims()?,
            grid_go: go.dims()?,
            grid_grad_keys: grad_keys.dims()?,
            grid_grad_values: grad_values.dims()?,
            grid_walk: walk.dims()?,
            smem_walk: u(3 * TILE * ld_t * half, "shared bytes")?,
            smem_forward: u(
                2 * CHUNK * ld_d * half
                    + TILE * ld_t * half
                    + d * 4
                    + if d == 64 { TILE * TILE * 4 } else { 0 },
                "shared bytes",
            )?,
            // cc_forward_train: q̃, one region for the fp32 state slice or (after the inter
            // product) k̃ and the v slice (CC_STATE_REGION), z⁰.
            smem_train: u(
                CHUNK * ld_d * half + state_region(ld_d, 1) + d * 4,
                "shared bytes",
            )?,
            // The gradient kernels: the rows tile, then one region holding the score columns,
            // then per output slice the fp32 state slice and, after the inter product, the
            // transposed tile(s) (CC_STATE_REGION); dQ, dK also the state's vector slice and
            // their parked split scores (CC_SCORES_PARK). dQ and dK have two transposed tiles
            // (k̃, q̃ and their lo residues).
            smem_dk: smem_qk,
            smem_dq: smem_qk,
            smem_dv: u(CHUNK * ld_d * half + state_region(ld_d, 1), "shared bytes")?,
        })
    }

    /// Bytes of one chunk-state buffer.
    pub fn state_bytes(&self) -> u64 {
        self.state_len as u64 * 4
    }

    /// The largest dynamic shared memory of any launch of the forward and the backward.
    pub fn max_shared(&self) -> u32 {
        [
            self.smem_walk,
            self.segments.map_or(0, |s| s.smem_forward),
            self.smem_forward,
            self.smem_train,
            self.smem_dq,
            self.smem_dk,
            self.smem_dv,
        ]
        .into_iter()
        .max()
        .unwrap_or(0)
    }

    /// Refuses a device whose per-block shared memory opt-in (`max_optin` bytes, dynamic +
    /// static) cannot hold the largest launch plus `STATIC_SHARED_MAX` of static shared
    /// memory: a clear refusal at `supports`, not a launch failure (D, M = 256 needs ~118 KB
    /// plus the static part, beyond sm_86/89's 99 KB).
    pub fn check_shared(&self, device: &str, max_optin: u64) -> Result<(), Unsupported> {
        let need = u64::from(self.max_shared()) + STATIC_SHARED_MAX;
        if need > max_optin {
            return Err(Unsupported::Problem(format!(
                "the chunked kernels at D={}, M={} (tile widths) need {need} bytes of shared \
                 memory per block; {device} allows {max_optin}",
                self.tile_d, self.tile_m
            )));
        }
        Ok(())
    }
}

/// Bytes of the split scores dQ and dK park in shared memory between output slices
/// (`CC_SCORES_PARK`: a 64×64 tile as 16-bit hi and lo).
const SCORES_PARK: usize = CHUNK * CHUNK * 2 * 2;

/// Static shared memory of any chunked kernel, at most (ptxas: 2,560 B in cc_backward_h, its
/// weights, scales, −G·O per chunk parity and Δr's partial sums; the kernel header's limits).
pub const STATIC_SHARED_MAX: u64 = 2560;

/// Scalar kernel arguments shared by the launches.
#[derive(Debug, Clone, Copy)]
pub(super) struct ScalarArgs {
    pub(super) n: i32,
    pub(super) num_chunks: i32,
    /// log2 λ (0 when there is no decay, so the kernels' weights are exactly 1).
    pub(super) log2_decay: f32,
    /// λ^L, the decay across one whole chunk (the walks' factor).
    pub(super) chunk_decay: f32,
    pub(super) eps: f32,
    pub(super) map: i32,
    /// The real head dims D and M: the row widths of q, k (dq, dk) and of v, O, G (dv).
    pub(super) d: i32,
    pub(super) m: i32,
}

impl ScalarArgs {
    pub(super) fn new(problem: &Problem, plan: &LaunchPlan, map: i32) -> Result<Self, AttnError> {
        Ok(ScalarArgs {
            n: as_i32("sequence length N", problem.shape.seq)?,
            num_chunks: as_i32("chunk count", plan.num_chunks)?,
            log2_decay: if problem.has_decay() {
                problem.decay.log2() as f32
            } else {
                0.0
            },
            chunk_decay: problem.decay.powi(CHUNK as i32) as f32,
            eps: problem.eps as f32,
            map,
            d: as_i32("head dim D", problem.shape.dk)?,
            m: as_i32("head dim M", problem.shape.dv)?,
        })
    }
}
