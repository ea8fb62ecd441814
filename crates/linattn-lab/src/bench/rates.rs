//! Derived rates: FLOPs and minimal bytes of a run, and how time grows with N.

use crate::results::Mode;
use linattn_core::{Algorithm, Form, Precision, Problem, Shape};

/// Floating-point operations of one run (see the module docs for the convention).
pub(crate) fn flops(problem: &Problem, algorithm: Algorithm, mode: Mode) -> f64 {
    let forward = match algorithm {
        Algorithm::Softmax => problem.softmax_forward_flops(),
        Algorithm::Linear(_) => problem.linear_forward_flops(),
    };
    match mode {
        Mode::Forward => forward,
        Mode::ForwardBackward => 3.0 * forward,
    }
}

/// Minimal bytes moved by one run at `precision` storage.
pub(crate) fn minimal_bytes(shape: &Shape, precision: Precision, mode: Mode) -> f64 {
    let rows = (shape.bh() * shape.seq) as f64;
    let (d, m) = (shape.dk as f64, shape.dv as f64);
    let forward = rows * (2.0 * d + m) + rows * m;
    let backward = rows * (2.0 * d + 2.0 * m) + rows * (2.0 * d + m);
    let elements = match mode {
        Mode::Forward => forward,
        Mode::ForwardBackward => forward + backward,
    };
    elements * precision.bytes() as f64
}

/// Exponent of N in a backend's time: 2 for anything materialising N×N.
pub(super) fn time_exponent(algorithm: Algorithm) -> i32 {
    match algorithm {
        Algorithm::Softmax | Algorithm::Linear(Form::Quadratic) => 2,
        Algorithm::Linear(_) => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use linattn_core::{Causality, FeatureMap};

    #[test]
    fn derived_rate_conventions() {
        let shape = Shape::new(2, 3, 128, 16, 8);
        let p = Problem::new(shape, Causality::Causal, FeatureMap::Relu);
        let fwd = flops(&p, Algorithm::Linear(Form::Cumsum), Mode::Forward);
        assert_eq!(fwd, p.linear_forward_flops());
        assert_eq!(
            flops(&p, Algorithm::Linear(Form::Cumsum), Mode::ForwardBackward),
            3.0 * fwd
        );
        assert_eq!(
            flops(&p, Algorithm::Softmax, Mode::Forward),
            p.softmax_forward_flops()
        );
        let rows = 2.0 * 3.0 * 128.0;
        // forward: q, k (16 each), v (8) read; o (8) written; f16 = 2 bytes
        assert_eq!(
            minimal_bytes(&shape, Precision::F16, Mode::Forward),
            rows * (16.0 + 16.0 + 8.0 + 8.0) * 2.0
        );
        // backward adds q, k, v, dO read and dq, dk, dv written
        assert_eq!(
            minimal_bytes(&shape, Precision::F32, Mode::ForwardBackward),
            rows * ((40.0 + 8.0) + (16.0 + 16.0 + 8.0 + 8.0) + (16.0 + 16.0 + 8.0)) * 4.0
        );
    }
}
