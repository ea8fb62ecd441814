//! The form seam: what one form of attention (non-causal, recurrent, cumsum, chunked,
//! softmax) provides as CUDA kernels, written once against the [`Executor`].
//!
//! A form says which problems its kernels take, prepares a staging (kernels resolved,
//! launch plan, φ stage), and enqueues its forward and backward on buffers the
//! [`DeviceBackend`](crate::DeviceBackend) hands it. The life cycle around that — inputs
//! uploaded and validated, results of an earlier run dropped before a new one, memory
//! metered, O and the gradients downloaded, the device kind and every state error — belongs
//! to the generic backend, so it exists once.

use std::sync::Arc;
use std::time::Duration;

use linattn_core::{
    Algorithm, AttnError, BackendInfo, BackwardKind, Inputs, Problem, SeededInputs, Tensor,
    TensorRole, Unsupported,
};

use crate::executor::Executor;
use crate::memory::{DeviceBuffer, MemoryMeter, StorageElem};

/// How a form names itself: the middle part of `<platform>/<name>/<precision>`, what it
/// computes and which backward it has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FormInfo {
    /// `causal_recurrent`, `causal_recurrent+storedbwd`, `softmax+gemmkernel`, ...
    pub name: String,
    pub algorithm: Algorithm,
    pub backward: Option<BackwardKind>,
}

/// q, k, v and the optional d_out of one staging, on the device as `T`.
pub struct DeviceInputs<T> {
    pub q: DeviceBuffer<T>,
    pub k: DeviceBuffer<T>,
    pub v: DeviceBuffer<T>,
    pub d_out: Option<DeviceBuffer<T>>,
}

impl<T: StorageElem> DeviceInputs<T> {
    /// Uploads `inputs` (converted to `T`) against `meter`. The caller validates them first.
    pub fn upload(
        exec: &Arc<dyn Executor>,
        meter: &MemoryMeter,
        inputs: &Inputs,
    ) -> Result<Self, AttnError> {
        let upload = |t: &Tensor| DeviceBuffer::<T>::upload_f64(exec, meter, t.data());
        Ok(DeviceInputs {
            q: upload(&inputs.q)?,
            k: upload(&inputs.k)?,
            v: upload(&inputs.v)?,
            d_out: inputs.d_out.as_ref().map(upload).transpose()?,
        })
    }

    /// Draws the seeded inputs straight in `T` (heads in parallel) and uploads them one
    /// operand at a time: no f64 copy of the whole input set, no second conversion pass.
    /// At B = 4, H = 16, N = 2^16, D = M = 64 that f64 copy was 8.6 GB per cell.
    pub fn upload_seeded(
        exec: &Arc<dyn Executor>,
        meter: &MemoryMeter,
        source: &SeededInputs,
    ) -> Result<Self, AttnError> {
        let upload = |role: TensorRole| {
            DeviceBuffer::<T>::upload(exec, meter, &source.make(role, T::from_f64)?)
        };
        Ok(DeviceInputs {
            q: upload(TensorRole::Q)?,
            k: upload(TensorRole::K)?,
            v: upload(TensorRole::V)?,
            d_out: source
                .with_grad()
                .then(|| upload(TensorRole::DOut))
                .transpose()?,
        })
    }
}

/// What a run of a form works with: the device, the staged problem and inputs, and the
/// meter its outputs and workspace are allocated against (`RunStats::device_bytes` is that
/// meter's peak during the run).
pub struct Run<'a, T> {
    pub exec: &'a Arc<dyn Executor>,
    pub meter: &'a MemoryMeter,
    pub problem: &'a Problem,
    pub inputs: &'a DeviceInputs<T>,
}

impl<T> Run<'_, T> {
    /// Device time of the launches `work` enqueues (see [`Executor::time`]).
    pub fn time(
        &self,
        mut work: impl FnMut() -> Result<(), AttnError>,
    ) -> Result<Duration, AttnError> {
        self.exec.time(&mut work)
    }

    /// Times `build`, which enqueues launches and returns what it allocated (its
    /// allocations fall inside the timed region).
    pub fn timed<R>(&self, build: impl FnOnce() -> Result<R, AttnError>) -> Timed<R> {
        let mut build = Some(build);
        let mut built = None;
        let elapsed = self.time(|| {
            if let Some(build) = build.take() {
                built = Some(build()?);
            }
            Ok(())
        })?;
        let built = built.ok_or_else(|| AttnError::State("a timed run did not run".into()))?;
        Ok((built, elapsed))
    }
}

/// What a run built, and the device time of the launches it chose to time.
pub type Timed<R> = Result<(R, Duration), AttnError>;

/// What a forward leaves: O, and whatever the form keeps for its backward.
pub struct Forward<T, S> {
    pub out: DeviceBuffer<T>,
    pub saved: S,
}

/// ∂Q, ∂K, ∂V of a backward, in storage precision.
pub struct DeviceGrads<T> {
    pub dq: DeviceBuffer<T>,
    pub dk: DeviceBuffer<T>,
    pub dv: DeviceBuffer<T>,
}

/// One form of attention as CUDA kernels, for storage element `T`.
pub trait DeviceForm<T: StorageElem>: Send + 'static {
    /// What staging prepares (kernels loaded, launch plan, φ stage): built once per staging,
    /// so timed runs never include compilation.
    type Plan: Send;
    /// What a forward keeps for the backward, beside O.
    type Saved: Send;

    fn info(&self) -> FormInfo;

    /// Whether the kernels take `problem` (head dims, maps, causality, grid limits),
    /// independent of the machine. `info` is the backend's.
    fn check(&self, info: &BackendInfo, problem: &Problem) -> Result<(), Unsupported>;

    /// Whether the kernels can run on this device (architecture, libraries), once the
    /// platform itself is known to be available.
    fn device_ready(&self, _exec: &dyn Executor) -> Result<(), Unsupported> {
        Ok(())
    }

    /// Whether the kernels can run `problem` on this device (e.g. a launch's shared memory
    /// beyond the device's opt-in maximum); the default: [`DeviceForm::device_ready`].
    fn device_ready_for(&self, exec: &dyn Executor, _problem: &Problem) -> Result<(), Unsupported> {
        self.device_ready(exec)
    }

    /// Validates the inputs of a staging (the default: shapes and finiteness).
    fn validate(&self, problem: &Problem, inputs: &Inputs) -> Result<(), AttnError> {
        inputs.validate_for(problem)
    }

    /// Prepares a staging of `problem`; anything it uploads (FAVOR+'s W) goes against
    /// `input_meter`, which is not part of a run's device bytes.
    fn plan(
        &self,
        exec: &Arc<dyn Executor>,
        problem: &Problem,
        input_meter: &MemoryMeter,
    ) -> Result<Self::Plan, AttnError>;

    /// Allocates O (and what the backward keeps) against `run.meter` and enqueues the
    /// forward; the time is of the launches the form chose to time.
    fn forward(&self, run: &Run<'_, T>, plan: &Self::Plan) -> Timed<Forward<T, Self::Saved>>;

    /// The backward of `forward` with `d_out` = ∂L/∂O.
    fn backward(
        &self,
        run: &Run<'_, T>,
        plan: &Self::Plan,
        forward: &Forward<T, Self::Saved>,
        d_out: &DeviceBuffer<T>,
    ) -> Timed<DeviceGrads<T>>;
}
