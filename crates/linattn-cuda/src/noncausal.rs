//! `cuda/noncausal/{f32,f16,bf16}`: non-causal linear attention on the GPU
//! (kernels/noncausal.cu), `Form::Parallel` with the memory-efficient backward of SPEC §4.
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

use std::marker::PhantomData;

use std::sync::Arc;

use linattn_core::{
    check_linear_form, Algorithm, AttnError, Backend, BackendInfo, BackwardKind, Form, Grads,
    Inputs, Precision, Problem, RunStats, Tensor, Unsupported,
};

use crate::args;
use crate::executor::{Executor, KernelArg, Launch, Platform};
use crate::feature_map::{log_scales, DeviceFeatures, FeatureStage};
use crate::memory::{address_of, DeviceBuffer, MemoryMeter, StorageElem};
use crate::runtime::{
    as_i32, blocks_for, check_head_dim, map_define, storage_define, KernelVariant,
};
use crate::staged::{self, DeviceInputs};

/// kernels/noncausal.cu.
pub const SOURCE: &str = include_str!("../../../kernels/noncausal.cu");

const ENTRY_POINTS: [&str; 4] = [
    "nc_accumulate",
    "nc_reduce",
    "nc_backward_row_terms",
    "nc_rowgemm",
];

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
/// B·H runs on grid.z, which CUDA limits to 65535.
const MAX_GRID_HEADS: u32 = 65_535;
/// Fewest rows a split of N gets: below this the partials cost more than they parallelise.
const MIN_ROWS_PER_SPLIT: usize = 256;

/// The three backends on `platform`.
pub fn backends(platform: Platform) -> Vec<Box<dyn Backend>> {
    vec![
        Box::new(NoncausalBackend::<f32>::new(platform)),
        Box::new(NoncausalBackend::<half::f16>::new(platform)),
        Box::new(NoncausalBackend::<half::bf16>::new(platform)),
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
    if problem.shape.bh() > MAX_GRID_HEADS as usize {
        return Err(Unsupported::Problem(format!(
            "B·H = {} exceeds {MAX_GRID_HEADS}: the non-causal kernels put heads on grid.z",
            problem.shape.bh()
        )));
    }
    check_head_dim("head dim D", problem.shape.dk)?;
    check_head_dim("value dim M", problem.shape.dv)?;
    if FeatureStage::needed(&problem.map) {
        FeatureStage::check(problem)?;
    }
    Ok(())
}

/// One precision of the non-causal form.
pub struct NoncausalBackend<T: StorageElem> {
    info: BackendInfo,
    platform: Platform,
    staged: Option<Staged<T>>,
    /// Staged inputs (and FAVOR+'s W): not part of `device_bytes`.
    input_meter: MemoryMeter,
    /// Outputs and workspace: `device_bytes` is its peak during a run.
    work_meter: MemoryMeter,
    _storage: PhantomData<T>,
}

struct Staged<T> {
    exec: Arc<dyn Executor>,
    problem: Problem,
    variant: KernelVariant,
    q: DeviceBuffer<T>,
    k: DeviceBuffer<T>,
    v: DeviceBuffer<T>,
    d_out: Option<DeviceBuffer<T>>,
    phi_stage: Option<FeatureStage>,
    forward: Option<ForwardResult<T>>,
    grads: Option<[DeviceBuffer<T>; 3]>,
}

struct ForwardResult<T> {
    out: DeviceBuffer<T>,
    /// S then z per head: `[BH, C·M + C]` fp32.
    state: DeviceBuffer<f32>,
    features: Option<DeviceFeatures>,
}

impl<T: StorageElem> NoncausalBackend<T> {
    pub fn new(platform: Platform) -> Self {
        NoncausalBackend {
            info: BackendInfo {
                name: format!("{platform}/noncausal/{}", T::PRECISION.label()),
                device: platform.device_kind(),
                precision: T::PRECISION,
                algorithm: Algorithm::Linear(Form::Parallel),
                backward: Some(BackwardKind::Efficient),
            },
            platform,
            staged: None,
            input_meter: MemoryMeter::new(),
            work_meter: MemoryMeter::new(),
            _storage: PhantomData,
        }
    }

    fn staged_mut(&mut self) -> Result<&mut Staged<T>, AttnError> {
        self.staged
            .as_mut()
            .ok_or_else(|| AttnError::State(format!("{}: nothing staged", self.info.name)))
    }
}

impl<T: StorageElem> Backend for NoncausalBackend<T> {
    fn info(&self) -> &BackendInfo {
        &self.info
    }

    fn supports(&self, problem: &Problem) -> Result<(), Unsupported> {
        check_problem(&self.info, problem)?;
        self.platform.available()
    }

    fn stage(&mut self, problem: &Problem, inputs: &Inputs) -> Result<(), AttnError> {
        self.supports(problem)?;
        inputs.validate_for(problem)?;
        self.staged = None;
        let exec = self.platform.executor()?;
        let meter = &self.input_meter;
        let map_code = match map_define(&problem.map) {
            Some((_, code)) => code.parse().unwrap_or(0),
            None => 0,
        };
        let phi_stage = if FeatureStage::needed(&problem.map) {
            Some(FeatureStage::new(&exec, problem, T::PRECISION, meter)?)
        } else {
            None
        };
        let DeviceInputs { q, k, v, d_out } = DeviceInputs::upload(&exec, meter, inputs)?;
        exec.synchronize()?;
        self.staged = Some(Staged {
            exec,
            problem: *problem,
            variant: variant(T::PRECISION, map_code)?,
            q,
            k,
            v,
            d_out,
            phi_stage,
            forward: None,
            grads: None,
        });
        Ok(())
    }

    fn run_forward(&mut self) -> Result<RunStats, AttnError> {
        let meter = self.work_meter.clone();
        let staged = self.staged_mut()?;
        staged.grads = None;
        staged.forward = None;
        let exec = staged.exec.clone();
        let (result, stats) = timed_run(&exec, &meter, || forward(&meter, staged))?;
        staged.forward = result;
        Ok(stats)
    }

    fn run_backward(&mut self) -> Result<RunStats, AttnError> {
        let meter = self.work_meter.clone();
        let staged = self.staged_mut()?;
        if staged.forward.is_none() {
            return Err(AttnError::State("run_backward before run_forward".into()));
        }
        if staged.d_out.is_none() {
            return Err(AttnError::State(
                "run_backward needs d_out in the staged inputs".into(),
            ));
        }
        staged.grads = None;
        let exec = staged.exec.clone();
        let (result, stats) = timed_run(&exec, &meter, || backward(&meter, staged))?;
        staged.grads = result;
        Ok(stats)
    }

    fn output(&mut self) -> Result<Tensor, AttnError> {
        let staged = self.staged_mut()?;
        let forward = staged
            .forward
            .as_ref()
            .ok_or_else(|| AttnError::State("output() before run_forward".into()))?;
        staged::download_output(&staged.problem.shape, &forward.out)
    }

    fn grads(&mut self) -> Result<Grads, AttnError> {
        let staged = self.staged_mut()?;
        let [dq, dk, dv] = staged
            .grads
            .as_ref()
            .ok_or_else(|| AttnError::State("grads() before run_backward".into()))?;
        staged::download_grads(&staged.problem.shape, dq, dk, dv)
    }

    fn release(&mut self) {
        self.staged = None;
    }

    fn flush_cache(&mut self) -> Result<(), AttnError> {
        match &self.staged {
            Some(staged) => staged.exec.flush_l2(),
            None => Ok(()),
        }
    }
}

/// Resets `meter`'s peak, then times `launches` (allocations included): what they built
/// (always `Some` once `exec.time` succeeds) and the run's stats.
fn timed_run<R>(
    exec: &Arc<dyn Executor>,
    meter: &MemoryMeter,
    launches: impl FnOnce() -> Result<R, AttnError>,
) -> Result<(Option<R>, RunStats), AttnError> {
    meter.reset_peak();
    let mut result = None;
    let mut launches = Some(launches);
    let elapsed = exec.time(&mut || {
        if let Some(f) = launches.take() {
            result = Some(f()?);
        }
        Ok(())
    })?;
    Ok((
        result,
        RunStats {
            elapsed,
            device_bytes: Some(meter.peak()),
        },
    ))
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

    /// B·H as grid.z (`check_problem` keeps it within 65535).
    fn grid_heads(&self) -> Result<u32, AttnError> {
        u32::try_from(self.heads)
            .ok()
            .filter(|&h| h <= MAX_GRID_HEADS)
            .ok_or_else(|| AttnError::SizeOverflow(format!("B·H = {} heads", self.heads)))
    }
}

/// φ(Q) or φ(K) as the kernels read it: fp32 features of the φ stage, or raw storage with
/// the fused map.
fn operand<T>(features: Option<&DeviceBuffer<f32>>, raw: &DeviceBuffer<T>) -> (u64, i32) {
    match features {
        Some(f) => (f.address(), KIND_F32),
        None => (raw.address(), KIND_MAPPED),
    }
}

fn forward<T: StorageElem>(
    meter: &MemoryMeter,
    staged: &Staged<T>,
) -> Result<ForwardResult<T>, AttnError> {
    let exec = &staged.exec;
    let dims = Dims::of(&staged.problem);
    let features = match &staged.phi_stage {
        Some(stage) => Some(stage.forward(meter, &staged.q, &staged.k, dims.heads, dims.n)?),
        None => None,
    };
    let (k_addr, k_kind) = operand(features.as_ref().map(|f| &f.k), &staged.k);
    let state = reduce_outer_products(
        exec,
        meter,
        &staged.variant,
        &dims,
        (k_addr, k_kind),
        staged.v.address(),
        0,
        0,
        dims.log2_decay,
    )?;
    let out = DeviceBuffer::<T>::zeros(exec, meter, dims.rows() * dims.m)?;
    let q_op = operand(features.as_ref().map(|f| &f.q), &staged.q);
    let scales = log_scales(features.as_ref());
    output_rowgemm(
        exec,
        &staged.variant,
        &dims,
        q_op,
        &state,
        (out.address(), false),
        scales,
    )?;
    Ok(ForwardResult {
        out,
        state,
        features,
    })
}

fn backward<T: StorageElem>(
    meter: &MemoryMeter,
    staged: &Staged<T>,
) -> Result<[DeviceBuffer<T>; 3], AttnError> {
    let exec = &staged.exec;
    let dims = Dims::of(&staged.problem);
    let fwd = staged
        .forward
        .as_ref()
        .ok_or_else(|| AttnError::State("backward before forward".into()))?;
    let g = staged
        .d_out
        .as_ref()
        .ok_or_else(|| AttnError::State("backward without d_out".into()))?;
    let features = fwd.features.as_ref();
    let (q_op, k_op) = (
        operand(features.map(|f| &f.q), &staged.q),
        operand(features.map(|f| &f.k), &staged.k),
    );
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
                &staged.variant,
                &dims,
                q_op,
                &fwd.state,
                (o.address(), true),
                scales,
            )?;
            Some(o)
        };
        let (o_addr, o_is_f32) = match &out_f32 {
            Some(o) => (o.address(), 1i32),
            None => (fwd.out.address(), 0i32),
        };
        row_terms(
            exec,
            &staged.variant,
            &dims,
            q_op,
            fwd.state.address(),
            g.address(),
            (o_addr, o_is_f32),
            scales,
            (inv_den.address(), gd.address()),
        )?;
        drop(out_f32);
        (Some(inv_den), Some(gd))
    } else {
        (None, None)
    };
    let r_state = reduce_outer_products(
        exec,
        meter,
        &staged.variant,
        &dims,
        q_op,
        g.address(),
        address_of(inv_den.as_ref()),
        address_of(gd.as_ref()),
        0.0,
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
    let (dq_target, dk_target, out_f32, pre_q, pre_k) = match &d_features {
        Some((gq, gk)) => (gq.address(), gk.address(), true, 0, 0),
        None => (
            dq.address(),
            dk.address(),
            false,
            staged.q.address(),
            staged.k.address(),
        ),
    };
    let with = |mode, x, state: &DeviceBuffer<f32>, out, out_f32, pre| RowGemm {
        mode,
        x,
        state: state.address(),
        out,
        out_f32,
        pre,
        inv_den: address_of(inv_den.as_ref()),
        gd: address_of(gd.as_ref()),
        log_scales: scales,
    };
    let g_op = (g.address(), KIND_STORAGE);
    let v_op = (staged.v.address(), KIND_STORAGE);
    let variant = &staged.variant;
    rowgemm(
        exec,
        variant,
        &dims,
        with(MODE_GRAD_Q, g_op, &fwd.state, dq_target, out_f32, pre_q),
    )?;
    rowgemm(
        exec,
        variant,
        &dims,
        with(MODE_GRAD_K, v_op, &r_state, dk_target, out_f32, pre_k),
    )?;
    rowgemm(
        exec,
        variant,
        &dims,
        with(MODE_GRAD_V, k_op, &r_state, dv.address(), false, 0),
    )?;

    if let (Some(stage), Some(feats), Some((gq, gk))) =
        (&staged.phi_stage, features, d_features.as_ref())
    {
        stage.backward(
            &staged.q, &staged.k, feats, gq, gk, &mut dq, &mut dk, dims.heads, dims.n,
        )?;
    }
    Ok([dq, dk, dv])
}

/// `[BH, C·M + C]`: Σ_j bw_j A_jᵀ⊗B_j and Σ_j vw_j A_j (see `nc_accumulate`), split over
/// N across blocks when one block per tile would leave the GPU idle.
#[allow(clippy::too_many_arguments)]
fn reduce_outer_products(
    exec: &Arc<dyn Executor>,
    meter: &MemoryMeter,
    variant: &KernelVariant,
    dims: &Dims,
    a: (u64, i32),
    b: u64,
    b_row_scale: u64,
    v_row_scale: u64,
    log2_decay: f32,
) -> Result<DeviceBuffer<f32>, AttnError> {
    let state_len = dims.state_len();
    let state = DeviceBuffer::<f32>::zeros(exec, meter, dims.heads * state_len)?;
    let tiles = dims.c.div_ceil(TILE) * dims.m.div_ceil(TILE);
    let wanted_blocks = 4 * exec.info().sm_count as usize;
    let max_splits = dims.n.div_ceil(MIN_ROWS_PER_SPLIT).clamp(1, 65_535);
    let splits = wanted_blocks
        .div_ceil((tiles * dims.heads).max(1))
        .clamp(1, max_splits);
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
    let target = partial.as_ref().unwrap_or(&state).address();

    // a is [BH,N,C], b [BH,N,M], the row scales [BH·N] or null, target [BH, splits, C·M+C].
    let kernel = exec.kernel(variant, "nc_accumulate")?;
    let grid = (
        u32::try_from(tiles).map_err(|_| AttnError::SizeOverflow("tiles".into()))?,
        splits as u32,
        dims.grid_heads()?,
    );
    exec.launch(
        &kernel,
        &Launch::new(grid, THREADS),
        &args![
            KernelArg::Ptr(a.0),
            a.1,
            KernelArg::Ptr(b),
            KernelArg::Ptr(b_row_scale),
            KernelArg::Ptr(v_row_scale),
            KernelArg::Ptr(target),
            as_i32("sequence length N", dims.n)?,
            as_i32("feature dim C", dims.c)?,
            as_i32("value dim M", dims.m)?,
            as_i32("rows per split", rows_per_split)?,
            log2_decay,
        ],
    )?;

    if let Some(partial) = &partial {
        // partial [BH, splits, len] summed into state [BH, len].
        let kernel = exec.kernel(variant, "nc_reduce")?;
        let total = dims.heads * state_len;
        let grid = (blocks_for(total, 256)?.min(65_535 * 16), 1, 1);
        exec.launch(
            &kernel,
            &Launch::new(grid, 256),
            &args![
                partial,
                &state,
                splits as i32,
                state_len as i64,
                dims.heads as i64
            ],
        )?;
    }
    Ok(state)
}

/// One `nc_rowgemm` launch (addresses are device pointers or 0).
struct RowGemm {
    mode: i32,
    x: (u64, i32),
    state: u64,
    out: u64,
    out_f32: bool,
    pre: u64,
    inv_den: u64,
    gd: u64,
    log_scales: (u64, u64),
}

/// O = φ(Q)S / (φ(Q)z + ε) from `state` into `out` (address, whether fp32 rather than
/// storage): the forward's output and the backward's fp32 recomputation of it.
fn output_rowgemm(
    exec: &Arc<dyn Executor>,
    variant: &KernelVariant,
    dims: &Dims,
    q: (u64, i32),
    state: &DeviceBuffer<f32>,
    (out, out_f32): (u64, bool),
    log_scales: (u64, u64),
) -> Result<(), AttnError> {
    rowgemm(
        exec,
        variant,
        dims,
        RowGemm {
            mode: MODE_OUTPUT,
            x: q,
            state: state.address(),
            out,
            out_f32,
            pre: 0,
            inv_den: 0,
            gd: 0,
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
    let width = if call.mode == MODE_GRAD_Q || call.mode == MODE_GRAD_K {
        dims.c
    } else {
        dims.m
    };
    // x is [BH,N,inner], state [BH,C·M+C], out [BH,N,width] of the type out_f32 says, pre
    // [BH,N,width] storage or null.
    let kernel = exec.kernel(variant, "nc_rowgemm")?;
    let grid = (
        blocks_for(dims.n, TILE)?,
        blocks_for(width, TILE)?,
        dims.grid_heads()?,
    );
    let ptr = KernelArg::Ptr;
    exec.launch(
        &kernel,
        &Launch::new(grid, THREADS),
        &args![
            call.mode,
            ptr(call.x.0),
            call.x.1,
            ptr(call.state),
            as_i32("feature dim C", dims.c)?,
            as_i32("value dim M", dims.m)?,
            ptr(call.out),
            call.out_f32,
            ptr(call.pre),
            ptr(call.inv_den),
            ptr(call.gd),
            ptr(call.log_scales.0),
            ptr(call.log_scales.1),
            dims.eps,
            dims.normalised,
            as_i32("sequence length N", dims.n)?,
            dims.log2_decay,
        ],
    )
}

#[allow(clippy::too_many_arguments)]
fn row_terms(
    exec: &Arc<dyn Executor>,
    variant: &KernelVariant,
    dims: &Dims,
    q: (u64, i32),
    state: u64,
    g: u64,
    o: (u64, i32),
    log_scales: (u64, u64),
    outputs: (u64, u64),
) -> Result<(), AttnError> {
    // One warp per row of [BH·N].
    let kernel = exec.kernel(variant, "nc_backward_row_terms")?;
    let rows = dims.rows();
    let ptr = KernelArg::Ptr;
    exec.launch(
        &kernel,
        &Launch::new((blocks_for(rows, 8)?, 1, 1), 256),
        &args![
            ptr(q.0),
            q.1,
            ptr(state),
            ptr(g),
            ptr(o.0),
            o.1,
            ptr(log_scales.0),
            ptr(log_scales.1),
            dims.eps,
            ptr(outputs.0),
            ptr(outputs.1),
            rows as i64,
            as_i32("sequence length N", dims.n)?,
            as_i32("feature dim C", dims.c)?,
            as_i32("value dim M", dims.m)?,
        ],
    )
}
