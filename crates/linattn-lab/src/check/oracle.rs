//! The f64 reference of a case, computed once per oracle key and shared by the backends
//! compared with it.

use crate::term::panic_message;
use linattn_core::{Algorithm, AttnError, Grads, Inputs, Precision, Problem, Tensor};
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Which oracle output a backend is compared with: the algorithm's oracle, on inputs
/// rounded to the backend's storage precision when that is below f32.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct OracleKey {
    pub(super) softmax: bool,
    pub(super) rounding: Option<Precision>,
}

impl OracleKey {
    pub(super) fn for_backend(info: &linattn_core::BackendInfo) -> Self {
        OracleKey {
            softmax: info.algorithm == Algorithm::Softmax,
            rounding: match info.precision {
                Precision::F16 | Precision::BF16 => Some(info.precision),
                Precision::F32 | Precision::F64 => None,
            },
        }
    }

    pub(super) fn inputs(&self, inputs: &Inputs) -> Inputs {
        match self.rounding {
            Some(Precision::F16) => inputs.rounded(|x| half::f16::from_f64(x).to_f64()),
            Some(Precision::BF16) => inputs.rounded(|x| half::bf16::from_f64(x).to_f64()),
            _ => inputs.clone(),
        }
    }
}

/// The reference result of one case for one oracle key.
#[derive(Clone)]
pub(super) struct Reference {
    pub(super) output: Tensor,
    pub(super) grads: Option<Grads>,
    /// Host seconds the oracle took (kept out of the backends' times).
    pub(super) seconds: f64,
}

/// Seconds spent computing the cached oracle results so far.
pub(super) fn oracle_seconds(cache: &HashMap<OracleKey, Result<Reference, String>>) -> f64 {
    cache.values().flatten().map(|r| r.seconds).sum()
}

pub(super) fn run_oracle(
    key: OracleKey,
    problem: &Problem,
    inputs: &Inputs,
    with_grads: bool,
) -> Result<Reference, String> {
    let inputs = key.inputs(inputs);
    let started = std::time::Instant::now();
    let result = catch_unwind(AssertUnwindSafe(|| -> Result<Reference, AttnError> {
        if with_grads {
            let (output, grads) = if key.softmax {
                linattn_softmax::oracle::backward(problem, &inputs)?
            } else {
                linattn_cpu::oracle::backward(problem, &inputs)?
            };
            Ok(Reference {
                output,
                grads: Some(grads),
                seconds: 0.0,
            })
        } else {
            let output = if key.softmax {
                linattn_softmax::oracle::forward(problem, &inputs)?
            } else {
                linattn_cpu::oracle::forward(problem, &inputs)?
            };
            Ok(Reference {
                output,
                grads: None,
                seconds: 0.0,
            })
        }
    }));
    match result {
        Ok(Ok(reference)) => Ok(Reference {
            seconds: started.elapsed().as_secs_f64(),
            ..reference
        }),
        Ok(Err(e)) => Err(format!("oracle failed: {e}")),
        Err(panic) => Err(format!("oracle panicked: {}", panic_message(&panic))),
    }
}
