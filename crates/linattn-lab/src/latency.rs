//! `linattn latency`: the latency microbenchmarks of `kernels/latency_probe.cu`, cycles per
//! instruction beside the performance model's constant for its class. On a GPU a measurement
//! (what the model's constants in `linattn_ptxsim::arch` should be replaced with); on the
//! simulator a read-back of the model's own constants.

use linattn_core::AttnError;
use linattn_cuda::latency_probe::{self, Probe, ProbeRun, ProbeSizes, PROBES};
use linattn_cuda::Platform;
use serde::Serialize;
use std::path::PathBuf;
use std::process::ExitCode;
use tabled::{settings::Style, Table, Tabled};

use crate::results::{self, Environment};

#[derive(clap::Args)]
pub struct LatencyArgs {
    /// Where the probes run: cuda (a GPU) or sim (the PTX simulator: reads back the model).
    /// Default: cuda when a GPU is present, else sim.
    #[arg(long)]
    platform: Option<String>,
    /// Launches per probe (the median is reported, min and max beside it).
    #[arg(long, default_value_t = 5)]
    repeats: usize,
    /// Write the raw samples and the environment as JSON here (atomically).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Only probes whose name contains this text.
    #[arg(long)]
    filter: Option<String>,
}

/// The JSON `--out` writes.
#[derive(Serialize)]
struct LatencyFile {
    schema: u32,
    /// What the numbers are: "measured" on a GPU, "model read-back" on the simulator.
    kind: &'static str,
    platform: &'static str,
    arch: String,
    environment: Environment,
    probes: Vec<ProbeRecord>,
}

#[derive(Serialize)]
struct ProbeRecord {
    name: &'static str,
    what: &'static str,
    class: &'static str,
    steps: u32,
    instructions_per_link: u32,
    footprint_bytes: u64,
    /// `%clock64` cycles of the timed loop, one per launch.
    cycles: Vec<u64>,
    median_cycles_per_link: Option<f64>,
    /// (min, max) cycles per link over the launches: the noise.
    range_cycles_per_link: Option<(f64, f64)>,
    /// The model's constant for the class × instructions per link (a group probe adds its
    /// fma chain; the model has no caches, so an L2 hit is charged as a DRAM access).
    constant_cycles_per_link: f64,
    /// The simulator's read-back of the same PTX (the latency model as it times it), on a GPU
    /// run; the simulator's own figure on a simulator run.
    model_cycles_per_link: Option<f64>,
    error: Option<String>,
}

#[derive(Tabled)]
struct Row {
    probe: &'static str,
    chain: &'static str,
    class: &'static str,
    #[tabled(rename = "constant")]
    constant: String,
    #[tabled(rename = "cycles/link (median)")]
    median: String,
    #[tabled(rename = "min..max")]
    range: String,
    #[tabled(rename = "model (sim, same PTX)")]
    model: String,
    #[tabled(rename = "measured/model")]
    ratio: String,
}

/// Every selected probe on `exec`, each a run or why it failed.
fn run_probes(
    exec: &dyn linattn_cuda::Executor,
    platform: Platform,
    repeats: usize,
    filter: Option<&str>,
) -> Vec<(Probe, Result<ProbeRun, AttnError>)> {
    let sizes = ProbeSizes::for_platform(platform);
    // On the simulator %clock64 is the latency model's clock, kept only while profiling.
    let sim = match platform {
        Platform::Sim => linattn_cuda::executor::sim::shared().ok(),
        Platform::Cuda => None,
    };
    if let Some(sim) = &sim {
        sim.start_profile();
    }
    let runs = PROBES
        .iter()
        .filter(|p| filter.is_none_or(|f| p.name.contains(f)))
        .map(|probe| {
            let run = latency_probe::run_probe(exec, probe, sizes, repeats);
            if let Err(e) = &run {
                eprintln!("latency: {} on {platform:?} failed: {e}", probe.name);
            }
            (*probe, run)
        })
        .collect();
    if let Some(sim) = &sim {
        sim.finish_profile();
    }
    runs
}

fn range_per_link(run: &ProbeRun) -> Option<(f64, f64)> {
    let per = |c: u64| c as f64 / f64::from(run.steps);
    let min = run.cycles.iter().copied().min()?;
    let max = run.cycles.iter().copied().max()?;
    Some((per(min), per(max)))
}

pub fn run(args: LatencyArgs) -> Result<ExitCode, AttnError> {
    if args.repeats == 0 {
        return Err(AttnError::InvalidArgument(
            "--repeats must be at least 1".into(),
        ));
    }
    let platform = crate::registry::probe_platform(args.platform.as_deref())?;
    if let Some(path) = &args.out {
        results::check_writable(path)?;
    }
    let exec = platform.executor()?;
    let latencies = latency_probe::model_latencies(exec.as_ref());
    let filter = args.filter.as_deref();
    let runs = run_probes(exec.as_ref(), platform, args.repeats, filter);
    // Beside a GPU's measurement, the simulator's timing of the same PTX: what the model
    // predicts for these very chains (one repeat: it is deterministic).
    let model: Vec<Option<f64>> = match platform {
        Platform::Sim => runs
            .iter()
            .map(|(_, r)| r.as_ref().ok().and_then(ProbeRun::median_per_link))
            .collect(),
        Platform::Cuda => match Platform::Sim.executor() {
            Ok(sim) => run_probes(sim.as_ref(), Platform::Sim, 1, filter)
                .iter()
                .map(|(_, r)| r.as_ref().ok().and_then(ProbeRun::median_per_link))
                .collect(),
            Err(e) => {
                eprintln!("latency: no simulator to set the model beside: {e}");
                vec![None; runs.len()]
            }
        },
    };
    let mut records = Vec::new();
    let mut rows = Vec::new();
    let mut failures = 0;
    for ((probe, run), model) in runs.iter().zip(model) {
        let constant = probe.model_cycles_per_link(&latencies);
        let ok = run.as_ref().ok();
        let median = ok.and_then(ProbeRun::median_per_link);
        let range = ok.and_then(range_per_link);
        if run.is_err() {
            failures += 1;
        }
        rows.push(Row {
            probe: probe.name,
            chain: probe.what,
            class: probe.class.name(),
            constant: format!("{constant:.0}"),
            median: median.map_or_else(|| "failed".into(), |m| format!("{m:.1}")),
            range: range.map_or_else(String::new, |(a, b)| format!("{a:.1}..{b:.1}")),
            model: model.map_or_else(String::new, |m| format!("{m:.1}")),
            ratio: median
                .zip(model)
                .map_or_else(String::new, |(m, s)| format!("{:.2}", m / s)),
        });
        records.push(ProbeRecord {
            name: probe.name,
            what: probe.what,
            class: probe.class.name(),
            steps: ok.map_or(0, |r| r.steps),
            instructions_per_link: probe.per_link,
            footprint_bytes: ok.map_or(0, |r| r.footprint_bytes),
            cycles: ok.map_or_else(Vec::new, |r| r.cycles.clone()),
            median_cycles_per_link: median,
            range_cycles_per_link: range,
            constant_cycles_per_link: constant,
            model_cycles_per_link: model,
            error: run.as_ref().err().map(ToString::to_string),
        });
    }
    let kind = match platform {
        Platform::Cuda => "measured",
        Platform::Sim => "model read-back (the simulator's clock is the latency model)",
    };
    let arch = exec.arch();
    println!(
        "latency probes on {} (sm_{}{}), {kind}; a link of lp_conversion is 2 conversions, \
         of the group probes one group of loads plus its fma chain",
        exec.info().name,
        arch.major,
        arch.minor
    );
    println!("{}", Table::new(&rows).with(Style::markdown()));
    if let Some(path) = &args.out {
        let gpu = match platform {
            Platform::Cuda => crate::bench::gpu_environment(),
            Platform::Sim => None,
        };
        let file = LatencyFile {
            schema: 1,
            kind,
            platform: match platform {
                Platform::Cuda => "cuda",
                Platform::Sim => "sim",
            },
            arch: format!("sm_{}{}", arch.major, arch.minor),
            environment: results::probe_environment(gpu),
            probes: records,
        };
        results::write_json_atomic(path, &file)?;
        println!("wrote {}", path.display());
    }
    Ok(if failures == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
