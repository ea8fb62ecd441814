//! `cpu/causal_chunked/f32` against the f64 oracle: RMS ratio ≤ `Precision::F32.rms_tolerance()`
//! for O and dQ, dK, dV; every causal map, with and without decay, N below, at and across
//! chunk boundaries (ragged last chunk), D ≠ M, and heads cut into several groups (the
//! parallel-over-chunks path with its scans) by running on wider rayon pools; and the
//! non-causal form on GEMMs for every map.

mod common;

use common::{cases, compare_f32, problem};
use linattn_core::{AttnError, Causality, FeatureMap, Problem, Shape};
use linattn_cpu::chunked::{self, CHUNK};
use linattn_cpu::fast::{self, BackwardInto, ForwardInto, GradsF32};
use proptest::prelude::*;

/// Both backward entry points: recomputing O, and given the forward's O.
fn compare(p: &Problem, seed: u64) {
    compare_f32(p, seed, chunked::forward, chunked::backward);
    compare_f32(p, seed, chunked::forward, given_forward::<true>);
}

type Forward = fn(&Problem, &[f32], &[f32], &[f32]) -> Result<Vec<f32>, AttnError>;
type BackwardFromOutput =
    fn(&Problem, &[f32], &[f32], &[f32], &[f32], &[f32], &mut GradsF32) -> Result<(), AttnError>;

/// The backward a training step runs: the forward's O handed to the form's
/// `backward_from_output_into` (the chunked form when `CAUSAL`, else the non-causal one).
fn given_forward<const CAUSAL: bool>(
    p: &Problem,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    g: &[f32],
) -> Result<(Vec<f32>, GradsF32), AttnError> {
    let (forward, backward): (Forward, BackwardFromOutput) = if CAUSAL {
        (chunked::forward, chunked::backward_from_output_into)
    } else {
        (
            chunked::noncausal_forward,
            chunked::noncausal_backward_from_output_into,
        )
    };
    let o = forward(p, q, k, v)?;
    let mut grads = GradsF32::zeros(q.len(), v.len());
    backward(p, q, k, v, g, &o, &mut grads)?;
    Ok((o, grads))
}

fn causal_cases() -> Vec<FeatureMap> {
    cases(16)
        .into_iter()
        .filter(|(_, c)| c.is_causal())
        .map(|(m, _)| m)
        .collect()
}

#[test]
fn every_causal_map_across_chunk_boundaries() {
    let mut seed = 1;
    for n in [1, 7, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 5] {
        for map in causal_cases() {
            for decay in [1.0, 0.95] {
                seed += 1;
                compare(
                    &problem(Shape::new(1, 2, n, 8, 5), Causality::Causal, map, decay),
                    seed,
                );
            }
        }
    }
}

#[test]
fn heads_split_into_groups_on_wider_pools() {
    // B·H = 1 on 3 and 7 threads: 3 and 7 groups per head (5 chunks at N = 4L+9 for 7).
    let mut seed = 500;
    for threads in [3, 7] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        for map in causal_cases() {
            for decay in [1.0, 0.9] {
                seed += 1;
                let p = problem(
                    Shape::new(1, 1, 4 * CHUNK + 9, 12, 20),
                    Causality::Causal,
                    map,
                    decay,
                );
                pool.install(|| compare(&p, seed));
            }
        }
    }
}

#[test]
fn non_causal_on_gemms_every_map() {
    let mut seed = 900;
    for n in [1, 7, CHUNK + 1, 3 * CHUNK + 5] {
        for (map, causality) in cases(16) {
            if causality.is_causal() {
                continue;
            }
            for (decay, threads) in [(1.0, 1), (0.95, 3)] {
                seed += 1;
                let p = problem(Shape::new(1, 2, n, 8, 5), causality, map, decay);
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .unwrap();
                pool.install(|| {
                    compare_f32(
                        &p,
                        seed,
                        chunked::noncausal_forward,
                        chunked::noncausal_backward,
                    );
                    compare_f32(&p, seed, chunked::noncausal_forward, given_forward::<false>);
                });
            }
        }
    }
}

#[test]
fn non_causal_is_refused_with_a_typed_error() {
    let p = problem(
        Shape::new(1, 1, 4, 2, 2),
        Causality::NonCausal,
        FeatureMap::EluPlusOne,
        1.0,
    );
    let x = vec![0f32; 8];
    assert!(matches!(
        chunked::forward(&p, &x, &x, &x),
        Err(AttnError::InvalidArgument(_))
    ));
    assert!(matches!(
        chunked::forward(
            &problem(
                Shape::new(1, 1, 4, 2, 2),
                Causality::Causal,
                FeatureMap::Relu,
                1.0
            ),
            &x[..7],
            &x,
            &x
        ),
        Err(AttnError::ShapeMismatch(_))
    ));
}

proptest! {
    // A fixed seed: CI sees the same 24 cases every run (plus the persisted regressions);
    // longer random runs are `cases: N` with this line's seed removed.
    #![proptest_config(ProptestConfig {
        cases: 24,
        rng_seed: proptest::test_runner::RngSeed::Fixed(0x6c69_6e61),
        ..ProptestConfig::default()
    })]

    /// Random shapes, maps, decay and ragged N, on a pool of 1–4 threads. D ≥ 4: at D = 1,
    /// 1+cos has x̂ = ±1, its exact dQ, dK are 0 and f32 rounding is all that is left; at
    /// D = 2 and 3 dQ is a near-cancellation of its two terms (gn·Sᵀ against gd·zᵀ) and
    /// every f32 form, the recurrent one included, lands up to 1e-4 off it (3000 random
    /// cases, 2026-11-25), above the f32 tolerance. The fixed grids above cover D = 5 to 12.
    #[test]
    fn random_problems_match_the_oracle(
        b in 1usize..3, h in 1usize..3, n in 1usize..(3 * CHUNK + 10),
        d in 4usize..20, m in 1usize..20, map_index in 0usize..6,
        decay in prop_oneof![Just(1.0), 0.8f64..1.0], threads in 1usize..5, seed in 0u64..1000,
    ) {
        let map = common::map_by_index(map_index, 8, seed);
        prop_assume!(map.supports(Causality::Causal));
        let p = problem(Shape::new(b, h, n, d, m), Causality::Causal, map, decay);
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
        pool.install(|| compare(&p, seed));
    }
}

type Backward =
    fn(&Problem, &[f32], &[f32], &[f32], &[f32]) -> Result<(Vec<f32>, GradsF32), AttnError>;

/// An f32 form's entry points, and the causality it runs at here.
struct F32Form {
    causality: Causality,
    forward: Forward,
    forward_into: ForwardInto,
    backward: Backward,
    backward_into: BackwardInto,
}

/// Every f32 form: chunked, non-causal on GEMMs, recurrent.
fn f32_forms() -> [F32Form; 3] {
    [
        F32Form {
            causality: Causality::Causal,
            forward: chunked::forward,
            forward_into: chunked::forward_into,
            backward: chunked::backward,
            backward_into: chunked::backward_into,
        },
        F32Form {
            causality: Causality::NonCausal,
            forward: chunked::noncausal_forward,
            forward_into: chunked::noncausal_forward_into,
            backward: chunked::noncausal_backward,
            backward_into: chunked::noncausal_backward_into,
        },
        F32Form {
            causality: Causality::Causal,
            forward: fast::forward,
            forward_into: fast::forward_into,
            backward: fast::backward,
            backward_into: fast::backward_into,
        },
    ]
}

/// The shape of the buffer-reuse tests (three heads, a ragged third chunk).
const REUSE_SHAPE: Shape = Shape::new(1, 3, 2 * CHUNK + 3, 5, 7);

/// q, k, v and d_out of [`REUSE_SHAPE`] drawn from `seed`, in f32.
fn reuse_operands(seed: u64) -> [Vec<f32>; 4] {
    let x = linattn_core::Inputs::random(REUSE_SHAPE, seed, true).unwrap();
    let g = x.d_out.as_ref().unwrap().to_f32();
    [x.q.to_f32(), x.k.to_f32(), x.v.to_f32(), g]
}

/// The `_into` entry points (the backends reuse their output buffer) overwrite every
/// element, whatever the buffer held, and refuse a buffer of the wrong length.
#[test]
fn forward_into_overwrites_a_reused_buffer() {
    let [q, k, v, _] = reuse_operands(5);
    for form in f32_forms() {
        let (alloc, into) = (form.forward, form.forward_into);
        let p = Problem::new(REUSE_SHAPE, form.causality, FeatureMap::EluPlusOne);
        let want = alloc(&p, &q, &k, &v).unwrap();
        let mut out = vec![f32::NAN; want.len()];
        into(&p, &q, &k, &v, &mut out).unwrap();
        assert_eq!(out, want, "{p}");
        let mut short = vec![0f32; want.len() - 1];
        assert!(matches!(
            into(&p, &q, &k, &v, &mut short),
            Err(AttnError::ShapeMismatch(_))
        ));
    }
}

/// `backward_into` overwrites O and every gradient, whatever the buffers held (NaN here),
/// for fused and staged maps, with and without decay, and refuses a buffer of the wrong
/// length.
#[test]
fn backward_into_overwrites_reused_buffers() {
    let [q, k, v, g] = reuse_operands(9);
    let nan = |n: usize| vec![f32::NAN; n];
    for form in f32_forms() {
        let (causality, alloc, into) = (form.causality, form.backward, form.backward_into);
        for map in [
            FeatureMap::EluPlusOne,
            FeatureMap::Relu,
            FeatureMap::Softmax,
            FeatureMap::Identity,
        ] {
            for decay in [1.0, 0.9] {
                let p = Problem::new(REUSE_SHAPE, causality, map).with_decay(decay);
                let (o_want, g_want) = alloc(&p, &q, &k, &v, &g).unwrap();
                let mut o = nan(o_want.len());
                let mut grads = GradsF32 {
                    dq: nan(q.len()),
                    dk: nan(k.len()),
                    dv: nan(v.len()),
                };
                into(&p, &q, &k, &v, &g, &mut o, &mut grads).unwrap();
                assert_eq!(o, o_want, "O {p}");
                assert_eq!(grads.dq, g_want.dq, "dQ {p}");
                assert_eq!(grads.dk, g_want.dk, "dK {p}");
                assert_eq!(grads.dv, g_want.dv, "dV {p}");
                grads.dv.pop();
                assert!(matches!(
                    into(&p, &q, &k, &v, &g, &mut o, &mut grads),
                    Err(AttnError::ShapeMismatch(_))
                ));
            }
        }
    }
}

/// Given the forward's O, each GEMM form's backward overwrites every gradient (NaN-filled
/// here) with what its recomputing backward gives, to f32 rounding (the causal
/// denominators come from a running sum instead of the scores' row sums), and refuses an
/// O of the wrong length.
#[test]
fn backward_from_output_overwrites_and_matches_the_recomputing_backward() {
    let forms: [(Causality, Backward, BackwardFromOutput); 2] = [
        (
            Causality::Causal,
            chunked::backward,
            chunked::backward_from_output_into,
        ),
        (
            Causality::NonCausal,
            chunked::noncausal_backward,
            chunked::noncausal_backward_from_output_into,
        ),
    ];
    let [q, k, v, g] = reuse_operands(11);
    let maps = [
        FeatureMap::EluPlusOne,
        FeatureMap::Softmax,
        FeatureMap::Identity,
    ];
    for ((causality, recomputing, from_output), map) in forms
        .into_iter()
        .flat_map(|f| maps.into_iter().map(move |m| (f, m)))
    {
        for decay in [1.0, 0.9] {
            let p = Problem::new(REUSE_SHAPE, causality, map).with_decay(decay);
            let (o, want) = recomputing(&p, &q, &k, &v, &g).unwrap();
            let mut got = GradsF32 {
                dq: vec![f32::NAN; q.len()],
                dk: vec![f32::NAN; k.len()],
                dv: vec![f32::NAN; v.len()],
            };
            from_output(&p, &q, &k, &v, &g, &o, &mut got).unwrap();
            for (name, a, b) in [
                ("dQ", &got.dq, &want.dq),
                ("dK", &got.dk, &want.dk),
                ("dV", &got.dv, &want.dv),
            ] {
                let scale = b.iter().fold(0f32, |s, x| s.max(x.abs()));
                for (x, y) in a.iter().zip(b.iter()) {
                    assert!((x - y).abs() <= 1e-5 * scale, "{name} {p}: {x} vs {y}");
                }
            }
            assert!(matches!(
                from_output(&p, &q, &k, &v, &g, &o[1..], &mut got),
                Err(AttnError::ShapeMismatch(_))
            ));
        }
    }
}
