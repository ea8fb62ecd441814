//! Helpers shared by the softmax test files.
#![allow(dead_code)]

use linattn_core::{
    Backend, Causality, FeatureMap, Grads, Inputs, Judge, Problem, Shape, Tensor, Unsupported,
    Verdict,
};
use linattn_cuda::Platform;
use linattn_softmax::cuda::f32_backend;

/// A softmax problem; the feature map is irrelevant to softmax attention.
pub fn problem(shape: Shape, causality: Causality) -> Problem {
    Problem::new(shape, causality, FeatureMap::EluPlusOne)
}

pub fn inputs(shape: Shape, seed: u64) -> Inputs {
    Inputs::random(shape, seed, true).expect("valid test shape")
}

/// Asserts `rms(got − ref)/rms(ref) ≤ tol` (linattn-core's [`Judge`] on the tensor's own
/// RMS), naming the quantity.
pub fn assert_close(what: &str, reference: &Tensor, got: &Tensor, tol: f64) {
    assert_eq!(reference.dims(), got.dims(), "{what}: dims differ");
    if let Some(failure) = Judge::within(tol)
        .tensor(what, reference.data(), got.data())
        .failure()
    {
        panic!("{failure}");
    }
}

/// O and each of dQ, dK, dV against the reference within `tol`, each on its own RMS, named
/// with `case`; the verdict, for its ratios. Softmax holds its gradients to their own RMS
/// (stricter than the case rule for linear attention, whose dQ, dK cancel to ~0 at N = 1):
/// softmax's dQ, dK at N = 1 are exactly 0 and the backends give exactly 0.
pub fn assert_forward_backward_close(
    case: &str,
    (want_out, want): &(Tensor, Grads),
    (out, grads): &(Tensor, Grads),
    tol: f64,
) -> Verdict {
    let pairs = [
        ("O", want_out, out),
        ("dQ", &want.dq, &grads.dq),
        ("dK", &want.dk, &grads.dk),
        ("dV", &want.dv, &grads.dv),
    ];
    let judge = Judge::within(tol);
    let tensors = pairs
        .map(|(what, reference, got)| {
            assert_eq!(reference.dims(), got.dims(), "{what} {case}: dims differ");
            judge.tensor(what, reference.data(), got.data())
        })
        .to_vec();
    let verdict = Verdict { tensors };
    if !verdict.passed() {
        panic!("{case}: {}", verdict.failures("; "));
    }
    verdict
}

pub const BOTH: [Causality; 2] = [Causality::Causal, Causality::NonCausal];

/// Why `platform` cannot run the softmax backends on this machine (a GPU, cuBLAS, NVRTC), or
/// `None` when it can. Panics on anything but "unavailable": a probe problem is always valid.
pub fn skip_reason(platform: Platform) -> Option<String> {
    let probe = problem(Shape::new(1, 1, 4, 4, 4), Causality::Causal);
    match f32_backend(platform).supports(&probe) {
        Ok(()) => None,
        Err(Unsupported::Unavailable(reason)) => Some(reason),
        Err(other) => panic!("{platform}: the probe problem was refused: {other}"),
    }
}
