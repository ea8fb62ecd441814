//! A CPU model of the numerics of `cuda/softmax/f16`, which cannot run without a GPU: every
//! value the GPU path stores (GEMM outputs, the N×N scores, probabilities and dS) is rounded to
//! f16, every sum and the softmax are fp32, exactly where the CUDA path rounds. The test shows
//! that this storage scheme meets the f16 tolerance against the oracle; it does not exercise
//! the kernel itself (see tests/cuda_backend.rs for that, on a GPU).

mod common;

use common::{assert_close, inputs, problem, BOTH};
use half::f16;
use linattn_core::{Inputs, Precision, Shape, Tensor};
use linattn_softmax::oracle;

fn round(x: f32) -> f32 {
    f16::from_f32(x).to_f32()
}

/// Row-major `[r×c]` from a closure, each entry an fp32 sum rounded to f16 (one GEMM).
fn gemm(rows: usize, cols: usize, entry: impl Fn(usize, usize) -> f32) -> Vec<f32> {
    let mut out = vec![0.0; rows * cols];
    for i in 0..rows {
        for j in 0..cols {
            out[i * cols + j] = round(entry(i, j));
        }
    }
    out
}

fn model(shape: Shape, causal: bool, x: &Inputs) -> (Tensor, [Tensor; 3]) {
    let (n, d, m) = (shape.seq, shape.dk, shape.dv);
    let scale = (1.0 / (d as f64).sqrt()) as f32;
    let store = |t: &Tensor| -> Vec<f32> { t.data().iter().map(|&a| round(a as f32)).collect() };
    let mut results: Vec<Vec<f64>> = vec![Vec::new(); 4];
    for bh in 0..shape.bh() {
        let head = |t: &Tensor| store(t)[bh * t.head(0).len()..(bh + 1) * t.head(0).len()].to_vec();
        let (q, k, v) = (head(&x.q), head(&x.k), head(&x.v));
        let g = head(x.d_out.as_ref().unwrap());
        let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
        // Forward: S = QKᵀ (f16), P = softmax(scale·S) in fp32 (f16), O = PV (f16).
        let scores = gemm(n, n, |i, j| {
            dot(&q[i * d..(i + 1) * d], &k[j * d..(j + 1) * d])
        });
        let mut p = vec![0f32; n * n];
        for i in 0..n {
            let visible = if causal { i + 1 } else { n };
            let row = &scores[i * n..i * n + visible];
            let max = row
                .iter()
                .map(|s| scale * s)
                .fold(f32::NEG_INFINITY, f32::max);
            let sum: f32 = row.iter().map(|s| (scale * s - max).exp()).sum();
            for j in 0..visible {
                p[i * n + j] = round((scale * row[j] - max).exp() / sum);
            }
        }
        let o = gemm(n, m, |i, c| {
            (0..n).map(|j| p[i * n + j] * v[j * m + c]).sum()
        });
        // Backward: dV = PᵀdO, dP = dO Vᵀ, dS = scale·P(dP − Σ P dP), dQ = dS K, dK = dSᵀQ.
        let dv = gemm(n, m, |j, c| {
            (0..n).map(|i| p[i * n + j] * g[i * m + c]).sum()
        });
        let dp = gemm(n, n, |i, j| {
            dot(&g[i * m..(i + 1) * m], &v[j * m..(j + 1) * m])
        });
        let mut ds = vec![0f32; n * n];
        for i in 0..n {
            let visible = if causal { i + 1 } else { n };
            let delta: f32 = (0..visible).map(|j| p[i * n + j] * dp[i * n + j]).sum();
            for j in 0..visible {
                ds[i * n + j] = round(scale * p[i * n + j] * (dp[i * n + j] - delta));
            }
        }
        let dq = gemm(n, d, |i, c| {
            (0..n).map(|j| ds[i * n + j] * k[j * d + c]).sum()
        });
        let dk = gemm(n, d, |j, c| {
            (0..n).map(|i| ds[i * n + j] * q[i * d + c]).sum()
        });
        for (all, part) in results.iter_mut().zip([o, dq, dk, dv]) {
            all.extend(part.iter().map(|&a| f64::from(a)));
        }
    }
    let [o, dq, dk, dv]: [Vec<f64>; 4] = results.try_into().unwrap();
    (
        Tensor::from_vec(shape.v_dims(), o).unwrap(),
        [
            Tensor::from_vec(shape.qk_dims(), dq).unwrap(),
            Tensor::from_vec(shape.qk_dims(), dk).unwrap(),
            Tensor::from_vec(shape.v_dims(), dv).unwrap(),
        ],
    )
}

#[test]
fn f16_storage_scheme_meets_the_f16_tolerance() {
    let tol = Precision::F16.rms_tolerance();
    for shape in [Shape::new(2, 3, 37, 16, 24), Shape::new(1, 2, 300, 64, 32)] {
        let x = inputs(shape, 70 + shape.seq as u64).rounded(|a| f16::from_f64(a).to_f64());
        for causality in BOTH {
            let (out, [dq, dk, dv]) = model(shape, causality.is_causal(), &x);
            let (want_out, want) = oracle::backward(&problem(shape, causality), &x).unwrap();
            let case = format!("{shape} {causality}");
            for (what, reference, got) in [
                ("O", &want_out, &out),
                ("dQ", &want.dq, &dq),
                ("dK", &want.dk, &dk),
                ("dV", &want.dv, &dv),
            ] {
                let m = linattn_core::ErrorMetrics::compare(reference.data(), got.data());
                println!("{what} {case}: rms ratio {:.2e}", m.rms_ratio);
                assert_close(&format!("{what} {case}"), reference, got, tol);
            }
        }
    }
}
