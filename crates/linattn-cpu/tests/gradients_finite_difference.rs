//! Both backward kinds (memory-efficient, SPEC §4; stored states) against central finite
//! differences of `L = Σ d_out ⊙ O` in f64: every map, both causalities, with and without
//! decay, D ≠ M.

mod common;

use common::{cases, max_rel_to_peak, problem};
use linattn_core::{Grads, Inputs, Problem, Shape, Tensor};
use linattn_cpu::oracle::{self, backward_efficient, backward_stored};

fn loss(p: &Problem, x: &Inputs) -> f64 {
    let o = oracle::forward(p, x).unwrap();
    let g = x.d_out.as_ref().unwrap();
    o.data().iter().zip(g.data()).map(|(a, b)| a * b).sum()
}

/// Central differences of the loss with respect to every element of q, k and v.
fn finite_difference_grads(p: &Problem, x: &Inputs) -> Grads {
    let h = 1e-5;
    let grad_of = |pick: fn(&mut Inputs) -> &mut Tensor| {
        let mut probe = x.clone();
        let len = pick(&mut probe).len();
        let mut out = pick(&mut x.clone()).clone();
        for i in 0..len {
            let orig = pick(&mut probe).data()[i];
            pick(&mut probe).data_mut()[i] = orig + h;
            let up = loss(p, &probe);
            pick(&mut probe).data_mut()[i] = orig - h;
            let down = loss(p, &probe);
            pick(&mut probe).data_mut()[i] = orig;
            out.data_mut()[i] = (up - down) / (2.0 * h);
        }
        out
    };
    Grads {
        dq: grad_of(|x| &mut x.q),
        dk: grad_of(|x| &mut x.k),
        dv: grad_of(|x| &mut x.v),
    }
}

/// Errors are measured against the largest finite-difference gradient of the case: a
/// tensor whose gradient is tiny (relu is homogeneous, so a normalised O barely depends on
/// the scale of q) would otherwise be judged on finite-difference noise alone.
fn check(label: &str, p: &Problem, got: &Grads, fd: &Grads) {
    let peak = [&fd.dq, &fd.dk, &fd.dv]
        .iter()
        .flat_map(|t| t.data())
        .fold(0f64, |a, x| a.max(x.abs()));
    for (name, g, f) in [
        ("dq", &got.dq, &fd.dq),
        ("dk", &got.dk, &fd.dk),
        ("dv", &got.dv, &fd.dv),
    ] {
        let diff = g
            .data()
            .iter()
            .zip(f.data())
            .fold(0f64, |a, (x, y)| a.max((x - y).abs()));
        assert!(
            diff <= 1e-7 * peak,
            "{label} {name} off by {diff:e} (peak {peak:e}) for {p}"
        );
    }
}

#[test]
fn both_backward_kinds_match_finite_differences() {
    let shape = Shape::new(1, 2, 5, 3, 4);
    for (i, (map, causality)) in cases(5).into_iter().enumerate() {
        for decay in [1.0, 0.8] {
            let p = problem(shape, causality, map, decay);
            let x = Inputs::random(shape, 100 + i as u64, true).unwrap();
            let fd = finite_difference_grads(&p, &x);
            let reference_o = oracle::forward(&p, &x).unwrap();

            let (o, g) = backward_efficient::run(&p, &x).unwrap();
            assert!(max_rel_to_peak(o.data(), reference_o.data()) < 1e-12);
            check("efficient", &p, &g, &fd);

            let (o, g) = backward_stored::run(&p, &x).unwrap();
            assert!(max_rel_to_peak(o.data(), reference_o.data()) < 1e-12);
            check("stored", &p, &g, &fd);

            let (_, g) = oracle::backward(&p, &x).unwrap();
            check("oracle::backward", &p, &g, &fd);
        }
    }
}

/// ε enters the gradient through the denominator: a large ε must still match.
#[test]
fn large_eps_gradients_match_finite_differences() {
    let shape = Shape::new(1, 1, 4, 3, 2);
    for (map, causality) in cases(4) {
        if !map.normalised() {
            continue;
        }
        let p = problem(shape, causality, map, 0.9).with_eps(0.5);
        let x = Inputs::random(shape, 9, true).unwrap();
        let fd = finite_difference_grads(&p, &x);
        check(
            "efficient eps=0.5",
            &p,
            &backward_efficient::run(&p, &x).unwrap().1,
            &fd,
        );
    }
}
