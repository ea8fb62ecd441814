//! The segmented forward's launches ([`SegmentPlan`]): `cc_seg_sums` and `cc_seg_scan` (two or
//! more segments), then `cc_forward_seg`; in training their split forms, `cc_seg_sums_train`
//! and `cc_forward_seg_train`, which also write every chunk's S⁰, z⁰ and O's residue for the
//! backward ([`Kept`](super::Kept)) in place of the split walk and `cc_forward_train`.

use std::sync::Arc;

use linattn_core::AttnError;

use super::entries::params;
use super::plan::{ScalarArgs, SegmentPlan, SCAN_THREADS};
use crate::executor::{Executor, Kernel, Launch};
use crate::form::DeviceInputs;
use crate::memory::DeviceBuffer;
use crate::params::{launch_kernel, ptr, KernelParams};
use crate::runtime::as_i32;

/// The segmented forward's kernels of one program: the inference ones and, where the device's
/// shared memory holds them ([`SegmentPlan::trains_on`]), the training ones.
pub(super) struct SegKernels {
    pub sums: Kernel,
    pub scan: Kernel,
    pub forward: Kernel,
    /// `cc_seg_sums_train`, `cc_forward_seg_train`.
    pub train: Option<(Kernel, Kernel)>,
    /// Value slices per sums and forward CTA in this program
    /// ([`SegmentPlan::slices_per_cta`]).
    pub slices: u32,
}

impl SegKernels {
    /// The sums and forward kernels of the inference form or, `train`, of the training form
    /// (None where the program or the device has none).
    pub fn form(&self, train: bool) -> Option<(&Kernel, &Kernel)> {
        match (train, &self.train) {
            (false, _) => Some((&self.sums, &self.forward)),
            (true, Some((sums, forward))) => Some((sums, forward)),
            (true, None) => None,
        }
    }
}

/// What the segmented forward writes: O (B·H·N·M), den (B·H·N) and, in training, what the
/// backward keeps.
pub(super) struct SegOutputs<'a, T> {
    pub out: &'a DeviceBuffer<T>,
    pub den: &'a DeviceBuffer<f32>,
    pub kept: Option<KeptOut<'a, T>>,
}

/// Where the training forward writes what the backward keeps: every chunk's S⁰, z⁰ (fp32,
/// the plan's `state_len`) and O's rounding residue (B·H·N·M, or empty for identity).
pub(super) struct KeptOut<'a, T> {
    pub chunk_states: &'a DeviceBuffer<f32>,
    pub out_lo: &'a DeviceBuffer<T>,
}

/// The segmented forward on a staging's `kernels` and scalar arguments: with two or more
/// segments the segments' sums and their scan into each segment's S⁰, z⁰ (`seg_states`), then
/// O and den; with `outputs.kept` (training) the split forms ([`SegKernels::form`]), which
/// also write the chunk states and O's residue there.
pub(super) fn forward<T>(
    exec: &Arc<dyn Executor>,
    kernels: &SegKernels,
    a: &ScalarArgs,
    inputs: &DeviceInputs<T>,
    seg: &SegmentPlan,
    seg_states: &DeviceBuffer<f32>,
    outputs: &SegOutputs<'_, T>,
) -> Result<(), AttnError> {
    let SegOutputs { out, den, kept } = outputs;
    let (sums, forward) = kernels.form(kept.is_some()).ok_or_else(|| {
        AttnError::InvalidArgument(
            "causal_chunked: this program or device has no segmented training forward".into(),
        )
    })?;
    let train = kept.is_some();
    let seg_chunks = as_i32("chunks per segment", seg.seg_chunks)?;
    if seg.num_segments > 1 {
        // k, v: B·H·N·(D|M); seg_states: B·H·segments·stride (slot s + 1 ← segment s's sum).
        let params = params::SegSums {
            k: ptr(&inputs.k),
            v: ptr(&inputs.v),
            states: ptr(seg_states),
            seg_chunks,
            n: a.n,
            num_chunks: a.num_chunks,
            log2_decay: a.log2_decay,
            chunk_decay: a.chunk_decay,
            map: a.map,
            d: a.d,
            m: a.m,
        };
        let launch = seg.sums_launch(kernels.slices, train);
        launch_form(exec, sums, &launch, params, train, params::SegSumsTrain)?;
        // Segment 0 starts from zero (cc_forward_seg): one segment needs no scan either.
        let seg_decay = (f64::from(a.chunk_decay)).powi(seg_chunks) as f32;
        let params = params::SegScan {
            states: ptr(seg_states),
            num_segments: as_i32("segment count", seg.num_segments)?,
            seg_decay,
        };
        let launch = Launch::new(seg.grid_scan, SCAN_THREADS);
        launch_kernel(exec.as_ref(), &kernels.scan, &launch, &params)?;
    }
    // q, k: B·H·N·D; v, out, out_lo: B·H·N·M; den: B·H·N; chunk_states: the plan's
    // state_len. cc_forward_seg touches neither of the last two: any pointer will do.
    let (chunk_states, out_lo) = match kept {
        Some(k) => (ptr(k.chunk_states), ptr(k.out_lo)),
        None => (ptr(seg_states), ptr(*out)),
    };
    let params = params::ForwardSeg {
        q: ptr(&inputs.q),
        k: ptr(&inputs.k),
        v: ptr(&inputs.v),
        states: ptr(seg_states),
        chunk_states,
        out: ptr(*out),
        out_lo,
        den_out: ptr(*den),
        seg_chunks,
        n: a.n,
        num_chunks: a.num_chunks,
        log2_decay: a.log2_decay,
        chunk_decay: a.chunk_decay,
        eps: a.eps,
        map: a.map,
        d: a.d,
        m: a.m,
    };
    let launch = seg.forward_launch(kernels.slices, train);
    launch_form(
        exec,
        forward,
        &launch,
        params,
        train,
        params::ForwardSegTrain,
    )
}

/// Launches `params` on `kernel`, as the training form's argument list (`as_train`: the same
/// fields under the training kernel's entry point) when `train`.
fn launch_form<P: KernelParams, Q: KernelParams>(
    exec: &Arc<dyn Executor>,
    kernel: &Kernel,
    launch: &Launch,
    params: P,
    train: bool,
    as_train: fn(P) -> Q,
) -> Result<(), AttnError> {
    if train {
        launch_kernel(exec.as_ref(), kernel, launch, &as_train(params))
    } else {
        launch_kernel(exec.as_ref(), kernel, launch, &params)
    }
}
