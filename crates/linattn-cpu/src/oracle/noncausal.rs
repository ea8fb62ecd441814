//! Non-causal linear attention as one reduction: `S = Σ_j w_j φ(k_j)v_jᵀ`, `z = Σ_j w_j φ(k_j)`
//! with `w_j = λ^{N−1−j}`, then `O_i = φ(q_i)ᵀS / (φ(q_i)ᵀz + ε)`.

use super::head::{read_out_row, HeadCore};

/// O of one head from φ(Q), φ(K) (`n × c`) and V (`n × m`).
pub fn forward_head(core: &HeadCore, qf: &[f64], kf: &[f64], v: &[f64], o: &mut [f64]) {
    let (s, z) = reduce_states(core, kf, v);
    for i in 0..core.n {
        read_out_row(core, i, qf, &s, &z, o);
    }
}

/// The full-sequence state `S` (`c × m`) and key sum `z` (`c`), each key weighted by
/// `λ^{N−1−j}`.
pub fn reduce_states(core: &HeadCore, kf: &[f64], v: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let (n, c, m) = (core.n, core.c, core.m);
    let mut s = vec![0.0; c * m];
    let mut z = vec![0.0; c];
    for j in 0..n {
        let w = core.key_weight(j);
        for a in 0..c {
            let wk = w * kf[j * c + a];
            for b in 0..m {
                s[a * m + b] += wk * v[j * m + b];
            }
            z[a] += wk;
        }
    }
    (s, z)
}
