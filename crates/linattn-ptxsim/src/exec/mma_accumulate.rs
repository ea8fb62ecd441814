//! How an `mma` with f32 accumulation sums one element: `d = c + Σ_k a_k·b_k` over k = 16.
//!
//! * [`dot_exact`]: the products (exact in f64: at most 11 + 11 significant bits) and c summed
//!   in f64 and rounded once to f32 — the simulator's default.
//! * [`dot_truncating`]: the published model of tensor-core accumulation, used by the
//!   pessimistic numerics mode. Fasi, Higham, Mikaitis and Pranesh, "Numerical behavior of
//!   NVIDIA tensor cores", PeerJ Computer Science 7:e330 (2021), measured on V100, T4 and
//!   A100: products are exact; each step adds a block of products and the accumulator at once
//!   (a block FMA; on the A100, 8 fp16/bf16 products, so k = 16 takes two steps); the terms
//!   are aligned to the largest exponent among them and the bits of the smaller ones beyond
//!   the accumulator's precision are dropped (truncation, not rounding); the sum is normalised
//!   once per block and rounded toward zero. Valpey, Li, Pai and Gopalakrishnan, "An SMT
//!   formalization of mixed-precision matrix multiplication" (arXiv:2502.15999, 2025) report
//!   that the adders keep 3 extra carry-out bits: carries are not lost (the sum below is
//!   exact). For Hopper, the tensor-core probes of github.com/huweim/emulation_sys report an
//!   H100 fp16 → fp32 accumulation of 25 significant bits, round toward zero, one bit more
//!   than the A100's 24; Khattak and Mikaitis, "Accurate models of NVIDIA tensor cores"
//!   (arXiv:2512.07004, 2025) model the H100 bit-accurately.
//!
//! [`PESSIMISTIC`] takes the A100's parameters (8-product blocks, 24 bits): the less accurate
//! of the two targets, so a kernel passing with it has the H100's wider accumulation to
//! spare. Which model the H100 follows exactly is for a GPU probe to settle (issue #23 part
//! 6); [`TensorCoreModel`] takes its parameters.

/// Parameters of a truncating block-FMA accumulation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TensorCoreModel {
    /// Products added per step (with the running accumulator).
    pub block: usize,
    /// Significant bits kept below and including the leading bit of the largest term.
    pub kept_bits: u32,
}

/// The A100 model of Fasi et al. (see the module documentation).
pub const PESSIMISTIC: TensorCoreModel = TensorCoreModel {
    block: 8,
    kept_bits: 24,
};

/// `c + Σ products`, summed in f64 and rounded once (products exact in f64).
pub fn dot_exact(c: f32, products: &[f64]) -> f32 {
    let mut sum = f64::from(c);
    for &p in products {
        sum += p;
    }
    sum as f32
}

/// `c + Σ products` by `model`: blocks of `model.block` products in order, each added to the
/// accumulator in one aligned, truncated, exact sum and rounded toward zero to f32.
pub fn dot_truncating(c: f32, products: &[f64], model: TensorCoreModel) -> f32 {
    let mut acc = c;
    for block in products.chunks(model.block.max(1)) {
        acc = block_fma(acc, block, model.kept_bits);
    }
    acc
}

/// One block step: `acc + Σ block` with every term truncated (toward zero) to the bits at or
/// above `2^(e_max − kept_bits + 1)`, the truncated terms summed exactly, the sum rounded
/// toward zero to f32.
fn block_fma(acc: f32, block: &[f64], kept_bits: u32) -> f32 {
    let terms = || std::iter::once(f64::from(acc)).chain(block.iter().copied());
    if terms().any(|t| !t.is_finite()) {
        // Infinities and NaN follow IEEE addition.
        return terms().sum::<f64>() as f32;
    }
    let Some(e_max) = terms().filter(|&t| t != 0.0).map(exponent).max() else {
        // All zero: IEEE's sign of a sum of zeros.
        return terms().fold(-0.0, |s, t| s + t) as f32;
    };
    // Weight of the last kept bit. Terms are f32 or products of two 16-bit floats: every
    // scaled term below is exact in f64, every truncated one an integer under 2^kept_bits.
    let lsb = e_max - kept_bits as i32 + 1;
    let scale = pow2(-lsb);
    let sum: i64 = terms().map(|t| (t * scale).trunc() as i64).sum();
    // |sum| < 2^(kept_bits + 4): exact in f64, and so is the scaling back.
    let exact = sum as f64 * pow2(lsb);
    crate::exec::float::round_f32(exact, 0.0, crate::ir::Rounding::Zero)
}

/// ⌊log2 |x|⌋ of a nonzero finite f64.
fn exponent(x: f64) -> i32 {
    let bits = x.to_bits() & !(1 << 63);
    match (bits >> 52) as i32 {
        // Subnormal: never an f32 or a product of two 16-bit floats, handled all the same.
        0 => -1074 + 63 - bits.leading_zeros() as i32,
        biased => biased - 1023,
    }
}

/// 2^e, for the exponents a block needs: f32 and 16-bit products keep |e| under 300.
fn pow2(e: i32) -> f64 {
    2f64.powi(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(e: i32) -> f64 {
        2f64.powi(e)
    }

    fn trunc(c: f32, products: &[f64]) -> f32 {
        dot_truncating(c, products, PESSIMISTIC)
    }

    #[test]
    fn small_terms_below_the_accumulator_precision_are_dropped() {
        // 1 + 8 · 2^-25 = 1 + 2^-22 exactly; aligned to 1's exponent each 2^-25 is below the
        // 24th bit (2^-23) and truncates to 0.
        let products = [p(-25); 8];
        assert_eq!(dot_exact(1.0, &products), 1.0 + p(-22) as f32);
        assert_eq!(trunc(1.0, &products), 1.0);
        // In the exact model the same products summed in one block keep every bit.
        let twice: Vec<f64> = [p(-25); 16].to_vec();
        assert_eq!(dot_exact(1.0, &twice), 1.0 + p(-21) as f32);
        assert_eq!(trunc(1.0, &twice), 1.0);
    }

    #[test]
    fn truncation_is_toward_zero_for_negative_terms() {
        // -1 - 3·2^-24: the product 3·2^-24 = 2^-23 + 2^-24 keeps 2^-23 only.
        let products = [-3.0 * p(-24)];
        assert_eq!(trunc(-1.0, &products), -(1.0 + p(-23)) as f32);
        // Exactly: -(1 + 2^-23 + 2^-24) is a tie, to even: -(1 + 2^-22).
        assert_eq!(dot_exact(-1.0, &products), -(1.0 + p(-22)) as f32);
    }

    #[test]
    fn the_final_rounding_is_toward_zero() {
        // (1 + 3·2^-23) + (1 + 2^-10) = 2 + 2^-10 + 3·2^-23: in [2, 4) the f32 ulp is 2^-22,
        // so 3·2^-23 is 1.5 ulp: nearest rounds up to 2 ulp, toward zero keeps 1.
        let c = (1.0 + 3.0 * p(-23)) as f32;
        let products = [1.0 + p(-10)];
        assert_eq!(dot_exact(c, &products), (2.0 + p(-10) + p(-21)) as f32);
        assert_eq!(trunc(c, &products), (2.0 + p(-10) + p(-22)) as f32);
    }

    #[test]
    fn cancellation_exposes_the_alignment_loss() {
        // 1 - 1 + 2^-30: exactly 2^-30; aligned to exponent 0 the 2^-30 is gone before the
        // ones cancel.
        let products = [-1.0, p(-30)];
        assert_eq!(dot_exact(1.0, &products), p(-30) as f32);
        assert_eq!(trunc(1.0, &products), 0.0);
        // With the large terms in another block the small one survives: blocks matter.
        let mut split = vec![0.0; 16];
        split[0] = -1.0;
        split[8] = p(-30);
        assert_eq!(trunc(1.0, &split), p(-30) as f32);
    }

    #[test]
    fn carries_are_kept() {
        // Nine terms of 1 - 2^-24 (the largest f32 below 1): the exact sum 9 - 9·2^-24 carries
        // out of the 24 bits; truncated to f32 toward zero it is 9 - 2^-20.
        let big = f64::from(1.0f32 - f32::EPSILON / 2.0);
        let products = [big; 8];
        let got = trunc(big as f32, &products);
        let exact = 9.0 * big;
        assert_eq!(
            got,
            crate::exec::float::round_f32(exact, 0.0, crate::ir::Rounding::Zero)
        );
        assert_eq!(got, (9.0 - p(-20)) as f32);
    }

    #[test]
    fn zeros_and_specials_follow_ieee() {
        assert_eq!(trunc(-0.0, &[-0.0; 16]).to_bits(), (-0.0f32).to_bits());
        assert_eq!(trunc(0.0, &[-0.0; 16]).to_bits(), 0.0f32.to_bits());
        assert_eq!(trunc(1.0, &[f64::INFINITY]), f32::INFINITY);
        assert!(trunc(1.0, &[f64::INFINITY, f64::NEG_INFINITY]).is_nan());
        // An exact cancellation is +0, as in IEEE round-toward-zero addition.
        assert_eq!(trunc(1.0, &[-1.0]).to_bits(), 0.0f32.to_bits());
    }

    #[test]
    fn exact_sums_agree_when_nothing_is_lost() {
        // Small multiples of 1/8: every model gives the exact result.
        let products: Vec<f64> = (0..16).map(|k| (k as f64 - 7.5) * 0.125).collect();
        assert_eq!(trunc(3.0, &products), dot_exact(3.0, &products));
        assert_eq!(dot_exact(3.0, &products), 3.0);
    }
}
