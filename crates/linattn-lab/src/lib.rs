//! `linattn`: check every backend against the f64 oracle, sweep speed and memory over N,
//! compare two runs for regressions, render reports, and run attention on .npy files.
//!
//! A library with a thin binary (`src/main.rs`) so that fuzz targets reach the parsers
//! through [`fuzz_entry`].

mod all;
mod attend;
mod bench;
mod check;
mod compare;
mod decode;
mod decode_bench;
mod decode_model;
mod display;
mod exit;
mod kernels;
mod kv_cache;
mod latency;
mod mma_probe;
mod mufu;
mod mufu_verify;
mod npy;
mod plot;
pub mod profile;
mod registry;
mod report;
mod results;
mod skip_reason;
mod sparsity;
mod stats;
mod term;

pub mod fuzz_entry;

pub use exit::EXIT_UNAVAILABLE;

use clap::{Parser, Subcommand};
use exit::exit_unavailable;
use linattn_core::AttnError;
use std::process::ExitCode;

/// `linattn --version`: the package version and the commit the binary was built from.
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("LINATTN_BUILD_COMMIT"),
    env!("LINATTN_BUILD_DIRTY_SUFFIX"),
    ")"
);

#[derive(Parser)]
#[command(
    name = "linattn",
    version = VERSION,
    about = "Linear attention: every form, checked and timed"
)]
struct Cli {
    /// Architecture the PTX simulator models for the `sim/*` backends: sm_90 (H100 limits) or
    /// sm_80 (A100). Also `LINATTN_SIM_ARCH`.
    #[arg(long, global = true, value_name = "ARCH", value_parser = parse_sim_arch)]
    sim_arch: Option<linattn_cuda::runtime::Arch>,
    #[command(subcommand)]
    command: Command,
}

fn parse_sim_arch(text: &str) -> Result<linattn_cuda::runtime::Arch, String> {
    match text.trim().trim_start_matches("sm_") {
        "80" => Ok(linattn_cuda::runtime::Arch::SM80),
        "90" => Ok(linattn_cuda::runtime::Arch::SM90),
        _ => Err(format!("'{text}': the simulator models sm_80 and sm_90")),
    }
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
    /// Streaming decode from .npy files: prefill P tokens, step the rest with the carried state.
    Decode(decode::DecodeArgs),
    /// Compile every kernel variant with NVRTC and print ptxas registers/spills per kernel.
    Kernels(kernels::KernelsArgs),
    /// Time dependent-instruction chains with %clock64 (kernels/latency_probe.cu): cycles per
    /// instruction class beside the performance model's constant. On a GPU a measurement; on
    /// the simulator a read-back of the model.
    Latency(latency::LatencyArgs),
    /// How the tensor cores sum: mma.sync on test vectors (kernels/mma_probe.cu), scored
    /// against candidate accumulation models (exact; block × kept bits × RZ/RN).
    MmaProbe(mma_probe::MmaProbeArgs),
    /// Capture the GPU's MUFU results (ex2, rsqrt, rcp) as the simulator's tables, and verify
    /// that they predict the device bit for bit (issue #23).
    Mufu(mufu::MufuArgs),
    /// How concentrated attention rows are (SPEC §7): S(a) by streamed Monte Carlo against
    /// the closed forms, over n and γ; table, JSON, SVG.
    Sparsity(Box<sparsity::SparsityArgs>),
    /// Count what sim/* kernels execute (instructions, sectors, bank conflicts, occupancy)
    /// and model their time on the simulated part.
    Profile(Box<profile::ProfileArgs>),
}

impl Command {
    /// Whether the command compiles CUDA kernels (for the simulator or a GPU), so that a
    /// missing NVRTC is worth installing first.
    fn needs_kernels(&self) -> bool {
        let kernel_family = |backend: &str| matches!(registry::family(backend), "sim" | "cuda");
        match self {
            Command::All(_)
            | Command::Check(_)
            | Command::Bench(_)
            | Command::Profile(_)
            | Command::Kernels(_)
            | Command::Latency(_)
            | Command::MmaProbe(_)
            | Command::Mufu(_) => true,
            Command::Attend(args) => kernel_family(args.backend()),
            Command::Decode(args) => kernel_family(args.backend()),
            Command::Compare(_) | Command::Report(_) | Command::Sparsity(_) => false,
        }
    }
}

/// The `linattn` command line: parses the arguments, runs the subcommand, maps errors to
/// exit codes (2: bad input, 1: anything else).
pub fn run_cli() -> ExitCode {
    let cli = Cli::parse();
    if cli.command.needs_kernels() {
        // Here and nowhere else (tests never download): before the first NVRTC probe, whose
        // answer the process keeps.
        linattn_cuda::runtime::provision::provision_nvrtc(&mut std::io::stderr());
    }
    if let Some(arch) = cli.sim_arch {
        if let Err(e) = linattn_cuda::executor::sim::set_arch(arch) {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    }
    let result: Result<ExitCode, AttnError> = match cli.command {
        Command::All(args) => all::run(args),
        Command::Check(args) => check::run(args),
        Command::Bench(args) => bench::run(*args),
        Command::Compare(args) => compare::run(args),
        Command::Report(args) => report::run(args),
        Command::Attend(args) => attend::run(args),
        Command::Decode(args) => decode::run(args),
        Command::Kernels(args) => kernels::run(args),
        Command::Latency(args) => latency::run(args),
        Command::MmaProbe(args) => mma_probe::run(args),
        Command::Mufu(args) => mufu::run(args),
        Command::Profile(args) => profile::run(*args),
        Command::Sparsity(args) => sparsity::run(*args),
    };
    match result {
        Ok(code) => code,
        Err(e) if e.is_unavailable() => {
            eprintln!("error: {e}");
            exit_unavailable(&e.to_string())
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(if e.is_user_error() { 2 } else { 1 })
        }
    }
}
