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
use std::time::Duration;

use half::f16;
use linattn_core::{
    Algorithm, AttnError, Backend, BackendInfo, BackwardKind, Form, Grads, Inputs, Precision,
    Problem, RunStats, Tensor, Unsupported,
};

use crate::args;
use crate::causal_recurrent::{
    self as recurrent, buffer_or_placeholder, check_problem, CoreDims, ForwardState, MapClass,
    ScanRuns, StagedInputs,
};
use crate::executor::{Executor, KernelArg, Launch, Platform};
use crate::feature_map::log_scales;
use crate::memory::{DeviceBuffer, MemoryMeter, StorageElem};
use crate::runtime::{as_i32, blocks_for, storage_define, KernelVariant};

pub const SOURCE_NAME: &str = "causal_cumsum.cu";
pub const SOURCE: &str = include_str!("../../../kernels/causal_cumsum.cu");

/// Every `extern "C"` kernel of `causal_cumsum.cu`.
pub const ENTRY_POINTS: [&str; 5] = [
    "cs_outer",
    "cs_scan_local",
    "cs_scan_carry",
    "cs_scan_fix",
    "cs_contract",
];

const THREADS: u32 = 256;
/// Grid y/z limit (chunks and B·H).
const MAX_GRID_YZ: usize = 65_535;
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

/// Launch shapes of the three scan phases for `entries` values per token.
pub fn scan_launches(
    entries: usize,
    n: usize,
    batch_heads: usize,
) -> Result<[Launch; 3], AttnError> {
    let chunk = chunk_len(n);
    let chunks = n.div_ceil(chunk);
    if chunks > MAX_GRID_YZ || batch_heads > MAX_GRID_YZ || batch_heads == 0 {
        return Err(AttnError::InvalidArgument(format!(
            "cumsum scan grid: {chunks} chunks × {batch_heads} heads exceeds 65535"
        )));
    }
    let x = blocks_for(entries, THREADS as usize)?;
    let config = |grid| Launch::new(grid, THREADS);
    Ok([
        config((x, chunks as u32, batch_heads as u32)),
        config((x, batch_heads as u32, 1)),
        config((x, chunks as u32, batch_heads as u32)),
    ])
}

/// Enqueues the decayed inclusive prefix sum over N of `x` ([B·H, N, entries], in place).
fn launch_scan(
    exec: &Arc<dyn Executor>,
    variant: &KernelVariant,
    dims: &CoreDims,
    x: &DeviceBuffer<f32>,
    entries: usize,
) -> Result<(), AttnError> {
    let [local, carry, fix] = scan_launches(entries, dims.n, dims.batch_heads)?;
    let entries_i32 = as_i32("scan entries", entries)?;
    let n = as_i32("N", dims.n)?;
    let chunk = as_i32("chunk", chunk_len(dims.n))?;
    let chunks = dims.n.div_ceil(chunk_len(dims.n));
    let phases: &[(&str, Launch)] = if chunks > 1 {
        &[
            ("cs_scan_local", local),
            ("cs_scan_carry", carry),
            ("cs_scan_fix", fix),
        ]
    } else {
        &[("cs_scan_local", local)]
    };
    for (entry, launch) in phases {
        // cs_scan_*(float* x, int entries, int n, int chunk, float decay); x holds
        // B·H·N·entries.
        exec.launch(
            &exec.kernel(variant, entry)?,
            launch,
            &args![x, entries_i32, n, chunk, dims.decay],
        )?;
    }
    Ok(())
}

/// Enqueues outer products, scans and contraction.
#[allow(clippy::too_many_arguments)]
fn launch_forward<T: StorageElem, Q>(
    exec: &Arc<dyn Executor>,
    dims: &CoreDims,
    q: &DeviceBuffer<Q>,
    k: &DeviceBuffer<Q>,
    v: &DeviceBuffer<T>,
    u: &DeviceBuffer<f32>,
    z_u: &DeviceBuffer<f32>,
    out: &DeviceBuffer<T>,
    den: &DeviceBuffer<f32>,
    log_scales: (u64, u64),
) -> Result<(), AttnError> {
    let variant = variant(T::PRECISION, dims.map)?;
    let tokens = dims.tokens()?;
    let tokens_i64 =
        i64::try_from(tokens).map_err(|_| AttnError::SizeOverflow(format!("{tokens} tokens")))?;
    let (n, c, m) = (
        as_i32("N", dims.n)?,
        as_i32("C", dims.c)?,
        as_i32("M", dims.m)?,
    );

    // u holds tokens·C·M, z_u tokens·C (normalised) elements.
    exec.launch(
        &exec.kernel(&variant, "cs_outer")?,
        &Launch::new((tokens.clamp(1, MAX_OUTER_BLOCKS) as u32, 1, 1), THREADS),
        &args![k, v, u, z_u, tokens_i64, c, m],
    )?;

    launch_scan(exec, &variant, dims, u, dims.c * dims.m)?;
    if dims.map.normalised() {
        launch_scan(exec, &variant, dims, z_u, dims.c)?;
    }

    // out holds tokens·M, den tokens elements.
    let grid = (
        u32::try_from(dims.n).map_err(|_| AttnError::SizeOverflow("N".into()))?,
        u32::try_from(dims.batch_heads).map_err(|_| AttnError::SizeOverflow("B·H".into()))?,
        1,
    );
    exec.launch(
        &exec.kernel(&variant, "cs_contract")?,
        &Launch::new(grid, THREADS),
        &args![
            q,
            u,
            z_u,
            out,
            den,
            KernelArg::Ptr(log_scales.0),
            KernelArg::Ptr(log_scales.1),
            n,
            c,
            m,
            dims.eps
        ],
    )
}

fn cumsum_forward<T: StorageElem>(
    meter: &MemoryMeter,
    staged: &StagedInputs<T>,
) -> Result<(ForwardState<T>, Duration), AttnError> {
    let exec = &staged.exec;
    let dims = staged.dims;
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
    let mut features = None;
    let elapsed = exec.time(&mut || {
        features = recurrent::run_feature_stage(meter, staged)?;
        let scales = log_scales(features.as_ref());
        match &features {
            Some(f) => launch_forward(
                exec, &dims, &f.q, &f.k, &staged.v, &u, &z_u, &out, &den, scales,
            ),
            None => launch_forward(
                exec, &dims, &staged.q, &staged.k, &staged.v, &u, &z_u, &out, &den, scales,
            ),
        }
    })?;
    Ok((
        ForwardState {
            out,
            den,
            states: None,
            features,
        },
        elapsed,
    ))
}

/// `<platform>/causal_cumsum/<precision>`.
pub struct CumsumBackend<T: StorageElem> {
    info: BackendInfo,
    runs: ScanRuns<T>,
}

impl<T: StorageElem> CumsumBackend<T> {
    pub fn new(platform: Platform) -> Self {
        CumsumBackend {
            info: BackendInfo {
                name: format!("{platform}/causal_cumsum/{}", T::PRECISION),
                device: platform.device_kind(),
                precision: T::PRECISION,
                algorithm: Algorithm::Linear(Form::Cumsum),
                // The recurrent form's memory-efficient backward (module docs).
                backward: Some(BackwardKind::Efficient),
            },
            runs: ScanRuns::new(platform),
        }
    }
}

/// Backends of this module on `platform`.
pub fn backends(platform: Platform) -> Vec<Box<dyn Backend>> {
    vec![
        Box::new(CumsumBackend::<f32>::new(platform)),
        Box::new(CumsumBackend::<f16>::new(platform)),
    ]
}

impl<T: StorageElem> Backend for CumsumBackend<T> {
    fn info(&self) -> &BackendInfo {
        &self.info
    }

    fn supports(&self, problem: &Problem) -> Result<(), Unsupported> {
        self.runs.platform().available()?;
        check_problem(&self.info, problem)?;
        // Scans take the chunk count in grid y and entries in int.
        let dims = CoreDims::of(problem);
        scan_launches(dims.c * dims.m, dims.n, dims.batch_heads)
            .map(|_| ())
            .map_err(|e| Unsupported::Problem(e.to_string()))
    }

    fn stage(&mut self, problem: &Problem, inputs: &Inputs) -> Result<(), AttnError> {
        self.release();
        self.supports(problem)?;
        self.runs.stage(problem, inputs)
    }

    fn run_forward(&mut self) -> Result<RunStats, AttnError> {
        self.runs.run_forward(&self.info.name, cumsum_forward)
    }

    fn run_backward(&mut self) -> Result<RunStats, AttnError> {
        self.runs.run_backward(&self.info.name)
    }

    fn output(&mut self) -> Result<Tensor, AttnError> {
        self.runs.output(&self.info.name)
    }

    fn grads(&mut self) -> Result<Grads, AttnError> {
        self.runs.grads(&self.info.name)
    }

    fn release(&mut self) {
        self.runs.release();
    }

    fn flush_cache(&mut self) -> Result<(), AttnError> {
        self.runs.flush_cache()
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
