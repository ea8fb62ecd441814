//! Compiles every `causal_chunked.cu` program (f16/bf16 × D × M × map) for sm_80 and sm_90
//! with NVRTC (no GPU needed) and requires zero spills: these are the hot kernels of the
//! chunked form. Prints ptxas' per-kernel registers/spills/static shared memory.

use linattn_cuda::causal_chunked::{kernel_variants, ENTRY_POINTS};
use linattn_cuda::runtime::{compile, nvrtc_available, Arch};

#[test]
fn chunked_kernels_compile_without_spills_for_sm80_and_sm90() {
    if let Err(reason) = nvrtc_available() {
        if std::env::var("LINATTN_REQUIRE_NVRTC").as_deref() == Ok("1") {
            panic!("LINATTN_REQUIRE_NVRTC=1 but {reason}");
        }
        eprintln!("skipped: {reason}");
        return;
    }
    let variants = kernel_variants();
    assert_eq!(variants.len(), 2 * 2 * 2, "f16/bf16 × D × M");
    let mut problems = Vec::new();
    for arch in [Arch::SM80, Arch::SM90] {
        for variant in &variants {
            assert!(variant.hot, "{} must be marked hot", variant.label());
            let compiled = match compile(variant, arch) {
                Ok(c) => c,
                Err(e) => {
                    problems.push(e.to_string());
                    continue;
                }
            };
            for entry in ENTRY_POINTS {
                match compiled.report.iter().find(|r| r.kernel == entry) {
                    None => problems.push(format!("{}: {entry} missing", compiled.label)),
                    Some(r) => {
                        eprintln!(
                            "{arch} {:<10} regs {:>3} spill {:>4}/{:<4} smem {:>5} stack {:>4}  {}",
                            r.kernel,
                            r.registers,
                            r.spill_stores_bytes,
                            r.spill_loads_bytes,
                            r.shared_bytes,
                            r.stack_frame_bytes,
                            compiled.label
                        );
                        if r.spills() {
                            problems.push(format!("{} {entry} on {arch} spills", compiled.label));
                        }
                    }
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
