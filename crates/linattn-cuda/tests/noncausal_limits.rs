//! Problems the non-causal kernels cannot launch are refused up front by `supports`, naming
//! the limit: B·H runs on grid.z, which CUDA caps at 65535 (it used to be accepted and fail
//! at launch).

use linattn_core::{Causality, FeatureMap, Problem, Shape, Unsupported};
use linattn_cuda::{noncausal, Platform};

#[test]
fn more_than_65535_heads_are_refused_by_supports() {
    for platform in Platform::ALL {
        for backend in noncausal::backends(platform) {
            let info = backend.info().clone();
            let at_limit = Problem::new(
                Shape::new(1, 65_535, 4, 16, 16),
                Causality::NonCausal,
                FeatureMap::EluPlusOne,
            );
            assert_eq!(noncausal::check_problem(&info, &at_limit), Ok(()));
            let over = Problem::new(
                Shape::new(2, 32_768, 4, 16, 16),
                Causality::NonCausal,
                FeatureMap::EluPlusOne,
            );
            match noncausal::check_problem(&info, &over) {
                Err(Unsupported::Problem(m)) => assert!(m.contains("65535"), "{m}"),
                other => panic!("{}: expected a refusal, got {other:?}", backend.name()),
            }
            assert!(backend.supports(&over).is_err());
        }
    }
}
