//! Compiles every kernel variant of linattn-cuda for sm_80 and sm_90 with NVRTC (no GPU
//! needed), prints ptxas' register/spill table, and fails on any compile error or on a spill
//! in a variant marked hot. Reported as ignored, with the reason, when NVRTC is absent, unless
//! `LINATTN_REQUIRE_NVRTC=1` (CI), which turns absence into a failure.
//! `LINATTN_KERNEL_FILTER=<text>` keeps only variants whose label contains the text.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use linattn_cuda::kernel_variants;
use linattn_cuda::runtime::{compile, nvrtc_version, Arch, KernelVariant};
use linattn_cuda::Platform;

#[derive(Default)]
struct Outcome {
    failures: Vec<String>,
    hot_spills: Vec<String>,
    rows: Vec<(Arch, String, String)>,
}

fn compile_one(variant: &KernelVariant, arch: Arch, outcome: &Mutex<Outcome>) {
    let result = compile(variant, arch);
    let mut outcome = outcome.lock().unwrap_or_else(|poison| poison.into_inner());
    match result {
        Err(error) => outcome.failures.push(error.to_string()),
        Ok(compiled) => {
            for report in &compiled.report {
                if variant.hot && report.spills() {
                    outcome.hot_spills.push(format!(
                        "{} {} on {arch}: {} B spill stores, {} B spill loads",
                        compiled.label,
                        report.kernel,
                        report.spill_stores_bytes,
                        report.spill_loads_bytes
                    ));
                }
                let row = format!(
                    "{arch:<6} {:<4} {:>4} {:>7} {:>7} {:>7} {:>6}  {}",
                    if variant.hot { "hot" } else { "" },
                    report.registers,
                    report.spill_stores_bytes,
                    report.spill_loads_bytes,
                    report.shared_bytes,
                    report.stack_frame_bytes,
                    report.kernel,
                );
                outcome.rows.push((arch, compiled.label.clone(), row));
            }
        }
    }
}

fn main() {
    // NVRTC is what the simulator needs too: its availability decides both.
    linattn_testkit::run(linattn_testkit::stamp_executors!(
        for platform in [Platform::Sim] =>
            "every kernel variant compiles for sm_80 and sm_90 without hot spills",
            every_kernel_variant_compiles()
    ))
}

fn every_kernel_variant_compiles() -> Result<(), String> {
    let filter = std::env::var("LINATTN_KERNEL_FILTER").unwrap_or_default();
    let variants: Vec<KernelVariant> = kernel_variants()
        .into_iter()
        .filter(|v| v.label().contains(&filter))
        .collect();
    let jobs: Vec<(&KernelVariant, Arch)> = [Arch::SM80, Arch::SM90]
        .into_iter()
        .flat_map(|arch| variants.iter().map(move |v| (v, arch)))
        .collect();
    // NVRTC programs are independent: compile on every core.
    let outcome = Mutex::new(Outcome::default());
    let next = AtomicUsize::new(0);
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| {
                while let Some(&(variant, arch)) = jobs.get(next.fetch_add(1, Ordering::Relaxed)) {
                    compile_one(variant, arch, &outcome);
                }
            });
        }
    });
    let mut outcome = outcome.into_inner().unwrap_or_else(|p| p.into_inner());
    outcome.rows.sort_by(|a, b| (&a.1, a.0).cmp(&(&b.1, b.0)));

    let (major, minor) = nvrtc_version().unwrap_or_default();
    eprintln!(
        "NVRTC {major}.{minor}: {} variants x 2 archs\n{:<6} {:<4} {:>4} {:>7} {:>7} {:>7} {:>6}  kernel",
        variants.len(),
        "arch",
        "",
        "regs",
        "spill-s",
        "spill-l",
        "smem",
        "stack"
    );
    let mut last_label = String::new();
    for (_, label, row) in &outcome.rows {
        if *label != last_label {
            eprintln!("{label}");
            last_label = label.clone();
        }
        eprintln!("  {row}");
    }
    if !outcome.failures.is_empty() {
        return Err(format!(
            "{} compile failures:\n{}",
            outcome.failures.len(),
            outcome.failures.join("\n\n")
        ));
    }
    if !outcome.hot_spills.is_empty() {
        return Err(format!(
            "hot kernels spill:\n{}",
            outcome.hot_spills.join("\n")
        ));
    }
    Ok(())
}
