//! The softmax form ([`SoftmaxForm`]) on the executor seam: its plan (the row kernels and
//! the GEMM engine, loaded once), the memory check, and the forward and backward passes.

use super::checks::{check_storage_range, device_bytes_needed};
use super::gemm::{BatchedGemm, GemmEngine};
use super::kernels::{kernel_variant, params};
use crate::validate::{validate_inputs, NeedGrad};
use linattn_core::{
    Algorithm, AttnError, BackendInfo, BackwardKind, Inputs, Problem, Shape, TensorRole,
    Unsupported,
};
use linattn_cuda::executor::gemm::RowMajorGemm;
use linattn_cuda::executor::{Executor, Kernel, Launch, Platform};
use linattn_cuda::form::{DeviceForm, DeviceGrads, FormInfo, Forward, Run, Timed};
use linattn_cuda::memory::{DeviceBuffer, MemoryMeter, StorageElem};
use linattn_cuda::params::{launch_kernel, ptr, KernelParams};
use linattn_cuda::runtime::as_i32;
use std::sync::Arc;

/// Threads per row block: enough to stream long rows, a multiple of 32 (the reductions).
const MAX_THREADS_PER_ROW: usize = 256;
/// Largest row count one launch covers (grid.x limit).
const MAX_ROWS: usize = i32::MAX as usize;

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
