//! The simulator's exact counters per kernel, and the check that they grow as a form's cost
//! does when N doubles.

use crate::outcome::all;
use linattn_core::{Backend, Inputs, Problem};
use linattn_cuda::executor::sim::{self, Counters};
use std::collections::BTreeMap;

/// Counters of every kernel a forward and backward of `b` on `problem` ran on the
/// simulator, summed per `phase/entry` (e.g. `backward/cc_backward_dq`).
pub fn kernel_counters(
    b: &mut dyn Backend,
    problem: &Problem,
) -> Result<BTreeMap<String, Counters>, String> {
    let inputs = Inputs::random(problem.shape, 3, true).map_err(|e| e.to_string())?;
    b.stage(problem, &inputs).map_err(|e| e.to_string())?;
    let exec = sim::shared().map_err(|e| e.to_string())?;
    let mut out = BTreeMap::new();
    for phase in ["forward", "backward"] {
        exec.start_profile();
        let run = if phase == "forward" {
            b.run_forward()
        } else {
            b.run_backward()
        };
        let log = exec.finish_profile();
        run.map_err(|e| format!("{} {problem}: {e}", b.name()))?;
        for launch in log {
            out.entry(format!("{phase}/{}", launch.entry))
                .or_insert_with(Counters::default)
                .add(&launch.counters);
        }
    }
    b.release();
    Ok(out)
}

/// Warp instructions and global sectors grow by `expected` (± 5%) from `problem` to the same
/// problem at twice the sequence length: for each phase in total and for every kernel that
/// does at least a twentieth of its phase's work, leaving out the kernels `exempt` names
/// (entry point, why its cost does not follow the form's). Smaller kernels are bookkeeping
/// whose cost does not follow the form's either (a reduce over split partials,
/// O(splits·C·M)); they count in the totals.
pub fn counters_scale(
    b: &mut dyn Backend,
    problem: &Problem,
    expected: f64,
    exempt: &[(&str, &str)],
) -> Result<(), String> {
    let name = b.name().to_string();
    let mut doubled = *problem;
    doubled.shape.seq *= 2;
    let small = kernel_counters(b, problem)?;
    let large = kernel_counters(b, &doubled)?;
    let (n, n2) = (problem.shape.seq, doubled.shape.seq);
    if small.keys().ne(large.keys()) {
        return Err(format!(
            "{name}: different kernels at N = {n} and {n2}: {:?} vs {:?}",
            small.keys().collect::<Vec<_>>(),
            large.keys().collect::<Vec<_>>()
        ));
    }
    let figures = |c: &Counters| {
        [
            ("warp instructions", c.warp_instructions),
            (
                "global sectors",
                c.global_load_sectors + c.global_store_sectors,
            ),
        ]
    };
    let judge = |what: &str, label: &str, x: u64, y: u64| -> Result<(), String> {
        let ratio = y as f64 / x.max(1) as f64;
        if (ratio / expected - 1.0).abs() > 0.05 {
            Err(format!(
                "{name} {label}: {what} grow {ratio:.3}× from N = {n} to {n2} ({x} → {y}), \
                 expected {expected}× ± 5%"
            ))
        } else {
            Ok(())
        }
    };
    let mut checks = Vec::new();
    for phase in ["forward", "backward"] {
        let is_exempt = |kernel: &str| {
            let entry = kernel.split('/').nth(1).unwrap_or_default();
            exempt.iter().any(|(e, _)| *e == entry)
        };
        let total = |m: &BTreeMap<String, Counters>| {
            let mut t = Counters::default();
            m.iter()
                .filter(|(k, _)| k.starts_with(phase) && !is_exempt(k))
                .for_each(|(_, c)| t.add(c));
            t
        };
        let (ts, tl) = (total(&small), total(&large));
        for ((what, x), (_, y)) in figures(&ts).into_iter().zip(figures(&tl)) {
            checks.push(judge(
                what,
                &format!("{phase} (all kernels not exempt)"),
                x,
                y,
            ));
        }
        for (kernel, a) in small.iter().filter(|(k, _)| k.starts_with(phase)) {
            if a.warp_instructions * 20 < ts.warp_instructions || is_exempt(kernel) {
                continue;
            }
            let b = &large[kernel];
            for ((what, x), (_, y)) in figures(a).into_iter().zip(figures(b)) {
                checks.push(judge(what, kernel, x, y));
            }
        }
    }
    all(checks)
}
