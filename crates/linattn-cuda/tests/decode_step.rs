//! The decode step kernel (`kernels/decode.cu`) against the f64 reference decoder of
//! linattn-cpu, stamped per executor (the PTX simulator with all its checkers; a GPU too where
//! one exists) and input precision: prefill P ∈ {0, 3, N} then single-token steps, every
//! map (identity, elu+1, relu, softmax, 1+cos, FAVOR+), with and without decay, inputs rounded to the storage type so both sides see
//! the same operands; tolerance the precision's RMS ratio (f32 1e-5, f16 2e-3, bf16 5e-3).
//! The exported state matches the reference's, and continuing from it equals not stopping.

use linattn_core::{
    decode_sequence, Causality, DecodeSpec, Decoder, FeatureMap, Inputs, Problem, Shape, Tensor,
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

fn main() {
    linattn_testkit::run(stamp_executors!(
        for platform in Platform::ALL, decoder in linattn_cuda::decode::decoders(platform) =>
            format!("{}: prefill + steps match the f64 decoder", decoder.name()),
            matches_reference(platform, decoder.name())
    ))
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
