//! `cpu/softmax/f32` (candle-core) against the f64 oracle.

mod common;

use common::{assert_close, assert_forward_backward_close, inputs, problem, BOTH};
use linattn_core::{
    Algorithm, AttnError, Backend, BackwardKind, Causality, DeviceKind, Precision, Shape, Tensor,
};
use linattn_softmax::cpu::{
    estimated_host_bytes, gemm_workspace_allowance, CandleCpuBackend, Pass,
};
use linattn_softmax::oracle;

const TOL: f64 = 1e-5;

#[test]
fn describes_itself() {
    let backend = CandleCpuBackend::new();
    let info = backend.info();
    assert_eq!(info.name, "cpu/softmax/f32");
    assert_eq!(info.device, DeviceKind::Cpu);
    assert_eq!(info.precision, Precision::F32);
    assert_eq!(info.algorithm, Algorithm::Softmax);
    assert_eq!(info.backward, Some(BackwardKind::Autograd));
    assert_eq!(Precision::F32.rms_tolerance(), TOL);
}

#[test]
fn forward_and_gradients_match_the_oracle() {
    // Odd N, D ≠ M, several heads and batches, N = 1.
    for shape in [
        Shape::new(2, 3, 17, 8, 5),
        Shape::new(1, 2, 33, 16, 24),
        Shape::new(1, 1, 1, 4, 3),
    ] {
        let x = inputs(shape, 40 + shape.seq as u64);
        for causality in BOTH {
            let p = problem(shape, causality);
            let mut backend = CandleCpuBackend::new();
            let got = backend.forward_backward(&p, &x).unwrap();
            let want = oracle::backward(&p, &x).unwrap();
            assert_forward_backward_close(&format!("{shape} {causality}"), &want, &got, TOL);
        }
    }
}

#[test]
fn forward_without_d_out_matches_the_oracle() {
    let shape = Shape::new(2, 2, 19, 6, 10);
    let mut x = inputs(shape, 8);
    x.d_out = None;
    for causality in BOTH {
        let p = problem(shape, causality);
        let got = CandleCpuBackend::new().forward(&p, &x).unwrap();
        let want = oracle::forward(&p, &x).unwrap();
        assert_close(&format!("O {causality}"), &want, &got, TOL);
    }
}

#[test]
fn large_scores_stay_finite() {
    let shape = Shape::new(1, 1, 9, 4, 4);
    let mut x = inputs(shape, 6);
    x.q.map_in_place(|a| a * 300.0);
    for causality in BOTH {
        let p = problem(shape, causality);
        let (out, grads) = CandleCpuBackend::new().forward_backward(&p, &x).unwrap();
        let (want_out, want) = oracle::backward(&p, &x).unwrap();
        assert_close(&format!("O {causality}"), &want_out, &out, TOL);
        // Saturated rows have dQ ≈ 0 up to f32 rounding: compare dV only, and finiteness.
        assert_close(&format!("dV {causality}"), &want.dv, &grads.dv, TOL);
        assert!(grads.dq.data().iter().all(|a| a.is_finite()));
    }
}

#[test]
fn life_cycle_errors_are_typed() {
    let shape = Shape::new(1, 1, 4, 3, 3);
    let p = problem(shape, Causality::Causal);
    let mut backend = CandleCpuBackend::new();
    assert!(matches!(backend.run_forward(), Err(AttnError::State(_))));
    assert!(matches!(backend.output(), Err(AttnError::State(_))));

    let x = inputs(shape, 1);
    backend.stage(&p, &x).unwrap();
    assert!(matches!(backend.run_backward(), Err(AttnError::State(_))));
    assert!(matches!(backend.grads(), Err(AttnError::State(_))));

    let mut no_grad = x.clone();
    no_grad.d_out = None;
    backend.stage(&p, &no_grad).unwrap();
    backend.run_forward().unwrap();
    assert!(matches!(
        backend.run_backward(),
        Err(AttnError::InvalidArgument(_))
    ));

    backend.release();
    assert!(matches!(backend.run_forward(), Err(AttnError::State(_))));
}

#[test]
fn bad_inputs_are_typed_errors() {
    let shape = Shape::new(1, 2, 5, 4, 3);
    let p = problem(shape, Causality::NonCausal);
    let mut backend = CandleCpuBackend::new();

    let mut x = inputs(shape, 2);
    x.q = Tensor::zeros([1, 2, 5, 6]).unwrap();
    assert!(matches!(
        backend.stage(&p, &x),
        Err(AttnError::ShapeMismatch(_))
    ));

    let mut x = inputs(shape, 2);
    x.k.data_mut()[3] = f64::NAN;
    assert!(matches!(
        backend.forward(&p, &x),
        Err(AttnError::NonFinite {
            tensor: "k",
            index: 3,
            ..
        })
    ));

    let other = problem(Shape::new(1, 2, 6, 4, 3), Causality::NonCausal);
    assert!(matches!(
        backend.stage(&other, &inputs(shape, 2)),
        Err(AttnError::ShapeMismatch(_))
    ));
}

#[test]
fn huge_n_is_refused_before_anything_is_allocated() {
    // N = 2^20: [1,1,N,N] f32 is 4 TiB, far beyond any host this runs on.
    let shape = Shape::new(1, 1, 1 << 20, 1, 1);
    let x = inputs(shape, 3);
    let p = problem(shape, Causality::Causal);
    let mut backend = CandleCpuBackend::new();
    backend.stage(&p, &x).unwrap();
    match backend.run_forward() {
        Err(AttnError::OutOfMemory {
            device,
            requested_bytes,
            ..
        }) => {
            assert_eq!(device, "host");
            assert!(requested_bytes >= 4 << 40, "estimate {requested_bytes}");
        }
        other => panic!("expected OutOfMemory, got {other:?}"),
    }
}

#[test]
fn estimates_grow_with_n_squared_and_overflow_is_typed() {
    let small = Shape::new(2, 3, 64, 16, 16);
    let large = Shape::new(2, 3, 128, 16, 16);
    for pass in [Pass::Forward, Pass::ForwardTracked, Pass::Backward] {
        // Beyond the constant allowance for gemm's slabs, dominated by B·H·N² f32 matrices:
        // ≈ 4× when N doubles.
        let slabs = gemm_workspace_allowance();
        let a = estimated_host_bytes(&small, true, pass).unwrap() - slabs;
        let b = estimated_host_bytes(&large, true, pass).unwrap() - slabs;
        assert!(b > 3 * a && b < 5 * a, "{pass:?}: {a} -> {b}");
        assert!(
            a >= 2 * 3 * 64 * 64 * 4,
            "{pass:?}: at least one score matrix"
        );
    }
    let absurd = Shape::new(1, 1, 1 << 40, 1, 1);
    assert!(matches!(
        estimated_host_bytes(&absurd, false, Pass::Forward),
        Err(AttnError::SizeOverflow(_))
    ));
}
