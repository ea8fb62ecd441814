//! SPEC §7: every closed form of `S(a) = E|a|/√(E a²)` against the streamed Monte Carlo,
//! within 4 standard errors plus twice the estimated finite-n bias; the identity closed form
//! also against a quadrature written here; bad parameters give typed errors.

use linattn_core::{AttnError, FeatureMap};
use linattn_cpu::sparsity::{closed_form, estimate, RowParams, Weights};

const REPEATS: usize = 12;

fn row(beta: f64, gamma: f64, n: usize) -> RowParams {
    RowParams {
        beta,
        gamma,
        sigma: 1.0,
        dim: 8,
        n,
    }
}

fn check_against_mc(weights: Weights, params: RowParams) {
    let closed = closed_form(weights, &params).unwrap().unwrap();
    let mc = estimate(weights, &params, REPEATS, 7).unwrap();
    let tol = 4.0 * mc.se + 2.0 * mc.bias.abs() + 1e-12;
    assert!(mc.se > 0.0, "{weights:?} {params:?}: zero standard error");
    assert!(
        (mc.mean - closed).abs() <= tol,
        "{} {params:?}: mc {} ± {} (bias {}) vs closed {closed}",
        weights.label(),
        mc.mean,
        mc.se,
        mc.bias
    );
}

#[test]
fn softmax_matches_exp_minus_half_gamma_squared() {
    // The delta-method bias of a lognormal row is only trustworthy for n ≫ e^{4γ²}.
    for (beta, gamma) in [(0.0, 0.5), (1.0, 1.0), (-0.5, 0.8)] {
        check_against_mc(Weights::Softmax, row(beta, gamma, 1 << 14));
    }
}

#[test]
fn identity_matches_its_closed_form() {
    for (beta, gamma) in [(0.0, 1.0), (0.5, 1.0), (2.0, 0.7), (-1.0, 2.0)] {
        check_against_mc(
            Weights::Linear(FeatureMap::Identity),
            row(beta, gamma, 1 << 14),
        );
    }
}

#[test]
fn non_negative_maps_match_the_moment_closed_form() {
    for map in [
        FeatureMap::EluPlusOne,
        FeatureMap::Relu,
        FeatureMap::OnePlusCos,
    ] {
        for (beta, gamma) in [(0.0, 1.0), (1.0, 0.5), (-0.5, 2.0)] {
            check_against_mc(Weights::Linear(map), row(beta, gamma, 1 << 13));
        }
    }
}

#[test]
fn decay_stream_equals_the_finite_n_closed_form_and_goes_to_zero() {
    for lambda in [0.5, 0.9, 0.999, 1.0] {
        let mut last = f64::INFINITY;
        for n in [1, 10, 1000, 100_000] {
            let params = row(0.0, 1.0, n);
            let w = Weights::Decay { lambda };
            let closed = closed_form(w, &params).unwrap().unwrap();
            let mc = estimate(w, &params, 1, 0).unwrap();
            assert!(
                (mc.mean - closed).abs() <= 1e-10 * closed,
                "λ {lambda} n {n}: stream {} vs closed {closed}",
                mc.mean
            );
            assert!(closed <= last + 1e-15, "S must not grow with n");
            last = closed;
        }
        if lambda < 1.0 {
            assert!(last < 0.2, "λ {lambda}: S at n = 1e5 is {last}, not near 0");
        } else {
            assert_eq!(last, 1.0);
        }
    }
}

/// Composite Simpson of f over [a, b] with `m` (even) intervals.
fn simpson(f: impl Fn(f64) -> f64, a: f64, b: f64, m: usize) -> f64 {
    let h = (b - a) / m as f64;
    let inner: f64 = (1..m)
        .map(|i| f(a + i as f64 * h) * if i % 2 == 1 { 4.0 } else { 2.0 })
        .sum();
    (f(a) + inner + f(b)) * h / 3.0
}

#[test]
fn identity_closed_form_matches_quadrature() {
    for (beta, gamma) in [(0.0, 1.0), (0.3, 0.2), (-2.0, 1.5), (5.0, 0.5)] {
        let density = |x: f64| {
            (-(x - beta) * (x - beta) / (2.0 * gamma * gamma)).exp()
                / (gamma * (2.0 * std::f64::consts::PI).sqrt())
        };
        let (lo, hi) = (beta - 14.0 * gamma, beta + 14.0 * gamma);
        // Split at the kink of |x| so Simpson sees smooth pieces.
        let pieces: Vec<(f64, f64)> = if lo < 0.0 && hi > 0.0 {
            vec![(lo, 0.0), (0.0, hi)]
        } else {
            vec![(lo, hi)]
        };
        let moment = |g: &dyn Fn(f64) -> f64| -> f64 {
            pieces
                .iter()
                .map(|&(a, b)| simpson(|x| g(x) * density(x), a, b, 20_000))
                .sum()
        };
        let quad = moment(&|x: f64| x.abs()) / moment(&|x: f64| x * x).sqrt();
        let closed = closed_form(Weights::Linear(FeatureMap::Identity), &row(beta, gamma, 1))
            .unwrap()
            .unwrap();
        assert!(
            (quad - closed).abs() < 1e-9,
            "β {beta} γ {gamma}: quadrature {quad} vs closed {closed}"
        );
    }
}

#[test]
fn softmax_focuses_while_linear_maps_stay_bounded() {
    let s = |w: Weights, gamma: f64| closed_form(w, &row(0.5, gamma, 1)).unwrap().unwrap();
    assert!(s(Weights::Softmax, 4.0) < 1e-3);
    for map in [
        FeatureMap::Identity,
        FeatureMap::EluPlusOne,
        FeatureMap::Relu,
        FeatureMap::OnePlusCos,
    ] {
        for gamma in [0.5, 2.0, 8.0] {
            let v = s(Weights::Linear(map), gamma);
            assert!(v > 0.4 && v <= 1.0, "{map} γ {gamma}: S = {v}");
        }
    }
}

#[test]
fn bad_parameters_give_typed_errors() {
    let w = Weights::Softmax;
    let invalid = |r: Result<_, AttnError>, what: &str| match r {
        Err(AttnError::InvalidArgument(msg)) => assert!(msg.contains(what), "{msg}"),
        other => panic!("{what}: expected InvalidArgument, got {other:?}"),
    };
    invalid(estimate(w, &row(0.0, 0.0, 16), 4, 0).map(|_| ()), "γ");
    invalid(estimate(w, &row(0.0, -1.0, 16), 4, 0).map(|_| ()), "γ");
    invalid(closed_form(w, &row(f64::NAN, 1.0, 16)).map(|_| ()), "β");
    invalid(closed_form(w, &row(0.0, f64::NAN, 16)).map(|_| ()), "γ");
    invalid(estimate(w, &row(0.0, 1.0, 16), 1, 0).map(|_| ()), "repeats");
    assert_eq!(
        estimate(w, &row(0.0, 1.0, 0), 4, 0).unwrap_err(),
        AttnError::EmptyDim("n (row length)")
    );
    for lambda in [0.0, -0.5, 1.5, f64::NAN] {
        invalid(Weights::parse("decay", lambda).map(|_| ()), "λ");
        let w = Weights::Decay { lambda };
        invalid(closed_form(w, &row(0.0, 1.0, 16)).map(|_| ()), "λ");
    }
    assert!(matches!(
        Weights::parse("favor", 0.5),
        Err(AttnError::Unsupported(_))
    ));
    invalid(Weights::parse("gelu", 0.5).map(|_| ()), "gelu");
}
