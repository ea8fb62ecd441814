//! Every CUDA backend against the f64 oracle of linattn-cpu: one body per form, stamped for
//! every executor (the PTX simulator here; a GPU too where one exists) and precision.
//!
//! The grid of a backend: odd N (1, 7, 63, 65, 130) and one N > 1000, D ≠ M, B·H > 1, every
//! feature map the backend supports (maps rotate over the lengths), decay. A case the backend
//! does not implement (a head dim or map outside its kernels) is left out, and each backend
//! must run at least `MIN_CASES` of them. The verdict is linattn-core's `Judge`: the
//! precision's RMS ratio (f32 1e-5, f16 2e-3, bf16 5e-3) for O and for each gradient, a
//! gradient under 1e-2 of the case's largest judged against the largest. `linattn check
//! --backends 'sim/*'` runs the wider default grid; these are the ones `cargo test` runs.

use linattn_core::{
    Algorithm, Backend, Causality, FeatureMap, Inputs, Problem, SeededInputs, Shape,
};
use linattn_cuda::Platform;
use linattn_testkit::{against_oracle, all, stamp_executors};

/// (D, M) pairs tried in rotation until the backend supports one: D ≠ M first.
const PAIRS: [(usize, usize); 6] = [(64, 128), (128, 64), (48, 80), (80, 32), (32, 16), (64, 64)];
const SEQ_LENS: [usize; 5] = [1, 7, 63, 65, 130];
const LONG_SEQ: usize = 1100;
const DECAY: f64 = 0.97;
const MIN_CASES: usize = 6;

fn main() {
    let mut trials = stamp_executors!(
        for platform in Platform::ALL, backend in linattn_cuda::backends_on(platform) =>
            format!("{}: O and gradients match the f64 oracle", backend.name()),
            matches_oracle(backend)
    );
    trials.extend(stamp_executors!(
        for platform in Platform::ALL, backend in linattn_cuda::backends_on(platform) =>
            format!("{}: seeded staging computes what staging the same values does", backend.name()),
            seeded_staging_matches(backend)
    ));
    linattn_testkit::run(trials)
}

/// The bench stages with `stage_seeded` (inputs drawn in the storage type, no f64 copy):
/// O and the gradients must be bit-identical to `stage` of the same values, and seeded
/// inputs of another shape are refused.
fn seeded_staging_matches(mut b: Box<dyn Backend>) -> Result<(), String> {
    let name = b.name().to_string();
    let problem = grid(b.as_ref())
        .into_iter()
        .find(|p| p.shape.seq == 65)
        .ok_or_else(|| format!("{name}: no N = 65 case in its grid"))?;
    let e = |e: linattn_core::AttnError| format!("{name}: {e}");
    let source = SeededInputs::new(problem.shape, 5, true).map_err(e)?;
    let mut results = Vec::new();
    for seeded in [false, true] {
        if seeded {
            b.stage_seeded(&problem, &source).map_err(e)?;
        } else {
            b.stage(&problem, &source.materialize().map_err(e)?)
                .map_err(e)?;
        }
        b.run_forward().map_err(e)?;
        let grads = match b.info().backward {
            Some(_) => Some(b.run_backward().and_then(|_| b.grads()).map_err(e)?),
            None => None,
        };
        results.push((b.output().map_err(e)?, grads));
    }
    if results[0] != results[1] {
        return Err(format!("{name}: seeded staging differs at {problem}"));
    }
    let mut other = problem.shape;
    other.seq += 1;
    let wrong = SeededInputs::new(other, 5, true).map_err(e)?;
    match b.stage_seeded(&problem, &wrong) {
        Err(linattn_core::AttnError::ShapeMismatch(_)) => Ok(()),
        other => Err(format!("{name}: inputs of another shape gave {other:?}")),
    }
}

fn causality_of(b: &dyn Backend) -> Causality {
    match b.info().algorithm {
        Algorithm::Linear(form) if form.supports(Causality::Causal) => Causality::Causal,
        _ => Causality::NonCausal,
    }
}

/// The problems of `b`'s grid it implements.
fn grid(b: &dyn Backend) -> Vec<Problem> {
    let causality = causality_of(b);
    let maps = FeatureMap::all(32);
    let supported = |n: usize, bh: (usize, usize), map: FeatureMap, decay: f64| {
        (0..PAIRS.len()).find_map(|k| {
            let (d, m) = PAIRS[(n + k) % PAIRS.len()];
            let p = Problem::new(Shape::new(bh.0, bh.1, n, d, m), causality, map).with_decay(decay);
            b.supports(&p).is_ok().then_some(p)
        })
    };
    let mut problems = Vec::new();
    // Each length with the next map in rotation that the backend implements.
    for (i, &n) in SEQ_LENS.iter().enumerate() {
        problems.extend(
            (0..maps.len()).find_map(|k| supported(n, (2, 3), maps[(i + k) % maps.len()], 1.0)),
        );
    }
    for map in maps.iter().skip(SEQ_LENS.len()) {
        problems.extend(supported(33, (2, 3), *map, 1.0));
    }
    problems.extend(supported(65, (2, 3), FeatureMap::EluPlusOne, DECAY));
    problems.extend(supported(LONG_SEQ, (1, 2), FeatureMap::EluPlusOne, 1.0));
    problems
}

fn matches_oracle(mut b: Box<dyn Backend>) -> Result<(), String> {
    let name = b.name().to_string();
    let problems = grid(b.as_ref());
    if problems.len() < MIN_CASES {
        return Err(format!(
            "{name}: only {} cases of the grid are supported (need {MIN_CASES})",
            problems.len()
        ));
    }
    all(problems.iter().enumerate().map(|(seed, problem)| {
        let inputs =
            Inputs::random(problem.shape, 100 + seed as u64, true).map_err(|e| e.to_string())?;
        against_oracle(b.as_mut(), problem, &inputs)
    }))
}
