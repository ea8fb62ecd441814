//! How concentrated an attention row is (SPEC §7, seed 002): `S(a) = E|a| / √(E a²)` over a
//! row `a_j ∝ f(qᵀk_j)` with q fixed and `k_j ~ N(μ, σ²I)`. Small S means a focused row.
//!
//! * [`mod@closed_form`]: the n → ∞ values of SPEC §7 (exact finite-n for decay).
//! * [`monte_carlo`]: a streamed estimator over rows of up to 2^20 keys (never an n×n matrix),
//!   rayon over independent repeats, with a standard error and a delta-method bias estimate.
//!
//! Geometry: `q = (γ/σ)/√D · 1` (every coordinate equal, so relu and elu+1 see all of them)
//! and `μ = (β/‖q‖) q̂`, which gives `qᵀμ = β` and `σ‖q‖ = γ` as in SPEC §7.

pub mod closed_form;
pub mod monte_carlo;
mod row;

pub use closed_form::closed_form;
pub use monte_carlo::{estimate, Estimate};
pub use row::{RowParams, Weights};
