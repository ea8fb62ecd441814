//! The JSON `linattn sparsity --json` writes: one record per measured case.

use crate::results::Environment;
use serde::{Deserialize, Serialize};

/// Bumped when a field changes meaning.
pub const SCHEMA_VERSION: u32 = 1;

/// The file `--json` writes: where it was measured, how, and one record per case.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SparsityFile {
    pub schema_version: u32,
    pub kind: String,
    pub environment: Environment,
    pub records: Vec<SparsityRecord>,
}

/// Which axis a record belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Sweep {
    N,
    Gamma,
}

/// One case: parameters, the Monte-Carlo mean with its standard error over repeats and its
/// delta-method finite-n bias, and the SPEC §7 closed form (n → ∞; exact finite n for decay).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SparsityRecord {
    pub case: String,
    pub sweep: Sweep,
    /// β = qᵀμ and γ = σ‖q‖; absent for decay, whose weights involve no keys.
    pub beta: Option<f64>,
    pub gamma: Option<f64>,
    pub sigma: f64,
    pub dim: usize,
    pub lambda: Option<f64>,
    pub n: usize,
    pub repeats: usize,
    pub measured: f64,
    pub se: f64,
    pub bias: f64,
    pub closed_form: Option<f64>,
}
