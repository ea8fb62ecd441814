//! `linattn decode`: streaming decode of q, k, v read from `.npy` files. Prefill P tokens in
//! one pass, then step the rest one token at a time with the carried (S, z) state (SPEC §2's
//! RNN view); O equals the causal forward over the whole sequence. The state can be saved
//! after the last token and loaded before the first, to continue a stream across runs. With
//! `--stream` the tokens after the prefill go through the staged stream instead of `step`:
//! staged once, decoded in one run (one launch per token on a device), read back once.

use crate::attend::{check_output, read_operands, MathArgs, QkvPaths};
use crate::npy::{write_npy, NpyDtype};
use linattn_core::{
    decode_sequence, AttnError, Causality, DecodeSpec, DecodeState, DecodeTiming, Decoder, Inputs,
    Precision, Problem, Tensor,
};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

#[derive(clap::Args)]
#[command(after_help = "\
Decoders: cpu-ref/decode/f64 (the reference), cpu/decode/f32, sim/decode/{f32,f16,bf16} \
(the CUDA step kernel on the PTX simulator), cuda/decode/{f32,f16,bf16}. --backend also takes \
a family (cpu-ref, cpu, sim, cuda); --precision (default: the dtype of the .npy inputs) then \
picks the member.

Inputs: 4-D C-order .npy arrays, '<f4' or '<f8', of one dtype: q and k [B, H, N, D], v \
[B, H, N, M]. o.npy [B, H, N, M] in the same dtype. With --load-state the N tokens continue \
the saved stream (the state file must belong to the same B, H, D, M, map, eps and decay). Bad \
input exits with status 2.")]
pub struct DecodeArgs {
    #[command(flatten)]
    qkv: QkvPaths,
    /// Tokens consumed in one pass before stepping one at a time (0 ≤ P ≤ N).
    #[arg(long, default_value_t = 0)]
    prefill: usize,
    /// Decoder name, or a family (cpu-ref, cpu, sim, cuda) narrowed by --precision.
    #[arg(long, value_name = "NAME")]
    backend: String,
    /// Decode the tokens after the prefill as one staged stream (stage_stream, run_stream,
    /// finish_stream) instead of one step() call each.
    #[arg(long)]
    stream: bool,
    /// Input precision, when --backend names a family.
    #[arg(long)]
    precision: Option<String>,
    /// Where to write O.
    #[arg(long, value_name = "PATH", default_value = "o.npy")]
    out: PathBuf,
    /// Write the state after the last token here.
    #[arg(long = "save-state", value_name = "PATH")]
    save_state: Option<PathBuf>,
    /// Start from this saved state instead of the empty one.
    #[arg(long = "load-state", value_name = "PATH")]
    load_state: Option<PathBuf>,
    #[command(flatten)]
    math: MathArgs,
}

impl DecodeArgs {
    /// The decoder as given (a name or a family), for the binary to tell whether it runs
    /// CUDA kernels.
    pub(crate) fn backend(&self) -> &str {
        &self.backend
    }
}

/// Every decoder the binary knows: CPU reference and f32, then the CUDA step kernel on the
/// simulator and on a GPU.
pub(crate) fn all_decoders() -> Vec<Box<dyn Decoder>> {
    let mut all = linattn_cpu::decoders();
    all.extend(linattn_cuda::registry::decoders_of(
        &crate::registry::device_forms(),
    ));
    all
}

/// The decoder `name` (exact, or a family narrowed by `precision`).
pub(crate) fn resolve_decoder(
    name: &str,
    precision: Option<Precision>,
) -> Result<Box<dyn Decoder>, AttnError> {
    let all = all_decoders();
    let known: Vec<String> = all.iter().map(|d| d.name().to_string()).collect();
    let exact = known.iter().position(|n| n == name);
    let mut matching: Vec<Box<dyn Decoder>> = all
        .into_iter()
        .enumerate()
        .filter(|(i, d)| match exact {
            Some(pos) => *i == pos,
            None => {
                crate::registry::family(d.name()) == name
                    && precision.is_none_or(|p| d.input_precision() == p)
            }
        })
        .map(|(_, d)| d)
        .collect();
    if exact.is_some() && precision.is_some() {
        return Err(AttnError::InvalidArgument(format!(
            "--precision chooses within a family; '{name}' is already a full decoder name"
        )));
    }
    match matching.len() {
        1 => Ok(matching.remove(0)),
        0 => Err(AttnError::InvalidArgument(format!(
            "no decoder '{name}'{} (decoders: {})",
            precision.map(|p| format!(" in {p}")).unwrap_or_default(),
            known.join(", ")
        ))),
        _ => Err(AttnError::InvalidArgument(format!(
            "'{name}' names several decoders ({}); pass --precision or a full name",
            matching
                .iter()
                .map(|d| d.name().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// [`decode_sequence`] with the tokens after the prefill decoded as one staged stream; the
/// steps' time covers run_stream and the final synchronise (not staging, not reading O back).
fn stream_sequence(
    decoder: &mut dyn Decoder,
    spec: &DecodeSpec,
    x: &Inputs,
    prefill: usize,
    start: Option<&DecodeState>,
) -> Result<(Tensor, DecodeTiming), AttnError> {
    let n = spec.check_tokens(x)?;
    if prefill >= n {
        return decode_sequence(decoder, spec, x, prefill, start);
    }
    let mut out = Tensor::zeros([spec.batch, spec.heads, n, spec.dv])?;
    let mut timing = DecodeTiming::default();
    if prefill > 0 {
        let (head, t) = decode_sequence(decoder, spec, &x.seq_slice(0..prefill)?, prefill, start)?;
        out.set_seq(0, &head)?;
        timing = t;
    } else {
        match start {
            Some(state) => decoder.import_state(spec, state)?,
            None => decoder.reset(spec)?,
        }
    }
    decoder.stage_stream(&x.seq_slice(prefill..n)?)?;
    let t0 = Instant::now();
    decoder.run_stream(0, n - prefill)?;
    decoder.finish_stream(false)?;
    timing.steps = t0.elapsed();
    let rest = decoder
        .finish_stream(true)?
        .ok_or_else(|| AttnError::State("finish_stream(true) returned no outputs".into()))?;
    out.set_seq(prefill, &rest)?;
    Ok((out, timing))
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

pub fn run(args: DecodeArgs) -> Result<ExitCode, AttnError> {
    let map = args.math.map()?;
    let precision = args
        .precision
        .as_deref()
        .map(str::parse::<Precision>)
        .transpose()?;
    let (inputs, dtype) = read_operands(&args.qkv, None)?;
    let shape = inputs.shape()?;
    let problem = Problem::new(shape, Causality::Causal, map)
        .with_eps(args.math.eps)
        .with_decay(args.math.decay);
    let spec = DecodeSpec::from_problem(&problem)?;
    spec.check_tokens(&inputs)?;
    let n = shape.seq;
    if args.prefill > n {
        return Err(AttnError::InvalidArgument(format!(
            "--prefill {} exceeds the sequence of {n} tokens",
            args.prefill
        )));
    }
    let start = args
        .load_state
        .as_deref()
        .map(DecodeState::load)
        .transpose()?;
    let default_precision = precision.or(match dtype {
        NpyDtype::F64 => Some(Precision::F64),
        NpyDtype::F32 => Some(Precision::F32),
    });
    let mut decoder = match resolve_decoder(&args.backend, precision) {
        Err(_) if precision.is_none() => resolve_decoder(&args.backend, default_precision)?,
        other => other?,
    };
    let name = decoder.name().to_string();
    decoder.supports(&spec)?;

    let decode = if args.stream {
        stream_sequence
    } else {
        decode_sequence
    };
    let (out, timing) = decode(
        decoder.as_mut(),
        &spec,
        &inputs,
        args.prefill,
        start.as_ref(),
    )?;
    check_output(&name, "o", &out)?;
    let state = decoder.export_state()?;
    write_npy(&args.out, &out, dtype)?;
    if let Some(path) = &args.save_state {
        state.save(path)?;
    }

    println!("decoder  {name}");
    println!("problem  {problem}");
    if let Some(s) = &start {
        println!("loaded   {} tokens of state", s.tokens);
    }
    println!(
        "prefill  {} tokens in {:.1} µs",
        args.prefill,
        us(timing.prefill)
    );
    let steps = n - args.prefill;
    if steps > 0 {
        println!(
            "{}    {steps} tokens, {:.2} µs per token",
            if args.stream { "stream" } else { "steps " },
            us(timing.steps) / steps as f64
        );
    }
    println!(
        "state    {} tokens, {} bytes ({} S and z)",
        state.tokens,
        state.bytes(),
        state.precision
    );
    print!("wrote    {} ({})", args.out.display(), dtype.descr());
    if let Some(path) = &args.save_state {
        print!(", {}", path.display());
    }
    println!();
    Ok(ExitCode::SUCCESS)
}
