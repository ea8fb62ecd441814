//! `cuda/softmax/{f32,f16}` against the f64 oracle. Needs a CUDA device: without one every
//! test prints `skipped: <reason>` and checks only that the backends refuse cleanly.

mod common;

use common::{assert_forward_backward_close, inputs, problem, BOTH};
use linattn_core::{
    Algorithm, AttnError, Backend, Causality, DeviceKind, Inputs, Precision, Shape, Unsupported,
};
use linattn_softmax::cuda::{device_bytes_needed, f16_backend, f32_backend};
use linattn_softmax::oracle;

fn cuda_backends() -> Vec<Box<dyn Backend>> {
    vec![Box::new(f32_backend()), Box::new(f16_backend())]
}

/// The reason to skip, printed, when this machine cannot run the CUDA backends.
fn skip_reason(backend: &dyn Backend) -> Option<Unsupported> {
    let probe = problem(Shape::new(1, 1, 4, 4, 4), Causality::Causal);
    match backend.supports(&probe) {
        Ok(()) => None,
        Err(reason) => {
            assert!(reason.is_unavailable(), "{}: {reason}", backend.name());
            eprintln!("{}: {reason}", backend.name());
            Some(reason)
        }
    }
}

/// Inputs as the backend stores them (f16 rounds once), so the oracle sees the same operands.
fn as_stored(x: &Inputs, precision: Precision) -> Inputs {
    match precision {
        Precision::F16 => x.rounded(|a| half::f16::from_f64(a).to_f64()),
        _ => x.clone(),
    }
}

#[test]
fn names_and_kinds() {
    let names: Vec<String> = linattn_softmax::backends()
        .iter()
        .map(|b| b.name().to_string())
        .collect();
    assert_eq!(
        names,
        ["cpu/softmax/f32", "cuda/softmax/f32", "cuda/softmax/f16"]
    );
    for backend in cuda_backends() {
        assert_eq!(backend.info().device, DeviceKind::Cuda);
        assert_eq!(backend.info().algorithm, Algorithm::Softmax);
    }
}

#[test]
fn without_a_device_every_call_is_a_typed_refusal() {
    for mut backend in cuda_backends() {
        let Some(reason) = skip_reason(backend.as_ref()) else {
            continue;
        };
        let shape = Shape::new(1, 1, 4, 4, 4);
        let x = inputs(shape, 1);
        let error = backend
            .forward(&problem(shape, Causality::Causal), &x)
            .expect_err("no device, no result");
        assert_eq!(error, AttnError::Unsupported(reason.clone()));
        // Direct calls past `supports` meet the same check (cudarc is never reached).
        assert_eq!(
            backend.stage(&problem(shape, Causality::Causal), &x),
            Err(AttnError::Unsupported(reason.clone()))
        );
        assert_eq!(backend.run_forward(), Err(AttnError::Unsupported(reason)));
    }
}

#[test]
fn forward_and_gradients_match_the_oracle() {
    for mut backend in cuda_backends() {
        if skip_reason(backend.as_ref()).is_some() {
            continue;
        }
        let precision = backend.info().precision;
        let tol = precision.rms_tolerance();
        for shape in [
            Shape::new(2, 3, 37, 16, 24),
            Shape::new(1, 2, 300, 64, 32),
            Shape::new(1, 1, 1, 8, 8),
        ] {
            let x = as_stored(&inputs(shape, 70 + shape.seq as u64), precision);
            for causality in BOTH {
                let p = problem(shape, causality);
                let got = backend.forward_backward(&p, &x).unwrap();
                let want = oracle::backward(&p, &x).unwrap();
                let case = format!("{} {shape} {causality}", backend.name());
                assert_forward_backward_close(&case, &want, &got, tol);
            }
        }
    }
}

#[test]
fn a_problem_too_large_for_the_device_is_out_of_memory() {
    for mut backend in cuda_backends() {
        if skip_reason(backend.as_ref()).is_some() {
            continue;
        }
        // B·H·N² = 2^40 elements: terabytes, more than any GPU holds; inputs are small.
        let shape = Shape::new(1, 1 << 8, 1 << 16, 1, 1);
        let x = inputs(shape, 2);
        let p = problem(shape, Causality::Causal);
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
            .forward(&problem(small, Causality::Causal), &y)
            .unwrap();
    }
}

#[test]
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

#[test]
fn values_beyond_f16_range_are_refused_by_name() {
    use linattn_core::{Tensor, TensorRole};
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
