//! The segmented forward of `causal_chunked/{f16,bf16}` against the f64 oracle of linattn-cpu
//! (linattn-core's `Judge` at the precision's tolerance), stamped for every executor: the
//! inference forward (`cc_seg_sums`, `cc_seg_scan`, `cc_forward_seg`: O), and the training
//! forward (`cc_seg_sums_train`, `cc_seg_scan`, `cc_forward_seg_train`, whose kept chunk
//! states and O residue the backward runs on: O, dQ, dK, dV). The segment length is fixed per
//! case (by default it is chosen for the GPU's size and is 16 to 64 at fla's shapes, beyond
//! the simulator's reach): one chunk per segment, segments whose count does not divide the
//! chunks (a short last segment), a length of 3, a single segment (no sums, no scan), B·H >
//! 1, every fused map, λ < 1, D, M from 16 to 256 (D ≤ 128: D = 256 keeps the per-chunk
//! forward; so does training at D = 128, M ≤ 64, `trains_in_segments`), and a tail chunk in
//! each. On the simulator memcheck, racecheck and initcheck are
//! on: a read of a segment slot the scan did not write, of a chunk state no segment wrote,
//! or of shared memory a chunk did not fill, fails the case.

use linattn_core::{Backend, Causality, FeatureMap, Inputs, Problem, Shape};
use linattn_cuda::causal_chunked::{backends_with, LaunchPlan, Segments};
use linattn_cuda::Platform;
use linattn_testkit::{against_oracle, forward_against_oracle, stamp_executors};

/// (B, H, D, M, N, map, λ, chunks per segment).
type Case = (usize, usize, usize, usize, usize, FeatureMap, f64, usize);

const CASES: [Case; 7] = [
    (1, 2, 64, 64, 200, FeatureMap::EluPlusOne, 1.0, 1),
    (1, 2, 128, 128, 300, FeatureMap::EluPlusOne, 0.97, 2),
    (2, 1, 16, 32, 260, FeatureMap::Relu, 1.0, 3),
    (1, 2, 32, 256, 130, FeatureMap::Identity, 0.97, 2),
    (1, 1, 128, 64, 150, FeatureMap::EluPlusOne, 1.0, 16),
    (1, 1, 64, 128, 700, FeatureMap::EluPlusOne, 0.97, 4),
    (2, 2, 128, 16, 129, FeatureMap::Relu, 1.0, 1),
];

fn main() {
    let mut trials = stamp_executors!(
        for platform in Platform::ALL, (b, case) in ["f16", "bf16"]
            .into_iter()
            .flat_map(|p| CASES.iter().map(move |c| (p, *c))) =>
            format!("causal_chunked/{b}: B={} H={} D={} M={} N={} {} λ={}, segments of {}: the inference forward's O matches the f64 oracle",
                case.0, case.1, case.2, case.3, case.4, case.5, case.6, case.7),
            segmented_matches_oracle(platform, b, case, false)
    );
    trials.extend(stamp_executors!(
        for platform in Platform::ALL, (b, case) in ["f16", "bf16"]
            .into_iter()
            .flat_map(|p| CASES.iter().map(move |c| (p, *c))) =>
            format!("causal_chunked/{b}: B={} H={} D={} M={} N={} {} λ={}, segments of {}: the training forward's O and the gradients on its kept states match the f64 oracle",
                case.0, case.1, case.2, case.3, case.4, case.5, case.6, case.7),
            segmented_matches_oracle(platform, b, case, true)
    ));
    trials.push(linattn_testkit::host(
        "the cases cover one and several segments, a short last one, and D = 16 … 128",
        covers_the_segment_shapes,
    ));
    linattn_testkit::run(trials)
}

fn plan_of(case: &Case) -> LaunchPlan {
    let shape = Shape::new(case.0, case.1, case.4, case.2, case.3);
    let slices = linattn_cuda::causal_chunked::GradSlices::Auto;
    LaunchPlan::with(&shape, slices, Segments::Chunks(case.7)).expect("plan")
}

fn covers_the_segment_shapes() {
    let segs: Vec<_> = CASES
        .iter()
        .map(|c| plan_of(c).segments.expect("segmented"))
        .collect();
    assert!(segs.iter().any(|s| s.num_segments == 1), "a single segment");
    assert!(segs.iter().any(|s| s.seg_chunks == 1 && s.num_segments > 2));
    let chunks = |c: &Case| c.4.div_ceil(64);
    assert!(
        CASES
            .iter()
            .any(|c| chunks(c) % c.7 != 0 && chunks(c) > c.7),
        "a short last segment"
    );
    for d in [16, 32, 64, 128] {
        assert!(CASES.iter().any(|c| c.2 == d), "no case with D = {d}");
    }
    assert!(
        CASES.iter().all(|c| c.4 % 64 != 0),
        "every case has a tail chunk"
    );
}

/// `train`: with ∂L/∂O staged, so the forward keeps what the backward needs, and the
/// gradients are judged too; else the inference forward's O alone.
fn segmented_matches_oracle(
    platform: Platform,
    precision: &str,
    case: Case,
    train: bool,
) -> Result<(), String> {
    let (batch, heads, d, m, n, map, decay, seg_chunks) = case;
    let mut b: Box<dyn Backend> = backends_with(platform, Segments::Chunks(seg_chunks))
        .into_iter()
        .find(|b| b.name().ends_with(precision))
        .ok_or_else(|| format!("no causal_chunked/{precision} on {platform}"))?;
    let problem =
        Problem::new(Shape::new(batch, heads, n, d, m), Causality::Causal, map).with_decay(decay);
    b.supports(&problem)
        .map_err(|e| format!("{} refuses {problem}: {e}", b.name()))?;
    let seed = (d * 1000 + m + n) as u64;
    let inputs = Inputs::random(problem.shape, seed, train).map_err(|e| e.to_string())?;
    if train {
        against_oracle(b.as_mut(), &problem, &inputs)
    } else {
        forward_against_oracle(b.as_mut(), &problem, &inputs)
    }
}
