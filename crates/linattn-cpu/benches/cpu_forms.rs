//! Criterion benches of the fast f32 path: causal and non-causal, forward and
//! forward+backward, B=1 H=8 D=M=64 (elu+1), N ∈ {1024, 4096, 16384}. Small sample sizes so
//! the whole run takes a few minutes on two cores.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use linattn_core::{Causality, FeatureMap, Inputs, Problem, Shape};
use linattn_cpu::fast;
use std::hint::black_box;
use std::time::Duration;

fn bench_fast(c: &mut Criterion) {
    for causality in [Causality::Causal, Causality::NonCausal] {
        for with_backward in [false, true] {
            let name = format!(
                "cpu_f32/{}/{}",
                if causality.is_causal() {
                    "causal_recurrent"
                } else {
                    "noncausal"
                },
                if with_backward { "fwd+bwd" } else { "fwd" }
            );
            let mut group = c.benchmark_group(name);
            group
                .sample_size(10)
                .warm_up_time(Duration::from_millis(300))
                .measurement_time(Duration::from_secs(2));
            for n in [1024usize, 4096, 16384] {
                let problem = Problem::new(
                    Shape::new(1, 8, n, 64, 64),
                    causality,
                    FeatureMap::EluPlusOne,
                );
                let x = Inputs::random(problem.shape, 7, true).expect("valid bench shape");
                let (q, k, v) = (x.q.to_f32(), x.k.to_f32(), x.v.to_f32());
                let g = x.d_out.as_ref().map(|t| t.to_f32()).unwrap_or_default();
                // Forward flops (Problem::linear_forward_flops); the backward costs about 2×.
                let flops = problem.linear_forward_flops() * if with_backward { 3.0 } else { 1.0 };
                group.throughput(Throughput::Elements(flops as u64));
                group.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, _| {
                    b.iter(|| {
                        let o = fast::forward(&problem, &q, &k, &v).expect("forward");
                        if with_backward {
                            black_box(fast::backward(&problem, &q, &k, &v, &g).expect("backward"));
                        }
                        black_box(o)
                    })
                });
            }
            group.finish();
        }
    }
}

criterion_group!(benches, bench_fast);
criterion_main!(benches);
