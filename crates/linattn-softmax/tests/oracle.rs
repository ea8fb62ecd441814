//! The f64 oracle against independent formulas and finite differences.

mod common;

use common::{assert_close, inputs, problem, BOTH};
use linattn_core::{AttnError, Causality, Inputs, Shape, Tensor};
use linattn_softmax::oracle;

/// Attention written as the textbook formula over the whole matrix (no max subtraction, no
/// row streaming), for small well-scaled inputs.
fn direct_formula(shape: Shape, causal: bool, x: &Inputs) -> Tensor {
    let (n, d, m) = (shape.seq, shape.dk, shape.dv);
    let mut out = Tensor::zeros(shape.v_dims()).unwrap();
    for bh in 0..shape.bh() {
        let (q, k, v) = (x.q.head(bh), x.k.head(bh), x.v.head(bh));
        let o = out.head_mut(bh);
        for i in 0..n {
            let weights: Vec<f64> = (0..n)
                .map(|j| {
                    if causal && j > i {
                        0.0
                    } else {
                        let s: f64 = (0..d).map(|c| q[i * d + c] * k[j * d + c]).sum();
                        (s / (d as f64).sqrt()).exp()
                    }
                })
                .collect();
            let total: f64 = weights.iter().sum();
            for c in 0..m {
                o[i * m + c] = (0..n).map(|j| weights[j] * v[j * m + c]).sum::<f64>() / total;
            }
        }
    }
    out
}

#[test]
fn matches_the_direct_formula() {
    let shape = Shape::new(2, 3, 7, 5, 4);
    let x = inputs(shape, 11);
    for causality in BOTH {
        let got = oracle::forward(&problem(shape, causality), &x).unwrap();
        let want = direct_formula(shape, causality.is_causal(), &x);
        assert_close(&format!("O ({causality})"), &want, &got, 1e-13);
    }
}

#[test]
fn one_position_returns_v_exactly() {
    let shape = Shape::new(2, 2, 1, 3, 5);
    let x = inputs(shape, 3);
    for causality in BOTH {
        let out = oracle::forward(&problem(shape, causality), &x).unwrap();
        assert_eq!(
            out.data(),
            x.v.data(),
            "N = 1 must give O = V ({causality})"
        );
    }
}

#[test]
fn first_causal_row_is_v0_and_equal_scores_average_v() {
    let shape = Shape::new(1, 1, 6, 4, 3);
    let mut x = inputs(shape, 5);
    // All keys equal: every visible score is the same, so row i is the mean of v_0..v_i
    // (causal) or of all v (non-causal).
    let k0: Vec<f64> = x.k.data()[..4].to_vec();
    for row in x.k.data_mut().chunks_exact_mut(4) {
        row.copy_from_slice(&k0);
    }
    let v = x.v.data().to_vec();
    let mean_of =
        |rows: usize, c: usize| (0..rows).map(|j| v[j * 3 + c]).sum::<f64>() / rows as f64;
    let causal = oracle::forward(&problem(shape, Causality::Causal), &x).unwrap();
    let full = oracle::forward(&problem(shape, Causality::NonCausal), &x).unwrap();
    for i in 0..6 {
        for c in 0..3 {
            assert!((causal.data()[i * 3 + c] - mean_of(i + 1, c)).abs() < 1e-14);
            assert!((full.data()[i * 3 + c] - mean_of(6, c)).abs() < 1e-14);
        }
    }
}

#[test]
fn huge_scores_stay_finite() {
    // Scores of ±1e4·… would overflow exp without the max subtraction.
    let shape = Shape::new(1, 1, 5, 2, 2);
    let mut x = inputs(shape, 9);
    x.q.map_in_place(|a| a * 1e4);
    for causality in BOTH {
        let (out, grads) = oracle::backward(&problem(shape, causality), &x).unwrap();
        for t in [&out, &grads.dq, &grads.dk, &grads.dv] {
            assert!(t.data().iter().all(|a| a.is_finite()), "{causality}");
        }
    }
}

/// L = Σ O ⊙ dO; central differences of L in every input element.
#[test]
fn gradients_match_central_differences() {
    let shape = Shape::new(1, 2, 5, 3, 4);
    let x = inputs(shape, 21);
    let h = 1e-5;
    for causality in BOTH {
        let p = problem(shape, causality);
        let (_, grads) = oracle::backward(&p, &x).unwrap();
        let d_out = x.d_out.clone().unwrap();
        let loss = |x: &Inputs| -> f64 {
            let o = oracle::forward(&p, x).unwrap();
            o.data().iter().zip(d_out.data()).map(|(a, b)| a * b).sum()
        };
        let numeric = |which: usize| -> Tensor {
            let base = [&x.q, &x.k, &x.v][which];
            let mut out = Tensor::zeros(base.dims()).unwrap();
            for idx in 0..base.len() {
                let mut plus = x.clone();
                let mut minus = x.clone();
                [&mut plus.q, &mut plus.k, &mut plus.v][which].data_mut()[idx] += h;
                [&mut minus.q, &mut minus.k, &mut minus.v][which].data_mut()[idx] -= h;
                out.data_mut()[idx] = (loss(&plus) - loss(&minus)) / (2.0 * h);
            }
            out
        };
        assert_close(&format!("dQ ({causality})"), &numeric(0), &grads.dq, 1e-7);
        assert_close(&format!("dK ({causality})"), &numeric(1), &grads.dk, 1e-7);
        assert_close(&format!("dV ({causality})"), &numeric(2), &grads.dv, 1e-7);
    }
}

#[test]
fn causal_gradients_ignore_the_future() {
    // dO at the last position only: dK, dV of every earlier position get contributions, but
    // with dO at position 0 only, keys/values after 0 must get exactly zero gradient.
    let shape = Shape::new(1, 1, 4, 3, 2);
    let mut x = inputs(shape, 2);
    let g = x.d_out.as_mut().unwrap();
    for (idx, a) in g.data_mut().iter_mut().enumerate() {
        if idx >= 2 {
            *a = 0.0;
        }
    }
    let (_, grads) = oracle::backward(&problem(shape, Causality::Causal), &x).unwrap();
    assert!(grads.dk.data()[3..].iter().all(|&a| a == 0.0));
    assert!(grads.dv.data()[2..].iter().all(|&a| a == 0.0));
    assert!(grads.dq.data()[3..].iter().all(|&a| a == 0.0));
}

#[test]
fn bad_inputs_are_typed_errors() {
    let shape = Shape::new(1, 2, 3, 4, 5);
    let p = problem(shape, Causality::Causal);

    let mut x = inputs(shape, 1);
    x.v = Tensor::zeros([1, 2, 3, 6]).unwrap();
    // v decides M, so the problem (M = 5) and the inputs (M = 6) disagree.
    assert!(matches!(
        oracle::forward(&p, &x),
        Err(AttnError::ShapeMismatch(_))
    ));

    let mut x = inputs(shape, 1);
    x.k = Tensor::zeros([1, 2, 3, 5]).unwrap();
    assert!(matches!(
        oracle::forward(&p, &x),
        Err(AttnError::ShapeMismatch(_))
    ));

    let mut x = inputs(shape, 1);
    x.q.data_mut()[4] = f64::NAN;
    assert!(matches!(
        oracle::forward(&p, &x),
        Err(AttnError::NonFinite {
            tensor: "q",
            index: 4,
            ..
        })
    ));

    let mut x = inputs(shape, 1);
    x.d_out.as_mut().unwrap().data_mut()[0] = f64::INFINITY;
    assert!(matches!(
        oracle::backward(&p, &x),
        Err(AttnError::NonFinite {
            tensor: "d_out",
            ..
        })
    ));

    let mut x = inputs(shape, 1);
    x.d_out = None;
    assert!(matches!(
        oracle::backward(&p, &x),
        Err(AttnError::InvalidArgument(_))
    ));
    assert!(oracle::forward(&p, &x).is_ok());

    let empty = problem(Shape::new(1, 2, 0, 4, 5), Causality::Causal);
    assert!(matches!(
        oracle::forward(&empty, &inputs(shape, 1)),
        Err(AttnError::EmptyDim(_))
    ));
}

#[test]
fn options_of_linear_attention_are_ignored() {
    let shape = Shape::new(1, 1, 4, 3, 3);
    let x = inputs(shape, 4);
    let plain = problem(shape, Causality::Causal);
    let odd = plain.with_eps(0.5).with_decay(0.3);
    assert_eq!(
        oracle::forward(&plain, &x).unwrap(),
        oracle::forward(&odd, &x).unwrap()
    );
}
