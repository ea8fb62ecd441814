//! `cuda/causal_chunked/{f16,bf16}`: causal linear attention in chunks of 64 tokens on tensor
//! cores (SPEC §3 "chunkwise"), with the memory-efficient backward of SPEC §4.
//!
//! The math, the three-pass schedule, the fragment layouts and the precision choices are
//! documented at the top of `kernels/causal_chunked.cu`. In short:
//! * pass 1 (`cc_state_fwd`): per chunk, ΔS = Σ λ^{L−1−j} k̃_j v_jᵀ and Δz (fp32, tensor cores);
//! * pass 2 (`cc_scan`): exclusive scan over chunks, in place: the state entering each chunk;
//! * pass 3 (`cc_forward`): per chunk, O = (intra masked q̃k̃ᵀ v + inter q̃ S⁰) / den.
//!
//! Every pass runs `N/64 · B·H · (M or D)/64` CTAs, so B·H = 16 fills an H100 at any N ≥ 1k;
//! the cost is a workspace of one fp32 state per chunk, `N/64 · D·(M+1) · 4` bytes per head
//! (two of them in the backward: S⁰ and the reverse R⁰). The forward keeps `den` (N fp32 per
//! head) next to O for the backward; no per-token state is ever stored.
//!
//! D and M must each be 64 or 128 (compile-time specialised); the fused maps are elu+1, relu
//! and identity; decay λ is a kernel argument. Kernels are compile-checked for sm_80/sm_90
//! with NVRTC; whether they compute the right numbers is checked by
//! `tests/causal_chunked_gpu.rs` on a machine with a GPU.

use std::sync::OnceLock;

use cudarc::driver::{CudaFunction, LaunchArgs, LaunchConfig, PushKernelArg};
use linattn_core::{
    check_linear_form, Algorithm, AttnError, Backend, BackendInfo, BackwardKind, DeviceKind,
    FeatureMap, Form, Grads, Inputs, Precision, Problem, RunStats, Shape, Tensor, Unsupported,
};

use crate::runtime::{
    self, as_i32, gpu, gpu_available, map_define, nvrtc_available, storage_define, DeviceBuffer,
    Gpu, KernelVariant, MemoryMeter, StorageElem,
};
use crate::staged::{self, DeviceInputs};

pub const SOURCE_NAME: &str = "causal_chunked.cu";
pub const SOURCE: &str = include_str!("../../../kernels/causal_chunked.cu");

/// Tokens per chunk (`CC_L`).
pub const CHUNK: usize = 64;
/// Width of the slice of M (forward, dV) or of D (dQ, dK, R state) one CTA computes.
pub const TILE: usize = 64;
/// Threads per CTA of the chunk kernels: 4 warps × 16 rows.
pub const THREADS: u32 = 128;
/// Threads per CTA of the scan.
pub const SCAN_THREADS: u32 = 256;
/// The head dims (D and M alike) the kernels are specialised for.
pub const HEAD_DIMS: [usize; 2] = [64, 128];
/// Shared memory a CTA may use without opting in.
pub const DEFAULT_SHARED_BYTES: u32 = 48 * 1024;
/// Largest `gridDim.y` (the B·H axis).
pub const MAX_GRID_Y: usize = 65_535;

/// The fused maps; every other map is refused (it would need the separate φ stage).
pub const FUSED_MAPS: [FeatureMap; 3] = [
    FeatureMap::EluPlusOne,
    FeatureMap::Relu,
    FeatureMap::Identity,
];

/// Kernel entry points of `causal_chunked.cu`.
pub const ENTRY_POINTS: [&str; 7] = [
    "cc_state_fwd",
    "cc_state_bwd",
    "cc_scan",
    "cc_forward",
    "cc_dq",
    "cc_dk",
    "cc_dv",
];

/// The compile-time specialisation of one program: storage precision and (D, M). The map and
/// the decay are kernel arguments, so one program serves every fused map.
pub fn variant(precision: Precision, dk: usize, dv: usize) -> Result<KernelVariant, Unsupported> {
    if !matches!(precision, Precision::F16 | Precision::BF16) {
        return Err(Unsupported::Problem(format!(
            "the chunked tensor-core kernels store f16 or bf16, not {precision}"
        )));
    }
    check_head_dims(dk, dv, precision)?;
    let (storage_name, storage_value) = storage_define(precision)?;
    Ok(KernelVariant::new(SOURCE_NAME, SOURCE)
        .define(storage_name, storage_value)
        .define("CC_D", dk)
        .define("CC_M", dv)
        .entries(&ENTRY_POINTS)
        .hot())
}

/// Every (precision, D, M) program: what CI compiles for sm_80 and sm_90.
pub fn kernel_variants() -> Vec<KernelVariant> {
    let mut all = Vec::new();
    for precision in [Precision::F16, Precision::BF16] {
        for dk in HEAD_DIMS {
            for dv in HEAD_DIMS {
                if let Ok(v) = variant(precision, dk, dv) {
                    all.push(v);
                }
            }
        }
    }
    all
}

/// The kernels' map argument (the `LA_MAP` codes: 0 identity, 1 elu+1, 2 relu).
pub fn map_code(map: &FeatureMap, precision: Precision) -> Result<i32, Unsupported> {
    match map_define(map) {
        Some((_, code)) if FUSED_MAPS.contains(map) => code.parse().map_err(|_| {
            Unsupported::Problem(format!("map code '{code}' of {map} is not a number"))
        }),
        _ => Err(unfused_map(map, precision)),
    }
}

fn check_head_dims(dk: usize, dv: usize, precision: Precision) -> Result<(), Unsupported> {
    if HEAD_DIMS.contains(&dk) && HEAD_DIMS.contains(&dv) {
        Ok(())
    } else {
        Err(Unsupported::Problem(format!(
            "chunked tensor-core path needs D, M in {{64, 128}}; use cuda/causal_recurrent/{precision} \
             for D={dk}, M={dv}"
        )))
    }
}

fn unfused_map(map: &FeatureMap, precision: Precision) -> Unsupported {
    Unsupported::Problem(format!(
        "chunked tensor-core path fuses only elu+1, relu and identity, not {map}; use \
         cuda/causal_recurrent/{precision}"
    ))
}

/// Problem checks that need no device: causal, valid, head dims, fused map, grid limits.
pub fn check_problem(info: &BackendInfo, problem: &Problem) -> Result<(), Unsupported> {
    check_linear_form(info, problem)?;
    let shape = &problem.shape;
    check_head_dims(shape.dk, shape.dv, info.precision)?;
    map_code(&problem.map, info.precision)?;
    LaunchPlan::new(shape).map_err(|e| Unsupported::Problem(e.to_string()))?;
    Ok(())
}

/// Grid, block and shared-memory sizes of every launch for one shape, and the workspace.
/// Mirrors the `CC_*_SMEM` formulas of the kernel source (host-testable without a GPU).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchPlan {
    pub num_chunks: usize,
    /// B·H.
    pub heads: usize,
    /// fp32 per chunk state: D·M matrix then the D vector.
    pub state_stride: usize,
    /// fp32 elements of one state buffer (all heads, all chunks).
    pub state_len: usize,
    /// (NC, B·H, M/64): cc_state_fwd, cc_forward, cc_dv.
    pub grid_value_tiles: (u32, u32, u32),
    /// (NC, B·H, D/64): cc_state_bwd, cc_dq, cc_dk.
    pub grid_key_tiles: (u32, u32, u32),
    /// (⌈stride/256⌉, B·H): cc_scan.
    pub grid_scan: (u32, u32, u32),
    pub smem_state_fwd: u32,
    pub smem_state_bwd: u32,
    pub smem_forward: u32,
    pub smem_dq: u32,
    pub smem_dk: u32,
    pub smem_dv: u32,
}

impl LaunchPlan {
    pub fn new(shape: &Shape) -> Result<Self, AttnError> {
        shape.validate()?;
        let (d, m) = (shape.dk, shape.dv);
        if !HEAD_DIMS.contains(&d) || !HEAD_DIMS.contains(&m) {
            return Err(AttnError::Unsupported(Unsupported::Problem(format!(
                "chunked tensor-core path needs D, M in {{64, 128}}, got D={d}, M={m}"
            ))));
        }
        let heads = shape.bh();
        if heads > MAX_GRID_Y {
            return Err(AttnError::InvalidArgument(format!(
                "B·H = {heads} exceeds {MAX_GRID_Y} (grid y of the chunked kernels)"
            )));
        }
        let num_chunks = shape.seq.div_ceil(CHUNK);
        // Kernels take N and the chunk count as int and index in 64 bits.
        as_i32("sequence length N", shape.seq)?;
        let state_stride = d * m + d;
        let state_len = heads
            .checked_mul(num_chunks)
            .and_then(|x| x.checked_mul(state_stride))
            .ok_or_else(|| AttnError::SizeOverflow(format!("chunk states of {shape}")))?;
        let u = |x: usize, what: &str| {
            u32::try_from(x).map_err(|_| AttnError::SizeOverflow(format!("{what} = {x}")))
        };
        let nc = u(num_chunks, "chunk count")?;
        let bh = u(heads, "B·H")?;
        const PAD: usize = 8;
        let (ld_t, ld_d, ld_m) = (CHUNK + PAD, d + PAD, m + PAD);
        let half = 2; // bytes of a 16-bit element
        Ok(LaunchPlan {
            num_chunks,
            heads,
            state_stride,
            state_len,
            grid_value_tiles: (nc, bh, u(m / TILE, "M/64")?),
            grid_key_tiles: (nc, bh, u(d / TILE, "D/64")?),
            grid_scan: (
                u(state_stride.div_ceil(SCAN_THREADS as usize), "scan blocks")?,
                bh,
                1,
            ),
            smem_state_fwd: u((TILE * ld_t + d * ld_t) * half, "shared bytes")?,
            smem_state_bwd: u((TILE * ld_t + m * ld_t) * half, "shared bytes")?,
            smem_forward: u(
                2 * CHUNK * ld_d * half + TILE * ld_t * half + TILE * ld_d * 4 + d * 4,
                "shared bytes",
            )?,
            // cc_dk: G, v tiles; q̃ slice; R⁰ slice fp32; r⁰ slice. cc_dq adds k̃'s lo residue.
            smem_dk: u(
                2 * CHUNK * ld_m * half + TILE * ld_t * half + TILE * ld_m * 4 + TILE * 4,
                "shared bytes",
            )?,
            smem_dq: u(
                2 * CHUNK * ld_m * half + 2 * TILE * ld_t * half + TILE * ld_m * 4 + TILE * 4,
                "shared bytes",
            )?,
            smem_dv: u(
                2 * CHUNK * ld_d * half + TILE * ld_t * half + TILE * ld_d * 4,
                "shared bytes",
            )?,
        })
    }

    /// Bytes of one chunk-state buffer.
    pub fn state_bytes(&self) -> u64 {
        self.state_len as u64 * 4
    }

    fn config(grid: (u32, u32, u32), block: u32, shared: u32) -> LaunchConfig {
        LaunchConfig {
            grid_dim: grid,
            block_dim: (block, 1, 1),
            shared_mem_bytes: shared,
        }
    }
}

// ============================================================================================
// The backends
// ============================================================================================

/// `cuda/causal_chunked/f16` and `cuda/causal_chunked/bf16`.
pub fn backends() -> Vec<Box<dyn Backend>> {
    vec![
        Box::new(ChunkedBackend::<half::f16>::new()),
        Box::new(ChunkedBackend::<half::bf16>::new()),
    ]
}

/// Backend name for a storage precision.
pub fn backend_name(precision: Precision) -> String {
    format!("cuda/causal_chunked/{precision}")
}

/// Causal chunked linear attention with `T` (f16 or bf16) storage.
pub struct ChunkedBackend<T: StorageElem> {
    info: BackendInfo,
    staged: Option<Staged<T>>,
}

impl<T: StorageElem> ChunkedBackend<T> {
    pub fn new() -> Self {
        ChunkedBackend {
            info: BackendInfo {
                name: backend_name(T::PRECISION),
                device: DeviceKind::Cuda,
                precision: T::PRECISION,
                algorithm: Algorithm::Linear(Form::Chunked),
                backward: Some(BackwardKind::Efficient),
            },
            staged: None,
        }
    }

    fn staged_mut(&mut self, what: &str) -> Result<&mut Staged<T>, AttnError> {
        self.staged.as_mut().ok_or_else(|| {
            AttnError::State(format!("{}: stage inputs before {what}", self.info.name))
        })
    }
}

impl<T: StorageElem> Default for ChunkedBackend<T> {
    fn default() -> Self {
        Self::new()
    }
}

/// Driver, device (sm_80+: bf16 mma and cvt) and NVRTC present. Probed once per process.
fn device_ready() -> Result<(), Unsupported> {
    static READY: OnceLock<Result<(), Unsupported>> = OnceLock::new();
    READY
        .get_or_init(|| {
            gpu_available()?;
            nvrtc_available()?;
            let gpu = gpu()
                .map_err(|e| Unsupported::Unavailable(format!("CUDA device unusable: {e}")))?;
            let info = gpu.info();
            let (major, minor) = info.compute_capability;
            if major < 8 {
                return Err(Unsupported::Unavailable(format!(
                    "{} is sm_{major}{minor}; the chunked kernels need sm_80 or newer \
                     (mma.m16n8k16 with bf16)",
                    info.name
                )));
            }
            Ok(())
        })
        .clone()
}

/// The entry points of one program, resolved (compiled and loaded) at staging, so timed runs
/// never include NVRTC.
struct Kernels {
    state_fwd: CudaFunction,
    state_bwd: CudaFunction,
    scan: CudaFunction,
    forward: CudaFunction,
    dq: CudaFunction,
    dk: CudaFunction,
    dv: CudaFunction,
}

impl Kernels {
    fn load(gpu: &Gpu, variant: &KernelVariant, plan: &LaunchPlan) -> Result<Self, AttnError> {
        let function = |entry: &str, shared: u32| -> Result<CudaFunction, AttnError> {
            let f = gpu.function(variant, entry)?;
            if shared > DEFAULT_SHARED_BYTES {
                gpu.allow_dynamic_shared(&f, shared)?;
            }
            Ok(f)
        };
        Ok(Kernels {
            state_fwd: function("cc_state_fwd", plan.smem_state_fwd)?,
            state_bwd: function("cc_state_bwd", plan.smem_state_bwd)?,
            scan: function("cc_scan", 0)?,
            forward: function("cc_forward", plan.smem_forward)?,
            dq: function("cc_dq", plan.smem_dq)?,
            dk: function("cc_dk", plan.smem_dk)?,
            dv: function("cc_dv", plan.smem_dv)?,
        })
    }
}

/// Scalar kernel arguments shared by the launches.
#[derive(Debug, Clone, Copy)]
struct ScalarArgs {
    n: i32,
    num_chunks: i32,
    /// log2 λ (0 when there is no decay, so the kernels' weights are exactly 1).
    log2_decay: f32,
    /// λ^L, the decay across one whole chunk (the scan's factor).
    chunk_decay: f32,
    eps: f32,
    map: i32,
}

impl ScalarArgs {
    /// Pushes the scalars that end the parameter list of `cc_state_fwd`, `cc_state_bwd`,
    /// `cc_dq`, `cc_dk` and `cc_dv`: n, num_chunks, log2_decay, map.
    fn push_chunk_scalars<'a>(&'a self, b: &mut LaunchArgs<'a>) {
        b.arg(&self.n)
            .arg(&self.num_chunks)
            .arg(&self.log2_decay)
            .arg(&self.map);
    }

    fn new(problem: &Problem, plan: &LaunchPlan, map: i32) -> Result<Self, AttnError> {
        Ok(ScalarArgs {
            n: as_i32("sequence length N", problem.shape.seq)?,
            num_chunks: as_i32("chunk count", plan.num_chunks)?,
            log2_decay: if problem.has_decay() {
                problem.decay.log2() as f32
            } else {
                0.0
            },
            chunk_decay: problem.decay.powi(CHUNK as i32) as f32,
            eps: problem.eps as f32,
            map,
        })
    }
}

/// Launches a chunk kernel (`THREADS` per CTA) on `grid` with `shared` bytes of dynamic
/// shared memory.
///
/// # Safety
/// As for [`runtime::launch`]: `b` must match the kernel's parameters and the buffers the
/// launch plan's extents.
unsafe fn launch_chunk_kernel(
    b: LaunchArgs<'_>,
    gpu: &Gpu,
    grid: (u32, u32, u32),
    shared: u32,
    name: &str,
) -> Result<(), AttnError> {
    // SAFETY: forwarded from this function's contract.
    unsafe { runtime::launch(b, gpu, LaunchPlan::config(grid, THREADS, shared), name) }
}

struct Staged<T: StorageElem> {
    problem: Problem,
    plan: LaunchPlan,
    args: ScalarArgs,
    kernels: Kernels,
    /// Staged inputs (not part of a run's device bytes).
    _input_meter: MemoryMeter,
    /// Outputs and workspace of runs.
    work_meter: MemoryMeter,
    q: DeviceBuffer<T>,
    k: DeviceBuffer<T>,
    v: DeviceBuffer<T>,
    d_out: Option<DeviceBuffer<T>>,
    out: Option<DeviceBuffer<T>>,
    /// Per-token denominators of the last forward (fp32, [B·H·N]): the backward's gn, gd.
    den: Option<DeviceBuffer<f32>>,
    grads: Option<[DeviceBuffer<T>; 3]>,
}

impl<T: StorageElem> Staged<T> {
    /// Pass 1 + pass 2 of the forward direction: S⁰, z⁰ of every chunk into `states`.
    fn launch_forward_states(
        &self,
        gpu: &Gpu,
        states: &mut DeviceBuffer<f32>,
    ) -> Result<(), AttnError> {
        let a = self.args;
        let p = &self.plan;
        let mut b = gpu.stream().launch_builder(&self.kernels.state_fwd);
        b.arg(self.k.slice())
            .arg(self.v.slice())
            .arg(states.slice_mut());
        a.push_chunk_scalars(&mut b);
        // SAFETY: arguments match cc_state_fwd's parameters; k, v hold B·H·N·(D|M) elements
        // and states B·H·NC·stride, the extents the kernel indexes for this plan.
        unsafe {
            launch_chunk_kernel(b, gpu, p.grid_value_tiles, p.smem_state_fwd, "cc_state_fwd")
        }?;
        self.launch_scan(gpu, states, false)
    }

    fn launch_scan(
        &self,
        gpu: &Gpu,
        states: &mut DeviceBuffer<f32>,
        reverse: bool,
    ) -> Result<(), AttnError> {
        let a = self.args;
        let reverse_flag: i32 = reverse.into();
        let mut b = gpu.stream().launch_builder(&self.kernels.scan);
        b.arg(states.slice_mut())
            .arg(&a.num_chunks)
            .arg(&a.chunk_decay)
            .arg(&reverse_flag);
        // SAFETY: arguments match cc_scan's parameters; states holds B·H·NC·stride floats.
        unsafe {
            runtime::launch(
                b,
                gpu,
                LaunchPlan::config(self.plan.grid_scan, SCAN_THREADS, 0),
                "cc_scan",
            )
        }
    }
}

impl<T: StorageElem> Backend for ChunkedBackend<T> {
    fn info(&self) -> &BackendInfo {
        &self.info
    }

    fn supports(&self, problem: &Problem) -> Result<(), Unsupported> {
        check_problem(&self.info, problem)?;
        device_ready()
    }

    fn stage(&mut self, problem: &Problem, inputs: &Inputs) -> Result<(), AttnError> {
        self.staged = None;
        self.supports(problem)?;
        inputs.validate_for(problem)?;
        let shape = problem.shape;
        let plan = LaunchPlan::new(&shape)?;
        let map = map_code(&problem.map, T::PRECISION)?;
        let args = ScalarArgs::new(problem, &plan, map)?;
        let gpu = gpu()?;
        let variant = variant(T::PRECISION, shape.dk, shape.dv)?;
        let kernels = Kernels::load(gpu, &variant, &plan)?;
        let input_meter = MemoryMeter::new();
        let DeviceInputs { q, k, v, d_out } = DeviceInputs::upload(gpu, &input_meter, inputs)?;
        self.staged = Some(Staged {
            problem: *problem,
            plan,
            args,
            kernels,
            _input_meter: input_meter,
            work_meter: MemoryMeter::new(),
            q,
            k,
            v,
            d_out,
            out: None,
            den: None,
            grads: None,
        });
        Ok(())
    }

    fn run_forward(&mut self) -> Result<RunStats, AttnError> {
        let gpu = gpu()?;
        let st = self.staged_mut("run_forward")?;
        // Results of an earlier run go first, so the peak counts this run alone.
        st.out = None;
        st.den = None;
        st.grads = None;
        st.work_meter.reset_peak();
        let shape = st.problem.shape;
        let mut out = DeviceBuffer::<T>::zeros(gpu, &st.work_meter, shape.v_len()?)?;
        let mut den = DeviceBuffer::<f32>::zeros(gpu, &st.work_meter, shape.bh() * shape.seq)?;
        let mut states = DeviceBuffer::<f32>::zeros(gpu, &st.work_meter, st.plan.state_len)?;
        let elapsed = gpu.time(|| {
            st.launch_forward_states(gpu, &mut states)?;
            let a = st.args;
            let p = &st.plan;
            let mut b = gpu.stream().launch_builder(&st.kernels.forward);
            b.arg(st.q.slice())
                .arg(st.k.slice())
                .arg(st.v.slice())
                .arg(states.slice())
                .arg(out.slice_mut())
                .arg(den.slice_mut())
                .arg(&a.n)
                .arg(&a.num_chunks)
                .arg(&a.log2_decay)
                .arg(&a.eps)
                .arg(&a.map);
            // SAFETY: arguments match cc_forward's parameters; buffers hold the extents of
            // this plan (q, k: B·H·N·D; v, out: B·H·N·M; den: B·H·N; states: state_len).
            unsafe { launch_chunk_kernel(b, gpu, p.grid_value_tiles, p.smem_forward, "cc_forward") }
        })?;
        drop(states);
        let device_bytes = st.work_meter.peak();
        st.out = Some(out);
        st.den = Some(den);
        Ok(RunStats {
            elapsed,
            device_bytes: Some(device_bytes),
        })
    }

    fn run_backward(&mut self) -> Result<RunStats, AttnError> {
        let gpu = gpu()?;
        let name = self.info.name.clone();
        let st = self.staged_mut("run_backward")?;
        let (Some(out), Some(den)) = (st.out.as_ref(), st.den.as_ref()) else {
            return Err(AttnError::State(format!(
                "{name}: run_forward before run_backward"
            )));
        };
        let Some(d_out) = st.d_out.as_ref() else {
            return Err(AttnError::InvalidArgument(
                "backward needs d_out (∂L/∂O), none was staged".into(),
            ));
        };
        st.grads = None;
        st.work_meter.reset_peak();
        let shape = st.problem.shape;
        let meter = &st.work_meter;
        let mut dq = DeviceBuffer::<T>::zeros(gpu, meter, shape.qk_len()?)?;
        let mut dk = DeviceBuffer::<T>::zeros(gpu, meter, shape.qk_len()?)?;
        let mut dv = DeviceBuffer::<T>::zeros(gpu, meter, shape.v_len()?)?;
        let mut states_fwd = DeviceBuffer::<f32>::zeros(gpu, meter, st.plan.state_len)?;
        let mut states_rev = DeviceBuffer::<f32>::zeros(gpu, meter, st.plan.state_len)?;
        let st_ref: &Staged<T> = st;
        let elapsed = gpu.time(|| {
            let a = st_ref.args;
            let p = &st_ref.plan;
            let ks = &st_ref.kernels;
            st_ref.launch_forward_states(gpu, &mut states_fwd)?;

            let mut b = gpu.stream().launch_builder(&ks.state_bwd);
            b.arg(st_ref.q.slice())
                .arg(out.slice())
                .arg(d_out.slice())
                .arg(den.slice())
                .arg(states_rev.slice_mut());
            a.push_chunk_scalars(&mut b);
            // SAFETY: arguments match cc_state_bwd's parameters; extents as for the forward.
            unsafe {
                launch_chunk_kernel(b, gpu, p.grid_key_tiles, p.smem_state_bwd, "cc_state_bwd")
            }?;
            st_ref.launch_scan(gpu, &mut states_rev, true)?;

            for (kernel, name, states, grad, shared) in [
                (&ks.dq, "cc_dq", &states_fwd, &mut dq, p.smem_dq),
                (&ks.dk, "cc_dk", &states_rev, &mut dk, p.smem_dk),
            ] {
                let mut b = gpu.stream().launch_builder(kernel);
                b.arg(st_ref.q.slice())
                    .arg(st_ref.k.slice())
                    .arg(st_ref.v.slice())
                    .arg(out.slice())
                    .arg(d_out.slice())
                    .arg(den.slice())
                    .arg(states.slice())
                    .arg(grad.slice_mut());
                a.push_chunk_scalars(&mut b);
                // SAFETY: arguments match cc_dq / cc_dk (same parameter list); dq, dk hold
                // B·H·N·D elements, the rest as for the forward.
                unsafe { launch_chunk_kernel(b, gpu, p.grid_key_tiles, shared, name) }?;
            }

            let mut b = gpu.stream().launch_builder(&ks.dv);
            b.arg(st_ref.q.slice())
                .arg(st_ref.k.slice())
                .arg(d_out.slice())
                .arg(den.slice())
                .arg(states_rev.slice())
                .arg(dv.slice_mut());
            a.push_chunk_scalars(&mut b);
            // SAFETY: arguments match cc_dv's parameters; dv holds B·H·N·M elements.
            unsafe { launch_chunk_kernel(b, gpu, p.grid_value_tiles, p.smem_dv, "cc_dv") }
        })?;
        drop(states_fwd);
        drop(states_rev);
        let device_bytes = st.work_meter.peak();
        st.grads = Some([dq, dk, dv]);
        Ok(RunStats {
            elapsed,
            device_bytes: Some(device_bytes),
        })
    }

    fn output(&mut self) -> Result<Tensor, AttnError> {
        let name = self.info.name.clone();
        let st = self.staged_mut("output")?;
        let out = st
            .out
            .as_ref()
            .ok_or_else(|| AttnError::State(format!("{name}: no forward has run")))?;
        staged::download_output(&st.problem.shape, out)
    }

    fn grads(&mut self) -> Result<Grads, AttnError> {
        let name = self.info.name.clone();
        let st = self.staged_mut("grads")?;
        let [dq, dk, dv] = st
            .grads
            .as_ref()
            .ok_or_else(|| AttnError::State(format!("{name}: no backward has run")))?;
        staged::download_grads(&st.problem.shape, dq, dk, dv)
    }

    fn release(&mut self) {
        self.staged = None;
    }

    fn flush_cache(&mut self) -> Result<(), AttnError> {
        gpu()?.flush_l2()
    }
}
