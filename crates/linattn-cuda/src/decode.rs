//! Streaming decode on the GPU (SPEC §2's RNN view, §6 decay): `{cuda,sim}/decode/{f32,f16,bf16}`.
//!
//! The state (S: C×M and z: C per (batch, head), fp32 whatever the input storage, SPEC §9)
//! stays on the device between calls. `kernels/decode.cu`'s `dec_step` updates it in place
//! for each token of a launch and writes o_t: a step is a launch of one token, batched over
//! B·H (one block per head). Prefill is the same kernel over the P tokens: it gives O and the
//! state after P tokens in one launch, O(P·C·M) work, parallel over heads and value columns
//! (rather than the causal forward backends for O plus a separate weighted-sum kernel for
//! the state: one kernel cannot disagree with itself about the state).
//!
//! Two ways to feed it. `prefill`/`step` (the per-call path, what a host-driven caller pays)
//! upload the tokens, launch, and download O: a host round trip per call. The staged stream
//! (`stage_stream`, `run_stream`, `finish_stream`) uploads T tokens once next to one output
//! buffer; `run_stream` then enqueues one launch per token at its offset in those buffers
//! (`seq_stride` = T), with no allocation, copy or wait, until `finish_stream` synchronises.
//!
//! Maps: all causal ones, fused in the kernel — the elementwise ones (identity, elu+1, relu)
//! and the row maps softmax, 1+cos and FAVOR+ (its W uploaded once per stream, unshifted like
//! the f64 oracle: a stream has no max over all keys to subtract).

use std::sync::Arc;

use half::{bf16, f16};
use linattn_core::{
    check_stream_range, favor_projection, no_decode_state, no_staged_stream, AttnError, DecodeSpec,
    DecodeState, Decoder, FeatureMap, Inputs, Precision, Tensor, Unsupported,
};

use crate::executor::{Executor, Kernel, Launch, Platform};
use crate::form::DeviceInputs;
use crate::limits::{Axis, Grid};
use crate::memory::{DeviceBuffer, MemoryMeter, StorageElem};
use crate::params::{launch_kernel, ptr, KernelParams, Ptr};
use crate::runtime::{as_i32, storage_define, KernelVariant};

pub const SOURCE_NAME: &str = "decode.cu";
pub const SOURCE: &str = include_str!("../../../kernels/decode.cu");

crate::kernel_params! {
    /// The argument struct of decode.cu's entry point.
    pub mod params;
    /// `dec_step`: n tokens of the recurrence, S and z updated in place, o_t written.
    pub struct Step => "dec_step" {
        q: Ptr, k: Ptr, v: Ptr, s: Ptr, z: Ptr, out: Ptr, favor_w: Ptr, n: i32,
        seq_stride: i32, d: i32, c: i32, m: i32, decay: f32, eps: f32,
    }
}

pub use params::ENTRIES as ENTRY_POINTS;
pub use params::SPECS as KERNEL_PARAMS;
/// Threads of a `dec_step` block (8 warps).
pub const THREADS: u32 = 256;
/// Largest C and M the kernel stages in shared memory.
pub const MAX_DIM: usize = 256;

/// `DEC_ROW_MAP` and the prelude's `LA_MAP` for a map, or why the kernel does not fuse it.
fn map_defines(map: &FeatureMap) -> Result<(u32, u32, bool), Unsupported> {
    // (DEC_ROW_MAP, LA_MAP, LA_NORMALISED)
    match map {
        FeatureMap::Identity => Ok((0, 0, false)),
        FeatureMap::EluPlusOne => Ok((0, 1, true)),
        FeatureMap::Relu => Ok((0, 2, true)),
        FeatureMap::Softmax => Ok((1, 0, true)),
        FeatureMap::OnePlusCos => Ok((2, 0, true)),
        FeatureMap::Favor { .. } => Ok((3, 0, true)),
        other => Err(Unsupported::Problem(format!(
            "map {other} is not defined for causal decoding"
        ))),
    }
}

/// Maps the decode kernel fuses (FAVOR+ at 32 features and the default seed as the example).
pub const MAPS: [FeatureMap; 6] = [
    FeatureMap::Identity,
    FeatureMap::EluPlusOne,
    FeatureMap::Relu,
    FeatureMap::Softmax,
    FeatureMap::OnePlusCos,
    FeatureMap::Favor {
        features: 32,
        seed: linattn_core::DEFAULT_FAVOR_SEED,
    },
];

/// The module of `decode.cu` for one storage precision and fused map.
pub fn variant(precision: Precision, map: &FeatureMap) -> Result<KernelVariant, Unsupported> {
    let (storage_key, storage_value) = storage_define(precision)?;
    let (row_map, la_map, normalised) = map_defines(map)?;
    Ok(KernelVariant::new(SOURCE_NAME, SOURCE)
        .define(storage_key, storage_value)
        .define("LA_MAP", la_map)
        .define("LA_NORMALISED", u32::from(normalised))
        .define("DEC_ROW_MAP", row_map)
        .entries(&ENTRY_POINTS))
}

/// Every variant (3 precisions × 6 fused maps), for the compile-all test.
pub fn kernel_variants() -> Vec<KernelVariant> {
    let mut all = Vec::new();
    for precision in [Precision::F32, Precision::F16, Precision::BF16] {
        for map in MAPS {
            all.extend(variant(precision, &map).ok());
        }
    }
    all
}

/// The state of a decoder on the device.
struct Live {
    exec: Arc<dyn Executor>,
    spec: DecodeSpec,
    /// `dec_step` of the spec's variant, resolved once: a token's launch looks nothing up.
    kernel: Kernel,
    /// One block per (batch, head).
    launch: Launch,
    tokens: u64,
    s: DeviceBuffer<f32>,
    z: DeviceBuffer<f32>,
    /// FAVOR+'s projection W (R×D fp32), uploaded once per stream.
    favor_w: Option<DeviceBuffer<f32>>,
}

impl Live {
    /// Enqueues `dec_step` over tokens 0..n of head rows `seq_stride` tokens apart, q, k, v
    /// and out starting at the given addresses (see the kernel's layout comment).
    fn enqueue(&self, rows: Rows, n: usize, seq_stride: usize) -> Result<(), AttnError> {
        let spec = &self.spec;
        launch_kernel(
            self.exec.as_ref(),
            &self.kernel,
            &self.launch,
            &params::Step {
                q: rows.q,
                k: rows.k,
                v: rows.v,
                s: ptr(&self.s),
                z: ptr(&self.z),
                out: rows.out,
                favor_w: ptr(self.favor_w.as_ref()),
                n: as_i32("tokens", n)?,
                seq_stride: as_i32("staged tokens", seq_stride)?,
                d: as_i32("D", spec.dk)?,
                c: as_i32("C", spec.feature_dim())?,
                m: as_i32("M", spec.dv)?,
                decay: spec.decay as f32,
                eps: spec.eps as f32,
            },
        )
    }
}

/// Where a launch's first token of head 0 lies in q, k, v and out.
#[derive(Clone, Copy)]
struct Rows {
    q: Ptr,
    k: Ptr,
    v: Ptr,
    out: Ptr,
}

/// A stream staged on the device: q, k, v `[B·H, T, ·]` and the output `[B·H, T, M]`,
/// allocated once by `stage_stream`; `run_stream` launches read and write them in place.
struct Staged<T> {
    spec: DecodeSpec,
    tokens: usize,
    q: DeviceBuffer<T>,
    k: DeviceBuffer<T>,
    v: DeviceBuffer<T>,
    out: DeviceBuffer<T>,
}

impl<T: StorageElem> Staged<T> {
    /// The addresses of token `t` of head 0 (the kernel adds `head · T` tokens).
    fn rows_at(&self, t: usize) -> Rows {
        let elem = std::mem::size_of::<T>() as u64;
        let at = |b: &DeviceBuffer<T>, dim: usize| Ptr(b.address() + (t * dim) as u64 * elem);
        Rows {
            q: at(&self.q, self.spec.dk),
            k: at(&self.k, self.spec.dk),
            v: at(&self.v, self.spec.dv),
            out: at(&self.out, self.spec.dv),
        }
    }
}

/// `<platform>/decode/<precision>`: inputs stored as `T`, state in fp32.
pub struct CudaDecoder<T: StorageElem> {
    name: String,
    platform: Platform,
    meter: MemoryMeter,
    live: Option<Live>,
    stream: Option<Staged<T>>,
}

impl<T: StorageElem> CudaDecoder<T> {
    pub fn new(platform: Platform) -> Self {
        CudaDecoder {
            name: format!("{platform}/decode/{}", T::PRECISION),
            platform,
            meter: MemoryMeter::new(),
            live: None,
            stream: None,
        }
    }

    /// Device bytes the decoder holds now: the state and a staged stream (the inputs and
    /// outputs of `prefill`/`step` are freed per call).
    pub fn device_bytes(&self) -> u64 {
        self.meter.live()
    }

    fn start(&mut self, spec: &DecodeSpec, state: &DecodeState) -> Result<(), AttnError> {
        self.live = None;
        self.supports(spec)?;
        state.validate()?;
        state.expect(spec, Precision::F32)?;
        let exec = self.platform.executor()?;
        let to_f32 = |x: &[f64]| x.iter().map(|&a| a as f32).collect::<Vec<f32>>();
        let s = DeviceBuffer::upload(&exec, &self.meter, &to_f32(&state.s))?;
        let z = DeviceBuffer::upload(&exec, &self.meter, &to_f32(&state.z))?;
        let favor_w = match spec.map {
            FeatureMap::Favor { features, seed } => Some(DeviceBuffer::upload(
                &exec,
                &self.meter,
                &to_f32(&favor_projection(spec.dk, features, seed)),
            )?),
            _ => None,
        };
        let grid = step_grid(spec).dims()?;
        let kernel = exec.kernel(&variant(T::PRECISION, &spec.map)?, params::Step::SPEC.entry)?;
        exec.synchronize()?;
        self.live = Some(Live {
            kernel,
            launch: Launch::new(grid, THREADS),
            exec,
            spec: *spec,
            tokens: state.tokens,
            s,
            z,
            favor_w,
        });
        Ok(())
    }

    /// The per-call path: uploads `x`, one launch over its n tokens, downloads O.
    fn advance(&mut self, x: &Inputs) -> Result<Tensor, AttnError> {
        let live = self.live.as_mut().ok_or_else(no_decode_state)?;
        let n = live.spec.check_tokens(x)?;
        let spec = live.spec;
        let exec = &live.exec;
        let inputs = DeviceInputs::<T>::upload(exec, &self.meter, x)?;
        let out = DeviceBuffer::<T>::uninit(exec, &self.meter, output_len(&spec, n)?)?;
        let rows = Rows {
            q: ptr(&inputs.q),
            k: ptr(&inputs.k),
            v: ptr(&inputs.v),
            out: ptr(&out),
        };
        live.enqueue(rows, n, n)?;
        let o = Tensor::from_vec([spec.batch, spec.heads, n, spec.dv], out.download_f64()?)?;
        live.tokens += n as u64;
        Ok(o)
    }
}

/// `dec_step`: a block per head, B·H on grid x.
fn step_grid(spec: &DecodeSpec) -> Grid {
    Grid::of::<params::Step>(Axis::each("B·H", spec.bh()), Axis::one(), Axis::one())
}

/// Elements of an output of `n` tokens (B·H·n·M), overflow-checked.
fn output_len(spec: &DecodeSpec, n: usize) -> Result<usize, AttnError> {
    spec.bh()
        .checked_mul(n)
        .and_then(|r| r.checked_mul(spec.dv))
        .ok_or_else(|| AttnError::SizeOverflow(format!("decode output of {n} tokens")))
}

impl<T: StorageElem> Decoder for CudaDecoder<T> {
    fn name(&self) -> &str {
        &self.name
    }

    fn input_precision(&self) -> Precision {
        T::PRECISION
    }

    fn state_precision(&self) -> Precision {
        Precision::F32
    }

    fn supports(&self, spec: &DecodeSpec) -> Result<(), Unsupported> {
        self.platform.available()?;
        spec.validate()
            .map_err(|e| Unsupported::Problem(e.to_string()))?;
        variant(T::PRECISION, &spec.map)?;
        // D too: FAVOR+'s C = R does not bound it, and the kernel stages D elements a thread.
        for (what, dim) in [
            ("head dim D", spec.dk),
            ("feature dim C", spec.feature_dim()),
            ("value dim M", spec.dv),
        ] {
            if dim > MAX_DIM {
                return Err(Unsupported::Problem(format!(
                    "{what} = {dim}: the decode kernel takes at most {MAX_DIM}"
                )));
            }
        }
        step_grid(spec).check()
    }

    fn prefill(&mut self, x: &Inputs) -> Result<Tensor, AttnError> {
        self.advance(x)
    }

    fn stage_stream(&mut self, x: &Inputs) -> Result<(), AttnError> {
        // The old stream's buffers go first: staging twice never holds both.
        self.stream = None;
        let live = self.live.as_ref().ok_or_else(no_decode_state)?;
        let tokens = live.spec.check_tokens(x)?;
        if tokens == 0 {
            return Err(AttnError::InvalidArgument(
                "a staged stream needs at least one token".into(),
            ));
        }
        // The kernel's int token indices: refuse a stream they cannot address.
        as_i32("staged tokens", tokens)?;
        let inputs = DeviceInputs::<T>::upload(&live.exec, &self.meter, x)?;
        let out =
            DeviceBuffer::<T>::zeros(&live.exec, &self.meter, output_len(&live.spec, tokens)?)?;
        live.exec.synchronize()?;
        self.stream = Some(Staged {
            spec: live.spec,
            tokens,
            q: inputs.q,
            k: inputs.k,
            v: inputs.v,
            out,
        });
        Ok(())
    }

    fn run_stream(&mut self, first: usize, count: usize) -> Result<(), AttnError> {
        let live = self.live.as_mut().ok_or_else(no_decode_state)?;
        let stream = self.stream.as_ref().ok_or_else(no_staged_stream)?;
        if stream.spec != live.spec {
            return Err(AttnError::State(format!(
                "the staged stream belongs to {}, the decoder now runs {}: stage it again",
                stream.spec.problem(stream.tokens),
                live.spec.problem(1)
            )));
        }
        check_stream_range(first, count, stream.tokens)?;
        for t in first..first + count {
            live.enqueue(stream.rows_at(t), 1, stream.tokens)?;
        }
        live.tokens += count as u64;
        Ok(())
    }

    fn finish_stream(&mut self, outputs: bool) -> Result<Option<Tensor>, AttnError> {
        let live = self.live.as_ref().ok_or_else(no_decode_state)?;
        let stream = self.stream.as_ref().ok_or_else(no_staged_stream)?;
        live.exec.synchronize()?;
        if !outputs {
            return Ok(None);
        }
        let s = &stream.spec;
        let o = Tensor::from_vec(
            [s.batch, s.heads, stream.tokens, s.dv],
            stream.out.download_f64()?,
        )?;
        Ok(Some(o))
    }

    fn export_state(&mut self) -> Result<DecodeState, AttnError> {
        let live = self.live.as_ref().ok_or_else(no_decode_state)?;
        let widen = |b: &DeviceBuffer<f32>| -> Result<Vec<f64>, AttnError> {
            Ok(b.download()?.into_iter().map(f64::from).collect())
        };
        Ok(DecodeState {
            spec: live.spec,
            precision: Precision::F32,
            tokens: live.tokens,
            s: widen(&live.s)?,
            z: widen(&live.z)?,
        })
    }

    fn import_state(&mut self, spec: &DecodeSpec, state: &DecodeState) -> Result<(), AttnError> {
        self.start(spec, state)
    }
}

/// Decoders of one platform: f32, f16 and bf16 inputs.
pub fn decoders(platform: Platform) -> Vec<Box<dyn Decoder>> {
    vec![
        Box::new(CudaDecoder::<f32>::new(platform)),
        Box::new(CudaDecoder::<f16>::new(platform)),
        Box::new(CudaDecoder::<bf16>::new(platform)),
    ]
}
