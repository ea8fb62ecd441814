//! Which fp32 GEMM crate the CPU chunked and non-causal forms use: `gemm` (candle's engine)
//! against `matrixmultiply` (ndarray's), on the products those forms issue, one thread and
//! two. Throughput is in flops (2·m·k·n per product), so criterion's "elem/s" reads as
//! FLOP/s. Two threads: `gemm`'s own rayon parallelism; `matrixmultiply` with C's rows split
//! over `rayon::join` (it has no threading without an extra feature). Both use rayon's
//! global pool: run with `RAYON_NUM_THREADS=2` (the default on a 2-core machine).
//!
//! Shapes (row-major operands; `ᵀ` means the operand is a transposed view):
//! * `qk`: L×D · (L×D)ᵀ — the intra-chunk scores φ(Q_c)φ(K_c)ᵀ;
//! * `av`: L×L · L×M — scores times V_c;
//! * `kv`: (L×D)ᵀ · L×M — a chunk's state φ(K_c)ᵀV_c;
//! * `tall`: N×D · D×M, N = 16 384 — φ(Q)S of the non-causal form.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use gemm::Parallelism;
use std::hint::black_box;
use std::time::Duration;

/// One product `m×k · k×n` with strides for A and B.
#[derive(Clone, Copy)]
struct Case {
    m: usize,
    k: usize,
    n: usize,
    /// (row stride, col stride) of A and B.
    a: (usize, usize),
    b: (usize, usize),
}

fn mm(case: &Case, a: &[f32], b: &[f32], c: &mut [f32]) {
    // SAFETY: a, b, c are allocated for exactly these shapes and strides (see `run`).
    unsafe {
        matrixmultiply::sgemm(
            case.m,
            case.k,
            case.n,
            1.0,
            a.as_ptr(),
            case.a.0 as isize,
            case.a.1 as isize,
            b.as_ptr(),
            case.b.0 as isize,
            case.b.1 as isize,
            0.0,
            c.as_mut_ptr(),
            case.n as isize,
            1,
        )
    }
}

fn gemm_crate(case: &Case, a: &[f32], b: &[f32], c: &mut [f32], par: Parallelism) {
    // SAFETY: as in `mm`. gemm's dst = alpha·dst + beta·lhs·rhs; read_dst=false ignores dst.
    unsafe {
        gemm::gemm(
            case.m,
            case.n,
            case.k,
            c.as_mut_ptr(),
            1,
            case.n as isize,
            false,
            a.as_ptr(),
            case.a.1 as isize,
            case.a.0 as isize,
            b.as_ptr(),
            case.b.1 as isize,
            case.b.0 as isize,
            0.0,
            1.0,
            false,
            false,
            false,
            par,
        )
    }
}

/// `matrixmultiply` on two threads: C's rows in two halves.
fn mm_two(case: &Case, a: &[f32], b: &[f32], c: &mut [f32]) {
    let top = case.m / 2;
    let (c0, c1) = c.split_at_mut(top * case.n);
    let lower = Case {
        m: case.m - top,
        ..*case
    };
    let upper = Case { m: top, ..*case };
    rayon::join(
        || mm(&upper, a, b, c0),
        || mm(&lower, &a[top * case.a.0..], b, c1),
    );
}

fn cases() -> Vec<(String, Case)> {
    let mut out = Vec::new();
    for l in [32usize, 64, 128] {
        for d in [64usize, 128] {
            let m = d;
            out.push((
                format!("qk/L{l}_D{d}"),
                Case {
                    m: l,
                    k: d,
                    n: l,
                    a: (d, 1),
                    b: (1, d),
                },
            ));
            out.push((
                format!("av/L{l}_M{m}"),
                Case {
                    m: l,
                    k: l,
                    n: m,
                    a: (l, 1),
                    b: (m, 1),
                },
            ));
            out.push((
                format!("kv/L{l}_D{d}"),
                Case {
                    m: d,
                    k: l,
                    n: m,
                    a: (1, d),
                    b: (m, 1),
                },
            ));
        }
    }
    out.push((
        "tall/N16384_D64_M64".into(),
        Case {
            m: 16384,
            k: 64,
            n: 64,
            a: (64, 1),
            b: (64, 1),
        },
    ));
    out
}

fn bench_engines(c: &mut Criterion) {
    for (name, case) in cases() {
        let a: Vec<f32> = (0..case.m * case.k)
            .map(|i| (i % 13) as f32 * 0.1)
            .collect();
        let b: Vec<f32> = (0..case.k * case.n).map(|i| (i % 7) as f32 * 0.1).collect();
        let mut out = vec![0f32; case.m * case.n];
        let mut group = c.benchmark_group(format!("gemm_engines/{name}"));
        group
            .sample_size(10)
            .warm_up_time(Duration::from_millis(100))
            .measurement_time(Duration::from_millis(400))
            .throughput(Throughput::Elements((2 * case.m * case.k * case.n) as u64));
        type Engine = fn(&Case, &[f32], &[f32], &mut [f32]);
        let engines: [(&str, &str, Engine); 4] = [
            ("matrixmultiply", "1t", mm),
            ("gemm", "1t", |c, a, b, o| {
                gemm_crate(c, a, b, o, Parallelism::None)
            }),
            ("matrixmultiply", "2t", mm_two),
            ("gemm", "2t", |c, a, b, o| {
                gemm_crate(c, a, b, o, Parallelism::Rayon(2))
            }),
        ];
        for (engine, threads, run) in engines {
            group.bench_function(BenchmarkId::new(engine, threads), |bch| {
                bch.iter(|| run(&case, black_box(&a), black_box(&b), &mut out))
            });
        }
        group.finish();
    }
}

criterion_group!(benches, bench_engines);
criterion_main!(benches);
