//! The fast f32 path against the f64 oracle: RMS ratio ≤ `Precision::F32.rms_tolerance()` for
//! O and for dQ, dK, dV; every map, both causalities, with and without decay, odd N, D ≠ M,
//! value dims below, between and above the kernels' register slice.

mod common;

use common::{assert_close, cases, compare_f32, problem};
use linattn_core::{Causality, FeatureMap, Inputs, Problem, Shape};
use linattn_cpu::{fast, oracle};

fn compare(p: &Problem, seed: u64) {
    compare_f32(p, seed, fast::forward, fast::backward);
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
