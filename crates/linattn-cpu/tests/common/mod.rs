//! Helpers shared by the integration tests.
#![allow(dead_code)]

use linattn_core::{Causality, FeatureMap, Problem, Shape, DEFAULT_FAVOR_SEED};

/// Every map of SPEC §5, FAVOR+ with `favor_features` features.
pub fn all_maps(favor_features: usize) -> Vec<FeatureMap> {
    FeatureMap::all(favor_features)
}

/// Map number `index % 7` (for proptest strategies).
pub fn map_by_index(index: usize, favor_features: usize, seed: u64) -> FeatureMap {
    match index % 7 {
        0 => FeatureMap::EluPlusOne,
        1 => FeatureMap::Relu,
        2 => FeatureMap::Softmax,
        3 => FeatureMap::OnePlusCos,
        4 => FeatureMap::Favor {
            features: favor_features,
            seed: DEFAULT_FAVOR_SEED ^ seed,
        },
        5 => FeatureMap::Identity,
        _ => FeatureMap::EfficientAttention,
    }
}

/// Every (map, causality) pair the maps define.
pub fn cases(favor_features: usize) -> Vec<(FeatureMap, Causality)> {
    let mut out = Vec::new();
    for map in all_maps(favor_features) {
        for causality in [Causality::Causal, Causality::NonCausal] {
            if map.supports(causality) {
                out.push((map, causality));
            }
        }
    }
    out
}

pub fn problem(shape: Shape, causality: Causality, map: FeatureMap, decay: f64) -> Problem {
    Problem::new(shape, causality, map).with_decay(decay)
}

/// `max |a − b| / max |b|` (0 when both are zero).
pub fn max_rel_to_peak(got: &[f64], reference: &[f64]) -> f64 {
    assert_eq!(got.len(), reference.len());
    let peak = reference.iter().fold(0f64, |a, x| a.max(x.abs()));
    let diff = got
        .iter()
        .zip(reference)
        .fold(0f64, |a, (g, r)| a.max((g - r).abs()));
    if peak == 0.0 {
        diff
    } else {
        diff / peak
    }
}
