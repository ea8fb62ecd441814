//! Times the fast f32 path: median of several runs, and GFLOP/s by
//! `Problem::linear_forward_flops`.
//!
//! `cargo run --release -p linattn-cpu --example fast_forward_timing -- [N] [runs] [causal|non-causal] [fwd|fwdbwd]`
//! (defaults: N = 16384, 5 runs, causal, fwd; B = 1, H = 8, D = M = 64, elu+1).

use linattn_core::{Causality, FeatureMap, Inputs, Problem, Shape};
use linattn_cpu::fast;
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n: usize = args.first().map_or(Ok(16384), |a| a.parse())?;
    let runs: usize = args.get(1).map_or(Ok(5), |a| a.parse())?;
    let causality: Causality = args.get(2).map_or(Ok(Causality::Causal), |a| a.parse())?;
    let with_backward = args.get(3).is_some_and(|a| a == "fwdbwd");
    let map: FeatureMap = args
        .get(4)
        .map_or(Ok(FeatureMap::EluPlusOne), |a| a.parse())?;
    let problem = Problem::new(Shape::new(1, 8, n, 64, 64), causality, map);
    let x = Inputs::random(problem.shape, 1, true)?;
    let (q, k, v) = (x.q.to_f32(), x.k.to_f32(), x.v.to_f32());
    let g = x.d_out.as_ref().map(|t| t.to_f32()).unwrap_or_default();
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs.max(1) {
        let start = Instant::now();
        let o = if with_backward {
            fast::forward(&problem, &q, &k, &v)?;
            fast::backward(&problem, &q, &k, &v, &g)?.0
        } else {
            fast::forward(&problem, &q, &k, &v)?
        };
        times.push(start.elapsed().as_secs_f64());
        std::hint::black_box(o);
    }
    times.sort_by(f64::total_cmp);
    let median = times[times.len() / 2];
    let flops = problem.linear_forward_flops();
    println!(
        "{problem} {}: median {:.2} ms over {} runs (min {:.2} ms), {:.1} GFLOP/s (forward flops {:.3e}; threads {})",
        if with_backward { "fwd+bwd" } else { "fwd" },
        median * 1e3,
        times.len(),
        times[0] * 1e3,
        flops / median / 1e9,
        flops,
        rayon::current_num_threads()
    );
    Ok(())
}
