//! Causal linear attention, cumsum form (SPEC §3), on the GPU or the simulator:
//! `{cuda,sim}/causal_cumsum/{f32,f16}`.
//!
//! The forward materialises `U_i = φ(k_i) v_iᵀ` for every token (N·C·M fp32 per head, plus
//! N·C for the key sums), prefix-sums it over N with a three-phase blockwise scan (chunks of
//! ≈√N tokens: local scans, a sequential carry over chunk ends, a parallel fix-up), and
//! contracts every S_i with φ(q_i). O(N·C·M) memory on purpose: the memory tables show it.
//! Before allocating, the forward compares its whole footprint with the device's free memory
//! and returns `AttnError::OutOfMemory` instead of failing half way.
//!
//! The backward is the recurrent form's memory-efficient backward
//! ([`crate::causal_recurrent`], `BackwardKind::Efficient`), fed the denominators this
//! forward saves: reading N·C·M states back would cost more traffic than recomputing them.
//! For f16 it also runs the recurrent forward scan once more (`cr_backward_go`): gd takes
//! G·O from the fp32 O, not from the f16 O this forward stored.
//!
//! Kernels: `kernels/causal_cumsum.cu` (its header gives the math, the mapping and the limits).

use std::sync::Arc;

use half::f16;
use linattn_core::{
    Algorithm, AttnError, Backend, BackendInfo, BackwardKind, Form, Precision, Problem, Unsupported,
};

use crate::causal_recurrent::{
    buffer_or_placeholder, check_problem, recurrent_backward, timed_scan_forward, CoreDims,
    CoreOperands, MapClass, ScanPlan, ScanSaved,
};
use crate::device_backend::DeviceBackend;
use crate::executor::{Executor, Launch, Platform};
use crate::form::{DeviceForm, DeviceGrads, FormInfo, Forward, Run, Timed};
use crate::limits::{self, Axis, Grid, GRID_YZ_MAX};
use crate::memory::{DeviceBuffer, MemoryMeter, StorageElem};
use crate::params::{launch, ptr, Ptr};
use crate::runtime::{as_i32, storage_define, KernelVariant};

pub const SOURCE_NAME: &str = "causal_cumsum.cu";
pub const SOURCE: &str = include_str!("../../../kernels/causal_cumsum.cu");

crate::kernel_params! {
    /// The argument structs of causal_cumsum.cu's entry points.
    pub mod params;
    /// `cs_outer`: U_i = φ(k_i) v_iᵀ and φ(k_i) for every token.
    pub struct Outer => "cs_outer" {
        k: Ptr, v: Ptr, u: Ptr, z_u: Ptr, rows: i64, c_dim: i32, m_dim: i32,
    }
    /// `cs_scan_local`: phase 1, the decayed prefix sum within each chunk.
    pub struct ScanLocal => "cs_scan_local" {
        x: Ptr, entries: i32, n: i32, chunk: i32, decay: f32,
    }
    /// `cs_scan_carry`: phase 2, the sequential carry over chunk ends.
    pub struct ScanCarry => "cs_scan_carry" {
        x: Ptr, entries: i32, n: i32, chunk: i32, decay: f32,
    }
    /// `cs_scan_fix`: phase 3, each chunk's carry added in.
    pub struct ScanFix => "cs_scan_fix" {
        x: Ptr, entries: i32, n: i32, chunk: i32, decay: f32,
    }
    /// `cs_contract`: O_i = φ(q_i) S_i / den_i.
    pub struct Contract => "cs_contract" {
        q: Ptr, s: Ptr, z: Ptr, out: Ptr, den_out: Ptr, q_log_scale: Ptr, k_log_scale: Ptr,
        n: i32, c_dim: i32, m_dim: i32, eps: f32,
    }
}

pub use params::SPECS as KERNEL_PARAMS;

pub use params::ENTRIES as ENTRY_POINTS;

const THREADS: u32 = 256;
/// Grid y/z limit (the chunk count of [`chunk_len`] stays within it).
const MAX_GRID_YZ: usize = GRID_YZ_MAX as usize;
/// Blocks of the grid-stride `cs_outer`: fills any current GPU several times over (an H100
/// holds 132 SMs × 8 CTAs of 256 threads = 1056 at once). Small enough that the default check
/// grid (B·H·N = 6600 rows) runs the grid-stride loop, so its trailing barrier is tested.
const MAX_OUTER_BLOCKS: usize = 1 << 12;

/// The module of `causal_cumsum.cu` for one precision and map class.
pub fn variant(precision: Precision, map: MapClass) -> Result<KernelVariant, Unsupported> {
    let (storage_key, storage_value) = storage_define(precision)?;
    Ok(KernelVariant::new(SOURCE_NAME, SOURCE)
        .define(storage_key, storage_value)
        .define("LA_MAP", map.la_map())
        .define("LA_NORMALISED", u32::from(map.normalised()))
        .define("CS_QK_F32", u32::from(map.qk_f32()))
        .hot()
        .entries(&ENTRY_POINTS))
}

/// Precisions with a cumsum backend.
pub const PRECISIONS: [Precision; 2] = [Precision::F32, Precision::F16];

/// Every variant (2 precisions × 4 map classes), for the compile-all test. The backward
/// kernels come from `causal_recurrent`'s variants.
pub fn kernel_variants() -> Vec<KernelVariant> {
    PRECISIONS
        .iter()
        .flat_map(|&p| {
            MapClass::ALL
                .iter()
                .filter_map(move |&m| variant(p, m).ok())
        })
        .collect()
}

/// Tokens per scan chunk for sequence length `n`: ≈√n, so the sequential carry (n/chunk
/// steps) and the in-chunk scans (chunk steps) are balanced; at least ⌈n/65535⌉ so the
/// chunk count fits grid y. Always in 1..=n.
pub fn chunk_len(n: usize) -> usize {
    let n = n.max(1);
    let mut root = (n as f64).sqrt().ceil() as usize;
    // Floating-point sqrt may be one off for huge n; fix it up so root² ≥ n.
    while root.saturating_mul(root) < n {
        root += 1;
    }
    root.max(n.div_ceil(MAX_GRID_YZ)).clamp(1, n)
}

/// Device bytes of the forward's workspace (U and the key sums), beyond O and den.
pub fn workspace_bytes(dims: &CoreDims) -> Result<u64, AttnError> {
    let entries = dims
        .c
        .checked_mul(dims.m)
        .ok_or_else(|| AttnError::SizeOverflow("C·M".into()))?;
    let key_sums = if dims.map.normalised() { dims.c } else { 0 };
    let floats = dims
        .len(entries)?
        .checked_add(dims.len(key_sums)?)
        .ok_or_else(|| AttnError::SizeOverflow("cumsum workspace".into()))?;
    (floats as u64)
        .checked_mul(4)
        .ok_or_else(|| AttnError::SizeOverflow("cumsum workspace bytes".into()))
}

/// Bytes of everything the forward allocates: O, den, the φ buffers and the workspace.
pub fn forward_bytes(dims: &CoreDims, storage_bytes: usize) -> Result<u64, AttnError> {
    let overflow = || AttnError::SizeOverflow("cumsum forward bytes".into());
    let out = (dims.len(dims.m)? as u64)
        .checked_mul(storage_bytes as u64)
        .ok_or_else(overflow)?;
    let den = 4 * dims.tokens()? as u64;
    let phi = if dims.map.qk_f32() {
        8 * dims.len(dims.c)? as u64
    } else {
        0
    };
    [out, den, phi, workspace_bytes(dims)?]
        .into_iter()
        .try_fold(0u64, |acc, b| acc.checked_add(b))
        .ok_or_else(overflow)
}

/// Grids of the three scan phases for `entries` values per token (`what`: C·M or C):
/// (⌈E/256⌉, chunks, B·H), (⌈E/256⌉, B·H), (⌈E/256⌉, chunks, B·H).
pub fn scan_grids(what: &str, entries: usize, n: usize, batch_heads: usize) -> [Grid; 3] {
    let chunks = n.div_ceil(chunk_len(n));
    let x = || Axis::covering(what, entries as u64, u64::from(THREADS));
    let chunk_axis = || Axis::each("chunks of N", chunks);
    let bh = || Axis::each("B·H", batch_heads);
    [
        Grid::of::<params::ScanLocal>(x(), chunk_axis(), bh()),
        Grid::of::<params::ScanCarry>(x(), bh(), Axis::one()),
        Grid::of::<params::ScanFix>(x(), chunk_axis(), bh()),
    ]
}

/// Launch shapes of the three scan phases of [`scan_grids`].
pub fn scan_launches(
    what: &str,
    entries: usize,
    n: usize,
    batch_heads: usize,
) -> Result<[Launch; 3], AttnError> {
    let [local, carry, fix] = scan_grids(what, entries, n, batch_heads);
    let config = |grid: Grid| grid.dims().map(|dims| Launch::new(dims, THREADS));
    Ok([config(local)?, config(carry)?, config(fix)?])
}

/// `cs_contract`: a block per token, (N, B·H).
fn contract_grid(dims: &CoreDims) -> Grid {
    Grid::of::<params::Contract>(
        Axis::each("N", dims.n),
        Axis::each("B·H", dims.batch_heads),
        Axis::one(),
    )
}

/// The grid of every launch of the forward (`cs_outer` is grid-stride); the backward is the
/// recurrent form's.
pub fn launch_grids(dims: &CoreDims) -> Vec<Grid> {
    let mut grids = scan_grids("C·M", dims.c * dims.m, dims.n, dims.batch_heads).to_vec();
    if dims.map.normalised() {
        grids.extend(scan_grids("C", dims.c, dims.n, dims.batch_heads));
    }
    grids.push(contract_grid(dims));
    grids
}

/// Enqueues the decayed inclusive prefix sum over N of `x` ([B·H, N, entries], in place).
fn launch_scan(
    exec: &Arc<dyn Executor>,
    variant: &KernelVariant,
    dims: &CoreDims,
    x: &DeviceBuffer<f32>,
    (what, entries): (&str, usize),
) -> Result<(), AttnError> {
    let [local, carry, fix] = scan_launches(what, entries, dims.n, dims.batch_heads)?;
    let entries = as_i32("scan entries", entries)?;
    let n = as_i32("N", dims.n)?;
    let chunk = as_i32("chunk", chunk_len(dims.n))?;
    let chunks = dims.n.div_ceil(chunk_len(dims.n));
    let (x, decay, exec) = (ptr(x), dims.decay, exec.as_ref());
    // x holds B·H·N·entries; one chunk needs only its local scan.
    let params = params::ScanLocal {
        x,
        entries,
        n,
        chunk,
        decay,
    };
    launch(exec, variant, &local, &params)?;
    if chunks > 1 {
        let params = params::ScanCarry {
            x,
            entries,
            n,
            chunk,
            decay,
        };
        launch(exec, variant, &carry, &params)?;
        let params = params::ScanFix {
            x,
            entries,
            n,
            chunk,
            decay,
        };
        launch(exec, variant, &fix, &params)?;
    }
    Ok(())
}

/// Enqueues outer products, scans and contraction of `ops` and v into out and den, through
/// the workspace u (and z_u for the key sums).
fn launch_forward<T: StorageElem>(
    exec: &Arc<dyn Executor>,
    dims: &CoreDims,
    ops: CoreOperands,
    (v, u, z_u): (Ptr, &DeviceBuffer<f32>, &DeviceBuffer<f32>),
    (out, den_out): (Ptr, Ptr),
) -> Result<(), AttnError> {
    let variant = variant(T::PRECISION, dims.map)?;
    let tokens = dims.tokens()?;
    let rows =
        i64::try_from(tokens).map_err(|_| AttnError::SizeOverflow(format!("{tokens} tokens")))?;
    let (n, c_dim, m_dim) = dims.ints()?;

    // u holds tokens·C·M, z_u tokens·C (normalised) elements.
    launch(
        exec.as_ref(),
        &variant,
        &Launch::new((tokens.clamp(1, MAX_OUTER_BLOCKS) as u32, 1, 1), THREADS),
        &params::Outer {
            k: ops.k,
            v,
            u: ptr(u),
            z_u: ptr(z_u),
            rows,
            c_dim,
            m_dim,
        },
    )?;

    launch_scan(exec, &variant, dims, u, ("C·M", dims.c * dims.m))?;
    if dims.map.normalised() {
        launch_scan(exec, &variant, dims, z_u, ("C", dims.c))?;
    }

    // out holds tokens·M, den tokens elements.
    launch(
        exec.as_ref(),
        &variant,
        &Launch::new(contract_grid(dims).dims()?, THREADS),
        &params::Contract {
            q: ops.q,
            s: ptr(u),
            z: ptr(z_u),
            out,
            den_out,
            q_log_scale: ops.log_scales.0,
            k_log_scale: ops.log_scales.1,
            n,
            c_dim,
            m_dim,
            eps: dims.eps,
        },
    )
}

fn cumsum_forward<T: StorageElem>(
    run: &Run<'_, T>,
    plan: &ScanPlan,
) -> Timed<Forward<T, ScanSaved>> {
    let (exec, meter, inputs) = (run.exec, run.meter, run.inputs);
    let dims = plan.dims;
    let normalised = dims.map.normalised();
    let needed = forward_bytes(&dims, T::PRECISION.bytes())?;
    let (free, total) = exec.memory_info()?;
    if needed > free {
        return Err(AttnError::OutOfMemory {
            device: exec.info().name.clone(),
            requested_bytes: needed,
            detail: format!(
                "cumsum keeps N·C·M = {}·{}·{} fp32 per head; {free} bytes free of {total}",
                dims.n, dims.c, dims.m
            ),
        });
    }
    let out = DeviceBuffer::<T>::uninit(exec, meter, dims.len(dims.m)?)?;
    let den = buffer_or_placeholder::<f32>(exec, meter, normalised, dims.tokens()?)?;
    // Workspace: dropped at the end of this function, after its peak is on the meter.
    let entries = dims.c * dims.m;
    let u = DeviceBuffer::<f32>::uninit(exec, meter, dims.len(entries)?)?;
    let z_u = buffer_or_placeholder::<f32>(exec, meter, normalised, dims.len(dims.c)?)?;
    let outputs = (ptr(&out), ptr(&den));
    timed_scan_forward(run, plan, (out, den, None), |ops| {
        launch_forward::<T>(exec, &dims, ops, (ptr(&inputs.v), &u, &z_u), outputs)
    })
}

/// Backends of this module on `platform`.
pub fn backends(platform: Platform) -> Vec<Box<dyn Backend>> {
    vec![
        DeviceBackend::<_, f32>::boxed(platform, CausalCumsum),
        DeviceBackend::<_, f16>::boxed(platform, CausalCumsum),
    ]
}

/// The cumsum form: every S_i materialised and prefix-summed; the recurrent backward.
#[derive(Debug, Clone, Copy, Default)]
pub struct CausalCumsum;

impl<T: StorageElem> DeviceForm<T> for CausalCumsum {
    type Plan = ScanPlan;
    type Saved = ScanSaved;

    fn info(&self) -> FormInfo {
        FormInfo {
            name: "causal_cumsum".into(),
            algorithm: Algorithm::Linear(Form::Cumsum),
            // The recurrent form's memory-efficient backward (module docs).
            backward: Some(BackwardKind::Efficient),
        }
    }

    fn check(&self, info: &BackendInfo, problem: &Problem) -> Result<(), Unsupported> {
        check_problem(info, problem)?;
        limits::check_grids(&launch_grids(&CoreDims::of(problem)))
    }

    fn plan(
        &self,
        exec: &Arc<dyn Executor>,
        problem: &Problem,
        input_meter: &MemoryMeter,
    ) -> Result<ScanPlan, AttnError> {
        ScanPlan::new(exec, problem, T::PRECISION, input_meter)
    }

    fn forward(&self, run: &Run<'_, T>, plan: &ScanPlan) -> Timed<Forward<T, ScanSaved>> {
        cumsum_forward(run, plan)
    }

    fn backward(
        &self,
        run: &Run<'_, T>,
        plan: &ScanPlan,
        fwd: &Forward<T, ScanSaved>,
        d_out: &DeviceBuffer<T>,
    ) -> Timed<DeviceGrads<T>> {
        recurrent_backward(run, plan, fwd, d_out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_the_sequence_and_fit_the_grid() {
        for n in [
            1usize,
            2,
            7,
            63,
            64,
            65,
            1000,
            65_536,
            1 << 20,
            (1 << 31) - 1,
        ] {
            let chunk = chunk_len(n);
            assert!((1..=n).contains(&chunk), "n={n} chunk={chunk}");
            let chunks = n.div_ceil(chunk);
            assert!(chunks <= MAX_GRID_YZ, "n={n}: {chunks} chunks");
            assert!(chunks * chunk >= n);
        }
        assert_eq!(chunk_len(1_000_000), 1000);
        assert_eq!(chunk_len(65), 9);
    }
}
