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

use crate::registry;
use crate::results::write_bytes_atomic;
use linattn_core::{
    Algorithm, AttnError, Backend, Causality, DeviceKind, ErrorMetrics, FeatureMap, Grads, Inputs,
    Precision, Problem, Shape, Tensor, Unsupported,
};
use serde::Serialize;
use std::collections::HashMap;
use std::io::IsTerminal;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::process::ExitCode;
use tabled::builder::Builder;
use tabled::settings::Style;

/// Sequence lengths of the default grid: single token, odd sizes around 64 (chunk and tile
/// edges) and past two chunks, and one long enough for accumulated error to show.
const SEQ_LENS: [usize; 6] = [1, 7, 63, 65, 130, 1100];
/// Head dims the grid draws D and M from.
const HEAD_DIMS: [usize; 6] = [16, 32, 48, 64, 80, 128];
/// (D, M) pairs the default grid cycles through: M ≠ D, every head dim once as D and once
/// as M, and the tensor-core sizes (64, 128) first so tiled kernels limited to them get
/// cases at several N.
const DEFAULT_PAIRS: [(usize, usize); 6] =
    [(64, 128), (128, 64), (16, 48), (48, 80), (80, 32), (32, 16)];
/// Extra lengths of `--long`.
const LONG_SEQ_LENS: [usize; 3] = [4096, 16384, 65536];
/// The softmax oracle is O(N²): beyond this length it would take hours on the CPU.
const SOFTMAX_ORACLE_MAX_SEQ: usize = 4096;
const BATCH: usize = 2;
const HEADS: usize = 3;
/// FAVOR+ features of the grid's favor map.
const FAVOR_FEATURES: usize = 32;
/// λ of the decay cases.
const DECAY: f64 = 0.97;
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
gradient that cancels to ~0 by construction (dq, dk at N = 1) is measured against the \
largest gradient RMS of its case instead of its own vanishing RMS; the JSON keeps both. Softmax backends run the cases with \
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
    /// Add N ∈ {4096, 16384, 65536} (B = 1, H = 2, D = M = 64, elu+1) for non-reference backends
    /// (not cpu-ref/*, not softmax on the CPU; softmax elsewhere up to N = 4096 only).
    #[arg(long)]
    long: bool,
    /// Base seed of the random inputs (case i uses seed + i).
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Write per-case results as JSON to this file (atomically).
    #[arg(long, value_name = "PATH")]
    json: Option<PathBuf>,
}

/// One problem of the grid. `index` is its position in the grid (and its seed offset).
#[derive(Debug, Clone, Copy)]
struct Case {
    index: usize,
    problem: Problem,
    long: bool,
}

/// The covering default grid: every N, causality and map, with (D, M) cycling through
/// pairs in which every head dim appears as D and as M; plus the decay cases.
fn default_grid() -> Vec<Case> {
    let pairs = DEFAULT_PAIRS;
    let mut problems = Vec::new();
    for &seq in &SEQ_LENS {
        for causality in [Causality::Causal, Causality::NonCausal] {
            for map in FeatureMap::all(FAVOR_FEATURES) {
                let (dk, dv) = pairs[problems.len() % pairs.len()];
                let shape = Shape::new(BATCH, HEADS, seq, dk, dv);
                problems.push(Problem::new(shape, causality, map));
            }
        }
    }
    for causality in [Causality::Causal, Causality::NonCausal] {
        let shape = Shape::new(BATCH, HEADS, 63, 64, 128);
        problems.push(Problem::new(shape, causality, FeatureMap::EluPlusOne).with_decay(DECAY));
    }
    // The tensor-core kernels take D, M ∈ {64, 128} and the fused maps only: give them every
    // N too (the rotation above reaches them at some N only).
    let fused = [
        FeatureMap::EluPlusOne,
        FeatureMap::Relu,
        FeatureMap::Identity,
    ];
    for (i, &seq) in SEQ_LENS.iter().enumerate() {
        let (dk, dv) = [(128, 64), (64, 128)][i % 2];
        let shape = Shape::new(BATCH, HEADS, seq, dk, dv);
        problems.push(Problem::new(
            shape,
            Causality::Causal,
            fused[i % fused.len()],
        ));
    }
    numbered(problems, false)
}

/// Every N × D × M × causality × map × decay.
fn full_grid() -> Vec<Case> {
    let mut problems = Vec::new();
    for &seq in &SEQ_LENS {
        for &dk in &HEAD_DIMS {
            for &dv in &HEAD_DIMS {
                for causality in [Causality::Causal, Causality::NonCausal] {
                    for map in FeatureMap::all(FAVOR_FEATURES) {
                        for decay in [1.0, DECAY] {
                            let shape = Shape::new(BATCH, HEADS, seq, dk, dv);
                            problems.push(Problem::new(shape, causality, map).with_decay(decay));
                        }
                    }
                }
            }
        }
    }
    numbered(problems, false)
}

/// The `--long` cases, numbered after the grid.
fn long_cases(first_index: usize) -> Vec<Case> {
    let mut problems = Vec::new();
    for &seq in &LONG_SEQ_LENS {
        for causality in [Causality::Causal, Causality::NonCausal] {
            let shape = Shape::new(1, 2, seq, 64, 64);
            problems.push(Problem::new(shape, causality, FeatureMap::EluPlusOne));
        }
    }
    let mut cases = numbered(problems, true);
    for c in &mut cases {
        c.index += first_index;
    }
    cases
}

fn numbered(problems: Vec<Problem>, long: bool) -> Vec<Case> {
    problems
        .into_iter()
        .enumerate()
        .map(|(index, problem)| Case {
            index,
            problem,
            long,
        })
        .collect()
}

/// Whether `case` belongs to what `info`'s backend is checked on (as opposed to n/a: a
/// case that is not in its grid at all is neither run nor counted).
fn case_applies(info: &linattn_core::BackendInfo, case: &Case) -> bool {
    let softmax = info.algorithm == Algorithm::Softmax;
    if softmax && (case.problem.map != FeatureMap::EluPlusOne || case.problem.has_decay()) {
        // Softmax ignores map, ε and decay: those cases would repeat the elu+1 one.
        return false;
    }
    if case.long {
        let reference = registry::family(&info.name) == "cpu-ref";
        let softmax_on_cpu = softmax && info.device == DeviceKind::Cpu;
        if reference || softmax_on_cpu {
            return false;
        }
        if softmax && case.problem.shape.seq > SOFTMAX_ORACLE_MAX_SEQ {
            return false;
        }
    }
    true
}

/// Which oracle output a backend is compared with: the algorithm's oracle, on inputs
/// rounded to the backend's storage precision when that is below f32.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct OracleKey {
    softmax: bool,
    rounding: Option<Precision>,
}

impl OracleKey {
    fn for_backend(info: &linattn_core::BackendInfo) -> Self {
        OracleKey {
            softmax: info.algorithm == Algorithm::Softmax,
            rounding: match info.precision {
                Precision::F16 | Precision::BF16 => Some(info.precision),
                Precision::F32 | Precision::F64 => None,
            },
        }
    }

    fn inputs(&self, inputs: &Inputs) -> Inputs {
        match self.rounding {
            Some(Precision::F16) => inputs.rounded(|x| half::f16::from_f64(x).to_f64()),
            Some(Precision::BF16) => inputs.rounded(|x| half::bf16::from_f64(x).to_f64()),
            _ => inputs.clone(),
        }
    }
}

/// The reference result of one case for one oracle key.
#[derive(Clone)]
struct Reference {
    output: Tensor,
    grads: Option<Grads>,
    /// Host seconds the oracle took (kept out of the backends' times).
    seconds: f64,
}

/// Seconds spent computing the cached oracle results so far.
fn oracle_seconds(cache: &HashMap<OracleKey, Result<Reference, String>>) -> f64 {
    cache.values().flatten().map(|r| r.seconds).sum()
}

fn run_oracle(
    key: OracleKey,
    problem: &Problem,
    inputs: &Inputs,
    with_grads: bool,
) -> Result<Reference, String> {
    let inputs = key.inputs(inputs);
    let started = std::time::Instant::now();
    let result = catch_unwind(AssertUnwindSafe(|| -> Result<Reference, AttnError> {
        if with_grads {
            let (output, grads) = if key.softmax {
                linattn_softmax::oracle::backward(problem, &inputs)?
            } else {
                linattn_cpu::oracle::backward(problem, &inputs)?
            };
            Ok(Reference {
                output,
                grads: Some(grads),
                seconds: 0.0,
            })
        } else {
            let output = if key.softmax {
                linattn_softmax::oracle::forward(problem, &inputs)?
            } else {
                linattn_cpu::oracle::forward(problem, &inputs)?
            };
            Ok(Reference {
                output,
                grads: None,
                seconds: 0.0,
            })
        }
    }));
    match result {
        Ok(Ok(reference)) => Ok(Reference {
            seconds: started.elapsed().as_secs_f64(),
            ..reference
        }),
        Ok(Err(e)) => Err(format!("oracle failed: {e}")),
        Err(panic) => Err(format!("oracle panicked: {}", panic_message(&panic))),
    }
}

fn panic_message(payload: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "(non-string panic payload)".into()
    }
}

/// How one case ended for one backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum Outcome {
    Pass,
    Fail,
    /// The backend or the oracle returned an error (or panicked).
    Error,
    /// The backend does not implement this problem.
    NotApplicable,
}

/// Error of one compared tensor.
#[derive(Debug, Clone, Serialize)]
struct TensorError {
    tensor: &'static str,
    /// Raw metrics against the oracle (`rms_ratio` = rms(diff) / rms(ref)).
    #[serde(flatten)]
    metrics: ErrorMetrics,
    /// The ratio the verdict uses: rms(diff) / max(rms(ref), scale), where `scale` is the
    /// largest gradient RMS of the case for dq, dk, dv and 0 for o (see [`judged_ratio`]).
    judged_ratio: f64,
}

impl TensorError {
    fn passes(&self, tolerance: f64) -> bool {
        self.metrics.non_finite == 0 && self.judged_ratio <= tolerance
    }
}

fn rms(values: &[f64]) -> f64 {
    (values.iter().map(|x| x * x).sum::<f64>() / values.len().max(1) as f64).sqrt()
}

/// rms(got − want) / max(rms(want), scale); ∞ when anything is non-finite.
///
/// Why a scale: a gradient can cancel to ~0 by construction (dq, dk at N = 1 through the
/// normaliser are O(ε); efficient attention's dq is exactly 0 at N = 1), and then f32
/// round-off of the cancelling terms, ~1e-7 of their size, is an arbitrarily large fraction
/// of the vanishing result. Such a gradient is judged on the scale of the gradients of the
/// same case instead of its own size. Gradients of ordinary size are unaffected.
fn judged_ratio(want: &[f64], got: &[f64], scale: f64) -> f64 {
    if got.iter().any(|x| !x.is_finite()) {
        return f64::INFINITY;
    }
    let diff: Vec<f64> = want.iter().zip(got).map(|(w, g)| g - w).collect();
    let rms_diff = rms(&diff);
    let denominator = rms(want).max(scale);
    if denominator > 0.0 {
        rms_diff / denominator
    } else if rms_diff == 0.0 {
        0.0
    } else {
        f64::INFINITY
    }
}

/// One case of one backend, as written to `--json`.
#[derive(Debug, Clone, Serialize)]
struct CaseRecord {
    backend: String,
    case: usize,
    description: String,
    problem: Problem,
    seed: u64,
    outcome: Outcome,
    /// n/a reason or error message.
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
    tolerance: f64,
    errors: Vec<TensorError>,
}

impl CaseRecord {
    fn worst_rms(&self) -> f64 {
        self.errors
            .iter()
            .map(|e| e.judged_ratio)
            .fold(0.0, f64::max)
    }
    fn worst_max_abs(&self) -> f64 {
        self.errors
            .iter()
            .map(|e| e.metrics.max_abs)
            .fold(0.0, f64::max)
    }
    /// What went wrong, in one line.
    fn failure_summary(&self) -> String {
        if let Some(m) = &self.message {
            return m.clone();
        }
        self.errors
            .iter()
            .filter(|e| !e.passes(self.tolerance))
            .map(|e| {
                if e.metrics.non_finite > 0 {
                    format!("{}: {} non-finite values", e.tensor, e.metrics.non_finite)
                } else {
                    format!(
                        "{}: rms ratio {:.2e} > {:.0e} (max-abs {:.2e})",
                        e.tensor, e.judged_ratio, self.tolerance, e.metrics.max_abs
                    )
                }
            })
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// A backend's row of the table.
#[derive(Debug, Clone, Serialize)]
struct BackendSummary {
    backend: String,
    precision: Precision,
    tolerance: f64,
    run: usize,
    passed: usize,
    failed: usize,
    not_applicable: usize,
    worst_max_abs: f64,
    worst_rms_ratio: f64,
    /// Host seconds spent in this backend's cases (oracles excluded).
    seconds: f64,
    /// Set when the backend cannot run on this machine.
    #[serde(skip_serializing_if = "Option::is_none")]
    skipped: Option<String>,
    verdict: String,
}

impl BackendSummary {
    fn new(info: &linattn_core::BackendInfo) -> Self {
        BackendSummary {
            backend: info.name.clone(),
            precision: info.precision,
            tolerance: info.precision.rms_tolerance(),
            run: 0,
            passed: 0,
            failed: 0,
            not_applicable: 0,
            worst_max_abs: 0.0,
            worst_rms_ratio: 0.0,
            seconds: 0.0,
            skipped: None,
            verdict: String::new(),
        }
    }

    fn add(&mut self, record: &CaseRecord) {
        match record.outcome {
            Outcome::NotApplicable => self.not_applicable += 1,
            Outcome::Pass | Outcome::Fail | Outcome::Error => {
                self.run += 1;
                if record.outcome == Outcome::Pass {
                    self.passed += 1;
                } else {
                    self.failed += 1;
                }
                self.worst_max_abs = self.worst_max_abs.max(record.worst_max_abs());
                self.worst_rms_ratio = self.worst_rms_ratio.max(record.worst_rms());
                if record.outcome == Outcome::Error {
                    // An error has no metrics: make sure the worst column shows it.
                    self.worst_rms_ratio = f64::INFINITY;
                }
            }
        }
    }

    fn finish(&mut self) {
        self.verdict = if let Some(reason) = &self.skipped {
            format!("skipped: {reason}")
        } else if self.failed > 0 {
            "FAIL".into()
        } else if self.run == 0 {
            "n/a: no case applies".into()
        } else {
            "PASS".into()
        };
    }
}

/// Everything `--json` writes.
#[derive(Serialize)]
struct CheckReport<'a> {
    seed: u64,
    grid: &'static str,
    long: bool,
    backends: &'a [BackendSummary],
    cases: &'a [CaseRecord],
}

/// Per-backend state while the grid runs.
struct Entry {
    backend: Box<dyn Backend>,
    summary: BackendSummary,
}

pub fn run(args: CheckArgs) -> Result<ExitCode, AttnError> {
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
                .filter(|c| case_applies(e.backend.info(), c))
                .count()
        })
        .sum();
    let progress = progress_bar(total as u64);
    eprintln!(
        "checking {} backend(s) on {} case(s) (seed {})",
        entries.len(),
        cases.len(),
        args.seed
    );

    let mut records: Vec<CaseRecord> = Vec::new();
    for case in &cases {
        let seed = args.seed.wrapping_add(case.index as u64);
        let inputs = match Inputs::random(case.problem.shape, seed, true) {
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
            if entry.summary.skipped.is_some() || !case_applies(entry.backend.info(), case) {
                continue;
            }
            progress.set_message(format!("{} {}", entry.summary.backend, case.problem));
            let started = std::time::Instant::now();
            let oracle_before = oracle_seconds(&oracle_cache);
            let record = check_case(entry, case, seed, &inputs, &mut oracle_cache);
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
            backends: &summaries,
            cases: &records,
        };
        let text = serde_json::to_string_pretty(&report)
            .map_err(|e| AttnError::State(format!("serialising check results: {e}")))?;
        write_bytes_atomic(path, text.as_bytes())?;
        eprintln!("wrote {}", path.display());
    }

    let any_failed = summaries.iter().any(|s| s.failed > 0);
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

fn progress_bar(total: u64) -> indicatif::ProgressBar {
    if !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(total);
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} [{elapsed}] {wide_msg}")
    {
        bar.set_style(style);
    }
    bar
}

/// Runs one case on one backend. `None` when the backend turned out to be unavailable on
/// this machine (its summary is marked skipped instead).
fn check_case(
    entry: &mut Entry,
    case: &Case,
    seed: u64,
    inputs: &Inputs,
    oracle_cache: &mut HashMap<OracleKey, Result<Reference, String>>,
) -> Option<CaseRecord> {
    let info = entry.backend.info().clone();
    let tolerance = info.precision.rms_tolerance();
    let record = |outcome, message: Option<String>, errors| CaseRecord {
        backend: info.name.clone(),
        case: case.index,
        description: case.problem.to_string(),
        problem: case.problem,
        seed,
        outcome,
        message,
        tolerance,
        errors,
    };

    let supported = catch_unwind(AssertUnwindSafe(|| entry.backend.supports(&case.problem)));
    match supported {
        Ok(Ok(())) => {}
        Ok(Err(Unsupported::Unavailable(reason))) => {
            entry.summary.skipped = Some(reason);
            return None;
        }
        Ok(Err(Unsupported::Problem(reason))) => {
            return Some(record(Outcome::NotApplicable, Some(reason), Vec::new()));
        }
        Err(panic) => {
            let msg = format!("supports() panicked: {}", panic_message(&panic));
            return Some(record(Outcome::Error, Some(msg), Vec::new()));
        }
    }

    let with_grads = info.backward.is_some();
    let key = OracleKey::for_backend(&info);
    let cached = oracle_cache
        .get(&key)
        .filter(|r| !with_grads || r.as_ref().map_or(true, |r| r.grads.is_some()));
    let reference = match cached {
        Some(r) => r.clone(),
        None => {
            let r = run_oracle(key, &case.problem, inputs, with_grads);
            oracle_cache.insert(key, r.clone());
            r
        }
    };
    let reference = match reference {
        Ok(r) => r,
        Err(msg) => return Some(record(Outcome::Error, Some(msg), Vec::new())),
    };

    let backend = &mut entry.backend;
    let ran = catch_unwind(AssertUnwindSafe(
        || -> Result<(Tensor, Option<Grads>), AttnError> {
            let result = if with_grads {
                backend
                    .forward_backward(&case.problem, inputs)
                    .map(|(o, g)| (o, Some(g)))
            } else {
                backend.forward(&case.problem, inputs).map(|o| (o, None))
            };
            backend.release();
            result
        },
    ));
    let (output, grads) = match ran {
        Ok(Ok(got)) => got,
        Ok(Err(AttnError::Unsupported(Unsupported::Problem(reason)))) => {
            // Some limits only show once the data is staged (e.g. device memory).
            return Some(record(Outcome::NotApplicable, Some(reason), Vec::new()));
        }
        Ok(Err(e)) => return Some(record(Outcome::Error, Some(e.to_string()), Vec::new())),
        Err(panic) => {
            let msg = format!("backend panicked: {}", panic_message(&panic));
            return Some(record(Outcome::Error, Some(msg), Vec::new()));
        }
    };

    let mut errors = Vec::new();
    let mut compared = vec![("o", &reference.output, &output, 0.0)];
    if let (Some(want), Some(got)) = (&reference.grads, &grads) {
        let scale = rms(want.dq.data())
            .max(rms(want.dk.data()))
            .max(rms(want.dv.data()));
        compared.push(("dq", &want.dq, &got.dq, scale));
        compared.push(("dk", &want.dk, &got.dk, scale));
        compared.push(("dv", &want.dv, &got.dv, scale));
    }
    for (tensor, want, got, scale) in compared {
        if want.dims() != got.dims() {
            let msg = format!(
                "{tensor} has dims {:?}, the oracle's has {:?}",
                got.dims(),
                want.dims()
            );
            return Some(record(Outcome::Error, Some(msg), errors));
        }
        errors.push(TensorError {
            tensor,
            metrics: ErrorMetrics::compare(want.data(), got.data()),
            judged_ratio: judged_ratio(want.data(), got.data(), scale),
        });
    }
    let pass = errors.iter().all(|e| e.passes(tolerance));
    let outcome = if pass { Outcome::Pass } else { Outcome::Fail };
    Some(record(outcome, None, errors))
}

fn sci(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.2e}")
    } else {
        "inf".into()
    }
}

fn summary_table(rows: &[BackendSummary]) -> String {
    let mut b = Builder::new();
    b.push_record([
        "backend",
        "cases",
        "n/a",
        "worst max-abs",
        "worst rms ratio",
        "tolerance",
        "seconds",
        "verdict",
    ]);
    for r in rows {
        let ran = r.skipped.is_none() && r.run > 0;
        b.push_record([
            r.backend.clone(),
            format!("{}/{}", r.passed, r.run),
            r.not_applicable.to_string(),
            if ran {
                sci(r.worst_max_abs)
            } else {
                "-".into()
            },
            if ran {
                sci(r.worst_rms_ratio)
            } else {
                "-".into()
            },
            format!("{:.0e}", r.tolerance),
            if ran {
                format!("{:.1}", r.seconds)
            } else {
                "-".into()
            },
            r.verdict.clone(),
        ]);
    }
    let mut table = b.build();
    table.with(Style::sharp());
    table.to_string()
}

fn failures_table(rows: &[&CaseRecord]) -> String {
    let mut b = Builder::new();
    b.push_record(["backend", "case", "problem", "failure"]);
    for r in rows {
        b.push_record([
            r.backend.clone(),
            r.case.to_string(),
            r.description.clone(),
            r.failure_summary(),
        ]);
    }
    let mut table = b.build();
    table.with(Style::sharp());
    table.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn default_grid_covers_every_axis_value() {
        let grid = default_grid();
        let seqs: HashSet<usize> = grid.iter().map(|c| c.problem.shape.seq).collect();
        assert_eq!(seqs, SEQ_LENS.into_iter().collect());
        for &d in &HEAD_DIMS {
            assert!(grid.iter().any(|c| c.problem.shape.dk == d), "D = {d}");
            assert!(grid.iter().any(|c| c.problem.shape.dv == d), "M = {d}");
        }
        assert!(grid
            .iter()
            .all(|c| c.problem.shape.dk != c.problem.shape.dv));
        for map in FeatureMap::all(FAVOR_FEATURES) {
            for causality in [Causality::Causal, Causality::NonCausal] {
                assert!(grid
                    .iter()
                    .any(|c| c.problem.map == map && c.problem.causality == causality));
            }
        }
        let decayed: Vec<_> = grid.iter().filter(|c| c.problem.has_decay()).collect();
        assert_eq!(decayed.len(), 2);
        assert!(decayed.iter().all(|c| c.problem.decay == DECAY));
        // Indices are positions: seeds differ between cases.
        assert!(grid.iter().enumerate().all(|(i, c)| c.index == i));
        // Softmax sees every N with distinct head-dim pairs across causalities.
        let elu: HashSet<(usize, usize)> = grid
            .iter()
            .filter(|c| c.problem.map == FeatureMap::EluPlusOne && !c.problem.has_decay())
            .map(|c| (c.problem.shape.dk, c.problem.shape.dv))
            .collect();
        assert_eq!(elu.len(), HEAD_DIMS.len());
    }

    /// What a test double does wrong.
    #[derive(Clone, Copy, PartialEq)]
    enum Fault {
        None,
        /// Gradient dk scaled by 1 + 1e-3: far beyond the f32 tolerance.
        ScaledDk,
        OutOfMemory,
        Panic,
        WrongDims,
        Unavailable,
    }

    /// A backend that answers with the linear oracle, then applies its fault.
    struct Double {
        info: linattn_core::BackendInfo,
        fault: Fault,
        staged: Option<(Problem, Inputs)>,
        result: Option<(Tensor, Grads)>,
    }

    impl Double {
        fn boxed(fault: Fault) -> Box<dyn Backend> {
            Box::new(Double {
                info: linattn_core::BackendInfo {
                    name: "test/causal_recurrent/f32".into(),
                    device: DeviceKind::Cpu,
                    precision: Precision::F32,
                    algorithm: Algorithm::Linear(linattn_core::Form::Recurrent),
                    backward: Some(linattn_core::BackwardKind::Efficient),
                },
                fault,
                staged: None,
                result: None,
            })
        }
    }

    impl Backend for Double {
        fn info(&self) -> &linattn_core::BackendInfo {
            &self.info
        }
        fn supports(&self, problem: &Problem) -> Result<(), Unsupported> {
            if self.fault == Fault::Unavailable {
                return Err(Unsupported::Unavailable("no test device".into()));
            }
            linattn_core::check_linear_form(&self.info, problem)
        }
        fn stage(&mut self, problem: &Problem, inputs: &Inputs) -> Result<(), AttnError> {
            self.staged = Some((*problem, inputs.clone()));
            Ok(())
        }
        fn run_forward(&mut self) -> Result<linattn_core::RunStats, AttnError> {
            match self.fault {
                Fault::OutOfMemory => Err(AttnError::OutOfMemory {
                    device: "test".into(),
                    requested_bytes: 1 << 40,
                    detail: "test double".into(),
                }),
                Fault::Panic => panic!("test double panics on purpose"),
                _ => Ok(Default::default()),
            }
        }
        fn run_backward(&mut self) -> Result<linattn_core::RunStats, AttnError> {
            let (problem, inputs) = self.staged.as_ref().expect("staged");
            let (o, mut g) = linattn_cpu::oracle::backward(problem, inputs)?;
            if self.fault == Fault::ScaledDk {
                g.dk.map_in_place(|x| x * (1.0 + 1e-3));
            }
            if self.fault == Fault::WrongDims {
                g.dv = Tensor::zeros([1, 1, 1, 1])?;
            }
            self.result = Some((o, g));
            Ok(Default::default())
        }
        fn output(&mut self) -> Result<Tensor, AttnError> {
            Ok(self.result.as_ref().expect("ran").0.clone())
        }
        fn grads(&mut self) -> Result<Grads, AttnError> {
            Ok(self.result.as_ref().expect("ran").1.clone())
        }
    }

    fn check_one(fault: Fault, causality: Causality) -> (Option<CaseRecord>, BackendSummary) {
        let backend = Double::boxed(fault);
        let summary = BackendSummary::new(backend.info());
        let mut entry = Entry { backend, summary };
        let shape = Shape::new(1, 2, 9, 4, 3);
        let case = Case {
            index: 0,
            problem: Problem::new(shape, causality, FeatureMap::EluPlusOne),
            long: false,
        };
        let inputs = Inputs::random(shape, 5, true).unwrap();
        let record = check_case(&mut entry, &case, 5, &inputs, &mut HashMap::new());
        if let Some(r) = &record {
            entry.summary.add(r);
        }
        entry.summary.finish();
        (record, entry.summary)
    }

    #[test]
    fn a_faithful_backend_passes_on_output_and_gradients() {
        let (record, summary) = check_one(Fault::None, Causality::Causal);
        let record = record.unwrap();
        assert_eq!(record.outcome, Outcome::Pass);
        let tensors: Vec<&str> = record.errors.iter().map(|e| e.tensor).collect();
        assert_eq!(tensors, ["o", "dq", "dk", "dv"]);
        assert_eq!(summary.verdict, "PASS");
    }

    #[test]
    fn faults_fail_the_case_with_their_message() {
        let (record, summary) = check_one(Fault::ScaledDk, Causality::Causal);
        let record = record.unwrap();
        assert_eq!(record.outcome, Outcome::Fail);
        assert!(
            record.failure_summary().starts_with("dk: rms ratio"),
            "{}",
            record.failure_summary()
        );
        assert_eq!(summary.verdict, "FAIL");

        for (fault, needle) in [
            (Fault::OutOfMemory, "out of memory on test"),
            (
                Fault::Panic,
                "backend panicked: test double panics on purpose",
            ),
            (Fault::WrongDims, "dv has dims [1, 1, 1, 1]"),
        ] {
            let (record, summary) = check_one(fault, Causality::Causal);
            let record = record.unwrap();
            assert_eq!(record.outcome, Outcome::Error);
            assert!(
                record.failure_summary().contains(needle),
                "{}",
                record.failure_summary()
            );
            assert_eq!((summary.failed, summary.verdict.as_str()), (1, "FAIL"));
        }
    }

    #[test]
    fn unsupported_problems_are_na_and_unavailable_backends_skipped() {
        let (record, summary) = check_one(Fault::None, Causality::NonCausal);
        assert_eq!(record.unwrap().outcome, Outcome::NotApplicable);
        assert_eq!((summary.run, summary.not_applicable), (0, 1));
        assert_eq!(summary.verdict, "n/a: no case applies");

        let (record, summary) = check_one(Fault::Unavailable, Causality::Causal);
        assert!(record.is_none());
        assert_eq!(summary.verdict, "skipped: no test device");
        assert_eq!(summary.failed, 0);
    }

    #[test]
    fn judged_ratio_floors_only_vanishing_gradients() {
        let want = [1.0, -2.0, 2.0, -1.0];
        let got = [1.01, -2.02, 2.02, -1.01];
        // Ordinary size: the plain RMS ratio, whatever a smaller scale says.
        assert!((judged_ratio(&want, &got, 0.5) - 0.01).abs() < 1e-12);
        // A vanishing reference is judged on the case's scale.
        let tiny = [1e-15, -1e-15, 0.0, 0.0];
        let noisy = [1e-7, 0.0, -1e-7, 0.0];
        assert!(ErrorMetrics::compare(&tiny, &noisy).rms_ratio > 1e7);
        assert!(judged_ratio(&tiny, &noisy, 1.0) < 1e-6);
        assert_eq!(judged_ratio(&[0.0; 2], &[0.0; 2], 0.0), 0.0);
        assert_eq!(judged_ratio(&[0.0; 2], &[1.0, 0.0], 0.0), f64::INFINITY);
        assert_eq!(
            judged_ratio(&want, &[1.0, f64::NAN, 2.0, -1.0], 1.0),
            f64::INFINITY
        );
    }

    #[test]
    fn full_grid_is_the_cartesian_product() {
        let n = SEQ_LENS.len() * HEAD_DIMS.len() * HEAD_DIMS.len() * 2 * 7 * 2;
        assert_eq!(full_grid().len(), n);
    }

    #[test]
    fn long_cases_skip_references_and_cpu_softmax() {
        let info = |name: &str, device, algorithm| linattn_core::BackendInfo {
            name: name.into(),
            device,
            precision: Precision::F32,
            algorithm,
            backward: None,
        };
        let long = long_cases(100);
        assert!(long.iter().all(|c| c.long && c.index >= 100));
        let reference = info(
            "cpu-ref/causal_recurrent/f64",
            DeviceKind::Cpu,
            Algorithm::Linear(linattn_core::Form::Recurrent),
        );
        let fast = info(
            "cpu/causal_recurrent/f32",
            DeviceKind::Cpu,
            Algorithm::Linear(linattn_core::Form::Recurrent),
        );
        let cpu_softmax = info("softmax/cpu/f32", DeviceKind::Cpu, Algorithm::Softmax);
        let gpu_softmax = info("cuda/softmax/f32", DeviceKind::Cuda, Algorithm::Softmax);
        assert!(long.iter().all(|c| !case_applies(&reference, c)));
        assert!(long.iter().all(|c| case_applies(&fast, c)));
        assert!(long.iter().all(|c| !case_applies(&cpu_softmax, c)));
        let gpu: Vec<_> = long
            .iter()
            .filter(|c| case_applies(&gpu_softmax, c))
            .collect();
        assert!(!gpu.is_empty());
        assert!(gpu
            .iter()
            .all(|c| c.problem.shape.seq <= SOFTMAX_ORACLE_MAX_SEQ));
    }
}
