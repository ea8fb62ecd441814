//! The memory-efficient backward of SPEC §4, normaliser and decay included. Per head:
//!
//! * forward scan, recomputing `S_i`, `z_i`: `den_i = φ(q_i)ᵀz_i + ε`, `O_i = φ(q_i)ᵀS_i / den_i`,
//!   `gn_i = G_i / den_i`, `gd_i = −(G_i·O_i) / den_i`, `∂φ(q_i) = S_i gn_i + z_i gd_i`;
//! * reverse scan: `R_j = λR_{j+1} + φ(q_j) gn_jᵀ`, `r_j = λr_{j+1} + φ(q_j) gd_j`,
//!   `∂φ(k_j) = R_j v_j + r_j`, `∂v_j = R_jᵀ φ(k_j)`;
//! * non-causal: full sums (`S = S_N`, `R = R_1` without decay inside R), key j's terms
//!   weighted by `λ^{N−1−j}`;
//! * then the chain through φ ([`crate::maps::PreparedMap::vjp_head`]).
//!
//! Unnormalised maps (identity, efficient attention) have `den = 1`, `gd = 0`.
//! Extra memory beyond inputs, outputs and gradients: O(C·M) states and the N×M `gn`.

use super::head::{backward_by_heads, decay_and_add, dot, read_out, HeadCore, HeadGrads};
use super::noncausal::reduce_states;
use linattn_core::{AttnError, Grads, Inputs, Problem, Tensor};

/// O and the gradients of every head (needs `inputs.d_out`).
pub fn run(problem: &Problem, inputs: &Inputs) -> Result<(Tensor, Grads), AttnError> {
    backward_by_heads(problem, inputs, |core, f, v, g, o| {
        Ok(head_backward(core, &f.q, &f.k, v, g, o))
    })
}

/// One head: writes O into `o` and returns the gradients w.r.t. φ(Q), φ(K), V.
// Row i indexes five arrays of different widths: an index reads plainer than five zips.
#[allow(clippy::needless_range_loop)]
pub(crate) fn head_backward(
    core: &HeadCore,
    qf: &[f64],
    kf: &[f64],
    v: &[f64],
    g: &[f64],
    o: &mut [f64],
) -> HeadGrads {
    let (n, c, m) = (core.n, core.c, core.m);
    let mut dqf = vec![0.0; n * c];
    let mut gn = vec![0.0; n * m];
    let mut gd = vec![0.0; n];

    // Forward scan (causal) or the full-sequence state (non-causal).
    let (mut s, mut z) = if core.causal {
        (vec![0.0; c * m], vec![0.0; c])
    } else {
        reduce_states(core, kf, v)
    };
    for i in 0..n {
        let rows = (i * c..(i + 1) * c, i * m..(i + 1) * m);
        if core.causal {
            decay_and_add(
                core,
                &mut s,
                &mut z,
                &kf[rows.0.clone()],
                &v[rows.1.clone()],
            );
        }
        let den = read_out(core, &qf[rows.0.clone()], &s, &z, &mut o[rows.1.clone()]);
        output_row_grads(
            core,
            den,
            &g[rows.1.clone()],
            &o[rows.1.clone()],
            &s,
            &z,
            &mut gn[rows.1],
            &mut gd[i],
            &mut dqf[rows.0],
        );
    }

    // Reverse scan for R_j, r_j (non-causal: one full sum).
    let mut dkf = vec![0.0; n * c];
    let mut dv = vec![0.0; n * m];
    reverse_scan(core, qf, kf, v, &gn, &gd, &mut dkf, &mut dv);
    HeadGrads { dqf, dkf, dv }
}

/// The reverse scan for `R_j`, `r_j` (non-causal: one full sum) from φ(Q), φ(K), V and the
/// forward scan's `gn` (`n × m`), `gd` (`n`): writes `∂φ(k_j)` into `dkf`, `∂v_j` into `dv`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn reverse_scan(
    core: &HeadCore,
    qf: &[f64],
    kf: &[f64],
    v: &[f64],
    gn: &[f64],
    gd: &[f64],
    dkf: &mut [f64],
    dv: &mut [f64],
) {
    let (n, c, m) = (core.n, core.c, core.m);
    let mut r_mat = vec![0.0; c * m];
    let mut r_vec = vec![0.0; c];
    if !core.causal {
        for i in 0..n {
            accumulate_r(
                core,
                1.0,
                &mut r_mat,
                &mut r_vec,
                &qf[i * c..(i + 1) * c],
                &gn[i * m..(i + 1) * m],
                gd[i],
            );
        }
    }
    for j in (0..n).rev() {
        let weight = if core.causal {
            accumulate_r(
                core,
                core.decay,
                &mut r_mat,
                &mut r_vec,
                &qf[j * c..(j + 1) * c],
                &gn[j * m..(j + 1) * m],
                gd[j],
            );
            1.0
        } else {
            core.key_weight(j)
        };
        key_value_grads(
            core,
            weight,
            &r_mat,
            &r_vec,
            &kf[j * c..(j + 1) * c],
            &v[j * m..(j + 1) * m],
            &mut dkf[j * c..(j + 1) * c],
            &mut dv[j * m..(j + 1) * m],
        );
    }
}

/// `gn_i`, `gd_i` and `∂φ(q_i) = S gn_i + z gd_i` for one output row.
#[allow(clippy::too_many_arguments)]
pub(crate) fn output_row_grads(
    core: &HeadCore,
    den: f64,
    g: &[f64],
    o: &[f64],
    s: &[f64],
    z: &[f64],
    gn: &mut [f64],
    gd: &mut f64,
    dqf: &mut [f64],
) {
    for (x, &gg) in gn.iter_mut().zip(g) {
        *x = gg / den;
    }
    *gd = if core.normalised {
        -dot(g, o) / den
    } else {
        0.0
    };
    for (a, s_row) in s.chunks_exact(core.m).enumerate() {
        dqf[a] = dot(s_row, gn) + z[a] * *gd;
    }
}

/// `R ← λR + φ(q) gnᵀ`, `r ← λr + φ(q) gd`.
pub(crate) fn accumulate_r(
    core: &HeadCore,
    decay: f64,
    r_mat: &mut [f64],
    r_vec: &mut [f64],
    qf: &[f64],
    gn: &[f64],
    gd: f64,
) {
    for (a, r_row) in r_mat.chunks_exact_mut(core.m).enumerate() {
        for (x, &gg) in r_row.iter_mut().zip(gn) {
            *x = decay * *x + qf[a] * gg;
        }
        r_vec[a] = decay * r_vec[a] + qf[a] * gd;
    }
}

/// `∂φ(k) = w (R v + r)`, `∂v = w Rᵀφ(k)`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn key_value_grads(
    core: &HeadCore,
    weight: f64,
    r_mat: &[f64],
    r_vec: &[f64],
    kf: &[f64],
    v: &[f64],
    dkf: &mut [f64],
    dv: &mut [f64],
) {
    dv.fill(0.0);
    for (a, r_row) in r_mat.chunks_exact(core.m).enumerate() {
        dkf[a] = weight * (dot(r_row, v) + r_vec[a]);
        for (x, &rr) in dv.iter_mut().zip(r_row) {
            *x += weight * rr * kf[a];
        }
    }
}
