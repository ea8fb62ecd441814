//! Sizes and launch shapes of the recurrent kernels: their limits, how φ reaches them
//! ([`MapClass`]), the four scans and their grids ([`ScanRole`]), and the sizes every launch
//! takes ([`CoreDims`]).

use linattn_core::{AttnError, FeatureMap, Problem, Unsupported};

use super::kernel_args::params;
use crate::executor::Launch;
use crate::limits::{Axis, Grid};
use crate::runtime::{as_i32, blocks_for, head_dim_class};

/// Columns of the sliced dim each scan block owns (= lanes of a warp).
pub const COLUMNS_PER_BLOCK: usize = 32;
/// Threads of a scan block that hold the state (8 warps).
pub const MAIN_THREADS: u32 = 256;
/// The extra warp of a normalised forward that carries z and computes den.
pub const Z_WARP_THREADS: u32 = 32;
/// Largest feature dim C the scans hold (the largest head-dim class).
pub const MAX_FEATURE_DIM: usize = 256;
/// Blocks of the grid-stride per-token kernels (enough to fill any current GPU).
const MAX_GRID_STRIDE_BLOCKS: usize = 1 << 16;

/// How φ reaches the core kernels: fused in them, or applied before by a φ stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MapClass {
    /// φ(x) = x, no normaliser.
    Identity,
    EluPlusOne,
    Relu,
    /// Q, K arrive as fp32 φ(Q), φ(K); the core runs identity with a normaliser and writes
    /// fp32 ∂φ(Q), ∂φ(K) for the φ stage's backward.
    Staged,
}

impl MapClass {
    pub const ALL: [MapClass; 4] = [
        MapClass::Identity,
        MapClass::EluPlusOne,
        MapClass::Relu,
        MapClass::Staged,
    ];

    pub fn of(map: &FeatureMap) -> MapClass {
        match map {
            FeatureMap::Identity => MapClass::Identity,
            FeatureMap::EluPlusOne => MapClass::EluPlusOne,
            FeatureMap::Relu => MapClass::Relu,
            _ => MapClass::Staged,
        }
    }

    /// `LA_MAP` code: the fused map (identity after a φ stage).
    pub fn la_map(self) -> u32 {
        match self {
            MapClass::Identity | MapClass::Staged => 0,
            MapClass::EluPlusOne => 1,
            MapClass::Relu => 2,
        }
    }

    pub fn normalised(self) -> bool {
        self != MapClass::Identity
    }

    /// Whether Q and K (and ∂Q, ∂K) are fp32 φ buffers rather than storage elements.
    pub fn qk_f32(self) -> bool {
        self == MapClass::Staged
    }
}

/// The four scans of `cr_scan` (see the kernel header's table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScanRole {
    /// Rows C, columns M: O and den.
    Forward,
    /// Rows C, columns M, reverse: ∂V.
    Dv,
    /// Rows M, columns C: ∂Q.
    Dq,
    /// Rows M, columns C, reverse: ∂K.
    Dk,
}

impl ScanRole {
    fn rows_are_features(self) -> bool {
        matches!(self, ScanRole::Forward | ScanRole::Dv)
    }

    /// (rows held per block, columns split across blocks) for feature dim C and value dim M.
    pub fn dims(self, c_dim: usize, m_dim: usize) -> (usize, usize) {
        if self.rows_are_features() {
            (c_dim, m_dim)
        } else {
            (m_dim, c_dim)
        }
    }

    /// `CR_A_MAX` class of the module this scan runs from.
    pub fn class(self, c_dim: usize, m_dim: usize) -> Result<usize, Unsupported> {
        let (rows, _) = self.dims(c_dim, m_dim);
        let what = if self.rows_are_features() {
            "feature dim C"
        } else {
            "value dim M"
        };
        head_dim_class(what, rows)
    }
}

/// Grid of a scan: (⌈columns/32⌉, B·H). The forward's grid is also that of
/// `cr_forward_stored` and `cr_backward_go`.
pub fn scan_grid(role: ScanRole, c_dim: usize, m_dim: usize, batch_heads: usize) -> Grid {
    let (_, columns) = role.dims(c_dim, m_dim);
    let what = if role.rows_are_features() { "M" } else { "C" };
    let x = Axis::covering(what, columns as u64, COLUMNS_PER_BLOCK as u64);
    let y = Axis::each("B·H", batch_heads);
    match role {
        ScanRole::Forward => Grid::of::<params::Forward>(x, y, Axis::one()),
        ScanRole::Dv => Grid::of::<params::BackwardDv>(x, y, Axis::one()),
        ScanRole::Dq => Grid::of::<params::BackwardDq>(x, y, Axis::one()),
        ScanRole::Dk => Grid::of::<params::BackwardDk>(x, y, Axis::one()),
    }
}

/// Launch shape of a scan: [`scan_grid`], 256 threads, plus the z warp for a normalised
/// forward.
pub fn scan_launch(
    role: ScanRole,
    c_dim: usize,
    m_dim: usize,
    batch_heads: usize,
    normalised: bool,
) -> Result<Launch, AttnError> {
    let grid = scan_grid(role, c_dim, m_dim, batch_heads).dims()?;
    let threads = if role == ScanRole::Forward && normalised {
        MAIN_THREADS + Z_WARP_THREADS
    } else {
        MAIN_THREADS
    };
    Ok(Launch::new(grid, threads))
}

/// `cr_backward_dq_from_states`: a block per token, (N, B·H).
pub fn states_grid(n: usize, batch_heads: usize) -> Grid {
    Grid::of::<params::BackwardDqFromStates>(
        Axis::each("N", n),
        Axis::each("B·H", batch_heads),
        Axis::one(),
    )
}

/// The grid of every launch of the recurrent kernels for `dims` (`cr_backward_prep` is
/// grid-stride); `stored_states` adds `cr_backward_dq_from_states`.
pub fn launch_grids(dims: &CoreDims, stored_states: bool) -> Vec<Grid> {
    let roles = [ScanRole::Forward, ScanRole::Dv, ScanRole::Dq, ScanRole::Dk];
    let mut grids: Vec<Grid> = roles
        .into_iter()
        .map(|role| scan_grid(role, dims.c, dims.m, dims.batch_heads))
        .collect();
    if stored_states {
        grids.push(states_grid(dims.n, dims.batch_heads));
    }
    grids
}

/// `cr_backward_prep`: a warp per 32 tokens (lane = token), 8 warps per block, grid-stride.
pub fn per_token_launch(tokens: usize) -> Result<Launch, AttnError> {
    let blocks = blocks_for(tokens, 8 * 32)?.min(MAX_GRID_STRIDE_BLOCKS as u32);
    Ok(Launch::new((blocks, 1, 1), 256))
}

/// Sizes and scalars every launch takes, as the kernels want them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CoreDims {
    pub batch_heads: usize,
    pub n: usize,
    pub c: usize,
    pub m: usize,
    pub map: MapClass,
    pub decay: f32,
    pub eps: f32,
}

impl CoreDims {
    pub fn of(problem: &Problem) -> CoreDims {
        CoreDims {
            batch_heads: problem.shape.bh(),
            n: problem.shape.seq,
            c: problem.feature_dim(),
            m: problem.shape.dv,
            map: MapClass::of(&problem.map),
            decay: problem.decay as f32,
            eps: problem.eps as f32,
        }
    }

    pub fn tokens(&self) -> Result<usize, AttnError> {
        self.batch_heads
            .checked_mul(self.n)
            .ok_or_else(|| AttnError::SizeOverflow("B·H·N".into()))
    }

    /// Elements of a [B·H, N, width] tensor.
    pub fn len(&self, width: usize) -> Result<usize, AttnError> {
        self.tokens()?
            .checked_mul(width)
            .ok_or_else(|| AttnError::SizeOverflow(format!("B·H·N·{width}")))
    }

    pub(crate) fn ints(&self) -> Result<(i32, i32, i32), AttnError> {
        Ok((
            as_i32("N", self.n)?,
            as_i32("C", self.c)?,
            as_i32("M", self.m)?,
        ))
    }
}
