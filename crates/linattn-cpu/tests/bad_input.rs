//! Bad input gives typed errors naming the problem, never a panic: shape mismatches, zero
//! dims, NaN/±Inf, values beyond f32, efficient attention asked to be causal, a form asked
//! for the wrong causality, backward before forward or without d_out, nothing staged.

use linattn_core::{
    AttnError, Backend, Causality, FeatureMap, Inputs, Problem, Shape, Tensor, Unsupported,
};
use linattn_cpu::{backends, fast, oracle};

fn shape() -> Shape {
    Shape::new(1, 2, 4, 3, 5)
}

fn causality_for(b: &dyn Backend) -> Causality {
    let causal = Problem::new(shape(), Causality::Causal, FeatureMap::EluPlusOne);
    if b.supports(&causal).is_ok() {
        Causality::Causal
    } else {
        Causality::NonCausal
    }
}

fn each_backend(mut check: impl FnMut(&mut dyn Backend, Problem)) {
    for mut b in backends() {
        let p = Problem::new(shape(), causality_for(b.as_ref()), FeatureMap::EluPlusOne);
        check(b.as_mut(), p);
    }
}

#[test]
fn backends_are_the_named_nine() {
    let names: Vec<String> = backends().iter().map(|b| b.name().to_string()).collect();
    assert_eq!(
        names,
        [
            "cpu-ref/noncausal/f64",
            "cpu-ref/causal_recurrent/f64",
            "cpu-ref/causal_cumsum/f64",
            "cpu-ref/quadratic/f64",
            "cpu-ref/causal_recurrent+storedbwd/f64",
            "cpu-ref/noncausal+storedbwd/f64",
            "cpu/noncausal/f32",
            "cpu/causal_recurrent/f32",
            "cpu/causal_chunked/f32",
        ]
    );
}

#[test]
fn shape_mismatch_is_named() {
    each_backend(|b, p| {
        let mut x = Inputs::random(p.shape, 1, true).unwrap();
        x.k = Tensor::zeros([1, 2, 4, 4]).unwrap();
        let e = b.stage(&p, &x).unwrap_err();
        assert!(
            matches!(e, AttnError::ShapeMismatch(ref m) if m.contains('k')),
            "{}: {e}",
            b.name()
        );
        // Inputs consistent with each other but not with the problem.
        let x = Inputs::random(Shape::new(1, 2, 6, 3, 5), 1, true).unwrap();
        let e = b.stage(&p, &x).unwrap_err();
        assert!(
            matches!(e, AttnError::ShapeMismatch(_)),
            "{}: {e}",
            b.name()
        );
    });
    let p = Problem::new(shape(), Causality::Causal, FeatureMap::Relu);
    let x = Inputs::random(shape(), 1, true).unwrap();
    let e = fast::forward(&p, &x.q.to_f32()[1..], &x.k.to_f32(), &x.v.to_f32()).unwrap_err();
    assert!(
        matches!(e, AttnError::ShapeMismatch(ref m) if m.starts_with("q ")),
        "{e}"
    );
    let e = fast::backward(&p, &x.q.to_f32(), &x.k.to_f32(), &x.v.to_f32(), &[]).unwrap_err();
    assert!(
        matches!(e, AttnError::ShapeMismatch(ref m) if m.starts_with("d_out")),
        "{e}"
    );
}

#[test]
fn zero_dims_are_named() {
    each_backend(|b, p| {
        let mut zero = p;
        zero.shape.seq = 0;
        let x = Inputs {
            q: Tensor::zeros(zero.shape.qk_dims()).unwrap(),
            k: Tensor::zeros(zero.shape.qk_dims()).unwrap(),
            v: Tensor::zeros(zero.shape.v_dims()).unwrap(),
            d_out: None,
        };
        let e = b.stage(&zero, &x).unwrap_err();
        assert_eq!(
            e,
            AttnError::EmptyDim("sequence length (N)"),
            "{}",
            b.name()
        );
        assert!(b.supports(&zero).is_err());
    });
    let mut p = Problem::new(shape(), Causality::Causal, FeatureMap::Relu);
    p.shape.dv = 0;
    assert_eq!(
        fast::forward(&p, &[], &[], &[]).unwrap_err(),
        AttnError::EmptyDim("value head dim (M)")
    );
}

#[test]
fn non_finite_inputs_are_named() {
    each_backend(|b, p| {
        for (bad, role) in [
            (f64::NAN, "q"),
            (f64::INFINITY, "v"),
            (f64::NEG_INFINITY, "d_out"),
        ] {
            let mut x = Inputs::random(p.shape, 2, true).unwrap();
            let t = match role {
                "q" => &mut x.q,
                "v" => &mut x.v,
                _ => x.d_out.as_mut().unwrap(),
            };
            t.data_mut()[3] = bad;
            let e = b.stage(&p, &x).unwrap_err();
            assert!(
                matches!(e, AttnError::NonFinite { tensor, index: 3, .. } if tensor == role),
                "{}: {e}",
                b.name()
            );
        }
    });
    let p = Problem::new(shape(), Causality::Causal, FeatureMap::Relu);
    let mut x = Inputs::random(shape(), 2, true).unwrap();
    x.k.data_mut()[0] = f64::NAN;
    assert!(matches!(
        oracle::forward(&p, &x),
        Err(AttnError::NonFinite { tensor: "k", .. })
    ));
    assert!(matches!(
        oracle::backward(&p, &x),
        Err(AttnError::NonFinite { tensor: "k", .. })
    ));
}

#[test]
fn values_beyond_f32_are_rejected_by_the_f32_backends() {
    for mut b in backends()
        .into_iter()
        .filter(|b| b.name().ends_with("/f32"))
    {
        let p = Problem::new(shape(), causality_for(b.as_ref()), FeatureMap::EluPlusOne);
        let mut x = Inputs::random(p.shape, 3, true).unwrap();
        x.k.data_mut()[5] = 1e300;
        let e = b.stage(&p, &x).unwrap_err();
        assert!(
            matches!(
                e,
                AttnError::NonFinite {
                    tensor: "k",
                    index: 5,
                    ..
                }
            ),
            "{e}"
        );
    }
}

#[test]
fn efficient_attention_is_non_causal_only() {
    let p = Problem::new(shape(), Causality::Causal, FeatureMap::EfficientAttention);
    let x = Inputs::random(shape(), 4, true).unwrap();
    for mut b in backends() {
        assert!(
            matches!(b.supports(&p), Err(Unsupported::Problem(_))),
            "{}",
            b.name()
        );
        assert!(b.stage(&p, &x).is_err(), "{}", b.name());
        assert!(b.forward(&p, &x).is_err(), "{}", b.name());
    }
    assert!(matches!(
        oracle::forward(&p, &x),
        Err(AttnError::InvalidArgument(_))
    ));
    let e = fast::forward(&p, &x.q.to_f32(), &x.k.to_f32(), &x.v.to_f32()).unwrap_err();
    assert!(matches!(e, AttnError::InvalidArgument(_)));
}

#[test]
fn forms_refuse_the_other_causality() {
    let x = Inputs::random(shape(), 4, true).unwrap();
    for mut b in backends() {
        if b.name().starts_with("cpu-ref/quadratic") {
            continue;
        }
        let other = match causality_for(b.as_ref()) {
            Causality::Causal => Causality::NonCausal,
            Causality::NonCausal => Causality::Causal,
        };
        let p = Problem::new(shape(), other, FeatureMap::Relu);
        assert!(
            matches!(b.supports(&p), Err(Unsupported::Problem(_))),
            "{}",
            b.name()
        );
        let e = b.stage(&p, &x).unwrap_err();
        assert!(
            matches!(e, AttnError::Unsupported(Unsupported::Problem(_))),
            "{}: {e}",
            b.name()
        );
    }
}

#[test]
fn invalid_eps_and_decay_are_named() {
    let x = Inputs::random(shape(), 4, false).unwrap();
    for (eps, decay) in [(-1.0, 1.0), (f64::NAN, 1.0), (1e-6, 0.0), (1e-6, 1.5)] {
        let p = Problem::new(shape(), Causality::Causal, FeatureMap::Relu)
            .with_eps(eps)
            .with_decay(decay);
        assert!(matches!(
            oracle::forward(&p, &x),
            Err(AttnError::InvalidArgument(_))
        ));
        let e = fast::forward(&p, &x.q.to_f32(), &x.k.to_f32(), &x.v.to_f32()).unwrap_err();
        assert!(matches!(e, AttnError::InvalidArgument(_)));
    }
}

/// Asserts a call made out of order failed with a `State` error; `name` is the backend's.
fn assert_state_error<T: std::fmt::Debug>(name: &str, result: Result<T, AttnError>) {
    assert!(
        matches!(result, Err(AttnError::State(_))),
        "{name}: {result:?}"
    );
}

#[test]
fn call_order_errors_are_typed() {
    each_backend(|b, p| {
        let name = b.name().to_string();
        assert_state_error(&name, b.run_forward());
        assert_state_error(&name, b.run_backward());
        assert_state_error(&name, b.output());
        assert_state_error(&name, b.grads());

        let with_grad = Inputs::random(p.shape, 5, true).unwrap();
        b.stage(&p, &with_grad).unwrap();
        let before = b.run_backward().unwrap_err();
        // A backend without a backward says so; one with a backward wants a forward first.
        let expected = if b.info().backward.is_some() {
            matches!(before, AttnError::State(_))
        } else {
            matches!(before, AttnError::Unsupported(_))
        };
        assert!(expected, "{name}: {before}");
        assert_state_error(&name, b.grads());

        let without_grad = Inputs::random(p.shape, 5, false).unwrap();
        b.stage(&p, &without_grad).unwrap();
        b.run_forward().unwrap();
        let e = b.run_backward().unwrap_err();
        if b.info().backward.is_some() {
            assert!(
                matches!(e, AttnError::InvalidArgument(ref m) if m.contains("d_out")),
                "{name}: {e}"
            );
        }
        assert!(b.forward_backward(&p, &without_grad).is_err());

        b.release();
        assert_state_error(&name, b.output());
    });
    let p = Problem::new(shape(), Causality::NonCausal, FeatureMap::Relu);
    let x = Inputs::random(shape(), 5, false).unwrap();
    assert!(matches!(
        oracle::backward(&p, &x),
        Err(AttnError::InvalidArgument(_))
    ));
}
