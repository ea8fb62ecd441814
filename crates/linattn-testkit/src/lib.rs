//! What the linattn test suites share.
//!
//! * Stamping: one trial per (executor, backend) or (executor, property), run by
//!   libtest-mimic (test targets with `harness = false`), so an executor that is absent shows
//!   as `ignored` with its reason in the runner's own summary, never as a pass.
//!   `LINATTN_REQUIRE_NVRTC=1` (CI) makes the simulator's trials run, and fail, when NVRTC is
//!   missing; `LINATTN_REQUIRE_GPU=1` does the same for the GPU's trials.
//! * Comparison with the f64 oracle of linattn-cpu: inputs rounded to the backend's storage,
//!   RMS ratio within the precision's tolerance, gradients measured against the largest
//!   gradient RMS of the case (as `linattn check` does).

use libtest_mimic::{Arguments, Failed, Trial};
use linattn_core::{Backend, ErrorMetrics, Grads, Inputs, Precision, Problem, Tensor};
use linattn_cuda::Platform;

/// A trial body: Ok, or the failure message.
pub type Body = Box<dyn FnOnce() -> Result<(), String> + Send>;

/// Runs the trials with the command line's filters and exits with libtest's status.
pub fn run(trials: Vec<Trial>) -> ! {
    let args = Arguments::from_args();
    libtest_mimic::run(&args, trials).exit()
}

/// Whether trials on `platform` can run here; `Err(reason)` if not (and not required).
pub fn platform_status(platform: Platform) -> Result<(), String> {
    let required = match platform {
        Platform::Cuda => "LINATTN_REQUIRE_GPU",
        Platform::Sim => "LINATTN_REQUIRE_NVRTC",
    };
    match platform.available() {
        Ok(()) => Ok(()),
        Err(_) if std::env::var(required).as_deref() == Ok("1") => Ok(()),
        // Unsupported::Unavailable displays as "skipped: <reason>".
        Err(reason) => Err(reason
            .to_string()
            .trim_start_matches("skipped: ")
            .to_string()),
    }
}

/// A trial named `name` running `body` when `platform` is usable, else ignored with the
/// reason as its kind. A panic in `body` fails the trial (libtest-mimic catches it).
pub fn stamp(platform: Platform, name: String, body: Body) -> Trial {
    let status = platform_status(platform);
    let trial = Trial::test(name, move || {
        if let Err(reason) = platform.available() {
            return Err(Failed::from(format!(
                "{platform} required but unavailable: {reason}"
            )));
        }
        body().map_err(Failed::from)
    });
    match status {
        Ok(()) => trial,
        Err(reason) => trial
            .with_ignored_flag(true)
            .with_kind(format!("skipped: {reason}")),
    }
}

/// A trial that checks the behaviour *without* some platform (typed refusals, no panic):
/// it runs where any of `platforms` is absent and is ignored, with the reason, where all
/// are present, so a machine with everything never reports it as passed.
pub fn without_platform(name: &str, platforms: &[Platform], body: fn()) -> Trial {
    let any_absent = platforms.iter().any(|p| p.available().is_err());
    let trial = host(name, body);
    if any_absent {
        trial
    } else {
        trial
            .with_ignored_flag(true)
            .with_kind("skipped: every platform is present; this checks the path without one")
    }
}

/// A test that needs no executor (so it runs everywhere), as a trial.
pub fn host(name: &str, body: fn()) -> Trial {
    Trial::test(name, move || {
        body();
        Ok(())
    })
}

/// A CUDA backend (either platform) by name.
pub fn backend(name: &str) -> Result<Box<dyn Backend>, String> {
    backend_named(name, linattn_cuda::backends())
}

/// The backend of `all` named `name`.
pub fn backend_named(name: &str, all: Vec<Box<dyn Backend>>) -> Result<Box<dyn Backend>, String> {
    all.into_iter()
        .find(|b| b.name() == name)
        .ok_or_else(|| format!("no backend named {name}"))
}

/// Rounds through the backend's storage type so the oracle sees the same operands.
pub fn rounder(precision: Precision) -> fn(f64) -> f64 {
    match precision {
        Precision::F64 => |x| x,
        Precision::F32 => |x| x as f32 as f64,
        Precision::F16 => |x| half::f16::from_f64(x).to_f64(),
        Precision::BF16 => |x| half::bf16::from_f64(x).to_f64(),
    }
}

/// RMS ratio of `got` against `want` within `tolerance`, everything finite; `scale` is the
/// floor of the denominator (gradients that cancel by construction at N = 1).
pub fn close(
    what: &str,
    want: &Tensor,
    got: &Tensor,
    tolerance: f64,
    scale: f64,
) -> Result<(), String> {
    if want.dims() != got.dims() {
        return Err(format!(
            "{what}: dims {:?} vs {:?}",
            got.dims(),
            want.dims()
        ));
    }
    let m = ErrorMetrics::compare(want.data(), got.data());
    let denominator = rms(want.data()).max(scale);
    let diff: f64 = want
        .data()
        .iter()
        .zip(got.data())
        .map(|(a, b)| (a - b) * (a - b))
        .sum::<f64>();
    let ratio =
        (diff / want.data().len().max(1) as f64).sqrt() / denominator.max(f64::MIN_POSITIVE);
    // A NaN ratio fails too.
    if m.non_finite > 0 || ratio.is_nan() || ratio > tolerance {
        return Err(format!(
            "{what}: rms ratio {ratio:.3e} (tolerance {tolerance:.0e}), max abs {:.3e}, {} \
             non-finite",
            m.max_abs, m.non_finite
        ));
    }
    Ok(())
}

pub fn rms(values: &[f64]) -> f64 {
    (values.iter().map(|x| x * x).sum::<f64>() / values.len().max(1) as f64).sqrt()
}

/// Forward and backward of `b` on `problem` against linattn-cpu's f64 oracle, inputs
/// rounded to the backend's storage, the precision's RMS tolerance for O and each gradient.
pub fn against_oracle(
    b: &mut dyn Backend,
    problem: &Problem,
    inputs: &Inputs,
) -> Result<(), String> {
    let precision = b.info().precision;
    let tolerance = precision.rms_tolerance();
    let inputs = inputs.rounded(rounder(precision));
    let label = format!("{} {problem}", b.name());
    let (out, grads) = b
        .forward_backward(problem, &inputs)
        .map_err(|e| format!("{label}: {e}"))?;
    let (want_out, want) = linattn_cpu::oracle::backward(problem, &inputs)
        .map_err(|e| format!("{label}: oracle: {e}"))?;
    close(&format!("{label} O"), &want_out, &out, tolerance, 0.0)?;
    grads_close(&label, &want, &grads, tolerance)
}

/// dQ, dK, dV within `tolerance`, each measured against the largest gradient RMS of the case
/// (as `linattn check` does: dQ and dK vanish by construction at N = 1).
pub fn grads_close(label: &str, want: &Grads, got: &Grads, tolerance: f64) -> Result<(), String> {
    let scale = [&want.dq, &want.dk, &want.dv]
        .iter()
        .map(|t| rms(t.data()))
        .fold(0.0, f64::max);
    close(&format!("{label} dQ"), &want.dq, &got.dq, tolerance, scale)?;
    close(&format!("{label} dK"), &want.dk, &got.dk, tolerance, scale)?;
    close(&format!("{label} dV"), &want.dv, &got.dv, tolerance, scale)
}

/// Runs every check, collecting all failures into one message.
pub fn all(checks: impl IntoIterator<Item = Result<(), String>>) -> Result<(), String> {
    let failures: Vec<String> = checks.into_iter().filter_map(Result::err).collect();
    if failures.is_empty() {
        Ok(())
    } else {
        Err(failures.join("\n"))
    }
}

/// Counters of every kernel a forward and backward of `b` on `problem` ran on the
/// simulator, summed per `phase/entry` (e.g. `backward/cc_backward_dq`).
pub fn kernel_counters(
    b: &mut dyn Backend,
    problem: &Problem,
) -> Result<std::collections::BTreeMap<String, linattn_cuda::executor::sim::Counters>, String> {
    use linattn_cuda::executor::sim;
    let inputs = Inputs::random(problem.shape, 3, true).map_err(|e| e.to_string())?;
    b.stage(problem, &inputs).map_err(|e| e.to_string())?;
    let exec = sim::shared().map_err(|e| e.to_string())?;
    let mut out = std::collections::BTreeMap::new();
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
                .or_insert_with(sim::Counters::default)
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
    let figures = |c: &linattn_cuda::executor::sim::Counters| {
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
        let total =
            |m: &std::collections::BTreeMap<String, linattn_cuda::executor::sim::Counters>| {
                let mut t = linattn_cuda::executor::sim::Counters::default();
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
