//! The non-causal forward and backward as launches: the S, z (or R, r) reduction over N,
//! the backward's row terms, and the row products with a state.

use std::sync::Arc;

use linattn_core::{AttnError, Precision};

use super::geometry::{accumulate_grid, max_splits, row_terms_grid, rowgemm_grid, Dims};
use super::kernel_args::{params, KIND_F32, KIND_MAPPED, KIND_STORAGE, THREADS};
use super::kernel_args::{MODE_GRAD_K, MODE_GRAD_Q, MODE_GRAD_V, MODE_OUTPUT};
use crate::executor::{Executor, Launch};
use crate::feature_map::{log_scales, DeviceFeatures, FeatureStage};
use crate::form::{DeviceGrads, Forward, Run};
use crate::memory::{DeviceBuffer, MemoryMeter, StorageElem};
use crate::params::{launch, ptr, Ptr};
use crate::runtime::{as_i32, blocks_for, KernelVariant};

/// A staging: the compiled variant and the φ stage of a map that is not fused.
pub struct Plan {
    pub(super) variant: KernelVariant,
    pub(super) phi_stage: Option<FeatureStage>,
}

/// What the forward keeps for the backward.
pub struct Saved {
    /// S then z per head: `[BH, C·M + C]` fp32.
    pub(super) state: DeviceBuffer<f32>,
    pub(super) features: Option<DeviceFeatures>,
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

pub(super) fn forward<T: StorageElem>(
    run: &Run<'_, T>,
    plan: &Plan,
) -> Result<Forward<T, Saved>, AttnError> {
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

pub(super) fn backward<T: StorageElem>(
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
