//! What every per-head routine of the oracle shares: the sizes and options ([`HeadCore`]),
//! featurising a head, the read-out and state update of one token, the host-memory check
//! before a form allocates, and the chain of a head's gradients through the map.

use crate::maps::{Featurised, Operand, PreparedMap};
use linattn_core::{AttnError, Grads, HostMemory, Inputs, Problem, Tensor};

/// Sizes and options shared by every per-head routine.
#[derive(Debug, Clone, Copy)]
pub struct HeadCore {
    /// Sequence length N.
    pub n: usize,
    /// Feature dim C.
    pub c: usize,
    /// Value dim M.
    pub m: usize,
    /// Divide by `φ(q)ᵀz + ε`.
    pub normalised: bool,
    pub eps: f64,
    pub decay: f64,
    pub causal: bool,
}

impl HeadCore {
    pub fn new(problem: &Problem) -> Self {
        HeadCore {
            n: problem.shape.seq,
            c: problem.feature_dim(),
            m: problem.shape.dv,
            normalised: problem.map.normalised(),
            eps: problem.eps,
            decay: problem.decay,
            causal: problem.causality.is_causal(),
        }
    }
    /// Non-causal weight of key j: `λ^{N−1−j}`.
    pub fn key_weight(&self, j: usize) -> f64 {
        self.decay.powi((self.n - 1 - j) as i32)
    }
}

pub(crate) fn featurise_head(
    map: &PreparedMap<f64>,
    inputs: &Inputs,
    bh: usize,
    n: usize,
) -> Featurised<f64> {
    map.featurise(inputs.q.head(bh), inputs.k.head(bh), n)
}

/// Gradients of one head with respect to φ(Q), φ(K) and V.
pub(crate) struct HeadGrads {
    pub dqf: Vec<f64>,
    pub dkf: Vec<f64>,
    pub dv: Vec<f64>,
}

/// Runs `head_backward` on every head, then chains ∂L/∂φ through the map.
pub(crate) fn backward_by_heads(
    problem: &Problem,
    inputs: &Inputs,
    mut head_backward: impl FnMut(
        &HeadCore,
        &Featurised<f64>,
        &[f64],
        &[f64],
        &mut [f64],
    ) -> Result<HeadGrads, AttnError>,
) -> Result<(Tensor, Grads), AttnError> {
    inputs.validate_for(problem)?;
    let d_out = inputs.require_d_out()?;
    let core = HeadCore::new(problem);
    let map = PreparedMap::<f64>::exact(problem.map, problem.shape.dk);
    let mut out = Tensor::zeros(problem.shape.v_dims())?;
    let mut grads = Grads::zeros(problem.shape)?;
    for bh in 0..problem.shape.bh() {
        let f = featurise_head(&map, inputs, bh, core.n);
        let hg = head_backward(
            &core,
            &f,
            inputs.v.head(bh),
            d_out.head(bh),
            out.head_mut(bh),
        )?;
        chain_head(&core, &map, inputs, bh, (&f.q, &f.k), &hg, &mut grads);
    }
    Ok((out, grads))
}

/// Head `bh`'s gradients into `grads`: ∂L/∂φ(Q), ∂L/∂φ(K) of `hg` chained through the map
/// (at φ(Q), φ(K) = `features`) into dQ, dK; dV as it is.
pub(crate) fn chain_head(
    core: &HeadCore,
    map: &PreparedMap<f64>,
    inputs: &Inputs,
    bh: usize,
    (qf, kf): (&[f64], &[f64]),
    hg: &HeadGrads,
    grads: &mut Grads,
) {
    let (q, k, n) = (inputs.q.head(bh), inputs.k.head(bh), core.n);
    debug_assert_eq!(q.len(), n * inputs.q.dims()[3]);
    map.vjp_head(Operand::Query, q, qf, &hg.dqf, n, grads.dq.head_mut(bh));
    map.vjp_head(Operand::Key, k, kf, &hg.dkf, n, grads.dk.head_mut(bh));
    grads.dv.head_mut(bh).copy_from_slice(&hg.dv);
}

/// `x · y` over equal-length slices.
pub(crate) fn dot(x: &[f64], y: &[f64]) -> f64 {
    x.iter().zip(y).map(|(a, b)| a * b).sum()
}

/// Writes `num / den` of one output row: `qf·S` over C, divided by `qf·z + ε` when normalised.
pub(crate) fn read_out(core: &HeadCore, qf: &[f64], s: &[f64], z: &[f64], o: &mut [f64]) -> f64 {
    o.fill(0.0);
    for (a, s_row) in qf.iter().zip(s.chunks_exact(core.m)) {
        for (oo, &sv) in o.iter_mut().zip(s_row) {
            *oo += a * sv;
        }
    }
    let den = if core.normalised {
        dot(qf, z) + core.eps
    } else {
        1.0
    };
    o.iter_mut().for_each(|x| *x /= den);
    den
}

/// [`read_out`] of token i: row i of φ(Q) (`n × c`) against `s`, `z`, into row i of O
/// (`n × m`).
pub(crate) fn read_out_row(
    core: &HeadCore,
    i: usize,
    qf: &[f64],
    s: &[f64],
    z: &[f64],
    o: &mut [f64],
) -> f64 {
    let (c, m) = (core.c, core.m);
    read_out(
        core,
        &qf[i * c..(i + 1) * c],
        s,
        z,
        &mut o[i * m..(i + 1) * m],
    )
}

/// Checks that a buffer of `elems` f64 (`None`: the count overflowed `usize`) fits in the
/// available host memory before a form allocates it; returns the count.
pub(crate) fn reserve_f64(
    elems: Option<usize>,
    overflow: impl FnOnce() -> String,
    purpose: &str,
) -> Result<usize, AttnError> {
    let elems = elems.ok_or_else(|| AttnError::SizeOverflow(overflow()))?;
    HostMemory::ensure_available((elems as u64).saturating_mul(8), purpose)?;
    Ok(elems)
}

/// `S ← λS + k vᵀ`, `z ← λz + k`.
pub(crate) fn decay_and_add(core: &HeadCore, s: &mut [f64], z: &mut [f64], kf: &[f64], v: &[f64]) {
    for (c, s_row) in s.chunks_exact_mut(core.m).enumerate() {
        for (sv, &vv) in s_row.iter_mut().zip(v) {
            *sv = core.decay * *sv + kf[c] * vv;
        }
        z[c] = core.decay * z[c] + kf[c];
    }
}
