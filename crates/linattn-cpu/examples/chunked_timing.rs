//! Median of 5 timings of the CPU f32 forms at B=1 H=8 D=M=64 elu+1, beside the machine's
//! GEMM rate: how the chunk length (`LINATTN_CPU_CHUNK`) and the non-causal block length
//! (`LINATTN_CPU_BLOCK`) were chosen.
//!
//! `cargo run --release -p linattn-cpu --example chunked_timing -- [N] [backward]`;
//! `ONLY=<substring>` keeps the rows whose name contains it; `REPS=<k>` takes k samples (5);
//! `DIM=<d>` sets D = M = d.

use linattn_core::{Causality, FeatureMap, Inputs, Problem, Shape};
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).map(|s| s.parse()).transpose()?.unwrap_or(16384);
    let with_backward = args.get(2).is_some_and(|a| a == "backward");
    // `DIM=<d>`: D = M = d (64).
    let dim: usize = std::env::var("DIM")
        .ok()
        .and_then(|r| r.parse().ok())
        .filter(|&r| r > 0)
        .unwrap_or(64);
    let shape = Shape::new(1, 8, n, dim, dim);
    let p = Problem::new(shape, Causality::Causal, FeatureMap::EluPlusOne);
    let pn = Problem::new(shape, Causality::NonCausal, FeatureMap::EluPlusOne);
    let x = Inputs::random(shape, 7, true)?;
    let (q, k, v) = (x.q.to_f32(), x.k.to_f32(), x.v.to_f32());
    let g = x.d_out.as_ref().map(|t| t.to_f32()).unwrap_or_default();
    let rate = linattn_cpu::gemm::measure_f32_rate();
    println!(
        "gemm rate {:.1} GFLOP/s (spread {:.2})",
        rate.gflops, rate.spread
    );
    let only = std::env::var("ONLY").unwrap_or_default();
    // More samples (e.g. under `perf record`, so the input generation is a small share).
    let reps: usize = std::env::var("REPS")
        .ok()
        .and_then(|r| r.parse().ok())
        .filter(|&r| r > 0)
        .unwrap_or(5);
    let time = |name: &str, f: &dyn Fn()| {
        if !name.contains(&only) {
            return;
        }
        f();
        let mut ms: Vec<f64> = (0..reps)
            .map(|_| {
                let start = Instant::now();
                f();
                start.elapsed().as_secs_f64() * 1e3
            })
            .collect();
        ms.sort_by(f64::total_cmp);
        println!(
            "{name:24} median {:8.2} ms  min {:8.2} ms",
            ms[reps / 2],
            ms[0]
        );
    };
    use linattn_cpu::{chunked, fast};
    // One output buffer reused across runs, as `FastBackend` does.
    let out = std::cell::RefCell::new(vec![0f32; v.len()]);
    let o = || out.borrow_mut();
    time("recurrent fwd", &|| {
        fast::forward_into(&p, &q, &k, &v, &mut o()).unwrap()
    });
    time("chunked fwd", &|| {
        chunked::forward_into(&p, &q, &k, &v, &mut o()).unwrap()
    });
    time("noncausal-loops fwd", &|| {
        fast::forward_into(&pn, &q, &k, &v, &mut o()).unwrap()
    });
    time("noncausal-gemm fwd", &|| {
        chunked::noncausal_forward_into(&pn, &q, &k, &v, &mut o()).unwrap()
    });
    if with_backward {
        // Gradient buffers reused too, as `FastBackend` does.
        let grads = std::cell::RefCell::new(fast::GradsF32::zeros(q.len(), v.len()));
        let gr = || grads.borrow_mut();
        time("recurrent bwd", &|| {
            fast::backward_into(&p, &q, &k, &v, &g, &mut o(), &mut gr()).unwrap()
        });
        time("chunked bwd", &|| {
            chunked::backward_into(&p, &q, &k, &v, &g, &mut o(), &mut gr()).unwrap()
        });
        // Given the forward's O (as `FastBackend` runs it after its forward).
        let o_c = chunked::forward(&p, &q, &k, &v)?;
        let o_n = chunked::noncausal_forward(&pn, &q, &k, &v)?;
        time("chunked bwd given O", &|| {
            chunked::backward_from_output_into(&p, &q, &k, &v, &g, &o_c, &mut gr()).unwrap()
        });
        time("noncausal-gemm bwd given O", &|| {
            chunked::noncausal_backward_from_output_into(&pn, &q, &k, &v, &g, &o_n, &mut gr())
                .unwrap()
        });
        time("noncausal-gemm bwd", &|| {
            chunked::noncausal_backward_into(&pn, &q, &k, &v, &g, &mut o(), &mut gr()).unwrap()
        });
    }
    Ok(())
}
