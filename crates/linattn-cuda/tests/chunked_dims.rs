//! `causal_chunked/{f16,bf16}` at every head dim its kernels take: D and M each in
//! {16, 32, 64, 128, 256}, each value in at least one forward + backward case against the f64
//! oracle of linattn-cpu (linattn-core's `Judge` at the precision's tolerance, as `forms.rs`),
//! stamped for every executor. Every case has a tail chunk (N not a multiple of 64); the maps
//! are elu+1 (φ(0) = 1: padded features must be zeroed after φ), relu and identity, two with
//! decay. D, M = 16, 32 run on the 64-wide program (zero-padded in shared memory, masked on
//! store) and 256 on its own: on the simulator, memcheck, racecheck and initcheck are on, so a
//! store past a row of width 16 or 32 or a read of unwritten padding fails the case.
//! N stays small: D = M = 256 simulates 4 × 4 state tiles per chunk.
//! Both run per chunk here (`Segments::Off`): the training forward (the split walk and
//! `cc_forward_train`) under the backward, and, since a forward staged without d_out
//! (inference) runs other kernels, the inference forward (the packed walk and `cc_forward`)
//! alone against the oracle. By default D ≤ 128 runs both in segments, whose own cases are
//! tests/chunked_segments.rs (and the check grid's); D = 256 always runs per chunk.

use linattn_core::{Backend, Causality, FeatureMap, Inputs, Problem, Shape};
use linattn_cuda::causal_chunked::{backends, backends_with, Segments, HEAD_DIMS};
use linattn_cuda::Platform;
use linattn_testkit::{against_oracle, forward_against_oracle, stamp_executors};

/// (D, M, N, map, λ): together every head dim as D and as M.
const CASES: [(usize, usize, usize, FeatureMap, f64); 7] = [
    (16, 32, 70, FeatureMap::EluPlusOne, 1.0),
    (32, 16, 65, FeatureMap::Relu, 0.97),
    (64, 256, 65, FeatureMap::Identity, 1.0),
    (256, 32, 66, FeatureMap::EluPlusOne, 1.0),
    (256, 256, 65, FeatureMap::EluPlusOne, 0.97),
    (128, 64, 65, FeatureMap::Relu, 1.0),
    (16, 128, 100, FeatureMap::EluPlusOne, 1.0),
];

fn main() {
    let mut trials = stamp_executors!(
        for platform in Platform::ALL, (b, case) in backends(platform).into_iter().flat_map(|b| {
            let name = b.name().to_string();
            CASES.iter().map(move |c| (name.clone(), *c))
        }) =>
            format!("{b}: D={} M={} N={} {} λ={}: per chunk, O and gradients match the f64 oracle",
                case.0, case.1, case.2, case.3, case.4),
            matches_oracle(platform, &b, case)
    );
    trials.extend(stamp_executors!(
        for platform in Platform::ALL, (b, case) in backends(platform).into_iter().flat_map(|b| {
            let name = b.name().to_string();
            CASES.iter().map(move |c| (name.clone(), *c))
        }) =>
            format!("{b}: D={} M={} N={} {} λ={}: the per-chunk inference forward's O matches the f64 oracle",
                case.0, case.1, case.2, case.3, case.4),
            inference_matches_oracle(platform, &b, case)
    ));
    trials.push(linattn_testkit::host(
        "the cases cover every head dim as D and as M",
        covers_every_head_dim,
    ));
    linattn_testkit::run(trials)
}

fn covers_every_head_dim() {
    for dim in HEAD_DIMS {
        assert!(CASES.iter().any(|c| c.0 == dim), "no case with D = {dim}");
        assert!(CASES.iter().any(|c| c.1 == dim), "no case with M = {dim}");
    }
    assert!(
        CASES.iter().all(|c| c.2 % 64 != 0),
        "every case has a tail chunk"
    );
}

/// The backend (its forward split as `segments` says), the problem and its inputs
/// (with d_out) of one case.
fn staged(
    platform: Platform,
    name: &str,
    (d, m, n, map, decay): (usize, usize, usize, FeatureMap, f64),
    segments: Segments,
) -> Result<(Box<dyn Backend>, Problem, Inputs), String> {
    let b: Box<dyn Backend> = backends_with(platform, segments)
        .into_iter()
        .find(|b| b.name() == name)
        .ok_or_else(|| format!("no backend {name}"))?;
    let problem = Problem::new(Shape::new(1, 2, n, d, m), Causality::Causal, map).with_decay(decay);
    b.supports(&problem)
        .map_err(|e| format!("{name} refuses {problem}: {e}"))?;
    let seed = (d * 1000 + m) as u64;
    let inputs = Inputs::random(problem.shape, seed, true).map_err(|e| e.to_string())?;
    Ok((b, problem, inputs))
}

fn matches_oracle(
    platform: Platform,
    name: &str,
    case: (usize, usize, usize, FeatureMap, f64),
) -> Result<(), String> {
    let (mut b, problem, inputs) = staged(platform, name, case, Segments::Off)?;
    against_oracle(b.as_mut(), &problem, &inputs)
}

fn inference_matches_oracle(
    platform: Platform,
    name: &str,
    case: (usize, usize, usize, FeatureMap, f64),
) -> Result<(), String> {
    let (mut b, problem, inputs) = staged(platform, name, case, Segments::Off)?;
    forward_against_oracle(b.as_mut(), &problem, &inputs)
}
