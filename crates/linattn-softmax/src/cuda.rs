//! `{cuda,sim}/softmax/{f32,f16}`: naive softmax attention on any
//! [`Executor`](linattn_cuda::Executor) — five strided-batched GEMMs over the B·H sequences
//! and the row kernels of `kernels/softmax.cu`.
//!
//! Per (batch, head) the N×N score matrix is materialised in the storage precision (fp16 for
//! the f16 backend, as a naive fp16 attention stores it), with fp32 GEMM accumulation and fp32
//! softmax math. The probabilities are kept after the forward for the backward.
//!
//! The GEMMs ([`BatchedGemm`]) run on one of two engines ([`GemmEngine`]), both driven by the
//! same plans (`gemm_plan.rs`):
//! * [`GemmEngine::Cublas`] — cuBLAS `GemmStridedBatchedEx`, on `cuda` only and its default
//!   there (see `cublas.rs` for how it shares the executor's stream);
//! * [`GemmEngine::Kernel`] — `sm_gemm` of `kernels/softmax.cu`, a shared-memory tiled
//!   batched GEMM launched through the executor: what `sim/softmax` runs, and selectable on
//!   `cuda` with [`CudaSoftmaxBackend::with_gemm`] (named `cuda/softmax/<p>+gemmkernel`).
//!
//! So the simulator verifies everything but the cuBLAS call mapping: the plans, the row
//! kernels, the buffer sizes and the pass structure.
//!
//! Device memory per run, beyond the staged inputs:
//! * forward: P (`B·H·N²` elements) and O;
//! * backward: P and O (still held), dP/dS (`B·H·N²`), dQ, dK, dV.
//!
//! Both are checked against the executor's free memory before anything is allocated, so a
//! problem that cannot fit is a typed `AttnError::OutOfMemory` and a sweep goes on. cuBLAS'
//! own workspace is allocated by cuBLAS and not counted.

use crate::cublas::Cublas;
use crate::gemm_plan::RowMajorGemm;
use crate::validate::{validate_inputs, NeedGrad};
use linattn_core::{
    Algorithm, AttnError, Backend, BackendInfo, BackwardKind, DeviceKind, Grads, Inputs, Precision,
    Problem, RunStats, Shape, Tensor, TensorRole, Unsupported,
};
use linattn_cuda::args;
use linattn_cuda::executor::{Executor, Kernel, Launch, Platform};
use linattn_cuda::memory::{DeviceBuffer, MemoryMeter, StorageElem};
use linattn_cuda::runtime::{as_i32, storage_define, KernelVariant};
use std::marker::PhantomData;
use std::sync::Arc;

pub use crate::cublas::cublas_available;

/// The kernel source, embedded at build time.
pub const SOURCE: &str = include_str!("../../../kernels/softmax.cu");
const SOURCE_NAME: &str = "softmax.cu";
const FORWARD_ENTRY: &str = "sm_forward_rows";
const BACKWARD_ENTRY: &str = "sm_backward_rows";
const GEMM_ENTRY: &str = "sm_gemm";
/// Threads per row block: enough to stream long rows, a multiple of 32 (the reductions).
const MAX_THREADS_PER_ROW: usize = 256;
/// Largest row count one launch covers (grid.x limit).
const MAX_ROWS: usize = i32::MAX as usize;
/// `sm_gemm`: output tile edge and threads per block (SM_GEMM_TILE, SM_GEMM_THREADS).
const GEMM_TILE: usize = 64;
const GEMM_THREADS: u32 = 256;
/// grid.y limit; `sm_gemm` loops over batches beyond it.
const MAX_GRID_Y: usize = 65_535;

/// The softmax kernels (rows and GEMM) for one storage precision.
pub fn kernel_variant(precision: Precision) -> Result<KernelVariant, Unsupported> {
    let (name, value) = storage_define(precision)?;
    if precision == Precision::BF16 {
        return Err(Unsupported::Problem(
            "the softmax baseline has f32 and f16 backends only".into(),
        ));
    }
    Ok(KernelVariant::new(SOURCE_NAME, SOURCE)
        .define(name, value)
        .entries(&[FORWARD_ENTRY, BACKWARD_ENTRY, GEMM_ENTRY])
        .hot())
}

/// Every variant of `kernels/softmax.cu` the backends use (f32 and f16 storage), for the
/// compile-all tests.
pub fn kernel_variants() -> Vec<KernelVariant> {
    [Precision::F32, Precision::F16]
        .into_iter()
        .filter_map(|p| kernel_variant(p).ok())
        .collect()
}

/// Bytes one pass allocates on the device beyond the staged inputs (see the module docs).
pub fn device_bytes_needed(
    shape: &Shape,
    precision: Precision,
    backward: bool,
) -> Result<u64, AttnError> {
    let overflow = || AttnError::SizeOverflow(format!("softmax score matrices for {shape}"));
    let elem = precision.bytes() as u64;
    let seq = shape.seq as u64;
    let square = (shape.bh() as u64)
        .checked_mul(seq)
        .and_then(|x| x.checked_mul(seq))
        .ok_or_else(overflow)?;
    let (qk, v) = (shape.qk_len()? as u64, shape.v_len()? as u64);
    let elements = if backward {
        // P, dS, O, dQ, dK, dV
        square
            .checked_mul(2)
            .and_then(|x| x.checked_add(2 * v + 2 * qk))
    } else {
        square.checked_add(v)
    };
    elements
        .and_then(|x| x.checked_mul(elem))
        .ok_or_else(overflow)
}

/// `t` converted to the storage type; a value that the conversion turns into ±Inf (beyond
/// 65504 for f16) is refused, naming the tensor, rather than becoming a NaN output.
pub fn to_storage<T: StorageElem>(t: &Tensor, role: TensorRole) -> Result<Vec<T>, AttnError> {
    t.data()
        .iter()
        .enumerate()
        .map(|(index, &x)| {
            let stored = T::from_f64(x);
            if stored.to_f64().is_finite() {
                Ok(stored)
            } else {
                Err(AttnError::InvalidArgument(format!(
                    "{} holds {x} at flat index {index}, outside the range of {}",
                    role.name(),
                    T::PRECISION
                )))
            }
        })
        .collect()
}

/// Which implementation carries out the batched GEMMs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GemmEngine {
    /// cuBLAS strided-batched GEMMs: `cuda` only, its default.
    Cublas,
    /// `sm_gemm` of `kernels/softmax.cu`, launched through the executor: any
    /// platform, the simulator's only engine.
    Kernel,
}

impl GemmEngine {
    /// cuBLAS on a GPU, the GEMM kernel on the simulator.
    pub fn default_for(platform: Platform) -> GemmEngine {
        match platform {
            Platform::Cuda => GemmEngine::Cublas,
            Platform::Sim => GemmEngine::Kernel,
        }
    }

    /// `cublas` or `gemmkernel` (the backend-name suffix when not the platform's default).
    pub fn label(self) -> &'static str {
        match self {
            GemmEngine::Cublas => "cublas",
            GemmEngine::Kernel => "gemmkernel",
        }
    }

    /// Whether the engine can exist on `platform` at all (independent of the machine).
    pub fn check_platform(self, platform: Platform) -> Result<(), Unsupported> {
        match (self, platform) {
            (GemmEngine::Cublas, Platform::Sim) => Err(Unsupported::Problem(
                "cuBLAS runs on the cuda platform only; the simulator uses the GEMM kernel".into(),
            )),
            _ => Ok(()),
        }
    }

    /// Whether this machine can run the engine on `platform` (cuBLAS needs its library).
    fn available_on(self, platform: Platform) -> Result<(), Unsupported> {
        self.check_platform(platform)?;
        match self {
            GemmEngine::Cublas => cublas_available(),
            GemmEngine::Kernel => Ok(()),
        }
    }
}

/// What a [`BatchedGemm`] holds for its engine.
enum Engine {
    Cublas(Cublas),
    Kernel(Kernel),
}

/// Strided-batched row-major GEMMs of storage type `T` on one executor: `C_z = op(A_z)·op(B_z)`
/// as a [`RowMajorGemm`] plan states, on the engine chosen at construction.
pub struct BatchedGemm<T> {
    exec: Arc<dyn Executor>,
    engine: Engine,
    /// Most blocks along grid.y (`sm_gemm` loops over the batches beyond).
    max_grid_y: usize,
    _storage: PhantomData<T>,
}

impl<T: StorageElem> BatchedGemm<T> {
    /// Loads `sm_gemm` or opens the cuBLAS handle (cuBLAS only on `cuda`).
    pub fn new(exec: &Arc<dyn Executor>, engine: GemmEngine) -> Result<Self, AttnError> {
        engine.available_on(exec.platform())?;
        let engine = match engine {
            GemmEngine::Cublas => Engine::Cublas(Cublas::new()?),
            GemmEngine::Kernel => {
                Engine::Kernel(exec.kernel(&kernel_variant(T::PRECISION)?, GEMM_ENTRY)?)
            }
        };
        Ok(BatchedGemm {
            exec: exec.clone(),
            engine,
            max_grid_y: MAX_GRID_Y,
            _storage: PhantomData,
        })
    }

    /// Caps grid.y of `sm_gemm` below the device's 65535, so each block loops over
    /// more batches: lets a test cover that loop without launching 65536 batches.
    pub fn with_max_grid_y(mut self, blocks: usize) -> Self {
        self.max_grid_y = blocks.clamp(1, MAX_GRID_Y);
        self
    }

    pub fn engine(&self) -> GemmEngine {
        match self.engine {
            Engine::Cublas(_) => GemmEngine::Cublas,
            Engine::Kernel(_) => GemmEngine::Kernel,
        }
    }

    /// `C_z = op(A_z)·op(B_z)` for `z < batch`; `what` names the product in errors. The
    /// buffers must hold `batch` matrices of the plan's strides (checked) and be allocated on
    /// this GEMM's executor (not checkable: see the SAFETY note inside).
    pub fn run(
        &self,
        plan: RowMajorGemm,
        batch: usize,
        a: &DeviceBuffer<T>,
        b: &DeviceBuffer<T>,
        c: &mut DeviceBuffer<T>,
        what: &str,
    ) -> Result<(), AttnError> {
        if plan.m < 1 || plan.n < 1 || plan.k < 1 || batch == 0 {
            return Err(AttnError::InvalidArgument(format!(
                "{what}: empty GEMM {plan:?} × {batch}"
            )));
        }
        for (name, buffer, stride) in [
            ("A", a, plan.stride_a()),
            ("B", b, plan.stride_b()),
            ("C", &*c, plan.stride_c()),
        ] {
            let needed = (stride as u128) * (batch as u128);
            if (buffer.len() as u128) < needed {
                return Err(AttnError::InvalidArgument(format!(
                    "{what}: {name} holds {} elements, {batch} matrices of {stride} need {needed}",
                    buffer.len()
                )));
            }
        }
        let batch_i32 = as_i32("GEMM batch B·H", batch)?;
        match &self.engine {
            // SAFETY: the buffers are live (borrowed) and hold `batch` matrices of the plan's
            // strides (checked above). That they are allocations of the CUDA executor (`new`
            // checked this engine's executor is) cannot be checked: `DeviceBuffer` does not say
            // which executor owns it. The backend allocates every buffer on its one executor;
            // the seam's own `launch` trusts addresses the same way.
            Engine::Cublas(cublas) => unsafe {
                cublas.gemm_strided_batched(
                    &plan,
                    batch_i32,
                    T::PRECISION,
                    a.address(),
                    b.address(),
                    c.address(),
                    what,
                )
            },
            Engine::Kernel(kernel) => {
                let tiles =
                    (plan.m as usize).div_ceil(GEMM_TILE) * (plan.n as usize).div_ceil(GEMM_TILE);
                let tiles = u32::try_from(tiles)
                    .ok()
                    .filter(|&t| t <= i32::MAX as u32)
                    .ok_or_else(|| {
                        AttnError::SizeOverflow(format!("{what}: {tiles} output tiles of 64×64"))
                    })?;
                let grid = (tiles, batch.min(self.max_grid_y) as u32, 1);
                self.exec.launch(
                    kernel,
                    &Launch::new(grid, GEMM_THREADS),
                    &args![
                        a,
                        b,
                        &*c,
                        plan.m,
                        plan.n,
                        plan.k,
                        plan.a_transposed,
                        plan.b_transposed,
                        plan.stride_a(),
                        plan.stride_b(),
                        plan.stride_c(),
                        batch_i32,
                    ],
                )
            }
        }
    }
}

/// Staged operands on the device.
struct Staged<T> {
    exec: Arc<dyn Executor>,
    problem: Problem,
    q: DeviceBuffer<T>,
    k: DeviceBuffer<T>,
    v: DeviceBuffer<T>,
    d_out: Option<DeviceBuffer<T>>,
}

/// Results of the last forward (P is kept for the backward) and backward.
struct Results<T> {
    probs: DeviceBuffer<T>,
    out: DeviceBuffer<T>,
    grads: Option<[DeviceBuffer<T>; 3]>,
}

/// The softmax baseline for storage type `T` (f32 or `half::f16`) on one platform.
pub struct CudaSoftmaxBackend<T> {
    info: BackendInfo,
    platform: Platform,
    engine: GemmEngine,
    variant: Option<KernelVariant>,
    gemm: Option<BatchedGemm<T>>,
    /// Staged inputs are counted here, outputs and workspace in `run_meter`.
    input_meter: MemoryMeter,
    run_meter: MemoryMeter,
    staged: Option<Staged<T>>,
    results: Option<Results<T>>,
}

/// `<platform>/softmax/f32`.
pub fn f32_backend(platform: Platform) -> CudaSoftmaxBackend<f32> {
    CudaSoftmaxBackend::new(platform)
}

/// `<platform>/softmax/f16`.
pub fn f16_backend(platform: Platform) -> CudaSoftmaxBackend<half::f16> {
    CudaSoftmaxBackend::new(platform)
}

/// `<platform>/softmax/{f32,f16}` with the platform's default GEMM engine.
pub fn backends(platform: Platform) -> Vec<Box<dyn Backend>> {
    vec![
        Box::new(f32_backend(platform)),
        Box::new(f16_backend(platform)),
    ]
}

impl<T: StorageElem> CudaSoftmaxBackend<T> {
    /// `<platform>/softmax/<precision>` with the platform's default GEMM engine.
    pub fn new(platform: Platform) -> Self {
        Self::build(platform, GemmEngine::default_for(platform))
    }

    /// With a chosen GEMM engine; a non-default one is named in the backend name
    /// (`cuda/softmax/f32+gemmkernel`). cuBLAS on the simulator is refused.
    pub fn with_gemm(platform: Platform, engine: GemmEngine) -> Result<Self, Unsupported> {
        engine.check_platform(platform)?;
        Ok(Self::build(platform, engine))
    }

    fn build(platform: Platform, engine: GemmEngine) -> Self {
        let precision = T::PRECISION;
        let suffix = if engine == GemmEngine::default_for(platform) {
            String::new()
        } else {
            format!("+{}", engine.label())
        };
        CudaSoftmaxBackend {
            info: BackendInfo {
                name: format!("{platform}/softmax/{}{suffix}", precision.label()),
                device: DeviceKind::Cuda,
                precision,
                algorithm: Algorithm::Softmax,
                backward: Some(BackwardKind::Autograd),
            },
            platform,
            engine,
            variant: kernel_variant(precision).ok(),
            gemm: None,
            input_meter: MemoryMeter::new(),
            run_meter: MemoryMeter::new(),
            staged: None,
            results: None,
        }
    }

    pub fn platform(&self) -> Platform {
        self.platform
    }

    pub fn gemm_engine(&self) -> GemmEngine {
        self.engine
    }

    fn variant(&self) -> Result<&KernelVariant, AttnError> {
        self.variant.as_ref().ok_or_else(|| {
            AttnError::Unsupported(Unsupported::Problem(format!(
                "{}: no softmax kernel for this precision",
                self.info.name
            )))
        })
    }

    /// Refuses, before allocating anything, a pass whose buffers exceed free device memory.
    fn ensure_fits(
        &self,
        exec: &Arc<dyn Executor>,
        shape: &Shape,
        backward: bool,
    ) -> Result<(), AttnError> {
        let needed = device_bytes_needed(shape, T::PRECISION, backward)?;
        // Buffers this backend already holds for the run are given back or reused.
        let held = self.run_meter.live();
        let (free, total) = exec.memory_info()?;
        if needed > free.saturating_add(held) {
            return Err(AttnError::OutOfMemory {
                device: exec.info().name.clone(),
                requested_bytes: needed,
                detail: format!(
                    "{} {}: B·H·N² score matrices; {free} bytes free of {total}",
                    self.info.name,
                    if backward { "backward" } else { "forward" }
                ),
            });
        }
        Ok(())
    }

    fn staged(&self) -> Result<&Staged<T>, AttnError> {
        self.staged
            .as_ref()
            .ok_or_else(|| AttnError::State(format!("{}: no inputs staged", self.info.name)))
    }

    /// What a pass does before allocating: checks its buffers fit, loads the row kernel
    /// `entry` and the GEMM engine, and restarts the run meter's peak. Returns the kernel and
    /// the meter the pass allocates through.
    fn begin_pass(
        &mut self,
        exec: &Arc<dyn Executor>,
        shape: &Shape,
        backward: bool,
        entry: &str,
    ) -> Result<(Kernel, MemoryMeter), AttnError> {
        self.ensure_fits(exec, shape, backward)?;
        let rows_kernel = exec.kernel(self.variant()?, entry)?;
        if self.gemm.is_none() {
            self.gemm = Some(BatchedGemm::new(exec, self.engine)?);
        }
        let meter = self.run_meter.clone();
        meter.reset_peak();
        Ok((rows_kernel, meter))
    }
}

/// Elements of the `B·H` score (or score-gradient) matrices, `N × N` each.
fn score_len(shape: &Shape) -> Result<usize, AttnError> {
    shape
        .bh()
        .checked_mul(shape.seq)
        .and_then(|x| x.checked_mul(shape.seq))
        .ok_or_else(|| AttnError::SizeOverflow(format!("softmax score matrices for {shape}")))
}

/// A pass's time and the peak of the device memory it allocated.
fn device_stats(elapsed: std::time::Duration, meter: &MemoryMeter) -> RunStats {
    RunStats {
        elapsed,
        device_bytes: Some(meter.peak()),
    }
}

/// Sizes every launch and GEMM of one problem needs, as the `int`s the kernels take.
struct Dims {
    seq: i32,
    dk: i32,
    dv: i32,
    batch: usize,
    rows: u32,
    causal: bool,
    scale: f32,
}

impl Dims {
    fn of(problem: &Problem) -> Result<Dims, AttnError> {
        let shape = problem.shape;
        let rows = shape.bh().checked_mul(shape.seq).filter(|&r| r <= MAX_ROWS);
        let rows = rows.ok_or_else(|| {
            AttnError::SizeOverflow(format!(
                "B·H·N = {}·{} rows exceed the {MAX_ROWS} blocks of one launch",
                shape.bh(),
                shape.seq
            ))
        })?;
        as_i32("B·H", shape.bh())?;
        Ok(Dims {
            seq: as_i32("N", shape.seq)?,
            dk: as_i32("D", shape.dk)?,
            dv: as_i32("M", shape.dv)?,
            batch: shape.bh(),
            rows: rows as u32,
            causal: problem.causality.is_causal(),
            scale: (1.0 / (shape.dk as f64).sqrt()) as f32,
        })
    }

    /// One block per row of `[B·H·N, N]`, a multiple of 32 threads up to 256.
    fn row_launch(&self) -> Launch {
        let threads = (self.seq as usize)
            .div_ceil(32)
            .clamp(1, MAX_THREADS_PER_ROW / 32)
            * 32;
        Launch::new((self.rows, 1, 1), threads as u32)
    }
}

impl<T: StorageElem> Backend for CudaSoftmaxBackend<T> {
    fn info(&self) -> &BackendInfo {
        &self.info
    }

    fn supports(&self, problem: &Problem) -> Result<(), Unsupported> {
        self.platform.available()?;
        self.engine.available_on(self.platform)?;
        if self.variant.is_none() {
            return Err(Unsupported::Problem(format!(
                "{}: no kernel for {}",
                self.info.name,
                T::PRECISION
            )));
        }
        problem
            .shape
            .validate()
            .map_err(|e| Unsupported::Problem(e.to_string()))?;
        Dims::of(problem).map_err(|e| Unsupported::Problem(e.to_string()))?;
        Ok(())
    }

    fn stage(&mut self, problem: &Problem, inputs: &Inputs) -> Result<(), AttnError> {
        self.release();
        self.supports(problem)?;
        validate_inputs(problem, inputs, NeedGrad::No)?;
        let exec = self.platform.executor()?;
        let meter = &self.input_meter;
        let upload = |t: &Tensor, role: TensorRole| {
            DeviceBuffer::<T>::upload(&exec, meter, &to_storage::<T>(t, role)?)
        };
        let staged = Staged {
            problem: *problem,
            q: upload(&inputs.q, TensorRole::Q)?,
            k: upload(&inputs.k, TensorRole::K)?,
            v: upload(&inputs.v, TensorRole::V)?,
            d_out: match &inputs.d_out {
                Some(g) => Some(upload(g, TensorRole::DOut)?),
                None => None,
            },
            exec: exec.clone(),
        };
        exec.synchronize()?;
        self.staged = Some(staged);
        Ok(())
    }

    fn run_forward(&mut self) -> Result<RunStats, AttnError> {
        self.platform.available()?;
        let (exec, problem) = {
            let staged = self.staged()?;
            (staged.exec.clone(), staged.problem)
        };
        let dims = Dims::of(&problem)?;
        let shape = problem.shape;
        // Give back the previous run's buffers before checking what the next one needs.
        self.results = None;
        let (forward_rows, meter) = self.begin_pass(&exec, &shape, false, FORWARD_ENTRY)?;
        // Written in full by the GEMMs and the row kernel (the simulator's initcheck proves it).
        let mut probs = DeviceBuffer::<T>::uninit(&exec, &meter, score_len(&shape)?)?;
        let mut out = DeviceBuffer::<T>::uninit(&exec, &meter, shape.v_len()?)?;
        let (staged, gemm) = match (&self.staged, &self.gemm) {
            (Some(s), Some(g)) => (s, g),
            _ => return Err(AttnError::State("forward lost its inputs".into())),
        };
        let elapsed = exec.time(&mut || {
            // q, k are [B·H, N, D], probs [B·H, N, N], v and out [B·H, N, M].
            gemm.run(
                RowMajorGemm::scores(dims.seq, dims.dk),
                dims.batch,
                &staged.q,
                &staged.k,
                &mut probs,
                "S = QKᵀ",
            )?;
            exec.launch(
                &forward_rows,
                &dims.row_launch(),
                &args![&probs, dims.seq, dims.causal, dims.scale],
            )?;
            gemm.run(
                RowMajorGemm::probs_times(dims.seq, dims.dv),
                dims.batch,
                &probs,
                &staged.v,
                &mut out,
                "O = PV",
            )
        })?;
        self.results = Some(Results {
            probs,
            out,
            grads: None,
        });
        Ok(device_stats(elapsed, &meter))
    }

    fn run_backward(&mut self) -> Result<RunStats, AttnError> {
        self.platform.available()?;
        let staged = self.staged()?;
        let (exec, problem) = (staged.exec.clone(), staged.problem);
        if staged.d_out.is_none() {
            return Err(AttnError::InvalidArgument(
                "backward needs d_out (∂L/∂O), none was staged".into(),
            ));
        }
        let dims = Dims::of(&problem)?;
        let shape = problem.shape;
        match self.results.as_mut() {
            Some(results) => results.grads = None,
            None => {
                return Err(AttnError::State(format!(
                    "{}: run_forward must come before run_backward",
                    self.info.name
                )))
            }
        }
        let (backward_rows, meter) = self.begin_pass(&exec, &shape, true, BACKWARD_ENTRY)?;
        // Each is written in full by a GEMM (d_scores then rewritten in place by the row
        // kernel).
        let mut d_scores = DeviceBuffer::<T>::uninit(&exec, &meter, score_len(&shape)?)?;
        let mut dq = DeviceBuffer::<T>::uninit(&exec, &meter, shape.qk_len()?)?;
        let mut dk = DeviceBuffer::<T>::uninit(&exec, &meter, shape.qk_len()?)?;
        let mut dv = DeviceBuffer::<T>::uninit(&exec, &meter, shape.v_len()?)?;
        let (staged, gemm, results) = match (&self.staged, &self.gemm, &mut self.results) {
            (Some(s), Some(g), Some(r)) => (s, g, r),
            _ => return Err(AttnError::State("backward lost its inputs".into())),
        };
        let d_out = staged
            .d_out
            .as_ref()
            .ok_or_else(|| AttnError::State("backward lost d_out".into()))?;
        let probs = &results.probs;
        let elapsed = exec.time(&mut || {
            // As in the forward; d_scores is [B·H, N, N] like probs.
            gemm.run(
                RowMajorGemm::probs_transposed_times(dims.seq, dims.dv),
                dims.batch,
                probs,
                d_out,
                &mut dv,
                "dV = PᵀdO",
            )?;
            gemm.run(
                RowMajorGemm::scores(dims.seq, dims.dv),
                dims.batch,
                d_out,
                &staged.v,
                &mut d_scores,
                "dP = dO Vᵀ",
            )?;
            exec.launch(
                &backward_rows,
                &dims.row_launch(),
                &args![probs, &d_scores, dims.seq, dims.causal, dims.scale],
            )?;
            gemm.run(
                RowMajorGemm::probs_times(dims.seq, dims.dk),
                dims.batch,
                &d_scores,
                &staged.k,
                &mut dq,
                "dQ = dS K",
            )?;
            gemm.run(
                RowMajorGemm::probs_transposed_times(dims.seq, dims.dk),
                dims.batch,
                &d_scores,
                &staged.q,
                &mut dk,
                "dK = dSᵀ Q",
            )
        })?;
        drop(d_scores);
        results.grads = Some([dq, dk, dv]);
        Ok(device_stats(elapsed, &meter))
    }

    fn output(&mut self) -> Result<Tensor, AttnError> {
        let shape = self.staged()?.problem.shape;
        let results = self.results.as_ref().ok_or_else(|| {
            AttnError::State(format!("{}: no output (run_forward first)", self.info.name))
        })?;
        Tensor::from_vec(shape.v_dims(), results.out.download_f64()?)
    }

    fn grads(&mut self) -> Result<Grads, AttnError> {
        let shape = self.staged()?.problem.shape;
        let grads = self
            .results
            .as_ref()
            .and_then(|r| r.grads.as_ref())
            .ok_or_else(|| {
                AttnError::State(format!(
                    "{}: no gradients (run_backward first)",
                    self.info.name
                ))
            })?;
        let [dq, dk, dv] = grads;
        Ok(Grads {
            dq: Tensor::from_vec(shape.qk_dims(), dq.download_f64()?)?,
            dk: Tensor::from_vec(shape.qk_dims(), dk.download_f64()?)?,
            dv: Tensor::from_vec(shape.v_dims(), dv.download_f64()?)?,
        })
    }

    fn release(&mut self) {
        self.results = None;
        self.staged = None;
    }

    fn flush_cache(&mut self) -> Result<(), AttnError> {
        match &self.staged {
            Some(staged) => staged.exec.flush_l2(),
            None => Ok(()),
        }
    }
}
