//! `linattn`: check every backend against the f64 oracle, sweep speed and memory over N,
//! compare two runs for regressions, render reports, and run attention on .npy files.

mod all;
mod attend;
mod bench;
mod check;
mod compare;
mod kernels;
mod npy;
mod registry;
mod report;
mod results;
mod stats;

use clap::{Parser, Subcommand};
use linattn_core::{AttnError, CountingAllocator};
use std::process::ExitCode;

/// Counts host allocations so `bench` can report CPU backends' peak memory.
#[global_allocator]
static ALLOC: CountingAllocator = CountingAllocator;

#[derive(Parser)]
#[command(
    name = "linattn",
    version,
    about = "Linear attention: every form, checked and timed"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// The main job: check, then a bench sweep over N, then the report.
    All(all::AllArgs),
    /// Check every available backend against the f64 oracle (forward and gradients).
    Check(check::CheckArgs),
    /// Sweep N (and other axes) for chosen backends: time, memory, derived rates, JSON.
    Bench(Box<bench::BenchArgs>),
    /// Compare two bench JSON files cell by cell; exit 1 when something regressed.
    Compare(compare::CompareArgs),
    /// Render markdown tables and SVG plots from bench JSON files.
    Report(report::ReportArgs),
    /// Run one backend on q, k, v (and dO) from .npy files; write O (and dQ, dK, dV).
    Attend(attend::AttendArgs),
    /// Compile every kernel variant with NVRTC and print ptxas registers/spills per kernel.
    Kernels(kernels::KernelsArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result: Result<ExitCode, AttnError> = match cli.command {
        Command::All(args) => all::run(args),
        Command::Check(args) => check::run(args),
        Command::Bench(args) => bench::run(*args),
        Command::Compare(args) => compare::run(args),
        Command::Report(args) => report::run(args),
        Command::Attend(args) => attend::run(args),
        Command::Kernels(args) => kernels::run(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(if e.is_user_error() { 2 } else { 1 })
        }
    }
}
