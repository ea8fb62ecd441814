//! Comparison with the f64 oracle of linattn-cpu through linattn-core's verdict rule
//! ([`Judge`]): inputs rounded to the backend's storage, the precision's tolerance for O and
//! each gradient, cancelled gradients judged against the case's largest.

use linattn_core::{Backend, Grads, Inputs, Judge, Precision, Problem, Tensor};

/// Rounds through the backend's storage type so the oracle sees the same operands.
pub fn rounder(precision: Precision) -> fn(f64) -> f64 {
    match precision {
        Precision::F64 => |x| x,
        Precision::F32 => |x| x as f32 as f64,
        Precision::F16 => |x| half::f16::from_f64(x).to_f64(),
        Precision::BF16 => |x| half::bf16::from_f64(x).to_f64(),
    }
}

/// `got` against `want` on its own RMS within `tolerance` (dims equal, everything finite).
pub fn close(what: &str, want: &Tensor, got: &Tensor, tolerance: f64) -> Result<(), String> {
    if want.dims() != got.dims() {
        return Err(format!(
            "{what}: dims {:?} vs {:?}",
            got.dims(),
            want.dims()
        ));
    }
    match Judge::within(tolerance)
        .tensor(what, want.data(), got.data())
        .failure()
    {
        None => Ok(()),
        Some(failure) => Err(failure),
    }
}

/// linattn-cpu's f64 oracle: O and the gradients on `inputs`.
pub fn oracle(problem: &Problem, inputs: &Inputs) -> Result<(Tensor, Grads), String> {
    linattn_cpu::oracle::backward(problem, inputs).map_err(|e| format!("{problem}: oracle: {e}"))
}

/// Forward and backward of `b` on `problem` against `want` (the oracle on the same,
/// already rounded, `inputs`), judged at the backend's precision; the results when they pass.
pub fn run_judged(
    b: &mut dyn Backend,
    problem: &Problem,
    inputs: &Inputs,
    (want_out, want): &(Tensor, Grads),
) -> Result<(Tensor, Grads), String> {
    let label = format!("{} {problem}", b.name());
    let judge = Judge::for_precision(b.info().precision);
    let (out, grads) = b
        .forward_backward(problem, inputs)
        .map_err(|e| format!("{label}: {e}"))?;
    judge
        .case((want_out, &out), Some((want, &grads)))
        .map_err(|e| format!("{label}: {e}"))?
        .into_result(&label)?;
    Ok((out, grads))
}

/// Forward and backward of `b` on `problem` against linattn-cpu's f64 oracle, inputs
/// rounded to the backend's storage.
pub fn against_oracle(
    b: &mut dyn Backend,
    problem: &Problem,
    inputs: &Inputs,
) -> Result<(), String> {
    let inputs = inputs.rounded(rounder(b.info().precision));
    let want = oracle(problem, &inputs).map_err(|e| format!("{} {e}", b.name()))?;
    run_judged(b, problem, &inputs, &want).map(drop)
}

/// The forward alone of `b` (inputs staged without d_out, so a backend that keeps state for a
/// backward does not) against linattn-cpu's f64 oracle, inputs rounded to the backend's
/// storage, O judged at the backend's precision.
pub fn forward_against_oracle(
    b: &mut dyn Backend,
    problem: &Problem,
    inputs: &Inputs,
) -> Result<(), String> {
    let label = format!("{} {problem}", b.name());
    let mut inputs = inputs.rounded(rounder(b.info().precision));
    inputs.d_out = None;
    let want = linattn_cpu::oracle::forward(problem, &inputs)
        .map_err(|e| format!("{label}: oracle: {e}"))?;
    let out = b
        .forward(problem, &inputs)
        .map_err(|e| format!("{label}: {e}"))?;
    Judge::for_precision(b.info().precision)
        .case((&want, &out), None)
        .map_err(|e| format!("{label}: {e}"))?
        .into_result(&label)
}
