//! Helpers the GPU test files share. Each test binary uses only some of them.

#![allow(dead_code)]

use linattn_core::{Backend, ErrorMetrics, Grads, Inputs, Precision, Problem, Tensor};

/// Whether a GPU is usable; if not, prints why (`Unsupported::Unavailable` displays as
/// `skipped: <reason>`) and the test returns early.
pub fn gpu_or_skip() -> bool {
    match linattn_cuda::gpu_available() {
        Ok(()) => true,
        Err(reason) => {
            eprintln!("{reason}");
            false
        }
    }
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

/// Same dims and an RMS error ratio within `tolerance`, everything finite.
pub fn assert_close(what: &str, reference: &Tensor, got: &Tensor, tolerance: f64) {
    assert_eq!(reference.dims(), got.dims(), "{what}: dims");
    let metrics = ErrorMetrics::compare(reference.data(), got.data());
    assert!(
        metrics.passes(tolerance),
        "{what}: rms ratio {:e} (tolerance {tolerance:e}), max abs {:e}, {} non-finite",
        metrics.rms_ratio,
        metrics.max_abs,
        metrics.non_finite
    );
}

/// `assert_close` on ∂Q, ∂K and ∂V, labelled `<label> dQ` etc.
pub fn assert_grads_close(label: &str, want: &Grads, got: &Grads, tolerance: f64) {
    assert_close(&format!("{label} dQ"), &want.dq, &got.dq, tolerance);
    assert_close(&format!("{label} dK"), &want.dk, &got.dk, tolerance);
    assert_close(&format!("{label} dV"), &want.dv, &got.dv, tolerance);
}

/// The f64 oracle of `causal_recurrent_reference.rs`, handed in by the files that include it.
pub struct Oracle {
    pub forward: fn(&Problem, &Inputs) -> Tensor,
    pub backward: fn(&Problem, &Inputs) -> Grads,
}

/// Forward (and backward when `grads`) of backend `b` on `problem` against `oracle`, with
/// inputs rounded to the backend's storage and its precision's RMS tolerance.
pub fn check_against_oracle(
    mut b: Box<dyn Backend>,
    problem: &Problem,
    seed: u64,
    grads: bool,
    oracle: &Oracle,
) {
    let name = b.name().to_string();
    let precision = b.info().precision;
    let tolerance = precision.rms_tolerance();
    let inputs = Inputs::random(problem.shape, seed, grads)
        .unwrap()
        .rounded(rounder(precision));
    b.supports(problem)
        .unwrap_or_else(|e| panic!("{name} on {problem}: {e}"));
    let label = format!("{name} {problem}");
    if grads {
        let (out, g) = b.forward_backward(problem, &inputs).unwrap();
        assert_close(
            &format!("{label} O"),
            &(oracle.forward)(problem, &inputs),
            &out,
            tolerance,
        );
        let want = (oracle.backward)(problem, &inputs);
        assert_grads_close(&label, &want, &g, tolerance);
    } else {
        let out = b.forward(problem, &inputs).unwrap();
        assert_close(
            &format!("{label} O"),
            &(oracle.forward)(problem, &inputs),
            &out,
            tolerance,
        );
    }
}
