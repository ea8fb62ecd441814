//! `linattn mufu`: captures the tables the simulator predicts the `.approx` functions from
//! (`linattn_ptxsim::exec::mufu_table`, issue #23), then verifies them.
//!
//! Capture: each MUFU function over every index of its table (`kernels/mufu_probe.cu`),
//! stored as deviations from the correctly rounded result: DIR/ex2.mufu (2^x, x in [0, 1)),
//! rsqrt.mufu, rcp.mufu, ex2neg.mufu (2^x, x in (−1, 0]: the unit's negative inputs).
//! Verification: each PTX form the kernels use, at seeded random inputs over its whole useful
//! range, device bits against the tables' prediction, per input class (ex2's split by sign)
//! and, for ex2, per quantisation of the fraction (20..24 bits, truncated or rounded); both
//! ex2 tables keep the grid with the fewest mismatches. DIR/mufu.json holds it all, with the
//! device.
//!
//! On the simulator (correctly rounded by construction) rsqrt and rcp verify with all-zero
//! tables, and ex2 does not for inputs with more than 24 fraction bits: the check can fail.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use linattn_core::AttnError;
use linattn_cuda::mufu_probe::{self, file, table};
use linattn_cuda::Platform;
use serde::Serialize;
use table::{MufuForm, MufuOp, MufuTable, MufuTables};
use tabled::{settings::Style, Table, Tabled};

use crate::mufu_verify::{self, FormResult};
use crate::results::{self, Environment};

#[derive(clap::Args)]
pub struct MufuArgs {
    /// Where the functions run: cuda (a GPU: the capture) or sim (the PTX simulator: a check
    /// of the capture and verification themselves).
    #[arg(long)]
    platform: String,
    /// Directory for ex2.mufu, rsqrt.mufu, rcp.mufu, ex2neg.mufu and mufu.json (created if
    /// absent).
    #[arg(long)]
    out: PathBuf,
    /// Entries captured per table, a power of two: every (full / N)-th index. Default: all
    /// on cuda (2^24, 2^24, 2^23, 2^24), 4096 on sim.
    #[arg(long)]
    entries: Option<u32>,
    /// Random inputs per form in the verification. Default: 2^22 on cuda, 4096 on sim.
    #[arg(long)]
    samples: Option<usize>,
    /// Seed of the verification's inputs.
    #[arg(long, default_value_t = 23)]
    seed: u64,
}

/// DIR/mufu.json.
#[derive(Serialize)]
struct MufuFile {
    schema: u32,
    /// "device" on a GPU; "simulator" (correctly rounded by construction) on sim.
    kind: &'static str,
    platform: &'static str,
    arch: String,
    environment: Environment,
    seed: u64,
    tables: Vec<TableRecord>,
    /// The ex2 grid written into ex2.mufu and ex2neg.mufu: fewest mismatches over the ex2
    /// forms.
    ex2_grid: String,
    verification: Vec<FormResult>,
}

#[derive(Serialize)]
struct TableRecord {
    op: &'static str,
    capture_form: &'static str,
    file: String,
    entries: usize,
    stride: u32,
    file_bytes: u64,
    /// Entries by deviation from the correctly rounded result, in ulps.
    deviation_histogram: DeviationHistogram,
}

#[derive(Serialize)]
struct DeviationHistogram {
    #[serde(rename = "-2")]
    minus2: u64,
    #[serde(rename = "-1")]
    minus1: u64,
    #[serde(rename = "0")]
    zero: u64,
    #[serde(rename = "+1")]
    plus1: u64,
    #[serde(rename = "+2")]
    plus2: u64,
    /// Beyond ±2 ulps.
    other: u64,
}

#[derive(Tabled)]
struct Row {
    form: &'static str,
    #[tabled(rename = "table deviations -2/-1/0/+1/+2 (other)")]
    deviations: String,
    prediction: String,
    checked: u64,
    uncovered: u64,
    mismatches: String,
}

/// The stride of a table of `entries` for `op`, or why `entries` does not fit it.
fn stride_of(op: MufuOp, entries: u32) -> Result<u32, AttnError> {
    let full = op.full_entries();
    if entries == 0 || !entries.is_power_of_two() {
        return Err(AttnError::InvalidArgument(format!(
            "--entries {entries}: give a power of two"
        )));
    }
    Ok(full / entries.min(full))
}

/// One table: every `stride`-th index of `op`, on the device.
fn capture(
    exec: &std::sync::Arc<dyn linattn_cuda::Executor>,
    op: MufuOp,
    stride: u32,
    source: &str,
) -> Result<MufuTable, AttnError> {
    let inputs: Vec<u32> = (0..op.full_entries() / stride)
        .map(|k| op.input(k * stride).to_bits())
        .collect();
    let bits = mufu_probe::evaluate(exec, op.capture_form(), &inputs)?;
    let mut t = MufuTable::from_results(op, stride, &bits).map_err(AttnError::State)?;
    t.source = source.to_string();
    Ok(t)
}

fn histogram(t: &MufuTable) -> DeviationHistogram {
    let ([minus2, minus1, zero, plus1, plus2], other) = t.histogram();
    DeviationHistogram {
        minus2,
        minus1,
        zero,
        plus1,
        plus2,
        other,
    }
}

pub fn run(args: MufuArgs) -> Result<ExitCode, AttnError> {
    let platform = crate::registry::probe_platform(Some(&args.platform))?;
    let (default_entries, default_samples) = match platform {
        Platform::Cuda => (1 << 24, 1 << 22),
        Platform::Sim => (4096, 4096),
    };
    let entries = args.entries.unwrap_or(default_entries);
    let samples = args.samples.unwrap_or(default_samples);
    if samples == 0 {
        return Err(AttnError::InvalidArgument(
            "--samples must be at least 1".into(),
        ));
    }
    let strides: Vec<u32> = MufuOp::ALL
        .iter()
        .map(|&op| stride_of(op, entries))
        .collect::<Result<_, _>>()?;
    std::fs::create_dir_all(&args.out).map_err(|e| {
        AttnError::InvalidArgument(format!("--out {}: cannot create: {e}", args.out.display()))
    })?;
    let exec = platform.executor()?;
    let gpu = match platform {
        Platform::Cuda => crate::bench::gpu_environment(),
        Platform::Sim => None,
    };
    let environment = results::probe_environment(gpu);
    let arch = exec.arch();
    let arch = format!("sm_{}{}", arch.major, arch.minor);
    let source = match platform {
        Platform::Cuda => format!(
            "{}, driver {}, {}, linattn {}",
            environment.device_name,
            environment.driver_version.as_deref().unwrap_or("?"),
            environment.date,
            environment.commit
        ),
        Platform::Sim => format!(
            "PTX simulator ({arch}, correctly rounded), {}, linattn {}",
            environment.date, environment.commit
        ),
    };

    let mut captured = Vec::new();
    for (op, stride) in MufuOp::ALL.into_iter().zip(strides) {
        let t = capture(&exec, op, stride, &source)?;
        eprintln!(
            "mufu: {} captured ({} entries)",
            op.name(),
            t.deviations.len()
        );
        captured.push(t);
    }
    let [ex2, rsqrt, rcp, ex2_negative]: [MufuTable; 4] = captured
        .try_into()
        .map_err(|_| AttnError::State("four tables expected".into()))?;
    let mut tables = MufuTables {
        ex2,
        rsqrt,
        rcp,
        ex2_negative: Some(ex2_negative),
    };

    let mut verification = Vec::new();
    for form in MufuForm::ALL {
        let stride = tables.table(form.op()).map_or(1, |t| t.stride);
        let inputs = mufu_verify::samples(form, samples, stride, args.seed);
        let device = mufu_probe::evaluate(&exec, form, &inputs)?;
        verification.push(mufu_verify::verify(&tables, form, &inputs, &device));
    }
    tables.ex2.grid = mufu_verify::best_ex2_grid(&verification);
    if let Some(negative) = &mut tables.ex2_negative {
        negative.grid = tables.ex2.grid;
    }

    let mut records = Vec::new();
    for op in MufuOp::ALL {
        let path = file::table_path(&args.out, op);
        let Some(t) = tables.table(op) else {
            continue;
        };
        file::write_table(&path, t).map_err(|e| AttnError::Io(e.to_string()))?;
        records.push(TableRecord {
            op: op.name(),
            capture_form: op.capture_form().ptx(),
            file: format!("{}.mufu", op.name()),
            entries: t.deviations.len(),
            stride: t.stride,
            file_bytes: std::fs::metadata(&path).map_or(0, |m| m.len()),
            deviation_histogram: histogram(t),
        });
    }
    print_table(&tables, &verification, &source);
    let file = MufuFile {
        schema: 1,
        kind: match platform {
            Platform::Cuda => "device",
            Platform::Sim => "simulator",
        },
        platform: platform.family(),
        arch,
        environment,
        seed: args.seed,
        tables: records,
        ex2_grid: tables.ex2.grid.name(),
        verification,
    };
    let json = args.out.join("mufu.json");
    results::write_json_atomic(&json, &file)?;
    println!(
        "wrote {} and {}",
        json.display(),
        file.tables
            .iter()
            .map(|t| t.file.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(ExitCode::SUCCESS)
}

/// Makes the tables in `dir` the simulator's (`linattn check --mufu-tables`): they apply to
/// `--numerics as-compiled` only, so any other mode is refused rather than silently ignored.
pub(crate) fn install_tables(
    dir: &Path,
    numerics: linattn_cuda::executor::sim::Numerics,
) -> Result<(), AttnError> {
    if numerics != linattn_cuda::executor::sim::Numerics::AsCompiled {
        return Err(AttnError::InvalidArgument(format!(
            "--mufu-tables applies to --numerics as-compiled, not {numerics}"
        )));
    }
    let tables = file::load_dir(dir)
        .map_err(|e| AttnError::InvalidArgument(format!("--mufu-tables: {e}")))?;
    eprintln!(
        "simulated ex2/rsqrt/rcp .approx from the MUFU tables in {} ({}; ex2 grid {}; {})",
        dir.display(),
        tables.ex2.source,
        tables.ex2.grid.name(),
        tables.ex2_negative_note()
    );
    table::install(tables).map_err(AttnError::InvalidArgument)
}

/// The summary: each form's table deviations (ex2: of x ≥ 0, then `x<0` those of ex2neg) and
/// its prediction's mismatches (ex2: on the chosen grid), then one line `mufu: ...` for a
/// run's summary. One row per form: `scripts/gpu_run.sh` keeps the 8 lines after the title.
fn print_table(tables: &MufuTables, verification: &[FormResult], source: &str) {
    let grid = tables.ex2.grid.name();
    let mut rows = Vec::new();
    let mut total = (0u64, 0u64);
    for r in verification {
        let form = MufuForm::ALL
            .into_iter()
            .find(|f| f.ptx() == r.form)
            .unwrap_or(MufuForm::Ex2Ftz);
        let Some(v) = r
            .variants
            .iter()
            .find(|v| v.variant == grid || v.variant == "mantissa")
        else {
            continue;
        };
        let histogram = |t: &MufuTable| {
            let ([m2, m1, z, p1, p2], other) = t.histogram();
            format!("{m2}/{m1}/{z}/{p1}/{p2} ({other})")
        };
        let mut deviations = tables.table(form.op()).map_or_else(String::new, histogram);
        if form.op() == MufuOp::Ex2 {
            if let Some(negative) = &tables.ex2_negative {
                deviations = format!("{deviations}; x<0 {}", histogram(negative));
            }
        }
        let by_class: Vec<String> = v
            .classes
            .iter()
            .map(|(c, n)| format!("{c} {}", n.mismatches))
            .collect();
        total = (total.0 + v.mismatches(), total.1 + v.checked());
        rows.push(Row {
            form: r.form,
            deviations,
            prediction: v.variant.clone(),
            checked: v.checked(),
            uncovered: v.classes.values().map(|c| c.uncovered).sum(),
            mismatches: format!("{} ({})", v.mismatches(), by_class.join(", ")),
        });
    }
    println!("MUFU tables of {source}");
    println!("{}", Table::new(&rows).with(Style::markdown()));
    println!(
        "mufu: {} of {} verified inputs mismatch the tables' prediction (ex2 grid {grid})",
        total.0, total.1
    );
}
