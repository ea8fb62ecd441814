//! Helpers shared by the softmax test files.
#![allow(dead_code)]

use linattn_core::{Causality, ErrorMetrics, FeatureMap, Inputs, Problem, Shape, Tensor};

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

pub const BOTH: [Causality; 2] = [Causality::Causal, Causality::NonCausal];
