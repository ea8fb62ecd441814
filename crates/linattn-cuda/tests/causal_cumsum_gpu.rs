//! GPU checks of `cuda/causal_cumsum/*` against the f64 oracle in
//! `causal_recurrent_reference.rs`, its exact device bytes (O(N·C·M) workspace) and its clean
//! `OutOfMemory`. Without a GPU every test prints `skipped: <reason>` and returns.

mod common;
#[path = "causal_recurrent_reference.rs"]
mod reference;

use common::{assert_close, check_against_oracle, gpu_or_skip, Oracle};
use linattn_core::{AttnError, Backend, Causality, FeatureMap, Inputs, Precision, Problem, Shape};
use linattn_cuda::causal_cumsum;

const ORACLE: Oracle = Oracle {
    forward: reference::forward,
    backward: reference::backward,
};

fn backend(precision: Precision) -> Box<dyn Backend> {
    let name = format!("cuda/causal_cumsum/{precision}");
    causal_cumsum::backends()
        .into_iter()
        .find(|b| b.name() == name)
        .unwrap_or_else(|| panic!("no backend named {name}"))
}

/// N chosen so the √N chunking leaves ragged last chunks (7 → 3, 65 → 9, 1000 → 32).
fn cases() -> Vec<Problem> {
    let causal = |s: Shape, map| Problem::new(s, Causality::Causal, map);
    vec![
        // N = 1: ∂q̃ = k̃ (v − O)·G/den with v − O = v·ε/den, a near-total cancellation in
        // fp32 when ε is tiny (error ≈ 2⁻²⁴·den/ε of the result); ε = 1 keeps it well posed.
        causal(Shape::new(1, 1, 1, 16, 16), FeatureMap::EluPlusOne).with_eps(1.0),
        causal(Shape::new(2, 3, 7, 16, 48), FeatureMap::EluPlusOne).with_decay(0.9),
        causal(Shape::new(1, 2, 65, 48, 32), FeatureMap::Relu),
        causal(Shape::new(1, 1, 63, 80, 96), FeatureMap::Identity).with_decay(0.95),
        causal(Shape::new(1, 1, 1000, 32, 32), FeatureMap::EluPlusOne).with_decay(0.99),
        // φ stage: fp32 features, C = D + 1, FAVOR+'s per-token ε.
        causal(Shape::new(1, 2, 37, 32, 48), FeatureMap::Softmax),
        causal(Shape::new(1, 1, 65, 48, 16), FeatureMap::OnePlusCos).with_decay(0.9),
        causal(
            Shape::new(1, 1, 50, 16, 32),
            FeatureMap::Favor {
                features: 64,
                seed: 7,
            },
        ),
    ]
}

#[test]
fn cumsum_matches_oracle() {
    if !gpu_or_skip() {
        return;
    }
    for precision in [Precision::F32, Precision::F16] {
        for (i, problem) in cases().iter().enumerate() {
            check_against_oracle(backend(precision), problem, 200 + i as u64, true, &ORACLE);
        }
    }
}

/// N = 65536 spans 256 chunks of 256: the carry and fix-up phases do real work.
#[test]
fn long_sequence_matches_the_recurrence() {
    if !gpu_or_skip() {
        return;
    }
    let shape = Shape::new(1, 2, 65_536, 16, 16);
    let problem = Problem::new(shape, Causality::Causal, FeatureMap::EluPlusOne).with_decay(0.999);
    let inputs = Inputs::random(shape, 4, false)
        .unwrap()
        .rounded(|x| x as f32 as f64);
    let out = backend(Precision::F32).forward(&problem, &inputs).unwrap();
    assert_close(
        "cumsum N=65536",
        &reference::forward_recurrent(&problem, &inputs),
        &out,
        Precision::F32.rms_tolerance(),
    );
}

#[test]
fn device_bytes_count_the_materialised_states() {
    if !gpu_or_skip() {
        return;
    }
    let shape = Shape::new(1, 3, 50, 32, 16);
    let problem = Problem::new(shape, Causality::Causal, FeatureMap::EluPlusOne);
    let inputs = Inputs::random(shape, 3, true).unwrap();
    let mut b = backend(Precision::F16);
    b.stage(&problem, &inputs).unwrap();
    let stats = b.run_forward().unwrap();
    let tokens = 3 * 50u64;
    // O (f16) + den + U (C·M fp32 per token) + key sums (C fp32 per token).
    let want = tokens * 16 * 2 + tokens * 4 + tokens * 32 * 16 * 4 + tokens * 32 * 4;
    assert_eq!(stats.device_bytes, Some(want));
}

/// U alone needs B·H·N·C·M·4 = 6·65536·256·256·4 ≈ 103 GB: more than any current GPU, while
/// the inputs stay near 0.6 GB on the device.
#[test]
fn too_large_is_out_of_memory_not_a_crash() {
    if !gpu_or_skip() {
        return;
    }
    let shape = Shape::new(2, 3, 65_536, 256, 256);
    let problem = Problem::new(shape, Causality::Causal, FeatureMap::EluPlusOne);
    let inputs = Inputs::random(shape, 1, false).unwrap();
    let mut b = backend(Precision::F16);
    b.stage(&problem, &inputs).unwrap();
    match b.run_forward() {
        Err(AttnError::OutOfMemory {
            requested_bytes, ..
        }) => {
            assert!(requested_bytes > 100_000_000_000)
        }
        other => panic!("expected OutOfMemory, got {other:?}"),
    }
}
