//! The decode step kernel (`kernels/decode.cu`) against the f64 reference decoder of
//! linattn-cpu, stamped per executor (the PTX simulator with all its checkers; a GPU too where
//! one exists) and input precision: prefill P ∈ {0, 3, N} then single-token steps, every
//! map (identity, elu+1, relu, softmax, 1+cos, FAVOR+), with and without decay, inputs rounded to the storage type so both sides see
//! the same operands; tolerance the precision's RMS ratio (f32 1e-5, f16 2e-3, bf16 5e-3).
//! The exported state matches the reference's, and continuing from it equals not stopping.
//!
//! The staged stream (`stage_stream`, `run_stream`, `finish_stream`): T = 37 tokens at
//! B = 2, H = 3 decoded in three uneven runs, O against the f64 causal forward of the oracle,
//! the state against the f64 decoder's, and O bit for bit equal to the same decoder's
//! per-token path (the same launches, read in place). Stamped per executor for the device
//! decoders; the CPU decoders (the trait's host defaults) on the host. On the simulator, a run
//! of 6 tokens records 6 launches and moves no device memory.

use linattn_core::{
    decode_sequence, Causality, DecodeSpec, DecodeState, Decoder, FeatureMap, Inputs, Precision,
    Problem, Shape, Tensor,
};
use linattn_cuda::Platform;
use linattn_testkit::{all, close, rounder, stamp_executors};

/// C = 48 (two rows per warp and a ragged one), M = 40 (a full and a partial column slice).
const SHAPE: Shape = Shape {
    batch: 2,
    heads: 3,
    seq: 9,
    dk: 48,
    dv: 40,
};

/// The streamed trial: 37 tokens (runs of 5, 1 and 31); C = 80 gives a warp two groups of
/// rows (DEC_UNROLL = 8 rows of 8 warps, then the rest), M = 72 three column slices.
const STREAM: Shape = Shape {
    batch: 2,
    heads: 3,
    seq: 37,
    dk: 80,
    dv: 72,
};
const RUNS: [(usize, usize); 3] = [(0, 5), (5, 1), (6, 31)];

fn main() {
    let mut trials = stamp_executors!(
        for platform in Platform::ALL, decoder in linattn_cuda::decode::decoders(platform) =>
            format!("{}: prefill + steps match the f64 decoder", decoder.name()),
            matches_reference(platform, decoder.name())
    );
    trials.extend(stamp_executors!(
        for platform in Platform::ALL, decoder in linattn_cuda::decode::decoders(platform) =>
            format!("{}: a staged stream of 37 tokens matches the oracle", decoder.name()),
            stream_matches_oracle(|| decoder_named(platform, decoder.name()))
    ));
    trials.extend(stamp_executors!(
        for platform in [Platform::Sim] =>
            "sim/decode/f32: run_stream is one launch per token and allocates nothing",
            one_launch_per_token()
    ));
    for name in ["cpu-ref/decode/f64", "cpu/decode/f32"] {
        trials.push(libtest_mimic::Trial::test(
            format!("{name}: a staged stream of 37 tokens matches the oracle"),
            move || {
                stream_matches_oracle(|| {
                    linattn_cpu::decode::decoders()
                        .into_iter()
                        .find(|d| d.name() == name)
                        .ok_or_else(|| format!("no decoder {name}"))
                })
                .map_err(Into::into)
            },
        ));
    }
    linattn_testkit::run(trials)
}

/// `want` and `got` as flat tensors, for `close`.
fn close_flat(what: &str, want: &[f64], got: &[f64], tol: f64) -> Result<(), String> {
    let flat = |x: &[f64]| Tensor::from_vec([1, 1, 1, x.len()], x.to_vec());
    match (flat(want), flat(got)) {
        (Ok(w), Ok(g)) => close(what, &w, &g, tol),
        _ => Err(format!("{what}: {} values vs {}", got.len(), want.len())),
    }
}

fn stream_matches_oracle(
    make: impl Fn() -> Result<Box<dyn Decoder>, String>,
) -> Result<(), String> {
    let mut dec = make()?;
    let precision = dec.input_precision();
    let tol = precision.rms_tolerance();
    let state_tol = match dec.state_precision() {
        Precision::F64 => 1e-12,
        _ => 1e-5,
    };
    let mut reference = linattn_cpu::decode::reference::decoder();
    let mut checks = Vec::new();
    for (i, map) in [FeatureMap::EluPlusOne, FeatureMap::Softmax]
        .into_iter()
        .enumerate()
    {
        for decay in [1.0, 0.9] {
            let label = format!("{map} decay {decay}");
            let p = Problem::new(STREAM, Causality::Causal, map).with_decay(decay);
            let spec = DecodeSpec::from_problem(&p).map_err(e(&label))?;
            let x = Inputs::random(STREAM, 70 + i as u64, false)
                .map_err(e(&label))?
                .rounded(rounder(precision));
            let oracle = linattn_cpu::oracle::forward(&p, &x).map_err(e(&label))?;
            decode_sequence(&mut reference, &spec, &x, 0, None).map_err(e(&label))?;
            let want_state = reference.export_state().map_err(e(&label))?;

            dec.reset(&spec).map_err(e(&label))?;
            dec.stage_stream(&x).map_err(e(&label))?;
            for (first, count) in RUNS {
                dec.run_stream(first, count).map_err(e(&label))?;
            }
            let got = dec
                .finish_stream(true)
                .map_err(e(&label))?
                .ok_or_else(|| format!("{label}: finish_stream(true) returned no outputs"))?;
            checks.push(close(&format!("{label}: streamed O"), &oracle, &got, tol));
            let state = dec.export_state().map_err(e(&label))?;
            checks.push(check_state(&label, &want_state, &state, state_tol));
            if dec.run_stream(30, 8).is_ok() {
                checks.push(Err(format!("{label}: tokens 30..38 of 37 accepted")));
            }

            // The per-token path of the same decoder: the same arithmetic, so the same bits.
            let (per_token, _) =
                decode_sequence(dec.as_mut(), &spec, &x, 0, None).map_err(e(&label))?;
            if per_token != got {
                checks.push(Err(format!("{label}: streamed O differs from step()")));
            }
        }
    }
    // Staging before any state is refused by the device decoders; the host default needs none.
    let mut fresh = make()?;
    let x = Inputs::random(STREAM, 1, false).map_err(|e| e.to_string())?;
    if fresh.run_stream(0, 1).is_ok() {
        checks.push(Err("run_stream before stage_stream accepted".into()));
    }
    if fresh.stage_stream(&x).is_ok() && fresh.run_stream(0, 1).is_ok() {
        checks.push(Err("run_stream before reset accepted".into()));
    }
    all(checks)
}

/// The simulator records the launches of a run of 6 tokens: six dec_step launches of one
/// token each, B·H blocks, and the decoder's device memory does not move.
fn one_launch_per_token() -> Result<(), String> {
    let spec = DecodeSpec::from_problem(&Problem::new(
        STREAM,
        Causality::Causal,
        FeatureMap::EluPlusOne,
    ))
    .map_err(|e| e.to_string())?;
    let mut dec = linattn_cuda::decode::CudaDecoder::<f32>::new(Platform::Sim);
    dec.reset(&spec).map_err(|e| e.to_string())?;
    let x = Inputs::random(STREAM, 3, false).map_err(|e| e.to_string())?;
    dec.stage_stream(&x).map_err(|e| e.to_string())?;
    let staged = dec.device_bytes();
    let sim = linattn_cuda::executor::sim::shared().map_err(|e| e.to_string())?;
    sim.start_profile();
    let ran = dec.run_stream(2, 6);
    let log = sim.finish_profile();
    ran.map_err(|e| e.to_string())?;
    dec.finish_stream(false).map_err(|e| e.to_string())?;
    let blocks = (STREAM.batch * STREAM.heads) as u32;
    all([
        if log.len() == 6
            && log
                .iter()
                .all(|l| l.entry == "dec_step" && l.grid.0 == blocks)
        {
            Ok(())
        } else {
            Err(format!(
                "6 tokens made {} launches: {:?}",
                log.len(),
                log.iter().map(|l| (&l.entry, l.grid)).collect::<Vec<_>>()
            ))
        },
        if dec.device_bytes() == staged {
            Ok(())
        } else {
            Err(format!(
                "device bytes went from {staged} to {} during run_stream",
                dec.device_bytes()
            ))
        },
    ])
}

/// Prefixes an error with what was being checked.
fn e(label: &str) -> impl Fn(linattn_core::AttnError) -> String + '_ {
    move |err| format!("{label}: {err}")
}

fn check_state(label: &str, want: &DecodeState, got: &DecodeState, tol: f64) -> Result<(), String> {
    if got.tokens != want.tokens {
        return Err(format!(
            "{label}: state counts {} tokens, want {}",
            got.tokens, want.tokens
        ));
    }
    all([
        close_flat(&format!("{label}: S"), &want.s, &got.s, tol),
        close_flat(&format!("{label}: z"), &want.z, &got.z, tol),
    ])
}

fn decoder_named(platform: Platform, name: &str) -> Result<Box<dyn Decoder>, String> {
    linattn_cuda::decode::decoders(platform)
        .into_iter()
        .find(|d| d.name() == name)
        .ok_or_else(|| format!("no decoder {name}"))
}

fn matches_reference(platform: Platform, name: &str) -> Result<(), String> {
    let mut dec = decoder_named(platform, name)?;
    let precision = dec.input_precision();
    let tol = precision.rms_tolerance();
    let mut reference = linattn_cpu::decode::reference::decoder();
    let mut checks = Vec::new();
    for (i, map) in linattn_cuda::decode::MAPS.into_iter().enumerate() {
        for decay in [1.0, 0.9] {
            let p = Problem::new(SHAPE, Causality::Causal, map).with_decay(decay);
            let spec = DecodeSpec::from_problem(&p).map_err(|e| e.to_string())?;
            let x = Inputs::random(SHAPE, 40 + i as u64, false)
                .map_err(|e| e.to_string())?
                .rounded(rounder(precision));
            let (want, _) =
                decode_sequence(&mut reference, &spec, &x, 0, None).map_err(|e| e.to_string())?;
            let want_state = reference.export_state().map_err(|e| e.to_string())?;
            for prefill in [0, 3, SHAPE.seq] {
                let label = format!("{map} decay {decay} prefill {prefill}");
                let (got, _) = decode_sequence(dec.as_mut(), &spec, &x, prefill, None)
                    .map_err(|e| format!("{label}: {e}"))?;
                checks.push(close(&format!("{label}: O"), &want, &got, tol));
                let state = dec.export_state().map_err(|e| e.to_string())?;
                let as_tensor = |s: &[f64]| Tensor::from_vec([1, 1, 1, s.len()], s.to_vec());
                let (ws, gs) = (as_tensor(&want_state.s), as_tensor(&state.s));
                let (wz, gz) = (as_tensor(&want_state.z), as_tensor(&state.z));
                if let (Ok(ws), Ok(gs), Ok(wz), Ok(gz)) = (ws, gs, wz, gz) {
                    // The state is fp32 sums of the same operands: the f32 bar for every input
                    // precision.
                    checks.push(close(&format!("{label}: S"), &ws, &gs, 1e-5));
                    checks.push(close(&format!("{label}: z"), &wz, &gz, 1e-5));
                }
                if state.tokens != SHAPE.seq as u64 {
                    checks.push(Err(format!(
                        "{label}: state counts {} tokens",
                        state.tokens
                    )));
                }
            }
            // Stop after 4 tokens, export, import into a fresh decoder, continue.
            let (_, _) = decode_sequence(
                dec.as_mut(),
                &spec,
                &x.seq_slice(0..4).map_err(|e| e.to_string())?,
                2,
                None,
            )
            .map_err(|e| e.to_string())?;
            let saved = dec.export_state().map_err(|e| e.to_string())?;
            let mut fresh = decoder_named(platform, name)?;
            let rest = x.seq_slice(4..SHAPE.seq).map_err(|e| e.to_string())?;
            let (tail, _) = decode_sequence(fresh.as_mut(), &spec, &rest, 0, Some(&saved))
                .map_err(|e| e.to_string())?;
            let (whole, _) =
                decode_sequence(dec.as_mut(), &spec, &x, 2, None).map_err(|e| e.to_string())?;
            let whole_tail = whole.seq_slice(4..SHAPE.seq).map_err(|e| e.to_string())?;
            if tail != whole_tail {
                checks.push(Err(format!("{map} decay {decay}: continuation differs")));
            }
        }
    }
    // A C beyond the kernel's shared staging is unsupported.
    let wide = DecodeSpec::from_problem(&Problem::new(
        Shape { dk: 300, ..SHAPE },
        Causality::Causal,
        FeatureMap::Relu,
    ))
    .map_err(|e| e.to_string())?;
    if dec.supports(&wide).is_ok() {
        checks.push(Err("C = 300 claimed supported".into()));
    }
    all(checks)
}
