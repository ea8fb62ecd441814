//! The closed forms of SPEC §7 (n → ∞), and the exact finite-n value for decay.
//!
//! Non-negative linear maps use `S = q'ᵀμ' / √(q'ᵀ(μ'μ'ᵀ + Σ')q')` with `q' = φ(q)` and μ', Σ'
//! the mean and covariance of `k' = φ(k)`:
//! * elu+1 and relu act elementwise on independent coordinates, so Σ' is diagonal and each
//!   coordinate's first two moments are exact truncated-Gaussian integrals (erf, no sampling).
//! * 1+cos: `q'ᵀk' = 1 + c` with `c = q̂ᵀk̂`; with μ ∥ q (our geometry) c depends only on
//!   `x = q̂ᵀk ~ N(β/‖q‖, σ²)` and `ρ = ‖k − x q̂‖/σ ~ χ_{D−1}`. E c and E c² come from a 2-D
//!   midpoint quadrature over (x, ρ) normalised by its own weights. The χ weight ρ^{D−2}
//!   smooths the kink of c at k = 0: error ~1e-9 at D = 4, below 1e-10 from D = 5 on
//!   (checked against E c² = 1/D at μ = 0); D < 4 gets no value.

use super::row::{RowParams, Weights};
use linattn_core::{AttnError, FeatureMap};
use std::f64::consts::{FRAC_1_SQRT_2, PI};

/// The SPEC §7 value of S for these weights and parameters; `None` where none exists.
pub fn closed_form(weights: Weights, row: &RowParams) -> Result<Option<f64>, AttnError> {
    row.validate()?;
    weights.validate()?;
    let (beta, gamma) = (row.beta, row.gamma);
    Ok(match weights {
        Weights::Softmax => Some((-gamma * gamma / 2.0).exp()),
        Weights::Linear(FeatureMap::Identity) => Some(identity(beta, gamma)),
        Weights::Linear(map @ (FeatureMap::EluPlusOne | FeatureMap::Relu)) => {
            Some(elementwise(map, row))
        }
        // Below D = 4 the χ weight ρ^{D−2} does not smooth the kink of c at k = 0 enough:
        // the midpoint rule is off by ~4e-6 at D = 3, so no value is claimed there.
        Weights::Linear(FeatureMap::OnePlusCos) if row.dim < 4 => None,
        Weights::Linear(FeatureMap::OnePlusCos) => Some(one_plus_cos(row)),
        Weights::Linear(_) => None,
        Weights::Decay { lambda } => Some(decay(lambda, row.n)),
    })
}

/// `S = (γ√(2/π)·e^{−β²/(2γ²)} + β·erf(β/(√2γ))) / √(β²+γ²)`: E|s| / √(E s²), s ~ N(β, γ²).
pub fn identity(beta: f64, gamma: f64) -> f64 {
    let mean_abs = gamma * (2.0 / PI).sqrt() * (-beta * beta / (2.0 * gamma * gamma)).exp()
        + beta * libm::erf(beta / (2f64.sqrt() * gamma));
    mean_abs / (beta * beta + gamma * gamma).sqrt()
}

/// `a_j = λ^{n−j}`, j = 1..n: `S_n = ((1−λⁿ)/(1−λ)) / √(n (1−λ²ⁿ)/(1−λ²))`, → 0 as n → ∞
/// for λ < 1 (SPEC §7), 1 for λ = 1.
pub fn decay(lambda: f64, n: usize) -> f64 {
    if lambda == 1.0 {
        return 1.0;
    }
    let (n, ln) = (n as f64, lambda.ln());
    // expm1 keeps 1 − λⁿ accurate when λ is close to 1.
    let sum = -(n * ln).exp_m1() / -ln.exp_m1();
    let sum_sq = -(2.0 * n * ln).exp_m1() / -(2.0 * ln).exp_m1();
    sum / (n * sum_sq).sqrt()
}

/// Standard normal cdf and density.
fn cdf(z: f64) -> f64 {
    0.5 * libm::erfc(-z * FRAC_1_SQRT_2)
}
fn pdf(z: f64) -> f64 {
    (-z * z / 2.0).exp() / (2.0 * PI).sqrt()
}

/// E φ(X) and E φ(X)² for X ~ N(m, s²), exact; φ = relu, or elu+1 for any other map.
fn map_moments(map: FeatureMap, m: f64, s: f64) -> (f64, f64) {
    let z = m / s;
    let (p, d) = (cdf(z), pdf(z));
    // E[X 1{X>0}] and E[X² 1{X>0}].
    let pos1 = m * p + s * d;
    let pos2 = (m * m + s * s) * p + m * s * d;
    match map {
        FeatureMap::Relu => (pos1, pos2),
        _ => {
            // E[e^{tX} 1{X≤0}] = e^{tm + t²s²/2} Φ(−(m + t s²)/s).
            let neg = |t: f64| (t * m + t * t * s * s / 2.0).exp() * cdf(-(m + t * s * s) / s);
            (pos1 + p + neg(1.0), pos2 + 2.0 * pos1 + p + neg(2.0))
        }
    }
}

fn elementwise(map: FeatureMap, row: &RowParams) -> f64 {
    let phi = |x: f64| match map {
        FeatureMap::Relu => x.max(0.0),
        _ => {
            if x > 0.0 {
                x + 1.0
            } else {
                x.exp()
            }
        }
    };
    let (mut mean, mut var) = (0.0, 0.0);
    for (q, mu) in row.query().into_iter().zip(row.key_mean()) {
        let (m1, m2) = map_moments(map, mu, row.sigma);
        let qp = phi(q);
        mean += qp * m1;
        var += qp * qp * (m2 - m1 * m1);
    }
    mean / (mean * mean + var).sqrt()
}

/// Points per axis of the 1+cos quadrature; the integrands are smooth and decay like
/// Gaussians, so the midpoint rule converges geometrically.
const QUAD_POINTS: usize = 1200;

fn one_plus_cos(row: &RowParams) -> f64 {
    let (c1, c2) = cosine_moments(row.beta / row.q_norm(), row.sigma, row.dim);
    (1.0 + c1) / (1.0 + 2.0 * c1 + c2).sqrt()
}

/// E c and E c², `c = x / √(x² + σ²ρ²)`, x ~ N(m, σ²), ρ ~ χ_{D−1}.
pub fn cosine_moments(m: f64, sigma: f64, dim: usize) -> (f64, f64) {
    cosine_moments_on(m, sigma, dim, QUAD_POINTS)
}

fn cosine_moments_on(m: f64, sigma: f64, dim: usize, points: usize) -> (f64, f64) {
    let dof = (dim - 1) as f64;
    let half_width = 12.0 * sigma;
    let rho_max = dof.sqrt() + 12.0;
    let (hx, hr) = (2.0 * half_width / points as f64, rho_max / points as f64);
    // χ density up to its constant, in logs so that ρ^{D−2} cannot overflow.
    let rho: Vec<(f64, f64)> = (0..points)
        .map(|j| {
            let r = (j as f64 + 0.5) * hr;
            (r, ((dof - 1.0) * r.ln() - r * r / 2.0).exp())
        })
        .collect();
    let (mut w_sum, mut s1, mut s2) = (0.0, 0.0, 0.0);
    for i in 0..points {
        let x = m - half_width + (i as f64 + 0.5) * hx;
        let wx = (-(x - m) * (x - m) / (2.0 * sigma * sigma)).exp();
        for &(r, wr) in &rho {
            let w = wx * wr;
            let c = x / (x * x + sigma * sigma * r * r).sqrt();
            w_sum += w;
            s1 += w * c;
            s2 += w * c * c;
        }
    }
    (s1 / w_sum, s2 / w_sum)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With μ = 0, k̂ is uniform on the sphere: E c = 0 and E c² = 1/D exactly.
    #[test]
    fn cosine_moments_are_exact_for_centred_keys() {
        for dim in [4, 5, 8, 64] {
            let (c1, c2) = cosine_moments(0.0, 1.3, dim);
            assert!(c1.abs() < 1e-12, "D {dim}: E c = {c1}");
            assert!((c2 - 1.0 / dim as f64).abs() < 1e-8, "D {dim}: E c² = {c2}");
        }
    }

    #[test]
    fn cosine_quadrature_has_converged() {
        for (m, dim) in [(0.5, 4), (2.0, 8), (-3.0, 16)] {
            let (a1, a2) = cosine_moments_on(m, 1.0, dim, QUAD_POINTS);
            let (b1, b2) = cosine_moments_on(m, 1.0, dim, 2 * QUAD_POINTS);
            assert!(
                (a1 - b1).abs() < 1e-8 && (a2 - b2).abs() < 1e-8,
                "m {m} D {dim}"
            );
        }
    }
}
