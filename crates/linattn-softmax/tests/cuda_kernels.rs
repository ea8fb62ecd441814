//! `kernels/softmax.cu` on its own:
//! * it compiles (NVRTC + ptxas) for real sm_80 and sm_90 targets, in every variant the
//!   backends use, without spilling (NVRTC only: ignored by the runner, with the reason, when
//!   NVRTC is absent, unless LINATTN_REQUIRE_NVRTC=1, then it fails);
//! * each GEMM engine of each platform (sim: `sm_gemm`; cuda: cuBLAS and
//!   `sm_gemm`) computes every plan softmax attention uses (`RowMajorGemm::all`: AB,
//!   ABᵀ, AᵀB) like a plain f64 matmul, for odd sizes, tails of every tile and batches.

mod common;

use std::sync::Arc;

use linattn_core::Judge;
use linattn_cuda::executor::gemm::RowMajorGemm;
use linattn_cuda::memory::{DeviceBuffer, MemoryMeter, StorageElem};
use linattn_cuda::runtime::{self, Arch};
use linattn_cuda::signature::{check_against_source, check_form_ptx};
use linattn_cuda::{Executor, Platform};
use linattn_softmax::cuda::{BatchedGemm, GemmEngine};
use linattn_testkit::stamp_executors;

fn main() {
    let mut trials = stamp_executors![
        gemm_engines_match_f64_matmul,
        gemm_kernel_loops_over_batches_beyond_grid_y,
        gemm_checks_buffer_sizes,
    ];
    trials.push(linattn_testkit::Trial::test(
        "softmax.cu: argument structs match the source declarations",
        || check_against_source(&linattn_softmax::cuda::FORM).map_err(Into::into),
    ));
    // NVRTC is what the simulator needs too: its availability decides both.
    trials.extend(stamp_executors!(
        for platform in [Platform::Sim] =>
            "softmax_kernels_compile_for_sm80_and_sm90_without_spills",
            softmax_kernels_compile_for_sm80_and_sm90_without_spills()
    ));
    trials.extend(stamp_executors!(
        for platform in [Platform::Sim] =>
            "softmax.cu: argument structs match the PTX of every variant",
            check_form_ptx(&linattn_softmax::cuda::FORM)
    ));
    linattn_testkit::run(trials)
}

fn softmax_kernels_compile_for_sm80_and_sm90_without_spills() {
    let variants = linattn_softmax::kernel_variants();
    assert_eq!(variants.len(), 2, "f32 and f16 variants");
    for variant in &variants {
        assert_eq!(
            variant.entry_points,
            ["sm_forward_rows", "sm_backward_rows", "sm_gemm"]
        );
        for arch in [Arch::SM80, Arch::SM90] {
            let compiled = runtime::compile(variant, arch)
                .unwrap_or_else(|e| panic!("{} for {arch}: {e}", variant.label()));
            assert!(!compiled.cubin.is_empty());
            for entry in &variant.entry_points {
                let report = compiled
                    .report
                    .iter()
                    .find(|r| &r.kernel == entry)
                    .unwrap_or_else(|| panic!("{entry} missing from the ptxas report"));
                println!(
                    "{} {arch} {entry}: {} registers, {} B smem, spills {}/{} B",
                    variant.label(),
                    report.registers,
                    report.shared_bytes,
                    report.spill_stores_bytes,
                    report.spill_loads_bytes
                );
                assert!(!report.spills(), "{entry} spills on {arch}");
            }
        }
    }
}

/// Deterministic values in [−1, 1), exactly representable in `T`.
fn values<T: StorageElem>(len: usize, seed: u64) -> Vec<T> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            T::from_f64((state >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0)
        })
        .collect()
}

/// `C_z = op(A_z)·op(B_z)` in f64, straight from the plan's definition.
fn reference(plan: &RowMajorGemm, batch: usize, a: &[f64], b: &[f64]) -> Vec<f64> {
    let (m, n, k) = (plan.m as usize, plan.n as usize, plan.k as usize);
    let mut c = vec![0.0; batch * m * n];
    for z in 0..batch {
        let a = &a[z * m * k..(z + 1) * m * k];
        let b = &b[z * k * n..(z + 1) * k * n];
        for i in 0..m {
            for j in 0..n {
                c[z * m * n + i * n + j] = (0..k)
                    .map(|p| {
                        let x = if plan.a_transposed {
                            a[p * m + i]
                        } else {
                            a[i * k + p]
                        };
                        let y = if plan.b_transposed {
                            b[j * k + p]
                        } else {
                            b[p * n + j]
                        };
                        x * y
                    })
                    .sum();
            }
        }
    }
    c
}

/// One plan on one engine against [`reference`]; returns the RMS error ratio.
fn gemm_case<T: StorageElem>(
    exec: &Arc<dyn Executor>,
    gemm: &BatchedGemm<T>,
    plan: RowMajorGemm,
    batch: usize,
    seed: u64,
) -> f64 {
    let meter = MemoryMeter::new();
    let a = values::<T>(batch * plan.stride_a() as usize, seed);
    let b = values::<T>(batch * plan.stride_b() as usize, seed + 1);
    let a_dev = DeviceBuffer::upload(exec, &meter, &a).unwrap();
    let b_dev = DeviceBuffer::upload(exec, &meter, &b).unwrap();
    // Uninitialised: the simulator's initcheck fails a read of it, and any element the
    // kernel leaves unwritten would be garbage here.
    let mut c_dev =
        DeviceBuffer::<T>::uninit(exec, &meter, batch * plan.stride_c() as usize).unwrap();
    let case = format!("{:?} {} {plan:?} × {batch}", gemm.engine(), T::PRECISION);
    gemm.run(plan, batch, &a_dev, &b_dev, &mut c_dev, "test GEMM")
        .unwrap_or_else(|e| panic!("{case}: {e}"));
    let got = c_dev.download_f64().unwrap();
    let widen = |x: &[T]| x.iter().map(|v| v.to_f64()).collect::<Vec<f64>>();
    let want = reference(&plan, batch, &widen(&a), &widen(&b));
    let verdict = Judge::for_precision(T::PRECISION).tensor(&case, &want, &got);
    if let Some(failure) = verdict.failure() {
        panic!("{failure}");
    }
    verdict.judged_ratio
}

fn gemm_engine_cases<T: StorageElem>(exec: &Arc<dyn Executor>, engine: GemmEngine) {
    let gemm = BatchedGemm::<T>::new(exec, engine).unwrap();
    let mut worst = 0.0f64;
    // (N, width, batch): 1×1; odd sizes inside one tile; tiles plus a tail in every
    // dimension (m, n past 64, k past 16 with a tail); exact tiles.
    for (seq, width, batch) in [
        (1, 1, 1),
        (7, 5, 3),
        (65, 24, 2),
        (130, 40, 1),
        (17, 70, 1),
        (64, 16, 2),
    ] {
        for plan in RowMajorGemm::all(seq, width) {
            worst = worst.max(gemm_case(exec, &gemm, plan, batch, seq as u64 * 31 + 7));
        }
    }
    println!(
        "{} {:?} {}: largest rms ratio {worst:.2e}",
        exec.platform(),
        engine,
        T::PRECISION
    );
}

/// Each engine the platform has, f32 and f16, against the f64 matmul.
fn gemm_engines_match_f64_matmul(platform: Platform) {
    let exec = platform.executor().unwrap();
    for engine in [GemmEngine::Cublas, GemmEngine::Kernel] {
        if engine.check_platform(platform).is_err() {
            continue;
        }
        gemm_engine_cases::<f32>(&exec, engine);
        gemm_engine_cases::<half::f16>(&exec, engine);
    }
}

/// More batches than grid.y: `sm_gemm` loops over them. The cap is lowered from the
/// device's 65535 to 2 (65536 simulated blocks take minutes), with 5 batches so the blocks
/// loop unevenly (3 and 2 batches).
fn gemm_kernel_loops_over_batches_beyond_grid_y(platform: Platform) {
    let exec = platform.executor().unwrap();
    let gemm = BatchedGemm::<f32>::new(&exec, GemmEngine::Kernel)
        .unwrap()
        .with_max_grid_y(2);
    for plan in RowMajorGemm::all(70, 9) {
        gemm_case(&exec, &gemm, plan, 5, 11);
    }
}

/// Wrongly sized buffers are refused before any launch.
fn gemm_checks_buffer_sizes(platform: Platform) {
    let exec = platform.executor().unwrap();
    let gemm = BatchedGemm::<f32>::new(&exec, GemmEngine::default_for(platform)).unwrap();
    let meter = MemoryMeter::new();
    let plan = RowMajorGemm::scores(4, 3);
    let a = DeviceBuffer::<f32>::zeros(&exec, &meter, 12).unwrap();
    let mut c = DeviceBuffer::<f32>::zeros(&exec, &meter, 16).unwrap();
    let error = gemm.run(plan, 2, &a, &a, &mut c, "short").unwrap_err();
    assert!(error.to_string().contains("A holds 12 elements"), "{error}");
}
