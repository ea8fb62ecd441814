//! Strided-batched row-major GEMMs as one plan ([`RowMajorGemm`]), and the five products of
//! softmax attention (`linattn-softmax`) planned with it, carried out by either GEMM engine:
//! the executor's BLAS ([`super::Executor::gemm`], cuBLAS on a GPU) or the tiled GEMM kernel.
//!
//! A plan is the row-major product `C = op(A)·op(B)` with its sizes, transposes, leading
//! dims and batch strides. It is the single source of truth for both engines:
//! * `sm_gemm` (kernels/softmax.cu) takes the plan's fields as they are: m, n, k,
//!   the two transpose flags and the three strides (leading dims follow from them, see
//!   [`RowMajorGemm::lda`]);
//! * cuBLAS, which is column-major, takes [`RowMajorGemm::column_major`]: a row-major `r×c`
//!   buffer read as column-major is its transpose (`c×r`, leading dim `c`), so row-major
//!   `C = op(A)·op(B)` is column-major `Cᵀ = op(B)ᵀ·op(A)ᵀ`: B's buffer is the first operand,
//!   A's the second, the sizes swap (`m' = n`, `n' = m`) and `ldc = n`.
//!
//! What is verified where: the plans themselves (which product, which transposes, which
//! strides) run through `sm_gemm` on the PTX simulator in the `sim/softmax` tests, and
//! the column-major mapping is checked here on the host against a plain BLAS-style GEMM. What
//! only a GPU can verify is the last step, the cuBLAS call built from [`ColumnMajorCall`]
//! (argument order, the `cublasOperation_t` values, data and compute types): the
//! `gemm_engines_match_f64_matmul` test does that when `cuda` is available.

/// One strided-batched GEMM for [`super::Executor::gemm`]: `C_z = op(A_z)·op(B_z)` for
/// `z < batch`, row-major as `plan` states, fp32 compute on `precision` storage in and out.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GemmCall<'a> {
    pub plan: RowMajorGemm,
    pub batch: i32,
    pub precision: linattn_core::Precision,
    /// Device addresses of `batch` matrices each, at the plan's strides.
    pub a: u64,
    pub b: u64,
    pub c: u64,
    /// Names the product in errors (`S = QKᵀ`).
    pub what: &'a str,
}

/// Whether cuBLAS transposes an operand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transpose {
    No,
    Yes,
}

/// `C[m×n] = op(A)·op(B)`, every buffer row-major and contiguous. `op(A)` is `m×k`: A's buffer
/// is `m×k`, or `k×m` when `a_transposed`. `op(B)` is `k×n`: B's buffer is `k×n`, or `n×k`
/// when `b_transposed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowMajorGemm {
    pub m: i32,
    pub n: i32,
    pub k: i32,
    pub a_transposed: bool,
    pub b_transposed: bool,
}

/// The arguments of the column-major call (first operand = B's buffer, second = A's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ColumnMajorCall {
    pub trans_first: Transpose,
    pub trans_second: Transpose,
    pub m: i32,
    pub n: i32,
    pub k: i32,
    pub ld_first: i32,
    pub ld_second: i32,
    pub ldc: i32,
}

impl RowMajorGemm {
    /// `[N×N] = A[N×w]·B[N×w]ᵀ`: scores `QKᵀ` (w = D) and `dP = dO Vᵀ` (w = M).
    pub fn scores(seq: i32, width: i32) -> Self {
        RowMajorGemm {
            m: seq,
            n: seq,
            k: width,
            a_transposed: false,
            b_transposed: true,
        }
    }

    /// `[N×w] = P[N×N]·X[N×w]`: `O = PV`, `dQ = dS K`.
    pub fn probs_times(seq: i32, width: i32) -> Self {
        RowMajorGemm {
            m: seq,
            n: width,
            k: seq,
            a_transposed: false,
            b_transposed: false,
        }
    }

    /// `[N×w] = P[N×N]ᵀ·X[N×w]`: `dV = PᵀdO`, `dK = dSᵀQ`.
    pub fn probs_transposed_times(seq: i32, width: i32) -> Self {
        RowMajorGemm {
            a_transposed: true,
            ..Self::probs_times(seq, width)
        }
    }

    /// The same product as a column-major (cuBLAS) call.
    pub fn column_major(&self) -> ColumnMajorCall {
        let flag = |t: bool| if t { Transpose::Yes } else { Transpose::No };
        ColumnMajorCall {
            trans_first: flag(self.b_transposed),
            trans_second: flag(self.a_transposed),
            m: self.n,
            n: self.m,
            k: self.k,
            ld_first: self.ldb(),
            ld_second: self.lda(),
            ldc: self.ldc(),
        }
    }

    /// Row length of A's buffer: k (m×k), or m (k×m) when transposed.
    pub fn lda(&self) -> i32 {
        if self.a_transposed {
            self.m
        } else {
            self.k
        }
    }

    /// Row length of B's buffer: n (k×n), or k (n×k) when transposed.
    pub fn ldb(&self) -> i32 {
        if self.b_transposed {
            self.k
        } else {
            self.n
        }
    }

    /// Row length of C's buffer.
    pub fn ldc(&self) -> i32 {
        self.n
    }

    /// The three plans softmax attention uses, for `seq` positions and operand width `width`.
    pub fn all(seq: i32, width: i32) -> [RowMajorGemm; 3] {
        [
            Self::scores(seq, width),
            Self::probs_times(seq, width),
            Self::probs_transposed_times(seq, width),
        ]
    }

    /// Elements between consecutive (batch, head) matrices of A, B and C.
    pub fn stride_a(&self) -> i64 {
        i64::from(self.m) * i64::from(self.k)
    }
    pub fn stride_b(&self) -> i64 {
        i64::from(self.k) * i64::from(self.n)
    }
    pub fn stride_c(&self) -> i64 {
        i64::from(self.m) * i64::from(self.n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Column-major `C = op(X)·op(Y)` exactly as BLAS defines it.
    fn column_major_gemm(call: &ColumnMajorCall, x: &[f64], y: &[f64]) -> Vec<f64> {
        let (m, n, k) = (call.m as usize, call.n as usize, call.k as usize);
        let (ldx, ldy, ldc) = (
            call.ld_first as usize,
            call.ld_second as usize,
            call.ldc as usize,
        );
        let at_x = |row: usize, col: usize| match call.trans_first {
            Transpose::No => x[row + col * ldx],
            Transpose::Yes => x[col + row * ldx],
        };
        let at_y = |row: usize, col: usize| match call.trans_second {
            Transpose::No => y[row + col * ldy],
            Transpose::Yes => y[col + row * ldy],
        };
        let mut c = vec![0.0; ldc * n];
        for j in 0..n {
            for i in 0..m {
                c[i + j * ldc] = (0..k).map(|p| at_x(i, p) * at_y(p, j)).sum();
            }
        }
        c
    }

    fn row_major_reference(plan: &RowMajorGemm, a: &[f64], b: &[f64]) -> Vec<f64> {
        let (m, n, k) = (plan.m as usize, plan.n as usize, plan.k as usize);
        let op_a = |i: usize, p: usize| {
            if plan.a_transposed {
                a[p * m + i]
            } else {
                a[i * k + p]
            }
        };
        let op_b = |p: usize, j: usize| {
            if plan.b_transposed {
                b[j * k + p]
            } else {
                b[p * n + j]
            }
        };
        let mut c = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                c[i * n + j] = (0..k).map(|p| op_a(i, p) * op_b(p, j)).sum();
            }
        }
        c
    }

    #[test]
    fn every_plan_computes_the_row_major_product() {
        let values = |len: usize, seed: usize| -> Vec<f64> {
            (0..len)
                .map(|i| ((i * 7 + seed * 13) % 11) as f64 - 5.0)
                .collect()
        };
        for (seq, width) in [(1, 1), (3, 2), (5, 4), (4, 7)] {
            for plan in RowMajorGemm::all(seq, width) {
                let a = values(plan.stride_a() as usize, 1);
                let b = values(plan.stride_b() as usize, 2);
                let got = column_major_gemm(&plan.column_major(), &b, &a);
                assert_eq!(got, row_major_reference(&plan, &a, &b), "{plan:?}");
                assert_eq!(got.len() as i64, plan.stride_c());
            }
        }
    }
}
