//! `linattn mma-probe`: how `mma.sync m16n8k16` sums with f32 accumulation. Runs the test
//! vectors of `linattn_cuda::mma_probe` through the f16 and bf16 mma, then counts, for every
//! candidate model (exact; aligned on values or operand exponents × block 4/8/16 × 24–27
//! kept bits × RZ/RN), on how many vectors its host prediction has the device's bits. On a
//! GPU the candidates that match every vector are its tensor cores' model (issue #23 part
//! 6); on the simulator they must be exactly the numerics mode's own model. `--rescore`
//! scores an earlier run's committed vectors and bits against today's candidates, with no
//! device: the hardware's answers stay valid while the candidate set grows.

use linattn_core::AttnError;
use linattn_cuda::executor::sim::{self, MmaModel, Numerics};
use linattn_cuda::mma_probe::{self, all_vectors, Candidate, Input, Vector};
use linattn_cuda::Platform;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use tabled::{settings::Style, Table, Tabled};

use crate::results::{self, Environment};

#[derive(clap::Args)]
pub struct MmaProbeArgs {
    /// Where the mma runs: cuda (a GPU) or sim (the PTX simulator). Default: cuda when a GPU
    /// is present, else sim.
    #[arg(long)]
    platform: Option<String>,
    /// Write the vectors, the device's bits and every candidate's score as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Seed of the random vectors.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// On the simulator: its numerics mode (exact, as-compiled, pessimistic).
    #[arg(long, value_name = "MODE", default_value = "exact", value_parser = parse_numerics)]
    numerics: Numerics,
    /// On the simulator: its mma model whatever the mode (exact, a100, h100).
    #[arg(long, value_name = "MODEL", value_parser = parse_mma_model)]
    mma_model: Option<MmaModel>,
    /// Run nothing: score the vectors and device bits of FILE (an earlier `--json`, e.g.
    /// bench-results/h100/2026-11-26/mma-probe.json) against today's candidates.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["platform", "mma_model"])]
    rescore: Option<PathBuf>,
}

fn parse_numerics(s: &str) -> Result<Numerics, String> {
    s.parse()
}

fn parse_mma_model(s: &str) -> Result<MmaModel, String> {
    s.parse()
}

/// What a probe ran on: written by `--json`, read back by `--rescore`.
#[derive(Serialize, Deserialize)]
struct ProbeRun {
    /// "device" (a GPU's tensor cores) or "simulator" (the simulator's model, read back).
    kind: String,
    platform: String,
    device: String,
    arch: String,
    driver: String,
    /// The simulator's numerics mode and mma model (absent on a GPU).
    sim_numerics: Option<String>,
    sim_mma_model: Option<String>,
    seed: u64,
}

/// The JSON `--json` writes.
#[derive(Serialize)]
struct ProbeFile {
    schema: u32,
    #[serde(flatten)]
    run: ProbeRun,
    /// With `--rescore`: the file whose vectors and bits were scored (`environment` is then
    /// the rescoring host's, `run_environment` the run's as its file recorded it).
    #[serde(skip_serializing_if = "Option::is_none")]
    rescored_from: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    run_environment: Option<serde_json::Value>,
    environment: Environment,
    inputs: Vec<InputRecord>,
}

/// What `--rescore` reads of a probe file: the run and, per input type, the vectors with
/// the bits the device returned.
#[derive(Deserialize)]
struct ReadProbe {
    #[serde(flatten)]
    run: ProbeRun,
    environment: Option<serde_json::Value>,
    inputs: Vec<ReadInput>,
}

#[derive(Deserialize)]
struct ReadInput {
    input: String,
    vectors: Vec<VectorRecord>,
}

#[derive(Serialize)]
struct InputRecord {
    input: &'static str,
    vectors: Vec<VectorRecord>,
    candidates: Vec<CandidateRecord>,
    /// The candidates with the most matches (all of them match every vector when any does).
    best: Vec<String>,
    best_matches_all: bool,
}

/// One vector as a probe file records it (and `--rescore` reads it back).
#[derive(Serialize, Deserialize)]
struct VectorRecord {
    label: String,
    designed: bool,
    /// Bit patterns: c and d as f32, a and b as the input type.
    c: u32,
    a: [u16; 16],
    b: [u16; 16],
    d: u32,
    /// Values, for reading: c, d and the exact c + Σ a·b.
    c_value: f32,
    d_value: f32,
    exact_sum: f64,
}

#[derive(Serialize)]
struct CandidateRecord {
    name: String,
    /// None for the exact candidates.
    block: Option<usize>,
    kept_bits: Option<u32>,
    rounding: &'static str,
    /// "value" or "operands" (None for the exact candidates).
    alignment: Option<&'static str>,
    designed_matches: usize,
    random_matches: usize,
    matches: usize,
    /// Indices (into `vectors`) where the prediction differs from the device.
    mismatches: Vec<usize>,
}

#[derive(Tabled)]
struct Row {
    candidate: String,
    #[tabled(rename = "f16 designed")]
    f16_designed: String,
    #[tabled(rename = "f16 random")]
    f16_random: String,
    #[tabled(rename = "bf16 designed")]
    bf16_designed: String,
    #[tabled(rename = "bf16 random")]
    bf16_random: String,
}

/// Scores every candidate on `vectors` against the device's bits `d`.
fn score(input: Input, vectors: &[Vector], d: &[u32]) -> Vec<CandidateRecord> {
    Candidate::all()
        .into_iter()
        .map(|cand| {
            let (mut designed, mut random, mut mismatches) = (0, 0, Vec::new());
            for (i, (v, &bits)) in vectors.iter().zip(d).enumerate() {
                if cand.predict(v.c, &v.products(input)).to_bits() == bits {
                    if v.designed {
                        designed += 1;
                    } else {
                        random += 1;
                    }
                } else {
                    mismatches.push(i);
                }
            }
            let (block, kept_bits, rounding, alignment) = match cand {
                Candidate::Exact(r) => (None, None, r, None),
                Candidate::Truncating(m) => (
                    Some(m.block),
                    Some(m.kept_bits),
                    m.rounding,
                    Some(m.alignment.name()),
                ),
            };
            CandidateRecord {
                name: cand.name(),
                block,
                kept_bits,
                rounding: rounding.name(),
                alignment,
                designed_matches: designed,
                random_matches: random,
                matches: designed + random,
                mismatches,
            }
        })
        .collect()
}

fn record(input: Input, vectors: Vec<Vector>, d: Vec<u32>) -> InputRecord {
    let candidates = score(input, &vectors, &d);
    let top = candidates.iter().map(|c| c.matches).max().unwrap_or(0);
    let best = candidates
        .iter()
        .filter(|c| c.matches == top)
        .map(|c| c.name.clone())
        .collect();
    let vectors = vectors
        .into_iter()
        .zip(d)
        .map(|(v, d)| {
            let exact_sum = v.exact_sum(input);
            VectorRecord {
                c: v.c.to_bits(),
                c_value: v.c,
                d,
                d_value: f32::from_bits(d),
                exact_sum,
                label: v.label,
                designed: v.designed,
                a: v.a,
                b: v.b,
            }
        })
        .collect::<Vec<_>>();
    InputRecord {
        input: input.name(),
        best_matches_all: top == vectors.len(),
        vectors,
        candidates,
        best,
    }
}

fn count(c: &CandidateRecord, all: &[VectorRecord], designed: bool) -> String {
    let total = all.iter().filter(|v| v.designed == designed).count();
    let got = if designed {
        c.designed_matches
    } else {
        c.random_matches
    };
    format!("{got}/{total}")
}

fn table(inputs: &[InputRecord]) -> String {
    let (f16, bf16) = (&inputs[0], &inputs[1]);
    let rows: Vec<Row> = f16
        .candidates
        .iter()
        .zip(&bf16.candidates)
        .map(|(a, b)| Row {
            candidate: a.name.clone(),
            f16_designed: count(a, &f16.vectors, true),
            f16_random: count(a, &f16.vectors, false),
            bf16_designed: count(b, &bf16.vectors, true),
            bf16_random: count(b, &bf16.vectors, false),
        })
        .collect();
    Table::new(&rows).with(Style::markdown()).to_string()
}

pub fn run(args: MmaProbeArgs) -> Result<ExitCode, AttnError> {
    if let Some(path) = &args.json {
        results::check_writable(path)?;
    }
    if let Some(from) = &args.rescore {
        return rescore(from, args.json.as_deref());
    }
    let platform = crate::registry::probe_platform(args.platform.as_deref())?;
    let sim_chosen = args.numerics != Numerics::Exact || args.mma_model.is_some();
    if platform == Platform::Cuda && sim_chosen {
        return Err(AttnError::InvalidArgument(
            "--numerics and --mma-model choose the simulator's model: use them with \
             --platform sim"
                .into(),
        ));
    }
    if platform == Platform::Sim {
        sim::set_numerics(args.numerics)?;
        sim::set_mma_model(args.mma_model)?;
    }
    let exec = platform.executor()?;
    let mut inputs = Vec::new();
    for input in Input::ALL {
        let vectors = all_vectors(input, args.seed).map_err(AttnError::State)?;
        let d = mma_probe::run(exec.as_ref(), input, &vectors)?;
        inputs.push(record(input, vectors, d));
    }
    let info = exec.info();
    let arch = exec.arch();
    let sim_model = args.mma_model.unwrap_or(args.numerics.mma_model());
    let what = match platform {
        Platform::Cuda => "the device's tensor cores".to_string(),
        Platform::Sim => format!(
            "the simulator ({} numerics, mma model {sim_model}: candidate '{}')",
            args.numerics,
            Candidate::of(sim_model).name()
        ),
    };
    println!(
        "mma probe on {} (sm_{}{}, driver {}): {what}; vectors matched per candidate",
        info.name, arch.major, arch.minor, info.driver_version
    );
    print_scores(&inputs);
    let gpu = match platform {
        Platform::Cuda => crate::bench::gpu_environment(),
        Platform::Sim => None,
    };
    let on_sim = platform == Platform::Sim;
    let file = ProbeFile {
        schema: 1,
        run: ProbeRun {
            kind: if on_sim { "simulator" } else { "device" }.into(),
            platform: if on_sim { "sim" } else { "cuda" }.into(),
            device: info.name.clone(),
            arch: format!("sm_{}{}", arch.major, arch.minor),
            driver: info.driver_version.clone(),
            sim_numerics: on_sim.then(|| args.numerics.name().into()),
            sim_mma_model: on_sim.then(|| sim_model.name().into()),
            seed: args.seed,
        },
        rescored_from: None,
        run_environment: None,
        environment: results::probe_environment(gpu),
        inputs,
    };
    write(args.json.as_deref(), &file)
}

/// The candidates' table and each input type's best.
fn print_scores(inputs: &[InputRecord]) {
    println!("{}", table(inputs));
    for r in inputs {
        println!(
            "best for {}: {} ({}/{} vectors{})",
            r.input,
            r.best.join("; "),
            r.candidates.iter().map(|c| c.matches).max().unwrap_or(0),
            r.vectors.len(),
            if r.best_matches_all {
                ""
            } else {
                ": no candidate matches every vector"
            }
        );
    }
}

fn write(json: Option<&Path>, file: &ProbeFile) -> Result<ExitCode, AttnError> {
    if let Some(path) = json {
        results::write_json_atomic(path, file)?;
        println!("wrote {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// `--rescore FROM`: today's candidates on the vectors and bits FROM recorded.
fn rescore(from: &Path, json: Option<&Path>) -> Result<ExitCode, AttnError> {
    let bad = |why: String| AttnError::InvalidArgument(format!("{}: {why}", from.display()));
    let text = std::fs::read_to_string(from).map_err(|e| bad(e.to_string()))?;
    let run: ReadProbe =
        serde_json::from_str(&text).map_err(|e| bad(format!("not an mma-probe file: {e}")))?;
    let mut inputs = Vec::new();
    for input in Input::ALL {
        let recorded = run
            .inputs
            .iter()
            .find(|r| r.input == input.name())
            .ok_or_else(|| bad(format!("no {} vectors", input.name())))?;
        if recorded.vectors.is_empty() {
            return Err(bad(format!("no {} vectors", input.name())));
        }
        let (vectors, d) = recorded
            .vectors
            .iter()
            .map(|v| {
                let vector = Vector {
                    label: v.label.clone(),
                    designed: v.designed,
                    c: f32::from_bits(v.c),
                    a: v.a,
                    b: v.b,
                };
                (vector, v.d)
            })
            .unzip();
        inputs.push(record(input, vectors, d));
    }
    let r = &run.run;
    println!(
        "mma probe rescored from {} ({} run on {}, {}, driver {}); vectors matched per candidate",
        from.display(),
        r.kind,
        r.device,
        r.arch,
        r.driver
    );
    print_scores(&inputs);
    let file = ProbeFile {
        schema: 1,
        run: run.run,
        rescored_from: Some(from.display().to_string()),
        run_environment: run.environment,
        environment: results::probe_environment(None),
        inputs,
    };
    write(json, &file)
}
