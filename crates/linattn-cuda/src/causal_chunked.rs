//! `{cuda,sim}/causal_chunked/{f16,bf16}`: causal linear attention in chunks of 64 tokens on tensor
//! cores (SPEC §3 "chunkwise"), with the memory-efficient backward of SPEC §4.
//!
//! The math, the three-pass schedule, the fragment layouts and the precision choices are
//! documented at the top of `kernels/causal_chunked.cu`. In short:
//! * pass 1 (`cc_forward_state`): per chunk, ΔS = Σ λ^{L−1−j} k̃_j v_jᵀ and Δz (fp32, tensor cores);
//! * pass 2 (`cc_scan`): exclusive scan over chunks, in place: the state entering each chunk;
//! * pass 3 (`cc_forward`): per chunk, O = (intra masked q̃k̃ᵀ v + inter q̃ S⁰) / den.
//!
//! The backward: passes 1–2 again (k̃ split hi + lo for accuracy), `cc_backward_go` (the
//! forward once more on those states, writing only G·O from the fp32 O, for gd: normalised
//! maps), `cc_backward_state` + reverse scan (R⁰, r⁰), then `cc_backward_dq`, `cc_backward_dk`, `cc_backward_dv`.
//!
//! Every pass runs `N/64 · B·H · (M or D)/64` CTAs, so B·H = 16 fills an H100 at any N ≥ 1k;
//! the cost is a workspace of one fp32 state per chunk, `N/64 · D·(M+1) · 4` bytes per head
//! (two of them in the backward: S⁰ and the reverse R⁰), plus, in the backward, `N · M/64`
//! fp32 per head of G·O partials. The forward keeps `den` (N fp32 per head) next to O for
//! the backward; no per-token state is ever stored.
//!
//! D and M must each be 64 or 128 (compile-time specialised); the fused maps are elu+1, relu
//! and identity; decay λ is a kernel argument. The kernels run on the PTX simulator in the
//! tests (`tests/forms.rs`) and on a GPU where one exists.

use std::sync::Arc;

use linattn_core::{
    check_linear_form, Algorithm, AttnError, Backend, BackendInfo, BackwardKind, FeatureMap, Form,
    Grads, Inputs, Precision, Problem, RunStats, Shape, Tensor, Unsupported,
};

use crate::args;
use crate::executor::{Executor, Kernel, KernelArg, Launch, Platform};
use crate::memory::{DeviceBuffer, MemoryMeter, StorageElem};
use crate::runtime::{as_i32, map_define, storage_define, KernelVariant};
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
/// Largest `gridDim.y` (the B·H axis).
pub const MAX_GRID_Y: usize = 65_535;

/// The fused maps; every other map is refused (it would need the separate φ stage).
pub const FUSED_MAPS: [FeatureMap; 3] = [
    FeatureMap::EluPlusOne,
    FeatureMap::Relu,
    FeatureMap::Identity,
];

/// Kernel entry points of `causal_chunked.cu` (`cc_backward_go`: the backward's G·O pre-pass).
pub const ENTRY_POINTS: [&str; 8] = [
    "cc_forward_state",
    "cc_backward_state",
    "cc_scan",
    "cc_forward",
    "cc_backward_go",
    "cc_backward_dq",
    "cc_backward_dk",
    "cc_backward_dv",
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
    /// (NC, B·H, M/64): cc_forward_state, cc_forward, cc_backward_dv.
    pub grid_value_tiles: (u32, u32, u32),
    /// (NC, B·H, D/64): cc_backward_state, cc_backward_dq, cc_backward_dk.
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
            // cc_backward_dk: G, v tiles; q̃ slice; R⁰ slice fp32; r⁰ slice. cc_backward_dq adds k̃'s lo residue.
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

    /// A chunk kernel's launch: `THREADS` per CTA, `shared` dynamic bytes.
    fn chunk_launch(grid: (u32, u32, u32), shared: u32) -> Launch {
        Launch::new(grid, THREADS).with_shared(shared)
    }
}

// ============================================================================================
// The backends
// ============================================================================================

/// `<platform>/causal_chunked/f16` and `<platform>/causal_chunked/bf16`.
pub fn backends(platform: Platform) -> Vec<Box<dyn Backend>> {
    vec![
        Box::new(ChunkedBackend::<half::f16>::new(platform)),
        Box::new(ChunkedBackend::<half::bf16>::new(platform)),
    ]
}

/// Backend name for a platform and storage precision.
pub fn backend_name(platform: Platform, precision: Precision) -> String {
    format!("{platform}/causal_chunked/{precision}")
}

/// Causal chunked linear attention with `T` (f16 or bf16) storage.
pub struct ChunkedBackend<T: StorageElem> {
    info: BackendInfo,
    platform: Platform,
    staged: Option<Staged<T>>,
}

impl<T: StorageElem> ChunkedBackend<T> {
    pub fn new(platform: Platform) -> Self {
        ChunkedBackend {
            info: BackendInfo {
                name: backend_name(platform, T::PRECISION),
                device: platform.device_kind(),
                precision: T::PRECISION,
                algorithm: Algorithm::Linear(Form::Chunked),
                backward: Some(BackwardKind::Efficient),
            },
            platform,
            staged: None,
        }
    }

    fn staged_mut(&mut self, what: &str) -> Result<&mut Staged<T>, AttnError> {
        self.staged.as_mut().ok_or_else(|| {
            AttnError::State(format!("{}: stage inputs before {what}", self.info.name))
        })
    }
}

/// The platform is usable and its device is sm_80+ (bf16 mma and cvt).
fn device_ready(platform: Platform) -> Result<(), Unsupported> {
    platform.available()?;
    let exec = platform.executor()?;
    let info = exec.info();
    let (major, minor) = info.compute_capability;
    if major < 8 {
        return Err(Unsupported::Unavailable(format!(
            "{} is sm_{major}{minor}; the chunked kernels need sm_80 or newer \
             (mma.m16n8k16 with bf16)",
            info.name
        )));
    }
    Ok(())
}

/// The entry points of one program, resolved (compiled and loaded) at staging, so timed runs
/// never include NVRTC.
struct Kernels {
    state_fwd: Kernel,
    state_bwd: Kernel,
    scan: Kernel,
    forward: Kernel,
    forward_go: Kernel,
    dq: Kernel,
    dk: Kernel,
    dv: Kernel,
}

impl Kernels {
    fn load(
        exec: &Arc<dyn Executor>,
        variant: &KernelVariant,
        plan: &LaunchPlan,
    ) -> Result<Self, AttnError> {
        let kernel = |entry: &str, shared: u32| -> Result<Kernel, AttnError> {
            let k = exec.kernel(variant, entry)?;
            // The attribute covers static + dynamic bytes over 48 KiB: set it whenever the
            // kernel takes dynamic shared memory, whatever its size.
            if shared > 0 {
                exec.allow_dynamic_shared(&k, shared)?;
            }
            Ok(k)
        };
        Ok(Kernels {
            state_fwd: kernel("cc_forward_state", plan.smem_state_fwd)?,
            state_bwd: kernel("cc_backward_state", plan.smem_state_bwd)?,
            scan: kernel("cc_scan", 0)?,
            forward: kernel("cc_forward", plan.smem_forward)?,
            forward_go: kernel("cc_backward_go", plan.smem_forward)?,
            dq: kernel("cc_backward_dq", plan.smem_dq)?,
            dk: kernel("cc_backward_dk", plan.smem_dk)?,
            dv: kernel("cc_backward_dv", plan.smem_dv)?,
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
    /// The scalars that end the parameter list of `cc_forward_state`, `cc_backward_state`, `cc_backward_dq`,
    /// `cc_backward_dk` and `cc_backward_dv`: n, num_chunks, log2_decay, map.
    fn chunk_scalars(&self) -> [KernelArg; 4] {
        args![self.n, self.num_chunks, self.log2_decay, self.map]
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

struct Staged<T: StorageElem> {
    exec: Arc<dyn Executor>,
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
    /// A chunk kernel with its leading buffer arguments, then the chunk scalars.
    fn launch_chunk(
        &self,
        kernel: &Kernel,
        grid: (u32, u32, u32),
        shared: u32,
        buffers: &[KernelArg],
    ) -> Result<(), AttnError> {
        let mut list = buffers.to_vec();
        list.extend(self.args.chunk_scalars());
        self.exec
            .launch(kernel, &LaunchPlan::chunk_launch(grid, shared), &list)
    }

    /// Pass 1 + pass 2 of the forward direction: S⁰, z⁰ of every chunk into `states`.
    /// `split`: k̃ as hi + lo 16-bit operands (the backward's S⁰, z⁰; see `cc_forward_state`).
    fn launch_forward_states(
        &self,
        states: &DeviceBuffer<f32>,
        split: bool,
    ) -> Result<(), AttnError> {
        let p = &self.plan;
        // k, v hold B·H·N·(D|M) elements and states B·H·NC·stride.
        self.launch_chunk(
            &self.kernels.state_fwd,
            p.grid_value_tiles,
            p.smem_state_fwd,
            &args![&self.k, &self.v, states, split],
        )?;
        self.launch_scan(states, false)
    }

    fn launch_scan(&self, states: &DeviceBuffer<f32>, reverse: bool) -> Result<(), AttnError> {
        let a = self.args;
        // states holds B·H·NC·stride floats.
        self.exec.launch(
            &self.kernels.scan,
            &Launch::new(self.plan.grid_scan, SCAN_THREADS),
            &args![states, a.num_chunks, a.chunk_decay, reverse],
        )
    }
}

impl<T: StorageElem> Backend for ChunkedBackend<T> {
    fn info(&self) -> &BackendInfo {
        &self.info
    }

    fn supports(&self, problem: &Problem) -> Result<(), Unsupported> {
        check_problem(&self.info, problem)?;
        device_ready(self.platform)
    }

    fn stage(&mut self, problem: &Problem, inputs: &Inputs) -> Result<(), AttnError> {
        self.staged = None;
        self.supports(problem)?;
        inputs.validate_for(problem)?;
        let shape = problem.shape;
        let plan = LaunchPlan::new(&shape)?;
        let map = map_code(&problem.map, T::PRECISION)?;
        let args = ScalarArgs::new(problem, &plan, map)?;
        let exec = self.platform.executor()?;
        let variant = variant(T::PRECISION, shape.dk, shape.dv)?;
        let kernels = Kernels::load(&exec, &variant, &plan)?;
        let input_meter = MemoryMeter::new();
        let DeviceInputs { q, k, v, d_out } = DeviceInputs::upload(&exec, &input_meter, inputs)?;
        exec.synchronize()?;
        self.staged = Some(Staged {
            exec,
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
        let st = self.staged_mut("run_forward")?;
        // Results of an earlier run go first, so the peak counts this run alone.
        st.out = None;
        st.den = None;
        st.grads = None;
        st.work_meter.reset_peak();
        let shape = st.problem.shape;
        let exec = st.exec.clone();
        let out = DeviceBuffer::<T>::uninit(&exec, &st.work_meter, shape.v_len()?)?;
        let den = DeviceBuffer::<f32>::uninit(&exec, &st.work_meter, shape.bh() * shape.seq)?;
        let states = DeviceBuffer::<f32>::uninit(&exec, &st.work_meter, st.plan.state_len)?;
        let st_ref: &Staged<T> = st;
        let elapsed = exec.time(&mut || {
            st_ref.launch_forward_states(&states, false)?;
            let a = st_ref.args;
            let p = &st_ref.plan;
            // q, k: B·H·N·D; v, out: B·H·N·M; den: B·H·N; states: state_len.
            exec.launch(
                &st_ref.kernels.forward,
                &LaunchPlan::chunk_launch(p.grid_value_tiles, p.smem_forward),
                &args![
                    &st_ref.q,
                    &st_ref.k,
                    &st_ref.v,
                    &states,
                    &out,
                    &den,
                    a.n,
                    a.num_chunks,
                    a.log2_decay,
                    a.eps,
                    a.map
                ],
            )
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
        let name = self.info.name.clone();
        let st = self.staged_mut("run_backward")?;
        let (Some(_), Some(den)) = (st.out.as_ref(), st.den.as_ref()) else {
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
        let exec = st.exec.clone();
        let normalised = st.problem.map != FeatureMap::Identity;
        let dq = DeviceBuffer::<T>::uninit(&exec, meter, shape.qk_len()?)?;
        let dk = DeviceBuffer::<T>::uninit(&exec, meter, shape.qk_len()?)?;
        let dv = DeviceBuffer::<T>::uninit(&exec, meter, shape.v_len()?)?;
        let states_fwd = DeviceBuffer::<f32>::uninit(&exec, meter, st.plan.state_len)?;
        let states_rev = DeviceBuffer::<f32>::uninit(&exec, meter, st.plan.state_len)?;
        // G·O from the fp32 O, one partial per 64-wide slice of M (normalised maps only: the
        // identity map has no gd and the kernels never read it).
        let go_len = if normalised {
            shape.bh() * shape.seq * (shape.dv / TILE)
        } else {
            0
        };
        let go_parts = DeviceBuffer::<f32>::uninit(&exec, meter, go_len)?;
        let st_ref: &Staged<T> = st;
        let elapsed = exec.time(&mut || {
            let p = &st_ref.plan;
            let ks = &st_ref.kernels;
            let a = st_ref.args;
            let (q, k, v) = (&st_ref.q, &st_ref.k, &st_ref.v);
            st_ref.launch_forward_states(&states_fwd, true)?;
            if normalised {
                // q, k: B·H·N·D; v, d_out: B·H·N·M; go_parts: B·H·N·M/64.
                exec.launch(
                    &ks.forward_go,
                    &LaunchPlan::chunk_launch(p.grid_value_tiles, p.smem_forward),
                    &args![
                        q,
                        k,
                        v,
                        &states_fwd,
                        d_out,
                        &go_parts,
                        a.n,
                        a.num_chunks,
                        a.log2_decay,
                        a.eps,
                        a.map
                    ],
                )?;
            }
            st_ref.launch_chunk(
                &ks.state_bwd,
                p.grid_key_tiles,
                p.smem_state_bwd,
                &args![q, d_out, &go_parts, den, &states_rev],
            )?;
            st_ref.launch_scan(&states_rev, true)?;
            // cc_backward_dq and cc_backward_dk take the same parameter list; dq, dk hold B·H·N·D elements.
            for (kernel, states, grad, shared) in [
                (&ks.dq, &states_fwd, &dq, p.smem_dq),
                (&ks.dk, &states_rev, &dk, p.smem_dk),
            ] {
                st_ref.launch_chunk(
                    kernel,
                    p.grid_key_tiles,
                    shared,
                    &args![q, k, v, d_out, &go_parts, den, states, grad],
                )?;
            }
            st_ref.launch_chunk(
                &ks.dv,
                p.grid_value_tiles,
                p.smem_dv,
                &args![q, k, d_out, den, &states_rev, &dv],
            )
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
        match &self.staged {
            Some(staged) => staged.exec.flush_l2(),
            None => Ok(()),
        }
    }
}
