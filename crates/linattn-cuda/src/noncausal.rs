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

use std::sync::Arc;

use linattn_core::{
    check_linear_form, Algorithm, AttnError, Backend, BackendInfo, BackwardKind, Form, Precision,
    Problem, Unsupported,
};

use crate::device_backend::DeviceBackend;
use crate::executor::{Executor, Launch, Platform};
use crate::feature_map::{log_scales, DeviceFeatures, FeatureStage};
use crate::form::{DeviceForm, DeviceGrads, FormInfo, Forward, Run, Timed};
use crate::limits::{self, product, Axis, Grid, GRID_YZ_MAX};
use crate::memory::{DeviceBuffer, MemoryMeter, StorageElem};
use crate::params::{launch, ptr, Ptr};
use crate::runtime::{
    as_i32, blocks_for, check_head_dim, map_define, storage_define, KernelVariant,
};

/// kernels/noncausal.cu.
pub const SOURCE: &str = include_str!("../../../kernels/noncausal.cu");

crate::kernel_params! {
    /// The argument structs of noncausal.cu's entry points.
    pub mod params;
    /// `nc_accumulate`: Σ_j bw_j A_jᵀ⊗B_j and Σ_j vw_j A_j over a split of N.
    pub struct Accumulate => "nc_accumulate" {
        a: Ptr, a_kind: i32, b: Ptr, b_row_scale: Ptr, v_row_scale: Ptr, partial: Ptr,
        n: i32, c: i32, m: i32, rows_per_split: i32, log2_decay: f32,
    }
    /// `nc_reduce`: the splits' partial states summed.
    pub struct Reduce => "nc_reduce" {
        partial: Ptr, state: Ptr, splits: i32, state_len: i64, heads: i64,
    }
    /// `nc_backward_row_terms`: 1/den and gd per row.
    pub struct BackwardRowTerms => "nc_backward_row_terms" {
        q: Ptr, q_kind: i32, state: Ptr, g: Ptr, o: Ptr, o_f32: bool, q_log_scale: Ptr,
        k_log_scale: Ptr, eps: f32, inv_den: Ptr, gd: Ptr, rows: i64, n: i32, c: i32, m: i32,
    }
    /// `nc_rowgemm`: O, ∂Q̃, ∂K̃ or ∂V as row products with a state.
    pub struct Rowgemm => "nc_rowgemm" {
        mode: i32, x: Ptr, x_kind: i32, state: Ptr, c: i32, m: i32, out: Ptr, out_f32: bool,
        pre: Ptr, inv_den: Ptr, gd: Ptr, q_log_scale: Ptr, k_log_scale: Ptr, eps: f32,
        normalised: bool, n: i32, log2_decay: f32,
    }
}

pub use params::SPECS as KERNEL_PARAMS;

use params::ENTRIES as ENTRY_POINTS;

/// Output tile edge and threads per block of `nc_accumulate` / `nc_rowgemm`.
const TILE: usize = 64;
const THREADS: u32 = 256;
/// Operand kinds and product modes of noncausal.cu.
const KIND_STORAGE: i32 = 0;
const KIND_MAPPED: i32 = 1;
const KIND_F32: i32 = 2;
const MODE_OUTPUT: i32 = 0;
const MODE_GRAD_Q: i32 = 1;
const MODE_GRAD_K: i32 = 2;
const MODE_GRAD_V: i32 = 3;
/// Rows of `nc_backward_row_terms` per block: a warp per row.
const ROW_TERMS_ROWS_PER_BLOCK: usize = THREADS as usize / 32;
/// Fewest rows a split of N gets: below this the partials cost more than they parallelise.
const MIN_ROWS_PER_SPLIT: usize = 256;

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
    limits::check_grids(&launch_grids(&Dims::of(problem)))?;
    if FeatureStage::needed(&problem.map) {
        FeatureStage::check(problem)?;
    }
    Ok(())
}

/// The non-causal form (`Form::Noncausal`): S, z reduced over N, then row products.
#[derive(Debug, Clone, Copy, Default)]
pub struct Noncausal;

/// A staging: the compiled variant and the φ stage of a map that is not fused.
pub struct Plan {
    variant: KernelVariant,
    phi_stage: Option<FeatureStage>,
}

/// What the forward keeps for the backward.
pub struct Saved {
    /// S then z per head: `[BH, C·M + C]` fp32.
    state: DeviceBuffer<f32>,
    features: Option<DeviceFeatures>,
}

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
        run.timed(|| forward(run, plan))
    }

    fn backward(
        &self,
        run: &Run<'_, T>,
        plan: &Plan,
        fwd: &Forward<T, Saved>,
        d_out: &DeviceBuffer<T>,
    ) -> Timed<DeviceGrads<T>> {
        run.timed(|| backward(run, plan, fwd, d_out))
    }
}

/// Sizes of a run, as the kernels take them.
struct Dims {
    heads: usize,
    n: usize,
    d: usize,
    m: usize,
    c: usize,
    eps: f32,
    log2_decay: f32,
    normalised: bool,
}

impl Dims {
    fn of(problem: &Problem) -> Dims {
        let shape = &problem.shape;
        Dims {
            heads: shape.bh(),
            n: shape.seq,
            d: shape.dk,
            m: shape.dv,
            c: problem.feature_dim(),
            eps: problem.eps as f32,
            log2_decay: if problem.has_decay() {
                problem.decay.log2() as f32
            } else {
                0.0
            },
            normalised: problem.map.normalised(),
        }
    }

    fn rows(&self) -> usize {
        self.heads * self.n
    }

    fn state_len(&self) -> usize {
        self.c * self.m + self.c
    }

    /// Output tiles of a C×M state, `nc_accumulate`'s grid x.
    fn state_tiles(&self) -> usize {
        self.c.div_ceil(TILE) * self.m.div_ceil(TILE)
    }

    fn heads_axis(&self) -> Axis {
        Axis::each("B·H", self.heads)
    }
}

/// Most splits of N an `nc_accumulate` grid gets (its grid y).
fn max_splits(n: usize) -> usize {
    n.div_ceil(MIN_ROWS_PER_SPLIT)
        .clamp(1, GRID_YZ_MAX as usize)
}

/// `nc_accumulate`: (C-tiles × M-tiles, splits of N, B·H).
fn accumulate_grid(dims: &Dims, splits: usize) -> Grid {
    Grid::of::<params::Accumulate>(
        Axis::each("⌈C/64⌉·⌈M/64⌉ state tiles", dims.state_tiles()),
        Axis::each("splits of N", splits),
        dims.heads_axis(),
    )
}

/// `nc_backward_row_terms`: a warp per row of [B·H·N], 1-D.
fn row_terms_grid(dims: &Dims) -> Grid {
    let rows = product(&[dims.heads, dims.n]);
    let x = Axis::covering("B·H·N", rows, ROW_TERMS_ROWS_PER_BLOCK as u64);
    Grid::of::<params::BackwardRowTerms>(x, Axis::one(), Axis::one())
}

/// `nc_rowgemm` writing `width` (`what`: M or C) columns: (N-tiles, column tiles, B·H).
fn rowgemm_grid(dims: &Dims, what: &str, width: usize) -> Grid {
    Grid::of::<params::Rowgemm>(
        Axis::covering("N", dims.n as u64, TILE as u64),
        Axis::covering(what, width as u64, TILE as u64),
        dims.heads_axis(),
    )
}

/// The grid of every launch a forward and backward of `dims` can make (splits at their
/// most); `nc_reduce` is grid-stride.
fn launch_grids(dims: &Dims) -> Vec<Grid> {
    let mut grids = vec![
        accumulate_grid(dims, max_splits(dims.n)),
        rowgemm_grid(dims, "M", dims.m),
        rowgemm_grid(dims, "C", dims.c),
    ];
    if dims.normalised {
        grids.push(row_terms_grid(dims));
    }
    grids
}

/// φ(Q) or φ(K) as the kernels read it: fp32 features of the φ stage, or raw storage with
/// the fused map.
#[derive(Debug, Clone, Copy)]
struct Operand {
    ptr: Ptr,
    kind: i32,
}

impl Operand {
    fn of<T>(features: Option<&DeviceBuffer<f32>>, raw: &DeviceBuffer<T>) -> Operand {
        match features {
            Some(f) => Operand {
                ptr: ptr(f),
                kind: KIND_F32,
            },
            None => Operand {
                ptr: ptr(raw),
                kind: KIND_MAPPED,
            },
        }
    }

    /// A storage operand read as it is (G, V).
    fn storage<T>(raw: &DeviceBuffer<T>) -> Operand {
        Operand {
            ptr: ptr(raw),
            kind: KIND_STORAGE,
        }
    }
}

fn forward<T: StorageElem>(run: &Run<'_, T>, plan: &Plan) -> Result<Forward<T, Saved>, AttnError> {
    let (exec, meter, inputs) = (run.exec, run.meter, run.inputs);
    let dims = Dims::of(run.problem);
    let features = match &plan.phi_stage {
        Some(stage) => Some(stage.forward(meter, &inputs.q, &inputs.k, dims.heads, dims.n)?),
        None => None,
    };
    let k_op = Operand::of(features.as_ref().map(|f| &f.k), &inputs.k);
    let state = reduce_outer_products(
        exec,
        meter,
        &plan.variant,
        &dims,
        Reduction {
            a: k_op,
            b: ptr(&inputs.v),
            b_row_scale: Ptr::NULL,
            v_row_scale: Ptr::NULL,
            log2_decay: dims.log2_decay,
        },
    )?;
    let out = DeviceBuffer::<T>::zeros(exec, meter, dims.rows() * dims.m)?;
    let q_op = Operand::of(features.as_ref().map(|f| &f.q), &inputs.q);
    let scales = log_scales(features.as_ref());
    output_rowgemm(
        exec,
        &plan.variant,
        &dims,
        q_op,
        &state,
        (ptr(&out), false),
        scales,
    )?;
    Ok(Forward {
        out,
        saved: Saved { state, features },
    })
}

fn backward<T: StorageElem>(
    run: &Run<'_, T>,
    plan: &Plan,
    fwd: &Forward<T, Saved>,
    g: &DeviceBuffer<T>,
) -> Result<DeviceGrads<T>, AttnError> {
    let (exec, meter, inputs) = (run.exec, run.meter, run.inputs);
    let variant = &plan.variant;
    let dims = Dims::of(run.problem);
    let saved = &fwd.saved;
    let features = saved.features.as_ref();
    let q_op = Operand::of(features.map(|f| &f.q), &inputs.q);
    let k_op = Operand::of(features.map(|f| &f.k), &inputs.k);
    let scales = log_scales(features);
    let rows = dims.rows();

    // R, r = Σ_i Q̃_iᵀ gn_i, Σ_i Q̃_i gd_i; gn_i = G_i/den_i, gd_i = −(G_i·O_i)/den_i.
    let (inv_den, gd) = if dims.normalised {
        let inv_den = DeviceBuffer::<f32>::zeros(exec, meter, rows)?;
        let gd = DeviceBuffer::<f32>::zeros(exec, meter, rows)?;
        // gd needs O at full precision: f16/bf16 recompute it in fp32.
        let out_f32 = if T::PRECISION == Precision::F32 {
            None
        } else {
            let o = DeviceBuffer::<f32>::zeros(exec, meter, rows * dims.m)?;
            output_rowgemm(
                exec,
                variant,
                &dims,
                q_op,
                &saved.state,
                (ptr(&o), true),
                scales,
            )?;
            Some(o)
        };
        let (o, o_f32) = match &out_f32 {
            Some(o) => (ptr(o), true),
            None => (ptr(&fwd.out), false),
        };
        // One warp per row of [BH·N].
        launch(
            exec.as_ref(),
            variant,
            &Launch::new(row_terms_grid(&dims).dims()?, THREADS),
            &params::BackwardRowTerms {
                q: q_op.ptr,
                q_kind: q_op.kind,
                state: ptr(&saved.state),
                g: ptr(g),
                o,
                o_f32,
                q_log_scale: scales.0,
                k_log_scale: scales.1,
                eps: dims.eps,
                inv_den: ptr(&inv_den),
                gd: ptr(&gd),
                rows: rows as i64,
                n: as_i32("sequence length N", dims.n)?,
                c: as_i32("feature dim C", dims.c)?,
                m: as_i32("value dim M", dims.m)?,
            },
        )?;
        drop(out_f32);
        (Some(inv_den), Some(gd))
    } else {
        (None, None)
    };
    let r_state = reduce_outer_products(
        exec,
        meter,
        variant,
        &dims,
        Reduction {
            a: q_op,
            b: ptr(g),
            b_row_scale: ptr(inv_den.as_ref()),
            v_row_scale: ptr(gd.as_ref()),
            log2_decay: 0.0,
        },
    )?;

    let mut dq = DeviceBuffer::<T>::zeros(exec, meter, rows * dims.d)?;
    let mut dk = DeviceBuffer::<T>::zeros(exec, meter, rows * dims.d)?;
    let dv = DeviceBuffer::<T>::zeros(exec, meter, rows * dims.m)?;
    // With a φ stage, ∂Q̃ and ∂K̃ come out in fp32 and go through the map's VJP.
    let d_features = match features {
        Some(_) => Some((
            DeviceBuffer::<f32>::zeros(exec, meter, rows * dims.c)?,
            DeviceBuffer::<f32>::zeros(exec, meter, rows * dims.c)?,
        )),
        None => None,
    };
    let (dq_target, dk_target, grads_f32, pre_q, pre_k) = match &d_features {
        Some((gq, gk)) => (ptr(gq), ptr(gk), true, Ptr::NULL, Ptr::NULL),
        None => (ptr(&dq), ptr(&dk), false, ptr(&inputs.q), ptr(&inputs.k)),
    };
    let products = [
        // ∂Q̃ = gn S ᵀ + gd zᵀ (from G and the forward's state).
        (
            MODE_GRAD_Q,
            Operand::storage(g),
            &saved.state,
            dq_target,
            grads_f32,
            pre_q,
        ),
        // ∂K̃ = V Rᵀ + r (from V and the reverse state).
        (
            MODE_GRAD_K,
            Operand::storage(&inputs.v),
            &r_state,
            dk_target,
            grads_f32,
            pre_k,
        ),
        // ∂V = K̃ R.
        (MODE_GRAD_V, k_op, &r_state, ptr(&dv), false, Ptr::NULL),
    ];
    for (mode, x, state, out, out_f32, pre) in products {
        rowgemm(
            exec,
            variant,
            &dims,
            RowGemm {
                mode,
                x,
                state: ptr(state),
                out,
                out_f32,
                pre,
                inv_den: ptr(inv_den.as_ref()),
                gd: ptr(gd.as_ref()),
                log_scales: scales,
            },
        )?;
    }

    if let (Some(stage), Some(feats), Some((gq, gk))) =
        (&plan.phi_stage, features, d_features.as_ref())
    {
        stage.backward(
            &inputs.q, &inputs.k, feats, gq, gk, &mut dq, &mut dk, dims.heads, dims.n,
        )?;
    }
    Ok(DeviceGrads { dq, dk, dv })
}

/// One reduction Σ_j bw_j A_jᵀ⊗B_j and Σ_j vw_j A_j over N (see `nc_accumulate`).
struct Reduction {
    /// `[BH, N, C]`.
    a: Operand,
    /// `[BH, N, M]` storage.
    b: Ptr,
    /// `[BH·N]` weights of B's rows and of the vector term, or null.
    b_row_scale: Ptr,
    v_row_scale: Ptr,
    log2_decay: f32,
}

/// `[BH, C·M + C]` of `reduction`, split over N across blocks when one block per tile would
/// leave the GPU idle.
fn reduce_outer_products(
    exec: &Arc<dyn Executor>,
    meter: &MemoryMeter,
    variant: &KernelVariant,
    dims: &Dims,
    reduction: Reduction,
) -> Result<DeviceBuffer<f32>, AttnError> {
    let state_len = dims.state_len();
    let state = DeviceBuffer::<f32>::zeros(exec, meter, dims.heads * state_len)?;
    let tiles = dims.state_tiles();
    let wanted_blocks = 4 * exec.info().sm_count as usize;
    let splits = wanted_blocks
        .div_ceil((tiles * dims.heads).max(1))
        .clamp(1, max_splits(dims.n));
    // Rows per split rounded to the 16-row step, then the splits that actually have rows.
    let rows_per_split = dims.n.div_ceil(splits).div_ceil(16) * 16;
    let splits = dims.n.div_ceil(rows_per_split).max(1);
    let partial = if splits > 1 {
        Some(DeviceBuffer::<f32>::zeros(
            exec,
            meter,
            dims.heads * splits * state_len,
        )?)
    } else {
        None
    };
    // The target is [BH, splits, C·M+C].
    let target = partial.as_ref().unwrap_or(&state);
    launch(
        exec.as_ref(),
        variant,
        &Launch::new(accumulate_grid(dims, splits).dims()?, THREADS),
        &params::Accumulate {
            a: reduction.a.ptr,
            a_kind: reduction.a.kind,
            b: reduction.b,
            b_row_scale: reduction.b_row_scale,
            v_row_scale: reduction.v_row_scale,
            partial: ptr(target),
            n: as_i32("sequence length N", dims.n)?,
            c: as_i32("feature dim C", dims.c)?,
            m: as_i32("value dim M", dims.m)?,
            rows_per_split: as_i32("rows per split", rows_per_split)?,
            log2_decay: reduction.log2_decay,
        },
    )?;

    if let Some(partial) = &partial {
        // partial [BH, splits, len] summed into state [BH, len].
        let total = dims.heads * state_len;
        let grid = (blocks_for(total, 256)?.min(65_535 * 16), 1, 1);
        launch(
            exec.as_ref(),
            variant,
            &Launch::new(grid, 256),
            &params::Reduce {
                partial: ptr(partial),
                state: ptr(&state),
                splits: splits as i32,
                state_len: state_len as i64,
                heads: dims.heads as i64,
            },
        )?;
    }
    Ok(state)
}

/// One `nc_rowgemm` product (pointers may be null where the mode does not read them).
struct RowGemm {
    mode: i32,
    x: Operand,
    state: Ptr,
    out: Ptr,
    out_f32: bool,
    pre: Ptr,
    inv_den: Ptr,
    gd: Ptr,
    log_scales: (Ptr, Ptr),
}

/// O = φ(Q)S / (φ(Q)z + ε) from `state` into `out` (pointer, whether fp32 rather than
/// storage): the forward's output and the backward's fp32 recomputation of it.
fn output_rowgemm(
    exec: &Arc<dyn Executor>,
    variant: &KernelVariant,
    dims: &Dims,
    q: Operand,
    state: &DeviceBuffer<f32>,
    (out, out_f32): (Ptr, bool),
    log_scales: (Ptr, Ptr),
) -> Result<(), AttnError> {
    rowgemm(
        exec,
        variant,
        dims,
        RowGemm {
            mode: MODE_OUTPUT,
            x: q,
            state: ptr(state),
            out,
            out_f32,
            pre: Ptr::NULL,
            inv_den: Ptr::NULL,
            gd: Ptr::NULL,
            log_scales,
        },
    )
}

fn rowgemm(
    exec: &Arc<dyn Executor>,
    variant: &KernelVariant,
    dims: &Dims,
    call: RowGemm,
) -> Result<(), AttnError> {
    let (what, width) = if call.mode == MODE_GRAD_Q || call.mode == MODE_GRAD_K {
        ("C", dims.c)
    } else {
        ("M", dims.m)
    };
    // x is [BH,N,inner], state [BH,C·M+C], out [BH,N,width] of the type out_f32 says, pre
    // [BH,N,width] storage or null.
    launch(
        exec.as_ref(),
        variant,
        &Launch::new(rowgemm_grid(dims, what, width).dims()?, THREADS),
        &params::Rowgemm {
            mode: call.mode,
            x: call.x.ptr,
            x_kind: call.x.kind,
            state: call.state,
            c: as_i32("feature dim C", dims.c)?,
            m: as_i32("value dim M", dims.m)?,
            out: call.out,
            out_f32: call.out_f32,
            pre: call.pre,
            inv_den: call.inv_den,
            gd: call.gd,
            q_log_scale: call.log_scales.0,
            k_log_scale: call.log_scales.1,
            eps: dims.eps,
            normalised: dims.normalised,
            n: as_i32("sequence length N", dims.n)?,
            log2_decay: dims.log2_decay,
        },
    )
}
