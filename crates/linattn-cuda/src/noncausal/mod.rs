//! `cuda/noncausal/{f32,f16,bf16}`: non-causal linear attention on the GPU
//! (kernels/noncausal.cu), `Form::Noncausal` with the memory-efficient backward of SPEC §4.
//!
//! Forward: S, z reduced over N (split over blocks for long N, fp32 partials, then a
//! deterministic reduce), then `O = φ(Q)S / (φ(Q)z + ε)` (no division for identity and
//! efficient attention); decay weights key j by `λ^{N−1−j}`. Elementwise maps are fused;
//! other maps run the φ stage of [`crate::feature_map`] first. Backward: R, r by the same
//! reduction, then ∂Q, ∂K, ∂V as row-parallel products with S, z, R, r.
//!
//! Device memory (`RunStats::device_bytes`, exact from the allocations): forward — O, the
//! C·M+C state per head, split partials, fp32 features for non-elementwise maps; backward —
//! the forward's held O/state, R/r, partials, 2 fp32 per row (1/den, gd), the gradients,
//! fp32 ∂φ for non-elementwise maps, and for f16/bf16 an fp32 recomputation of O (the
//! gd term needs O at full precision).

mod geometry;
mod kernel_args;
mod launch;

use std::sync::Arc;

use linattn_core::{
    check_linear_form, Algorithm, AttnError, Backend, BackendInfo, BackwardKind, Form, Precision,
    Problem, Unsupported,
};

use kernel_args::ENTRY_POINTS;
pub use kernel_args::{params, KERNEL_PARAMS, SOURCE};
pub use launch::{Plan, Saved};

use crate::device_backend::DeviceBackend;
use crate::executor::{Executor, Platform};
use crate::feature_map::FeatureStage;
use crate::form::{DeviceForm, DeviceGrads, FormInfo, Forward, Run, Timed};
use crate::limits;
use crate::memory::{DeviceBuffer, MemoryMeter, StorageElem};
use crate::runtime::{check_head_dim, map_define, storage_define, KernelVariant};

/// The three backends on `platform`.
pub fn backends(platform: Platform) -> Vec<Box<dyn Backend>> {
    vec![
        DeviceBackend::<_, f32>::boxed(platform, Noncausal),
        DeviceBackend::<_, half::f16>::boxed(platform, Noncausal),
        DeviceBackend::<_, half::bf16>::boxed(platform, Noncausal),
    ]
}

/// The variant for a storage precision and fused map code (0 identity, 1 elu+1, 2 relu).
pub fn variant(precision: Precision, map_code: u32) -> Result<KernelVariant, Unsupported> {
    let (name, value) = storage_define(precision)?;
    Ok(KernelVariant::new("noncausal.cu", SOURCE)
        .define(name, value)
        .define("LA_MAP", map_code)
        .hot()
        .entries(&ENTRY_POINTS))
}

/// Every storage precision × fused map.
pub fn kernel_variants() -> Vec<KernelVariant> {
    [Precision::F32, Precision::F16, Precision::BF16]
        .into_iter()
        .flat_map(|p| (0..3).filter_map(move |m| variant(p, m).ok()))
        .collect()
}

/// What the non-causal kernels accept, independent of the machine.
pub fn check_problem(info: &BackendInfo, problem: &Problem) -> Result<(), Unsupported> {
    check_linear_form(info, problem)?;
    check_head_dim("head dim D", problem.shape.dk)?;
    check_head_dim("value dim M", problem.shape.dv)?;
    limits::check_seq(problem.shape.seq, "the non-causal kernels")?;
    limits::check_grids(&geometry::launch_grids(&geometry::Dims::of(problem)))?;
    if FeatureStage::needed(&problem.map) {
        FeatureStage::check(problem)?;
    }
    Ok(())
}

/// The non-causal form (`Form::Noncausal`): S, z reduced over N, then row products.
#[derive(Debug, Clone, Copy, Default)]
pub struct Noncausal;

impl<T: StorageElem> DeviceForm<T> for Noncausal {
    type Plan = Plan;
    type Saved = Saved;

    fn info(&self) -> FormInfo {
        FormInfo {
            name: "noncausal".into(),
            algorithm: Algorithm::Linear(Form::Noncausal),
            backward: Some(BackwardKind::Efficient),
        }
    }

    fn check(&self, info: &BackendInfo, problem: &Problem) -> Result<(), Unsupported> {
        check_problem(info, problem)
    }

    fn plan(
        &self,
        exec: &Arc<dyn Executor>,
        problem: &Problem,
        input_meter: &MemoryMeter,
    ) -> Result<Plan, AttnError> {
        let map_code = match map_define(&problem.map) {
            Some((_, code)) => code.parse().unwrap_or(0),
            None => 0,
        };
        let phi_stage = if FeatureStage::needed(&problem.map) {
            Some(FeatureStage::new(exec, problem, T::PRECISION, input_meter)?)
        } else {
            None
        };
        Ok(Plan {
            variant: variant(T::PRECISION, map_code)?,
            phi_stage,
        })
    }

    fn forward(&self, run: &Run<'_, T>, plan: &Plan) -> Timed<Forward<T, Saved>> {
        // Allocations are inside the timed region, as they always were for this form.
        run.timed(|| launch::forward(run, plan))
    }

    fn backward(
        &self,
        run: &Run<'_, T>,
        plan: &Plan,
        fwd: &Forward<T, Saved>,
        d_out: &DeviceBuffer<T>,
    ) -> Timed<DeviceGrads<T>> {
        run.timed(|| launch::backward(run, plan, fwd, d_out))
    }
}
