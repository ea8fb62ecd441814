//! `cuda/softmax/f32` and `cuda/softmax/f16`: naive softmax attention on the GPU with cuBLAS
//! strided-batched GEMMs over the B·H sequences and the row kernels of `kernels/softmax.cu`.
//!
//! Per (batch, head) the N×N score matrix is materialised in the storage precision (fp16 for
//! the f16 backend, as a naive fp16 attention stores it), with fp32 GEMM accumulation and fp32
//! softmax math. The probabilities are kept after the forward for the backward.
//!
//! Device memory per run, beyond the staged inputs:
//! * forward: P (`B·H·N²` elements) and O;
//! * backward: P and O (still held), dP/dS (`B·H·N²`), dQ, dK, dV.
//!
//! Both are checked against `cuMemGetInfo` before anything is allocated, so a problem that
//! cannot fit is a typed `AttnError::OutOfMemory` and a sweep goes on. cuBLAS' own workspace
//! is allocated by cuBLAS and not counted.

use crate::gemm_plan::{RowMajorGemm, Transpose};
use crate::validate::{validate_inputs, NeedGrad};
use cudarc::cublas::{sys as cublas_sys, CudaBlas, Gemm, GemmConfig, StridedBatchedConfig};
use cudarc::driver::{CudaFunction, CudaSlice, LaunchConfig, PushKernelArg};
use linattn_core::{
    Algorithm, AttnError, Backend, BackendInfo, BackwardKind, DeviceKind, Grads, Inputs, Precision,
    Problem, RunStats, Shape, Tensor, TensorRole, Unsupported,
};
use linattn_cuda::runtime::{
    self, as_i32, gpu, gpu_available, nvrtc_available, storage_define, DeviceBuffer, Gpu,
    KernelVariant, MemoryMeter, StorageElem,
};
use std::marker::PhantomData;
use std::sync::OnceLock;

/// The kernel source, embedded at build time.
pub const SOURCE: &str = include_str!("../../../kernels/softmax.cu");
const SOURCE_NAME: &str = "softmax.cu";
const FORWARD_ENTRY: &str = "la_softmax_forward_rows";
const BACKWARD_ENTRY: &str = "la_softmax_backward_rows";
/// Threads per row block: enough to stream long rows, a multiple of 32 (the reductions).
const MAX_THREADS_PER_ROW: usize = 256;
/// Largest row count one launch covers (grid.x limit).
const MAX_ROWS: usize = i32::MAX as usize;

/// The softmax kernels for one storage precision.
pub fn kernel_variant(precision: Precision) -> Result<KernelVariant, Unsupported> {
    let (name, value) = storage_define(precision)?;
    if precision == Precision::BF16 {
        return Err(Unsupported::Problem(
            "cuda/softmax has f32 and f16 backends only".into(),
        ));
    }
    Ok(KernelVariant::new(SOURCE_NAME, SOURCE)
        .define(name, value)
        .entry(FORWARD_ENTRY)
        .entry(BACKWARD_ENTRY)
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

/// cuBLAS loadable. cudarc panics on first use when it is not, so this runs before any call.
pub fn cublas_available() -> Result<(), Unsupported> {
    static STATUS: OnceLock<Result<(), Unsupported>> = OnceLock::new();
    STATUS
        .get_or_init(|| {
            // SAFETY: only tries dlopen on cudarc's candidate names.
            if unsafe { cublas_sys::is_culib_present() } {
                Ok(())
            } else {
                Err(Unsupported::Unavailable(
                    "no cuBLAS (libcublas.so.13 not found on the loader path)".into(),
                ))
            }
        })
        .clone()
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

fn cublas_error(what: &str, bytes: u64, error: cudarc::cublas::result::CublasError) -> AttnError {
    if error.0 == cublas_sys::cublasStatus_t::CUBLAS_STATUS_ALLOC_FAILED {
        AttnError::OutOfMemory {
            device: "cuda:0".into(),
            requested_bytes: bytes,
            detail: format!("cuBLAS {what}: CUBLAS_STATUS_ALLOC_FAILED"),
        }
    } else {
        AttnError::Cuda(format!("cuBLAS {what}: {:?}", error.0))
    }
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

/// Staged operands on the device.
struct Staged<T> {
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

/// The cuBLAS + masked-softmax backend for storage type `T` (f32 or `half::f16`).
pub struct CudaSoftmaxBackend<T> {
    info: BackendInfo,
    variant: Option<KernelVariant>,
    blas: Option<CudaBlas>,
    /// Staged inputs are counted here, outputs and workspace in `run_meter`.
    input_meter: MemoryMeter,
    run_meter: MemoryMeter,
    staged: Option<Staged<T>>,
    results: Option<Results<T>>,
    _storage: PhantomData<T>,
}

/// `cuda/softmax/f32`.
pub fn f32_backend() -> CudaSoftmaxBackend<f32> {
    CudaSoftmaxBackend::new()
}

/// `cuda/softmax/f16`.
pub fn f16_backend() -> CudaSoftmaxBackend<half::f16> {
    CudaSoftmaxBackend::new()
}

impl<T> CudaSoftmaxBackend<T>
where
    T: StorageElem,
    CudaBlas: Gemm<T>,
{
    pub fn new() -> Self {
        let precision = T::PRECISION;
        CudaSoftmaxBackend {
            info: BackendInfo {
                name: format!("cuda/softmax/{precision}"),
                device: DeviceKind::Cuda,
                precision,
                algorithm: Algorithm::Softmax,
                backward: Some(BackwardKind::Autograd),
            },
            variant: kernel_variant(precision).ok(),
            blas: None,
            input_meter: MemoryMeter::new(),
            run_meter: MemoryMeter::new(),
            staged: None,
            results: None,
            _storage: PhantomData,
        }
    }

    fn variant(&self) -> Result<&KernelVariant, AttnError> {
        self.variant.as_ref().ok_or_else(|| {
            AttnError::Unsupported(Unsupported::Problem(format!(
                "{}: no softmax kernel for this precision",
                self.info.name
            )))
        })
    }

    fn blas(&mut self, gpu: &Gpu) -> Result<&CudaBlas, AttnError> {
        cublas_available()?;
        if self.blas.is_none() {
            let blas = CudaBlas::new(gpu.stream().clone())
                .map_err(|e| cublas_error("cublasCreate", 0, e))?;
            self.blas = Some(blas);
        }
        self.blas
            .as_ref()
            .ok_or_else(|| AttnError::State("cuBLAS handle missing after creation".into()))
    }

    /// Refuses, before allocating anything, a pass whose buffers exceed free device memory.
    fn ensure_fits(&self, gpu: &Gpu, shape: &Shape, backward: bool) -> Result<(), AttnError> {
        let needed = device_bytes_needed(shape, T::PRECISION, backward)?;
        // Buffers this backend already holds for the run are given back or reused.
        let held = self.run_meter.live();
        let (free, total) = gpu.memory_info()?;
        if needed > free.saturating_add(held) {
            return Err(AttnError::OutOfMemory {
                device: gpu.info().name.clone(),
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
    /// `entry` and the cuBLAS handle, and restarts the run meter's peak. Returns the kernel
    /// and the meter the pass allocates through.
    fn begin_pass(
        &mut self,
        gpu: &Gpu,
        shape: &Shape,
        backward: bool,
        entry: &str,
    ) -> Result<(CudaFunction, MemoryMeter), AttnError> {
        self.ensure_fits(gpu, shape, backward)?;
        let variant = self.variant()?.clone();
        let rows_kernel = gpu.function(&variant, entry)?;
        self.blas(gpu)?;
        let meter = self.run_meter.clone();
        meter.reset_peak();
        Ok((rows_kernel, meter))
    }
}

/// Elements of the `B·H` score (or score-gradient) matrices, `N × N` each.
fn score_len(shape: &Shape) -> usize {
    shape.bh() * shape.seq * shape.seq
}

/// A pass's time and the peak of the device memory it allocated.
fn device_stats(elapsed: std::time::Duration, meter: &MemoryMeter) -> RunStats {
    RunStats {
        elapsed,
        device_bytes: Some(meter.peak()),
    }
}

impl<T> Default for CudaSoftmaxBackend<T>
where
    T: StorageElem,
    CudaBlas: Gemm<T>,
{
    fn default() -> Self {
        Self::new()
    }
}

/// Sizes every launch and GEMM of one problem needs, as the `int`s the APIs take.
struct Dims {
    seq: i32,
    dk: i32,
    dv: i32,
    batch: i32,
    rows: u32,
    causal: i32,
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
        Ok(Dims {
            seq: as_i32("N", shape.seq)?,
            dk: as_i32("D", shape.dk)?,
            dv: as_i32("M", shape.dv)?,
            batch: as_i32("B·H", shape.bh())?,
            rows: rows as u32,
            causal: i32::from(problem.causality.is_causal()),
            scale: (1.0 / (shape.dk as f64).sqrt()) as f32,
        })
    }

    fn row_launch(&self) -> LaunchConfig {
        let threads = (self.seq as usize)
            .div_ceil(32)
            .clamp(1, MAX_THREADS_PER_ROW / 32)
            * 32;
        LaunchConfig {
            grid_dim: (self.rows, 1, 1),
            block_dim: (threads as u32, 1, 1),
            shared_mem_bytes: 0,
        }
    }
}

/// `C = op(A)·op(B)` for every (batch, head), all row-major, through the column-major cuBLAS.
///
/// # Safety
/// The buffers must hold `batch` matrices of the sizes `plan` describes.
unsafe fn batched_gemm<T>(
    blas: &CudaBlas,
    plan: RowMajorGemm,
    batch: i32,
    a: &CudaSlice<T>,
    b: &CudaSlice<T>,
    c: &mut CudaSlice<T>,
    what: &str,
) -> Result<(), AttnError>
where
    T: StorageElem,
    CudaBlas: Gemm<T>,
{
    let call = plan.column_major();
    let op = |t: Transpose| match t {
        Transpose::No => cublas_sys::cublasOperation_t::CUBLAS_OP_N,
        Transpose::Yes => cublas_sys::cublasOperation_t::CUBLAS_OP_T,
    };
    let config = StridedBatchedConfig {
        gemm: GemmConfig {
            transa: op(call.trans_first),
            transb: op(call.trans_second),
            m: call.m,
            n: call.n,
            k: call.k,
            alpha: T::from_f64(1.0),
            lda: call.ld_first,
            ldb: call.ld_second,
            beta: T::from_f64(0.0),
            ldc: call.ldc,
        },
        batch_size: batch,
        stride_a: plan.stride_b(),
        stride_b: plan.stride_a(),
        stride_c: plan.stride_c(),
    };
    // Column-major Cᵀ = op(B)ᵀ·op(A)ᵀ: B's buffer goes first.
    unsafe { blas.gemm_strided_batched(config, b, a, c) }.map_err(|e| cublas_error(what, 0, e))
}

impl<T> Backend for CudaSoftmaxBackend<T>
where
    T: StorageElem,
    CudaBlas: Gemm<T>,
{
    fn info(&self) -> &BackendInfo {
        &self.info
    }

    fn supports(&self, problem: &Problem) -> Result<(), Unsupported> {
        gpu_available()?;
        nvrtc_available()?;
        cublas_available()?;
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
        validate_inputs(problem, inputs, NeedGrad::No)?;
        Dims::of(problem)?;
        let gpu = gpu()?;
        let meter = &self.input_meter;
        let upload = |t: &Tensor, role: TensorRole| {
            DeviceBuffer::<T>::upload(gpu, meter, &to_storage::<T>(t, role)?)
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
        };
        self.staged = Some(staged);
        Ok(())
    }

    fn run_forward(&mut self) -> Result<RunStats, AttnError> {
        let gpu = gpu()?;
        let problem = self.staged()?.problem;
        let dims = Dims::of(&problem)?;
        let shape = problem.shape;
        // Give back the previous run's buffers before checking what the next one needs.
        self.results = None;
        let (forward_rows, meter) = self.begin_pass(gpu, &shape, false, FORWARD_ENTRY)?;
        let mut probs = DeviceBuffer::<T>::zeros(gpu, &meter, score_len(&shape))?;
        let mut out = DeviceBuffer::<T>::zeros(gpu, &meter, shape.v_len()?)?;
        let (staged, blas) = match (&self.staged, &self.blas) {
            (Some(s), Some(b)) => (s, b),
            _ => return Err(AttnError::State("forward lost its inputs".into())),
        };
        let elapsed = gpu.time(|| {
            // SAFETY: q, k are [B·H, N, D], probs [B·H, N, N], v and out [B·H, N, M], as the
            // plans state; the kernel gets the buffer it indexes with (rows, n).
            unsafe {
                batched_gemm(
                    blas,
                    RowMajorGemm::scores(dims.seq, dims.dk),
                    dims.batch,
                    staged.q.slice(),
                    staged.k.slice(),
                    probs.slice_mut(),
                    "S = QKᵀ",
                )?;
                let mut args = gpu.stream().launch_builder(&forward_rows);
                args.arg(probs.slice_mut())
                    .arg(&dims.seq)
                    .arg(&dims.causal)
                    .arg(&dims.scale);
                runtime::launch(args, gpu, dims.row_launch(), FORWARD_ENTRY)?;
                batched_gemm(
                    blas,
                    RowMajorGemm::probs_times(dims.seq, dims.dv),
                    dims.batch,
                    probs.slice(),
                    staged.v.slice(),
                    out.slice_mut(),
                    "O = PV",
                )
            }
        })?;
        self.results = Some(Results {
            probs,
            out,
            grads: None,
        });
        Ok(device_stats(elapsed, &meter))
    }

    fn run_backward(&mut self) -> Result<RunStats, AttnError> {
        let gpu = gpu()?;
        let staged = self.staged()?;
        let problem = staged.problem;
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
        let (backward_rows, meter) = self.begin_pass(gpu, &shape, true, BACKWARD_ENTRY)?;
        let mut d_scores = DeviceBuffer::<T>::zeros(gpu, &meter, score_len(&shape))?;
        let mut dq = DeviceBuffer::<T>::zeros(gpu, &meter, shape.qk_len()?)?;
        let mut dk = DeviceBuffer::<T>::zeros(gpu, &meter, shape.qk_len()?)?;
        let mut dv = DeviceBuffer::<T>::zeros(gpu, &meter, shape.v_len()?)?;
        let (staged, blas, results) = match (&self.staged, &self.blas, &mut self.results) {
            (Some(s), Some(b), Some(r)) => (s, b, r),
            _ => return Err(AttnError::State("backward lost its inputs".into())),
        };
        let d_out = staged
            .d_out
            .as_ref()
            .ok_or_else(|| AttnError::State("backward lost d_out".into()))?;
        let probs = &results.probs;
        let elapsed = gpu.time(|| {
            // SAFETY: as in the forward; d_scores is [B·H, N, N] like probs.
            unsafe {
                batched_gemm(
                    blas,
                    RowMajorGemm::probs_transposed_times(dims.seq, dims.dv),
                    dims.batch,
                    probs.slice(),
                    d_out.slice(),
                    dv.slice_mut(),
                    "dV = PᵀdO",
                )?;
                batched_gemm(
                    blas,
                    RowMajorGemm::scores(dims.seq, dims.dv),
                    dims.batch,
                    d_out.slice(),
                    staged.v.slice(),
                    d_scores.slice_mut(),
                    "dP = dO Vᵀ",
                )?;
                let mut args = gpu.stream().launch_builder(&backward_rows);
                args.arg(probs.slice())
                    .arg(d_scores.slice_mut())
                    .arg(&dims.seq)
                    .arg(&dims.causal)
                    .arg(&dims.scale);
                runtime::launch(args, gpu, dims.row_launch(), BACKWARD_ENTRY)?;
                batched_gemm(
                    blas,
                    RowMajorGemm::probs_times(dims.seq, dims.dk),
                    dims.batch,
                    d_scores.slice(),
                    staged.k.slice(),
                    dq.slice_mut(),
                    "dQ = dS K",
                )?;
                batched_gemm(
                    blas,
                    RowMajorGemm::probs_transposed_times(dims.seq, dims.dk),
                    dims.batch,
                    d_scores.slice(),
                    staged.q.slice(),
                    dk.slice_mut(),
                    "dK = dSᵀ Q",
                )
            }
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
        gpu()?.flush_l2()
    }
}
