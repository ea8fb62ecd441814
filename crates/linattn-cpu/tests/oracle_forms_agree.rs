//! The four f64 forms (recurrent, cumsum, quadratic, parallel) compute the same O: over
//! random small shapes (D ≠ M allowed), every map, both causalities, with and without decay.

mod common;

use common::{map_by_index, max_rel_to_peak, problem};
use linattn_core::{Causality, FeatureMap, Form, Inputs, Shape};
use linattn_cpu::oracle;
use proptest::prelude::*;

const TOL: f64 = 1e-10;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn forms_agree(
        b in 1usize..=2, h in 1usize..=2, n in 1usize..=9, d in 1usize..=5, m in 1usize..=5,
        map_index in 0usize..7, favor in 1usize..=8, causal in any::<bool>(),
        decay in prop::sample::select(vec![1.0, 0.9, 0.5]), seed in any::<u64>(),
    ) {
        let map = map_by_index(map_index, favor, seed);
        let causality = if causal { Causality::Causal } else { Causality::NonCausal };
        prop_assume!(map.supports(causality));
        // ε = 1e-3, not the default 1e-6: a row whose similarities are all exactly 0 (1+cos
        // at D = 1 gives sims of 0 or 2) has den = ε and a numerator that is pure rounding
        // residue of the states, amplified by 1/ε differently by each form.
        let p = problem(Shape::new(b, h, n, d, m), causality, map, decay).with_eps(1e-3);
        let x = Inputs::random(p.shape, seed, false).unwrap();
        let reference = oracle::forward_with(&p, &x, Form::Quadratic).unwrap();
        let forms: &[Form] = if causal { &[Form::Recurrent, Form::Cumsum] } else { &[Form::Noncausal] };
        // Relative to the larger of the output's and the values' peaks: a normalised O is a
        // convex combination of values, and a row whose weights cancel to ~0 has an output
        // that is rounding residue (1e-13 against values of 1), equal in no two forms.
        let peak_v = x.v.data().iter().fold(0f64, |a, v| a.max(v.abs()));
        let peak = reference.data().iter().fold(peak_v, |a, v| a.max(v.abs()));
        let rel = |o: &[f64]| {
            o.iter().zip(reference.data()).fold(0f64, |a, (g, r)| a.max((g - r).abs())) / peak
        };
        for &form in forms {
            let o = oracle::forward_with(&p, &x, form).unwrap();
            let err = rel(o.data());
            prop_assert!(err <= TOL, "{form} vs quadratic: {err:e} for {p}");
        }
        let default = oracle::forward(&p, &x).unwrap();
        prop_assert!(rel(default.data()) <= TOL);
    }
}

/// A case worked by hand: one head, two tokens, identity map (no normaliser), causal with
/// λ = 0.5: O_0 = (q_0·k_0) v_0, O_1 = 0.5 (q_1·k_0) v_0 + (q_1·k_1) v_1.
#[test]
fn identity_with_decay_by_hand() {
    use linattn_core::Tensor;
    let shape = Shape::new(1, 1, 2, 2, 1);
    let q = Tensor::from_vec([1, 1, 2, 2], vec![1.0, 2.0, 3.0, -1.0]).unwrap();
    let k = Tensor::from_vec([1, 1, 2, 2], vec![0.5, 1.0, 2.0, 1.0]).unwrap();
    let v = Tensor::from_vec([1, 1, 2, 1], vec![4.0, -2.0]).unwrap();
    let x = Inputs {
        q,
        k,
        v,
        d_out: None,
    };
    let p = problem(shape, Causality::Causal, FeatureMap::Identity, 0.5);
    let o = oracle::forward(&p, &x).unwrap();
    let o0 = (0.5 + 2.0) * 4.0;
    let o1 = 0.5 * (1.5 - 1.0) * 4.0 + (6.0 - 1.0) * -2.0;
    assert_eq!(o.data(), &[o0, o1]);
    // Non-causal with decay weights key j by λ^{N−1−j}.
    let p = problem(shape, Causality::NonCausal, FeatureMap::Identity, 0.5);
    let o = oracle::forward(&p, &x).unwrap();
    let row = |qa: f64, qb: f64| 0.5 * (qa * 0.5 + qb * 1.0) * 4.0 + (qa * 2.0 + qb) * -2.0;
    assert_eq!(o.data(), &[row(1.0, 2.0), row(3.0, -1.0)]);
}

/// Normalised O is a convex combination of the values it sees (every weight ≥ 0, ε small):
/// the first causal output is v_0 up to ε.
#[test]
fn first_causal_output_is_first_value() {
    let shape = Shape::new(1, 2, 6, 4, 3);
    let x = Inputs::random(shape, 5, false).unwrap();
    for map in [
        FeatureMap::EluPlusOne,
        FeatureMap::Softmax,
        FeatureMap::OnePlusCos,
    ] {
        let p = problem(shape, Causality::Causal, map, 1.0).with_eps(0.0);
        let o = oracle::forward(&p, &x).unwrap();
        for bh in 0..2 {
            let err = max_rel_to_peak(&o.head(bh)[..3], &x.v.head(bh)[..3]);
            assert!(err < 1e-14, "{map}: {err:e}");
        }
    }
}
