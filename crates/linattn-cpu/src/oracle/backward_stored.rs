//! The naive backward: the forward keeps every state `S_i`, `z_i` (N·C·M memory, checked
//! against available memory first) together with φ(Q), φ(K) and the denominators; the
//! backward reads `∂φ(q_i) = S_i gn_i + z_i gd_i` from them instead of re-scanning.
//! `R_j`, `r_j` still come from a reverse scan. Non-causal keeps the one full state `S` and
//! `z` (there is only one), so there it differs from the efficient backward only in not
//! recomputing. It exists for the memory contrast of SPEC §4.

use super::backward_efficient::{output_row_grads, reverse_scan};
use super::head::{chain_head, decay_and_add, featurise_head, read_out_row, HeadCore, HeadGrads};
use super::noncausal::reduce_states;
use crate::maps::PreparedMap;
use linattn_core::{AttnError, Grads, HostMemory, Inputs, Problem, Tensor};

/// What the forward of one head keeps for the backward.
#[derive(Debug, Clone)]
pub struct StoredHead {
    qf: Vec<f64>,
    kf: Vec<f64>,
    /// `S_i` for every i (causal, `n·c·m`) or the one full state (non-causal, `c·m`).
    states: Vec<f64>,
    /// `z_i` likewise (`n·c` or `c`).
    key_sums: Vec<f64>,
    den: Vec<f64>,
}

/// The forward's output and its kept states, one per head.
#[derive(Debug, Clone)]
pub struct StoredForward {
    pub output: Tensor,
    pub heads: Vec<StoredHead>,
}

impl StoredForward {
    /// Bytes held by the kept states.
    pub fn state_bytes(&self) -> usize {
        self.heads
            .iter()
            .map(|h| {
                8 * (h.states.len() + h.key_sums.len() + h.qf.len() + h.kf.len() + h.den.len())
            })
            .sum()
    }
}

/// O and the gradients, forward keeping every state (needs `inputs.d_out`).
pub fn run(problem: &Problem, inputs: &Inputs) -> Result<(Tensor, Grads), AttnError> {
    inputs.require_d_out()?;
    let fwd = forward_storing(problem, inputs)?;
    let grads = backward_from(problem, inputs, &fwd)?;
    Ok((fwd.output, grads))
}

/// The forward, keeping every `S_i`, `z_i` of every head.
pub fn forward_storing(problem: &Problem, inputs: &Inputs) -> Result<StoredForward, AttnError> {
    inputs.validate_for(problem)?;
    let core = HeadCore::new(problem);
    let (n, c, m) = (core.n, core.c, core.m);
    let steps = if core.causal { n } else { 1 };
    let per_head = steps
        .checked_mul(c)
        .and_then(|x| x.checked_mul(m + 1))
        .and_then(|x| x.checked_add(2 * n * c + n))
        .ok_or_else(|| AttnError::SizeOverflow(format!("stored states N={n} C={c} M={m}")))?;
    let total = per_head
        .checked_mul(problem.shape.bh())
        .and_then(|x| x.checked_mul(8))
        .ok_or_else(|| AttnError::SizeOverflow(format!("stored states of {}", problem.shape)))?;
    HostMemory::ensure_available(
        total as u64,
        &format!("stored states of every step, {problem}"),
    )?;

    let map = PreparedMap::<f64>::exact(problem.map, problem.shape.dk);
    let mut output = Tensor::zeros(problem.shape.v_dims())?;
    let mut heads = Vec::with_capacity(problem.shape.bh());
    for bh in 0..problem.shape.bh() {
        let f = featurise_head(&map, inputs, bh, n);
        let v = inputs.v.head(bh);
        let o = output.head_mut(bh);
        let mut den = vec![0.0; n];
        let (states, key_sums) = if core.causal {
            let mut states = vec![0.0; n * c * m];
            let mut key_sums = vec![0.0; n * c];
            let mut s = vec![0.0; c * m];
            let mut z = vec![0.0; c];
            for i in 0..n {
                decay_and_add(
                    &core,
                    &mut s,
                    &mut z,
                    &f.k[i * c..(i + 1) * c],
                    &v[i * m..(i + 1) * m],
                );
                states[i * c * m..(i + 1) * c * m].copy_from_slice(&s);
                key_sums[i * c..(i + 1) * c].copy_from_slice(&z);
                den[i] = read_out_row(&core, i, &f.q, &s, &z, o);
            }
            (states, key_sums)
        } else {
            let (s, z) = reduce_states(&core, &f.k, v);
            for (i, den_i) in den.iter_mut().enumerate() {
                *den_i = read_out_row(&core, i, &f.q, &s, &z, o);
            }
            (s, z)
        };
        heads.push(StoredHead {
            qf: f.q,
            kf: f.k,
            states,
            key_sums,
            den,
        });
    }
    Ok(StoredForward { output, heads })
}

/// The gradients from a [`forward_storing`] of the same problem and inputs.
pub fn backward_from(
    problem: &Problem,
    inputs: &Inputs,
    fwd: &StoredForward,
) -> Result<Grads, AttnError> {
    inputs.validate_for(problem)?;
    let d_out = inputs.require_d_out()?;
    if fwd.heads.len() != problem.shape.bh() || fwd.output.dims() != problem.shape.v_dims() {
        return Err(AttnError::State(
            "stored states belong to a different problem than the backward".into(),
        ));
    }
    let core = HeadCore::new(problem);
    let (n, c, m) = (core.n, core.c, core.m);
    let map = PreparedMap::<f64>::exact(problem.map, problem.shape.dk);
    let mut grads = Grads::zeros(problem.shape)?;
    for (bh, h) in fwd.heads.iter().enumerate() {
        let (v, g, o) = (inputs.v.head(bh), d_out.head(bh), fwd.output.head(bh));
        let mut dqf = vec![0.0; n * c];
        let mut gn = vec![0.0; n * m];
        let mut gd = vec![0.0; n];
        for i in 0..n {
            let (s, z) = if core.causal {
                (
                    &h.states[i * c * m..(i + 1) * c * m],
                    &h.key_sums[i * c..(i + 1) * c],
                )
            } else {
                (&h.states[..], &h.key_sums[..])
            };
            output_row_grads(
                &core,
                h.den[i],
                &g[i * m..(i + 1) * m],
                &o[i * m..(i + 1) * m],
                s,
                z,
                &mut gn[i * m..(i + 1) * m],
                &mut gd[i],
                &mut dqf[i * c..(i + 1) * c],
            );
        }
        let mut dkf = vec![0.0; n * c];
        let mut dv = vec![0.0; n * m];
        reverse_scan(&core, &h.qf, &h.kf, v, &gn, &gd, &mut dkf, &mut dv);
        let hg = HeadGrads { dqf, dkf, dv };
        chain_head(&core, &map, inputs, bh, (&h.qf, &h.kf), &hg, &mut grads);
    }
    Ok(grads)
}
