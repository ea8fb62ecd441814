//! `linattn profile --sample`: at small shapes (B = 2, H = 4, so grid y = B·H = 8 rows),
//! every launch of the chunked, recurrent and noncausal backends at N = 256, D = 64, and of
//! the chunked at N = 1024, D = 128 (where cc_forward rescales its accumulator in the CTAs
//! whose two state tiles' exponents differ: data-dependent arithmetic), forward + backward,
//! simulated whole and with 2 rows of grid y, launch by launch: the counters of the work
//! (requests, sectors, wavefronts, unique DRAM sectors, mma, barriers, shuffles, branches)
//! equal; the arithmetic warp instructions and the critical path equal unless the launch
//! says its rows differed there, then within 1%; the lane counts (thread instructions, fp32
//! flops, bytes asked; data-dependent lane predicates) and the model's time within 1%; every
//! launch with more than 2 rows actually sampled and scaled, the others run whole; in both
//! runs every launch's critical path is the exact sum of its parts. And the
//! CLI says which rows ran, for each of `--mode forward,forward+backward` in that order.
//!
//! Stamped for the simulator: without NVRTC the trial shows as ignored with the reason.
//! One trial per process: the sample setting is the shared executor's.

use std::process::Command;

use linattn_core::{Causality, FeatureMap, Problem, Shape};
use linattn_cuda::executor::sim::{self, Counters, InstrClass};
use linattn_cuda::runtime::Arch;
use linattn_lab::profile::simulate;
use linattn_testkit::Platform;

/// (backend, causality, N, D).
const CASES: [(&str, Causality, usize, usize); 4] = [
    ("sim/causal_chunked/bf16", Causality::Causal, 256, 64),
    ("sim/causal_recurrent/bf16", Causality::Causal, 256, 64),
    ("sim/noncausal/bf16", Causality::NonCausal, 256, 64),
    ("sim/causal_chunked/bf16", Causality::Causal, 1024, 128),
];

/// The warp instructions that a warp-uniform branch on data may add or skip, by class
/// (as `linattn_ptxsim::sample` lets them differ).
const ARITHMETIC: [InstrClass; 4] = [
    InstrClass::Fp32,
    InstrClass::Integer,
    InstrClass::Conversion,
    InstrClass::SpecialFunction,
];

fn main() {
    let mut trials = Vec::new();
    for (name, body) in [
        (
            "sampled_counters_and_model_equal_the_full_run",
            sampled_counters_and_model_equal_the_full_run as fn() -> Result<(), String>,
        ),
        (
            "profile_sample_names_the_rows_it_ran",
            profile_sample_names_the_rows_it_ran,
        ),
    ] {
        trials.extend(linattn_testkit::stamp_executors!(
            for platform in [Platform::Sim] => name, body()
        ));
    }
    linattn_testkit::run(trials)
}

/// The counters that do not follow active lanes.
fn warp_level(c: &Counters) -> Counters {
    Counters {
        thread_instructions: 0,
        thread_by_class: [0; 13],
        fp32_flops: 0,
        global_load_bytes: 0,
        global_store_bytes: 0,
        ..*c
    }
}

/// The warp-level counters less the arithmetic and the critical path: the work.
fn work(c: &Counters) -> Counters {
    let mut w = warp_level(c);
    for class in ARITHMETIC {
        w.warp_by_class[class as usize] = 0;
    }
    w.warp_instructions = 0;
    w.critical_path_cycles = 0;
    w.critical_path = Default::default();
    w
}

fn within(what: &str, full: f64, sampled: f64, tolerance: f64) -> Result<(), String> {
    if (sampled - full).abs() > tolerance * full.abs() {
        return Err(format!(
            "{what}: sampled {sampled} vs full {full} ({:+.3}%)",
            100.0 * (sampled - full) / full
        ));
    }
    Ok(())
}

fn sampled_counters_and_model_equal_the_full_run() -> Result<(), String> {
    sim::set_arch(Arch::SM90).map_err(|e| e.to_string())?;
    sim::set_checks(sim::Checks {
        racecheck: false,
        initcheck: false,
        globalcheck: false,
        ..sim::Checks::default()
    })
    .map_err(|e| e.to_string())?;
    let executor = sim::shared().map_err(|e| e.to_string())?;
    let mut sampled_launches = 0;
    for (backend, causality, n, d) in CASES {
        let problem = Problem::new(Shape::new(2, 4, n, d, d), causality, FeatureMap::EluPlusOne);
        executor.set_sample(None);
        let full = simulate(backend, &problem, true).map_err(|e| e.to_string())?;
        executor.set_sample(Some(2));
        let sampled = simulate(backend, &problem, true);
        executor.set_sample(None);
        let sampled = sampled.map_err(|e| e.to_string())?;
        if full.len() != sampled.len() {
            return Err(format!(
                "{backend} N={n} D={d}: {} launches whole, {} sampled",
                full.len(),
                sampled.len()
            ));
        }
        for (f, s) in full.iter().zip(&sampled) {
            let what = format!("{backend} N={n} D={d} {} {}", s.phase, s.entry);
            if f.sampled.is_some() {
                return Err(format!("{what}: sampled without --sample"));
            }
            let arithmetic_differed = match (&s.sampled, s.grid[1] > 2) {
                (Some(rows), true) if rows.scaled && rows.rows == [0, s.grid[1] - 1] => {
                    sampled_launches += 1;
                    !rows.differed.is_empty()
                }
                (None, false) => false,
                (other, _) => {
                    return Err(format!("{what}: grid {:?} but sampled {other:?}", s.grid))
                }
            };
            let (fc, sc) = (&f.counters, &s.counters);
            // The path's parts (issue, operand waits, drain, barriers) sum to it exactly.
            for (run, c) in [("whole", fc), ("sampled", sc)] {
                if c.critical_path_cycles == 0 || c.critical_path.total() != c.critical_path_cycles
                {
                    return Err(format!(
                        "{what} ({run}): critical path {} cycles, its parts {:?} sum to {}",
                        c.critical_path_cycles,
                        c.critical_path,
                        c.critical_path.total()
                    ));
                }
            }
            let exact = if arithmetic_differed {
                work(fc) == work(sc)
            } else {
                warp_level(fc) == warp_level(sc)
            };
            if !exact {
                return Err(format!(
                    "{what}: warp-level counters differ:\nfull    {fc:?}\nsampled {sc:?}"
                ));
            }
            let mut estimates = vec![
                (
                    "thread instructions",
                    fc.thread_instructions,
                    sc.thread_instructions,
                ),
                ("fp32 flops", fc.fp32_flops, sc.fp32_flops),
                (
                    "warp instructions",
                    fc.warp_instructions,
                    sc.warp_instructions,
                ),
                (
                    "critical path",
                    fc.critical_path_cycles,
                    sc.critical_path_cycles,
                ),
            ];
            for class in ARITHMETIC {
                let k = class as usize;
                estimates.push((class.name(), fc.warp_by_class[k], sc.warp_by_class[k]));
            }
            for (name, full, sampled) in estimates {
                within(&format!("{what} {name}"), full as f64, sampled as f64, 0.01)?;
            }
            within(&format!("{what} model"), f.model_ns, s.model_ns, 0.01)?;
        }
    }
    // The chunked backend's 7 launches on grid y = B·H at each shape (the training forward's
    // 2, the backward's 5) and the recurrent's 5; the noncausal kernels' grids have at most
    // 2 rows.
    if sampled_launches < 19 {
        return Err(format!("only {sampled_launches} launches were sampled"));
    }
    Ok(())
}

fn profile_sample_names_the_rows_it_ran() -> Result<(), String> {
    let out = Command::new(env!("CARGO_BIN_EXE_linattn"))
        .args([
            "profile",
            "--backend",
            "sim/causal_chunked/bf16",
            "--n",
            "256",
            "--batch",
            "2",
            "--heads",
            "4",
            "--mode",
            "forward,forward+backward",
            "--quiet",
            "--sample",
            "3",
        ])
        .output()
        .map_err(|e| format!("the linattn binary: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "exit {:?}:\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    // Both modes, in the order given: the inference forward's cc_forward_seg, then the
    // training forward's cc_forward_seg_train (both in segments by default).
    let rows = "simulated 3 of 8 rows of grid y (y = 0, 4, 7), scaled ×2.6667";
    let lines = [
        format!("cc_forward_seg (1 of 1 launches): {rows}"),
        format!("cc_forward_seg_train (1 of 1 launches): {rows}"),
    ];
    let at: Vec<Option<usize>> = lines.iter().map(|l| stdout.find(l.as_str())).collect();
    match at[..] {
        [Some(a), Some(b)] if a < b => Ok(()),
        _ => Err(format!("not {lines:?} in this order in:\n{stdout}")),
    }
}
