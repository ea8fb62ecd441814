//! The fast f32 path against the f64 oracle: RMS ratio ≤ `Precision::F32.rms_tolerance()` for
//! O and for dQ, dK, dV; every map, both causalities, with and without decay, odd N, D ≠ M,
//! value dims below, between and above the kernels' register slice.

mod common;

use common::{cases, problem};
use linattn_core::{Causality, ErrorMetrics, FeatureMap, Inputs, Precision, Problem, Shape};
use linattn_cpu::{fast, oracle};

fn rounded_inputs(shape: Shape, seed: u64) -> Inputs {
    // The oracle sees exactly the f32 operands the fast path sees.
    Inputs::random(shape, seed, true)
        .unwrap()
        .rounded(|x| x as f32 as f64)
}

fn rms(x: impl Iterator<Item = f64>) -> f64 {
    let (sum, count) = x.fold((0.0, 0usize), |(s, c), v| (s + v * v, c + 1));
    (sum / count.max(1) as f64).sqrt()
}

fn widen(x: &[f32]) -> Vec<f64> {
    x.iter().map(|&v| v as f64).collect()
}

fn assert_close(what: &str, p: &Problem, reference: &[f64], got: &[f32]) {
    let m = ErrorMetrics::compare(reference, &widen(got));
    let tol = Precision::F32.rms_tolerance();
    assert!(
        m.passes(tol),
        "{what}: rms ratio {:e} > {tol:e} (max abs {:e}) for {p}",
        m.rms_ratio,
        m.max_abs
    );
}

/// Gradients: the RMS ratio of each tensor. At N = 1 a normalised O is `v·a/(a+ε)` with
/// `a = φ(q)·φ(k)`, so the exact dQ, dK are of order ε (exactly 0 for efficient attention)
/// and come out of an f32 cancellation: there they are judged against the RMS of the
/// case's largest gradient instead of their own.
fn assert_grads_close(p: &Problem, reference: [&[f64]; 3], got: [&[f32]; 3]) {
    let tol = Precision::F32.rms_tolerance();
    let largest = reference
        .iter()
        .map(|r| rms(r.iter().copied()))
        .fold(0.0, f64::max);
    for ((name, r), g) in ["dQ", "dK", "dV"].iter().zip(reference).zip(got) {
        let g = widen(g);
        assert!(
            g.iter().all(|x| x.is_finite()),
            "{name}: non-finite for {p}"
        );
        let floor = if p.shape.seq == 1 { largest } else { 0.0 };
        let scale = rms(r.iter().copied()).max(floor);
        let err = rms(r.iter().zip(&g).map(|(a, b)| a - b));
        let ratio = if scale > 0.0 { err / scale } else { err };
        assert!(
            ratio <= tol,
            "{name}: rms error / scale {ratio:e} > {tol:e} for {p}"
        );
    }
}

fn compare(p: &Problem, seed: u64) {
    let x = rounded_inputs(p.shape, seed);
    let (q, k, v) = (x.q.to_f32(), x.k.to_f32(), x.v.to_f32());
    let g = x.d_out.as_ref().unwrap().to_f32();

    let o = fast::forward(p, &q, &k, &v).unwrap();
    let (o_ref, grads_ref) = oracle::backward(p, &x).unwrap();
    assert_close("O (forward)", p, o_ref.data(), &o);

    let (o_b, grads) = fast::backward(p, &q, &k, &v, &g).unwrap();
    assert_close("O (backward)", p, o_ref.data(), &o_b);
    assert_grads_close(
        p,
        [
            grads_ref.dq.data(),
            grads_ref.dk.data(),
            grads_ref.dv.data(),
        ],
        [&grads.dq, &grads.dk, &grads.dv],
    );
}

#[test]
fn every_map_and_causality_at_odd_lengths() {
    let mut seed = 1;
    for n in [1, 7, 63, 65] {
        for (map, causality) in cases(16) {
            for decay in [1.0, 0.95] {
                seed += 1;
                compare(
                    &problem(Shape::new(1, 2, n, 8, 5), causality, map, decay),
                    seed,
                );
            }
        }
    }
}

#[test]
fn value_dims_around_the_register_slice() {
    // 32 is the kernels' slice width: 40 = one slice + tail, 64 = two slices, 31 = tail only.
    let mut seed = 1000;
    for (d, m) in [(16, 40), (24, 64), (7, 31)] {
        for (map, causality) in cases(24) {
            seed += 1;
            compare(
                &problem(Shape::new(2, 1, 33, d, m), causality, map, 0.98),
                seed,
            );
        }
    }
}

/// FAVOR+ features `exp(w·x' − ‖x'‖²/2)` of long inputs are tiny (e^-40 and below): their
/// products underflow f32 unless the stabiliser shifts the exponents. With ε = 0 the oracle's
/// O is the plain ratio, so an unshifted f32 path would give 0/0.
#[test]
fn favor_stabiliser_survives_tiny_features() {
    for causality in [Causality::Causal, Causality::NonCausal] {
        let map = FeatureMap::Favor {
            features: 32,
            seed: 3,
        };
        let p = problem(Shape::new(1, 2, 50, 16, 16), causality, map, 1.0).with_eps(0.0);
        let x = Inputs::random(p.shape, 77, true)
            .unwrap()
            .rounded(|v| (6.0 * v) as f32 as f64);
        let (q, k, v) = (x.q.to_f32(), x.k.to_f32(), x.v.to_f32());
        let o = fast::forward(&p, &q, &k, &v).unwrap();
        let o_ref = oracle::forward(&p, &x).unwrap();
        assert_close("O (scaled inputs)", &p, o_ref.data(), &o);
    }
}
