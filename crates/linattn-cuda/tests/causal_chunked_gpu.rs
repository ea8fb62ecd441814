//! `cuda/causal_chunked/{f16,bf16}` against a small f64 reference of causal linear attention
//! (the recurrence of SPEC §2/§6 and the gradients of SPEC §4, written here so this crate does
//! not depend on linattn-cpu). Odd N (1, 63, 65, 1000) exercise the zero-padded tail chunk.
//! Needs a CUDA GPU: without one every test prints `skipped: <reason>` and returns.

// φ and φ' of the fused maps come from the shared oracle file; the recurrences below are
// this file's own.
#[path = "causal_recurrent_reference.rs"]
mod oracle;

use linattn_core::{
    Backend, Causality, ErrorMetrics, FeatureMap, Grads, Inputs, Problem, Shape, Tensor,
    Unsupported,
};
use linattn_cuda::causal_chunked::ChunkedBackend;
use linattn_cuda::runtime::StorageElem;

/// O and the gradients of L = Σ O ⊙ d_out, by the plain recurrences, per head.
fn reference(problem: &Problem, x: &Inputs) -> (Tensor, Grads) {
    let s = problem.shape;
    let (n, d, m) = (s.seq, s.dk, s.dv);
    let map = problem.map;
    let lambda = problem.decay;
    let normalised = map.normalised();
    let g_all = x.d_out.as_ref().expect("test inputs carry d_out");
    let mut out = Tensor::zeros(s.v_dims()).unwrap();
    let mut dq = Tensor::zeros(s.qk_dims()).unwrap();
    let mut dk = Tensor::zeros(s.qk_dims()).unwrap();
    let mut dv = Tensor::zeros(s.v_dims()).unwrap();
    for bh in 0..s.bh() {
        let (q, k, v, g) = (x.q.head(bh), x.k.head(bh), x.v.head(bh), g_all.head(bh));
        let qt: Vec<f64> = q.iter().map(|&a| oracle::phi(&map, a)).collect();
        let kt: Vec<f64> = k.iter().map(|&a| oracle::phi(&map, a)).collect();
        let mut gn = vec![0.0; n * m];
        let mut gd = vec![0.0; n];
        let mut state = vec![0.0; d * m];
        let mut z = vec![0.0; d];
        let o = out.head_mut(bh);
        let dqh = dq.head_mut(bh);
        for i in 0..n {
            for a in 0..d {
                z[a] = lambda * z[a] + kt[i * d + a];
                for e in 0..m {
                    state[a * m + e] = lambda * state[a * m + e] + kt[i * d + a] * v[i * m + e];
                }
            }
            let den = if normalised {
                (0..d).map(|a| qt[i * d + a] * z[a]).sum::<f64>() + problem.eps
            } else {
                1.0
            };
            for e in 0..m {
                let num: f64 = (0..d).map(|a| qt[i * d + a] * state[a * m + e]).sum();
                o[i * m + e] = num / den;
            }
            let g_dot_o: f64 = (0..m).map(|e| g[i * m + e] * o[i * m + e]).sum();
            gd[i] = if normalised { -g_dot_o / den } else { 0.0 };
            for e in 0..m {
                gn[i * m + e] = g[i * m + e] / den;
            }
            for a in 0..d {
                let sg: f64 = (0..m).map(|e| state[a * m + e] * gn[i * m + e]).sum();
                dqh[i * d + a] = (sg + z[a] * gd[i]) * oracle::phi_grad(&map, q[i * d + a]);
            }
        }
        let mut r_state = vec![0.0; d * m];
        let mut r_vec = vec![0.0; d];
        let dkh = dk.head_mut(bh);
        let dvh = dv.head_mut(bh);
        for j in (0..n).rev() {
            for a in 0..d {
                r_vec[a] = lambda * r_vec[a] + qt[j * d + a] * gd[j];
                for e in 0..m {
                    r_state[a * m + e] =
                        lambda * r_state[a * m + e] + qt[j * d + a] * gn[j * m + e];
                }
            }
            for a in 0..d {
                let rv: f64 = (0..m).map(|e| r_state[a * m + e] * v[j * m + e]).sum();
                dkh[j * d + a] = (rv + r_vec[a]) * oracle::phi_grad(&map, k[j * d + a]);
            }
            for e in 0..m {
                dvh[j * m + e] = (0..d).map(|a| r_state[a * m + e] * kt[j * d + a]).sum();
            }
        }
    }
    (out, Grads { dq, dk, dv })
}

/// The f64 reference sees the operands rounded exactly as the backend stores them.
fn round_to<T: StorageElem>(x: f64) -> f64 {
    T::from_f64(x).to_f64()
}

fn check_case<T: StorageElem>(problem: Problem, seed: u64) -> Result<(), Unsupported> {
    let mut backend = ChunkedBackend::<T>::new();
    backend.supports(&problem)?;
    let inputs = Inputs::random(problem.shape, seed, true)
        .unwrap()
        .rounded(round_to::<T>);
    let (got_o, got_g) = backend
        .forward_backward(&problem, &inputs)
        .unwrap_or_else(|e| panic!("{} on {problem}: {e}", backend.name()));
    let (ref_o, ref_g) = reference(&problem, &inputs);
    let tol = T::PRECISION.rms_tolerance();
    let mut compared = vec![("O", &ref_o, &got_o), ("dV", &ref_g.dv, &got_g.dv)];
    // With one token, O = v·(q̃·k̃)/(q̃·k̃ + ε) and dQ, dK ∝ G·(v − O) = O(ε): residues of a
    // cancellation that any rounding of O (stored in 16 bits) swamps. Compared from N = 2 on.
    if problem.shape.seq > 1 {
        compared.push(("dQ", &ref_g.dq, &got_g.dq));
        compared.push(("dK", &ref_g.dk, &got_g.dk));
    }
    for (what, reference, got) in compared {
        let metrics = ErrorMetrics::compare(reference.data(), got.data());
        eprintln!(
            "{} {what} on {problem}: rms ratio {:.2e}",
            backend.name(),
            metrics.rms_ratio
        );
        assert!(
            metrics.passes(tol),
            "{} {what} on {problem}: {metrics:?} (tolerance {tol})",
            backend.name()
        );
    }
    Ok(())
}

fn cases() -> Vec<Problem> {
    let causal =
        |b, h, n, d, m, map| Problem::new(Shape::new(b, h, n, d, m), Causality::Causal, map);
    vec![
        causal(1, 2, 1, 64, 64, FeatureMap::EluPlusOne),
        causal(1, 1, 63, 64, 64, FeatureMap::EluPlusOne),
        causal(2, 1, 65, 64, 128, FeatureMap::EluPlusOne),
        causal(1, 2, 1000, 128, 64, FeatureMap::EluPlusOne),
        causal(1, 1, 200, 128, 128, FeatureMap::EluPlusOne),
        causal(1, 2, 300, 64, 64, FeatureMap::Relu),
        causal(1, 1, 130, 64, 64, FeatureMap::Identity),
        causal(1, 2, 333, 64, 64, FeatureMap::EluPlusOne).with_decay(0.97),
        causal(1, 1, 129, 128, 64, FeatureMap::Relu).with_decay(0.9),
    ]
}

fn run_all<T: StorageElem>() {
    for (index, problem) in cases().into_iter().enumerate() {
        if let Err(reason) = check_case::<T>(problem, 100 + index as u64) {
            assert!(reason.is_unavailable(), "{problem}: {reason}");
            eprintln!("{reason}");
            return;
        }
    }
}

#[test]
fn chunked_f16_matches_f64_reference() {
    run_all::<half::f16>();
}

#[test]
fn chunked_bf16_matches_f64_reference() {
    run_all::<half::bf16>();
}

#[test]
fn reference_agrees_with_the_quadratic_form() {
    // The oracle itself, on a tiny case, against O_i = Σ_{j≤i} λ^{i−j} sim_ij v_j / Σ λ^{i−j} sim_ij.
    let s = Shape::new(1, 1, 7, 64, 64);
    let p = Problem::new(s, Causality::Causal, FeatureMap::EluPlusOne).with_decay(0.8);
    let x = Inputs::random(s, 5, true).unwrap();
    let (o, _) = reference(&p, &x);
    let (q, k, v) = (x.q.head(0), x.k.head(0), x.v.head(0));
    for i in 0..7 {
        let mut den = p.eps;
        let mut num = vec![0.0; 64];
        for j in 0..=i {
            let sim: f64 = (0..64)
                .map(|a| oracle::phi(&p.map, q[i * 64 + a]) * oracle::phi(&p.map, k[j * 64 + a]))
                .sum::<f64>()
                * 0.8f64.powi((i - j) as i32);
            den += sim;
            for e in 0..64 {
                num[e] += sim * v[j * 64 + e];
            }
        }
        for (e, &numerator) in num.iter().enumerate() {
            assert!((o.head(0)[i * 64 + e] - numerator / den).abs() < 1e-9);
        }
    }
}

#[test]
fn reference_gradients_agree_with_finite_differences() {
    // L = Σ O ⊙ d_out; central differences on a few entries of q, k, v, with decay and tail.
    let s = Shape::new(1, 1, 6, 64, 64);
    for map in [
        FeatureMap::EluPlusOne,
        FeatureMap::Relu,
        FeatureMap::Identity,
    ] {
        let p = Problem::new(s, Causality::Causal, map).with_decay(0.9);
        let x = Inputs::random(s, 9, true).unwrap();
        let (_, grads) = reference(&p, &x);
        let loss = |x: &Inputs| -> f64 {
            let (o, _) = reference(&p, x);
            let g = x.d_out.as_ref().unwrap();
            o.data().iter().zip(g.data()).map(|(a, b)| a * b).sum()
        };
        let h = 1e-6;
        for index in [0usize, 65, 200, 383] {
            for (which, analytic) in [
                (0, grads.dq.data()[index]),
                (1, grads.dk.data()[index]),
                (2, grads.dv.data()[index]),
            ] {
                let bump = |delta: f64| {
                    let mut y = x.clone();
                    let t = match which {
                        0 => &mut y.q,
                        1 => &mut y.k,
                        _ => &mut y.v,
                    };
                    t.data_mut()[index] += delta;
                    loss(&y)
                };
                let numeric = (bump(h) - bump(-h)) / (2.0 * h);
                assert!(
                    (numeric - analytic).abs() <= 1e-5 * (1.0 + analytic.abs()),
                    "{map} tensor {which} index {index}: numeric {numeric} vs analytic {analytic}"
                );
            }
        }
    }
}
