//! `{cuda,sim}/causal_chunked/{f16,bf16}`: causal linear attention in chunks of 64 tokens on tensor
//! cores (SPEC §3 "chunkwise"), with the memory-efficient backward of SPEC §4.
//!
//! The math, the two-pass schedule, the fragment layouts and the precision choices are
//! documented at the top of `kernels/causal_chunked.cu` (whose parts are the
//! `kernels/causal_chunked_*.cuh` it includes; [`HEADERS`]) (and set beside fla's kernels in
//! `kernels/CHUNKED-DESIGN.md`). In short:
//! * pass 1 (`cc_forward_h`): one CTA per (D/64 tile, b·h, M/64 tile) walks the chunks in
//!   order with the running fp32 state in registers and writes each chunk's entering state
//!   S⁰, z⁰ once (fla's chunk_h);
//! * pass 2 (`cc_forward`): per chunk, O = (intra masked q̃k̃ᵀ v + inter q̃ S⁰) / den.
//!
//! The inference forward (no d_out staged, D ≤ 128; [`Segments`]) runs in segments of
//! chunks instead, with no state per chunk in memory: `cc_seg_sums` (each segment's sum, all
//! at once), `cc_seg_scan` (the sums into each segment's entering state) and `cc_forward_seg`
//! (O and den of a segment's chunks, the state carried in registers), the segment length by
//! [`auto_seg_chunks`]: 1.0–1.8× the minimum DRAM at fla's shapes where the per-chunk
//! forward moves 2.5–3.5× (`SegmentPlan`; `LINATTN_CC_SEGMENTS=off` for the per-chunk one).
//!
//! A forward the backward follows (d_out staged: training) keeps every chunk's fp32 state and
//! O's rounding residue ([`Kept`]), with k̃ split hi + lo in the states for accuracy: in
//! segments where the plan has them, the program has the split forms
//! ([`trains_in_segments`]) and the device runs them ([`SegmentPlan::trains_on`]: sm_90)
//! (`cc_seg_sums_train`, `cc_seg_scan`, `cc_forward_seg_train`, one pass over q, k, v),
//! else pass 1 split, writing fp32 states, and `cc_forward_train`. The backward then needs neither the walk nor the
//! forward again: `cc_backward_go` (G·O from O + residue, for gd: normalised maps),
//! `cc_backward_h` (the walk from the last chunk: R⁰, r⁰), then `cc_backward_dq`,
//! `cc_backward_dk`, `cc_backward_dv`.
//!
//! The walks run `B·H · D/64 · M/64` CTAs, sequential over the chunks; the per-chunk passes
//! `N/64 · B·H · (M or D)/64`. The workspace is one fp32 state per chunk,
//! `N/64 · D·(M+1) · 4` bytes per head (two of them in the backward: S⁰, kept from the
//! training forward, and the reverse R⁰), written once and read once, plus, in the backward,
//! `N · M/64` fp32 per head of G·O partials. The forward keeps `den` (N fp32 per head) next to
//! O, and in training O's residue (N·M 16-bit per head) and S⁰; no per-token state is ever
//! stored.
//!
//! D and M are each one of 16, 32, 64, 128, 256 ([`HEAD_DIMS`]): a program per tile width
//! 64, 128, 256 ([`TILE_WIDTHS`]), the real row widths as kernel arguments (16 and 32 run on
//! the 64-wide program, zero-padded in shared memory and masked on store; [`LaunchPlan`]); the
//! fused maps are elu+1, relu and identity; decay λ is a kernel argument. A device whose
//! shared-memory opt-in is below a shape's largest launch (D or M = 256 on sm_86/89) is
//! refused by `supports`. The kernels run on the PTX simulator in the tests
//! (`tests/forms.rs`, `tests/chunked_dims.rs`) and on a GPU where one exists.

use std::sync::Arc;

use linattn_core::{
    check_linear_form, Algorithm, AttnError, Backend, BackendInfo, BackwardKind, FeatureMap, Form,
    Precision, Problem, Unsupported,
};

use crate::device_backend::DeviceBackend;
use crate::executor::{Executor, Kernel, Launch, Platform};
use crate::form::{DeviceForm, DeviceGrads, DeviceInputs, FormInfo, Forward, Run, Timed};
use crate::kernel_header;
use crate::limits;
use crate::memory::{DeviceBuffer, MemoryMeter, StorageElem};
use crate::params::{launch_kernel, ptr, KernelParams, ParamSpec};
use crate::runtime::{map_define, storage_define, KernelHeader, KernelVariant};

mod entries;
mod plan;
mod segmented;
pub use plan::{
    auto_seg_chunks, grad_slices_looped, seg_slices_override, tile_width, trains_in_segments,
    GradSlices, LaunchPlan, SegmentPlan, Segments, CHUNK, DEFAULT_SM_COUNT, GO_THREADS, GO_TOKENS,
    GRAD_LOOP_MIN_CTAS, GRAD_SLICES_VAR, HEAD_DIMS, SCAN_THREADS, SEGMENTS_VAR, SEG_CTAS_PER_SM,
    SEG_LENGTHS, SEG_SLICES_VAR, SEG_THREADS, STATIC_SHARED_MAX, TILE, TILE_WIDTHS,
};
use plan::{check_head_dims, grids, ScalarArgs};
use segmented::{KeptOut, SegKernels, SegOutputs};

pub const SOURCE_NAME: &str = "causal_chunked.cu";
pub const SOURCE: &str = include_str!("../../../kernels/causal_chunked.cu");
/// The parts `causal_chunked.cu` includes, in its order.
pub const HEADERS: &[KernelHeader] = &[
    kernel_header!("causal_chunked_common.cuh"),
    kernel_header!("causal_chunked_states.cuh"),
    kernel_header!("causal_chunked_outputs.cuh"),
    kernel_header!("causal_chunked_segments.cuh"),
    kernel_header!("causal_chunked_seg_sums.cuh"),
    kernel_header!("causal_chunked_backward.cuh"),
];

/// Threads per CTA of the chunk kernels: 4 warps × 16 rows.
pub const THREADS: u32 = 128;
/// Threads per CTA of the state walks (`CC_WALK_THREADS`): 8 warps on one 64×64 state tile.
pub const WALK_THREADS: u32 = 256;

/// The fused maps; every other map is refused (it would need the separate φ stage).
pub const FUSED_MAPS: [FeatureMap; 3] = [
    FeatureMap::EluPlusOne,
    FeatureMap::Relu,
    FeatureMap::Identity,
];

pub use entries::params;
pub use params::SPECS as KERNEL_PARAMS;

pub use params::ENTRIES as ENTRY_POINTS;

/// The compile-time specialisation that runs head dims (D, M): storage precision and the tile
/// widths ([`tile_width`]: D, M = 16, 32 share the 64-wide program). The map, the decay and
/// the real widths are kernel arguments, so one program serves every fused map.
pub fn variant(precision: Precision, dk: usize, dv: usize) -> Result<KernelVariant, Unsupported> {
    if !matches!(precision, Precision::F16 | Precision::BF16) {
        return Err(Unsupported::Problem(format!(
            "the chunked tensor-core kernels store f16 or bf16, not {precision}"
        )));
    }
    check_head_dims(dk, dv, precision)?;
    let (storage_name, storage_value) = storage_define(precision)?;
    let width = |dim: usize| tile_width(dim).unwrap_or(dim);
    // The segmented forward's sums and forwards exist in the programs with D's tile width
    // ≤ 128 (their state slice in registers), the training ones not at every such width.
    let segmented = [params::SegSums::SPEC.entry, params::ForwardSeg::SPEC.entry];
    let training = [
        params::SegSumsTrain::SPEC.entry,
        params::ForwardSegTrain::SPEC.entry,
    ];
    let entries: Vec<&str> = ENTRY_POINTS
        .iter()
        .copied()
        .filter(|e| width(dk) <= 128 || !segmented.contains(e))
        .filter(|e| trains_in_segments(width(dk), width(dv)) || !training.contains(e))
        .collect();
    Ok(KernelVariant::new(SOURCE_NAME, SOURCE)
        .headers(HEADERS)
        .define(storage_name, storage_value)
        .define("CC_D", width(dk))
        .define("CC_M", width(dv))
        .entries(&entries)
        .hot())
}

/// Every (precision, tile width of D, of M) program: what CI compiles for sm_80 and sm_90.
pub fn kernel_variants() -> Vec<KernelVariant> {
    let mut all = Vec::new();
    for precision in [Precision::F16, Precision::BF16] {
        for dk in TILE_WIDTHS {
            for dv in TILE_WIDTHS {
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
    limits::check_seq(shape.seq, "the chunked kernels")?;
    // The slices' spread changes neither the limits (grid z ≤ 4) nor shared memory: a bad
    // LINATTN_CC_GRAD_SLICES fails the run (`plan`), it does not make cases "n/a".
    limits::check_grids(&grids(shape, GradSlices::Auto))?;
    LaunchPlan::with_grad_slices(shape, GradSlices::Auto)
        .map_err(|e| Unsupported::Problem(e.to_string()))?;
    Ok(())
}

// ============================================================================================
// The form
// ============================================================================================

/// `<platform>/causal_chunked/f16` and `<platform>/causal_chunked/bf16`.
pub fn backends(platform: Platform) -> Vec<Box<dyn Backend>> {
    backends_with(platform, Segments::Auto)
}

/// [`backends`] with the inference forward's segments fixed (`Auto`: as `LINATTN_CC_SEGMENTS`
/// says, by default [`auto_seg_chunks`]): the tests run short segments at small shapes.
pub fn backends_with(platform: Platform, segments: Segments) -> Vec<Box<dyn Backend>> {
    let form = CausalChunked { segments };
    vec![
        DeviceBackend::<_, half::f16>::boxed(platform, form),
        DeviceBackend::<_, half::bf16>::boxed(platform, form),
    ]
}

/// Backend name for a platform and storage precision.
pub fn backend_name(platform: Platform, precision: Precision) -> String {
    format!("{platform}/causal_chunked/{precision}")
}

/// The causal chunked form on tensor cores (f16 or bf16 storage). `segments`: how the
/// inference forward is split (`Auto`: `LINATTN_CC_SEGMENTS`, else [`auto_seg_chunks`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct CausalChunked {
    pub segments: Segments,
}

/// The entry points of one program, resolved (compiled and loaded) at staging, so timed runs
/// never include NVRTC.
struct Kernels {
    walk_fwd: Kernel,
    /// The segmented forward's, where the plan has segments.
    segmented: Option<SegKernels>,
    walk_bwd: Kernel,
    forward: Kernel,
    forward_train: Kernel,
    go: Kernel,
    dq: Kernel,
    dk: Kernel,
    dv: Kernel,
}

impl Kernels {
    /// `forced_slices`: the value slices per segmented CTA the variant was compiled with
    /// (`CC_SEG_SLICES`), or None for the program's own rule.
    fn load(
        exec: &Arc<dyn Executor>,
        variant: &KernelVariant,
        plan: &LaunchPlan,
        forced_slices: Option<u32>,
    ) -> Result<Self, AttnError> {
        let info = exec.info();
        let kernel = |spec: ParamSpec, shared: u32| -> Result<Kernel, AttnError> {
            let k = exec.kernel(variant, spec.entry)?;
            // The attribute covers static + dynamic bytes over 48 KiB: set it whenever the
            // kernel takes dynamic shared memory, whatever its size.
            if shared > 0 {
                exec.allow_dynamic_shared(&k, shared)?;
            }
            Ok(k)
        };
        let segmented = match &plan.segments {
            Some(seg) => {
                // The program's CC_SEG_SLICES, by the arch it is compiled for.
                let arch = exec.arch();
                let slices =
                    forced_slices.unwrap_or_else(|| seg.slices_per_cta((arch.major, arch.minor)));
                Some(SegKernels {
                    sums: kernel(params::SegSums::SPEC, seg.sums_shared(slices, false))?,
                    scan: kernel(params::SegScan::SPEC, 0)?,
                    forward: kernel(params::ForwardSeg::SPEC, seg.forward_shared(slices, false))?,
                    train: if trains_in_segments(plan.tile_d, plan.tile_m)
                        && seg.trains_on(
                            info.compute_capability,
                            info.max_shared_per_block_optin,
                            slices,
                        ) {
                        Some((
                            kernel(params::SegSumsTrain::SPEC, seg.sums_shared(slices, true))?,
                            kernel(
                                params::ForwardSegTrain::SPEC,
                                seg.forward_shared(slices, true),
                            )?,
                        ))
                    } else {
                        None
                    },
                    slices,
                })
            }
            None => None,
        };
        Ok(Kernels {
            segmented,
            walk_fwd: kernel(params::ForwardH::SPEC, plan.smem_walk)?,
            walk_bwd: kernel(params::BackwardH::SPEC, plan.smem_walk)?,
            forward: kernel(params::Forward::SPEC, plan.smem_forward)?,
            forward_train: kernel(params::ForwardTrain::SPEC, plan.smem_train)?,
            go: kernel(params::BackwardGo::SPEC, 0)?,
            dq: kernel(params::BackwardDq::SPEC, plan.smem_dq)?,
            dk: kernel(params::BackwardDk::SPEC, plan.smem_dk)?,
            dv: kernel(params::BackwardDv::SPEC, plan.smem_dv)?,
        })
    }
}

/// A staging: the launch plan, its scalars and the loaded kernels.
pub struct Plan {
    plan: LaunchPlan,
    args: ScalarArgs,
    kernels: Kernels,
}

impl Plan {
    fn launch<P: KernelParams>(
        &self,
        exec: &Arc<dyn Executor>,
        kernel: &Kernel,
        (grid, shared): ((u32, u32, u32), u32),
        params: &P,
    ) -> Result<(), AttnError> {
        launch_kernel(
            exec.as_ref(),
            kernel,
            &Launch::new(grid, THREADS).with_shared(shared),
            params,
        )
    }

    /// Pass 1 of the forward direction: S⁰, z⁰ of every chunk into `states`.
    /// `split`: k̃ as hi + lo 16-bit operands (the backward's S⁰, z⁰; see `cc_forward_h`),
    /// written in fp32 for `cc_backward_go` and `cc_backward_dq`; otherwise packed for
    /// `cc_forward`.
    fn forward_states<T>(
        &self,
        exec: &Arc<dyn Executor>,
        inputs: &DeviceInputs<T>,
        states: &DeviceBuffer<f32>,
        split: bool,
    ) -> Result<(), AttnError> {
        let a = self.args;
        // k, v hold B·H·N·(D|M) elements and states B·H·NC·stride.
        let params = params::ForwardH {
            k: ptr(&inputs.k),
            v: ptr(&inputs.v),
            states: ptr(states),
            split,
            packed: !split,
            n: a.n,
            num_chunks: a.num_chunks,
            log2_decay: a.log2_decay,
            chunk_decay: a.chunk_decay,
            map: a.map,
            d: a.d,
            m: a.m,
        };
        self.walk(exec, &self.kernels.walk_fwd, &params)
    }

    /// A state walk's launch: `grid_walk`, `WALK_THREADS` per CTA.
    fn walk<P: KernelParams>(
        &self,
        exec: &Arc<dyn Executor>,
        kernel: &Kernel,
        params: &P,
    ) -> Result<(), AttnError> {
        let launch =
            Launch::new(self.plan.grid_walk, WALK_THREADS).with_shared(self.plan.smem_walk);
        launch_kernel(exec.as_ref(), kernel, &launch, params)
    }
}

/// What the forward keeps: the per-token denominators (fp32, [B·H·N]), the backward's gn, gd;
/// and, when a backward follows (d_out was staged), [`Kept`].
pub struct Saved<T> {
    den: DeviceBuffer<f32>,
    kept: Option<Kept<T>>,
}

/// What a forward the backward follows keeps beside O and den, so the backward neither walks
/// the chunks forward again nor recomputes O: the fp32 chunk states S⁰, z⁰ of the split walk
/// (`state_len` fp32, written and read once each, never per token) and O's rounding residue
/// (B·H·N·M in storage precision; normalised maps only, empty for identity).
pub struct Kept<T> {
    states: DeviceBuffer<f32>,
    out_lo: DeviceBuffer<T>,
}

impl<T: StorageElem> DeviceForm<T> for CausalChunked {
    type Plan = Plan;
    type Saved = Saved<T>;

    fn info(&self) -> FormInfo {
        FormInfo {
            name: "causal_chunked".into(),
            algorithm: Algorithm::Linear(Form::Chunked),
            backward: Some(BackwardKind::Efficient),
        }
    }

    fn check(&self, info: &BackendInfo, problem: &Problem) -> Result<(), Unsupported> {
        check_problem(info, problem)
    }

    /// The device is sm_80+ (bf16 mma and cvt) and opts in to the shape's shared memory.
    fn device_ready_for(&self, exec: &dyn Executor, problem: &Problem) -> Result<(), Unsupported> {
        <Self as DeviceForm<T>>::device_ready(self, exec)?;
        let plan = LaunchPlan::with_grad_slices(&problem.shape, GradSlices::Auto)
            .map_err(|e| Unsupported::Problem(e.to_string()))?;
        let info = exec.info();
        plan.check_shared(&info.name, info.max_shared_per_block_optin)
    }

    /// The device is sm_80+ (bf16 mma and cvt).
    fn device_ready(&self, exec: &dyn Executor) -> Result<(), Unsupported> {
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

    fn plan(
        &self,
        exec: &Arc<dyn Executor>,
        problem: &Problem,
        _input_meter: &MemoryMeter,
    ) -> Result<Plan, AttnError> {
        let shape = problem.shape;
        let sm_count = exec.info().sm_count as usize;
        let plan = LaunchPlan::with_segments(&shape, self.segments, sm_count)?;
        let map = map_code(&problem.map, T::PRECISION)?;
        let args = ScalarArgs::new(problem, &plan, map)?;
        // LINATTN_CC_SEG_SLICES=1: the program with one value slice per segmented CTA (a bad
        // value fails the run here, naming the variable).
        let slices = seg_slices_override()?;
        let mut variant = variant(T::PRECISION, shape.dk, shape.dv)?;
        if let Some(forced) = slices {
            variant = variant.define("CC_SEG_SLICES", forced);
        }
        let kernels = Kernels::load(exec, &variant, &plan, slices)?;
        Ok(Plan {
            plan,
            args,
            kernels,
        })
    }

    /// Inference (no d_out staged): the segmented forward where the plan has segments, else
    /// the packed walk and `cc_forward`; the states are dropped.
    /// Training (d_out staged, a backward follows): the split walk in fp32 and
    /// `cc_forward_train`, keeping the states and O's residue for the backward ([`Kept`]).
    fn forward(&self, run: &Run<'_, T>, plan: &Plan) -> Timed<Forward<T, Saved<T>>> {
        let (exec, meter, inputs) = (run.exec, run.meter, run.inputs);
        let shape = run.problem.shape;
        let train = inputs.d_out.is_some();
        let normalised = run.problem.map.normalised();
        let out = DeviceBuffer::<T>::uninit(exec, meter, shape.v_len()?)?;
        let out_lo_len = if train && normalised {
            shape.v_len()?
        } else {
            0
        };
        let out_lo = DeviceBuffer::<T>::uninit(exec, meter, out_lo_len)?;
        let den = DeviceBuffer::<f32>::uninit(exec, meter, shape.bh() * shape.seq)?;
        // Segments where the plan has them and the staging loaded this form's kernels.
        let seg_kernels = plan
            .kernels
            .segmented
            .as_ref()
            .filter(|k| k.form(train).is_some());
        if let (Some(seg), Some(kernels)) = (plan.plan.segments, seg_kernels) {
            let seg_states = DeviceBuffer::<f32>::uninit(exec, meter, seg.state_len)?;
            let chunk_states = DeviceBuffer::<f32>::uninit(
                exec,
                meter,
                if train { plan.plan.state_len } else { 0 },
            )?;
            let outputs = SegOutputs {
                out: &out,
                den: &den,
                kept: train.then_some(KeptOut {
                    chunk_states: &chunk_states,
                    out_lo: &out_lo,
                }),
            };
            let elapsed = run.time(|| {
                segmented::forward(
                    exec,
                    kernels,
                    &plan.args,
                    inputs,
                    &seg,
                    &seg_states,
                    &outputs,
                )
            })?;
            drop(seg_states);
            let kept = train.then_some(Kept {
                states: chunk_states,
                out_lo,
            });
            return Ok((
                Forward {
                    out,
                    saved: Saved { den, kept },
                },
                elapsed,
            ));
        }
        let states = DeviceBuffer::<f32>::uninit(exec, meter, plan.plan.state_len)?;
        let (p, a) = (&plan.plan, plan.args);
        let elapsed = run.time(|| {
            plan.forward_states(exec, inputs, &states, train)?;
            // q, k: B·H·N·D; v, out, out_lo: B·H·N·M; den: B·H·N; states: state_len.
            let params = params::Forward {
                q: ptr(&inputs.q),
                k: ptr(&inputs.k),
                v: ptr(&inputs.v),
                states: ptr(&states),
                out: ptr(&out),
                out_lo: ptr(&out_lo),
                den_out: ptr(&den),
                n: a.n,
                num_chunks: a.num_chunks,
                log2_decay: a.log2_decay,
                eps: a.eps,
                map: a.map,
                d: a.d,
                m: a.m,
            };
            if train {
                let value_tiles = (p.grid_value_tiles, p.smem_train);
                let params = params::ForwardTrain(params);
                plan.launch(exec, &plan.kernels.forward_train, value_tiles, &params)
            } else {
                let value_tiles = (p.grid_value_tiles, p.smem_forward);
                plan.launch(exec, &plan.kernels.forward, value_tiles, &params)
            }
        })?;
        let kept = train.then_some(Kept { states, out_lo });
        Ok((
            Forward {
                out,
                saved: Saved { den, kept },
            },
            elapsed,
        ))
    }

    fn backward(
        &self,
        run: &Run<'_, T>,
        plan: &Plan,
        fwd: &Forward<T, Saved<T>>,
        d_out: &DeviceBuffer<T>,
    ) -> Timed<DeviceGrads<T>> {
        let (exec, meter, inputs) = (run.exec, run.meter, run.inputs);
        let shape = run.problem.shape;
        let normalised = run.problem.map.normalised();
        let den = &fwd.saved.den;
        // The forward of a staging with d_out always keeps them (device_backend refuses a
        // backward without d_out before this).
        let kept = fwd.saved.kept.as_ref().ok_or_else(|| {
            AttnError::InvalidArgument(
                "causal_chunked backward: the forward kept no chunk states (d_out was not staged)"
                    .into(),
            )
        })?;
        let dq = DeviceBuffer::<T>::uninit(exec, meter, shape.qk_len()?)?;
        let dk = DeviceBuffer::<T>::uninit(exec, meter, shape.qk_len()?)?;
        let dv = DeviceBuffer::<T>::uninit(exec, meter, shape.v_len()?)?;
        let states_rev = DeviceBuffer::<f32>::uninit(exec, meter, plan.plan.state_len)?;
        // G·O from O and its residue, one partial per 64-wide slice of M's tile width
        // (normalised maps only: the identity map has no gd and the kernels never read it).
        let go_len = if normalised {
            shape.bh() * shape.seq * (plan.plan.tile_m / TILE)
        } else {
            0
        };
        let go_parts = DeviceBuffer::<f32>::uninit(exec, meter, go_len)?;
        let states_fwd = &kept.states;
        let (p, a, ks) = (&plan.plan, plan.args, &plan.kernels);
        let (q, k, v, grad) = (ptr(&inputs.q), ptr(&inputs.k), ptr(&inputs.v), ptr(d_out));
        let (go_parts_ptr, den_ptr) = (ptr(&go_parts), ptr(den));
        let (n, num_chunks, log2_decay, map) = (a.n, a.num_chunks, a.log2_decay, a.map);
        let (d, m) = (a.d, a.m);
        let elapsed = run.time(|| {
            if normalised {
                // d_out, out, out_lo: B·H·N·M; go_parts: B·H·N·M/64.
                let params = params::BackwardGo {
                    grad,
                    out: ptr(&fwd.out),
                    out_lo: ptr(&kept.out_lo),
                    go: go_parts_ptr,
                    n,
                    d,
                    m,
                };
                let launch = Launch::new(p.grid_go, GO_THREADS);
                launch_kernel(exec.as_ref(), &ks.go, &launch, &params)?;
            }
            // q: B·H·N·D; d_out: B·H·N·M; go_parts, den: as above; states_rev: state_len.
            let params = params::BackwardH {
                q,
                grad,
                go_parts: go_parts_ptr,
                den: den_ptr,
                states: ptr(&states_rev),
                n,
                num_chunks,
                log2_decay,
                chunk_decay: a.chunk_decay,
                map,
                d,
                m,
            };
            plan.walk(exec, &ks.walk_bwd, &params)?;
            // dq, dk hold B·H·N·D elements.
            let params = params::BackwardDq {
                q,
                k,
                v,
                grad,
                go_parts: go_parts_ptr,
                den: den_ptr,
                states: ptr(states_fwd),
                out: ptr(&dq),
                n,
                num_chunks,
                log2_decay,
                map,
                d,
                m,
            };
            plan.launch(exec, &ks.dq, (p.grid_grad_keys, p.smem_dq), &params)?;
            // dK: the same parameter list on the reverse states.
            let params = params::BackwardDk(params::BackwardDq {
                states: ptr(&states_rev),
                out: ptr(&dk),
                ..params
            });
            plan.launch(exec, &ks.dk, (p.grid_grad_keys, p.smem_dk), &params)?;
            let params = params::BackwardDv {
                q,
                k,
                grad,
                den: den_ptr,
                states: ptr(&states_rev),
                dv: ptr(&dv),
                n,
                num_chunks,
                log2_decay,
                map,
                d,
                m,
            };
            plan.launch(exec, &ks.dv, (p.grid_grad_values, p.smem_dv), &params)
        })?;
        drop(states_rev);
        Ok((DeviceGrads { dq, dk, dv }, elapsed))
    }
}
