//! Streaming decode (prefill P, then one token at a time) equals the causal forward over the
//! whole sequence (SPEC §2 RNN view, §6 decay), for both CPU decoders, every causal map, with
//! and without decay, P from 0 to N; a saved and loaded state continues exactly; bad input is
//! a typed error.

mod common;

use linattn_core::{
    decode_sequence, AttnError, Causality, DecodeSpec, DecodeState, ErrorMetrics, FeatureMap,
    Inputs, Precision, Problem, Shape,
};
use linattn_cpu::{decoders, maps::PreparedMap, oracle};

const N: usize = 23;

fn causal_maps() -> Vec<FeatureMap> {
    common::all_maps(16)
        .into_iter()
        .filter(|m| m.supports(Causality::Causal))
        .collect()
}

fn problem(map: FeatureMap, decay: f64) -> Problem {
    common::problem(Shape::new(2, 3, N, 8, 5), Causality::Causal, map, decay)
}

#[test]
fn decode_equals_causal_forward_for_every_map_decay_and_prefill() {
    for map in causal_maps() {
        for decay in [1.0, 0.9] {
            let p = problem(map, decay);
            let spec = DecodeSpec::from_problem(&p).unwrap();
            let x = Inputs::random(p.shape, 11, false).unwrap();
            let reference = oracle::forward(&p, &x).unwrap();
            for mut dec in decoders() {
                let tol = dec.state_precision().rms_tolerance();
                for prefill in [0, 1, 7, N - 1, N] {
                    let got = decode_sequence(dec.as_mut(), &spec, &x, prefill, None)
                        .unwrap()
                        .0;
                    let err = ErrorMetrics::compare(reference.data(), got.data());
                    assert!(
                        err.passes(tol),
                        "{} map {map} decay {decay} prefill {prefill}: rms ratio {:e} > {tol:e}",
                        dec.name(),
                        err.rms_ratio
                    );
                    assert_eq!(dec.export_state().unwrap().tokens, N as u64);
                }
            }
        }
    }
}

/// The state after P tokens is `S = Σ_j λ^{P−1−j} φ(k_j)v_jᵀ`, `z = Σ_j λ^{P−1−j} φ(k_j)`
/// summed directly, with z carrying every token (SPEC §6, §9).
#[test]
fn prefill_state_is_the_decayed_sum_over_every_token() {
    for map in [FeatureMap::EluPlusOne, FeatureMap::OnePlusCos] {
        let p = problem(map, 0.8);
        let spec = DecodeSpec::from_problem(&p).unwrap();
        let x = Inputs::random(p.shape, 5, false).unwrap();
        let (c, m, d) = (spec.feature_dim(), spec.dv, spec.dk);
        let phi = PreparedMap::<f64>::exact(map, d);
        for mut dec in decoders() {
            dec.reset(&spec).unwrap();
            dec.prefill(&x).unwrap();
            let state = dec.export_state().unwrap();
            for bh in 0..spec.bh() {
                let f = phi.featurise(x.q.head(bh), x.k.head(bh), N);
                let v = x.v.head(bh);
                let mut s = vec![0.0; c * m];
                let mut z = vec![0.0; c];
                for j in 0..N {
                    let w = p.decay.powi((N - 1 - j) as i32);
                    for a in 0..c {
                        z[a] += w * f.k[j * c + a];
                        for b in 0..m {
                            s[a * m + b] += w * f.k[j * c + a] * v[j * m + b];
                        }
                    }
                }
                let tol = dec.state_precision().rms_tolerance();
                let es = ErrorMetrics::compare(&s, &state.s[bh * c * m..(bh + 1) * c * m]);
                let ez = ErrorMetrics::compare(&z, &state.z[bh * c..(bh + 1) * c]);
                assert!(
                    es.passes(tol) && ez.passes(tol),
                    "{} head {bh}: S {es:?} z {ez:?}",
                    dec.name()
                );
            }
        }
    }
}

#[test]
fn save_load_continue_equals_uninterrupted() {
    let dir = tempfile::tempdir().unwrap();
    for map in [
        FeatureMap::Relu,
        FeatureMap::Favor {
            features: 16,
            seed: 99,
        },
    ] {
        let p = problem(map, 0.95);
        let spec = DecodeSpec::from_problem(&p).unwrap();
        let x = Inputs::random(p.shape, 3, false).unwrap();
        for mut dec in decoders() {
            let whole = decode_sequence(dec.as_mut(), &spec, &x, 4, None).unwrap().0;
            let split = 9;
            decode_sequence(
                dec.as_mut(),
                &spec,
                &x.seq_slice(0..split).unwrap(),
                4,
                None,
            )
            .unwrap();
            let path = dir.path().join(format!("{}.state", dec.state_precision()));
            dec.export_state().unwrap().save(&path).unwrap();
            let loaded = DecodeState::load(&path).unwrap();
            assert_eq!(loaded, dec.export_state().unwrap());
            assert_eq!(loaded.tokens, split as u64);
            let rest = x.seq_slice(split..N).unwrap();
            let tail = decode_sequence(dec.as_mut(), &spec, &rest, 0, Some(&loaded))
                .unwrap()
                .0;
            // The state round-trips bit for bit, so the continuation is identical.
            assert_eq!(tail, whole.seq_slice(split..N).unwrap(), "{}", dec.name());
        }
    }
}

#[test]
fn bad_input_gives_typed_errors() {
    let p = problem(FeatureMap::EluPlusOne, 1.0);
    let spec = DecodeSpec::from_problem(&p).unwrap();
    let x = Inputs::random(p.shape, 1, false).unwrap();
    let dir = tempfile::tempdir().unwrap();
    for mut dec in decoders() {
        // Stepping before any state.
        let one = x.seq_slice(0..1).unwrap();
        assert!(matches!(dec.step(&one), Err(AttnError::State(_))));
        dec.reset(&spec).unwrap();
        // Two tokens to step, and a token of the wrong head dim.
        assert!(matches!(
            dec.step(&x.seq_slice(0..2).unwrap()),
            Err(AttnError::ShapeMismatch(_))
        ));
        let wrong = Inputs::random(Shape::new(2, 3, 1, 7, 5), 1, false).unwrap();
        assert!(matches!(dec.step(&wrong), Err(AttnError::ShapeMismatch(_))));
        // NaN in v.
        let mut nan = one.clone();
        nan.v.data_mut()[3] = f64::NAN;
        assert!(matches!(
            dec.step(&nan),
            Err(AttnError::NonFinite { tensor: "v", .. })
        ));
        // Prefill longer than the sequence.
        assert!(matches!(
            decode_sequence(dec.as_mut(), &spec, &x, N + 1, None),
            Err(AttnError::InvalidArgument(_))
        ));

        dec.prefill(&x.seq_slice(0..5).unwrap()).unwrap();
        let state = dec.export_state().unwrap();
        let path = dir.path().join("s.state");
        state.save(&path).unwrap();
        // A state of another map, and of another precision, is refused.
        let relu = DecodeSpec {
            map: FeatureMap::Relu,
            ..spec
        };
        let loaded = DecodeState::load(&path).unwrap();
        assert!(
            matches!(dec.import_state(&relu, &loaded), Err(AttnError::InvalidArgument(m)) if m.contains("map elu+1"))
        );
        let other = if dec.state_precision() == Precision::F32 {
            Precision::F64
        } else {
            Precision::F32
        };
        let relabelled = DecodeState {
            precision: other,
            ..loaded.clone()
        };
        assert!(matches!(
            dec.import_state(&spec, &relabelled),
            Err(AttnError::InvalidArgument(_))
        ));
        // A NaN in the state.
        let mut poisoned = loaded.clone();
        poisoned.z[2] = f64::NAN;
        assert!(matches!(
            dec.import_state(&spec, &poisoned),
            Err(AttnError::NonFinite {
                tensor: "state z",
                index: 2,
                ..
            })
        ));

        // Truncated file, trailing garbage, broken header.
        let bytes = std::fs::read(&path).unwrap();
        for (name, data) in [
            ("truncated", bytes[..bytes.len() - 3].to_vec()),
            ("longer", [bytes.as_slice(), &[0u8; 4]].concat()),
            ("no header", bytes[10..].to_vec()),
            ("empty", Vec::new()),
        ] {
            let bad = dir.path().join(name);
            std::fs::write(&bad, data).unwrap();
            let e = DecodeState::load(&bad).unwrap_err();
            assert!(matches!(e, AttnError::BadFile { .. }), "{name}: {e}");
        }
        // A header whose C disagrees with its map and D.
        let hdr_end = bytes.windows(4).position(|w| w == b"end\n").unwrap();
        let header = std::str::from_utf8(&bytes[..hdr_end])
            .unwrap()
            .replace("features=8", "features=9");
        let bad = dir.path().join("features");
        std::fs::write(&bad, [header.as_bytes(), &bytes[hdr_end..]].concat()).unwrap();
        assert!(
            matches!(DecodeState::load(&bad), Err(AttnError::BadFile { reason, .. }) if reason.contains("C = 9"))
        );
        assert!(matches!(
            DecodeState::load(&dir.path().join("absent")),
            Err(AttnError::Io(_))
        ));
    }
}

#[test]
fn non_causal_problems_have_no_decode_state() {
    let p = problem(FeatureMap::Relu, 1.0);
    let p = Problem {
        causality: Causality::NonCausal,
        ..p
    };
    assert!(matches!(
        DecodeSpec::from_problem(&p),
        Err(AttnError::InvalidArgument(_))
    ));
}
