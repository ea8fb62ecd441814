//! The f64 reference: plain loops, one file per form, written to be obviously right.
//!
//! Every form works on one (batch, head) at a time on φ(Q), φ(K) (computed once by
//! [`crate::maps`]) and V, through a [`HeadCore`] that carries the sizes and options.
//! Normalised maps divide by `φ(q)ᵀz + ε`; identity and efficient attention do not.
//! Decay λ (SPEC §6): `S_i = λS_{i−1} + φ(k_i)v_iᵀ`; non-causal weights key j by `λ^{N−1−j}`.

pub mod backward_efficient;
pub mod backward_stored;
pub mod causal_cumsum;
pub mod causal_recurrent;
pub(crate) mod head;
pub mod noncausal;
pub mod quadratic;

pub use head::HeadCore;

use crate::maps::PreparedMap;
use head::featurise_head;
use linattn_core::{AttnError, Form, Grads, Inputs, Problem, Tensor, Unsupported};

/// O by the reference form of the problem's causality: recurrent when causal, the parallel
/// reduction otherwise.
pub fn forward(problem: &Problem, inputs: &Inputs) -> Result<Tensor, AttnError> {
    let form = if problem.causality.is_causal() {
        Form::Recurrent
    } else {
        Form::Noncausal
    };
    forward_with(problem, inputs, form)
}

/// O by a chosen form (quadratic, parallel, recurrent or cumsum).
pub fn forward_with(problem: &Problem, inputs: &Inputs, form: Form) -> Result<Tensor, AttnError> {
    inputs.validate_for(problem)?;
    if !form.supports(problem.causality) {
        return Err(Unsupported::Problem(format!(
            "{form} form does not compute {} attention",
            problem.causality
        ))
        .into());
    }
    let core = HeadCore::new(problem);
    let map = PreparedMap::<f64>::exact(problem.map, problem.shape.dk);
    let mut out = Tensor::zeros(problem.shape.v_dims())?;
    for bh in 0..problem.shape.bh() {
        let f = featurise_head(&map, inputs, bh, core.n);
        let v = inputs.v.head(bh);
        let o = out.head_mut(bh);
        match form {
            Form::Noncausal => noncausal::forward_head(&core, &f.q, &f.k, v, o),
            Form::Recurrent => causal_recurrent::forward_head(&core, &f.q, &f.k, v, o),
            Form::Cumsum => causal_cumsum::forward_head(&core, &f.q, &f.k, v, o)?,
            Form::Quadratic => quadratic::forward_head(&core, &f.q, &f.k, v, o)?,
            Form::Chunked => {
                return Err(Unsupported::Problem(
                    "the CPU oracle has no chunked form (recurrent is its causal reference)".into(),
                )
                .into())
            }
        }
    }
    Ok(out)
}

/// O and ∂L/∂Q, ∂L/∂K, ∂L/∂V by the memory-efficient backward of SPEC §4 (needs d_out).
pub fn backward(problem: &Problem, inputs: &Inputs) -> Result<(Tensor, Grads), AttnError> {
    backward_efficient::run(problem, inputs)
}
