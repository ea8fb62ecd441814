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
//! Maps: all causal ones, fused in the kernel — the elementwise ones (identity, elu+1, relu)
//! and the row maps softmax, 1+cos and FAVOR+ (its W uploaded once per stream, unshifted like
//! the f64 oracle: a stream has no max over all keys to subtract).

use std::sync::Arc;

use half::{bf16, f16};
use linattn_core::{
    favor_projection, no_decode_state, AttnError, DecodeSpec, DecodeState, Decoder, FeatureMap,
    Inputs, Precision, Tensor, Unsupported,
};

use crate::executor::{Executor, Launch, Platform};
use crate::form::DeviceInputs;
use crate::memory::{DeviceBuffer, MemoryMeter, StorageElem};
use crate::params::{launch, ptr};
use crate::runtime::{as_i32, storage_define, KernelVariant};

pub const SOURCE_NAME: &str = "decode.cu";
pub const SOURCE: &str = include_str!("../../../kernels/decode.cu");

crate::kernel_params! {
    /// The argument struct of decode.cu's entry point.
    pub mod params;
    /// `dec_step`: n tokens of the recurrence, S and z updated in place, o_t written.
    pub struct Step => "dec_step" {
        q: Ptr, k: Ptr, v: Ptr, s: Ptr, z: Ptr, out: Ptr, favor_w: Ptr, n: i32, d: i32,
        c: i32, m: i32, decay: f32, eps: f32,
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
    kernel_variant: KernelVariant,
    tokens: u64,
    s: DeviceBuffer<f32>,
    z: DeviceBuffer<f32>,
    /// FAVOR+'s projection W (R×D fp32), uploaded once per stream.
    favor_w: Option<DeviceBuffer<f32>>,
}

/// `<platform>/decode/<precision>`: inputs stored as `T`, state in fp32.
pub struct CudaDecoder<T: StorageElem> {
    name: String,
    platform: Platform,
    meter: MemoryMeter,
    live: Option<Live>,
    _elem: std::marker::PhantomData<T>,
}

impl<T: StorageElem> CudaDecoder<T> {
    pub fn new(platform: Platform) -> Self {
        CudaDecoder {
            name: format!("{platform}/decode/{}", T::PRECISION),
            platform,
            meter: MemoryMeter::new(),
            live: None,
            _elem: std::marker::PhantomData,
        }
    }

    /// Device bytes the decoder holds now (the state; inputs and outputs are freed per call).
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
        exec.synchronize()?;
        self.live = Some(Live {
            kernel_variant: variant(T::PRECISION, &spec.map)?,
            exec,
            spec: *spec,
            tokens: state.tokens,
            s,
            z,
            favor_w,
        });
        Ok(())
    }

    fn advance(&mut self, x: &Inputs) -> Result<Tensor, AttnError> {
        let live = self.live.as_mut().ok_or_else(no_decode_state)?;
        let n = live.spec.check_tokens(x)?;
        let spec = live.spec;
        let exec = &live.exec;
        let inputs = DeviceInputs::<T>::upload(exec, &self.meter, x)?;
        let out_len = spec
            .bh()
            .checked_mul(n)
            .and_then(|r| r.checked_mul(spec.dv))
            .ok_or_else(|| AttnError::SizeOverflow(format!("decode output of {n} tokens")))?;
        let out = DeviceBuffer::<T>::uninit(exec, &self.meter, out_len)?;
        let blocks = u32::try_from(spec.bh())
            .ok()
            .filter(|&b| b <= i32::MAX as u32)
            .ok_or_else(|| AttnError::InvalidArgument(format!("B·H = {} blocks", spec.bh())))?;
        // q, k hold B·H·n·D elements, v and out B·H·n·M, s B·H·C·M, z B·H·C (fp32).
        launch(
            exec.as_ref(),
            &live.kernel_variant,
            &Launch::new((blocks, 1, 1), THREADS),
            &params::Step {
                q: ptr(&inputs.q),
                k: ptr(&inputs.k),
                v: ptr(&inputs.v),
                s: ptr(&live.s),
                z: ptr(&live.z),
                out: ptr(&out),
                favor_w: ptr(live.favor_w.as_ref()),
                n: as_i32("tokens", n)?,
                d: as_i32("D", spec.dk)?,
                c: as_i32("C", spec.feature_dim())?,
                m: as_i32("M", spec.dv)?,
                decay: spec.decay as f32,
                eps: spec.eps as f32,
            },
        )?;
        let o = Tensor::from_vec([spec.batch, spec.heads, n, spec.dv], out.download_f64()?)?;
        live.tokens += n as u64;
        Ok(o)
    }
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
        for (what, dim) in [
            ("feature dim C", spec.feature_dim()),
            ("value dim M", spec.dv),
        ] {
            if dim > MAX_DIM {
                return Err(Unsupported::Problem(format!(
                    "{what} = {dim}: the decode kernel takes at most {MAX_DIM}"
                )));
            }
        }
        Ok(())
    }

    fn prefill(&mut self, x: &Inputs) -> Result<Tensor, AttnError> {
        self.advance(x)
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
