//! `linattn all`: the main job in one command — `check` every available backend, then a
//! `bench` sweep of the fast backends over N, then the markdown/SVG `report` of that sweep.
//! On a machine without a GPU the CUDA backends appear as `skipped: <reason>`.

use crate::{bench, check, report};
use clap::Parser;
use linattn_core::AttnError;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct AllArgs {
    /// Largest N of the sweep (a power of two). The CPU softmax baseline stops by itself
    /// (too slow / out of memory) long before large N; the linear forms keep going.
    #[arg(long, default_value = "2^14")]
    n_max: String,
    /// Where the sweep's JSON, REPORT.md and the SVG plots go (git-ignored: commit a run
    /// under bench-results/<device>/ deliberately, not by accident).
    #[arg(long, default_value = "bench-results/latest")]
    out_dir: PathBuf,
    /// Backends to check and sweep (comma-separated globs, as for `check`). Default: every
    /// backend in the check, the fast default set in the sweep.
    #[arg(long, value_name = "PATTERNS")]
    backends: Option<String>,
    /// The check's simulated backends (`sim/*`) leave out cases longer than this N: with
    /// 130, the 14 simulated backends take about 1 minute on 2 cores instead of 6 (their
    /// N = 1100 cases run in `cargo test`, CI and a plain `linattn check`). 0: no limit.
    #[arg(long, default_value_t = 130, value_name = "N")]
    sim_max_n: usize,
}

/// Parses a sub-command's arguments exactly as the CLI would, so `all` runs the same code
/// paths and defaults as the individual commands.
fn parse<T: clap::Args>(argv: &[&str]) -> Result<T, AttnError> {
    #[derive(Parser)]
    struct Wrap<U: clap::Args> {
        #[command(flatten)]
        inner: U,
    }
    Wrap::<T>::try_parse_from(std::iter::once("linattn").chain(argv.iter().copied()))
        .map(|w| w.inner)
        .map_err(|e| AttnError::InvalidArgument(e.to_string()))
}

pub fn run(args: AllArgs) -> Result<ExitCode, AttnError> {
    // Every argument of every step, and the output directory, are checked before the first
    // case runs: a typo in --n-max must not surface after minutes of checking.
    let out = args
        .out_dir
        .join("bench.json")
        .to_string_lossy()
        .into_owned();
    let out_dir = args.out_dir.to_string_lossy().into_owned();
    let sim_max_n = args.sim_max_n.to_string();
    // The quick pass: the global-memory checker (5–10× the simulator's time) runs in a
    // plain `linattn check` and in CI.
    let mut check_argv: Vec<&str> = vec!["--no-globalcheck"];
    if args.sim_max_n > 0 {
        check_argv.extend(["--sim-max-n", &sim_max_n]);
    }
    let mut bench_argv = vec![
        "--n-min",
        "2^8",
        "--n-max",
        &args.n_max,
        "--causality",
        "causal,non-causal",
        "--cell-seconds",
        "0.5",
        "--max-cell-seconds",
        "20",
        "--out",
        &out,
    ];
    if let Some(selection) = args.backends.as_deref() {
        check_argv.extend(["--backends", selection]);
        bench_argv.extend(["--backends", selection]);
    }
    let check_args = parse::<check::CheckArgs>(&check_argv)?;
    let bench_args = parse::<bench::BenchArgs>(&bench_argv)?;
    let report_args = parse::<report::ReportArgs>(&[&out, "--out-dir", &out_dir])?;
    bench::validate(&bench_args)?;
    crate::results::prepare_output_dir(&args.out_dir)?;

    eprintln!("== linattn check: every available backend against the f64 oracle");
    let check_code = check::run(check_args)?;

    eprintln!(
        "\n== linattn bench: N = 2^8 .. {} (results: {out})",
        args.n_max
    );
    let bench_code = bench::run(bench_args)?;

    eprintln!("\n== linattn report: {out_dir}/REPORT.md");
    let report_code = report::run(report_args)?;

    // The check's verdict decides: a failing backend must not hide behind a good table.
    Ok(
        if [&check_code, &bench_code, &report_code]
            .iter()
            .all(|c| **c == ExitCode::SUCCESS)
        {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        },
    )
}
