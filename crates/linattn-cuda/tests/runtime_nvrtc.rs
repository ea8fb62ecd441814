//! Runtime checks that need NVRTC but no GPU: compilation, the ptxas report, error logs.

//! Stamped on the simulator's platform (NVRTC present): reported as ignored with the reason
//! where NVRTC is absent, and failing then under `LINATTN_REQUIRE_NVRTC=1` (CI).

use linattn_cuda::runtime::{compile, Arch, KernelHeader, KernelVariant};
use linattn_cuda::Platform;
use linattn_testkit::{run, stamp_executors};

const PROBE: &str = r#"
extern "C" __global__ void la_probe_copy(const la_storage_t* x, la_storage_t* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) la_store(y, i, la_phi(la_load(x, i)) + la_warp_sum(1.0f));
}
"#;

/// A program whose kernel lives in a header it includes by name (as causal_chunked.cu's parts).
const UNIT: &str = "#include \"part.cuh\"\n";
const PART: &[KernelHeader] = &[KernelHeader {
    name: "part.cuh",
    text: r#"#pragma once
extern "C" __global__ void la_part_scale(float* y, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * y[i] + la_warp_sum(1.0f);
}
"#,
}];
const BROKEN_PART: &[KernelHeader] = &[KernelHeader {
    name: "part.cuh",
    text: "#pragma once\n\nextern \"C\" __global__ void la_part_scale() { missing_in_part = 1; }\n",
}];

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
        (
            "headers_are_passed_with_the_program",
            headers_are_passed_with_the_program,
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

fn headers_are_passed_with_the_program() {
    // The entry point is found in the header, which sees the prelude the unit was given.
    let variant = KernelVariant::new("unit.cu", UNIT)
        .headers(PART)
        .define("LA_STORAGE", 0)
        .entry("la_part_scale");
    let compiled = compile(&variant, Arch::SM90).expect("unit + header compiles");
    assert!(
        compiled.ptx.contains(".entry la_part_scale"),
        "{}",
        compiled.ptx
    );
    // Without the header the include fails, naming it.
    let alone = KernelVariant::new("unit.cu", UNIT)
        .define("LA_STORAGE", 0)
        .entry("la_part_scale");
    let error = compile(&alone, Arch::SM90).expect_err("no header, no program");
    assert!(error.to_string().contains("part.cuh"), "{error}");
    // An error inside the header names the header and its line (not a line of the unit),
    // and a header's text is part of the cache key: same unit, other header, new compile.
    let broken = KernelVariant::new("unit.cu", UNIT)
        .headers(BROKEN_PART)
        .define("LA_STORAGE", 0)
        .entry("la_part_scale");
    let text = compile(&broken, Arch::SM90)
        .expect_err("the header's error")
        .to_string();
    assert!(text.contains("part.cuh(3)"), "{text}");
    assert!(text.contains("missing_in_part"), "{text}");
}
