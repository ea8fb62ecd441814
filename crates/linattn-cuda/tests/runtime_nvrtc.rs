//! Runtime checks that need NVRTC but no GPU: compilation, the ptxas report, error logs.

//! Stamped on the simulator's platform (NVRTC present): reported as ignored with the reason
//! where NVRTC is absent, and failing then under `LINATTN_REQUIRE_NVRTC=1` (CI).

use linattn_cuda::runtime::{compile, Arch, KernelVariant};
use linattn_cuda::Platform;
use linattn_testkit::{run, stamp_executors};

const PROBE: &str = r#"
extern "C" __global__ void la_probe_copy(const la_storage_t* x, la_storage_t* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) la_store(y, i, la_phi(la_load(x, i)) + la_warp_sum(1.0f));
}
"#;

const BROKEN: &str = "extern \"C\" __global__ void la_broken() { undefined_name = 1; }\n";

fn main() {
    let checks = [
        (
            "prelude_compiles_for_every_storage_and_map",
            prelude_compiles_for_every_storage_and_map as fn(),
        ),
        (
            "compile_errors_carry_the_log_with_file_and_line",
            compile_errors_carry_the_log_with_file_and_line,
        ),
        (
            "missing_entry_point_is_a_compile_error",
            missing_entry_point_is_a_compile_error,
        ),
    ];
    // NVRTC is what the simulator needs: its availability decides these.
    run(stamp_executors!(
        for platform in [Platform::Sim], (name, check) in checks =>
            format!("nvrtc: {name}"),
            check()
    ))
}

fn prelude_compiles_for_every_storage_and_map() {
    for storage in 0..3 {
        for map in 0..3 {
            let variant = KernelVariant::new("probe.cu", PROBE)
                .define("LA_STORAGE", storage)
                .define("LA_MAP", map)
                .entry("la_probe_copy");
            let compiled = compile(&variant, Arch::SM80).expect("probe compiles");
            assert!(!compiled.cubin.is_empty());
            let report = &compiled.report;
            assert_eq!(report.len(), 1, "log:\n{}", compiled.log);
            assert_eq!(report[0].kernel, "la_probe_copy");
            assert!(report[0].registers > 0, "log:\n{}", compiled.log);
        }
    }
}

fn compile_errors_carry_the_log_with_file_and_line() {
    let variant = KernelVariant::new("broken.cu", BROKEN).entry("la_broken");
    let error = compile(&variant, Arch::SM90).expect_err("must not compile");
    let text = error.to_string();
    assert!(text.contains("kernel compilation failed"), "{text}");
    assert!(text.contains("broken.cu(1)"), "{text}");
    assert!(text.contains("undefined_name"), "{text}");
}

fn missing_entry_point_is_a_compile_error() {
    let variant = KernelVariant::new("probe.cu", PROBE).entry("la_not_there");
    let error = compile(&variant, Arch::SM90).expect_err("entry check");
    assert!(error.to_string().contains("la_not_there"), "{error}");
}
