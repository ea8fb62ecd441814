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
//!   `cuda` with [`with_gemm`] (named `cuda/softmax+gemmkernel/<p>`).
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

use crate::validate::{validate_inputs, NeedGrad};
use linattn_core::{
    Algorithm, AttnError, Backend, BackendInfo, BackwardKind, Inputs, Precision, Problem, Shape,
    Tensor, TensorRole, Unsupported,
};
use linattn_cuda::executor::gemm::{GemmCall, RowMajorGemm};
use linattn_cuda::executor::{Executor, Kernel, Launch, Platform};
use linattn_cuda::form::{DeviceForm, DeviceGrads, FormInfo, Forward, Run, Timed};
use linattn_cuda::memory::{DeviceBuffer, MemoryMeter, StorageElem};
use linattn_cuda::params::{launch_kernel, ptr, KernelParams};
use linattn_cuda::registry::FormEntry;
use linattn_cuda::runtime::{as_i32, storage_define, KernelVariant};
use linattn_cuda::DeviceBackend;
use std::marker::PhantomData;
use std::sync::Arc;

/// The kernel source, embedded at build time.
pub const SOURCE: &str = include_str!("../../../kernels/softmax.cu");
const SOURCE_NAME: &str = "softmax.cu";

linattn_cuda::kernel_params! {
    /// The argument structs of softmax.cu's entry points.
    pub mod params;
    /// `sm_forward_rows`: scores → probabilities in place, one block per row.
    pub struct ForwardRows => "sm_forward_rows" {
        scores: Ptr, n: i32, causal: bool, scale: f32,
    }
    /// `sm_backward_rows`: dP → dS in place, one block per row.
    pub struct BackwardRows => "sm_backward_rows" {
        probs: Ptr, grad: Ptr, n: i32, causal: bool, scale: f32,
    }
    /// `sm_gemm`: C_z = op(A_z)·op(B_z), row-major, 64×64 tiles.
    pub struct Gemm => "sm_gemm" {
        a: Ptr, b: Ptr, c: Ptr, m: i32, n: i32, k: i32, a_transposed: bool,
        b_transposed: bool, stride_a: i64, stride_b: i64, stride_c: i64, batches: i32,
    }
}

pub use params::SPECS as KERNEL_PARAMS;

/// This crate's CUDA form, for the lab's registry beside `linattn_cuda::FORMS`.
pub const FORM: FormEntry = FormEntry {
    name: "softmax",
    source: SOURCE,
    backends,
    decoders: |_| Vec::new(),
    variants: kernel_variants,
    kernel_params: &KERNEL_PARAMS,
};
/// Threads per row block: enough to stream long rows, a multiple of 32 (the reductions).
const MAX_THREADS_PER_ROW: usize = 256;
/// Largest row count one launch covers (grid.x limit).
const MAX_ROWS: usize = i32::MAX as usize;
/// `sm_gemm`: output tile edge and threads per block (LA_GEMM_TILE, LA_GEMM_THREADS).
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
        .entries(&params::ENTRIES)
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

/// Refuses a value that the conversion to the storage type turns into ±Inf (beyond 65504 for
/// f16), naming the tensor, rather than letting it become a NaN output.
fn check_storage_range<T: StorageElem>(t: &Tensor, role: TensorRole) -> Result<(), AttnError> {
    let data = t.data();
    match data
        .iter()
        .position(|&x| !T::from_f64(x).to_f64().is_finite())
    {
        None => Ok(()),
        Some(index) => Err(AttnError::InvalidArgument(format!(
            "{} holds {} at flat index {index}, outside the range of {}",
            role.name(),
            data[index],
            T::PRECISION
        ))),
    }
}

/// `t` converted to the storage type; a value that the conversion turns into ±Inf (beyond
/// 65504 for f16) is refused, naming the tensor, rather than becoming a NaN output.
pub fn to_storage<T: StorageElem>(t: &Tensor, role: TensorRole) -> Result<Vec<T>, AttnError> {
    check_storage_range::<T>(t, role)?;
    Ok(t.data().iter().map(|&x| T::from_f64(x)).collect())
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

    /// Whether `exec` can run the engine (cuBLAS needs its library).
    fn available_on(self, exec: &dyn Executor) -> Result<(), Unsupported> {
        self.check_platform(exec.platform())?;
        match self {
            GemmEngine::Cublas => exec.blas_available(),
            GemmEngine::Kernel => Ok(()),
        }
    }
}

/// What a [`BatchedGemm`] holds for its engine.
enum Engine {
    /// The executor's BLAS (cuBLAS).
    Blas,
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
        engine.available_on(exec.as_ref())?;
        let engine = match engine {
            GemmEngine::Cublas => Engine::Blas,
            GemmEngine::Kernel => Engine::Kernel(
                exec.kernel(&kernel_variant(T::PRECISION)?, params::Gemm::SPEC.entry)?,
            ),
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
            Engine::Blas => GemmEngine::Cublas,
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
            // The buffers are live (borrowed) and hold `batch` matrices of the plan's strides
            // (checked above); the backend allocates every one on this GEMM's executor.
            Engine::Blas => self.exec.gemm(&GemmCall {
                plan,
                batch: batch_i32,
                precision: T::PRECISION,
                a: a.address(),
                b: b.address(),
                c: c.address(),
                what,
            }),
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
                launch_kernel(
                    self.exec.as_ref(),
                    kernel,
                    &Launch::new(grid, GEMM_THREADS),
                    &params::Gemm {
                        a: ptr(a),
                        b: ptr(b),
                        c: ptr(&*c),
                        m: plan.m,
                        n: plan.n,
                        k: plan.k,
                        a_transposed: plan.a_transposed,
                        b_transposed: plan.b_transposed,
                        stride_a: plan.stride_a(),
                        stride_b: plan.stride_b(),
                        stride_c: plan.stride_c(),
                        batches: batch_i32,
                    },
                )
            }
        }
    }
}

/// The softmax baseline (`softmax`, or `softmax+<engine>` off the platform's default engine).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SoftmaxForm {
    pub engine: GemmEngine,
    /// Whether `engine` is the platform's default (then the name has no suffix).
    default_engine: bool,
}

impl SoftmaxForm {
    /// The platform's default GEMM engine.
    pub fn new(platform: Platform) -> SoftmaxForm {
        SoftmaxForm {
            engine: GemmEngine::default_for(platform),
            default_engine: true,
        }
    }

    /// A chosen GEMM engine; cuBLAS on the simulator is refused.
    pub fn with_gemm(platform: Platform, engine: GemmEngine) -> Result<SoftmaxForm, Unsupported> {
        engine.check_platform(platform)?;
        Ok(SoftmaxForm {
            engine,
            default_engine: engine == GemmEngine::default_for(platform),
        })
    }
}

/// `<platform>/softmax/<precision>` for storage `T` (f32 or `half::f16`).
pub type CudaSoftmaxBackend<T> = DeviceBackend<SoftmaxForm, T>;

/// `<platform>/softmax/f32`.
pub fn f32_backend(platform: Platform) -> CudaSoftmaxBackend<f32> {
    DeviceBackend::new(platform, SoftmaxForm::new(platform))
}

/// `<platform>/softmax/f16`.
pub fn f16_backend(platform: Platform) -> CudaSoftmaxBackend<half::f16> {
    DeviceBackend::new(platform, SoftmaxForm::new(platform))
}

/// With a chosen GEMM engine; a non-default one is named in the backend name
/// (`cuda/softmax+gemmkernel/f32`, like `causal_recurrent+storedbwd`). cuBLAS on the
/// simulator is refused.
pub fn with_gemm<T: StorageElem>(
    platform: Platform,
    engine: GemmEngine,
) -> Result<CudaSoftmaxBackend<T>, Unsupported> {
    Ok(DeviceBackend::new(
        platform,
        SoftmaxForm::with_gemm(platform, engine)?,
    ))
}

/// `<platform>/softmax/{f32,f16}` with the platform's default GEMM engine.
pub fn backends(platform: Platform) -> Vec<Box<dyn Backend>> {
    vec![
        Box::new(f32_backend(platform)),
        Box::new(f16_backend(platform)),
    ]
}

/// A staging: the row kernels and the GEMM engine, loaded once.
pub struct SoftmaxPlan<T> {
    dims: Dims,
    forward_rows: Kernel,
    backward_rows: Kernel,
    gemm: BatchedGemm<T>,
}

/// What the forward keeps: the probabilities P, read by the backward.
pub struct Probabilities<T> {
    probs: DeviceBuffer<T>,
}

/// Refuses, before allocating anything, a pass whose buffers exceed free device memory.
fn ensure_fits<T: StorageElem>(
    run: &Run<'_, T>,
    name: &str,
    backward: bool,
) -> Result<(), AttnError> {
    let shape = run.problem.shape;
    let needed = device_bytes_needed(&shape, T::PRECISION, backward)?;
    // Buffers this backend already holds for the run are given back or reused.
    let held = run.meter.live();
    let (free, total) = run.exec.memory_info()?;
    if needed > free.saturating_add(held) {
        return Err(AttnError::OutOfMemory {
            device: run.exec.info().name.clone(),
            requested_bytes: needed,
            detail: format!(
                "{name} {}: B·H·N² score matrices; {free} bytes free of {total}",
                if backward { "backward" } else { "forward" }
            ),
        });
    }
    Ok(())
}

impl<T: StorageElem> DeviceForm<T> for SoftmaxForm {
    type Plan = SoftmaxPlan<T>;
    type Saved = Probabilities<T>;

    fn info(&self) -> FormInfo {
        let name = if self.default_engine {
            "softmax".to_string()
        } else {
            format!("softmax+{}", self.engine.label())
        };
        FormInfo {
            name,
            algorithm: Algorithm::Softmax,
            backward: Some(BackwardKind::Autograd),
        }
    }

    fn check(&self, info: &BackendInfo, problem: &Problem) -> Result<(), Unsupported> {
        kernel_variant(T::PRECISION).map_err(|_| {
            Unsupported::Problem(format!("{}: no kernel for {}", info.name, T::PRECISION))
        })?;
        problem
            .shape
            .validate()
            .map_err(|e| Unsupported::Problem(e.to_string()))?;
        Dims::of(problem).map_err(|e| Unsupported::Problem(e.to_string()))?;
        Ok(())
    }

    fn device_ready(&self, exec: &dyn Executor) -> Result<(), Unsupported> {
        self.engine.available_on(exec)
    }

    /// Shapes, dims and finiteness, and every value within the storage type's range (a value
    /// beyond 65504 would become ±Inf in f16 and a NaN output).
    fn validate(&self, problem: &Problem, inputs: &Inputs) -> Result<(), AttnError> {
        validate_inputs(problem, inputs, NeedGrad::No)?;
        let roles = [
            (Some(&inputs.q), TensorRole::Q),
            (Some(&inputs.k), TensorRole::K),
            (Some(&inputs.v), TensorRole::V),
            (inputs.d_out.as_ref(), TensorRole::DOut),
        ];
        for (tensor, role) in roles {
            if let Some(t) = tensor {
                check_storage_range::<T>(t, role)?;
            }
        }
        Ok(())
    }

    fn plan(
        &self,
        exec: &Arc<dyn Executor>,
        problem: &Problem,
        _input_meter: &MemoryMeter,
    ) -> Result<SoftmaxPlan<T>, AttnError> {
        let variant = kernel_variant(T::PRECISION)?;
        Ok(SoftmaxPlan {
            dims: Dims::of(problem)?,
            forward_rows: exec.kernel(&variant, params::ForwardRows::SPEC.entry)?,
            backward_rows: exec.kernel(&variant, params::BackwardRows::SPEC.entry)?,
            gemm: BatchedGemm::new(exec, self.engine)?,
        })
    }

    fn forward(
        &self,
        run: &Run<'_, T>,
        plan: &SoftmaxPlan<T>,
    ) -> Timed<Forward<T, Probabilities<T>>> {
        let name = <Self as DeviceForm<T>>::info(self).name;
        ensure_fits(run, &name, false)?;
        let (exec, meter, inputs, dims, gemm) =
            (run.exec, run.meter, run.inputs, &plan.dims, &plan.gemm);
        let shape = run.problem.shape;
        // Written in full by the GEMMs and the row kernel (the simulator's initcheck proves it).
        let mut probs = DeviceBuffer::<T>::uninit(exec, meter, score_len(&shape)?)?;
        let mut out = DeviceBuffer::<T>::uninit(exec, meter, shape.v_len()?)?;
        let elapsed = run.time(|| {
            // q, k are [B·H, N, D], probs [B·H, N, N], v and out [B·H, N, M].
            let scores = RowMajorGemm::scores(dims.seq, dims.dk);
            gemm.run(
                scores,
                dims.batch,
                &inputs.q,
                &inputs.k,
                &mut probs,
                "S = QKᵀ",
            )?;
            let rows = params::ForwardRows {
                scores: ptr(&probs),
                n: dims.seq,
                causal: dims.causal,
                scale: dims.scale,
            };
            launch_kernel(exec.as_ref(), &plan.forward_rows, &dims.row_launch(), &rows)?;
            let pv = RowMajorGemm::probs_times(dims.seq, dims.dv);
            gemm.run(pv, dims.batch, &probs, &inputs.v, &mut out, "O = PV")
        })?;
        Ok((
            Forward {
                out,
                saved: Probabilities { probs },
            },
            elapsed,
        ))
    }

    fn backward(
        &self,
        run: &Run<'_, T>,
        plan: &SoftmaxPlan<T>,
        fwd: &Forward<T, Probabilities<T>>,
        d_out: &DeviceBuffer<T>,
    ) -> Timed<DeviceGrads<T>> {
        let name = <Self as DeviceForm<T>>::info(self).name;
        ensure_fits(run, &name, true)?;
        let (exec, meter, inputs, dims, gemm) =
            (run.exec, run.meter, run.inputs, &plan.dims, &plan.gemm);
        let shape = run.problem.shape;
        // Each is written in full by a GEMM (d_scores then rewritten in place by the row
        // kernel).
        let mut d_scores = DeviceBuffer::<T>::uninit(exec, meter, score_len(&shape)?)?;
        let mut dq = DeviceBuffer::<T>::uninit(exec, meter, shape.qk_len()?)?;
        let mut dk = DeviceBuffer::<T>::uninit(exec, meter, shape.qk_len()?)?;
        let mut dv = DeviceBuffer::<T>::uninit(exec, meter, shape.v_len()?)?;
        let probs = &fwd.saved.probs;
        let (seq, batch) = (dims.seq, dims.batch);
        let elapsed = run.time(|| {
            // As in the forward; d_scores is [B·H, N, N] like probs.
            let pt = RowMajorGemm::probs_transposed_times(seq, dims.dv);
            gemm.run(pt, batch, probs, d_out, &mut dv, "dV = PᵀdO")?;
            let scores = RowMajorGemm::scores(seq, dims.dv);
            gemm.run(scores, batch, d_out, &inputs.v, &mut d_scores, "dP = dO Vᵀ")?;
            let rows = params::BackwardRows {
                probs: ptr(probs),
                grad: ptr(&d_scores),
                n: seq,
                causal: dims.causal,
                scale: dims.scale,
            };
            launch_kernel(
                exec.as_ref(),
                &plan.backward_rows,
                &dims.row_launch(),
                &rows,
            )?;
            let dsk = RowMajorGemm::probs_times(seq, dims.dk);
            gemm.run(dsk, batch, &d_scores, &inputs.k, &mut dq, "dQ = dS K")?;
            let dsq = RowMajorGemm::probs_transposed_times(seq, dims.dk);
            gemm.run(dsq, batch, &d_scores, &inputs.q, &mut dk, "dK = dSᵀ Q")
        })?;
        drop(d_scores);
        Ok((DeviceGrads { dq, dk, dv }, elapsed))
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

/// Sizes every launch and GEMM of one problem needs, as the `int`s the kernels take.
#[derive(Debug, Clone, Copy)]
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
