//! What one attention row of the study is: how its weights are formed ([`Weights`]) and its
//! parameters ([`RowParams`]), with the geometry the module doc describes.

use linattn_core::{AttnError, FeatureMap, Unsupported};

/// How a row's weights are formed from the scores `s_j = qᵀk_j`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Weights {
    /// Softmax attention: `a_j ∝ exp(s_j)`.
    Softmax,
    /// Linear attention `a_j = φ(q)ᵀφ(k_j)`: identity, elu+1, relu or 1+cos.
    Linear(FeatureMap),
    /// Decay alone, `a_j = λ^{n−j}`, 0 < λ ≤ 1 (SPEC §6): no keys involved.
    Decay { lambda: f64 },
}

impl Weights {
    /// Parses `softmax`, `identity`, `elu+1`, `relu`, `1+cos` or `decay` (λ given separately).
    pub fn parse(name: &str, lambda: f64) -> Result<Weights, AttnError> {
        let weights = match name.trim() {
            "softmax" => Weights::Softmax,
            "decay" => Weights::Decay { lambda },
            other => Weights::Linear(other.parse::<FeatureMap>().map_err(|_| {
                AttnError::InvalidArgument(format!(
                    "'{other}' is not a sparsity case: use softmax, identity, elu+1, relu, 1+cos or decay"
                ))
            })?),
        };
        weights.validate()?;
        Ok(weights)
    }

    pub fn label(&self) -> String {
        match self {
            Weights::Softmax => "softmax".into(),
            Weights::Linear(map) => map.label(),
            Weights::Decay { .. } => "decay".into(),
        }
    }

    /// Whether the weights depend on the keys (everything but decay).
    pub fn random(&self) -> bool {
        !matches!(self, Weights::Decay { .. })
    }

    pub(super) fn validate(&self) -> Result<(), AttnError> {
        match *self {
            Weights::Softmax => Ok(()),
            Weights::Linear(
                FeatureMap::Identity
                | FeatureMap::EluPlusOne
                | FeatureMap::Relu
                | FeatureMap::OnePlusCos,
            ) => Ok(()),
            Weights::Linear(map) => Err(Unsupported::Problem(format!(
                "sparsity of map {map}: SPEC §7 studies identity, elu+1, relu and 1+cos"
            ))
            .into()),
            Weights::Decay { lambda } => {
                if lambda > 0.0 && lambda <= 1.0 {
                    Ok(())
                } else {
                    Err(AttnError::InvalidArgument(format!(
                        "decay λ = {lambda}: must lie in (0, 1]"
                    )))
                }
            }
        }
    }
}

/// One row's parameters: β = qᵀμ, γ = σ‖q‖, σ, key dimension D and row length n.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RowParams {
    pub beta: f64,
    pub gamma: f64,
    pub sigma: f64,
    pub dim: usize,
    pub n: usize,
}

impl RowParams {
    /// Every parameter checked: finite, γ > 0, σ > 0, D ≥ 2, n ≥ 1.
    pub fn validate(&self) -> Result<(), AttnError> {
        for (name, v) in [("β", self.beta), ("γ", self.gamma), ("σ", self.sigma)] {
            if !v.is_finite() {
                return Err(AttnError::InvalidArgument(format!(
                    "{name} = {v}: must be finite"
                )));
            }
        }
        if self.gamma <= 0.0 {
            return Err(AttnError::InvalidArgument(format!(
                "γ = {}: must be > 0 (γ = σ‖q‖)",
                self.gamma
            )));
        }
        if self.sigma <= 0.0 {
            return Err(AttnError::InvalidArgument(format!(
                "σ = {}: must be > 0",
                self.sigma
            )));
        }
        if self.n == 0 {
            return Err(AttnError::EmptyDim("n (row length)"));
        }
        if self.dim < 2 {
            return Err(AttnError::InvalidArgument(format!(
                "key dimension D = {}: must be ≥ 2 (1+cos needs a direction orthogonal to q)",
                self.dim
            )));
        }
        Ok(())
    }

    /// ‖q‖ = γ/σ.
    pub fn q_norm(&self) -> f64 {
        self.gamma / self.sigma
    }

    /// q of the geometry above: every coordinate `‖q‖/√D`.
    pub fn query(&self) -> Vec<f64> {
        vec![self.q_norm() / (self.dim as f64).sqrt(); self.dim]
    }

    /// μ = (β/‖q‖) q̂: every coordinate `β/(‖q‖√D)`.
    pub fn key_mean(&self) -> Vec<f64> {
        vec![self.beta / (self.q_norm() * (self.dim as f64).sqrt()); self.dim]
    }
}
