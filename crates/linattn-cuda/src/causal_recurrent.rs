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

use std::sync::Arc;
use std::time::Duration;

use half::{bf16, f16};
use linattn_core::{
    check_linear_form, Algorithm, AttnError, Backend, BackendInfo, BackwardKind, FeatureMap, Form,
    Grads, Inputs, Precision, Problem, RunStats, Tensor, Unsupported,
};

use crate::args;
use crate::executor::{Executor, KernelArg, Launch, Platform};
use crate::feature_map::{log_scales, DeviceFeatures, FeatureStage};
use crate::memory::{DeviceBuffer, MemoryMeter, StorageElem};
use crate::runtime::{
    self, as_i32, blocks_for, check_head_dim, head_dim_class, storage_define, KernelVariant,
};
use crate::staged::{self, DeviceInputs};

pub const SOURCE_NAME: &str = "causal_recurrent.cu";
pub const SOURCE: &str = include_str!("../../../kernels/causal_recurrent.cu");

/// Every `extern "C"` kernel of `causal_recurrent.cu`.
pub const ENTRY_POINTS: [&str; 8] = [
    "cr_forward",
    "cr_forward_stored",
    "cr_backward_go",
    "cr_backward_dq",
    "cr_backward_dk",
    "cr_backward_dv",
    "cr_backward_prep",
    "cr_backward_dq_from_states",
];

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

/// The module a scan runs from: its precision, map class and the class of its rows.
fn module(
    precision: Precision,
    dims: &CoreDims,
    role: ScanRole,
) -> Result<KernelVariant, AttnError> {
    let class = role.class(dims.c, dims.m)?;
    Ok(variant(precision, dims.map, class)?)
}

/// Enqueues the forward scan. `states` = (S_i, z_i) buffers for the stored-states variant.
/// `Q` is the element type of q, k: `T`, or f32 after a φ stage. `log_scales` are the device
/// addresses of FAVOR+'s ε scales (0, 0 otherwise; see `feature_map`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn launch_forward<T, Q>(
    exec: &Arc<dyn Executor>,
    precision: Precision,
    dims: &CoreDims,
    q: &DeviceBuffer<Q>,
    k: &DeviceBuffer<Q>,
    v: &DeviceBuffer<T>,
    out: &DeviceBuffer<T>,
    den: &DeviceBuffer<f32>,
    states: Option<(&DeviceBuffer<f32>, &DeviceBuffer<f32>)>,
    log_scales: (u64, u64),
) -> Result<(), AttnError> {
    let variant = module(precision, dims, ScanRole::Forward)?;
    let launch = scan_launch(
        ScanRole::Forward,
        dims.c,
        dims.m,
        dims.batch_heads,
        dims.map.normalised(),
    )?;
    let (n, c, m) = dims.ints()?;
    let scalars = args![
        KernelArg::Ptr(log_scales.0),
        KernelArg::Ptr(log_scales.1),
        n,
        c,
        m,
        dims.decay,
        dims.eps
    ];
    // Buffers hold [B·H, N, ·] elements as the callers allocate them.
    let mut list = args![q, k, v, out, den].to_vec();
    let entry = match states {
        Some((s, z)) => {
            list.extend(args![s, z]);
            "cr_forward_stored"
        }
        None => "cr_forward",
    };
    list.extend(scalars);
    exec.launch(&exec.kernel(&variant, entry)?, &launch, &list)
}

/// Buffers the backward reads and writes.
pub(crate) struct BackwardBuffers<'a, T, Q> {
    pub q: &'a DeviceBuffer<Q>,
    pub k: &'a DeviceBuffer<Q>,
    pub v: &'a DeviceBuffer<T>,
    pub d_out: &'a DeviceBuffer<T>,
    pub out: &'a DeviceBuffer<T>,
    pub den: &'a DeviceBuffer<f32>,
    pub gd: &'a DeviceBuffer<f32>,
    /// G·O partials from the fp32 O (`cr_backward_go`): ⌈M/32⌉ per token where
    /// [`go_slices`] says so, else an empty placeholder.
    pub go: &'a DeviceBuffer<f32>,
    /// FAVOR+'s ε scales of the forward (0, 0 otherwise), for `cr_backward_go`.
    pub log_scales: (u64, u64),
    pub dq: &'a DeviceBuffer<Q>,
    pub dk: &'a DeviceBuffer<Q>,
    pub dv: &'a DeviceBuffer<T>,
    /// (S_i, z_i) from `cr_forward_stored`: ∂Q read from them instead of a scan.
    pub states: Option<(&'a DeviceBuffer<f32>, &'a DeviceBuffer<f32>)>,
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
pub(crate) fn launch_backward<T, Q>(
    exec: &Arc<dyn Executor>,
    precision: Precision,
    dims: &CoreDims,
    b: BackwardBuffers<'_, T, Q>,
) -> Result<(), AttnError> {
    let (n, c, m) = dims.ints()?;
    let c_module = module(precision, dims, ScanRole::Dv)?;
    let m_module = module(precision, dims, ScanRole::Dq)?;
    let normalised = dims.map.normalised();

    if normalised && b.states.is_none() {
        let slices = go_slices(precision, dims, false);
        if slices > 0 {
            // q, k hold tokens·C elements, v and d_out tokens·M, go tokens·slices.
            exec.launch(
                &exec.kernel(&c_module, "cr_backward_go")?,
                &scan_launch(ScanRole::Forward, dims.c, dims.m, dims.batch_heads, true)?,
                &args![
                    b.q,
                    b.k,
                    b.v,
                    b.d_out,
                    b.go,
                    KernelArg::Ptr(b.log_scales.0),
                    KernelArg::Ptr(b.log_scales.1),
                    n,
                    c,
                    m,
                    dims.decay,
                    dims.eps
                ],
            )?;
        }
        // g, out hold tokens·M elements, den and gd tokens, go tokens·slices.
        let tokens = dims.tokens()?;
        let tokens_i64 = i64::try_from(tokens)
            .map_err(|_| AttnError::SizeOverflow(format!("{tokens} tokens")))?;
        exec.launch(
            &exec.kernel(&c_module, "cr_backward_prep")?,
            &per_token_launch(tokens)?,
            &args![
                b.d_out,
                b.out,
                b.go,
                as_i32("G·O slices", slices)?,
                b.den,
                b.gd,
                tokens_i64,
                m
            ],
        )?;
    }

    match b.states {
        Some((states, z_states)) => {
            // states hold tokens·C·M elements, z_states tokens·C; gd (written) tokens.
            let grid = (as_u32_grid_x(dims.n)?, grid_y(dims.batch_heads)?, 1);
            exec.launch(
                &exec.kernel(&c_module, "cr_backward_dq_from_states")?,
                &Launch::new(grid, 256),
                &args![b.q, b.d_out, b.den, b.gd, states, z_states, b.dq, n, c, m],
            )?;
        }
        None => launch_feature_grad_scan(exec, &m_module, dims, ScanRole::Dq, &b)?,
    }
    launch_feature_grad_scan(exec, &m_module, dims, ScanRole::Dk, &b)?;

    exec.launch(
        &exec.kernel(&c_module, "cr_backward_dv")?,
        &scan_launch(ScanRole::Dv, dims.c, dims.m, dims.batch_heads, normalised)?,
        &args![b.q, b.k, b.d_out, b.den, b.dv, n, c, m, dims.decay],
    )
}

/// Enqueues the ∂Q (`role` = Dq, into `b.dq`) or ∂K (`role` = Dk, into `b.dk`) scan: both
/// kernels take the same parameter list and run from the M-rows module.
fn launch_feature_grad_scan<T, Q>(
    exec: &Arc<dyn Executor>,
    m_module: &KernelVariant,
    dims: &CoreDims,
    role: ScanRole,
    b: &BackwardBuffers<'_, T, Q>,
) -> Result<(), AttnError> {
    let (entry, grad) = match role {
        ScanRole::Dq => ("cr_backward_dq", b.dq),
        ScanRole::Dk => ("cr_backward_dk", b.dk),
        other => return Err(AttnError::State(format!("{other:?} is not a ∂Q/∂K scan"))),
    };
    let (n, c, m) = dims.ints()?;
    let launch = scan_launch(
        role,
        dims.c,
        dims.m,
        dims.batch_heads,
        dims.map.normalised(),
    )?;
    // grad holds tokens·C elements of Q, the rest as `launch_backward` documents.
    exec.launch(
        &exec.kernel(m_module, entry)?,
        &launch,
        &args![b.q, b.k, b.v, b.d_out, b.den, b.gd, grad, n, c, m, dims.decay],
    )
}

fn as_u32_grid_x(n: usize) -> Result<u32, AttnError> {
    u32::try_from(n)
        .ok()
        .filter(|&x| x > 0 && x <= i32::MAX as u32)
        .ok_or_else(|| AttnError::InvalidArgument(format!("grid x of {n} blocks")))
}

// ============================================================================================
// The backends
// ============================================================================================

/// Inputs on the device, with the φ stage's outputs when the map is not fused.
pub(crate) struct StagedInputs<T> {
    pub exec: Arc<dyn Executor>,
    pub problem: Problem,
    pub dims: CoreDims,
    pub q: DeviceBuffer<T>,
    pub k: DeviceBuffer<T>,
    pub v: DeviceBuffer<T>,
    pub d_out: Option<DeviceBuffer<T>>,
    /// The φ stage of a map that is not fused (FAVOR+'s W uploaded with the inputs).
    pub features: Option<FeatureStage>,
}

impl<T: StorageElem> StagedInputs<T> {
    /// Validates `inputs` for `problem` and uploads them (converted to `T`).
    pub fn upload(
        exec: Arc<dyn Executor>,
        meter: &MemoryMeter,
        problem: &Problem,
        inputs: &Inputs,
    ) -> Result<Self, AttnError> {
        inputs.validate_for(problem)?;
        let features = if FeatureStage::needed(&problem.map) {
            Some(FeatureStage::new(&exec, problem, T::PRECISION, meter)?)
        } else {
            None
        };
        let DeviceInputs { q, k, v, d_out } = DeviceInputs::upload(&exec, meter, inputs)?;
        exec.synchronize()?;
        Ok(StagedInputs {
            exec,
            problem: *problem,
            dims: CoreDims::of(problem),
            q,
            k,
            v,
            d_out,
            features,
        })
    }
}

/// What a forward leaves for the backward and for `output()`.
pub(crate) struct ForwardState<T> {
    pub out: DeviceBuffer<T>,
    /// den_i (normalised maps) or a 1-element placeholder.
    pub den: DeviceBuffer<f32>,
    /// (S_i, z_i) of the stored-states variant.
    pub states: Option<(DeviceBuffer<f32>, DeviceBuffer<f32>)>,
    /// φ(Q), φ(K) (fp32) of a map that is not fused, kept for the backward.
    pub features: Option<DeviceFeatures>,
}

pub(crate) struct GradState<T> {
    pub dq: DeviceBuffer<T>,
    pub dk: DeviceBuffer<T>,
    pub dv: DeviceBuffer<T>,
}

/// Staged inputs and run results of a scan backend, with the bookkeeping the recurrent and
/// cumsum backends share: they differ only in their forward (the backward, the downloads
/// and the state checks are the same).
pub(crate) struct ScanRuns<T: StorageElem> {
    platform: Platform,
    /// Staged inputs (and FAVOR+'s W): not part of `device_bytes`.
    input_meter: MemoryMeter,
    /// Outputs and workspace: `device_bytes` is its peak during a run.
    work_meter: MemoryMeter,
    staged: Option<StagedInputs<T>>,
    forward: Option<ForwardState<T>>,
    grads: Option<GradState<T>>,
}

impl<T: StorageElem> ScanRuns<T> {
    pub fn new(platform: Platform) -> Self {
        ScanRuns {
            platform,
            input_meter: MemoryMeter::new(),
            work_meter: MemoryMeter::new(),
            staged: None,
            forward: None,
            grads: None,
        }
    }

    /// `name` is the backend's, for error messages.
    fn staged(&self, name: &str) -> Result<&StagedInputs<T>, AttnError> {
        self.staged
            .as_ref()
            .ok_or_else(|| AttnError::State(format!("{name}: stage() inputs before running")))
    }

    /// Validates and uploads `inputs` (the caller has released and checked `supports`).
    pub fn stage(&mut self, problem: &Problem, inputs: &Inputs) -> Result<(), AttnError> {
        let exec = self.platform.executor()?;
        self.staged = Some(StagedInputs::upload(
            exec,
            &self.input_meter,
            problem,
            inputs,
        )?);
        Ok(())
    }

    /// Runs `forward` on the staged inputs against the work meter.
    pub fn run_forward<F>(&mut self, name: &str, forward: F) -> Result<RunStats, AttnError>
    where
        F: FnOnce(&MemoryMeter, &StagedInputs<T>) -> Result<(ForwardState<T>, Duration), AttnError>,
    {
        // Results of an earlier run are dropped before the new peak is measured.
        self.forward = None;
        self.grads = None;
        self.work_meter.reset_peak();
        let staged = self.staged(name)?;
        let (forward, elapsed) = forward(&self.work_meter, staged)?;
        self.forward = Some(forward);
        Ok(RunStats {
            elapsed,
            device_bytes: Some(self.work_meter.peak()),
        })
    }

    /// The recurrent form's backward of the last forward.
    pub fn run_backward(&mut self, name: &str) -> Result<RunStats, AttnError> {
        self.grads = None;
        self.work_meter.reset_peak();
        let staged = self.staged(name)?;
        let fwd = self.forward.as_ref().ok_or_else(|| {
            AttnError::State(format!("{name}: run_forward() before run_backward()"))
        })?;
        let (grads, elapsed) = recurrent_backward(&self.work_meter, staged, fwd)?;
        self.grads = Some(grads);
        Ok(RunStats {
            elapsed,
            device_bytes: Some(self.work_meter.peak()),
        })
    }

    pub fn output(&self, name: &str) -> Result<Tensor, AttnError> {
        let staged = self.staged(name)?;
        let fwd = self
            .forward
            .as_ref()
            .ok_or_else(|| AttnError::State(format!("{name}: no forward has run")))?;
        staged::download_output(&staged.problem.shape, &fwd.out)
    }

    pub fn grads(&self, name: &str) -> Result<Grads, AttnError> {
        let staged = self.staged(name)?;
        let grads = self
            .grads
            .as_ref()
            .ok_or_else(|| AttnError::State(format!("{name}: no backward has run")))?;
        staged::download_grads(&staged.problem.shape, &grads.dq, &grads.dk, &grads.dv)
    }

    pub fn release(&mut self) {
        self.grads = None;
        self.forward = None;
        self.staged = None;
    }

    pub fn platform(&self) -> Platform {
        self.platform
    }

    /// Evicts the L2 cache of the staged inputs' device.
    pub fn flush_cache(&self) -> Result<(), AttnError> {
        match &self.staged {
            Some(staged) => staged.exec.flush_l2(),
            None => Ok(()),
        }
    }
}

/// `<platform>/causal_recurrent/<precision>` and
/// `<platform>/causal_recurrent+storedbwd/<precision>`.
pub struct RecurrentBackend<T: StorageElem> {
    info: BackendInfo,
    stored_states: bool,
    runs: ScanRuns<T>,
}

impl<T: StorageElem> RecurrentBackend<T> {
    pub fn new(platform: Platform, stored_states: bool) -> Self {
        let precision = T::PRECISION;
        let (form, backward) = if stored_states {
            ("causal_recurrent+storedbwd", BackwardKind::StoredStates)
        } else {
            ("causal_recurrent", BackwardKind::Efficient)
        };
        RecurrentBackend {
            info: BackendInfo {
                name: format!("{platform}/{form}/{precision}"),
                device: platform.device_kind(),
                precision,
                algorithm: Algorithm::Linear(Form::Recurrent),
                backward: Some(backward),
            },
            stored_states,
            runs: ScanRuns::new(platform),
        }
    }
}

/// Backends of this module on `platform`.
pub fn backends(platform: Platform) -> Vec<Box<dyn Backend>> {
    vec![
        Box::new(RecurrentBackend::<f32>::new(platform, false)),
        Box::new(RecurrentBackend::<f16>::new(platform, false)),
        Box::new(RecurrentBackend::<bf16>::new(platform, false)),
        Box::new(RecurrentBackend::<f32>::new(platform, true)),
        Box::new(RecurrentBackend::<f16>::new(platform, true)),
    ]
}

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
    meter: &MemoryMeter,
    staged: &StagedInputs<T>,
) -> Result<Option<DeviceFeatures>, AttnError> {
    match &staged.features {
        Some(stage) => {
            let dims = staged.dims;
            let features = stage.forward(meter, &staged.q, &staged.k, dims.batch_heads, dims.n)?;
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

/// Runs the forward of `staged` (φ stage first for maps that are not fused), allocating its
/// outputs against `meter`; `store_states` selects `cr_forward_stored`.
pub(crate) fn recurrent_forward<T: StorageElem>(
    meter: &MemoryMeter,
    staged: &StagedInputs<T>,
    store_states: bool,
) -> Result<(ForwardState<T>, Duration), AttnError> {
    let exec = &staged.exec;
    let dims = staged.dims;
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
    let mut features = None;
    let elapsed = exec.time(&mut || {
        features = run_feature_stage(meter, staged)?;
        let state_args = states.as_ref().map(|(s, z)| (s, z));
        let scales = log_scales(features.as_ref());
        match &features {
            Some(f) => launch_forward(
                exec, precision, &dims, &f.q, &f.k, &staged.v, &out, &den, state_args, scales,
            ),
            None => launch_forward(
                exec, precision, &dims, &staged.q, &staged.k, &staged.v, &out, &den, state_args,
                scales,
            ),
        }
    })?;
    Ok((
        ForwardState {
            out,
            den,
            states,
            features,
        },
        elapsed,
    ))
}

/// Runs the backward (recurrent kernels, then the φ stage's backward when there is one) of a
/// forward `fwd` of `staged`.
pub(crate) fn recurrent_backward<T: StorageElem>(
    meter: &MemoryMeter,
    staged: &StagedInputs<T>,
    fwd: &ForwardState<T>,
) -> Result<(GradState<T>, Duration), AttnError> {
    let exec = &staged.exec;
    let dims = staged.dims;
    let d_out = staged.d_out.as_ref().ok_or_else(|| {
        AttnError::InvalidArgument("backward needs d_out (∂L/∂O), none was staged".into())
    })?;
    let gd = buffer_or_placeholder::<f32>(exec, meter, dims.map.normalised(), dims.tokens()?)?;
    let precision = T::PRECISION;
    let slices = go_slices(precision, &dims, fwd.states.is_some());
    let go = buffer_or_placeholder::<f32>(exec, meter, slices > 0, dims.len(slices)?)?;
    let scales = log_scales(fwd.features.as_ref());
    let mut dq = DeviceBuffer::<T>::uninit(exec, meter, staged.q.len())?;
    let mut dk = DeviceBuffer::<T>::uninit(exec, meter, staged.k.len())?;
    let dv = DeviceBuffer::<T>::uninit(exec, meter, staged.v.len())?;
    let states = fwd.states.as_ref().map(|(s, z)| (s, z));
    let elapsed = match (&staged.features, &fwd.features) {
        (Some(stage), Some(features)) => {
            // ∂φ(Q), ∂φ(K) in fp32, chained through φ by the stage.
            let d_phi_q = DeviceBuffer::<f32>::uninit(exec, meter, dims.len(dims.c)?)?;
            let d_phi_k = DeviceBuffer::<f32>::uninit(exec, meter, dims.len(dims.c)?)?;
            exec.time(&mut || {
                launch_backward(
                    exec,
                    precision,
                    &dims,
                    BackwardBuffers {
                        q: &features.q,
                        k: &features.k,
                        v: &staged.v,
                        d_out,
                        out: &fwd.out,
                        den: &fwd.den,
                        gd: &gd,
                        go: &go,
                        log_scales: scales,
                        dq: &d_phi_q,
                        dk: &d_phi_k,
                        dv: &dv,
                        states,
                    },
                )?;
                stage.backward(
                    &staged.q,
                    &staged.k,
                    features,
                    &d_phi_q,
                    &d_phi_k,
                    &mut dq,
                    &mut dk,
                    dims.batch_heads,
                    dims.n,
                )
            })?
        }
        (None, None) => exec.time(&mut || {
            launch_backward(
                exec,
                precision,
                &dims,
                BackwardBuffers {
                    q: &staged.q,
                    k: &staged.k,
                    v: &staged.v,
                    d_out,
                    out: &fwd.out,
                    den: &fwd.den,
                    gd: &gd,
                    go: &go,
                    log_scales: scales,
                    dq: &dq,
                    dk: &dk,
                    dv: &dv,
                    states,
                },
            )
        })?,
        _ => {
            return Err(AttnError::State(
                "forward and staged inputs disagree about the φ stage".into(),
            ))
        }
    };
    Ok((GradState { dq, dk, dv }, elapsed))
}

impl<T: StorageElem> Backend for RecurrentBackend<T> {
    fn info(&self) -> &BackendInfo {
        &self.info
    }

    fn supports(&self, problem: &Problem) -> Result<(), Unsupported> {
        self.runs.platform().available()?;
        check_problem(&self.info, problem)
    }

    fn stage(&mut self, problem: &Problem, inputs: &Inputs) -> Result<(), AttnError> {
        self.release();
        self.supports(problem)?;
        self.runs.stage(problem, inputs)
    }

    fn run_forward(&mut self) -> Result<RunStats, AttnError> {
        let store_states = self.stored_states;
        self.runs.run_forward(&self.info.name, |meter, staged| {
            recurrent_forward(meter, staged, store_states)
        })
    }

    fn run_backward(&mut self) -> Result<RunStats, AttnError> {
        self.runs.run_backward(&self.info.name)
    }

    fn output(&mut self) -> Result<Tensor, AttnError> {
        self.runs.output(&self.info.name)
    }

    fn grads(&mut self) -> Result<Grads, AttnError> {
        self.runs.grads(&self.info.name)
    }

    fn release(&mut self) {
        self.runs.release();
    }

    fn flush_cache(&mut self) -> Result<(), AttnError> {
        self.runs.flush_cache()
    }
}
