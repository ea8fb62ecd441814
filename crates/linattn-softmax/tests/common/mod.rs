//! Helpers shared by the softmax test files.
#![allow(dead_code)]

pub mod platforms;

use linattn_core::{Causality, ErrorMetrics, FeatureMap, Grads, Inputs, Problem, Shape, Tensor};

/// A softmax problem; the feature map is irrelevant to softmax attention.
pub fn problem(shape: Shape, causality: Causality) -> Problem {
    Problem::new(shape, causality, FeatureMap::EluPlusOne)
}

pub fn inputs(shape: Shape, seed: u64) -> Inputs {
    Inputs::random(shape, seed, true).expect("valid test shape")
}

/// Asserts `rms(got − ref)/rms(ref) ≤ tol`, naming the quantity.
pub fn assert_close(what: &str, reference: &Tensor, got: &Tensor, tol: f64) {
    assert_eq!(reference.dims(), got.dims(), "{what}: dims differ");
    let m = ErrorMetrics::compare(reference.data(), got.data());
    assert!(
        m.passes(tol),
        "{what}: rms ratio {:.3e} > {tol:.1e} (max abs {:.3e}, non-finite {})",
        m.rms_ratio,
        m.max_abs,
        m.non_finite
    );
}

/// Asserts O and each of dQ, dK, dV against the reference with [`assert_close`], each
/// named with `case`.
pub fn assert_forward_backward_close(
    case: &str,
    (want_out, want): &(Tensor, Grads),
    (out, grads): &(Tensor, Grads),
    tol: f64,
) {
    assert_close(&format!("O {case}"), want_out, out, tol);
    assert_close(&format!("dQ {case}"), &want.dq, &grads.dq, tol);
    assert_close(&format!("dK {case}"), &want.dk, &grads.dk, tol);
    assert_close(&format!("dV {case}"), &want.dv, &grads.dv, tol);
}

pub const BOTH: [Causality; 2] = [Causality::Causal, Causality::NonCausal];
