//! What every f32 form ([`crate::fast`], [`crate::chunked`]) shares at its public entry
//! points: the gradient buffers, the checks each makes before touching the data, and
//! [`f32_entry_points!`], which writes their signatures once for every form.

use linattn_core::{AttnError, Problem};

/// Gradients of the fast path, f32, same layouts as the inputs.
#[derive(Debug, Clone, PartialEq)]
pub struct GradsF32 {
    pub dq: Vec<f32>,
    pub dk: Vec<f32>,
    pub dv: Vec<f32>,
}

impl GradsF32 {
    /// Zeroed gradients for operands of `qk_len` (q, k) and `v_len` (v) elements.
    pub fn zeros(qk_len: usize, v_len: usize) -> Self {
        GradsF32 {
            dq: vec![0f32; qk_len],
            dk: vec![0f32; qk_len],
            dv: vec![0f32; v_len],
        }
    }
}

/// Every form's `forward_into`: O of (problem, q, k, v) written into the last argument.
pub type ForwardInto = fn(&Problem, &[f32], &[f32], &[f32], &mut [f32]) -> Result<(), AttnError>;

/// Every form's `backward_into`: O and the gradients of (problem, q, k, v, d_out).
pub type BackwardInto = fn(
    &Problem,
    &[f32],
    &[f32],
    &[f32],
    &[f32],
    &mut [f32],
    &mut GradsF32,
) -> Result<(), AttnError>;

/// A forward's operands: q, k and v.
pub(crate) type ForwardOperands<'a> = (&'a [f32], &'a [f32], &'a [f32]);

/// A backward's operands: q, k, v and d_out.
pub(crate) type Operands<'a> = (&'a [f32], &'a [f32], &'a [f32], &'a [f32]);

/// A form's forward over checked operands and output buffer.
pub(crate) type ForwardBody = fn(&Problem, ForwardOperands, &mut [f32]);

/// A form's backward over checked operands and buffers; `O` is how it takes the output
/// rows (a buffer to write, or for the GEMM forms also the forward's O to read).
pub(crate) type BackwardBody<O> = fn(&Problem, Operands, O, &mut GradsF32);

/// The output rows a backward receives, whichever way: their length, for the check.
pub(crate) trait BackwardOut {
    fn out_len(&self) -> usize;
}

impl BackwardOut for &mut [f32] {
    fn out_len(&self) -> usize {
        self.len()
    }
}

/// A GEMM form's O rows in the backward: computed there (written), or given by the
/// caller's forward (read).
pub(crate) enum ChunkOut<'o> {
    Compute(&'o mut [f32]),
    Given(&'o [f32]),
}

impl<'o> From<&'o mut [f32]> for ChunkOut<'o> {
    fn from(o: &'o mut [f32]) -> Self {
        ChunkOut::Compute(o)
    }
}

impl<'o> From<&'o [f32]> for ChunkOut<'o> {
    fn from(o: &'o [f32]) -> Self {
        ChunkOut::Given(o)
    }
}

impl BackwardOut for ChunkOut<'_> {
    fn out_len(&self) -> usize {
        match self {
            ChunkOut::Compute(o) => o.len(),
            ChunkOut::Given(o) => o.len(),
        }
    }
}

impl ChunkOut<'_> {
    /// Elements `r` of these rows, computed or given as they are.
    pub fn rows(&mut self, r: std::ops::Range<usize>) -> ChunkOut<'_> {
        match self {
            ChunkOut::Compute(o) => ChunkOut::Compute(&mut o[r]),
            ChunkOut::Given(o) => ChunkOut::Given(&o[r]),
        }
    }
}

pub(crate) fn check_len(what: &str, got: usize, want: usize) -> Result<(), AttnError> {
    if got != want {
        return Err(AttnError::ShapeMismatch(format!(
            "{what} holds {got} elements, the problem needs {want}"
        )));
    }
    Ok(())
}

/// A form that computes one causality only refuses the other (`causal`: `None` for a form
/// that computes both).
fn require_causality(problem: &Problem, causal: Option<bool>) -> Result<(), AttnError> {
    match causal {
        Some(causal) if problem.causality.is_causal() != causal => {
            let (form, kind) = if causal {
                ("chunked", "causal")
            } else {
                ("non-causal", "non-causal")
            };
            Err(AttnError::InvalidArgument(format!(
                "the {form} form computes {kind} attention only"
            )))
        }
        _ => Ok(()),
    }
}

/// Validates the problem and the lengths of q, k and v against it; returns the element
/// counts of q/k and of v.
fn check_operands(
    problem: &Problem,
    (q, k, v): ForwardOperands,
) -> Result<(usize, usize), AttnError> {
    problem.validate()?;
    let (qk_len, v_len) = (problem.shape.qk_len()?, problem.shape.v_len()?);
    check_len("q", q.len(), qk_len)?;
    check_len("k", k.len(), qk_len)?;
    check_len("v", v.len(), v_len)?;
    Ok((qk_len, v_len))
}

/// The checks every forward entry point makes (causality, operand and output lengths),
/// then `body`.
pub(crate) fn checked_forward(
    problem: &Problem,
    causal: Option<bool>,
    ops: ForwardOperands,
    out: &mut [f32],
    body: ForwardBody,
) -> Result<(), AttnError> {
    require_causality(problem, causal)?;
    let (_, v_len) = check_operands(problem, ops)?;
    check_len("out", out.len(), v_len)?;
    body(problem, ops, out);
    Ok(())
}

/// The checks every backward entry point makes (causality, operand and buffer lengths,
/// O's whether computed or given), then `body`.
pub(crate) fn checked_backward<O: BackwardOut>(
    problem: &Problem,
    causal: Option<bool>,
    ops: Operands,
    out: O,
    grads: &mut GradsF32,
    body: BackwardBody<O>,
) -> Result<(), AttnError> {
    require_causality(problem, causal)?;
    let (q, k, v, d_out) = ops;
    let (qk_len, v_len) = check_operands(problem, (q, k, v))?;
    check_len("d_out", d_out.len(), v_len)?;
    check_len("out", out.out_len(), v_len)?;
    check_len("dq", grads.dq.len(), qk_len)?;
    check_len("dk", grads.dk.len(), qk_len)?;
    check_len("dv", grads.dv.len(), v_len)?;
    body(problem, ops, out, grads);
    Ok(())
}

/// A form's `forward_into` on a fresh output buffer.
pub(crate) fn forward_allocating(
    into: ForwardInto,
    problem: &Problem,
    (q, k, v): ForwardOperands,
) -> Result<Vec<f32>, AttnError> {
    let (_, v_len) = check_operands(problem, (q, k, v))?;
    let mut out = vec![0f32; v_len];
    into(problem, q, k, v, &mut out)?;
    Ok(out)
}

/// A form's `backward_into` on fresh buffers.
pub(crate) fn backward_allocating(
    into: BackwardInto,
    problem: &Problem,
    (q, k, v, d_out): Operands,
) -> Result<(Vec<f32>, GradsF32), AttnError> {
    let (qk_len, v_len) = check_operands(problem, (q, k, v))?;
    check_len("d_out", d_out.len(), v_len)?;
    let (mut out, mut grads) = (vec![0f32; v_len], GradsF32::zeros(qk_len, v_len));
    into(problem, q, k, v, d_out, &mut out, &mut grads)?;
    Ok((out, grads))
}

/// The public entry points of an f32 form, the same signatures for every form:
/// `forward_into` and `backward_into` run the checks ([`checked_forward`],
/// [`checked_backward`]) and then the form's bodies; `forward` and `backward` run those on
/// fresh buffers. With `from_output`, also `backward_from_output_into`, the backward given
/// the forward's O (the body's output type converts from `&[f32]`). The docs of `forward`,
/// `backward` and `backward_from_output_into` come from the invocation.
macro_rules! f32_entry_points {
    (
        causal: $causal:expr,
        $(#[$forward_doc:meta])* forward: $forward_body:path,
        $(#[$backward_doc:meta])* backward: $backward_body:path,
        $($(#[$from_output_doc:meta])* from_output,)?
    ) => {
        $(#[$forward_doc])*
        pub fn forward(
            problem: &linattn_core::Problem,
            q: &[f32],
            k: &[f32],
            v: &[f32],
        ) -> Result<Vec<f32>, linattn_core::AttnError> {
            $crate::entry::forward_allocating(forward_into, problem, (q, k, v))
        }

        /// [`forward`] into `out` (`[B,H,N,M]`, every element overwritten): a caller that
        /// runs again reuses its buffer instead of faulting in fresh pages each time.
        pub fn forward_into(
            problem: &linattn_core::Problem,
            q: &[f32],
            k: &[f32],
            v: &[f32],
            out: &mut [f32],
        ) -> Result<(), linattn_core::AttnError> {
            $crate::entry::checked_forward(problem, $causal, (q, k, v), out, $forward_body)
        }

        $(#[$backward_doc])*
        pub fn backward(
            problem: &linattn_core::Problem,
            q: &[f32],
            k: &[f32],
            v: &[f32],
            d_out: &[f32],
        ) -> Result<(Vec<f32>, $crate::entry::GradsF32), linattn_core::AttnError> {
            $crate::entry::backward_allocating(backward_into, problem, (q, k, v, d_out))
        }

        /// [`backward`] into `out` and `grads` (every element overwritten): a caller that
        /// runs again reuses its buffers instead of faulting in fresh pages each time.
        pub fn backward_into(
            problem: &linattn_core::Problem,
            q: &[f32],
            k: &[f32],
            v: &[f32],
            d_out: &[f32],
            out: &mut [f32],
            grads: &mut $crate::entry::GradsF32,
        ) -> Result<(), linattn_core::AttnError> {
            let ops = (q, k, v, d_out);
            $crate::entry::checked_backward(problem, $causal, ops, out.into(), grads, $backward_body)
        }

        $(
            $(#[$from_output_doc])*
            pub fn backward_from_output_into(
                problem: &linattn_core::Problem,
                q: &[f32],
                k: &[f32],
                v: &[f32],
                d_out: &[f32],
                o: &[f32],
                grads: &mut $crate::entry::GradsF32,
            ) -> Result<(), linattn_core::AttnError> {
                let ops = (q, k, v, d_out);
                $crate::entry::checked_backward(problem, $causal, ops, o.into(), grads, $backward_body)
            }
        )?
    };
}
pub(crate) use f32_entry_points;
