//! The model's time against the H100's measured time (bench-results/h100/ncu-n4096.csv,
//! `gpu__time_duration.sum`, the same 27 launches as counters_vs_h100).
//!
//! A regression guard, not the goal: it holds the model no worse than the latency model's
//! first step achieved (each launch's model/measured within [0.25, 1.40], 24 of the 27 within
//! 1.5×, each backend's total within [0.80, 1.10]). The targets (every launch within
//! 1.5×, every backend total within 1.25×) are not all met: cc_scan is modelled at ~0.3×.
//! Tighten these bounds as the model improves.
//!
//! Stamped for the simulator: without NVRTC the trial shows as ignored with the reason.

use linattn_lab::profile::{against, times};
use linattn_testkit::Platform;

mod h100_reference;
use h100_reference::hardware_and_simulated;

/// Each launch's model/measured within this range.
const LAUNCH_RATIO: (f64, f64) = (0.25, 1.40);
/// At least this many of the 27 within 1.5× either way.
const WITHIN_1_5X: usize = 24;
/// Each backend's total model/measured within this range.
const TOTAL_RATIO: (f64, f64) = (0.80, 1.10);

fn main() {
    let trials = linattn_testkit::stamp_executors!(
        for platform in [Platform::Sim] =>
            "the_model_time_is_no_worse_than_recorded",
            the_model_time_is_no_worse_than_recorded()
    );
    linattn_testkit::run(trials)
}

fn the_model_time_is_no_worse_than_recorded() -> Result<(), String> {
    let (hw, sim) = hardware_and_simulated()?;
    let pairs = against::pair(&hw, &sim);
    let rows = times::rows(&pairs);
    println!("{}", times::render(&rows));
    if rows.len() != 27 {
        return Err(format!(
            "{} launches with a measured time, not 27",
            rows.len()
        ));
    }
    let mut problems = Vec::new();
    for r in &rows {
        let ratio = r.ratio();
        if !(LAUNCH_RATIO.0..=LAUNCH_RATIO.1).contains(&ratio) {
            problems.push(format!(
                "#{} {}: model/measured {ratio:.3} outside {LAUNCH_RATIO:?}",
                r.id, r.kernel
            ));
        }
    }
    let within = rows
        .iter()
        .filter(|r| (1.0 / 1.5..=1.5).contains(&r.ratio()))
        .count();
    if within < WITHIN_1_5X {
        problems.push(format!(
            "{within} launches within 1.5×, fewer than {WITHIN_1_5X}"
        ));
    }
    for (backend, measured, model, _) in times::totals(&rows) {
        let ratio = model / measured;
        if !(TOTAL_RATIO.0..=TOTAL_RATIO.1).contains(&ratio) {
            problems.push(format!(
                "{backend} total: model/measured {ratio:.3} outside {TOTAL_RATIO:?}"
            ));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n"))
    }
}
