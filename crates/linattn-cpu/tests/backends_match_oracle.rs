//! Every backend, driven through the Backend trait as the harness drives it, agrees with the
//! oracle within its precision's tolerance: O always, gradients where it has a backward.

mod common;

use common::cases;
use linattn_core::{ErrorMetrics, Inputs, Problem, SeededInputs, Shape};
use linattn_cpu::{backends, oracle};

#[test]
fn each_backend_matches_the_oracle_through_the_trait() {
    let shape = Shape::new(2, 2, 19, 6, 9);
    for (i, (map, causality)) in cases(8).into_iter().enumerate() {
        let p = Problem::new(shape, causality, map).with_decay(if i % 2 == 0 { 1.0 } else { 0.9 });
        let x = Inputs::random(shape, 40 + i as u64, true)
            .unwrap()
            .rounded(|v| v as f32 as f64);
        let (o_ref, g_ref) = oracle::backward(&p, &x).unwrap();
        let mut ran = 0;
        for mut b in backends() {
            if b.supports(&p).is_err() {
                continue;
            }
            ran += 1;
            let tol = b.info().precision.rms_tolerance();
            let name = b.name().to_string();
            let check = |what: &str, r: &[f64], g: &[f64]| {
                let m = ErrorMetrics::compare(r, g);
                assert!(m.passes(tol), "{name} {what}: {m:?} for {p}");
            };
            b.stage(&p, &x).unwrap();
            let fwd = b.run_forward().unwrap();
            assert!(fwd.device_bytes.is_none());
            check("O", o_ref.data(), b.output().unwrap().data());
            if b.info().backward.is_some() {
                b.run_backward().unwrap();
                let g = b.grads().unwrap();
                check("dQ", g_ref.dq.data(), g.dq.data());
                check("dK", g_ref.dk.data(), g.dk.data());
                check("dV", g_ref.dv.data(), g.dv.data());
            }
        }
        // causal: recurrent, cumsum, quadratic, stored, fast, chunked; non-causal:
        // parallel, quadratic, stored, fast.
        assert_eq!(ran, if causality.is_causal() { 6 } else { 4 }, "{p}");
    }
}

/// The harness stages seeded inputs with `stage_seeded` (f32 backends make them in f32, no
/// f64 copy); each backend must compute exactly what it computes from `stage` of the same
/// values.
#[test]
fn seeded_staging_equals_staging_the_same_values() {
    let shape = Shape::new(1, 3, 37, 5, 7);
    for (map, causality) in cases(4) {
        let p = Problem::new(shape, causality, map);
        let source = SeededInputs::new(shape, 11, true).unwrap();
        let x = source.materialize().unwrap();
        for mut b in backends() {
            if b.supports(&p).is_err() {
                continue;
            }
            b.stage(&p, &x).unwrap();
            b.run_forward().unwrap();
            b.run_backward().ok();
            let (o, g) = (b.output().unwrap(), b.grads().ok());
            b.stage_seeded(&p, &source).unwrap();
            b.run_forward().unwrap();
            b.run_backward().ok();
            assert_eq!(o, b.output().unwrap(), "{} O for {p}", b.name());
            assert_eq!(g, b.grads().ok(), "{} grads for {p}", b.name());
        }
        let wrong = SeededInputs::new(Shape::new(1, 3, 36, 5, 7), 11, false).unwrap();
        for mut b in backends().into_iter().filter(|b| b.supports(&p).is_ok()) {
            assert!(b.stage_seeded(&p, &wrong).is_err(), "{}", b.name());
        }
    }
}
