//! A small f64 oracle for causal linear attention with decay and the normaliser, written
//! independently of the kernels: the quadratic form (an explicit masked, decayed N×N weight
//! matrix) for O and for the gradients, and a plain recurrence for O at long N. Its own
//! checks (finite differences, quadratic = recurrence) run without a GPU.
//!
//! The GPU test files include this file with `#[path]`; linattn-cuda must not depend on
//! linattn-cpu, so the oracle lives here.

#![allow(dead_code)]

use linattn_core::{FeatureMap, Grads, Inputs, Problem, Shape, Tensor};

/// φ of the elementwise maps.
pub fn phi(map: &FeatureMap, x: f64) -> f64 {
    match map {
        FeatureMap::EluPlusOne => {
            if x > 0.0 {
                x + 1.0
            } else {
                x.exp()
            }
        }
        FeatureMap::Relu => x.max(0.0),
        FeatureMap::Identity => x,
        other => panic!("oracle has no map {other}"),
    }
}

pub fn phi_grad(map: &FeatureMap, x: f64) -> f64 {
    match map {
        FeatureMap::EluPlusOne => {
            if x > 0.0 {
                1.0
            } else {
                x.exp()
            }
        }
        FeatureMap::Relu => {
            if x > 0.0 {
                1.0
            } else {
                0.0
            }
        }
        FeatureMap::Identity => 1.0,
        other => panic!("oracle has no map {other}"),
    }
}

/// φ of one row x (length D) for every causal map: elementwise maps, softmax over the
/// features, 1+cos (`[1, x/‖x‖]`), FAVOR+ (`exp(W x' − ‖x'‖²/2)/√R`, `x' = x·D^{-1/4}`).
pub fn phi_row(map: &FeatureMap, x: &[f64]) -> Vec<f64> {
    let d = x.len();
    match map {
        FeatureMap::Softmax => {
            let top = x.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = x.iter().map(|&t| (t - top).exp()).collect();
            let sum: f64 = e.iter().sum();
            e.iter().map(|t| t / sum).collect()
        }
        FeatureMap::OnePlusCos => {
            let norm = dot(x, x).sqrt();
            std::iter::once(1.0)
                .chain(x.iter().map(|t| t / norm))
                .collect()
        }
        FeatureMap::Favor { features, seed } => {
            let w = linattn_core::favor_projection(d, *features, *seed);
            let scale = (d as f64).powf(-0.25);
            let xs: Vec<f64> = x.iter().map(|t| t * scale).collect();
            let half_norm = 0.5 * dot(&xs, &xs);
            (0..*features)
                .map(|r| {
                    (dot(&w[r * d..(r + 1) * d], &xs) - half_norm).exp() / (*features as f64).sqrt()
                })
                .collect()
        }
        _ => x.iter().map(|&t| phi(map, t)).collect(),
    }
}

/// Jᵀg: the gradient with respect to x of g·φ(x).
pub fn phi_vjp(map: &FeatureMap, x: &[f64], g: &[f64]) -> Vec<f64> {
    let d = x.len();
    match map {
        FeatureMap::Softmax => {
            let s = phi_row(map, x);
            let sg = dot(&s, g);
            s.iter().zip(g).map(|(si, gi)| si * (gi - sg)).collect()
        }
        FeatureMap::OnePlusCos => {
            let norm = dot(x, x).sqrt();
            let xh: Vec<f64> = x.iter().map(|t| t / norm).collect();
            let gr = &g[1..];
            let proj = dot(&xh, gr);
            gr.iter()
                .zip(&xh)
                .map(|(gi, hi)| (gi - hi * proj) / norm)
                .collect()
        }
        FeatureMap::Favor { features, seed } => {
            let w = linattn_core::favor_projection(d, *features, *seed);
            let scale = (d as f64).powf(-0.25);
            let f = phi_row(map, x);
            let mut out = vec![0.0; d];
            for r in 0..*features {
                for (t, o) in out.iter_mut().enumerate() {
                    *o += g[r] * f[r] * (w[r * d + t] - x[t] * scale) * scale;
                }
            }
            out
        }
        _ => x
            .iter()
            .zip(g)
            .map(|(&t, gi)| gi * phi_grad(map, t))
            .collect(),
    }
}

fn phi_rows(map: &FeatureMap, x: &[f64], n: usize, d: usize) -> Vec<f64> {
    (0..n)
        .flat_map(|i| phi_row(map, &x[i * d..(i + 1) * d]))
        .collect()
}

struct Head<'a> {
    q: &'a [f64],
    k: &'a [f64],
    v: &'a [f64],
    n: usize,
    d: usize,
    m: usize,
}

impl<'a> Head<'a> {
    /// Head `bh` of `x`, whose shape is `s`.
    fn of(s: &Shape, x: &'a Inputs, bh: usize) -> Self {
        Head {
            q: x.q.head(bh),
            k: x.k.head(bh),
            v: x.v.head(bh),
            n: s.seq,
            d: s.dk,
            m: s.dv,
        }
    }
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Weights w_ij = λ^{i−j} φ(q_i)·φ(k_j) for j ≤ i, row-major N×N (0 above the diagonal),
/// and φ(Q), φ(K) (N×C each).
fn weights(p: &Problem, h: &Head) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let c = p.feature_dim();
    let fq = phi_rows(&p.map, h.q, h.n, h.d);
    let fk = phi_rows(&p.map, h.k, h.n, h.d);
    let mut w = vec![0.0; h.n * h.n];
    for i in 0..h.n {
        for j in 0..=i {
            let s = dot(&fq[i * c..(i + 1) * c], &fk[j * c..(j + 1) * c]);
            w[i * h.n + j] = p.decay.powi((i - j) as i32) * s;
        }
    }
    (w, fq, fk)
}

/// O by the quadratic form.
pub fn forward(p: &Problem, x: &Inputs) -> Tensor {
    let s = p.shape;
    let mut out = Tensor::zeros(s.v_dims()).expect("dims");
    for bh in 0..s.bh() {
        let h = Head::of(&s, x, bh);
        let (w, _, _) = weights(p, &h);
        let o = out.head_mut(bh);
        for i in 0..h.n {
            let den = if p.map.normalised() {
                w[i * h.n..i * h.n + i + 1].iter().sum::<f64>() + p.eps
            } else {
                1.0
            };
            for c in 0..h.m {
                let num: f64 = (0..=i).map(|j| w[i * h.n + j] * h.v[j * h.m + c]).sum();
                o[i * h.m + c] = num / den;
            }
        }
    }
    out
}

/// O by the recurrence S_i = λS_{i−1} + φ(k_i)v_iᵀ, z likewise: O(N·D·M), for long N.
pub fn forward_recurrent(p: &Problem, x: &Inputs) -> Tensor {
    let s = p.shape;
    let (n, d, m) = (s.seq, s.dk, s.dv);
    let cf = p.feature_dim();
    let mut out = Tensor::zeros(s.v_dims()).expect("dims");
    for bh in 0..s.bh() {
        let (q, k, v) = (x.q.head(bh), x.k.head(bh), x.v.head(bh));
        let o = out.head_mut(bh);
        let mut state = vec![0.0; cf * m];
        let mut z = vec![0.0; cf];
        for i in 0..n {
            let fk = phi_row(&p.map, &k[i * d..(i + 1) * d]);
            let fq = phi_row(&p.map, &q[i * d..(i + 1) * d]);
            for c in 0..cf {
                z[c] = p.decay * z[c] + fk[c];
                for e in 0..m {
                    state[c * m + e] = p.decay * state[c * m + e] + fk[c] * v[i * m + e];
                }
            }
            let den = if p.map.normalised() {
                dot(&fq, &z) + p.eps
            } else {
                1.0
            };
            for e in 0..m {
                let num: f64 = (0..cf).map(|c| fq[c] * state[c * m + e]).sum();
                o[i * m + e] = num / den;
            }
        }
    }
    out
}

/// ∂L/∂q, ∂L/∂k, ∂L/∂v for L = Σ d_out ⊙ O, by differentiating the quadratic form.
pub fn backward(p: &Problem, x: &Inputs) -> Grads {
    let s = p.shape;
    let g_all = x.d_out.as_ref().expect("oracle backward needs d_out");
    let mut grads = Grads {
        dq: Tensor::zeros(s.qk_dims()).expect("dims"),
        dk: Tensor::zeros(s.qk_dims()).expect("dims"),
        dv: Tensor::zeros(s.v_dims()).expect("dims"),
    };
    for bh in 0..s.bh() {
        let h = Head::of(&s, x, bh);
        let g = g_all.head(bh);
        let (n, d, m) = (h.n, h.d, h.m);
        let c_dim = p.feature_dim();
        let (w, fq, fk) = weights(p, &h);
        // ∂L/∂w_ij = gn_i·v_j + gd_i with gn_i = G_i/den_i, gd_i = −G_i·O_i/den_i.
        let mut dw = vec![0.0; n * n];
        let mut gn = vec![0.0; n * m];
        for i in 0..n {
            let den = if p.map.normalised() {
                w[i * n..i * n + i + 1].iter().sum::<f64>() + p.eps
            } else {
                1.0
            };
            let mut g_dot_o = 0.0;
            for c in 0..m {
                let num: f64 = (0..=i).map(|j| w[i * n + j] * h.v[j * m + c]).sum();
                g_dot_o += g[i * m + c] * num / den;
                gn[i * m + c] = g[i * m + c] / den;
            }
            let gd = if p.map.normalised() {
                -g_dot_o / den
            } else {
                0.0
            };
            for j in 0..=i {
                dw[i * n + j] = dot(&gn[i * m..(i + 1) * m], &h.v[j * m..(j + 1) * m]) + gd;
            }
        }
        let dv = grads.dv.head_mut(bh);
        for j in 0..n {
            for c in 0..m {
                dv[j * m + c] = (j..n).map(|i| w[i * n + j] * gn[i * m + c]).sum();
            }
        }
        // ∂φ(q_i) = Σ_j ∂w_ij λ^{i−j} φ(k_j), ∂φ(k_j) = Σ_i ∂w_ij λ^{i−j} φ(q_i), then Jᵀ.
        let dq = grads.dq.head_mut(bh);
        for i in 0..n {
            let g_feat: Vec<f64> = (0..c_dim)
                .map(|c| {
                    (0..=i)
                        .map(|j| dw[i * n + j] * p.decay.powi((i - j) as i32) * fk[j * c_dim + c])
                        .sum()
                })
                .collect();
            let row = phi_vjp(&p.map, &h.q[i * d..(i + 1) * d], &g_feat);
            dq[i * d..(i + 1) * d].copy_from_slice(&row);
        }
        let dk = grads.dk.head_mut(bh);
        for j in 0..n {
            let g_feat: Vec<f64> = (0..c_dim)
                .map(|c| {
                    (j..n)
                        .map(|i| dw[i * n + j] * p.decay.powi((i - j) as i32) * fq[i * c_dim + c])
                        .sum()
                })
                .collect();
            let row = phi_vjp(&p.map, &h.k[j * d..(j + 1) * d], &g_feat);
            dk[j * d..(j + 1) * d].copy_from_slice(&row);
        }
    }
    grads
}

#[cfg(test)]
mod oracle_checks {
    use super::*;
    use linattn_core::{Causality, Shape};

    fn loss(p: &Problem, x: &Inputs) -> f64 {
        let o = forward(p, x);
        dot(o.data(), x.d_out.as_ref().unwrap().data())
    }

    /// Central differences of L = Σ d_out ⊙ O against the analytic gradients. Inputs are
    /// shifted away from the kinks of relu and elu+1 at 0.
    #[test]
    fn oracle_gradients_match_finite_differences() {
        let shape = Shape::new(1, 2, 5, 3, 4);
        for (map, decay) in [
            (FeatureMap::EluPlusOne, 1.0),
            (FeatureMap::EluPlusOne, 0.8),
            (FeatureMap::Relu, 0.9),
            (FeatureMap::Identity, 0.7),
            (FeatureMap::Softmax, 0.9),
            (FeatureMap::OnePlusCos, 1.0),
            (
                FeatureMap::Favor {
                    features: 5,
                    seed: 3,
                },
                0.95,
            ),
        ] {
            let p = Problem::new(shape, Causality::Causal, map)
                .with_decay(decay)
                .with_eps(1e-3);
            let mut x = Inputs::random(shape, 11, true).unwrap();
            for t in [&mut x.q, &mut x.k] {
                t.map_in_place(|v| if v.abs() < 0.05 { v + 0.1 } else { v });
            }
            let analytic = backward(&p, &x);
            let h = 1e-6;
            let check = |which: usize, got: &Tensor| {
                for idx in 0..got.len() {
                    let mut plus = x.clone();
                    let mut minus = x.clone();
                    let (tp, tm) = match which {
                        0 => (&mut plus.q, &mut minus.q),
                        1 => (&mut plus.k, &mut minus.k),
                        _ => (&mut plus.v, &mut minus.v),
                    };
                    tp.data_mut()[idx] += h;
                    tm.data_mut()[idx] -= h;
                    let numeric = (loss(&p, &plus) - loss(&p, &minus)) / (2.0 * h);
                    let a = got.data()[idx];
                    assert!(
                        (numeric - a).abs() <= 1e-5 * (1.0 + a.abs()),
                        "{map} λ={decay} tensor {which} index {idx}: analytic {a}, numeric {numeric}"
                    );
                }
            };
            check(0, &analytic.dq);
            check(1, &analytic.dk);
            check(2, &analytic.dv);
        }
    }

    #[test]
    fn quadratic_and_recurrent_oracles_agree() {
        let shape = Shape::new(2, 1, 9, 4, 3);
        for map in [
            FeatureMap::EluPlusOne,
            FeatureMap::Relu,
            FeatureMap::Identity,
            FeatureMap::Softmax,
            FeatureMap::OnePlusCos,
        ] {
            let p = Problem::new(shape, Causality::Causal, map).with_decay(0.95);
            let x = Inputs::random(shape, 5, false).unwrap();
            let a = forward(&p, &x);
            let b = forward_recurrent(&p, &x);
            for (u, w) in a.data().iter().zip(b.data()) {
                assert!((u - w).abs() <= 1e-9 * (1.0 + u.abs()), "{map}: {u} vs {w}");
            }
        }
    }
}
