//! Causal linear attention, recurrent form (SPEC §2–§4, §6), on the GPU.
//!
//! Backends:
//! * `{cuda,sim}/causal_recurrent/{f32,f16,bf16}` — forward scan with the C×M state in registers,
//!   memory-efficient backward (SPEC §4: states recomputed by a forward scan for ∂Q, reverse
//!   scans for ∂K and ∂V; O(C·M) state per block, O(N) saved denominators). gd = −G·O/den
//!   takes O in fp32: f16/bf16 run the forward scan once more (`cr_forward_go`, writing
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

mod launch;
mod scan_form;

use std::sync::Arc;
use std::time::Duration;

use half::{bf16, f16};
use linattn_core::{
    check_linear_form, Algorithm, AttnError, Backend, BackendInfo, BackwardKind, FeatureMap, Form,
    Precision, Problem, Unsupported,
};

use crate::device_backend::DeviceBackend;
use crate::executor::{Executor, Launch, Platform};
use crate::feature_map::FeatureStage;
use crate::form::{DeviceForm, DeviceGrads, FormInfo, Forward, Run};
use crate::memory::{DeviceBuffer, MemoryMeter, StorageElem};
use crate::params::{entry_names, KernelParams, ParamSpec};
use crate::runtime::{
    self, as_i32, blocks_for, check_head_dim, head_dim_class, storage_define, KernelVariant,
};

pub use launch::params;
pub(crate) use scan_form::{buffer_or_placeholder, recurrent_backward, run_feature_stage};
pub use scan_form::{ScanPlan, ScanSaved};

pub const SOURCE_NAME: &str = "causal_recurrent.cu";
pub const SOURCE: &str = include_str!("../../../../kernels/causal_recurrent.cu");

/// Every entry point's signature.
pub const KERNEL_PARAMS: [ParamSpec; 8] = [
    params::Forward::SPEC,
    params::ForwardStored::SPEC,
    params::ForwardGo::SPEC,
    params::BackwardDq::SPEC,
    params::BackwardDk::SPEC,
    params::BackwardDv::SPEC,
    params::BackwardPrep::SPEC,
    params::DqFromStates::SPEC,
];

/// Every `extern "C"` kernel of `causal_recurrent.cu`.
pub const ENTRY_POINTS: [&str; 8] = entry_names(&KERNEL_PARAMS);

/// Columns of the sliced dim each scan block owns (= lanes of a warp).
pub const COLUMNS_PER_BLOCK: usize = 32;
/// Threads of a scan block that hold the state (8 warps).
pub const MAIN_THREADS: u32 = 256;
/// The extra warp of a normalised forward that carries z and computes den.
pub const Z_WARP_THREADS: u32 = 32;
/// B·H is grid y of every kernel here.
pub const MAX_BATCH_HEADS: usize = 65_535;
/// Longest sequence: token indices plus a tile must stay within i32.
pub const MAX_SEQ: usize = 1 << 30;
/// Largest feature dim C the scans hold (the largest head-dim class).
pub const MAX_FEATURE_DIM: usize = 256;
/// Blocks of the grid-stride per-token kernels (enough to fill any current GPU).
const MAX_GRID_STRIDE_BLOCKS: usize = 1 << 16;

/// How φ reaches the core kernels: fused in them, or applied before by a φ stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MapClass {
    /// φ(x) = x, no normaliser.
    Identity,
    EluPlusOne,
    Relu,
    /// Q, K arrive as fp32 φ(Q), φ(K); the core runs identity with a normaliser and writes
    /// fp32 ∂φ(Q), ∂φ(K) for the φ stage's backward.
    Staged,
}

impl MapClass {
    pub const ALL: [MapClass; 4] = [
        MapClass::Identity,
        MapClass::EluPlusOne,
        MapClass::Relu,
        MapClass::Staged,
    ];

    pub fn of(map: &FeatureMap) -> MapClass {
        match map {
            FeatureMap::Identity => MapClass::Identity,
            FeatureMap::EluPlusOne => MapClass::EluPlusOne,
            FeatureMap::Relu => MapClass::Relu,
            _ => MapClass::Staged,
        }
    }

    /// `LA_MAP` code: the fused map (identity after a φ stage).
    pub fn la_map(self) -> u32 {
        match self {
            MapClass::Identity | MapClass::Staged => 0,
            MapClass::EluPlusOne => 1,
            MapClass::Relu => 2,
        }
    }

    pub fn normalised(self) -> bool {
        self != MapClass::Identity
    }

    /// Whether Q and K (and ∂Q, ∂K) are fp32 φ buffers rather than storage elements.
    pub fn qk_f32(self) -> bool {
        self == MapClass::Staged
    }
}

/// The module of `causal_recurrent.cu` for one precision, map class and head-dim class of
/// the scanned dim (`CR_A_MAX`).
pub fn variant(
    precision: Precision,
    map: MapClass,
    a_class: usize,
) -> Result<KernelVariant, Unsupported> {
    let (storage_key, storage_value) = storage_define(precision)?;
    if !runtime::HEAD_DIM_CLASSES.contains(&a_class) {
        return Err(Unsupported::Problem(format!(
            "head-dim class {a_class} is not one of {:?}",
            runtime::HEAD_DIM_CLASSES
        )));
    }
    Ok(KernelVariant::new(SOURCE_NAME, SOURCE)
        .define(storage_key, storage_value)
        .define("LA_MAP", map.la_map())
        .define("LA_NORMALISED", u32::from(map.normalised()))
        .define("CR_QK_F32", u32::from(map.qk_f32()))
        .define("CR_A_MAX", a_class)
        .hot()
        .entries(&ENTRY_POINTS))
}

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

/// The four scans of `cr_scan` (see the kernel header's table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScanRole {
    /// Rows C, columns M: O and den.
    Forward,
    /// Rows C, columns M, reverse: ∂V.
    Dv,
    /// Rows M, columns C: ∂Q.
    Dq,
    /// Rows M, columns C, reverse: ∂K.
    Dk,
}

impl ScanRole {
    fn rows_are_features(self) -> bool {
        matches!(self, ScanRole::Forward | ScanRole::Dv)
    }

    /// (rows held per block, columns split across blocks) for feature dim C and value dim M.
    pub fn dims(self, c_dim: usize, m_dim: usize) -> (usize, usize) {
        if self.rows_are_features() {
            (c_dim, m_dim)
        } else {
            (m_dim, c_dim)
        }
    }

    /// `CR_A_MAX` class of the module this scan runs from.
    pub fn class(self, c_dim: usize, m_dim: usize) -> Result<usize, Unsupported> {
        let (rows, _) = self.dims(c_dim, m_dim);
        let what = if self.rows_are_features() {
            "feature dim C"
        } else {
            "value dim M"
        };
        head_dim_class(what, rows)
    }
}

/// Launch shape of a scan: grid (⌈columns/32⌉, B·H), 256 threads, plus the z warp for a
/// normalised forward.
pub fn scan_launch(
    role: ScanRole,
    c_dim: usize,
    m_dim: usize,
    batch_heads: usize,
    normalised: bool,
) -> Result<Launch, AttnError> {
    let (_, columns) = role.dims(c_dim, m_dim);
    let slices = blocks_for(columns, COLUMNS_PER_BLOCK)?;
    let batch_heads = grid_y(batch_heads)?;
    let threads = if role == ScanRole::Forward && normalised {
        MAIN_THREADS + Z_WARP_THREADS
    } else {
        MAIN_THREADS
    };
    Ok(Launch::new((slices, batch_heads, 1), threads))
}

fn grid_y(batch_heads: usize) -> Result<u32, AttnError> {
    if batch_heads == 0 || batch_heads > MAX_BATCH_HEADS {
        return Err(AttnError::InvalidArgument(format!(
            "B·H = {batch_heads}: CUDA kernels take 1..={MAX_BATCH_HEADS} (grid y)"
        )));
    }
    Ok(batch_heads as u32)
}

/// `cr_backward_prep`: a warp per 32 tokens (lane = token), 8 warps per block, grid-stride.
pub fn per_token_launch(tokens: usize) -> Result<Launch, AttnError> {
    let blocks = blocks_for(tokens, 8 * 32)?.min(MAX_GRID_STRIDE_BLOCKS as u32);
    Ok(Launch::new((blocks, 1, 1), 256))
}

/// Checks a causal problem against what the recurrent (and cumsum) kernels take: head dims
/// 16..=256 in multiples of 16, C ≤ 256, B·H ≤ 65535, N ≤ 2³⁰, a precision with kernels,
/// and a map that is fused or has a φ stage.
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
    if shape.bh() > MAX_BATCH_HEADS {
        return Err(Unsupported::Problem(format!(
            "B·H = {}: CUDA kernels take at most {MAX_BATCH_HEADS}",
            shape.bh()
        )));
    }
    if shape.seq > MAX_SEQ {
        return Err(Unsupported::Problem(format!(
            "sequence length N = {} exceeds {MAX_SEQ} (kernels index tokens in int)",
            shape.seq
        )));
    }
    if FeatureStage::needed(&problem.map) {
        FeatureStage::check(problem)?;
    }
    Ok(())
}

/// Sizes and scalars every launch takes, as the kernels want them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CoreDims {
    pub batch_heads: usize,
    pub n: usize,
    pub c: usize,
    pub m: usize,
    pub map: MapClass,
    pub decay: f32,
    pub eps: f32,
}

impl CoreDims {
    pub fn of(problem: &Problem) -> CoreDims {
        CoreDims {
            batch_heads: problem.shape.bh(),
            n: problem.shape.seq,
            c: problem.feature_dim(),
            m: problem.shape.dv,
            map: MapClass::of(&problem.map),
            decay: problem.decay as f32,
            eps: problem.eps as f32,
        }
    }

    pub fn tokens(&self) -> Result<usize, AttnError> {
        self.batch_heads
            .checked_mul(self.n)
            .ok_or_else(|| AttnError::SizeOverflow("B·H·N".into()))
    }

    /// Elements of a [B·H, N, width] tensor.
    pub fn len(&self, width: usize) -> Result<usize, AttnError> {
        self.tokens()?
            .checked_mul(width)
            .ok_or_else(|| AttnError::SizeOverflow(format!("B·H·N·{width}")))
    }

    fn ints(&self) -> Result<(i32, i32, i32), AttnError> {
        Ok((
            as_i32("N", self.n)?,
            as_i32("C", self.c)?,
            as_i32("M", self.m)?,
        ))
    }
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
        check_problem(info, problem)
    }

    fn plan(
        &self,
        exec: &Arc<dyn Executor>,
        problem: &Problem,
        input_meter: &MemoryMeter,
    ) -> Result<ScanPlan, AttnError> {
        ScanPlan::new(exec, problem, T::PRECISION, input_meter)
    }

    fn forward(
        &self,
        run: &Run<'_, T>,
        plan: &ScanPlan,
    ) -> Result<(Forward<T, ScanSaved>, Duration), AttnError> {
        scan_form::recurrent_forward(run, plan, self.stored_states)
    }

    fn backward(
        &self,
        run: &Run<'_, T>,
        plan: &ScanPlan,
        fwd: &Forward<T, ScanSaved>,
        d_out: &DeviceBuffer<T>,
    ) -> Result<(DeviceGrads<T>, Duration), AttnError> {
        scan_form::recurrent_backward(run, plan, fwd, d_out)
    }
}
