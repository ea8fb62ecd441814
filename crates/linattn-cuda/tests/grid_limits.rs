//! Every CUDA form's launch limits through `supports`: for each limit a problem just inside
//! (accepted) and just beyond (refused with `Unsupported::Problem` naming the value and the
//! limit), stamped for the simulator, whose backends and decoders run the same kernels as a
//! GPU's. Only `supports` runs: nothing is allocated, so the sizes can be the real limits.
//!
//! The limits (crates/linattn-cuda/src/limits.rs): B·H on gridDim.y or z (65535) for every
//! form; N ≤ 2^30 (int token indices); ⌈B·H·N/8⌉ on gridDim.x (2^31 − 1) for the row kernels
//! of the φ stage and of the non-causal backward; ⌈B·H·N·R/256⌉ for FAVOR+'s exponentials;
//! the decoder's B·H on gridDim.x and its head dim D ≤ 256.

use linattn_core::{
    Algorithm, Backend, Causality, DecodeSpec, Decoder, FeatureMap, Form, Problem, Shape,
    Unsupported, DEFAULT_EPS,
};
use linattn_cuda::Platform;
use linattn_testkit::stamp_executors;

/// 2^30, the longest sequence.
const MAX_SEQ: usize = 1 << 30;

/// One limit: a problem just inside, one just beyond, and what the refusal must name.
struct Limit {
    what: &'static str,
    inside: Shape,
    beyond: Shape,
    map: FeatureMap,
    needles: &'static [&'static str],
}

fn favor(features: usize) -> FeatureMap {
    FeatureMap::Favor { features, seed: 1 }
}

/// The limits of the form `b` runs. D = M = 64 is a head dim every form takes.
fn limits_of(b: &dyn Backend) -> Vec<Limit> {
    let shape = |batch, heads, seq| Shape::new(batch, heads, seq, 64, 64);
    let mut limits = vec![
        Limit {
            what: "B·H on gridDim.y/z",
            inside: shape(1, 65_535, 64),
            beyond: shape(2, 32_768, 64),
            map: FeatureMap::EluPlusOne,
            needles: &["B·H = 65536", "65535"],
        },
        Limit {
            what: "N in int",
            inside: shape(1, 1, MAX_SEQ),
            beyond: shape(1, 1, MAX_SEQ + 1),
            map: FeatureMap::EluPlusOne,
            needles: &["N = 1073741825", "1073741824"],
        },
    ];
    let form = match b.info().algorithm {
        Algorithm::Linear(form) => form,
        Algorithm::Softmax => return limits,
    };
    // The φ stage's row kernels (every form but the chunked one, which fuses its maps):
    // 16·(2^30 − 1) rows make 2^31 − 2 blocks of 8, 16·2^30 make 2^31.
    if form != Form::Chunked {
        limits.push(Limit {
            what: "softmax φ rows on gridDim.x",
            inside: shape(16, 1, MAX_SEQ - 1),
            beyond: shape(16, 1, MAX_SEQ),
            map: FeatureMap::Softmax,
            needles: &["⌈B·H·N/8⌉ = 2147483648", "gridDim.x's 2147483647"],
        });
        limits.push(Limit {
            what: "FAVOR+ exponentials on gridDim.x",
            inside: shape(2, 1, MAX_SEQ - 1),
            beyond: shape(2, 1, MAX_SEQ),
            map: favor(256),
            needles: &["⌈B·H·N·R/256⌉ = 2147483648", "gridDim.x's 2147483647"],
        });
    }
    // The non-causal backward's row terms, a warp per row, with a fused map.
    if form == Form::Noncausal {
        limits.push(Limit {
            what: "nc_backward_row_terms on gridDim.x",
            inside: shape(16, 1, MAX_SEQ - 1),
            beyond: shape(16, 1, MAX_SEQ),
            map: FeatureMap::EluPlusOne,
            needles: &["⌈B·H·N/8⌉ = 2147483648", "nc_backward_row_terms"],
        });
    }
    limits
}

fn causality_of(b: &dyn Backend) -> Causality {
    match b.info().algorithm {
        Algorithm::Linear(form) if form.supports(Causality::Causal) => Causality::Causal,
        _ => Causality::NonCausal,
    }
}

/// Each limit of `b`: inside accepted, beyond refused naming the value and the limit.
fn backend_limits(b: Box<dyn Backend>) -> Result<(), String> {
    let name = b.name().to_string();
    let causality = causality_of(b.as_ref());
    let limits = limits_of(b.as_ref());
    if limits.len() < 2 {
        return Err(format!("{name}: no limits listed"));
    }
    for limit in limits {
        let inside = Problem::new(limit.inside, causality, limit.map);
        if let Err(e) = b.supports(&inside) {
            return Err(format!("{name}, {}: {inside} refused: {e}", limit.what));
        }
        let beyond = Problem::new(limit.beyond, causality, limit.map);
        match b.supports(&beyond) {
            Err(Unsupported::Problem(reason)) => {
                if let Some(missing) = limit.needles.iter().find(|n| !reason.contains(**n)) {
                    return Err(format!(
                        "{name}, {}: the refusal of {beyond} does not name '{missing}': {reason}",
                        limit.what
                    ));
                }
            }
            other => {
                return Err(format!(
                    "{name}, {}: {beyond} gave {other:?}, not a refusal",
                    limit.what
                ))
            }
        }
    }
    Ok(())
}

fn spec(batch: usize, heads: usize, dk: usize, map: FeatureMap) -> DecodeSpec {
    DecodeSpec {
        batch,
        heads,
        dk,
        dv: 64,
        map,
        eps: DEFAULT_EPS,
        decay: 1.0,
    }
}

/// The decoder's limits: B·H blocks on gridDim.x, and D ≤ 256 even where C = R is smaller.
fn decoder_limits(d: Box<dyn Decoder>) -> Result<(), String> {
    let name = d.name().to_string();
    let cases = [
        (
            spec(1, (1 << 31) - 1, 64, FeatureMap::EluPlusOne),
            spec(2, 1 << 30, 64, FeatureMap::EluPlusOne),
            &["B·H = 2147483648", "gridDim.x's 2147483647", "dec_step"][..],
        ),
        (
            spec(1, 1, 256, favor(64)),
            spec(1, 1, 272, favor(64)),
            &["head dim D = 272", "256"],
        ),
    ];
    for (inside, beyond, needles) in cases {
        d.supports(&inside)
            .map_err(|e| format!("{name}: {inside:?} refused: {e}"))?;
        match d.supports(&beyond) {
            Err(Unsupported::Problem(reason)) => {
                if let Some(missing) = needles.iter().find(|n| !reason.contains(**n)) {
                    return Err(format!("{name}: '{missing}' not in: {reason}"));
                }
            }
            other => return Err(format!("{name}: {beyond:?} gave {other:?}")),
        }
    }
    Ok(())
}

fn main() {
    let mut trials = stamp_executors!(
        for platform in [Platform::Sim], backend in linattn_cuda::backends_on(platform) =>
            format!("{}: supports takes each launch limit and refuses past it", backend.name()),
            backend_limits(backend)
    );
    trials.extend(stamp_executors!(
        for platform in [Platform::Sim], decoder in linattn_cuda::decode::decoders(platform) =>
            format!("{}: supports takes each launch limit and refuses past it", decoder.name()),
            decoder_limits(decoder)
    ));
    linattn_testkit::run(trials)
}
