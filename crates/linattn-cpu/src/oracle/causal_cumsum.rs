//! Causal linear attention by materialised prefix sums: `U_i = φ(k_i)v_iᵀ` for every i
//! (N×C×M), `P_i = λP_{i−1} + U_i` in place, then `O_i = φ(q_i)ᵀP_i / (φ(q_i)ᵀz_i + ε)`.
//! O(N·C·M) memory on purpose: the trade-off SPEC §3 keeps to show.

use super::head::{read_out_row, reserve_f64, HeadCore};
use linattn_core::AttnError;

/// O of one head from φ(Q), φ(K) (`n × c`) and V (`n × m`); fails with a typed
/// out-of-memory error when the N×C×M buffer would not fit.
pub fn forward_head(
    core: &HeadCore,
    qf: &[f64],
    kf: &[f64],
    v: &[f64],
    o: &mut [f64],
) -> Result<(), AttnError> {
    let (n, c, m) = (core.n, core.c, core.m);
    reserve_f64(
        n.checked_mul(c).and_then(|x| x.checked_mul(m + 1)),
        || format!("cumsum states N={n} C={c} M={m}"),
        &format!("cumsum prefix states N·C·(M+1) = {n}·{c}·{}", m + 1),
    )?;
    let mut u = vec![0.0; n * c * m];
    let mut zs = vec![0.0; n * c];
    for i in 0..n {
        for a in 0..c {
            zs[i * c + a] = kf[i * c + a];
            for b in 0..m {
                u[(i * c + a) * m + b] = kf[i * c + a] * v[i * m + b];
            }
        }
    }
    for i in 1..n {
        let (done, rest) = u.split_at_mut(i * c * m);
        let prev = &done[(i - 1) * c * m..];
        for (x, &p) in rest[..c * m].iter_mut().zip(prev) {
            *x += core.decay * p;
        }
        let (zdone, zrest) = zs.split_at_mut(i * c);
        for (x, &p) in zrest[..c].iter_mut().zip(&zdone[(i - 1) * c..]) {
            *x += core.decay * p;
        }
    }
    for i in 0..n {
        read_out_row(
            core,
            i,
            qf,
            &u[i * c * m..(i + 1) * c * m],
            &zs[i * c..(i + 1) * c],
            o,
        );
    }
    Ok(())
}
