//! One test body per platform (`cuda`, `sim`), as runner-visible trials.
//!
//! Each platform test is a plain `fn(Platform)` that panics on failure;
//! `platform_trials![a, b]` stamps it for every platform as `a::cuda`, `a::sim`, … through
//! `linattn_testkit::stamp`: a platform that cannot run here is reported by the runner as
//! ignored, with its reason, never as passed.

use linattn_core::{Backend, Causality, Shape, Unsupported};
use linattn_cuda::Platform;
use linattn_softmax::cuda::f32_backend;

/// Why `platform` cannot run the softmax backends on this machine (a GPU, cuBLAS, NVRTC), or
/// `None` when it can. Panics on anything but "unavailable": a probe problem is always valid.
pub fn skip_reason(platform: Platform) -> Option<String> {
    let probe = super::problem(Shape::new(1, 1, 4, 4, 4), Causality::Causal);
    match f32_backend(platform).supports(&probe) {
        Ok(()) => None,
        Err(Unsupported::Unavailable(reason)) => Some(reason),
        Err(other) => panic!("{platform}: the probe problem was refused: {other}"),
    }
}

/// `platform_trials![a, b]` → the trials `a::cuda`, `a::sim`, `b::cuda`, `b::sim`.
#[macro_export]
macro_rules! platform_trials {
    ($($body:ident),* $(,)?) => {{
        let mut trials = Vec::new();
        $(
            for platform in linattn_cuda::Platform::ALL {
                trials.push(linattn_testkit::stamp(
                    platform,
                    format!("{}::{platform}", stringify!($body)),
                    Box::new(move || {
                        $body(platform);
                        Ok(())
                    }),
                ));
            }
        )*
        trials
    }};
}
