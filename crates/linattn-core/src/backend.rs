use crate::error::{AttnError, Unsupported};
use crate::problem::{Algorithm, Precision, Problem};
use crate::seeded::SeededInputs;
use crate::tensor::{Grads, Inputs, Tensor};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Where a backend's data lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceKind {
    Cpu,
    Cuda,
    /// A simulated CUDA device: the PTX simulator running the CUDA kernels on the host.
    /// Results are exact for what the kernels compute; times are host times, not GPU times.
    Sim,
}

/// How gradients are obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BackwardKind {
    /// SPEC §4: states recomputed by scans, O(C·M) extra memory per head.
    Efficient,
    /// Every state S_i kept from the forward: O(N·C·M) memory, for the memory contrast.
    StoredStates,
    /// Gradients from a framework's autograd (candle) or closed-form matrix calculus.
    Autograd,
}

/// Static description of a backend, used by the harness for names, tolerances and grouping.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct BackendInfo {
    /// Stable name, `device/form/precision` with an optional `+variant`:
    /// `cpu-ref/causal_recurrent/f64`, `cuda/causal_cumsum/f16`, `cuda/softmax/f32`.
    pub name: String,
    pub device: DeviceKind,
    pub precision: Precision,
    pub algorithm: Algorithm,
    /// `None` when the backend has no backward.
    pub backward: Option<BackwardKind>,
}

/// What a timed run reports.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct RunStats {
    /// Wall time of the run as the backend measures it: `Instant` on the CPU, CUDA events
    /// around the launches on a GPU (inputs already resident).
    pub elapsed: Duration,
    /// Device backends: peak bytes the backend held on the device during the run beyond the
    /// staged inputs (outputs and workspace), counted exactly from its own allocations.
    /// Host backends leave `None`: the harness measures them with [`crate::CountingAllocator`].
    pub device_bytes: Option<u64>,
}

impl RunStats {
    /// A host backend's run: its time; memory is left to the harness's counting allocator.
    pub fn host(elapsed: Duration) -> Self {
        RunStats {
            elapsed,
            device_bytes: None,
        }
    }
}

/// The one trait every implementation provides. The harness (`linattn check`, `bench`,
/// `attend`) drives backends through it and nothing else.
///
/// Life cycle: [`Backend::stage`] (convert and upload; not timed) → [`Backend::run_forward`]
/// (timed) → optionally [`Backend::run_backward`] (timed; needs d_out staged and a forward
/// before it) → [`Backend::output`] / [`Backend::grads`] (download; not timed).
pub trait Backend: Send {
    fn info(&self) -> &BackendInfo;

    fn name(&self) -> &str {
        &self.info().name
    }

    /// `Ok` when this backend can run `problem` here. `Unsupported::Unavailable` when the
    /// machine lacks what it needs (no CUDA driver, no device), `Unsupported::Problem` when
    /// this problem is outside what it implements (head dim, map, causality). Cheap.
    fn supports(&self, problem: &Problem) -> Result<(), Unsupported>;

    /// Validates and stages inputs in the backend's own storage (precision conversion,
    /// device upload). Any earlier staged data is dropped.
    fn stage(&mut self, problem: &Problem, inputs: &Inputs) -> Result<(), AttnError>;

    /// Stages the seeded inputs `source` describes. The default makes them in f64 and calls
    /// [`Backend::stage`] (the f64 copy lives only while staging); a backend that stores
    /// another precision overrides it to fill its own storage directly, so the harness never
    /// holds an f64 copy at large N. Either way the values are those of
    /// [`SeededInputs::materialize`] rounded to the backend's precision.
    fn stage_seeded(&mut self, problem: &Problem, source: &SeededInputs) -> Result<(), AttnError> {
        self.stage(problem, &source.materialize()?)
    }

    /// Computes O from the staged inputs.
    fn run_forward(&mut self) -> Result<RunStats, AttnError>;

    /// Computes dQ, dK, dV from the staged inputs and d_out (after a forward).
    fn run_backward(&mut self) -> Result<RunStats, AttnError>;

    /// O of the last forward, widened to f64.
    fn output(&mut self) -> Result<Tensor, AttnError>;

    /// Gradients of the last backward, widened to f64.
    fn grads(&mut self) -> Result<Grads, AttnError>;

    /// Drops staged data and results (device memory back to the pool).
    fn release(&mut self) {}

    /// Evicts the inputs from caches before a timed run (e.g. writes a buffer larger than
    /// the GPU's L2), so `bench --flush-l2` measures cold-cache time. Default: nothing.
    fn flush_cache(&mut self) -> Result<(), AttnError> {
        Ok(())
    }

    /// Convenience: stage, forward, read O.
    fn forward(&mut self, problem: &Problem, inputs: &Inputs) -> Result<Tensor, AttnError> {
        self.supports(problem)?;
        self.stage(problem, inputs)?;
        self.run_forward()?;
        self.output()
    }

    /// Convenience: stage, forward, backward; O and the gradients.
    fn forward_backward(
        &mut self,
        problem: &Problem,
        inputs: &Inputs,
    ) -> Result<(Tensor, Grads), AttnError> {
        self.supports(problem)?;
        inputs.require_d_out()?;
        self.stage(problem, inputs)?;
        self.run_forward()?;
        self.run_backward()?;
        Ok((self.output()?, self.grads()?))
    }
}

/// Standard `supports` checks shared by linear-attention backends: the problem is valid
/// and the form computes its causality.
pub fn check_linear_form(info: &BackendInfo, problem: &Problem) -> Result<(), Unsupported> {
    if let Algorithm::Linear(form) = info.algorithm {
        if !form.supports(problem.causality) {
            return Err(Unsupported::Problem(format!(
                "{form} form computes {} attention only",
                if problem.causality.is_causal() {
                    "non-causal"
                } else {
                    "causal"
                }
            )));
        }
    }
    problem
        .validate()
        .map_err(|e| Unsupported::Problem(e.to_string()))
}
