//! Input checks shared by every softmax backend.

use linattn_core::{AttnError, FeatureMap, Inputs, Problem};

/// Whether the caller is about to compute gradients (then d_out must be present).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NeedGrad {
    No,
    Yes,
}

/// Shapes agree with the problem, every dim is non-zero, no element is NaN or ±Inf.
/// Softmax attention ignores the feature map, ε and decay, so unlike
/// `Inputs::validate_for` on the caller's problem this does not reject options that only
/// linear attention reads.
pub(crate) fn validate_inputs(
    problem: &Problem,
    inputs: &Inputs,
    need: NeedGrad,
) -> Result<(), AttnError> {
    // elu+1, the default ε and no decay pass every option check of `Problem::validate` for
    // either causality, so `validate_for` on this problem checks exactly the shape, the
    // inputs' dims against it and their finiteness.
    let shape_only = Problem::new(problem.shape, problem.causality, FeatureMap::EluPlusOne);
    inputs.validate_for(&shape_only)?;
    if need == NeedGrad::Yes {
        inputs.require_d_out()?;
    }
    Ok(())
}
