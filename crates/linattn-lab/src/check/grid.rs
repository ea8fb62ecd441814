//! The problems `linattn check` runs: the covering default grid, the full cartesian grid,
//! the `--long` cases, and which of them apply to a backend.

use crate::registry;
use linattn_core::{Algorithm, Causality, DeviceKind, FeatureMap, Problem, Shape};

/// Sequence lengths of the default grid: single token, odd sizes around 64 (chunk and tile
/// edges) and past two chunks, and one long enough for accumulated error to show.
pub(super) const SEQ_LENS: [usize; 6] = [1, 7, 63, 65, 130, 1100];
/// Head dims the grid draws D and M from.
pub(super) const HEAD_DIMS: [usize; 6] = [16, 32, 48, 64, 80, 128];
/// (D, M) pairs the default grid cycles through: M ≠ D, every head dim once as D and once
/// as M, and the tensor-core sizes (64, 128) first so tiled kernels limited to them get
/// cases at several N.
pub(super) const DEFAULT_PAIRS: [(usize, usize); 6] =
    [(64, 128), (128, 64), (16, 48), (48, 80), (80, 32), (32, 16)];
/// Extra lengths of `--long`.
pub(super) const LONG_SEQ_LENS: [usize; 3] = [4096, 16384, 65536];
/// The softmax oracle is O(N²): beyond this length it would take hours on the CPU.
pub(super) const SOFTMAX_ORACLE_MAX_SEQ: usize = 4096;
pub(super) const BATCH: usize = 2;
pub(super) const HEADS: usize = 3;
/// FAVOR+ features of the grid's favor map.
pub(super) const FAVOR_FEATURES: usize = 32;
/// λ of the decay cases.
pub(super) const DECAY: f64 = 0.97;

/// One problem of the grid. `index` is its position in the grid (and its seed offset).
#[derive(Debug, Clone, Copy)]
pub(super) struct Case {
    pub(super) index: usize,
    pub(super) problem: Problem,
    pub(super) long: bool,
}

/// The covering default grid: every N, causality and map, with (D, M) cycling through
/// pairs in which every head dim appears as D and as M; plus the decay cases.
pub(super) fn default_grid() -> Vec<Case> {
    let pairs = DEFAULT_PAIRS;
    let mut problems = Vec::new();
    for &seq in &SEQ_LENS {
        for causality in [Causality::Causal, Causality::NonCausal] {
            for map in FeatureMap::all(FAVOR_FEATURES) {
                let (dk, dv) = pairs[problems.len() % pairs.len()];
                let shape = Shape::new(BATCH, HEADS, seq, dk, dv);
                problems.push(Problem::new(shape, causality, map));
            }
        }
    }
    for causality in [Causality::Causal, Causality::NonCausal] {
        let shape = Shape::new(BATCH, HEADS, 63, 64, 128);
        problems.push(Problem::new(shape, causality, FeatureMap::EluPlusOne).with_decay(DECAY));
    }
    // The tensor-core kernels take D, M ∈ {64, 128} and the fused maps only: give them every
    // N too (the rotation above reaches them at some N only).
    let fused = [
        FeatureMap::EluPlusOne,
        FeatureMap::Relu,
        FeatureMap::Identity,
    ];
    for (i, &seq) in SEQ_LENS.iter().enumerate() {
        let (dk, dv) = [(128, 64), (64, 128)][i % 2];
        let shape = Shape::new(BATCH, HEADS, seq, dk, dv);
        problems.push(Problem::new(
            shape,
            Causality::Causal,
            fused[i % fused.len()],
        ));
    }
    numbered(problems, false)
}

/// Every N × D × M × causality × map × decay.
pub(super) fn full_grid() -> Vec<Case> {
    let mut problems = Vec::new();
    for &seq in &SEQ_LENS {
        for &dk in &HEAD_DIMS {
            for &dv in &HEAD_DIMS {
                for causality in [Causality::Causal, Causality::NonCausal] {
                    for map in FeatureMap::all(FAVOR_FEATURES) {
                        for decay in [1.0, DECAY] {
                            let shape = Shape::new(BATCH, HEADS, seq, dk, dv);
                            problems.push(Problem::new(shape, causality, map).with_decay(decay));
                        }
                    }
                }
            }
        }
    }
    numbered(problems, false)
}

/// The `--long` cases, numbered after the grid.
pub(super) fn long_cases(first_index: usize) -> Vec<Case> {
    let mut problems = Vec::new();
    for &seq in &LONG_SEQ_LENS {
        for causality in [Causality::Causal, Causality::NonCausal] {
            let shape = Shape::new(1, 2, seq, 64, 64);
            problems.push(Problem::new(shape, causality, FeatureMap::EluPlusOne));
        }
    }
    // fla's head dims, D = M = 128, where on sm_90 the chunked form's segmented CTAs take
    // both value slices (the default grid keeps M ≠ D): causal, decayed, 64 chunks. Last,
    // so that the cases before keep their indices and seeds.
    let shape = Shape::new(1, 2, LONG_SEQ_LENS[0], 128, 128);
    problems.push(Problem::new(shape, Causality::Causal, FeatureMap::EluPlusOne).with_decay(DECAY));
    let mut cases = numbered(problems, true);
    for c in &mut cases {
        c.index += first_index;
    }
    cases
}

pub(super) fn numbered(problems: Vec<Problem>, long: bool) -> Vec<Case> {
    problems
        .into_iter()
        .enumerate()
        .map(|(index, problem)| Case {
            index,
            problem,
            long,
        })
        .collect()
}

/// Whether `case` belongs to what `info`'s backend is checked on (as opposed to n/a: a
/// case that is not in its grid at all is neither run nor counted).
pub(super) fn case_applies(info: &linattn_core::BackendInfo, case: &Case) -> bool {
    let softmax = info.algorithm == Algorithm::Softmax;
    if softmax && case.problem.softmax_ignores().is_some() {
        // Softmax ignores map, ε and decay: those cases would repeat the elu+1 one.
        return false;
    }
    if case.long {
        let reference = registry::family(&info.name) == "cpu-ref";
        let softmax_on_cpu = softmax && info.device == DeviceKind::Cpu;
        if reference || softmax_on_cpu {
            return false;
        }
        if softmax && case.problem.shape.seq > SOFTMAX_ORACLE_MAX_SEQ {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use linattn_core::Precision;
    use std::collections::HashSet;

    #[test]
    fn default_grid_covers_every_axis_value() {
        let grid = default_grid();
        let seqs: HashSet<usize> = grid.iter().map(|c| c.problem.shape.seq).collect();
        assert_eq!(seqs, SEQ_LENS.into_iter().collect());
        for &d in &HEAD_DIMS {
            assert!(grid.iter().any(|c| c.problem.shape.dk == d), "D = {d}");
            assert!(grid.iter().any(|c| c.problem.shape.dv == d), "M = {d}");
        }
        assert!(grid
            .iter()
            .all(|c| c.problem.shape.dk != c.problem.shape.dv));
        for map in FeatureMap::all(FAVOR_FEATURES) {
            for causality in [Causality::Causal, Causality::NonCausal] {
                assert!(grid
                    .iter()
                    .any(|c| c.problem.map == map && c.problem.causality == causality));
            }
        }
        let decayed: Vec<_> = grid.iter().filter(|c| c.problem.has_decay()).collect();
        assert_eq!(decayed.len(), 2);
        assert!(decayed.iter().all(|c| c.problem.decay == DECAY));
        // Indices are positions: seeds differ between cases.
        assert!(grid.iter().enumerate().all(|(i, c)| c.index == i));
        // Softmax sees every N with distinct head-dim pairs across causalities.
        let elu: HashSet<(usize, usize)> = grid
            .iter()
            .filter(|c| c.problem.map == FeatureMap::EluPlusOne && !c.problem.has_decay())
            .map(|c| (c.problem.shape.dk, c.problem.shape.dv))
            .collect();
        assert_eq!(elu.len(), HEAD_DIMS.len());
    }

    #[test]
    fn full_grid_is_the_cartesian_product() {
        let n = SEQ_LENS.len() * HEAD_DIMS.len() * HEAD_DIMS.len() * 2 * 7 * 2;
        assert_eq!(full_grid().len(), n);
    }

    #[test]
    fn long_cases_skip_references_and_cpu_softmax() {
        let info = |name: &str, device, algorithm| linattn_core::BackendInfo {
            name: name.into(),
            device,
            precision: Precision::F32,
            algorithm,
            backward: None,
        };
        let long = long_cases(100);
        assert!(long.iter().all(|c| c.long && c.index >= 100));
        // The D = M = 64 cases first (their indices as before the D = M = 128 one was added).
        assert_eq!(long.len(), 2 * LONG_SEQ_LENS.len() + 1);
        let last = long.last().unwrap().problem;
        assert_eq!(
            (last.shape.dk, last.shape.dv, last.decay),
            (128, 128, DECAY)
        );
        assert!(long[..6].iter().all(|c| c.problem.shape.dk == 64));
        let reference = info(
            "cpu-ref/causal_recurrent/f64",
            DeviceKind::Cpu,
            Algorithm::Linear(linattn_core::Form::Recurrent),
        );
        let fast = info(
            "cpu/causal_recurrent/f32",
            DeviceKind::Cpu,
            Algorithm::Linear(linattn_core::Form::Recurrent),
        );
        let cpu_softmax = info("softmax/cpu/f32", DeviceKind::Cpu, Algorithm::Softmax);
        let gpu_softmax = info("cuda/softmax/f32", DeviceKind::Cuda, Algorithm::Softmax);
        assert!(long.iter().all(|c| !case_applies(&reference, c)));
        assert!(long.iter().all(|c| case_applies(&fast, c)));
        assert!(long.iter().all(|c| !case_applies(&cpu_softmax, c)));
        let gpu: Vec<_> = long
            .iter()
            .filter(|c| case_applies(&gpu_softmax, c))
            .collect();
        assert!(!gpu.is_empty());
        assert!(gpu
            .iter()
            .all(|c| c.problem.shape.seq <= SOFTMAX_ORACLE_MAX_SEQ));
    }
}
