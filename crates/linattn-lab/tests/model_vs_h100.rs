//! The model's time against the H100's measured time (`gpu__time_duration.sum` of each
//! run's ncu-n4096.csv under bench-results/h100/, the launches counters_vs_h100 compares).
//!
//! A regression guard at what the model achieves. The targets are every launch
//! within 1.5× and every backend's total within 1.25×:
//! - the first run (2026-11-25, 27 launches): each launch within [0.35, 1.50], 24 within
//!   1.5×, totals within [0.85, 1.10] (today 0.91–0.97); cc_scan (a kernel since removed) is
//!   modelled at 0.39–0.46×, cc_backward_dk at 1.45×;
//! - the second run (2026-11-26, today's kernels, 36 launches): **every launch within 1.5×**
//!   (today 0.70–1.39) and totals within [0.85, 1.25] (today 0.88–0.93): the issue's
//!   targets;
//! - the third run (2026-11-27, kernels of b95b7bc, 37 launches: the chunked training
//!   forward in segments): every launch within 1.5× (today 0.70–1.37), totals within
//!   [0.85, 1.25] (today 0.87–0.94).
//!
//! - at fla's benchmark shape (2, 16384, 16, 128), bf16, the 11 chunked launches of the
//!   third run's `ncu-fla.csv` (the inference forward, then forward+backward), profiled with
//!   `--sample 2` and held with `--model-within 1.25` (today 0.82–1.18; 0.42–1.04 before the
//!   latency path and issue time were combined by `model::overlap`, not the max); ~75 s here.
//!   With `LINATTN_CC_SEG_SLICES=1`: the one-slice segmented CTAs that run measured.
//!
//! Tighten these bounds as the model improves. Stamped for the simulator: without NVRTC the
//! trials show as ignored with the reason.

use linattn_lab::profile::{against, times};
use linattn_testkit::Platform;

mod h100_reference;
use h100_reference::{linattn, linattn_with, text, Run};

/// What one run's model must keep to.
struct Bounds {
    /// Each launch's model/measured within this range.
    launch: (f64, f64),
    /// At least this many launches within 1.5× either way.
    within_1_5x: usize,
    /// Each backend's total model/measured within this range.
    total: (f64, f64),
}

fn bounds(run: Run) -> Bounds {
    match run {
        Run::First => Bounds {
            launch: (0.35, 1.50),
            within_1_5x: 24,
            total: (0.85, 1.10),
        },
        Run::Second => Bounds {
            launch: (1.0 / 1.5, 1.5),
            within_1_5x: 36,
            total: (0.85, 1.25),
        },
        Run::Third => Bounds {
            launch: (1.0 / 1.5, 1.5),
            within_1_5x: 37,
            total: (0.85, 1.25),
        },
    }
}

fn main() {
    let mut trials = Vec::new();
    for (name, run) in [
        ("the_model_time_is_no_worse_than_recorded", Run::First),
        ("the_model_time_of_the_second_run", Run::Second),
        ("the_model_time_of_the_third_run", Run::Third),
    ] {
        trials.extend(linattn_testkit::stamp_executors!(
            for platform in [Platform::Sim] => name, model_time_within_bounds(run)
        ));
    }
    for (name, body) in [
        (
            "the_model_time_at_flas_shape_is_within_1_25x",
            the_model_time_at_flas_shape_is_within_1_25x as fn() -> Result<(), String>,
        ),
        (
            "model_within_names_each_launch_outside_it",
            model_within_names_each_launch_outside_it,
        ),
    ] {
        trials.extend(linattn_testkit::stamp_executors!(
            for platform in [Platform::Sim] => name, body()
        ));
    }
    linattn_testkit::run(trials)
}

/// The chunked kernels at (2, 16384, 16, 128), sampled, beside the 2026-11-27 export: every
/// launch's model within 1.25× of its measured time, and the run like for like (exit 0).
/// With one value slice per segmented CTA (`LINATTN_CC_SEG_SLICES=1`), the kernels that run
/// measured: since, D = M = 128 pairs the slices on sm_90, which no GPU has timed.
fn the_model_time_at_flas_shape_is_within_1_25x() -> Result<(), String> {
    let csv = Run::Third.fla_csv().to_string_lossy().into_owned();
    let out = linattn_with(
        &[("LINATTN_CC_SEG_SLICES", "1")],
        &[
            "profile",
            "--backend",
            "sim/causal_chunked/bf16",
            "--batch",
            "2",
            "--n",
            "16384",
            "--heads",
            "16",
            "--d",
            "128",
            "--sample",
            "2",
            "--mode",
            "forward,forward+backward",
            "--quiet",
            "--against",
            &csv,
            "--model-within",
            "1.25",
        ],
    );
    let ((stdout, stderr), code) = (text(&out), out.status.code());
    println!("{stdout}");
    if code != Some(0) {
        return Err(format!(
            "exit {code:?}:
{stderr}"
        ));
    }
    if !stdout.contains("cc_forward_seg_train") || !stdout.contains("cc_backward_dv") {
        return Err("the launches of both modes are not in the comparison".into());
    }
    Ok(())
}

/// The flag fails where a launch is off: the third run at N = 4096 replayed, whose
/// `nc_reduce` the model puts at 1.37× (the worst there), under `--model-within 1.3`.
fn model_within_names_each_launch_outside_it() -> Result<(), String> {
    let path = |p: std::path::PathBuf| p.to_string_lossy().into_owned();
    let (trace, csv) = (path(Run::Third.trace()), path(Run::Third.csv()));
    let args = |f: &'static str| {
        [
            "profile",
            "--replay",
            trace.as_str(),
            "--against",
            csv.as_str(),
            "--quiet",
            "--model-within",
            f,
        ]
    };
    let run = |f| {
        let out = linattn(&args(f));
        (out.status.code(), text(&out).1)
    };
    let (code, stderr) = run("1.3");
    let named: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("model off by more than 1.3x"))
        .collect();
    if code != Some(1) || named.len() != 2 || !named.iter().all(|l| l.contains("nc_reduce")) {
        return Err(format!(
            "expected exit 1 naming nc_reduce's two launches:
{stderr}"
        ));
    }
    let (code, stderr) = run("1.5");
    if code != Some(0) {
        return Err(format!(
            "within 1.5x expected: exit {code:?}
{stderr}"
        ));
    }
    let (code, stderr) = run("0.9");
    if code != Some(2) || !stderr.contains("--model-within 0.9: a factor ≥ 1") {
        return Err(format!(
            "a factor under 1 must be refused: exit {code:?}
{stderr}"
        ));
    }
    Ok(())
}

fn model_time_within_bounds(run: Run) -> Result<(), String> {
    let b = bounds(run);
    let (hw, sim) = run.hardware_and_simulated()?;
    let pairs = against::pair(&hw, &sim);
    let rows = times::rows(&pairs);
    println!("{}", times::render(&rows));
    if rows.len() != run.launches() {
        return Err(format!(
            "{run:?}: {} launches with a measured time, not {}",
            rows.len(),
            run.launches()
        ));
    }
    let mut problems = Vec::new();
    for r in &rows {
        let ratio = r.ratio();
        if !(b.launch.0..=b.launch.1).contains(&ratio) {
            problems.push(format!(
                "#{} {}: model/measured {ratio:.3} outside {:?}",
                r.id, r.kernel, b.launch
            ));
        }
    }
    let within = rows
        .iter()
        .filter(|r| (1.0 / 1.5..=1.5).contains(&r.ratio()))
        .count();
    if within < b.within_1_5x {
        problems.push(format!(
            "{within} launches within 1.5×, fewer than {}",
            b.within_1_5x
        ));
    }
    for (backend, measured, model, _) in times::totals(&rows) {
        let ratio = model / measured;
        if !(b.total.0..=b.total.1).contains(&ratio) {
            problems.push(format!(
                "{backend} total: model/measured {ratio:.3} outside {:?}",
                b.total
            ));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!("{run:?}:\n{}", problems.join("\n")))
    }
}
