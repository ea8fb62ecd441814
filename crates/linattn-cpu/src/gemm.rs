//! fp32 GEMM for the chunked and non-causal forms, and the machine's GEMM rate.
//!
//! The engine is `matrixmultiply` (ndarray's) rather than `gemm` (candle's). In
//! `benches/gemm_engines.rs` (bench-results/gemm-engines/criterion.log) neither wins the
//! forms' small products single-threaded: `matrixmultiply` is ahead on C×L·L×M with a
//! transposed operand (the chunk states, e.g. 32.3 vs 26.9 GFLOP/s at L=64, D=M=64),
//! `gemm` on L×L·L×M (54.9 vs 42.1) and on the tall N×D·D×M (33.0 vs 18.8); the forms
//! parallelise across heads and chunk groups themselves, so the engines' own threading
//! is not used. End to end (bench-results/gemm-engines/end_to_end.txt, three interleaved
//! rounds) the chunked forward took 280/292/266 ms with `matrixmultiply` against
//! 361/234/327 ms with `gemm`: a tie within the shared machine's noise, and
//! `matrixmultiply` is the smaller dependency (no dyn-stack, no rayon of its own) with a
//! plain `C ← αAB + βC` interface. [`MatRef`] carries strides, so transposes are views.

use std::time::Instant;

/// A read-only strided view of an `rows × cols` f32 matrix.
#[derive(Clone, Copy)]
pub struct MatRef<'a> {
    data: &'a [f32],
    rows: usize,
    cols: usize,
    row_stride: usize,
    col_stride: usize,
}

impl<'a> MatRef<'a> {
    /// Row-major with leading dimension `ld ≥ cols`.
    ///
    /// # Panics
    /// If `data` is too short for the view (a bug in the caller, not bad user input).
    pub fn row_major(data: &'a [f32], rows: usize, cols: usize, ld: usize) -> Self {
        let view = MatRef {
            data,
            rows,
            cols,
            row_stride: ld,
            col_stride: 1,
        };
        assert!(
            ld >= cols && view.fits(),
            "row-major view exceeds its slice"
        );
        view
    }

    /// The transpose, as a view.
    pub fn t(self) -> Self {
        MatRef {
            rows: self.cols,
            cols: self.rows,
            row_stride: self.col_stride,
            col_stride: self.row_stride,
            ..self
        }
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn cols(&self) -> usize {
        self.cols
    }

    fn fits(&self) -> bool {
        self.rows == 0
            || self.cols == 0
            || (self.rows - 1) * self.row_stride + (self.cols - 1) * self.col_stride
                < self.data.len()
    }
}

/// `C ← α·A·B + β·C` with C row-major `a.rows() × b.cols()`, leading dimension `ldc`.
/// β = 0 overwrites C (NaN in C does not propagate).
///
/// # Panics
/// On mismatched inner dimensions or a `c` too short (bugs in the caller).
pub fn sgemm(alpha: f32, a: MatRef, b: MatRef, beta: f32, c: &mut [f32], ldc: usize) {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    assert_eq!(k, b.rows, "inner dimensions differ");
    assert!(ldc >= n && (m == 0 || n == 0 || (m - 1) * ldc + n <= c.len()));
    if m == 0 || n == 0 {
        return;
    }
    // SAFETY: every element the views and C address lies inside their slices (checked by
    // MatRef's constructor and the assert above); C does not alias A or B (&mut).
    unsafe {
        matrixmultiply::sgemm(
            m,
            k,
            n,
            alpha,
            a.data.as_ptr(),
            a.row_stride as isize,
            a.col_stride as isize,
            b.data.as_ptr(),
            b.row_stride as isize,
            b.col_stride as isize,
            beta,
            c.as_mut_ptr(),
            ldc as isize,
            1,
        )
    }
}

/// `dst` (`cols × rows`, leading dimension `ld_dst`) ← `srcᵀ` for `src` `rows × cols`
/// (leading dimension `ld_src`).
///
/// Why: `matrixmultiply` packs a left operand with plain copies only when it is
/// column-major and a right operand only when it is row-major; otherwise it gathers
/// element by element. A chunk operand that several products contract over its columns is
/// transposed once here instead, in 8×8 register blocks, and handed to them as a view.
///
/// # Panics
/// If either slice is too short for its view (a bug in the caller).
pub fn transpose_into(
    src: &[f32],
    rows: usize,
    cols: usize,
    ld_src: usize,
    dst: &mut [f32],
    ld_dst: usize,
) {
    if rows == 0 || cols == 0 {
        return;
    }
    assert!(
        ld_src >= cols
            && ld_dst >= rows
            && (rows - 1) * ld_src + cols <= src.len()
            && (cols - 1) * ld_dst + rows <= dst.len(),
        "transpose views exceed their slices"
    );
    let (rb, cb) = (rows / 8 * 8, cols / 8 * 8);
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx") {
        // SAFETY: the CPU has avx (checked); every 8×8 block lies inside both views, whose
        // extents were checked against the slices above.
        unsafe { transpose_blocks_avx(src, rb, cb, ld_src, dst, ld_dst) };
    } else {
        transpose_scalar(src, 0..rb, 0..cb, ld_src, dst, ld_dst);
    }
    #[cfg(not(target_arch = "x86_64"))]
    transpose_scalar(src, 0..rb, 0..cb, ld_src, dst, ld_dst);
    // The ragged edges: the last rows % 8 rows, and the last cols % 8 columns of the rest.
    transpose_scalar(src, rb..rows, 0..cols, ld_src, dst, ld_dst);
    transpose_scalar(src, 0..rb, cb..cols, ld_src, dst, ld_dst);
}

fn transpose_scalar(
    src: &[f32],
    rows: std::ops::Range<usize>,
    cols: std::ops::Range<usize>,
    ld_src: usize,
    dst: &mut [f32],
    ld_dst: usize,
) {
    for i in rows {
        for j in cols.clone() {
            dst[j * ld_dst + i] = src[i * ld_src + j];
        }
    }
}

/// The 8×8 blocks of [`transpose_into`] over rows `0..rb`, columns `0..cb` (multiples of 8).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn transpose_blocks_avx(
    src: &[f32],
    rb: usize,
    cb: usize,
    ld_src: usize,
    dst: &mut [f32],
    ld_dst: usize,
) {
    use std::arch::x86_64::*;
    let (sp, dp) = (src.as_ptr(), dst.as_mut_ptr());
    for i0 in (0..rb).step_by(8) {
        for j0 in (0..cb).step_by(8) {
            let r: [__m256; 8] =
                std::array::from_fn(|i| _mm256_loadu_ps(sp.add((i0 + i) * ld_src + j0)));
            // Interleave pairs of rows, then pairs of pairs, then swap 128-bit halves.
            let t = [
                _mm256_unpacklo_ps(r[0], r[1]),
                _mm256_unpackhi_ps(r[0], r[1]),
                _mm256_unpacklo_ps(r[2], r[3]),
                _mm256_unpackhi_ps(r[2], r[3]),
                _mm256_unpacklo_ps(r[4], r[5]),
                _mm256_unpackhi_ps(r[4], r[5]),
                _mm256_unpacklo_ps(r[6], r[7]),
                _mm256_unpackhi_ps(r[6], r[7]),
            ];
            let u = [
                _mm256_shuffle_ps::<0x44>(t[0], t[2]),
                _mm256_shuffle_ps::<0xEE>(t[0], t[2]),
                _mm256_shuffle_ps::<0x44>(t[1], t[3]),
                _mm256_shuffle_ps::<0xEE>(t[1], t[3]),
                _mm256_shuffle_ps::<0x44>(t[4], t[6]),
                _mm256_shuffle_ps::<0xEE>(t[4], t[6]),
                _mm256_shuffle_ps::<0x44>(t[5], t[7]),
                _mm256_shuffle_ps::<0xEE>(t[5], t[7]),
            ];
            let out = [
                _mm256_permute2f128_ps::<0x20>(u[0], u[4]),
                _mm256_permute2f128_ps::<0x20>(u[1], u[5]),
                _mm256_permute2f128_ps::<0x20>(u[2], u[6]),
                _mm256_permute2f128_ps::<0x20>(u[3], u[7]),
                _mm256_permute2f128_ps::<0x31>(u[0], u[4]),
                _mm256_permute2f128_ps::<0x31>(u[1], u[5]),
                _mm256_permute2f128_ps::<0x31>(u[2], u[6]),
                _mm256_permute2f128_ps::<0x31>(u[3], u[7]),
            ];
            for (j, v) in out.iter().enumerate() {
                _mm256_storeu_ps(dp.add((j0 + j) * ld_dst + i0), *v);
            }
        }
    }
}

/// The machine's fp32 GEMM rate, measured once (see [`measure_f32_rate`]).
#[derive(Debug, Clone, PartialEq)]
pub struct GemmRate {
    /// Median over the samples, GFLOP/s (2n³ flops per product).
    pub gflops: f64,
    /// (max − min)/median of the samples.
    pub spread: f64,
    pub samples: usize,
    /// Every sample, GFLOP/s, in the order taken.
    pub samples_gflops: Vec<f64>,
    /// The matrices are `shape × shape`.
    pub shape: usize,
}

/// Times `samples` square `n × n` fp32 products through the engine of [`sgemm`], the rows
/// of C split across the rayon pool (every core, as the forms use them), after one warm-up.
pub fn measure_f32_rate_with(n: usize, samples: usize) -> GemmRate {
    use rayon::prelude::*;
    let a: Vec<f32> = (0..n * n)
        .map(|i| ((i % 97) as f32) * 0.01 - 0.48)
        .collect();
    let b: Vec<f32> = (0..n * n)
        .map(|i| ((i % 89) as f32) * 0.01 - 0.44)
        .collect();
    let mut c = vec![0f32; n * n];
    let rows = n.div_ceil(rayon::current_num_threads().max(1)).max(1);
    let run = |c: &mut [f32]| {
        c.par_chunks_mut(rows * n).enumerate().for_each(|(i, cb)| {
            let r = cb.len() / n;
            let ab = MatRef::row_major(&a[i * rows * n..(i * rows + r) * n], r, n, n);
            sgemm(1.0, ab, MatRef::row_major(&b, n, n, n), 0.0, cb, n);
        })
    };
    run(&mut c);
    let taken: Vec<f64> = (0..samples.max(1))
        .map(|_| {
            let start = Instant::now();
            run(&mut c);
            2.0 * (n as f64).powi(3) / start.elapsed().as_secs_f64() / 1e9
        })
        .collect();
    let mut rates = taken.clone();
    rates.sort_by(f64::total_cmp);
    let median = rates[rates.len() / 2];
    GemmRate {
        gflops: median,
        spread: (rates[rates.len() - 1] - rates[0]) / median,
        samples: rates.len(),
        samples_gflops: taken,
        shape: n,
    }
}

/// The rate `linattn bench` reads every CPU figure against: 5 products of 1024² matrices
/// (≈ 0.2 s on a 2-core machine).
pub fn measure_f32_rate() -> GemmRate {
    measure_f32_rate_with(1024, 5)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(a: MatRef, b: MatRef) -> Vec<f32> {
        let get = |m: &MatRef, i: usize, j: usize| m.data[i * m.row_stride + j * m.col_stride];
        let mut out = vec![0f32; a.rows * b.cols];
        for i in 0..a.rows {
            for j in 0..b.cols {
                out[i * b.cols + j] = (0..a.cols).map(|p| get(&a, i, p) * get(&b, p, j)).sum();
            }
        }
        out
    }

    #[test]
    fn strided_views_and_beta_match_plain_loops() {
        let x: Vec<f32> = (0..7 * 5).map(|i| (i as f32 * 0.3).sin()).collect();
        let y: Vec<f32> = (0..7 * 3).map(|i| (i as f32 * 0.7).cos()).collect();
        // Xᵀ·Y: 5×7 · 7×3, both through transposed/plain views.
        let (xa, yb) = (
            MatRef::row_major(&x, 7, 5, 5).t(),
            MatRef::row_major(&y, 7, 3, 3),
        );
        let want = plain(xa, yb);
        let mut c = vec![1f32; 5 * 3];
        sgemm(2.0, xa, yb, 0.5, &mut c, 3);
        for (got, w) in c.iter().zip(&want) {
            assert!((got - (2.0 * w + 0.5)).abs() < 1e-5, "{got} vs {w}");
        }
    }

    #[test]
    fn transpose_matches_plain_loops_on_ragged_shapes() {
        for (rows, cols) in [(1, 1), (8, 8), (32, 64), (37, 19), (5, 70), (64, 65)] {
            let (ld_src, ld_dst) = (cols + 3, rows + 1);
            let src: Vec<f32> = (0..rows * ld_src).map(|i| i as f32 * 0.5 - 7.0).collect();
            let mut dst = vec![f32::NAN; cols * ld_dst];
            transpose_into(&src, rows, cols, ld_src, &mut dst, ld_dst);
            for i in 0..rows {
                for j in 0..cols {
                    assert_eq!(
                        dst[j * ld_dst + i],
                        src[i * ld_src + j],
                        "{rows}x{cols} ({i},{j})"
                    );
                }
            }
        }
    }

    #[test]
    fn rate_is_positive_and_finite() {
        let r = measure_f32_rate_with(64, 3);
        assert!(r.gflops.is_finite() && r.gflops > 0.0 && r.samples == 3 && r.shape == 64);
    }
}
