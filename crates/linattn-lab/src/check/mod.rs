//! `linattn check`: every selected backend against the f64 oracle of its algorithm, on a
//! grid of problems, forward and (when the backend has a backward) dQ, dK, dV.
//!
//! * Linear backends are compared with `linattn_cpu::oracle`, softmax backends with
//!   `linattn_softmax::oracle`. For f16/bf16 backends the oracle sees the inputs rounded to
//!   that precision, so the comparison measures the backend's arithmetic, not the rounding
//!   of its operands (f32 rounding is ~300× below the f32 tolerance and is not applied).
//! * A case passes when the RMS ratio of O and of each gradient is within the backend's
//!   `Precision::rms_tolerance` and nothing is NaN/Inf.
//! * `Unavailable` (no GPU, no driver) skips the whole backend once, visibly; a problem the
//!   backend does not implement counts as n/a; an error or a panic inside a backend fails
//!   that case with its message, and the run goes on.

mod case;
mod grid;
mod oracle;
mod record;
mod summary;

use crate::registry;
use crate::results::write_bytes_atomic;
use crate::term::progress_bar;
use case::check_case;
use grid::{case_applies, default_grid, full_grid, long_cases};
use linattn_core::{AttnError, Inputs};
use linattn_cuda::executor::sim::{self, MmaModel, Numerics};
use oracle::{oracle_seconds, OracleKey, Reference};
use record::{CaseRecord, Outcome};
use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;
use summary::{failures_table, summary_table, BackendSummary, CheckReport, Entry};

/// Failing cases listed under the table.
const WORST_SHOWN: usize = 10;

#[derive(clap::Args)]
#[command(after_help = "\
Default grid: N ∈ {1, 7, 63, 65, 130, 1100}; (D, M) cycling through pairs of {16, 32, 48, 64, 80, \
128} with M ≠ D; B = 2, H = 3; causal and non-causal; every feature map (favor with R = 32); \
default ε; plus one λ = 0.97 decay case per causality, and one causal case per N with D, M ∈ \
{64, 128} and a fused map (elu+1, relu, identity) for the tensor-core kernels.
Verdict: a case passes when O and each gradient (dq, dk, dv, for backends with a backward) \
have rms(got − oracle) / rms(oracle) within the precision's tolerance and no NaN/Inf. A \
gradient whose RMS is under 1e-2 of its case's largest gradient RMS (it cancels to ~0 by \
construction, e.g. dq, dk at N = 1) is measured against that largest instead of its own \
vanishing RMS; every other tensor on its own; the JSON keeps both. Softmax backends run the cases with \
map elu+1 and no decay only (they ignore map, ε and decay). A case a backend does not \
implement counts as n/a; a backend that cannot run on this machine shows 'skipped: <reason>'.
Exit status: 0 when no backend failed (skipped is not a failure), 1 on any failure, 2 on bad \
arguments.")]
pub struct CheckArgs {
    /// Backends to check: comma-separated names or globs (`cpu/*`, `*f16`,
    /// `cpu-ref/causal_recurrent/f64`). Default: every backend.
    #[arg(long, value_name = "PATTERNS")]
    backends: Option<String>,
    /// Run the full cartesian grid (every N × D × M × causality × map × decay) instead of
    /// the covering default grid.
    #[arg(long)]
    full: bool,
    /// Add N ∈ {4096, 16384, 65536} (B = 1, H = 2, D = M = 64, elu+1) and N = 4096 at D = M = 128 (causal, λ = 0.97) for non-reference backends
    /// (not cpu-ref/*, not softmax on the CPU; softmax elsewhere up to N = 4096 only).
    #[arg(long)]
    long: bool,
    /// Base seed of the random inputs (case i uses seed + i).
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Write per-case results as JSON to this file (atomically).
    #[arg(long, value_name = "PATH")]
    json: Option<PathBuf>,
    /// Leave out, for the simulated backends (`sim/*`) only, the cases longer than N: the
    /// simulator is thousands of times slower than a GPU, and the default grid's N = 1100
    /// cases are most of its time (`linattn all` passes 130). Default (or 0, as for
    /// `linattn all`): no limit.
    #[arg(long, value_name = "N")]
    sim_max_n: Option<usize>,
    /// How the simulated backends round: `exact` (the PTX as written; `.approx` functions
    /// correctly rounded, `mma` sums exact), `as-compiled` (as exact, but each multiply-add
    /// that ptxas fuses into an FFMA rounded once, as the GPU runs it) or `pessimistic` (each
    /// `.approx` result at the edge of the PTX ISA's error bound, `mma` truncating as tensor
    /// cores do). Tolerances are the same in all three.
    #[arg(long, value_name = "MODE", default_value = "exact", value_parser = parse_numerics)]
    numerics: Numerics,
    /// How the simulator's `mma` sums, whatever `--numerics` says: exact, a100 (Fasi et al.'s
    /// truncating model) or h100 (the H100's, as `linattn mma-probe` measured it). Default: the numerics mode's own.
    #[arg(long, value_name = "MODEL", value_parser = parse_mma_model)]
    mma_model: Option<MmaModel>,
    /// A directory of MUFU tables (`linattn mufu --platform cuda`): with `--numerics
    /// as-compiled`, the simulated ex2, rsqrt and rcp `.approx` results are the captured
    /// GPU's own bits. Also `LINATTN_MUFU_TABLES`.
    #[arg(long, value_name = "DIR")]
    mufu_tables: Option<PathBuf>,
    /// The order in which the simulator (`sim/*`) runs the warps of a CTA between
    /// synchronisation points: in-order (default), reversed, highest-pc. Races are reported
    /// in every order; another order shows what an unordered access would compute.
    #[arg(long, value_name = "ORDER")]
    schedule: Option<String>,
    /// Run the simulator without globalcheck (global-memory races between threads and
    /// CTAs): it costs 1.4–1.7× the simulator's CPU time and ~9× its memory. On by default
    /// here; `linattn all`, bench
    /// and the test suites' executor run without it.
    #[arg(long)]
    no_globalcheck: bool,
    /// How the simulator lays out `.shared` variables: `declared` (default), or `adversarial`
    /// (each at its declared `.align` and no more, so a vector access wider than that faults).
    #[arg(long, value_name = "PLACEMENT", value_parser = ["declared", "adversarial"])]
    shared_placement: Option<String>,
    /// Run every backend's forward alone, with no ∂L/∂O staged, and judge O only: the
    /// inference path, which a backend with a backward does not take by default (the chunked
    /// form runs other kernels when a backward follows; `LINATTN_CC_SEGMENTS` picks its
    /// segmented forward at any shape).
    #[arg(long)]
    forward_only: bool,
}

fn parse_numerics(s: &str) -> Result<Numerics, String> {
    s.parse()
}

fn parse_mma_model(s: &str) -> Result<MmaModel, String> {
    s.parse()
}

impl CheckArgs {
    /// `--shared-placement`, if given.
    fn placement(&self) -> Option<linattn_cuda::executor::sim::Placement> {
        use linattn_cuda::executor::sim::Placement;
        self.shared_placement.as_deref().map(|p| match p {
            "adversarial" => Placement::Adversarial,
            _ => Placement::Declared,
        })
    }

    /// `--sim-max-n`, where it limits anything (0 means no limit, as in `linattn all`).
    fn sim_limit(&self) -> Option<usize> {
        self.sim_max_n.filter(|&n| n > 0)
    }

    /// Whether `case` is checked on `info`'s backend: in its grid, and within the simulated
    /// backends' length limit.
    fn checks(&self, info: &linattn_core::BackendInfo, case: &grid::Case) -> bool {
        let too_long_to_simulate = info.device == linattn_core::DeviceKind::Sim
            && self.sim_limit().is_some_and(|n| case.problem.shape.seq > n);
        case_applies(info, case) && !too_long_to_simulate
    }
}

pub fn run(args: CheckArgs) -> Result<ExitCode, AttnError> {
    linattn_cuda::executor::sim::set_numerics(args.numerics)?;
    linattn_cuda::executor::sim::set_mma_model(args.mma_model)?;
    if let Some(dir) = &args.mufu_tables {
        crate::mufu::install_tables(dir, args.numerics)?;
    }
    let schedule = match &args.schedule {
        Some(name) => name
            .parse()
            .map_err(|e| AttnError::InvalidArgument(format!("--schedule: {e}")))?,
        None => Default::default(),
    };
    sim::set_checks(sim::Checks {
        globalcheck: !args.no_globalcheck,
        schedule,
        ..sim::Checks::default()
    })?;
    if let Some(placement) = args.placement() {
        linattn_cuda::executor::sim::set_shared_placement(placement)?;
    }
    let backends = registry::selected_backends(args.backends.as_deref())?;
    if let Some(path) = &args.json {
        crate::results::check_writable(path)
            .map_err(|e| AttnError::InvalidArgument(format!("--json {e}")))?;
    }
    let mut cases = if args.full {
        full_grid()
    } else {
        default_grid()
    };
    if args.long {
        let first = cases.len();
        cases.extend(long_cases(first));
    }
    let mut entries: Vec<Entry> = backends
        .into_iter()
        .map(|backend| {
            let summary = BackendSummary::new(backend.info());
            Entry { backend, summary }
        })
        .collect();

    let total: usize = entries
        .iter()
        .map(|e| {
            cases
                .iter()
                .filter(|c| args.checks(e.backend.info(), c))
                .count()
        })
        .sum();
    let progress = progress_bar(total as u64, false);
    let sim_limit = args
        .sim_limit()
        .map_or(String::new(), |n| format!("; sim/* only up to N = {n}"));
    eprintln!(
        "checking {} backend(s) on {} case(s) (seed {}{sim_limit}; {} numerics, mma {}{})",
        entries.len(),
        cases.len(),
        args.seed,
        args.numerics,
        args.mma_model.unwrap_or(args.numerics.mma_model()),
        if args.forward_only {
            "; the forward only"
        } else {
            ""
        }
    );

    let mut records: Vec<CaseRecord> = Vec::new();
    for case in &cases {
        let seed = args.seed.wrapping_add(case.index as u64);
        // --forward-only: no ∂L/∂O, so no backend stages a forward a backward follows.
        let inputs = match Inputs::random(case.problem.shape, seed, !args.forward_only) {
            Ok(inputs) => inputs,
            Err(e) => {
                // Cannot happen for the fixed grid (non-zero dims); reported, not panicked.
                return Err(AttnError::State(format!(
                    "inputs for case {} ({}): {e}",
                    case.index, case.problem
                )));
            }
        };
        let mut oracle_cache: HashMap<OracleKey, Result<Reference, String>> = HashMap::new();
        for entry in &mut entries {
            if entry.summary.skipped.is_some() || !args.checks(entry.backend.info(), case) {
                continue;
            }
            progress.set_message(format!("{} {}", entry.summary.backend, case.problem));
            let started = std::time::Instant::now();
            let oracle_before = oracle_seconds(&oracle_cache);
            let record = check_case(
                entry,
                case,
                seed,
                &inputs,
                args.forward_only,
                &mut oracle_cache,
            );
            entry.summary.seconds += (started.elapsed().as_secs_f64()
                - (oracle_seconds(&oracle_cache) - oracle_before))
                .max(0.0);
            progress.inc(1);
            if let Some(record) = record {
                entry.summary.add(&record);
                records.push(record);
            }
        }
    }
    progress.finish_and_clear();

    let summaries: Vec<BackendSummary> = entries
        .into_iter()
        .map(|mut e| {
            e.summary.finish();
            e.summary
        })
        .collect();

    println!("{}", summary_table(&summaries));
    if let Some(sim) = linattn_cuda::executor::sim::started() {
        let c = sim.counters();
        let seconds: f64 = summaries
            .iter()
            .filter(|s| registry::family(&s.backend) == "sim")
            .map(|s| s.seconds)
            .sum();
        println!(
            "PTX simulator ({}): {:.3e} warp instructions ({:.3e} thread instructions) in {:.0} s of \
             sim/* cases, {:.2} M warp instructions/s",
            linattn_cuda::Executor::info(sim.as_ref()).name,
            c.warp_instructions as f64,
            c.thread_instructions as f64,
            seconds,
            c.warp_instructions as f64 / seconds.max(1e-9) / 1e6
        );
    }
    let mut failures: Vec<&CaseRecord> = records
        .iter()
        .filter(|r| matches!(r.outcome, Outcome::Fail | Outcome::Error))
        .collect();
    if !failures.is_empty() {
        // Worst first: errors (no metrics), then by how far past the tolerance.
        failures.sort_by(|a, b| badness(b).total_cmp(&badness(a)));
        println!(
            "\n{} failing case(s){}:",
            failures.len(),
            if failures.len() > WORST_SHOWN {
                format!(", the {WORST_SHOWN} worst")
            } else {
                String::new()
            }
        );
        println!(
            "{}",
            failures_table(&failures[..failures.len().min(WORST_SHOWN)])
        );
    }

    if let Some(path) = &args.json {
        let report = CheckReport {
            seed: args.seed,
            grid: if args.full { "full" } else { "default" },
            long: args.long,
            sim_max_n: args.sim_limit(),
            numerics: args.numerics.name(),
            mma_model: args.mma_model.unwrap_or(args.numerics.mma_model()).name(),
            forward_only: args.forward_only,
            backends: &summaries,
            cases: &records,
        };
        let text = serde_json::to_string_pretty(&report)
            .map_err(|e| AttnError::State(format!("serialising check results: {e}")))?;
        write_bytes_atomic(path, text.as_bytes())?;
        eprintln!("wrote {}", path.display());
    }

    let any_failed = summaries.iter().any(|s| s.failed > 0);
    let nothing_ran = summaries.iter().all(|s| s.run == 0);
    if nothing_ran && summaries.iter().any(|s| s.skipped.is_some()) {
        // Nothing could run at all: say so with its own exit code, not a silent pass.
        let reason = summaries
            .iter()
            .find_map(|s| s.skipped.clone())
            .unwrap_or_default();
        eprintln!("no selected backend can run on this machine: {reason}");
        return Ok(crate::exit::exit_unavailable(&reason));
    }
    Ok(if any_failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// How bad a failing case is, for ordering: multiples of the tolerance, errors worst.
fn badness(record: &CaseRecord) -> f64 {
    if record.outcome == Outcome::Error {
        f64::INFINITY
    } else {
        record.worst_rms() / record.tolerance
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use linattn_core::{BackendInfo, DeviceKind, Form, Precision};

    #[derive(Parser)]
    struct Wrap {
        #[command(flatten)]
        args: CheckArgs,
    }

    fn args(argv: &[&str]) -> CheckArgs {
        Wrap::try_parse_from(std::iter::once("check").chain(argv.iter().copied()))
            .unwrap()
            .args
    }

    #[test]
    fn sim_max_n_leaves_out_long_cases_of_simulated_backends_only() {
        let info = |name: &str, device| BackendInfo {
            name: name.into(),
            device,
            precision: Precision::F32,
            algorithm: linattn_core::Algorithm::Linear(Form::Recurrent),
            backward: None,
        };
        let sim = info("sim/causal_recurrent/f32", DeviceKind::Sim);
        let cpu = info("cpu/causal_recurrent/f32", DeviceKind::Cpu);
        let gpu = info("cuda/causal_recurrent/f32", DeviceKind::Cuda);
        let grid = default_grid();
        let limited = args(&["--sim-max-n", "130"]);
        let unlimited = args(&[]);
        let count = |a: &CheckArgs, i: &BackendInfo| grid.iter().filter(|c| a.checks(i, c)).count();
        let long = grid.iter().filter(|c| c.problem.shape.seq > 130).count();
        assert!(long > 0);
        assert_eq!(count(&limited, &sim), count(&unlimited, &sim) - long);
        assert!(grid
            .iter()
            .filter(|c| limited.checks(&sim, c))
            .all(|c| c.problem.shape.seq <= 130));
        let zero = args(&["--sim-max-n", "0"]);
        assert_eq!(count(&zero, &sim), count(&unlimited, &sim));
        assert_eq!(count(&limited, &cpu), count(&unlimited, &cpu));
        assert_eq!(count(&limited, &gpu), count(&unlimited, &gpu));
    }

    #[test]
    fn numerics_defaults_to_exact_and_rejects_unknown_modes() {
        assert_eq!(args(&[]).numerics, Numerics::Exact);
        let pessimistic = args(&["--numerics", "pessimistic"]);
        assert_eq!(pessimistic.numerics, Numerics::Pessimistic);
        let as_compiled = args(&["--numerics", "as-compiled"]);
        assert_eq!(as_compiled.numerics, Numerics::AsCompiled);
        let err = Wrap::try_parse_from(["check", "--numerics", "fast"])
            .err()
            .expect("an unknown mode is refused");
        assert!(
            err.to_string().contains("exact, as-compiled, pessimistic"),
            "{err}"
        );
    }

    #[test]
    fn shared_placement_is_declared_or_adversarial() {
        use linattn_cuda::executor::sim::Placement;
        assert_eq!(args(&[]).placement(), None);
        let adversarial = args(&["--shared-placement", "adversarial"]).placement();
        assert_eq!(adversarial, Some(Placement::Adversarial));
        let declared = args(&["--shared-placement", "declared"]).placement();
        assert_eq!(declared, Some(Placement::Declared));
        let bad = std::iter::once("check").chain(["--shared-placement", "tight"]);
        assert!(Wrap::try_parse_from(bad).is_err());
    }
}
