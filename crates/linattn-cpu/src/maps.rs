//! Feature maps φ of SPEC §5 and their vector-Jacobian products, generic over f64 (oracle)
//! and f32 (fast path).
//!
//! A map is applied to a whole head (`n` rows of `dk`) at once because efficient attention
//! normalises keys over the sequence axis; every other map acts row by row.
//!
//! FAVOR+ stabiliser (f32 only): `exp` of the projected features overflows f32 for large
//! inputs, so the f32 path subtracts the row max from each query row's exponents and one
//! max over all keys of the head from the key exponents. Each shift multiplies a query row
//! (or every key) by a constant `e^{-m}`: numerator and denominator of `O_i` scale alike, and
//! the callers scale ε by the same factors (see [`Featurised::row_eps`]), so the output is the
//! unshifted one exactly in exact arithmetic. The shift is therefore treated as a constant in
//! the backward pass: the gradient of O with respect to it is zero. The f64 oracle uses no
//! shift.

use linattn_core::{favor_projection, FeatureMap};
use std::fmt::Debug;
use std::ops::{Add, AddAssign, Div, Mul, MulAssign, Neg, Sub, SubAssign};

/// The float operations the maps and the attention cores need.
pub trait Real:
    Copy
    + Debug
    + Send
    + Sync
    + PartialOrd
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Neg<Output = Self>
    + AddAssign
    + SubAssign
    + MulAssign
    + Default
    + 'static
{
    const ZERO: Self;
    const ONE: Self;
    fn from_f64(x: f64) -> Self;
    fn to_f64(self) -> f64;
    fn exp(self) -> Self;
    fn sqrt(self) -> Self;
    fn max(self, other: Self) -> Self;
}

/// `Real` for a float type whose inherent `exp`, `sqrt` and `max` it forwards to.
macro_rules! impl_real {
    ($t:ident) => {
        impl Real for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            fn from_f64(x: f64) -> Self {
                x as $t
            }
            fn to_f64(self) -> f64 {
                self as f64
            }
            fn exp(self) -> Self {
                $t::exp(self)
            }
            fn sqrt(self) -> Self {
                $t::sqrt(self)
            }
            fn max(self, other: Self) -> Self {
                $t::max(self, other)
            }
        }
    };
}

impl_real!(f64);
impl_real!(f32);

/// Which operand a map is applied to (efficient attention treats them differently).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operand {
    Query,
    Key,
}

/// A feature map ready to apply at key dim `dk`: FAVOR+'s projection drawn once.
#[derive(Debug, Clone)]
pub struct PreparedMap<T: Real> {
    map: FeatureMap,
    dk: usize,
    features: usize,
    /// FAVOR+ W, `features × dk` row-major; empty for other maps.
    favor_w: Vec<T>,
    /// `D^{-1/4}`, FAVOR+'s input scale.
    favor_scale: T,
    /// Subtract maxima before FAVOR+'s exp (see the module doc).
    stabilise: bool,
}

/// φ(Q) and φ(K) of one head, and the ε each query row must use.
#[derive(Debug, Clone)]
pub struct Featurised<T: Real> {
    pub q: Vec<T>,
    pub k: Vec<T>,
    /// log of the factor each query row of φ(Q) was scaled by (0 without a stabiliser).
    pub q_log_scale: Vec<f64>,
    /// log of the factor every row of φ(K) was scaled by.
    pub k_log_scale: f64,
}

impl<T: Real> Featurised<T> {
    /// ε for query row `i`, scaled like that row's numerator and denominator so the shifts
    /// of the stabiliser cancel exactly.
    pub fn row_eps(&self, eps: f64, i: usize) -> T {
        let log = self.q_log_scale.get(i).copied().unwrap_or(0.0) + self.k_log_scale;
        T::from_f64(eps * log.exp())
    }
}

impl<T: Real> PreparedMap<T> {
    /// The map without FAVOR+ stabiliser (the f64 oracle).
    pub fn exact(map: FeatureMap, dk: usize) -> Self {
        Self::build(map, dk, false)
    }
    /// The map with FAVOR+ max subtraction (the f32 path).
    pub fn stabilised(map: FeatureMap, dk: usize) -> Self {
        Self::build(map, dk, true)
    }

    fn build(map: FeatureMap, dk: usize, stabilise: bool) -> Self {
        let (favor_w, features) = match map {
            FeatureMap::Favor { features, seed } => (
                favor_projection(dk, features, seed)
                    .into_iter()
                    .map(T::from_f64)
                    .collect(),
                features,
            ),
            _ => (Vec::new(), 0),
        };
        PreparedMap {
            map,
            dk,
            features,
            favor_w,
            favor_scale: T::from_f64((dk as f64).powf(-0.25)),
            stabilise,
        }
    }

    pub fn map(&self) -> FeatureMap {
        self.map
    }

    /// Feature dimension C.
    pub fn feature_dim(&self) -> usize {
        self.map.feature_dim(self.dk)
    }

    /// φ of both operands of one head (`n` rows each).
    pub fn featurise(&self, q: &[T], k: &[T], n: usize) -> Featurised<T> {
        let c = self.feature_dim();
        let mut out = Featurised {
            q: vec![T::ZERO; n * c],
            k: vec![T::ZERO; n * c],
            q_log_scale: vec![0.0; n],
            k_log_scale: 0.0,
        };
        let mut k_log = vec![0.0; n];
        self.apply_head(Operand::Query, q, n, &mut out.q, &mut out.q_log_scale);
        self.apply_head(Operand::Key, k, n, &mut out.k, &mut k_log);
        out.k_log_scale = k_log.first().copied().unwrap_or(0.0);
        out
    }

    /// Writes φ of the `n` rows of `x` (`n × dk`) into `out` (`n × C`). `log_scale[i]`
    /// receives the log of the factor row i was scaled by (stabilised FAVOR+; else 0).
    pub fn apply_head(
        &self,
        operand: Operand,
        x: &[T],
        n: usize,
        out: &mut [T],
        log_scale: &mut [f64],
    ) {
        let (d, c) = (self.dk, self.feature_dim());
        debug_assert!(x.len() >= n * d && out.len() >= n * c && log_scale.len() >= n);
        log_scale[..n].fill(0.0);
        match self.map {
            FeatureMap::EluPlusOne => map_elementwise(x, out, n * d, |v| {
                if v > T::ZERO {
                    v + T::ONE
                } else {
                    v.exp()
                }
            }),
            FeatureMap::Relu => map_elementwise(x, out, n * d, |v| v.max(T::ZERO)),
            FeatureMap::Identity => out[..n * d].copy_from_slice(&x[..n * d]),
            FeatureMap::Softmax => {
                for (xr, or) in x.chunks_exact(d).zip(out.chunks_exact_mut(c)).take(n) {
                    softmax_row(xr, or);
                }
            }
            FeatureMap::EfficientAttention => match operand {
                Operand::Query => {
                    for (xr, or) in x.chunks_exact(d).zip(out.chunks_exact_mut(c)).take(n) {
                        softmax_row(xr, or);
                    }
                }
                Operand::Key => softmax_columns(&x[..n * d], &mut out[..n * d], n, d),
            },
            FeatureMap::OnePlusCos => {
                for (xr, or) in x.chunks_exact(d).zip(out.chunks_exact_mut(c)).take(n) {
                    let norm = xr.iter().fold(T::ZERO, |a, &v| a + v * v).sqrt();
                    or[0] = T::ONE;
                    // A zero row has no direction: x̂ = 0, so sim = 1 (its gradient is 0).
                    let inv = if norm > T::ZERO {
                        T::ONE / norm
                    } else {
                        T::ZERO
                    };
                    for (o, &v) in or[1..].iter_mut().zip(xr) {
                        *o = v * inv;
                    }
                }
            }
            FeatureMap::Favor { .. } => self.favor_head(operand, x, n, out, log_scale),
        }
    }

    /// FAVOR+ exponents `u_r = W_r·x' − ‖x'‖²/2`, then `exp(u − shift)/√R`.
    fn favor_head(
        &self,
        operand: Operand,
        x: &[T],
        n: usize,
        out: &mut [T],
        log_scale: &mut [f64],
    ) {
        let (d, r) = (self.dk, self.features);
        let half = T::from_f64(0.5);
        for (xr, or) in x.chunks_exact(d).zip(out.chunks_exact_mut(r)).take(n) {
            let sq =
                xr.iter().fold(T::ZERO, |a, &v| a + v * v) * self.favor_scale * self.favor_scale;
            for (o, wr) in or.iter_mut().zip(self.favor_w.chunks_exact(d)) {
                let dot = wr.iter().zip(xr).fold(T::ZERO, |a, (&w, &v)| a + w * v);
                *o = dot * self.favor_scale - sq * half;
            }
        }
        let inv_sqrt_r = T::ONE / T::from_f64(r as f64).sqrt();
        let exps = &mut out[..n * r];
        if !self.stabilise {
            exps.iter_mut().for_each(|u| *u = u.exp() * inv_sqrt_r);
            return;
        }
        match operand {
            Operand::Query => {
                for (row, ls) in exps.chunks_exact_mut(r).zip(log_scale.iter_mut()) {
                    let m = row
                        .iter()
                        .fold(T::from_f64(f64::NEG_INFINITY), |a, &u| a.max(u));
                    row.iter_mut()
                        .for_each(|u| *u = (*u - m).exp() * inv_sqrt_r);
                    *ls = -m.to_f64();
                }
            }
            Operand::Key => {
                let m = exps
                    .iter()
                    .fold(T::from_f64(f64::NEG_INFINITY), |a, &u| a.max(u));
                exps.iter_mut()
                    .for_each(|u| *u = (*u - m).exp() * inv_sqrt_r);
                log_scale[..n].fill(-m.to_f64());
            }
        }
    }

    /// Given `g = ∂L/∂φ(x)` (`n × C`), writes `∂L/∂x` (`n × dk`) into `gx`. `x` are the
    /// inputs and `phi` the outputs of [`PreparedMap::apply_head`] on them.
    pub fn vjp_head(&self, operand: Operand, x: &[T], phi: &[T], g: &[T], n: usize, gx: &mut [T]) {
        let (d, c) = (self.dk, self.feature_dim());
        debug_assert!(x.len() >= n * d && phi.len() >= n * c && g.len() >= n * c);
        match self.map {
            FeatureMap::EluPlusOne => {
                // φ'(x) = 1 for x > 0, eˣ = φ(x) otherwise.
                for i in 0..n * d {
                    gx[i] = if x[i] > T::ZERO { g[i] } else { g[i] * phi[i] };
                }
            }
            FeatureMap::Relu => {
                for i in 0..n * d {
                    gx[i] = if x[i] > T::ZERO { g[i] } else { T::ZERO };
                }
            }
            FeatureMap::Identity => gx[..n * d].copy_from_slice(&g[..n * d]),
            FeatureMap::Softmax => softmax_rows_vjp(phi, g, n, d, gx),
            FeatureMap::EfficientAttention => match operand {
                Operand::Query => softmax_rows_vjp(phi, g, n, d, gx),
                Operand::Key => {
                    // Per column j: ∂x_ij = φ_ij (g_ij − Σ_i' g_i'j φ_i'j).
                    let mut dots = vec![T::ZERO; d];
                    for i in 0..n {
                        for j in 0..d {
                            dots[j] += g[i * d + j] * phi[i * d + j];
                        }
                    }
                    for i in 0..n {
                        for j in 0..d {
                            gx[i * d + j] = phi[i * d + j] * (g[i * d + j] - dots[j]);
                        }
                    }
                }
            },
            FeatureMap::OnePlusCos => {
                // φ = [1, x/‖x‖]: ∂x = (g̃ − x̂ (x̂·g̃)) / ‖x‖ with g̃ = g[1..].
                for i in 0..n {
                    let xr = &x[i * d..(i + 1) * d];
                    let gr = &g[i * c + 1..(i + 1) * c];
                    let hat = &phi[i * c + 1..(i + 1) * c];
                    let norm = xr.iter().fold(T::ZERO, |a, &v| a + v * v).sqrt();
                    let out = &mut gx[i * d..(i + 1) * d];
                    if norm > T::ZERO {
                        let dot = hat.iter().zip(gr).fold(T::ZERO, |a, (&h, &gg)| a + h * gg);
                        for t in 0..d {
                            out[t] = (gr[t] - hat[t] * dot) / norm;
                        }
                    } else {
                        out.fill(T::ZERO);
                    }
                }
            }
            FeatureMap::Favor { .. } => {
                // ∂x'_t = Σ_r g_r φ_r (W_rt − x'_t), ∂x = D^{-1/4} ∂x' (any stabiliser shift
                // is a constant: see the module doc).
                let r = self.features;
                let s = self.favor_scale;
                for i in 0..n {
                    let xr = &x[i * d..(i + 1) * d];
                    let out = &mut gx[i * d..(i + 1) * d];
                    out.fill(T::ZERO);
                    let mut total = T::ZERO;
                    for (f, wr) in self.favor_w.chunks_exact(d).enumerate().take(r) {
                        let a = g[i * r + f] * phi[i * r + f];
                        total += a;
                        for t in 0..d {
                            out[t] += a * wr[t];
                        }
                    }
                    for t in 0..d {
                        out[t] = (out[t] - total * xr[t] * s) * s;
                    }
                }
            }
        }
    }
}

fn map_elementwise<T: Real>(x: &[T], out: &mut [T], len: usize, f: impl Fn(T) -> T) {
    for (o, &v) in out[..len].iter_mut().zip(&x[..len]) {
        *o = f(v);
    }
}

fn softmax_row<T: Real>(x: &[T], out: &mut [T]) {
    let m = x
        .iter()
        .fold(T::from_f64(f64::NEG_INFINITY), |a, &v| a.max(v));
    let mut sum = T::ZERO;
    for (o, &v) in out.iter_mut().zip(x) {
        *o = (v - m).exp();
        sum += *o;
    }
    let inv = T::ONE / sum;
    out.iter_mut().for_each(|o| *o *= inv);
}

/// Softmax of each of the `d` columns of `x` (`n × d`) over its `n` rows.
fn softmax_columns<T: Real>(x: &[T], out: &mut [T], n: usize, d: usize) {
    let mut max = vec![T::from_f64(f64::NEG_INFINITY); d];
    for row in x.chunks_exact(d) {
        for (m, &v) in max.iter_mut().zip(row) {
            *m = m.max(v);
        }
    }
    let mut sum = vec![T::ZERO; d];
    for (orow, row) in out.chunks_exact_mut(d).zip(x.chunks_exact(d)).take(n) {
        for j in 0..d {
            orow[j] = (row[j] - max[j]).exp();
            sum[j] += orow[j];
        }
    }
    for orow in out.chunks_exact_mut(d).take(n) {
        for j in 0..d {
            orow[j] = orow[j] / sum[j];
        }
    }
}

/// Row softmax VJP: `∂x = φ ⊙ (g − φ·g)`.
fn softmax_rows_vjp<T: Real>(phi: &[T], g: &[T], n: usize, d: usize, gx: &mut [T]) {
    for i in 0..n {
        let (p, gr) = (&phi[i * d..(i + 1) * d], &g[i * d..(i + 1) * d]);
        let dot = p.iter().zip(gr).fold(T::ZERO, |a, (&pp, &gg)| a + pp * gg);
        for t in 0..d {
            gx[i * d + t] = p[t] * (gr[t] - dot);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use linattn_core::{SeededRng, DEFAULT_FAVOR_SEED};

    /// Every map's VJP against central differences of `Σ g ⊙ φ(x)`, both operands.
    #[test]
    fn vjp_matches_finite_differences() {
        let (n, d) = (5, 4);
        let mut rng = SeededRng::new(11);
        let x: Vec<f64> = (0..n * d).map(|_| rng.normal()).collect();
        for map in FeatureMap::all(6) {
            let pm = PreparedMap::<f64>::exact(map, d);
            let c = pm.feature_dim();
            let g: Vec<f64> = (0..n * c).map(|_| rng.normal()).collect();
            for operand in [Operand::Query, Operand::Key] {
                let loss = |x: &[f64]| {
                    let mut out = vec![0.0; n * c];
                    pm.apply_head(operand, x, n, &mut out, &mut vec![0.0; n]);
                    out.iter().zip(&g).map(|(a, b)| a * b).sum::<f64>()
                };
                let mut phi = vec![0.0; n * c];
                pm.apply_head(operand, &x, n, &mut phi, &mut vec![0.0; n]);
                let mut gx = vec![0.0; n * d];
                pm.vjp_head(operand, &x, &phi, &g, n, &mut gx);
                for i in 0..n * d {
                    let h = 1e-6;
                    let (mut xp, mut xm) = (x.clone(), x.clone());
                    xp[i] += h;
                    xm[i] -= h;
                    let fd = (loss(&xp) - loss(&xm)) / (2.0 * h);
                    assert!(
                        (fd - gx[i]).abs() <= 1e-6 * (1.0 + fd.abs()),
                        "{map} {operand:?} elem {i}: fd {fd} vjp {}",
                        gx[i]
                    );
                }
            }
        }
    }

    /// FAVOR+ features estimate exp(qᵀk/√D): the mean over many features is close.
    #[test]
    fn favor_estimates_the_softmax_kernel() {
        let d = 4;
        let r = 4096;
        let pm = PreparedMap::<f64>::exact(
            FeatureMap::Favor {
                features: r,
                seed: DEFAULT_FAVOR_SEED,
            },
            d,
        );
        let q = [0.3, -0.2, 0.5, 0.1];
        let k = [0.1, 0.4, -0.3, 0.2];
        let f = pm.featurise(&q, &k, 1);
        let est: f64 = f.q.iter().zip(&f.k).map(|(a, b)| a * b).sum();
        let exact = (q.iter().zip(&k).map(|(a, b)| a * b).sum::<f64>() / 2.0).exp();
        assert!(
            (est - exact).abs() < 0.05 * exact,
            "est {est} exact {exact}"
        );
    }
}
