//! Streaming decode: causal linear attention as an RNN (SPEC §2, §3 "recurrent", §6).
//!
//! A [`DecodeState`] holds, for every (batch, head), `S = Σ_j λ^{t−1−j} φ(k_j) v_jᵀ` (C×M) and
//! `z = Σ_j λ^{t−1−j} φ(k_j)` (C) after `t` tokens: everything a decoder needs, so a new token
//! costs O(C·M) whatever the context length. z carries every earlier token (SPEC §9).
//!
//! A [`Decoder`] prefills P tokens at once (O for them, state after them) and then steps one
//! token at a time. States are saved to one file: a short text header naming what the state
//! belongs to, then S and z little-endian in the state's precision; written atomically.

use crate::atomic::write_bytes_atomic;
use crate::error::{AttnError, Unsupported};
use crate::problem::{Causality, FeatureMap, Precision, Problem, Shape};
use crate::tensor::{Inputs, Tensor};
use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

/// What a decode state belongs to: sizes without a sequence length, and the math options.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DecodeSpec {
    pub batch: usize,
    pub heads: usize,
    pub dk: usize,
    pub dv: usize,
    pub map: FeatureMap,
    pub eps: f64,
    pub decay: f64,
}

impl DecodeSpec {
    /// The decode spec of a causal problem (its sequence length is ignored).
    pub fn from_problem(problem: &Problem) -> Result<Self, AttnError> {
        if !problem.causality.is_causal() {
            return Err(AttnError::InvalidArgument(
                "decoding is causal: a non-causal problem has no streaming state".into(),
            ));
        }
        let s = problem.shape;
        Ok(DecodeSpec {
            batch: s.batch,
            heads: s.heads,
            dk: s.dk,
            dv: s.dv,
            map: problem.map,
            eps: problem.eps,
            decay: problem.decay,
        })
    }

    /// The causal problem over `seq` tokens with these sizes and options.
    pub fn problem(&self, seq: usize) -> Problem {
        Problem::new(
            Shape::new(self.batch, self.heads, seq, self.dk, self.dv),
            Causality::Causal,
            self.map,
        )
        .with_eps(self.eps)
        .with_decay(self.decay)
    }

    pub fn bh(&self) -> usize {
        self.batch * self.heads
    }

    /// Feature dim C.
    pub fn feature_dim(&self) -> usize {
        self.map.feature_dim(self.dk)
    }

    /// Elements of S over all heads (`B·H·C·M`) and of z (`B·H·C`), overflow-checked.
    pub fn state_lens(&self) -> Result<(usize, usize), AttnError> {
        let overflow = || AttnError::SizeOverflow(format!("decode state of {}", self.problem(1)));
        let z = self
            .bh()
            .checked_mul(self.feature_dim())
            .ok_or_else(overflow)?;
        let s = z.checked_mul(self.dv).ok_or_else(overflow)?;
        Ok((s, z))
    }

    /// Checks sizes and options (a causal problem of one token must be valid).
    pub fn validate(&self) -> Result<(), AttnError> {
        self.problem(1).validate()?;
        self.state_lens()?;
        Ok(())
    }

    /// Checks that `x` holds `[B, H, n, D]`/`[B, H, n, M]` tokens of this spec, all finite;
    /// returns n.
    pub fn check_tokens(&self, x: &Inputs) -> Result<usize, AttnError> {
        let n = x.q.dims()[2];
        x.validate_for(&self.problem(n))?;
        Ok(n)
    }
}

/// S and z of every (batch, head) after `tokens` tokens, in f64; `precision` says what the
/// decoder keeps them in (f32 states widen to f64 exactly and narrow back exactly).
#[derive(Debug, Clone, PartialEq)]
pub struct DecodeState {
    pub spec: DecodeSpec,
    pub precision: Precision,
    pub tokens: u64,
    /// `[B, H, C, M]` row-major.
    pub s: Vec<f64>,
    /// `[B, H, C]`.
    pub z: Vec<f64>,
}

const MAGIC: &str = "linattn-decode-state v1";
const HEADER_END: &str = "end\n";
/// A header longer than this is not one of ours (guards reading a huge wrong file as text).
const MAX_HEADER: usize = 4096;

impl DecodeState {
    /// The state before any token: S = 0, z = 0.
    pub fn empty(spec: DecodeSpec, precision: Precision) -> Result<Self, AttnError> {
        spec.validate()?;
        check_state_precision(precision)?;
        let (s_len, z_len) = spec.state_lens()?;
        Ok(DecodeState {
            spec,
            precision,
            tokens: 0,
            s: vec![0.0; s_len],
            z: vec![0.0; z_len],
        })
    }

    /// Bytes the state occupies in its precision (what a decoder carries between tokens).
    pub fn bytes(&self) -> u64 {
        ((self.s.len() + self.z.len()) * self.precision.bytes()) as u64
    }

    /// Sizes agree with the spec and every value is finite.
    pub fn validate(&self) -> Result<(), AttnError> {
        self.spec.validate()?;
        check_state_precision(self.precision)?;
        let (s_len, z_len) = self.spec.state_lens()?;
        if self.s.len() != s_len || self.z.len() != z_len {
            return Err(AttnError::ShapeMismatch(format!(
                "decode state holds {} S and {} z values, its spec needs {s_len} and {z_len}",
                self.s.len(),
                self.z.len()
            )));
        }
        for (name, data) in [("state S", &self.s), ("state z", &self.z)] {
            if let Some(index) = data.iter().position(|x| !x.is_finite()) {
                return Err(AttnError::NonFinite {
                    tensor: name,
                    index,
                    value: data[index],
                });
            }
        }
        Ok(())
    }

    /// Checks that this state can continue `spec` in a decoder of `precision`.
    pub fn expect(&self, spec: &DecodeSpec, precision: Precision) -> Result<(), AttnError> {
        if self.spec != *spec {
            return Err(AttnError::InvalidArgument(format!(
                "decode state belongs to {} (map {}, eps {}, decay {}), the decoder runs {} \
                 (map {}, eps {}, decay {})",
                self.spec.problem(self.tokens.max(1) as usize).shape,
                self.spec.map,
                self.spec.eps,
                self.spec.decay,
                spec.problem(1).shape,
                spec.map,
                spec.eps,
                spec.decay
            )));
        }
        if self.precision != precision {
            return Err(AttnError::InvalidArgument(format!(
                "decode state is {} and the decoder keeps {} state",
                self.precision, precision
            )));
        }
        Ok(())
    }

    fn header(&self) -> String {
        let seed = match self.spec.map {
            FeatureMap::Favor { seed, .. } => seed,
            _ => 0,
        };
        // Rust prints f64 as the shortest text that parses back to the same bits.
        format!(
            "{MAGIC}\nprecision={}\nmap={}\nfavor_seed={seed}\nbatch={}\nheads={}\ndk={}\ndv={}\n\
             features={}\neps={}\ndecay={}\ntokens={}\n{HEADER_END}",
            self.precision,
            self.spec.map.label(),
            self.spec.batch,
            self.spec.heads,
            self.spec.dk,
            self.spec.dv,
            self.spec.feature_dim(),
            self.spec.eps,
            self.spec.decay,
            self.tokens
        )
    }

    /// Writes the state to `path` atomically: a temporary file beside it, then a rename.
    pub fn save(&self, path: &Path) -> Result<(), AttnError> {
        self.validate()?;
        let mut bytes = self.header().into_bytes();
        bytes.reserve(self.bytes() as usize);
        for &x in self.s.iter().chain(&self.z) {
            match self.precision {
                Precision::F32 => bytes.extend_from_slice(&(x as f32).to_le_bytes()),
                _ => bytes.extend_from_slice(&x.to_le_bytes()),
            }
        }
        write_bytes_atomic(path, &bytes)
    }

    /// Reads a state written by [`DecodeState::save`], checking the header, the sizes it
    /// implies against the data, and that every value is finite.
    pub fn load(path: &Path) -> Result<Self, AttnError> {
        let bytes = fs::read(path)
            .map_err(|e| AttnError::Io(format!("reading {}: {e}", path.display())))?;
        Self::parse(&bytes).map_err(|reason| match reason {
            ParseError::Bad(reason) => AttnError::BadFile {
                path: path.display().to_string(),
                reason,
            },
            ParseError::Attn(e) => e,
        })
    }

    fn parse(bytes: &[u8]) -> Result<Self, ParseError> {
        let bad = |s: String| ParseError::Bad(s);
        let end = find(bytes, HEADER_END.as_bytes())
            .filter(|&i| i < MAX_HEADER)
            .ok_or_else(|| bad(format!("no '{MAGIC}' header ending in 'end'")))?;
        let header = std::str::from_utf8(&bytes[..end])
            .map_err(|_| bad("header is not UTF-8 text".into()))?;
        let mut lines = header.lines();
        if lines.next() != Some(MAGIC) {
            return Err(bad(format!("first line is not '{MAGIC}'")));
        }
        let fields: Vec<(&str, &str)> = lines
            .map(|l| {
                l.split_once('=')
                    .ok_or_else(|| bad(format!("header line '{l}'")))
            })
            .collect::<Result<_, _>>()?;
        let get = |key: &str| -> Result<&str, ParseError> {
            fields
                .iter()
                .find(|(k, _)| *k == key)
                .map(|(_, v)| *v)
                .ok_or_else(|| bad(format!("header lacks '{key}'")))
        };
        fn num<T: std::str::FromStr>(key: &str, v: &str) -> Result<T, ParseError> {
            v.parse()
                .map_err(|_| ParseError::Bad(format!("header field {key}='{v}' is not a number")))
        }
        let precision: Precision = get("precision")?.parse().map_err(ParseError::Attn)?;
        let mut map: FeatureMap = get("map")?.parse().map_err(ParseError::Attn)?;
        if let FeatureMap::Favor { seed, .. } = &mut map {
            *seed = num("favor_seed", get("favor_seed")?)?;
        }
        let spec = DecodeSpec {
            batch: num("batch", get("batch")?)?,
            heads: num("heads", get("heads")?)?,
            dk: num("dk", get("dk")?)?,
            dv: num("dv", get("dv")?)?,
            map,
            eps: num("eps", get("eps")?)?,
            decay: num("decay", get("decay")?)?,
        };
        spec.validate().map_err(ParseError::Attn)?;
        let features: usize = num("features", get("features")?)?;
        if features != spec.feature_dim() {
            return Err(bad(format!(
                "header says C = {features}, map {} at D = {} has C = {}",
                spec.map,
                spec.dk,
                spec.feature_dim()
            )));
        }
        check_state_precision(precision).map_err(ParseError::Attn)?;
        let tokens: u64 = num("tokens", get("tokens")?)?;
        let (s_len, z_len) = spec.state_lens().map_err(ParseError::Attn)?;
        let data = &bytes[end + HEADER_END.len()..];
        let want = (s_len + z_len) as u128 * precision.bytes() as u128;
        if data.len() as u128 != want {
            return Err(bad(format!(
                "{} data bytes after the header, B·H·C·(M+1) = {} values of {precision} need \
                 {want}{}",
                data.len(),
                s_len + z_len,
                if (data.len() as u128) < want {
                    " (truncated)"
                } else {
                    ""
                }
            )));
        }
        let values: Vec<f64> = match precision {
            Precision::F32 => data
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64)
                .collect(),
            _ => data
                .chunks_exact(8)
                .map(|c| f64::from_le_bytes(c.try_into().expect("chunk of 8")))
                .collect(),
        };
        let (s, z) = values.split_at(s_len);
        let state = DecodeState {
            spec,
            precision,
            tokens,
            s: s.to_vec(),
            z: z.to_vec(),
        };
        state.validate().map_err(ParseError::Attn)?;
        Ok(state)
    }
}

enum ParseError {
    Bad(String),
    Attn(AttnError),
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// States are kept in fp32 (the kernels, the fast path) or f64 (the reference) only: fp16 sums
/// overflow (SPEC §9).
fn check_state_precision(p: Precision) -> Result<(), AttnError> {
    match p {
        Precision::F32 | Precision::F64 => Ok(()),
        _ => Err(AttnError::InvalidArgument(format!(
            "a decode state is kept in f32 or f64, not {p} (sums over tokens overflow fp16)"
        ))),
    }
}

/// A streaming decoder of causal linear attention: one per backend (CPU f64, CPU f32, CUDA).
///
/// Life cycle: [`Decoder::reset`] (empty state) or [`Decoder::import_state`] (a saved one),
/// then any mix of [`Decoder::prefill`] (many tokens) and [`Decoder::step`] (one token); the
/// outputs equal the causal forward over the whole sequence. A caller that has the tokens
/// ahead (a benchmark, a replay) stages them once ([`Decoder::stage_stream`]) and decodes
/// them in runs ([`Decoder::run_stream`], [`Decoder::finish_stream`]): on a device, the
/// inputs, outputs and state then stay there and a token costs one launch.
pub trait Decoder: Send {
    fn name(&self) -> &str;

    /// Precision q, k, v are stored in (f16/bf16 inputs still keep an fp32 state).
    fn input_precision(&self) -> Precision;

    /// Precision the state is kept in (f64 for the reference, f32 otherwise).
    fn state_precision(&self) -> Precision;

    /// `Ok` when this decoder can run `spec` here (map, sizes, hardware).
    fn supports(&self, spec: &DecodeSpec) -> Result<(), Unsupported>;

    /// Starts from the empty state of `spec`.
    fn reset(&mut self, spec: &DecodeSpec) -> Result<(), AttnError> {
        self.import_state(spec, &DecodeState::empty(*spec, self.state_precision())?)
    }

    /// Consumes `x` (`[B, H, P, ·]`, P ≥ 1) in one pass: returns O `[B, H, P, M]` and leaves the
    /// state after the P tokens. O(P·C·M).
    fn prefill(&mut self, x: &Inputs) -> Result<Tensor, AttnError>;

    /// Consumes one token (`x` is `[B, H, 1, ·]`): returns o_t `[B, H, 1, M]` and updates the
    /// state in place. O(C·M) per (batch, head). A prefill of one token unless a decoder has
    /// a faster path.
    fn step(&mut self, x: &Inputs) -> Result<Tensor, AttnError> {
        let n = x.q.dims()[2];
        if n != 1 {
            return Err(AttnError::ShapeMismatch(format!(
                "step takes one token ([B, H, 1, ·]), got {n}"
            )));
        }
        self.prefill(x)
    }

    /// Stages a stream of T tokens (`x` is `[B, H, T, ·]`) where the decoder reads them —
    /// device buffers for a device decoder, allocated once here with one output buffer
    /// `[B, H, T, M]` — replacing any stream staged before. The state is not touched: the
    /// tokens are decoded by [`Decoder::run_stream`]. The default keeps them on the host, in
    /// [`Decoder::host_stream`].
    fn stage_stream(&mut self, x: &Inputs) -> Result<(), AttnError> {
        let staged = HostStream::new(x)?;
        let name = self.name().to_string();
        let slot = self.host_stream().ok_or_else(|| no_stream_slot(&name))?;
        *slot = Some(staged);
        Ok(())
    }

    /// Decodes tokens `first..first + count` of the staged stream, in order, from the current
    /// state (which advances by `count`), writing their outputs into the staged output. A
    /// device decoder enqueues one launch per token: no allocation, no copy, no waiting for
    /// the device; errors of the work itself surface at [`Decoder::finish_stream`]. The
    /// default steps on the host, token by token.
    fn run_stream(&mut self, first: usize, count: usize) -> Result<(), AttnError> {
        let name = self.name().to_string();
        let slot = self.host_stream().ok_or_else(|| no_stream_slot(&name))?;
        let mut stream = slot.take().ok_or_else(no_staged_stream)?;
        // Put back whatever happens, so a failed token leaves the stream staged.
        let result = (|| {
            stream.check_range(first, count)?;
            for t in first..first + count {
                let o = self.step(&stream.tokens[t])?;
                stream.out.set_seq(t, &o)?;
            }
            Ok(())
        })();
        if let Some(slot) = self.host_stream() {
            *slot = Some(stream);
        }
        result
    }

    /// Waits for the work [`Decoder::run_stream`] enqueued; with `outputs`, returns the whole
    /// staged output `[B, H, T, M]` (positions never run hold zeros on the host, undefined
    /// values on a device). The stream stays staged.
    fn finish_stream(&mut self, outputs: bool) -> Result<Option<Tensor>, AttnError> {
        let name = self.name().to_string();
        let slot = self.host_stream().ok_or_else(|| no_stream_slot(&name))?;
        let stream = slot.as_ref().ok_or_else(no_staged_stream)?;
        Ok(outputs.then(|| stream.out.clone()))
    }

    /// Where the default stream methods keep a host-staged stream: a decoder without a
    /// device returns its slot; one that overrides the three stream methods needs none.
    fn host_stream(&mut self) -> Option<&mut Option<HostStream>> {
        None
    }

    /// The current state, widened to f64.
    fn export_state(&mut self) -> Result<DecodeState, AttnError>;

    /// Continues `spec` from `state`: refused unless the state belongs to `spec` (sizes, map,
    /// ε, λ) and to the decoder's precision, and holds only finite values.
    fn import_state(&mut self, spec: &DecodeSpec, state: &DecodeState) -> Result<(), AttnError>;
}

/// A stream staged on the host by [`Decoder::stage_stream`]'s default: the T tokens one by
/// one (sliced once, so a step does not slice) and the output `[B, H, T, M]`.
#[derive(Debug, Clone)]
pub struct HostStream {
    tokens: Vec<Inputs>,
    out: Tensor,
}

impl HostStream {
    /// Stages `x` (`[B, H, T, ·]`, T ≥ 1); each step checks its token against the decoder.
    pub fn new(x: &Inputs) -> Result<Self, AttnError> {
        let shape = x.shape()?;
        if shape.seq == 0 {
            return Err(AttnError::InvalidArgument(
                "a staged stream needs at least one token".into(),
            ));
        }
        let tokens = (0..shape.seq)
            .map(|t| x.seq_slice(t..t + 1))
            .collect::<Result<_, _>>()?;
        let out = Tensor::zeros([shape.batch, shape.heads, shape.seq, shape.dv])?;
        Ok(HostStream { tokens, out })
    }

    /// Tokens staged (T).
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    fn check_range(&self, first: usize, count: usize) -> Result<(), AttnError> {
        check_stream_range(first, count, self.len())
    }
}

/// Refuses tokens `first..first + count` outside a staged stream of `staged` tokens.
pub fn check_stream_range(first: usize, count: usize, staged: usize) -> Result<(), AttnError> {
    match first.checked_add(count) {
        Some(end) if end <= staged => Ok(()),
        _ => Err(AttnError::InvalidArgument(format!(
            "tokens {first}..{} of a staged stream of {staged}",
            first.saturating_add(count)
        ))),
    }
}

/// The error of a stream method called before [`Decoder::stage_stream`].
pub fn no_staged_stream() -> AttnError {
    AttnError::State("no staged stream: call stage_stream() first".into())
}

fn no_stream_slot(name: &str) -> AttnError {
    AttnError::State(format!(
        "decoder {name} neither keeps a host stream nor implements the stream methods"
    ))
}

/// Wall time of a [`decode_sequence`]: the prefill pass, and all single-token steps together.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct DecodeTiming {
    pub prefill: Duration,
    pub steps: Duration,
}

/// Decodes the `N` tokens of `x` the streaming way: from `start` (a loaded state) or the
/// empty state, prefill the first `prefill` tokens in one pass, then step the rest one by one.
/// Returns O `[B, H, N, M]` — equal to the causal forward over the whole sequence when
/// starting empty — and the time spent inside the decoder (slicing tokens is not counted).
pub fn decode_sequence(
    decoder: &mut dyn Decoder,
    spec: &DecodeSpec,
    x: &Inputs,
    prefill: usize,
    start: Option<&DecodeState>,
) -> Result<(Tensor, DecodeTiming), AttnError> {
    let n = spec.check_tokens(x)?;
    if prefill > n {
        return Err(AttnError::InvalidArgument(format!(
            "prefill of {prefill} tokens exceeds the sequence of {n}"
        )));
    }
    match start {
        Some(state) => decoder.import_state(spec, state)?,
        None => decoder.reset(spec)?,
    }
    let mut out = Tensor::zeros([spec.batch, spec.heads, n, spec.dv])?;
    let mut timing = DecodeTiming::default();
    if prefill > 0 {
        let chunk = x.seq_slice(0..prefill)?;
        let t0 = Instant::now();
        let o = decoder.prefill(&chunk)?;
        timing.prefill = t0.elapsed();
        out.set_seq(0, &o)?;
    }
    for t in prefill..n {
        let token = x.seq_slice(t..t + 1)?;
        let t0 = Instant::now();
        let o = decoder.step(&token)?;
        timing.steps += t0.elapsed();
        out.set_seq(t, &o)?;
    }
    Ok((out, timing))
}

/// The "no state yet" error every decoder reports when stepped before reset or import.
pub fn no_decode_state() -> AttnError {
    AttnError::State("no decode state: call reset() or import_state() first".into())
}
