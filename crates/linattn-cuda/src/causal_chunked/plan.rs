//! The launch geometry of `causal_chunked.cu` for one shape: which program (tile widths) a
//! head dim runs on, every grid, the shared memory of every kernel and the chunk-state
//! workspace. Host-testable without a GPU (`tests/causal_chunked_host.rs`).

use linattn_core::{AttnError, Precision, Shape, Unsupported};

use super::entries::params;
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
/// state walks (D/64, B·H, M/64); the chunk kernels (⌈N/64⌉ chunks, B·H, M/64 or D/64) and
/// the G·O pre-pass (⌈N/32⌉ token groups, B·H, M/64), with
/// D and M their tile widths (16 and 32 take one tile). [`LaunchPlan`] takes its grids from
/// here, so the check and the launch cannot part. Head dims outside [`HEAD_DIMS`] count as
/// one tile (the head-dim check refuses them first).
pub(crate) fn grids(shape: &Shape) -> [Grid; 8] {
    let tiles = |dim: usize| tile_width(dim).unwrap_or(TILE) / TILE;
    let chunks = || Axis::covering("N", shape.seq as u64, CHUNK as u64);
    let bh = || Axis::each("B·H", shape.bh());
    let value_tiles = || Axis::each("M/64", tiles(shape.dv));
    let key_tiles = || Axis::each("D/64", tiles(shape.dk));
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
        Grid::of::<params::BackwardDv>(chunks(), bh(), value_tiles()),
        Grid::of::<params::BackwardDq>(chunks(), bh(), key_tiles()),
        Grid::of::<params::BackwardDk>(chunks(), bh(), key_tiles()),
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
    /// (NC, B·H, M/64): cc_forward, cc_forward_train, cc_backward_dv.
    pub grid_value_tiles: (u32, u32, u32),
    /// (⌈N/32⌉, B·H, M/64): cc_backward_go, `GO_THREADS` per block.
    pub grid_go: (u32, u32, u32),
    /// (NC, B·H, D/64): cc_backward_dq, cc_backward_dk.
    pub grid_key_tiles: (u32, u32, u32),
    /// (D/64, B·H, M/64): the state walks cc_forward_h, cc_backward_h.
    pub grid_walk: (u32, u32, u32),
    /// cc_forward_h, cc_backward_h: three 64-row transposed 16-bit tiles.
    pub smem_walk: u32,
    /// cc_forward: q̃, k̃, the v slice, z⁰ and (D = 64) one packed 64×64 state tile.
    pub smem_forward: u32,
    /// cc_forward_train: q̃, a region for the fp32 state slice or k̃ and the v slice, z⁰.
    pub smem_train: u32,
    pub smem_dq: u32,
    pub smem_dk: u32,
    pub smem_dv: u32,
}

impl LaunchPlan {
    pub fn new(shape: &Shape) -> Result<Self, AttnError> {
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
        let [walk, _, value_tiles, _, go, _, key_tiles, _] = grids(shape);
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
        Ok(LaunchPlan {
            num_chunks,
            heads,
            tile_d: d,
            tile_m: m,
            state_stride,
            state_len,
            grid_value_tiles: value_tiles.dims()?,
            grid_go: go.dims()?,
            grid_key_tiles: key_tiles.dims()?,
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
            // The gradient kernels: the rows tile, then one region holding the fp32 state
            // slice and, after the inter product, the score columns and the transposed tile(s)
            // (CC_STATE_REGION); dQ, dK also the state's vector slice. cc_backward_dq has two
            // transposed tiles (k̃ and its lo residue).
            smem_dk: u(
                CHUNK * ld_m * half + state_region(ld_m, 1) + TILE * 4,
                "shared bytes",
            )?,
            smem_dq: u(
                CHUNK * ld_m * half + state_region(ld_m, 2) + TILE * 4,
                "shared bytes",
            )?,
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
    /// memory: a clear refusal at `supports`, not a launch failure (D, M = 256 needs ~143 KB,
    /// beyond sm_86/89's 99 KB).
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

/// Static shared memory of any chunked kernel, at most (ptxas: 2,304 B in cc_backward_h, its
/// weights, scales and Δr's partial sums; the kernel header's limits).
pub const STATIC_SHARED_MAX: u64 = 2304;
