//! The recurrent kernels' module (`causal_recurrent.cu`: entry points, argument structs,
//! [`variant`]) and typed launches: the forward scan and the whole backward.

use std::sync::Arc;

use linattn_core::{AttnError, Precision, Unsupported};

use super::geometry::{
    per_token_launch, scan_launch, states_grid, CoreDims, MapClass, ScanRole, COLUMNS_PER_BLOCK,
};
use crate::executor::{Executor, Launch};
use crate::feature_map::{log_scales, DeviceFeatures};
use crate::form::DeviceInputs;
use crate::params::{launch, ptr, Ptr};
use crate::runtime::{self, as_i32, storage_define, KernelVariant};

use super::kernel_args::{params, ENTRY_POINTS, SOURCE, SOURCE_NAME};

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

/// The module a scan runs from: its precision, map class and the class of its rows.
fn module(
    precision: Precision,
    dims: &CoreDims,
    role: ScanRole,
) -> Result<KernelVariant, AttnError> {
    let class = role.class(dims.c, dims.m)?;
    Ok(variant(precision, dims.map, class)?)
}

/// What the core kernels read as q and k: the storage inputs for a fused map, or the φ
/// stage's fp32 features (then `CR_QK_F32`), with FAVOR+'s ε scales (null otherwise; see
/// `feature_map`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct CoreOperands {
    pub q: Ptr,
    pub k: Ptr,
    pub log_scales: (Ptr, Ptr),
}

impl CoreOperands {
    pub fn of<T>(inputs: &DeviceInputs<T>, features: Option<&DeviceFeatures>) -> CoreOperands {
        let (q, k) = match features {
            Some(f) => (ptr(&f.q), ptr(&f.k)),
            None => (ptr(&inputs.q), ptr(&inputs.k)),
        };
        CoreOperands {
            q,
            k,
            log_scales: log_scales(features),
        }
    }
}

/// Enqueues the forward scan of `ops` and v ([B·H, N, ·] as the callers allocate them) into
/// out and den; `states` = (S_i, z_i) buffers for the stored-states variant.
pub(crate) fn launch_forward(
    exec: &Arc<dyn Executor>,
    precision: Precision,
    dims: &CoreDims,
    ops: CoreOperands,
    (v, out, den_out): (Ptr, Ptr, Ptr),
    states: Option<(Ptr, Ptr)>,
) -> Result<(), AttnError> {
    let variant = module(precision, dims, ScanRole::Forward)?;
    let shape = scan_launch(
        ScanRole::Forward,
        dims.c,
        dims.m,
        dims.batch_heads,
        dims.map.normalised(),
    )?;
    let (n, c_dim, m_dim) = dims.ints()?;
    let (decay, eps) = (dims.decay, dims.eps);
    let (q, k, (q_log_scale, k_log_scale)) = (ops.q, ops.k, ops.log_scales);
    let exec = exec.as_ref();
    match states {
        Some((states, z_states)) => {
            let params = params::ForwardStored {
                q,
                k,
                v,
                out,
                den_out,
                states,
                z_states,
                q_log_scale,
                k_log_scale,
                n,
                c_dim,
                m_dim,
                decay,
                eps,
            };
            launch(exec, &variant, &shape, &params)
        }
        None => {
            let params = params::Forward {
                q,
                k,
                v,
                out,
                den_out,
                q_log_scale,
                k_log_scale,
                n,
                c_dim,
                m_dim,
                decay,
                eps,
            };
            launch(exec, &variant, &shape, &params)
        }
    }
}

/// Buffers the backward reads and writes ([B·H, N, ·]; dq and dk are fp32 ∂φ buffers when the
/// operands are φ features).
pub(crate) struct BackwardBuffers {
    pub ops: CoreOperands,
    pub v: Ptr,
    pub d_out: Ptr,
    pub out: Ptr,
    pub den: Ptr,
    pub gd: Ptr,
    /// G·O partials from the fp32 O (`cr_backward_go`): ⌈M/32⌉ per token where
    /// [`go_slices`] says so, else an empty placeholder.
    pub go: Ptr,
    pub dq: Ptr,
    pub dk: Ptr,
    pub dv: Ptr,
    /// (S_i, z_i) from `cr_forward_stored`: ∂Q read from them instead of a scan.
    pub states: Option<(Ptr, Ptr)>,
}

/// G·O partials per token the backward needs from `cr_backward_go`: ⌈M/32⌉ (one per block of
/// the forward scan) for 16-bit storage on the scan path, none for fp32 storage (O is exact
/// there), the stored-states path (`cr_backward_dq_from_states` takes gd from the fp32 states) or
/// the identity map (no gd).
pub(crate) fn go_slices(precision: Precision, dims: &CoreDims, stored_states: bool) -> usize {
    if dims.map.normalised() && precision != Precision::F32 && !stored_states {
        dims.m.div_ceil(COLUMNS_PER_BLOCK)
    } else {
        0
    }
}

/// Enqueues the whole backward: gd (normalised maps), ∂Q (scan or stored states), ∂K, ∂V.
/// gd = −G·O/den takes O in fp32: for 16-bit storage the forward scan runs again as
/// `cr_backward_go` (G·O partials, nothing else written) before `cr_backward_prep`; the
/// stored-states path computes gd inside `cr_backward_dq_from_states`, before the ∂K scan reads it.
pub(crate) fn launch_backward(
    exec: &Arc<dyn Executor>,
    precision: Precision,
    dims: &CoreDims,
    b: &BackwardBuffers,
) -> Result<(), AttnError> {
    let (n, c_dim, m_dim) = dims.ints()?;
    let c_module = module(precision, dims, ScanRole::Dv)?;
    let m_module = module(precision, dims, ScanRole::Dq)?;
    let normalised = dims.map.normalised();
    let decay = dims.decay;
    let (q, k, v, g) = (b.ops.q, b.ops.k, b.v, b.d_out);
    let (den, gd, go) = (b.den, b.gd, b.go);
    let exec = exec.as_ref();

    if normalised && b.states.is_none() {
        let slices = go_slices(precision, dims, false);
        if slices > 0 {
            // q, k hold tokens·C elements, v and d_out tokens·M, go tokens·slices.
            let params = params::BackwardGo {
                q,
                k,
                v,
                g,
                go,
                q_log_scale: b.ops.log_scales.0,
                k_log_scale: b.ops.log_scales.1,
                n,
                c_dim,
                m_dim,
                decay,
                eps: dims.eps,
            };
            let shape = scan_launch(ScanRole::Forward, dims.c, dims.m, dims.batch_heads, true)?;
            launch(exec, &c_module, &shape, &params)?;
        }
        // g, out hold tokens·M elements, den and gd tokens, go tokens·slices.
        let tokens = dims.tokens()?;
        let params = params::BackwardPrep {
            g,
            out: b.out,
            go,
            slices: as_i32("G·O slices", slices)?,
            den,
            gd,
            tokens: i64::try_from(tokens)
                .map_err(|_| AttnError::SizeOverflow(format!("{tokens} tokens")))?,
            m_dim,
        };
        launch(exec, &c_module, &per_token_launch(tokens)?, &params)?;
    }

    let feature_scan = |role| scan_launch(role, dims.c, dims.m, dims.batch_heads, normalised);
    // The ∂Q and ∂K scans run from the M-rows module with one parameter list; `out` (dq or
    // dk) holds tokens·C elements.
    let feature_grads = params::BackwardDq {
        q,
        k,
        v,
        g,
        den,
        gd,
        out: Ptr::NULL,
        n,
        c_dim,
        m_dim,
        decay,
    };
    match b.states {
        Some((states, z_states)) => {
            // states hold tokens·C·M elements, z_states tokens·C; gd (written) tokens.
            let grid = states_grid(dims.n, dims.batch_heads).dims()?;
            let params = params::BackwardDqFromStates {
                q,
                g,
                den,
                gd,
                states,
                z_states,
                dq: b.dq,
                n,
                c_dim,
                m_dim,
            };
            launch(exec, &c_module, &Launch::new(grid, 256), &params)?;
        }
        None => {
            let dq = params::BackwardDq {
                out: b.dq,
                ..feature_grads
            };
            launch(exec, &m_module, &feature_scan(ScanRole::Dq)?, &dq)?;
        }
    }
    let dk = params::BackwardDk(params::BackwardDq {
        out: b.dk,
        ..feature_grads
    });
    launch(exec, &m_module, &feature_scan(ScanRole::Dk)?, &dk)?;

    let dv = b.dv;
    let params = params::BackwardDv {
        q,
        k,
        g,
        den,
        dv,
        n,
        c_dim,
        m_dim,
        decay,
    };
    launch(exec, &c_module, &feature_scan(ScanRole::Dv)?, &params)
}
