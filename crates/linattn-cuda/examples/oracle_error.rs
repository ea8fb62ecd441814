//! Error of one CUDA backend (on the simulator or a GPU) against the f64 oracle, per tensor,
//! with the simulator's instruction count: the quick loop for kernel numerics work.
//!
//! ```text
//! cargo run --release -p linattn-cuda --example oracle_error -- <backend> <N> \
//!     [elu|relu|identity] [leading-negative-key-rows] [disjoint]
//! cargo run --release -p linattn-cuda --example oracle_error -- sim/causal_chunked/f16 16384
//! ```
//! B = H = 1, D = M = 64, causal unless the backend is non-causal; inputs rounded to the
//! backend's storage precision. `leading-negative-key-rows` = k makes the first k key rows
//! all negative (relu: den = ε for the first queries); `disjoint` (relu) makes keys 0..100
//! negative in dims 32..64 and queries 70..90 negative in dims 0..32, so den = ε for those
//! queries although q̃ ≠ 0, past the first chunk.

use std::process::ExitCode;

use linattn_core::{
    AttnError, Causality, ErrorMetrics, FeatureMap, Inputs, Precision, Problem, Shape, Tensor,
};

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

fn arg(k: usize) -> Option<String> {
    std::env::args().nth(k)
}

fn run() -> Result<(), AttnError> {
    let usage = || {
        AttnError::InvalidArgument(
            "usage: oracle_error <backend> <N> [elu|relu|identity] [negative key rows] [disjoint]"
                .into(),
        )
    };
    let name = arg(1).ok_or_else(usage)?;
    let n: usize = arg(2).and_then(|s| s.parse().ok()).ok_or_else(usage)?;
    let map = match arg(3).as_deref() {
        None | Some("elu") | Some("elu+1") => FeatureMap::EluPlusOne,
        Some("relu") => FeatureMap::Relu,
        Some("identity") => FeatureMap::Identity,
        Some(other) => return Err(AttnError::InvalidArgument(format!("unknown map {other}"))),
    };
    let negative_rows: usize = arg(4).map_or(Ok(0), |s| s.parse().map_err(|_| usage()))?;
    let disjoint = arg(5).as_deref() == Some("disjoint");

    let mut backend = linattn_cuda::backends()
        .into_iter()
        .find(|b| b.name() == name)
        .ok_or_else(|| AttnError::InvalidArgument(format!("no CUDA backend named {name}")))?;
    let causality = if name.contains("/noncausal/") {
        Causality::NonCausal
    } else {
        Causality::Causal
    };
    let (d, m) = (64, 64);
    let shape = Shape::new(1, 1, n, d, m);
    let problem = Problem::new(shape, causality, map);
    let mut inputs = Inputs::random(shape, 7, true)?;
    let negative = |x: f64| -x.abs() - 0.1;
    let mut q = inputs.q.data().to_vec();
    let mut k = inputs.k.data().to_vec();
    for t in 0..negative_rows.min(n) {
        k[t * d..(t + 1) * d]
            .iter_mut()
            .for_each(|x| *x = negative(*x));
    }
    if disjoint {
        for t in 0..n.min(100) {
            k[t * d + d / 2..(t + 1) * d]
                .iter_mut()
                .for_each(|x| *x = negative(*x));
        }
        for t in 70.min(n)..n.min(90) {
            q[t * d..t * d + d / 2]
                .iter_mut()
                .for_each(|x| *x = negative(*x));
        }
    }
    inputs.q = Tensor::from_vec(shape.qk_dims(), q)?;
    inputs.k = Tensor::from_vec(shape.qk_dims(), k)?;
    let inputs = match backend.info().precision {
        Precision::F16 => inputs.rounded(|x| half::f16::from_f64(x).to_f64()),
        Precision::BF16 => inputs.rounded(|x| half::bf16::from_f64(x).to_f64()),
        _ => inputs,
    };

    let started = std::time::Instant::now();
    let (out, grads) = backend.forward_backward(&problem, &inputs)?;
    println!("{name} {problem}: ran in {:.2?}", started.elapsed());
    if let Some(sim) = linattn_cuda::executor::sim::started() {
        let c = sim.counters();
        println!(
            "simulated {} warp instructions ({} thread instructions)",
            c.warp_instructions, c.thread_instructions
        );
    }
    let (want_out, want) = linattn_cpu::oracle::backward(&problem, &inputs)?;
    for (what, got, reference) in [
        ("O", &out, &want_out),
        ("dQ", &grads.dq, &want.dq),
        ("dK", &grads.dk, &want.dk),
        ("dV", &grads.dv, &want.dv),
    ] {
        let e = ErrorMetrics::compare(reference.data(), got.data());
        println!(
            "{what}: rms ratio {:.3e}  max abs {:.3e}  non-finite {}",
            e.rms_ratio, e.max_abs, e.non_finite
        );
    }
    Ok(())
}
