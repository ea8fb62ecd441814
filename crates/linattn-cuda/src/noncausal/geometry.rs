//! Sizes and launch grids of the non-causal kernels: one description per launch, which the
//! launch takes its dims from and `check_problem` checks against the grid limits.

use linattn_core::Problem;

use super::kernel_args::{params, ROW_TERMS_ROWS_PER_BLOCK, TILE};
use crate::limits::{product, Axis, Grid, GRID_YZ_MAX};

/// Fewest rows a split of N gets: below this the partials cost more than they parallelise.
const MIN_ROWS_PER_SPLIT: usize = 256;

/// Sizes of a run, as the kernels take them.
pub(super) struct Dims {
    pub(super) heads: usize,
    pub(super) n: usize,
    pub(super) d: usize,
    pub(super) m: usize,
    pub(super) c: usize,
    pub(super) eps: f32,
    pub(super) log2_decay: f32,
    pub(super) normalised: bool,
}

impl Dims {
    pub(super) fn of(problem: &Problem) -> Dims {
        let shape = &problem.shape;
        Dims {
            heads: shape.bh(),
            n: shape.seq,
            d: shape.dk,
            m: shape.dv,
            c: problem.feature_dim(),
            eps: problem.eps as f32,
            log2_decay: if problem.has_decay() {
                problem.decay.log2() as f32
            } else {
                0.0
            },
            normalised: problem.map.normalised(),
        }
    }

    pub(super) fn rows(&self) -> usize {
        self.heads * self.n
    }

    pub(super) fn state_len(&self) -> usize {
        self.c * self.m + self.c
    }

    /// Output tiles of a C×M state, `nc_accumulate`'s grid x.
    pub(super) fn state_tiles(&self) -> usize {
        self.c.div_ceil(TILE) * self.m.div_ceil(TILE)
    }

    fn heads_axis(&self) -> Axis {
        Axis::each("B·H", self.heads)
    }
}

/// Most splits of N an `nc_accumulate` grid gets (its grid y).
pub(super) fn max_splits(n: usize) -> usize {
    n.div_ceil(MIN_ROWS_PER_SPLIT)
        .clamp(1, GRID_YZ_MAX as usize)
}

/// `nc_accumulate`: (C-tiles × M-tiles, splits of N, B·H).
pub(super) fn accumulate_grid(dims: &Dims, splits: usize) -> Grid {
    Grid::of::<params::Accumulate>(
        Axis::each("⌈C/64⌉·⌈M/64⌉ state tiles", dims.state_tiles()),
        Axis::each("splits of N", splits),
        dims.heads_axis(),
    )
}

/// `nc_backward_row_terms`: a warp per row of [B·H·N], 1-D.
pub(super) fn row_terms_grid(dims: &Dims) -> Grid {
    let rows = product(&[dims.heads, dims.n]);
    let x = Axis::covering("B·H·N", rows, ROW_TERMS_ROWS_PER_BLOCK as u64);
    Grid::of::<params::BackwardRowTerms>(x, Axis::one(), Axis::one())
}

/// `nc_rowgemm` writing `width` (`what`: M or C) columns: (N-tiles, column tiles, B·H).
pub(super) fn rowgemm_grid(dims: &Dims, what: &str, width: usize) -> Grid {
    Grid::of::<params::Rowgemm>(
        Axis::covering("N", dims.n as u64, TILE as u64),
        Axis::covering(what, width as u64, TILE as u64),
        dims.heads_axis(),
    )
}

/// The grid of every launch a forward and backward of `dims` can make (splits at their
/// most); `nc_reduce` is grid-stride.
pub(super) fn launch_grids(dims: &Dims) -> Vec<Grid> {
    let mut grids = vec![
        accumulate_grid(dims, max_splits(dims.n)),
        rowgemm_grid(dims, "M", dims.m),
        rowgemm_grid(dims, "C", dims.c),
    ];
    if dims.normalised {
        grids.push(row_terms_grid(dims));
    }
    grids
}
