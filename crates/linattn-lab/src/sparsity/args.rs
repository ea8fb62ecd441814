//! Command-line arguments of `linattn sparsity`, checked before any sampling starts.

use crate::results;
use linattn_core::AttnError;
use linattn_cpu::sparsity::{RowParams, Weights};
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct SparsityArgs {
    /// Cases: softmax (f = exp), identity, elu+1, relu, 1+cos, decay (a_j = λ^(n−j)).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "softmax,identity,elu+1,relu,1+cos,decay"
    )]
    pub cases: Vec<String>,
    /// Row lengths n of the S-against-n sweep (at --gamma).
    #[arg(long, value_delimiter = ',', default_value = "256,4096,65536,1048576")]
    pub n: Vec<usize>,
    /// γ = σ‖q‖ values of the S-against-γ sweep (at --n-gamma); decay sits it out.
    #[arg(long, value_delimiter = ',', default_value = "0.25,0.5,1,1.5,2,2.5,3")]
    pub gammas: Vec<f64>,
    /// Row length of the γ sweep.
    #[arg(long, default_value_t = 65536)]
    pub n_gamma: usize,
    /// β = qᵀμ.
    #[arg(long, default_value_t = 0.5, allow_negative_numbers = true)]
    pub beta: f64,
    /// γ of the n sweep.
    #[arg(long, default_value_t = 2.0, allow_negative_numbers = true)]
    pub gamma: f64,
    /// Key standard deviation σ (k ~ N(μ, σ²I)).
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
    pub sigma: f64,
    /// Key dimension D.
    #[arg(long, default_value_t = 8)]
    pub dim: usize,
    /// Decay factor λ of the decay case, in (0, 1].
    #[arg(long, default_value_t = 0.99, allow_negative_numbers = true)]
    pub lambda: f64,
    /// Independent rows per case (the standard error is over these).
    #[arg(long, default_value_t = 16)]
    pub repeats: usize,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Write the records, with the environment header, as JSON here.
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
    /// Write sparsity_vs_n.svg and sparsity_vs_gamma.svg into this existing directory.
    #[arg(long, value_name = "DIR")]
    pub svg_dir: Option<PathBuf>,
}

impl SparsityArgs {
    pub fn cases(&self) -> Result<Vec<Weights>, AttnError> {
        self.cases
            .iter()
            .map(|c| Weights::parse(c, self.lambda))
            .collect()
    }

    /// Every row parameter and output path, so a bad one fails before minutes of sampling.
    pub fn validate(&self) -> Result<(), AttnError> {
        if self.n.is_empty() && self.gammas.is_empty() {
            return Err(AttnError::InvalidArgument(
                "nothing to measure: --n and --gammas are both empty".into(),
            ));
        }
        let row = |gamma: f64, n: usize| RowParams {
            beta: self.beta,
            gamma,
            sigma: self.sigma,
            dim: self.dim,
            n,
        };
        for &n in &self.n {
            row(self.gamma, n).validate()?;
        }
        for &gamma in &self.gammas {
            row(gamma, self.n_gamma).validate()?;
        }
        if self.repeats < 2 {
            return Err(AttnError::InvalidArgument(format!(
                "--repeats {}: a standard error needs at least 2",
                self.repeats
            )));
        }
        if let Some(path) = &self.json {
            results::check_writable(path)?;
        }
        if let Some(dir) = self.svg_dir.as_ref().filter(|d| !d.is_dir()) {
            return Err(AttnError::InvalidArgument(format!(
                "--svg-dir {}: not a directory",
                dir.display()
            )));
        }
        Ok(())
    }
}
