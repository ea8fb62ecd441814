//! The estimate of each launch's executed SASS (`linattn profile --sass`: the PTX warp
//! instructions the simulator executed per PTX line, times the SASS ptxas makes of the line,
//! corrected for the loops ptxas unrolls or hoists out of and the branches it predicates)
//! against the instructions Nsight Compute counted on the H100 (`smsp__inst_executed.sum`
//! of each run's ncu-n4096.csv under bench-results/h100/), the launches replayed from the
//! runs' traces with the kernels the H100 ran.
//!
//! A guard at what the estimate achieves today: the first run (27 launches) 26 within 10%,
//! the second (36) 34, the third (37) 35, every launch of all three within [0.75, 1.25] (the misses:
//! `nc_backward_row_terms` 0.77, `cc_backward_go` 1.10); the PTX count itself is within 10%
//! for 12 and 17 of them (0.69–1.45×), and the estimate must stay closer to the hardware
//! than it over all launches (the sum of |log ratio|).
//!
//! Needs ptxas and nvdisasm (the pinned wheels `.ci/run` installs, found through
//! `LINATTN_PTXAS` and `LINATTN_NVDISASM`): without them the trials are reported as
//! skipped, with why, and fail when `LINATTN_REQUIRE_CUDA_TOOLS=1` (as CI sets it).

use linattn_lab::profile::against::{self, Pair};

mod h100_reference;
use h100_reference::Run;

/// Launches of the run whose estimate must be within 10% of the hardware's count.
fn within_10_percent(run: Run) -> usize {
    match run {
        Run::First => 26,
        Run::Second => 34,
        Run::Third => 35,
    }
}

const EVERY_LAUNCH: (f64, f64) = (0.75, 1.25);

fn main() {
    let mut trials = Vec::new();
    for (name, run) in [
        ("the_sass_estimate_of_the_first_run", Run::First),
        ("the_sass_estimate_of_the_second_run", Run::Second),
        ("the_sass_estimate_of_the_third_run", Run::Third),
    ] {
        trials.push(linattn_testkit::with_cuda_tools(name, false, move |_| {
            estimate_within_bounds(run)
        }));
    }
    linattn_testkit::run(trials)
}

/// (launch, kernel, PTX / hardware, estimate / hardware) of every compared launch.
fn ratios(pairs: &[Pair<'_>]) -> Result<Vec<(u64, String, f64, f64)>, String> {
    let counted = against::QUANTITIES
        .iter()
        .find(|q| q.label == "warp instructions")
        .ok_or("no warp instruction quantity")?;
    let mut out = Vec::new();
    for p in pairs {
        let (Some(h), Some(s), None) = (p.hw, p.sim, &p.problem) else {
            return Err(format!(
                "a launch not compared: {:?}",
                p.problem.as_deref().unwrap_or("one side only")
            ));
        };
        let hw = against::hardware(counted, h).ok_or_else(|| format!("#{}: no count", h.id))?;
        let estimate = s
            .sass_estimate
            .ok_or_else(|| format!("#{} {}: no SASS estimate", h.id, h.kernel))?;
        let ptx = s.counters.warp_instructions as f64;
        out.push((h.id, h.kernel.clone(), ptx / hw, estimate / hw));
    }
    Ok(out)
}

fn estimate_within_bounds(run: Run) -> Result<(), String> {
    let (hw, sim) = run.replayed(true)?;
    let rows = ratios(&against::pair(&hw, &sim))?;
    for (id, kernel, ptx, sass) in &rows {
        println!("#{id} {kernel}: PTX / hardware {ptx:.3}, SASS estimate / hardware {sass:.3}");
    }
    let mut problems = Vec::new();
    if rows.len() != run.launches() {
        problems.push(format!(
            "{} launches compared, not {}",
            rows.len(),
            run.launches()
        ));
    }
    for (id, kernel, _, sass) in &rows {
        if !(EVERY_LAUNCH.0..=EVERY_LAUNCH.1).contains(sass) {
            problems.push(format!(
                "#{id} {kernel}: estimate / hardware {sass:.3} outside {EVERY_LAUNCH:?}"
            ));
        }
    }
    let within = rows.iter().filter(|r| (r.3 - 1.0).abs() <= 0.1).count();
    if within < within_10_percent(run) {
        problems.push(format!(
            "{within} launches within 10%, fewer than {}",
            within_10_percent(run)
        ));
    }
    let off = |r: f64| r.ln().abs();
    let (ptx, sass): (f64, f64) = rows
        .iter()
        .fold((0.0, 0.0), |(p, s), r| (p + off(r.2), s + off(r.3)));
    println!(
        "Σ|log ratio| over {} launches: PTX {ptx:.3}, SASS estimate {sass:.3}",
        rows.len()
    );
    if sass >= ptx {
        problems.push(format!(
            "the estimate ({sass:.3}) is no closer than the PTX count ({ptx:.3})"
        ));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!("{run:?}:\n{}", problems.join("\n")))
    }
}
