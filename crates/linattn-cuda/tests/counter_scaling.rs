//! The simulator's counters scale as the forms' costs do: for every linear-attention kernel,
//! doubling N doubles the warp instructions and the global sectors it touches (within 5%).
//! Counters are exact, so this is a property of the kernels, not of a noisy measurement.
//! Simulator only (the softmax baseline's fourfold growth is checked in linattn-softmax).
//!
//! Judged per kernel: every kernel doing at least a twentieth of its phase's work, except
//! the cumsum form's blockwise scans, whose chunks are √N long: per-chunk costs change in
//! steps as N grows (`cs_scan_fix` does 1.78× the work from N = 1024 to 2048), and the
//! chunked form's scan over its segments, whose default length depends on N; they are left
//! out of the phase totals too.

use linattn_core::{Algorithm, Backend, Causality, FeatureMap, Problem, Shape};
use linattn_cuda::Platform;
use linattn_testkit::{counters_scale, stamp_executors};

/// Kernels whose cost is not proportional to N by design, and why.
const EXEMPT: &[(&str, &str)] = &[
    ("cs_scan_local", "scans √N-long chunks"),
    ("cs_scan_carry", "walks the √N chunk ends: O(√N)"),
    ("cs_scan_fix", "adds carries into √N-long chunks"),
    (
        "cc_seg_scan",
        "one step per segment, and the default segment length changes with N and the SMs \
         (the chunked training forward in segments: 1.78× from N = 1024 to 2048 here)",
    ),
];

fn main() {
    linattn_testkit::run(stamp_executors!(
        for platform in [Platform::Sim], backend in linattn_cuda::backends_on(platform) =>
            format!(
                "{}: every kernel's instructions and sectors double with N",
                backend.name()
            ),
            doubles_with_n(backend)
    ))
}

fn doubles_with_n(mut backend: Box<dyn Backend>) -> Result<(), String> {
    let causality = match backend.info().algorithm {
        Algorithm::Linear(form) if !form.supports(Causality::Causal) => Causality::NonCausal,
        _ => Causality::Causal,
    };
    let problem = Problem::new(
        Shape::new(1, 2, 1024, 64, 64),
        causality,
        FeatureMap::EluPlusOne,
    );
    counters_scale(backend.as_mut(), &problem, 2.0, EXEMPT)
}
