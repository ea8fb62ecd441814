//! Input checks shared by every softmax backend.

use linattn_core::{AttnError, Inputs, Problem, TensorRole};

/// Whether the caller is about to compute gradients (then d_out must be present).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NeedGrad {
    No,
    Yes,
}

/// Shapes agree with the problem, every dim is non-zero, no element is NaN or ±Inf.
/// Softmax attention ignores the feature map, ε and decay, so unlike
/// `Inputs::validate_for` this does not reject options that only linear attention reads.
pub(crate) fn validate_inputs(
    problem: &Problem,
    inputs: &Inputs,
    need: NeedGrad,
) -> Result<(), AttnError> {
    problem.shape.validate()?;
    let shape = inputs.shape()?;
    if shape != problem.shape {
        return Err(AttnError::ShapeMismatch(format!(
            "inputs are {shape}, problem is {}",
            problem.shape
        )));
    }
    inputs.q.check_finite(TensorRole::Q)?;
    inputs.k.check_finite(TensorRole::K)?;
    inputs.v.check_finite(TensorRole::V)?;
    match (&inputs.d_out, need) {
        (Some(g), _) => g.check_finite(TensorRole::DOut)?,
        (None, NeedGrad::Yes) => {
            inputs.require_d_out()?;
        }
        (None, NeedGrad::No) => {}
    }
    Ok(())
}
