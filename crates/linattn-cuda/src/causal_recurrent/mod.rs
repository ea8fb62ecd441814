//! Causal linear attention, recurrent form (SPEC §2–§4, §6), on the GPU.
//!
//! Backends:
//! * `{cuda,sim}/causal_recurrent/{f32,f16,bf16}` — forward scan with the C×M state in registers,
//!   memory-efficient backward (SPEC §4: states recomputed by a forward scan for ∂Q, reverse
//!   scans for ∂K and ∂V; O(C·M) state per block, O(N) saved denominators). gd = −G·O/den
//!   takes O in fp32: f16/bf16 run the forward scan once more (`cr_backward_go`, writing
//!   ⌈M/32⌉ fp32 G·O partials per token instead of O) before `cr_backward_prep`.
//! * `{cuda,sim}/causal_recurrent+storedbwd/{f32,f16}` — the naive backward: the forward writes every
//!   S_i and z_i (N·C·M + N·C fp32 per head, on purpose, for the memory tables) and ∂Q reads
//!   them back instead of recomputing (and takes gd from them in fp32: no pre-pass).
//!
//! Kernels: `kernels/causal_recurrent.cu` (its header gives the math, the grid mapping and
//! the limits). One module is compiled per (precision, map class, class of the scanned head
//! dim): the forward and ∂V scans keep C rows per thread block, the ∂Q and ∂K scans M rows,
//! so a problem with D and M in different classes loads two modules.
//!
//! Maps: identity (no normaliser), elu+1 and relu are fused in the kernels. Others (softmax,
//! 1+cos, FAVOR+) go through the φ stage of [`crate::feature_map`]: it writes fp32 φ(Q), φ(K),
//! the core runs with `CR_QK_F32` (identity map, normaliser on, FAVOR+'s per-token ε scale)
//! and writes fp32 ∂φ(Q), ∂φ(K), which the stage chains through φ.

mod geometry;
mod kernel_args;
mod launch;
mod scan_form;

use std::sync::Arc;

use half::{bf16, f16};
use linattn_core::{
    check_linear_form, Algorithm, AttnError, Backend, BackendInfo, BackwardKind, Form, Precision,
    Problem, Unsupported,
};

use crate::device_backend::DeviceBackend;
use crate::executor::{Executor, Platform};
use crate::feature_map::FeatureStage;
use crate::form::{DeviceForm, DeviceGrads, FormInfo, Forward, Run, Timed};
use crate::limits;
use crate::memory::{DeviceBuffer, MemoryMeter, StorageElem};
use crate::runtime::{self, check_head_dim, storage_define, KernelVariant};

pub use geometry::{
    launch_grids, per_token_launch, scan_grid, scan_launch, states_grid, CoreDims, MapClass,
    ScanRole, COLUMNS_PER_BLOCK, MAIN_THREADS, MAX_FEATURE_DIM, Z_WARP_THREADS,
};
pub use kernel_args::{params, ENTRY_POINTS, KERNEL_PARAMS, SOURCE, SOURCE_NAME};
pub use launch::variant;
pub(crate) use launch::CoreOperands;
pub(crate) use scan_form::{buffer_or_placeholder, recurrent_backward, timed_scan_forward};
pub use scan_form::{ScanPlan, ScanSaved};

/// Every variant (3 precisions × 4 map classes × 4 head-dim classes), for the compile-all
/// test: all kernels of a module are hot (each carries a scan), so none may spill.
pub fn kernel_variants() -> Vec<KernelVariant> {
    let mut all = Vec::new();
    for precision in [Precision::F32, Precision::F16, Precision::BF16] {
        for map in MapClass::ALL {
            for class in runtime::HEAD_DIM_CLASSES {
                if let Ok(v) = variant(precision, map, class) {
                    all.push(v);
                }
            }
        }
    }
    all
}

/// Checks a causal problem against what the recurrent (and cumsum) kernels take: head dims
/// 16..=256 in multiples of 16, C ≤ 256, N ≤ 2³⁰, the grids of the forward and the
/// memory-efficient backward (B·H ≤ 65535 on grid y), a precision with kernels, and a map
/// that is fused or has a φ stage.
pub fn check_problem(info: &BackendInfo, problem: &Problem) -> Result<(), Unsupported> {
    check_linear_form(info, problem)?;
    storage_define(info.precision)?;
    let shape = &problem.shape;
    check_head_dim("head dim D", shape.dk)?;
    check_head_dim("value dim M", shape.dv)?;
    let c_dim = problem.feature_dim();
    if c_dim > MAX_FEATURE_DIM {
        return Err(Unsupported::Problem(format!(
            "feature dim C = {c_dim} of map {}: CUDA kernels take at most {MAX_FEATURE_DIM}",
            problem.map
        )));
    }
    limits::check_seq(shape.seq, "the recurrent kernels")?;
    limits::check_grids(&launch_grids(&CoreDims::of(problem), false))?;
    if FeatureStage::needed(&problem.map) {
        FeatureStage::check(problem)?;
    }
    Ok(())
}

/// `<platform>/causal_recurrent/<precision>` and
/// `<platform>/causal_recurrent+storedbwd/<precision>`.
pub fn backends(platform: Platform) -> Vec<Box<dyn Backend>> {
    let (efficient, stored) = (CausalRecurrent::EFFICIENT, CausalRecurrent::STORED_STATES);
    vec![
        DeviceBackend::<_, f32>::boxed(platform, efficient),
        DeviceBackend::<_, f16>::boxed(platform, efficient),
        DeviceBackend::<_, bf16>::boxed(platform, efficient),
        DeviceBackend::<_, f32>::boxed(platform, stored),
        DeviceBackend::<_, f16>::boxed(platform, stored),
    ]
}

/// The recurrent form: a forward scan with the C×M state in registers, and either the
/// memory-efficient backward or (`stored_states`) the naive one that reads every S_i back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CausalRecurrent {
    pub stored_states: bool,
}

impl CausalRecurrent {
    pub const EFFICIENT: CausalRecurrent = CausalRecurrent {
        stored_states: false,
    };
    pub const STORED_STATES: CausalRecurrent = CausalRecurrent {
        stored_states: true,
    };
}

impl<T: StorageElem> DeviceForm<T> for CausalRecurrent {
    type Plan = ScanPlan;
    type Saved = ScanSaved;

    fn info(&self) -> FormInfo {
        let (name, backward) = if self.stored_states {
            ("causal_recurrent+storedbwd", BackwardKind::StoredStates)
        } else {
            ("causal_recurrent", BackwardKind::Efficient)
        };
        FormInfo {
            name: name.into(),
            algorithm: Algorithm::Linear(Form::Recurrent),
            backward: Some(backward),
        }
    }

    fn check(&self, info: &BackendInfo, problem: &Problem) -> Result<(), Unsupported> {
        check_problem(info, problem)?;
        if self.stored_states {
            states_grid(problem.shape.seq, problem.shape.bh()).check()?;
        }
        Ok(())
    }

    fn plan(
        &self,
        exec: &Arc<dyn Executor>,
        problem: &Problem,
        input_meter: &MemoryMeter,
    ) -> Result<ScanPlan, AttnError> {
        ScanPlan::new(exec, problem, T::PRECISION, input_meter)
    }

    fn forward(&self, run: &Run<'_, T>, plan: &ScanPlan) -> Timed<Forward<T, ScanSaved>> {
        scan_form::recurrent_forward(run, plan, self.stored_states)
    }

    fn backward(
        &self,
        run: &Run<'_, T>,
        plan: &ScanPlan,
        fwd: &Forward<T, ScanSaved>,
        d_out: &DeviceBuffer<T>,
    ) -> Timed<DeviceGrads<T>> {
        scan_form::recurrent_backward(run, plan, fwd, d_out)
    }
}
