//! `linattn sparsity`: how concentrated attention rows are (SPEC §7). Measures
//! `S(a) = E|a|/√(E a²)` by streamed Monte Carlo (linattn_cpu::sparsity) over n and over γ,
//! next to the closed forms, then prints a table and optionally writes JSON and SVG plots.

mod args;
mod plot;
mod table;

pub use args::SparsityArgs;

use crate::results::{self, Environment};
use linattn_core::AttnError;
use linattn_cpu::sparsity::{closed_form, estimate, RowParams, Weights};
use serde::{Deserialize, Serialize};
use std::process::ExitCode;

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

fn measure(
    weights: Weights,
    sweep: Sweep,
    params: RowParams,
    args: &SparsityArgs,
) -> Result<SparsityRecord, AttnError> {
    let est = estimate(weights, &params, args.repeats, args.seed)?;
    let keyed = weights.random();
    Ok(SparsityRecord {
        case: weights.label(),
        sweep,
        beta: keyed.then_some(params.beta),
        gamma: keyed.then_some(params.gamma),
        sigma: params.sigma,
        dim: params.dim,
        lambda: match weights {
            Weights::Decay { lambda } => Some(lambda),
            _ => None,
        },
        n: params.n,
        repeats: est.repeats,
        measured: est.mean,
        se: est.se,
        bias: est.bias,
        closed_form: closed_form(weights, &params)?,
    })
}

pub fn run(args: SparsityArgs) -> Result<ExitCode, AttnError> {
    let cases = args.cases()?;
    args.validate()?;
    let row = |gamma: f64, n: usize| RowParams {
        beta: args.beta,
        gamma,
        sigma: args.sigma,
        dim: args.dim,
        n,
    };
    let mut records = Vec::new();
    for &w in &cases {
        for &n in &args.n {
            records.push(measure(w, Sweep::N, row(args.gamma, n), &args)?);
        }
    }
    // Decay has no γ: it sits out the γ sweep.
    for &w in cases.iter().filter(|w| w.random()) {
        for &gamma in &args.gammas {
            records.push(measure(w, Sweep::Gamma, row(gamma, args.n_gamma), &args)?);
        }
    }
    print!("{}", table::markdown(&records));
    if let Some(dir) = &args.svg_dir {
        for (sweep, name) in [
            (Sweep::N, "sparsity_vs_n.svg"),
            (Sweep::Gamma, "sparsity_vs_gamma.svg"),
        ] {
            if let Some(svg) = plot::svg(&records, sweep)? {
                let path = dir.join(name);
                results::write_bytes_atomic(&path, svg.as_bytes())?;
                eprintln!("wrote {}", path.display());
            }
        }
    }
    if let Some(path) = &args.json {
        let file = SparsityFile {
            schema_version: SCHEMA_VERSION,
            kind: "sparsity".into(),
            environment: results::probe_environment(None),
            records,
        };
        results::write_json_atomic(path, &file)?;
        eprintln!("wrote {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}
