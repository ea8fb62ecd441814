//! `cpu/softmax/f32`: naive softmax attention through candle-core on the CPU.
//!
//! The full `[B, H, N, N]` score matrix is materialised on purpose: this is the O(N²)
//! baseline whose memory the tables contrast with linear attention. Gradients come from
//! candle's autograd: when d_out is staged, Q, K and V are candle `Var`s, the forward records
//! its graph, and the backward differentiates `L = Σ O ⊙ dO`, whose gradient w.r.t. O is dO.

use crate::validate::{validate_inputs, NeedGrad};
use candle_core::{DType, Device, Tensor as CTensor, Var};
use linattn_core::{
    AttnError, Backend, BackendInfo, BackwardKind, DeviceKind, Grads, HostMemory, Inputs,
    Precision, Problem, RunStats, Shape, Tensor, Unsupported,
};
use std::time::Instant;

/// Which pass a memory estimate is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pass {
    /// Forward without gradient tracking: intermediates are dropped as soon as they are used.
    Forward,
    /// Forward recording the autograd graph: every `[B,H,N,N]` intermediate stays alive.
    ForwardTracked,
    /// The backward over a recorded graph (the graph itself included).
    Backward,
}

/// Live `[B, H, N, N]` f32 matrices at the peak of each pass (the `[N, N]` causal mask is
/// counted separately), from the code below and measured with the counting allocator
/// (`tests/cpu_memory.rs`, which checks these bounds):
/// * untracked forward: scores, shifted scores and their exp at once (3);
/// * tracked forward: scores, masked scores (causal), shifted, exp, probabilities stay alive
///   in the graph (5);
/// * backward, graph included: measured 15.7 (non-causal) to 16.7 (causal) at the peak.
///   Candle's backward seeds every node's gradient with a zero tensor plus a sum and keeps
///   the gradients of untracked broadcast operands (the row maximum) to the end; 18 keeps a
///   margin.
///
/// The `gemm` crate behind candle's matmul also packs its left operand per call (up to one
/// more matrix, within these counts) and keeps a thread-local slab the size of the L2 cache
/// on every thread that ever ran a product: see [`gemm_workspace_allowance`].
fn square_matrices(pass: Pass) -> u64 {
    match pass {
        Pass::Forward => 3,
        Pass::ForwardTracked => 5,
        Pass::Backward => 18,
    }
}

/// Upper bound on the thread-local slabs (one L2 cache each, allocated on a thread's first
/// matrix product and kept) of the `gemm` crate: 8 MiB for each worker thread plus the caller.
/// Constant in N, so it matters only for small problems.
pub fn gemm_workspace_allowance() -> u64 {
    const PER_THREAD: u64 = 8 << 20;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    (threads + 1) * PER_THREAD
}

/// Bytes of host memory one pass of `cpu/softmax/f32` will allocate beyond the staged inputs:
/// the `[B,H,N,N]` f32 matrices (plus one `[N, N]` causal mask) and the `[B,H,N,·]` outputs
/// and gradients, plus [`gemm_workspace_allowance`]. An upper estimate, used to refuse a run
/// before it starts.
pub fn estimated_host_bytes(shape: &Shape, causal: bool, pass: Pass) -> Result<u64, AttnError> {
    let overflow = || AttnError::SizeOverflow(format!("softmax score matrices for {shape}"));
    let f32_bytes = std::mem::size_of::<f32>() as u64;
    let seq = shape.seq as u64;
    let square = seq.checked_mul(seq).ok_or_else(overflow)?;
    let per_matrix = (shape.bh() as u64)
        .checked_mul(square)
        .and_then(|x| x.checked_mul(f32_bytes))
        .ok_or_else(overflow)?;
    let mask = if causal {
        square.checked_mul(f32_bytes).ok_or_else(overflow)?
    } else {
        0
    };
    let qk = shape.qk_len()? as u64;
    let v = shape.v_len()? as u64;
    // Vectors ([B,H,N,D] or [B,H,N,M]) and row statistics ([B,H,N,1]): scaled Q, contiguous
    // copies of Kᵀ made for the matmul, O, the row maxima and sums; in the backward every one
    // of them gets a gradient seeded with zeros plus a sum. Generous multiples: O(N·D), small
    // beside the N² terms.
    let rows = shape.bh() as u64 * seq;
    let vectors = match pass {
        Pass::Forward | Pass::ForwardTracked => 3 * qk + 3 * v + 8 * rows,
        Pass::Backward => 10 * (qk + v) + 16 * rows,
    };
    let vector_bytes = vectors.checked_mul(f32_bytes).ok_or_else(overflow)?;
    per_matrix
        .checked_mul(square_matrices(pass))
        .and_then(|x| x.checked_add(mask))
        .and_then(|x| x.checked_add(vector_bytes))
        .and_then(|x| x.checked_add(gemm_workspace_allowance()))
        .ok_or_else(overflow)
}

/// Turns a candle error into a typed error naming what was being done.
fn candle_err(context: &'static str) -> impl Fn(candle_core::Error) -> AttnError {
    move |e| AttnError::State(format!("candle-core failed while {context}: {e}"))
}

/// Q, K, V as candle tensors; variables (tracked by autograd) when d_out was staged.
struct Staged {
    problem: Problem,
    q: CTensor,
    k: CTensor,
    v: CTensor,
    d_out: Option<CTensor>,
    track_grad: bool,
}

/// The `cpu/softmax/f32` backend.
pub struct CandleCpuBackend {
    info: BackendInfo,
    device: Device,
    staged: Option<Staged>,
    output: Option<CTensor>,
    grads: Option<[CTensor; 3]>,
}

impl Default for CandleCpuBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl CandleCpuBackend {
    pub fn new() -> Self {
        CandleCpuBackend {
            info: BackendInfo {
                name: "cpu/softmax/f32".into(),
                device: DeviceKind::Cpu,
                precision: Precision::F32,
                algorithm: linattn_core::Algorithm::Softmax,
                backward: Some(BackwardKind::Autograd),
            },
            device: Device::Cpu,
            staged: None,
            output: None,
            grads: None,
        }
    }

    fn staged(&self) -> Result<&Staged, AttnError> {
        self.staged
            .as_ref()
            .ok_or_else(|| AttnError::State("cpu/softmax/f32: no inputs staged".into()))
    }

    fn to_candle(&self, t: &Tensor, what: &'static str) -> Result<CTensor, AttnError> {
        CTensor::from_vec(t.to_f32(), t.dims().to_vec(), &self.device).map_err(candle_err(what))
    }
}

/// `softmax(s·QKᵀ + mask) V` with the row maximum subtracted before `exp`. The maximum is
/// detached: softmax is invariant to it, so its gradient contribution is exactly zero.
fn attention(
    q: &CTensor,
    k: &CTensor,
    v: &CTensor,
    causal: bool,
    device: &Device,
) -> Result<CTensor, AttnError> {
    let seq = q.dim(2).map_err(candle_err("reading N"))?;
    let dk = q.dim(3).map_err(candle_err("reading D"))?;
    let scale = 1.0 / (dk as f64).sqrt();
    // Scaling Q (N×D) is cheaper than scaling the N×N scores and the same product.
    let q_scaled = q.affine(scale, 0.0).map_err(candle_err("scaling Q"))?;
    let k_t = k.t().map_err(candle_err("transposing K"))?;
    let mut scores = q_scaled.matmul(&k_t).map_err(candle_err("computing QKᵀ"))?;
    if causal {
        let mask = causal_mask(seq, device)?;
        scores = scores
            .broadcast_add(&mask)
            .map_err(candle_err("masking the scores"))?;
    }
    let row_max = scores
        .max_keepdim(3)
        .map_err(candle_err("taking row maxima"))?
        .detach();
    let exp = scores
        .broadcast_sub(&row_max)
        .and_then(|x| x.exp())
        .map_err(candle_err("exponentiating the scores"))?;
    drop(scores);
    let row_sum = exp.sum_keepdim(3).map_err(candle_err("summing rows"))?;
    let probs = exp
        .broadcast_div(&row_sum)
        .map_err(candle_err("normalising rows"))?;
    drop(exp);
    probs.matmul(v).map_err(candle_err("computing PV"))
}

/// `[N, N]` additive mask: 0 where key j ≤ query i, −∞ above the diagonal. Every row keeps its
/// diagonal, so no row is entirely −∞ and the softmax stays finite.
fn causal_mask(seq: usize, device: &Device) -> Result<CTensor, AttnError> {
    let mut data = vec![0f32; seq * seq];
    for (i, row) in data.chunks_exact_mut(seq).enumerate() {
        for x in &mut row[i + 1..] {
            *x = f32::NEG_INFINITY;
        }
    }
    CTensor::from_vec(data, (seq, seq), device).map_err(candle_err("building the causal mask"))
}

fn widen(t: &CTensor, what: &'static str) -> Result<Tensor, AttnError> {
    let dims: [usize; 4] = t
        .dims()
        .try_into()
        .map_err(|_| AttnError::State(format!("{what} is not 4-D: {:?}", t.dims())))?;
    let data = t
        .flatten_all()
        .and_then(|x| x.to_dtype(DType::F32))
        .and_then(|x| x.to_vec1::<f32>())
        .map_err(candle_err(what))?;
    Tensor::from_slice(dims, &data)
}

impl Backend for CandleCpuBackend {
    fn info(&self) -> &BackendInfo {
        &self.info
    }

    fn supports(&self, problem: &Problem) -> Result<(), Unsupported> {
        problem
            .shape
            .validate()
            .map_err(|e| Unsupported::Problem(e.to_string()))
    }

    fn stage(&mut self, problem: &Problem, inputs: &Inputs) -> Result<(), AttnError> {
        self.release();
        validate_inputs(problem, inputs, NeedGrad::No)?;
        let track_grad = inputs.d_out.is_some();
        // Operations on a plain tensor record no graph; on a variable's tensor they do.
        let as_var = |t: CTensor| -> Result<CTensor, AttnError> {
            if track_grad {
                Ok(Var::from_tensor(&t)
                    .map_err(candle_err("making a variable"))?
                    .into_inner())
            } else {
                Ok(t)
            }
        };
        let q = as_var(self.to_candle(&inputs.q, "staging q")?)?;
        let k = as_var(self.to_candle(&inputs.k, "staging k")?)?;
        let v = as_var(self.to_candle(&inputs.v, "staging v")?)?;
        let d_out = match &inputs.d_out {
            Some(g) => Some(self.to_candle(g, "staging d_out")?),
            None => None,
        };
        self.staged = Some(Staged {
            problem: *problem,
            q,
            k,
            v,
            d_out,
            track_grad,
        });
        Ok(())
    }

    fn run_forward(&mut self) -> Result<RunStats, AttnError> {
        let staged = self.staged()?;
        let causal = staged.problem.causality.is_causal();
        let pass = if staged.track_grad {
            Pass::ForwardTracked
        } else {
            Pass::Forward
        };
        let bytes = estimated_host_bytes(&staged.problem.shape, causal, pass)?;
        HostMemory::ensure_available(bytes, "cpu/softmax/f32 forward: [B,H,N,N] f32 scores")?;
        self.output = None;
        self.grads = None;
        let staged = self.staged()?;
        let start = Instant::now();
        let out = attention(&staged.q, &staged.k, &staged.v, causal, &self.device)?;
        let elapsed = start.elapsed();
        self.output = Some(out);
        Ok(RunStats::host(elapsed))
    }

    fn run_backward(&mut self) -> Result<RunStats, AttnError> {
        let staged = self.staged()?;
        let d_out = staged.d_out.as_ref().ok_or_else(|| {
            AttnError::InvalidArgument("backward needs d_out (∂L/∂O), none was staged".into())
        })?;
        let out = self.output.as_ref().ok_or_else(|| {
            AttnError::State("cpu/softmax/f32: run_forward must come before run_backward".into())
        })?;
        let causal = staged.problem.causality.is_causal();
        let bytes = estimated_host_bytes(&staged.problem.shape, causal, Pass::Backward)?;
        HostMemory::ensure_available(bytes, "cpu/softmax/f32 backward: autograd over N×N")?;
        let start = Instant::now();
        let loss = out
            .mul(d_out)
            .and_then(|x| x.sum_all())
            .map_err(candle_err("forming Σ O ⊙ dO"))?;
        let mut store = loss.backward().map_err(candle_err("running autograd"))?;
        let mut take = |var: &CTensor, what: &'static str| {
            store.remove(var).ok_or_else(|| {
                AttnError::State(format!("candle autograd produced no gradient for {what}"))
            })
        };
        let grads = [
            take(&staged.q, "q")?,
            take(&staged.k, "k")?,
            take(&staged.v, "v")?,
        ];
        let elapsed = start.elapsed();
        drop(store);
        self.grads = Some(grads);
        Ok(RunStats::host(elapsed))
    }

    fn output(&mut self) -> Result<Tensor, AttnError> {
        let out = self.output.as_ref().ok_or_else(|| {
            AttnError::State("cpu/softmax/f32: no output (run_forward first)".into())
        })?;
        widen(out, "reading O")
    }

    fn grads(&mut self) -> Result<Grads, AttnError> {
        let [dq, dk, dv] = self.grads.as_ref().ok_or_else(|| {
            AttnError::State("cpu/softmax/f32: no gradients (run_backward first)".into())
        })?;
        Ok(Grads {
            dq: widen(dq, "reading dQ")?,
            dk: widen(dk, "reading dK")?,
            dv: widen(dv, "reading dV")?,
        })
    }

    fn release(&mut self) {
        self.staged = None;
        self.output = None;
        self.grads = None;
    }
}
