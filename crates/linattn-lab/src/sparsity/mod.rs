//! `linattn sparsity`: how concentrated attention rows are (SPEC §7). Measures
//! `S(a) = E|a|/√(E a²)` by streamed Monte Carlo (linattn_cpu::sparsity) over n and over γ,
//! next to the closed forms, then prints a table and optionally writes JSON and SVG plots.

mod args;
mod plot;
mod record;
mod table;

pub use args::SparsityArgs;

use crate::results;
use linattn_core::AttnError;
use linattn_cpu::sparsity::{closed_form, estimate, RowParams, Weights};
use record::{SparsityFile, SparsityRecord, Sweep, SCHEMA_VERSION};
use std::process::ExitCode;

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
