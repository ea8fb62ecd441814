//! What the recurrent and cumsum forms share: the staging (core dims, the φ stage of a map
//! that is not fused), what a forward keeps, and the memory-efficient backward of the
//! recurrent kernels, which both forms run.

use std::sync::Arc;

use linattn_core::{AttnError, Precision, Problem};

use super::geometry::CoreDims;
use super::launch::{go_slices, launch_backward, launch_forward, BackwardBuffers, CoreOperands};
use crate::executor::Executor;
use crate::feature_map::{DeviceFeatures, FeatureStage};
use crate::form::{DeviceGrads, Forward, Run, Timed};
use crate::memory::{DeviceBuffer, MemoryMeter, StorageElem};
use crate::params::ptr;

/// A staging of a scan form: the core's sizes and, for a map that is not fused, the φ stage
/// (FAVOR+'s W uploaded with the inputs).
pub struct ScanPlan {
    pub(crate) dims: CoreDims,
    pub(crate) features: Option<FeatureStage>,
}

impl ScanPlan {
    pub(crate) fn new(
        exec: &Arc<dyn Executor>,
        problem: &Problem,
        precision: Precision,
        input_meter: &MemoryMeter,
    ) -> Result<ScanPlan, AttnError> {
        let features = if FeatureStage::needed(&problem.map) {
            Some(FeatureStage::new(exec, problem, precision, input_meter)?)
        } else {
            None
        };
        Ok(ScanPlan {
            dims: CoreDims::of(problem),
            features,
        })
    }
}

/// What a scan form's forward keeps for the backward, beside O.
pub struct ScanSaved {
    /// den_i (normalised maps) or an empty placeholder.
    pub(crate) den: DeviceBuffer<f32>,
    /// (S_i, z_i) of the stored-states variant.
    pub(crate) states: StoredStates,
    /// φ(Q), φ(K) (fp32) of a map that is not fused, kept for the backward.
    pub(crate) features: Option<DeviceFeatures>,
}

/// Every S_i and z_i (fp32) of the stored-states variant, or none.
pub(crate) type StoredStates = Option<(DeviceBuffer<f32>, DeviceBuffer<f32>)>;

/// A buffer of `len` elements the kernels write in full, or an empty placeholder when
/// `needed` is false (kernels take the pointer but never touch it).
pub(crate) fn buffer_or_placeholder<E: StorageElem>(
    exec: &Arc<dyn Executor>,
    meter: &MemoryMeter,
    needed: bool,
    len: usize,
) -> Result<DeviceBuffer<E>, AttnError> {
    DeviceBuffer::uninit(exec, meter, if needed { len } else { 0 })
}

/// The φ stage's forward when the map needs one (inside the caller's timed region).
pub(crate) fn run_feature_stage<T: StorageElem>(
    run: &Run<'_, T>,
    plan: &ScanPlan,
) -> Result<Option<DeviceFeatures>, AttnError> {
    match &plan.features {
        Some(stage) => {
            let dims = plan.dims;
            let (q, k) = (&run.inputs.q, &run.inputs.k);
            let features = stage.forward(run.meter, q, k, dims.batch_heads, dims.n)?;
            if features.c != dims.c {
                return Err(AttnError::State(format!(
                    "φ stage wrote C = {} features, the core expects {}",
                    features.c, dims.c
                )));
            }
            Ok(Some(features))
        }
        None => Ok(None),
    }
}

/// The recurrent forward (φ stage first for maps that are not fused), its outputs allocated
/// against the run's meter; `store_states` selects `cr_forward_stored`.
pub(crate) fn recurrent_forward<T: StorageElem>(
    run: &Run<'_, T>,
    plan: &ScanPlan,
    store_states: bool,
) -> Timed<Forward<T, ScanSaved>> {
    let (exec, meter, inputs) = (run.exec, run.meter, run.inputs);
    let dims = plan.dims;
    let normalised = dims.map.normalised();
    let out = DeviceBuffer::<T>::uninit(exec, meter, dims.len(dims.m)?)?;
    let den = buffer_or_placeholder::<f32>(exec, meter, normalised, dims.tokens()?)?;
    let states = if store_states {
        let entries = dims
            .c
            .checked_mul(dims.m)
            .ok_or_else(|| AttnError::SizeOverflow("C·M".into()))?;
        let z_len = if normalised { dims.len(dims.c)? } else { 0 };
        Some((
            DeviceBuffer::<f32>::uninit(exec, meter, dims.len(entries)?)?,
            DeviceBuffer::<f32>::uninit(exec, meter, z_len)?,
        ))
    } else {
        None
    };
    let precision = T::PRECISION;
    let outputs = (ptr(&inputs.v), ptr(&out), ptr(&den));
    let state_ptrs = states.as_ref().map(|(s, z)| (ptr(s), ptr(z)));
    timed_scan_forward(run, plan, (out, den, states), |ops| {
        launch_forward(exec, precision, &dims, ops, outputs, state_ptrs)
    })
}

/// What both scan forms' forwards end with: the φ stage (when the map needs one) and
/// `launch` on the core operands it leaves, timed together; O, den and the states kept for
/// the backward.
pub(crate) fn timed_scan_forward<T: StorageElem>(
    run: &Run<'_, T>,
    plan: &ScanPlan,
    (out, den, states): (DeviceBuffer<T>, DeviceBuffer<f32>, StoredStates),
    mut launch: impl FnMut(CoreOperands) -> Result<(), AttnError>,
) -> Timed<Forward<T, ScanSaved>> {
    let mut features = None;
    let elapsed = run.time(|| {
        features = run_feature_stage(run, plan)?;
        launch(CoreOperands::of(run.inputs, features.as_ref()))
    })?;
    let saved = ScanSaved {
        den,
        states,
        features,
    };
    Ok((Forward { out, saved }, elapsed))
}

/// The recurrent kernels' backward of a forward `fwd` (recurrent or cumsum), then the φ
/// stage's backward when there is one.
pub(crate) fn recurrent_backward<T: StorageElem>(
    run: &Run<'_, T>,
    plan: &ScanPlan,
    fwd: &Forward<T, ScanSaved>,
    d_out: &DeviceBuffer<T>,
) -> Timed<DeviceGrads<T>> {
    let (exec, meter, inputs) = (run.exec, run.meter, run.inputs);
    let dims = plan.dims;
    let saved = &fwd.saved;
    let gd = buffer_or_placeholder::<f32>(exec, meter, dims.map.normalised(), dims.tokens()?)?;
    let precision = T::PRECISION;
    let slices = go_slices(precision, &dims, saved.states.is_some());
    let go = buffer_or_placeholder::<f32>(exec, meter, slices > 0, dims.len(slices)?)?;
    let mut dq = DeviceBuffer::<T>::uninit(exec, meter, inputs.q.len())?;
    let mut dk = DeviceBuffer::<T>::uninit(exec, meter, inputs.k.len())?;
    let dv = DeviceBuffer::<T>::uninit(exec, meter, inputs.v.len())?;
    // With a φ stage the core writes fp32 ∂φ(Q), ∂φ(K), which the stage chains through φ.
    let d_phi = match (&plan.features, &saved.features) {
        (Some(_), Some(_)) => Some((
            DeviceBuffer::<f32>::uninit(exec, meter, dims.len(dims.c)?)?,
            DeviceBuffer::<f32>::uninit(exec, meter, dims.len(dims.c)?)?,
        )),
        (None, None) => None,
        _ => {
            return Err(AttnError::State(
                "forward and staged inputs disagree about the φ stage".into(),
            ))
        }
    };
    let (dq_core, dk_core) = match &d_phi {
        Some((d_phi_q, d_phi_k)) => (ptr(d_phi_q), ptr(d_phi_k)),
        None => (ptr(&dq), ptr(&dk)),
    };
    let buffers = BackwardBuffers {
        ops: CoreOperands::of(inputs, saved.features.as_ref()),
        v: ptr(&inputs.v),
        d_out: ptr(d_out),
        out: ptr(&fwd.out),
        den: ptr(&saved.den),
        gd: ptr(&gd),
        go: ptr(&go),
        dq: dq_core,
        dk: dk_core,
        dv: ptr(&dv),
        states: saved.states.as_ref().map(|(s, z)| (ptr(s), ptr(z))),
    };
    let elapsed = run.time(|| {
        launch_backward(exec, precision, &dims, &buffers)?;
        match (&plan.features, &saved.features, &d_phi) {
            (Some(stage), Some(features), Some((d_phi_q, d_phi_k))) => stage.backward(
                &inputs.q,
                &inputs.k,
                features,
                d_phi_q,
                d_phi_k,
                &mut dq,
                &mut dk,
                dims.batch_heads,
                dims.n,
            ),
            _ => Ok(()),
        }
    })?;
    Ok((DeviceGrads { dq, dk, dv }, elapsed))
}
