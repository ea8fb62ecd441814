//! `{cuda,sim}/softmax/{f32,f16}` and `cuda/softmax+gemmkernel/{f32,f16}` against the f64
//! oracle, on every platform present: the PTX simulator wherever NVRTC is (it runs the same
//! kernels, GEMMs included, with memcheck, racecheck, initcheck and synccheck), a GPU where
//! there is one. A platform that is absent shows as ignored, with its reason, for each of
//! its trials.

mod common;

use common::{assert_forward_backward_close, inputs, problem, skip_reason, BOTH};
use linattn_core::{
    Algorithm, AttnError, Backend, Grads, Inputs, Precision, Shape, Tensor, Unsupported,
};
use linattn_cuda::Platform;
use linattn_softmax::cuda::{device_bytes_needed, f16_backend, f32_backend, with_gemm, GemmEngine};
use linattn_softmax::oracle;
use linattn_testkit::stamp_executors;

/// The row kernels run one 256-thread block per row: the two block reductions per row are a
/// fixed cost that dominates until N ≫ 256 (their work grows 3.1× from N = 1024 to 2048, not
/// 4×); the GEMMs carry the N² growth the test judges.
const ROW_KERNELS: &[(&str, &str)] = &[
    ("sm_forward_rows", "per-row reductions dominate at N ≤ 2048"),
    (
        "sm_backward_rows",
        "per-row reductions dominate at N ≤ 2048",
    ),
];

fn main() {
    let mut trials = stamp_executors![
        forward_and_gradients_match_the_oracle,
        repeated_runs_give_the_same_results,
        device_bytes_are_the_estimate,
        a_problem_too_large_for_the_device_is_out_of_memory,
    ];
    // Counters exist on the simulator only.
    trials.extend(stamp_executors!(
        for platform in [Platform::Sim], precision in ["f32", "f16"] =>
            format!("{platform}/softmax/{precision}: every kernel's counters grow 4× when N doubles"),
            counters_grow_fourfold(&format!("{platform}/softmax/{precision}"))
    ));
    trials.push(linattn_testkit::host("names_and_kinds", names_and_kinds));
    trials.push(linattn_testkit::host(
        "gemm_engines_per_platform",
        gemm_engines_per_platform,
    ));
    trials.push(linattn_testkit::without_platform(
        "an_absent_platform_refuses_every_call_by_type",
        &Platform::ALL,
        an_absent_platform_refuses_every_call_by_type,
    ));
    trials.push(linattn_testkit::host(
        "device_byte_estimates_count_the_n_squared_buffers",
        device_byte_estimates_count_the_n_squared_buffers,
    ));
    trials.push(linattn_testkit::host(
        "values_beyond_f16_range_are_refused_by_name",
        values_beyond_f16_range_are_refused_by_name,
    ));
    linattn_testkit::run(trials)
}

/// f32 and f16 on `platform`, once per GEMM engine the platform has (cuda: cuBLAS, then the
/// GEMM kernel; sim: the GEMM kernel): the registered backends (`names_and_kinds` holds
/// them to exactly that).
fn backends_with_every_engine(platform: Platform) -> Vec<Box<dyn Backend>> {
    linattn_softmax::cuda::backends(platform)
}

/// Inputs as the backend stores them (f16 rounds once), so the oracle sees the same operands.
fn as_stored(x: &Inputs, precision: Precision) -> Inputs {
    match precision {
        Precision::F16 => x.rounded(|a| half::f16::from_f64(a).to_f64()),
        _ => x.clone(),
    }
}

/// Asserts each of O, dQ, dK, dV within `tol` (RMS error ratio), printing the ratios.
/// Returns the largest ratio.
fn check_close(case: &str, want: &(Tensor, Grads), got: &(Tensor, Grads), tol: f64) -> f64 {
    let verdict = assert_forward_backward_close(case, want, got, tol);
    let line: String = verdict
        .tensors
        .iter()
        .map(|t| format!(" {} {:.2e}", t.tensor, t.judged_ratio))
        .collect();
    println!("{case}: rms ratio{line} (tolerance {tol:.0e})");
    verdict.worst_ratio()
}

fn counters_grow_fourfold(name: &str) -> Result<(), String> {
    let problem = problem(
        Shape::new(1, 1, 512, 64, 64),
        linattn_core::Causality::Causal,
    );
    let mut backend = linattn_testkit::backend_named(name, linattn_softmax::backends())?;
    linattn_testkit::counters_scale(backend.as_mut(), &problem, 4.0, ROW_KERNELS)
}

fn names_and_kinds() {
    let names: Vec<String> = linattn_softmax::backends()
        .iter()
        .map(|b| b.name().to_string())
        .collect();
    assert_eq!(
        names,
        [
            "cpu/softmax/f32",
            "cuda/softmax/f32",
            "cuda/softmax/f16",
            "cuda/softmax+gemmkernel/f32",
            "cuda/softmax+gemmkernel/f16",
            "sim/softmax/f32",
            "sim/softmax/f16"
        ]
    );
    // Each platform lists every engine it can run once: cuda cuBLAS (its default, unsuffixed)
    // and the GEMM kernel; sim only the GEMM kernel, its default (no sim/softmax+gemmkernel).
    for platform in Platform::ALL {
        let registered: Vec<String> = backends_with_every_engine(platform)
            .iter()
            .map(|b| b.name().to_string())
            .collect();
        let mut built = Vec::new();
        for engine in [GemmEngine::Cublas, GemmEngine::Kernel] {
            if let Ok(backend) = with_gemm::<f32>(platform, engine) {
                built.push(backend.name().to_string());
                let f16 = with_gemm::<half::f16>(platform, engine).unwrap();
                built.push(f16.name().to_string());
            }
        }
        assert_eq!(registered, built, "{platform}");
    }
    for platform in Platform::ALL {
        for backend in [
            Box::new(f32_backend(platform)) as Box<dyn Backend>,
            Box::new(f16_backend(platform)),
        ] {
            assert!(backend
                .name()
                .starts_with(&format!("{}/softmax/", platform.family())));
            assert_eq!(backend.info().device, platform.device_kind());
            assert_eq!(backend.info().algorithm, Algorithm::Softmax);
        }
    }
}

fn gemm_engines_per_platform() {
    assert_eq!(
        f32_backend(Platform::Cuda).form().engine,
        GemmEngine::Cublas
    );
    assert_eq!(f32_backend(Platform::Sim).form().engine, GemmEngine::Kernel);
    let kernel_on_gpu = with_gemm::<f32>(Platform::Cuda, GemmEngine::Kernel)
        .expect("the GEMM kernel runs on a GPU too");
    assert_eq!(kernel_on_gpu.name(), "cuda/softmax+gemmkernel/f32");
    let default =
        with_gemm::<half::f16>(Platform::Sim, GemmEngine::Kernel).expect("the simulator's default");
    assert_eq!(default.name(), "sim/softmax/f16");
    let error = with_gemm::<f32>(Platform::Sim, GemmEngine::Cublas)
        .err()
        .expect("no cuBLAS on the simulator");
    assert!(
        matches!(&error, Unsupported::Problem(text) if text.contains("cuBLAS")),
        "{error}"
    );
}

/// Every backend whose platform is absent here refuses each call with the same typed reason
/// (cudarc, cuBLAS and the simulator are never reached). Runs wherever a platform is absent.
fn an_absent_platform_refuses_every_call_by_type() {
    let mut refused = 0;
    for platform in Platform::ALL {
        if skip_reason(platform).is_none() {
            continue;
        }
        for mut backend in backends_with_every_engine(platform) {
            let shape = Shape::new(1, 1, 4, 4, 4);
            let p = problem(shape, linattn_core::Causality::Causal);
            let reason = backend.supports(&p).expect_err("platform absent");
            assert!(reason.is_unavailable(), "{}: {reason}", backend.name());
            let x = inputs(shape, 1);
            let error = backend.forward(&p, &x).expect_err("no device, no result");
            assert_eq!(error, AttnError::Unsupported(reason.clone()));
            assert_eq!(
                backend.stage(&p, &x),
                Err(AttnError::Unsupported(reason.clone()))
            );
            assert_eq!(
                backend.run_forward(),
                Err(AttnError::Unsupported(reason.clone()))
            );
            assert_eq!(backend.run_backward(), Err(AttnError::Unsupported(reason)));
            refused += 1;
        }
    }
    assert!(
        refused > 0,
        "a platform is absent, so some backend must refuse"
    );
}

/// O, dQ, dK, dV against the oracle for both causalities, odd N (1, 7, 65, 130), D ≠ M,
/// D not a multiple of 16, B·H > 1, N past two and four 64-row GEMM tiles, D = 64.
fn forward_and_gradients_match_the_oracle(platform: Platform) {
    for mut backend in backends_with_every_engine(platform) {
        let precision = backend.info().precision;
        let tol = precision.rms_tolerance();
        let mut worst = 0.0f64;
        for shape in [
            Shape::new(1, 1, 1, 8, 8),
            Shape::new(1, 3, 7, 16, 24),
            Shape::new(2, 1, 65, 32, 16),
            Shape::new(1, 2, 130, 24, 40),
            Shape::new(1, 2, 300, 64, 32),
        ] {
            let x = as_stored(&inputs(shape, 70 + shape.seq as u64), precision);
            for causality in BOTH {
                let p = problem(shape, causality);
                let got = backend
                    .forward_backward(&p, &x)
                    .unwrap_or_else(|e| panic!("{} {shape} {causality}: {e}", backend.name()));
                let want = oracle::backward(&p, &x).unwrap();
                let case = format!("{} {shape} {causality}", backend.name());
                worst = worst.max(check_close(&case, &want, &got, tol));
            }
        }
        println!(
            "{}: largest rms ratio {worst:.2e} of tolerance {tol:.0e}",
            backend.name()
        );
    }
}

/// A forward without the backward, then the backward reusing the held P, and a second
/// forward on the same staged inputs: the results do not depend on what ran before.
fn repeated_runs_give_the_same_results(platform: Platform) {
    for mut backend in backends_with_every_engine(platform) {
        let shape = Shape::new(2, 2, 33, 16, 8);
        let precision = backend.info().precision;
        let x = as_stored(&inputs(shape, 5), precision);
        let p = problem(shape, linattn_core::Causality::Causal);
        backend.stage(&p, &x).unwrap();
        backend.run_forward().unwrap();
        let first = backend.output().unwrap();
        backend.run_backward().unwrap();
        let grads = backend.grads().unwrap();
        backend.run_forward().unwrap();
        assert_eq!(backend.output().unwrap(), first, "{}", backend.name());
        assert!(
            backend.grads().is_err(),
            "a new forward drops the old gradients"
        );
        backend.run_backward().unwrap();
        assert_eq!(backend.grads().unwrap(), grads, "{}", backend.name());
    }
}

/// `RunStats::device_bytes` is exactly what `device_bytes_needed` promises: P and O in the
/// forward; P and O still held plus dS, dQ, dK, dV in the backward.
fn device_bytes_are_the_estimate(platform: Platform) {
    for mut backend in backends_with_every_engine(platform) {
        let shape = Shape::new(1, 2, 20, 16, 8);
        let precision = backend.info().precision;
        let x = as_stored(&inputs(shape, 9), precision);
        let p = problem(shape, linattn_core::Causality::NonCausal);
        backend.stage(&p, &x).unwrap();
        let forward = backend.run_forward().unwrap();
        assert_eq!(
            forward.device_bytes,
            Some(device_bytes_needed(&shape, precision, false).unwrap()),
            "{} forward",
            backend.name()
        );
        let backward = backend.run_backward().unwrap();
        assert_eq!(
            backward.device_bytes,
            Some(device_bytes_needed(&shape, precision, true).unwrap()),
            "{} backward",
            backend.name()
        );
    }
}

fn a_problem_too_large_for_the_device_is_out_of_memory(platform: Platform) {
    for mut backend in backends_with_every_engine(platform) {
        // B·H·N² = 2^40 elements: terabytes, more than any GPU (or the simulator) holds; the
        // inputs are 2^20 elements each.
        let shape = Shape::new(1, 1, 1 << 20, 1, 1);
        let x = inputs(shape, 2);
        let p = problem(shape, linattn_core::Causality::Causal);
        backend.stage(&p, &x).unwrap();
        match backend.run_forward() {
            Err(AttnError::OutOfMemory {
                requested_bytes, ..
            }) => assert!(requested_bytes >= 1 << 40),
            other => panic!("{}: expected OutOfMemory, got {other:?}", backend.name()),
        }
        // The backend is still usable afterwards.
        let small = Shape::new(1, 1, 8, 4, 4);
        let y = inputs(small, 3);
        backend
            .forward(&problem(small, linattn_core::Causality::Causal), &y)
            .unwrap();
    }
}

fn device_byte_estimates_count_the_n_squared_buffers() {
    let shape = Shape::new(2, 4, 1000, 64, 32);
    let square = 2 * 4 * 1000 * 1000;
    let forward = device_bytes_needed(&shape, Precision::F32, false).unwrap();
    assert_eq!(forward, 4 * (square + 2 * 4 * 1000 * 32));
    let backward = device_bytes_needed(&shape, Precision::F16, true).unwrap();
    assert_eq!(
        backward,
        2 * (2 * square + 2 * (2 * 4 * 1000 * 32) + 2 * (2 * 4 * 1000 * 64))
    );
    let absurd = Shape::new(1, 1, 1 << 40, 1, 1);
    assert!(matches!(
        device_bytes_needed(&absurd, Precision::F32, false),
        Err(AttnError::SizeOverflow(_))
    ));
}

fn values_beyond_f16_range_are_refused_by_name() {
    use linattn_core::TensorRole;
    use linattn_softmax::cuda::to_storage;
    let t = Tensor::from_vec([1, 1, 1, 3], vec![1.0, -7e4, 2.0]).unwrap();
    let error = to_storage::<half::f16>(&t, TensorRole::V).unwrap_err();
    let expected = "v holds -70000 at flat index 1";
    assert!(
        matches!(&error, AttnError::InvalidArgument(text) if text.starts_with(expected)),
        "{error}"
    );
    assert_eq!(
        to_storage::<f32>(&t, TensorRole::V).unwrap(),
        vec![1.0, -7e4, 2.0]
    );
}
