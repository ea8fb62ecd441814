//! Causal linear attention as an RNN: `S_i = λS_{i−1} + φ(k_i)v_iᵀ`, `z_i = λz_{i−1} + φ(k_i)`,
//! `O_i = φ(q_i)ᵀS_i / (φ(q_i)ᵀz_i + ε)`. One C×M state, sequential over i.

use super::head::{decay_and_add, read_out_row, HeadCore};

/// O of one head from φ(Q), φ(K) (`n × c`) and V (`n × m`).
pub fn forward_head(core: &HeadCore, qf: &[f64], kf: &[f64], v: &[f64], o: &mut [f64]) {
    let (n, c, m) = (core.n, core.c, core.m);
    let mut s = vec![0.0; c * m];
    let mut z = vec![0.0; c];
    for i in 0..n {
        decay_and_add(
            core,
            &mut s,
            &mut z,
            &kf[i * c..(i + 1) * c],
            &v[i * m..(i + 1) * m],
        );
        read_out_row(core, i, qf, &s, &z, o);
    }
}
