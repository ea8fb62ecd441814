//! The latency probes (kernels/latency_probe.cu) are dependency chains and `%clock64` times
//! them. On the simulator, whose `%clock64` is the latency model's issue clock, every probe
//! must read back its class's constant (plus at most the loop and address arithmetic
//! around the chain, bounded below); a probe whose chain the compiler broke, or a clock that
//! does not follow issue, reads far less. On a GPU every probe must run and give a plausible
//! latency (a dependent link takes at least 2 cycles, at most 10⁵).

use linattn_cuda::latency_probe::{self, ModelClass, ProbeSizes, PROBES};
use linattn_cuda::Platform;
use linattn_testkit::stamp_executors;

fn main() {
    let trials = stamp_executors!(every_probe_times_its_chain);
    linattn_testkit::run(trials)
}

/// Extra cycles per link the simulator may add to a class's constant: loop control spread
/// over the ×16 unrolled chain, and for the group probes their address arithmetic.
fn slack(class: ModelClass, group: bool) -> f64 {
    match (class, group) {
        (_, true) => 40.0,
        (ModelClass::Barrier, _) => 3.0,
        _ => 1.0,
    }
}

fn every_probe_times_its_chain(platform: Platform) -> Result<(), String> {
    let exec = platform.executor().map_err(|e| e.to_string())?;
    let sim = match platform {
        Platform::Sim => Some(linattn_cuda::executor::sim::shared().map_err(|e| e.to_string())?),
        Platform::Cuda => None,
    };
    if let Some(sim) = &sim {
        sim.start_profile();
    }
    let lat = latency_probe::model_latencies(exec.as_ref());
    let sizes = ProbeSizes::for_platform(platform);
    let mut problems = Vec::new();
    for probe in &PROBES {
        let run = match latency_probe::run_probe(exec.as_ref(), probe, sizes, 2) {
            Ok(run) => run,
            Err(e) => {
                problems.push(format!("{}: {e}", probe.name));
                continue;
            }
        };
        let Some(per_link) = run.median_per_link() else {
            problems.push(format!("{}: no samples", probe.name));
            continue;
        };
        let ok = match platform {
            Platform::Sim => {
                let constant = probe.model_cycles_per_link(&lat);
                let group = probe.name.contains("group");
                (constant..=constant + slack(probe.class, group)).contains(&per_link)
            }
            Platform::Cuda => (2.0..=1e5).contains(&per_link),
        };
        if !ok {
            problems.push(format!(
                "{}: {per_link:.2} cycles per link (constant {:.0})",
                probe.name,
                probe.model_cycles_per_link(&lat)
            ));
        }
    }
    if let Some(sim) = &sim {
        sim.finish_profile();
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n"))
    }
}
