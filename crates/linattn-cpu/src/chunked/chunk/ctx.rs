//! What the chunk steps of one call share: the call's context ([`Ctx`]), one head's
//! inputs ([`Head`]), a chunk's tokens ([`Span`]) and the building blocks' buffers
//! ([`Temps`]).

use crate::fast::Config;
use crate::maps::Featurised;

/// What every chunk of one call shares.
pub(crate) struct Ctx {
    pub cfg: Config,
    /// Chunk length L.
    pub l: usize,
    /// A state's row length: M+1 when normalised (z in the last column), else M.
    pub mp: usize,
    /// λ^0 ..= λ^L.
    pub pow: Vec<f32>,
}

impl Ctx {
    pub fn new(cfg: Config, l: usize) -> Self {
        let pow = (0..=l)
            .map(|e| (cfg.decay as f64).powi(e as i32) as f32)
            .collect();
        Ctx {
            l,
            mp: cfg.m + usize::from(cfg.normalised),
            pow,
            cfg,
        }
    }
}

/// One head's inputs, and φ of them when the map is staged.
#[derive(Clone, Copy)]
pub(crate) struct Head<'a> {
    pub q: &'a [f32],
    pub k: &'a [f32],
    pub v: &'a [f32],
    pub staged: Option<&'a Featurised<f32>>,
}

impl<'a> Head<'a> {
    /// φ(Q) of the whole head, when the map is staged.
    pub(super) fn staged_q(&self) -> Option<&'a [f32]> {
        self.staged.map(|f| &f.q[..])
    }

    /// φ(K) of the whole head, when the map is staged.
    pub(super) fn staged_k(&self) -> Option<&'a [f32]> {
        self.staged.map(|f| &f.k[..])
    }

    pub(super) fn eps(&self, cfg: &Config, i: usize) -> f32 {
        match self.staged {
            Some(f) => f.row_eps(cfg.eps, i),
            None => cfg.eps as f32,
        }
    }
}

/// Buffers of [`scaled`](super::blocks::scaled) and [`absorb`](super::blocks::absorb).
pub(crate) struct Temps {
    /// Row-scaled copies (L × max(C, M)).
    pub scaled: Vec<f32>,
    /// A C-vector of column sums.
    pub(super) colsum: Vec<f32>,
}

/// A chunk: tokens `t0 .. t0+len` of a head.
#[derive(Clone, Copy)]
pub(crate) struct Span {
    pub t0: usize,
    pub len: usize,
}
