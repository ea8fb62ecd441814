//! The f64 reference for naive softmax attention (SPEC §1), in plain loops.
//!
//! `O = softmax(s·QKᵀ)V` with `s = 1/√D`; causal rows see keys `j ≤ i`. Each query row is
//! handled on its own (scores of one row, O(N) memory), so the reference itself never
//! materialises N×N: it can check the baselines at sizes where they still fit.
//! The feature map, ε and decay of the [`Problem`] do not apply to softmax attention and are
//! ignored.

use crate::validate::{validate_inputs, NeedGrad};
use linattn_core::{AttnError, Grads, Inputs, Problem, Tensor};

/// Keys visible to query row `row` of a sequence of `seq` positions.
fn visible_keys(causal: bool, row: usize, seq: usize) -> usize {
    if causal {
        row + 1
    } else {
        seq
    }
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Fills `probs[..visible]` with the softmax of `scale·q·k_j` over the visible keys.
/// The row maximum is subtracted before `exp`, so large scores cannot overflow.
fn row_probabilities(q_row: &[f64], keys: &[f64], dk: usize, scale: f64, probs: &mut [f64]) {
    for (j, p) in probs.iter_mut().enumerate() {
        *p = scale * dot(q_row, &keys[j * dk..(j + 1) * dk]);
    }
    let max = probs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let mut total = 0.0;
    for p in probs.iter_mut() {
        *p = (*p - max).exp();
        total += *p;
    }
    // total ≥ 1: the maximal entry contributes exp(0).
    for p in probs.iter_mut() {
        *p /= total;
    }
}

/// O for every (batch, head): `[B, H, N, M]`.
pub fn forward(problem: &Problem, inputs: &Inputs) -> Result<Tensor, AttnError> {
    validate_inputs(problem, inputs, NeedGrad::No)?;
    let shape = problem.shape;
    let (seq, dk, dv) = (shape.seq, shape.dk, shape.dv);
    let scale = 1.0 / (dk as f64).sqrt();
    let causal = problem.causality.is_causal();
    let mut out = Tensor::zeros(shape.v_dims())?;
    let mut probs = vec![0.0; seq];
    for bh in 0..shape.bh() {
        let (q, k, v) = (inputs.q.head(bh), inputs.k.head(bh), inputs.v.head(bh));
        let o = out.head_mut(bh);
        for i in 0..seq {
            let visible = visible_keys(causal, i, seq);
            let p = &mut probs[..visible];
            row_probabilities(&q[i * dk..(i + 1) * dk], k, dk, scale, p);
            let o_row = &mut o[i * dv..(i + 1) * dv];
            for (j, &pj) in p.iter().enumerate() {
                for (oc, vc) in o_row.iter_mut().zip(&v[j * dv..(j + 1) * dv]) {
                    *oc += pj * vc;
                }
            }
        }
    }
    Ok(out)
}

/// O and the gradients of `L` (with `∂L/∂O = d_out`) with respect to Q, K and V:
/// `dP = dO Vᵀ`, `dS = P ⊙ (dP − rowsum(dO ⊙ O))`, `dQ = s·dS K`, `dK = s·dSᵀ Q`,
/// `dV = Pᵀ dO`, accumulated one query row at a time (P recomputed per row).
pub fn backward(problem: &Problem, inputs: &Inputs) -> Result<(Tensor, Grads), AttnError> {
    validate_inputs(problem, inputs, NeedGrad::Yes)?;
    let d_out = inputs.require_d_out()?;
    let out = forward(problem, inputs)?;
    let shape = problem.shape;
    let (seq, dk, dv) = (shape.seq, shape.dk, shape.dv);
    let scale = 1.0 / (dk as f64).sqrt();
    let causal = problem.causality.is_causal();
    let mut dq = Tensor::zeros(shape.qk_dims())?;
    let mut dk_t = Tensor::zeros(shape.qk_dims())?;
    let mut dv_t = Tensor::zeros(shape.v_dims())?;
    let mut probs = vec![0.0; seq];
    let mut d_scores = vec![0.0; seq];
    for bh in 0..shape.bh() {
        let (q, k, v) = (inputs.q.head(bh), inputs.k.head(bh), inputs.v.head(bh));
        let (g, o) = (d_out.head(bh), out.head(bh));
        let dq_h = dq.head_mut(bh);
        let dk_h = dk_t.head_mut(bh);
        let dv_h = dv_t.head_mut(bh);
        for i in 0..seq {
            let visible = visible_keys(causal, i, seq);
            let q_row = &q[i * dk..(i + 1) * dk];
            let g_row = &g[i * dv..(i + 1) * dv];
            let p = &mut probs[..visible];
            row_probabilities(q_row, k, dk, scale, p);
            // rowsum(dO ⊙ O) equals Σ_j P_ij dP_ij: the softmax Jacobian's rank-one term.
            let delta = dot(g_row, &o[i * dv..(i + 1) * dv]);
            let ds = &mut d_scores[..visible];
            for (j, (dsj, &pj)) in ds.iter_mut().zip(p.iter()).enumerate() {
                let dp = dot(g_row, &v[j * dv..(j + 1) * dv]);
                *dsj = pj * (dp - delta);
            }
            let dq_row = &mut dq_h[i * dk..(i + 1) * dk];
            for (j, (&dsj, &pj)) in ds.iter().zip(p.iter()).enumerate() {
                let k_row = &k[j * dk..(j + 1) * dk];
                for (dqc, kc) in dq_row.iter_mut().zip(k_row) {
                    *dqc += scale * dsj * kc;
                }
                for (dkc, qc) in dk_h[j * dk..(j + 1) * dk].iter_mut().zip(q_row) {
                    *dkc += scale * dsj * qc;
                }
                for (dvc, gc) in dv_h[j * dv..(j + 1) * dv].iter_mut().zip(g_row) {
                    *dvc += pj * gc;
                }
            }
        }
    }
    Ok((
        out,
        Grads {
            dq,
            dk: dk_t,
            dv: dv_t,
        },
    ))
}
