//! Host-side plumbing every CUDA backend repeats: uploading q, k, v (and d_out) converted to
//! the storage element, and widening O and the gradients back to f64 tensors.
//!
//! Only data movement lives here; each backend keeps its own checks, state and messages.

use std::sync::Arc;

use linattn_core::{AttnError, Grads, Inputs, Shape, Tensor};

use crate::executor::Executor;
use crate::memory::{DeviceBuffer, MemoryMeter, StorageElem};

/// q, k, v and the optional d_out of one staging, on the device as `T`.
pub(crate) struct DeviceInputs<T> {
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
}

/// O widened to f64 as a [B, H, N, M] tensor.
pub(crate) fn download_output<T: StorageElem>(
    shape: &Shape,
    out: &DeviceBuffer<T>,
) -> Result<Tensor, AttnError> {
    Tensor::from_vec(shape.v_dims(), out.download_f64()?)
}

/// ∂Q, ∂K ([B, H, N, D]) and ∂V ([B, H, N, M]) widened to f64.
pub(crate) fn download_grads<T: StorageElem>(
    shape: &Shape,
    dq: &DeviceBuffer<T>,
    dk: &DeviceBuffer<T>,
    dv: &DeviceBuffer<T>,
) -> Result<Grads, AttnError> {
    Ok(Grads {
        dq: Tensor::from_vec(shape.qk_dims(), dq.download_f64()?)?,
        dk: Tensor::from_vec(shape.qk_dims(), dk.download_f64()?)?,
        dv: Tensor::from_vec(shape.v_dims(), dv.download_f64()?)?,
    })
}
