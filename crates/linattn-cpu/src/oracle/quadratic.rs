//! The masked N×N form: `A_ij = φ(q_i)·φ(k_j) · w_ij` (causal: `w_ij = λ^{i−j}` for j ≤ i,
//! 0 after; non-causal: `w_ij = λ^{N−1−j}`), `O_i = Σ_j A_ij v_j / (Σ_j A_ij + ε)`.
//! O(N²) memory on purpose: it shares no code path with the state-based forms, so it is an
//! independent check of them.

use super::head::{dot, reserve_f64, HeadCore};
use linattn_core::AttnError;

/// O of one head from φ(Q), φ(K) (`n × c`) and V (`n × m`); fails with a typed
/// out-of-memory error when the N×N matrix would not fit.
pub fn forward_head(
    core: &HeadCore,
    qf: &[f64],
    kf: &[f64],
    v: &[f64],
    o: &mut [f64],
) -> Result<(), AttnError> {
    let (n, c, m) = (core.n, core.c, core.m);
    let elems = reserve_f64(
        n.checked_mul(n),
        || format!("quadratic similarity N×N, N={n}"),
        &format!("similarity {n}×{n}"),
    )?;
    let mut a = vec![0.0; elems];
    for i in 0..n {
        for j in 0..n {
            let weight = if core.causal {
                if j > i {
                    0.0
                } else {
                    core.decay.powi((i - j) as i32)
                }
            } else {
                core.key_weight(j)
            };
            a[i * n + j] = weight * dot(&qf[i * c..(i + 1) * c], &kf[j * c..(j + 1) * c]);
        }
    }
    for i in 0..n {
        let row = &a[i * n..(i + 1) * n];
        let out = &mut o[i * m..(i + 1) * m];
        out.fill(0.0);
        for (j, &aij) in row.iter().enumerate() {
            for (x, &vv) in out.iter_mut().zip(&v[j * m..(j + 1) * m]) {
                *x += aij * vv;
            }
        }
        if core.normalised {
            let den = row.iter().sum::<f64>() + core.eps;
            out.iter_mut().for_each(|x| *x /= den);
        }
    }
    Ok(())
}
