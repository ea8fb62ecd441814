//! Streamed Monte-Carlo estimate of `S(a) = E|a| / √(E a²)` over one row per repeat.
//!
//! Keys are drawn in blocks of [`BLOCK`] rows, weighted and folded into four running power
//! sums of |a|, so a row of n = 2^20 keys needs O(BLOCK·D) memory and never an n×n matrix.
//! Softmax weights are kept as `e^{s_j − m}` with a running max m: the power sums are
//! rescaled when m grows, so no exponent overflows. Repeats run in parallel (rayon), each
//! with its own seeded stream.

use super::row::{RowParams, Weights};
use crate::maps::{Operand, PreparedMap};
use linattn_core::{AttnError, FeatureMap, SeededRng};
use rayon::prelude::*;

/// Keys drawn and weighted at a time.
pub const BLOCK: usize = 1024;

/// The mean of the per-repeat estimates of S, its standard error over repeats, and the
/// delta-method estimate of the finite-n bias `E[Ŝ_n] − S` (O(1/n)).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Estimate {
    pub mean: f64,
    pub se: f64,
    pub bias: f64,
    pub repeats: usize,
}

/// Estimates S over `repeats` independent rows of `row.n` keys. Decay rows are
/// deterministic: one pass, se = bias = 0. The bias estimate uses sample moments up to the
/// 4th and is asymptotic: for softmax rows (lognormal weights) it holds only for
/// n ≫ e^{4γ²}; below that the finite-n S sits well above exp(−γ²/2).
pub fn estimate(
    weights: Weights,
    row: &RowParams,
    repeats: usize,
    seed: u64,
) -> Result<Estimate, AttnError> {
    row.validate()?;
    weights.validate()?;
    if let Weights::Decay { lambda } = weights {
        let mut sums = PowerSums::new(0.0);
        // a_j = λ^{n−j}: from the newest key (weight 1) backwards.
        let mut a = 1.0;
        for _ in 0..row.n {
            sums.push(a);
            a *= lambda;
        }
        // No sampling, so no sampling bias.
        let (s, _) = sums.ratio(row.n)?;
        return Ok(Estimate {
            mean: s,
            se: 0.0,
            bias: 0.0,
            repeats: 1,
        });
    }
    if repeats < 2 {
        return Err(AttnError::InvalidArgument(format!(
            "repeats = {repeats}: a standard error needs at least 2"
        )));
    }
    let per_repeat: Vec<(f64, f64)> = (0..repeats)
        .into_par_iter()
        .map(|r| one_row(weights, row, seed_for(seed, r)))
        .collect::<Result<_, _>>()?;
    let count = repeats as f64;
    let mean = per_repeat.iter().map(|p| p.0).sum::<f64>() / count;
    let var = per_repeat.iter().map(|p| (p.0 - mean).powi(2)).sum::<f64>() / (count - 1.0);
    Ok(Estimate {
        mean,
        se: (var / count).sqrt(),
        bias: per_repeat.iter().map(|p| p.1).sum::<f64>() / count,
        repeats,
    })
}

/// Independent streams per repeat (SplitMix64 inside SeededRng decorrelates nearby seeds).
fn seed_for(seed: u64, repeat: usize) -> u64 {
    seed.wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .wrapping_add(repeat as u64)
}

/// S and its bias estimate of one row of random keys.
fn one_row(weights: Weights, row: &RowParams, seed: u64) -> Result<(f64, f64), AttnError> {
    let d = row.dim;
    let mut rng = SeededRng::new(seed);
    let (q, mu) = (row.query(), row.key_mean());
    let map = match weights {
        Weights::Linear(m) if m != FeatureMap::Identity => Some(PreparedMap::<f64>::exact(m, d)),
        _ => None,
    };
    // φ(q), computed once; identity and softmax use q itself.
    let q_feat = match &map {
        Some(m) => {
            let mut out = vec![0.0; m.feature_dim()];
            m.apply_head(Operand::Query, &q, 1, &mut out, &mut [0.0]);
            out
        }
        None => q.clone(),
    };
    let c = q_feat.len();
    let mut keys = vec![0.0; BLOCK * d];
    let mut feats = vec![0.0; BLOCK * c];
    let mut log_scale = [0.0; BLOCK];
    let softmax = weights == Weights::Softmax;
    let mut sums = PowerSums::new(if softmax { f64::NEG_INFINITY } else { 0.0 });
    let mut left = row.n;
    while left > 0 {
        let rows = left.min(BLOCK);
        for (t, k) in keys[..rows * d].iter_mut().enumerate() {
            *k = mu[t % d] + row.sigma * rng.normal();
        }
        let (src, width) = match &map {
            Some(m) => {
                m.apply_head(
                    Operand::Key,
                    &keys[..rows * d],
                    rows,
                    &mut feats[..rows * c],
                    &mut log_scale[..rows],
                );
                (&feats[..rows * c], c)
            }
            None => (&keys[..rows * d], d),
        };
        for kr in src.chunks_exact(width) {
            let s: f64 = kr.iter().zip(&q_feat).map(|(a, b)| a * b).sum();
            if softmax {
                sums.push_log(s);
            } else {
                sums.push(s.abs());
            }
        }
        left -= rows;
    }
    sums.ratio(row.n)
}

/// Σ|a|^p for p = 1..4, all scaled by `e^{−p·log_scale}`; S is scale-free, so the scale
/// never needs undoing.
struct PowerSums {
    log_scale: f64,
    p: [f64; 4],
}

impl PowerSums {
    fn new(log_scale: f64) -> Self {
        PowerSums {
            log_scale,
            p: [0.0; 4],
        }
    }

    /// Adds |a| given on the current scale.
    fn push(&mut self, x: f64) {
        let x2 = x * x;
        self.p[0] += x;
        self.p[1] += x2;
        self.p[2] += x2 * x;
        self.p[3] += x2 * x2;
    }

    /// Adds |a| = e^l, moving the scale up to l first when l is the largest seen.
    fn push_log(&mut self, l: f64) {
        if l > self.log_scale {
            let r = (self.log_scale - l).exp();
            let mut f = 1.0;
            for p in &mut self.p {
                f *= r;
                *p *= f;
            }
            self.log_scale = l;
        }
        self.push((l - self.log_scale).exp());
    }

    /// `Ŝ = Â/√B̂` and its delta-method bias
    /// `(Ŝ/n)·(3 Var(a²)/(8B²) − Cov(|a|, a²)/(2AB))` from the sample moments.
    fn ratio(&self, n: usize) -> Result<(f64, f64), AttnError> {
        let nf = n as f64;
        let [a, b, c3, c4] = self.p.map(|s| s / nf);
        if b.is_nan() || b <= 0.0 || b.is_infinite() {
            return Err(AttnError::InvalidArgument(format!(
                "every weight of the row is 0 or not finite (n = {n}): S(a) is undefined"
            )));
        }
        let s = a / b.sqrt();
        let bias = s / nf * (3.0 * (c4 - b * b) / (8.0 * b * b) - (c3 - a * b) / (2.0 * a * b));
        Ok((s, bias))
    }
}
