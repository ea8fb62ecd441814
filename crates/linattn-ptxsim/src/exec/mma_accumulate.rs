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
//! spare. [`H100`] is what our H100 showed: `kernels/mma_probe.cu` (`linattn mma-probe`,
//! issue #23 part 6) ran 359 f16 and 359 bf16 vectors on 2026-11-26
//! (`bench-results/h100/2026-11-26/mma-probe.json`). All 16 products and the accumulator
//! form one block; the terms are aligned on the largest **operand exponent** (a product's
//! e_a + e_b, not the exponent of its value, which is one more when the significands'
//! product reaches 2: the multiplier's output is not normalised before alignment); 26 bits
//! from that exponent down are kept, the rest truncated toward zero; the exact sum of the
//! kept bits is rounded toward zero. That matches 359 of 359 vectors of each type
//! (`linattn mma-probe --rescore` of the committed file). Aligning on the values' own
//! exponents, as the Fasi et al. model reads, matched 335 and 333 with 26 bits: the 24 and
//! 26 misses were the vectors whose largest product has a significand product of 2 or more;
//! emulation_sys's 25 bits matched 189 and 208, exact sums 170 and 196. The probe has no
//! subnormal operand: for those the alignment takes the type's least normal exponent (the
//! exponent field's reading), unmeasured.

/// How a block's exact sum becomes the f32 accumulator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FinalRounding {
    /// Toward zero (truncation): what Fasi et al. and emulation_sys observed.
    TowardZero,
    /// To nearest, ties to even.
    Nearest,
}

impl FinalRounding {
    /// "RZ" or "RN", as the literature writes them.
    pub fn name(self) -> &'static str {
        match self {
            FinalRounding::TowardZero => "RZ",
            FinalRounding::Nearest => "RN",
        }
    }

    fn ir(self) -> crate::ir::Rounding {
        match self {
            FinalRounding::TowardZero => crate::ir::Rounding::Zero,
            FinalRounding::Nearest => crate::ir::Rounding::Nearest,
        }
    }
}

/// Which exponent a product is aligned by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Alignment {
    /// Its value's (normalised) exponent: the reading of Fasi et al.'s model.
    Value,
    /// Its operands' exponents summed, e_a + e_b: one less than the value's when the
    /// significands' product is 2 or more (what the H100 does).
    Operands,
}

impl Alignment {
    /// `value` or `operands` (the probe's JSON).
    pub fn name(self) -> &'static str {
        match self {
            Alignment::Value => "value",
            Alignment::Operands => "operands",
        }
    }

    /// How the candidates' names say it ("" for [`Alignment::Value`], the older name).
    pub fn suffix(self) -> &'static str {
        match self {
            Alignment::Value => "",
            Alignment::Operands => ", operand-aligned",
        }
    }
}

/// One term of a dot product: the exact product a·b of two 16-bit floats and the exponent
/// its operands give it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Product {
    /// a·b, exact in f64 (at most 11 + 11 significant bits).
    pub value: f64,
    /// e_a + e_b, each operand's exponent field read as the type does (a subnormal at the
    /// least normal exponent); unused when `value` is 0.
    pub operand_exponent: i32,
}

impl Product {
    /// a·b of two values of a 16-bit type whose least normal exponent is `emin` (−14 for
    /// f16, −126 for bf16), widened exactly to f32.
    pub fn new(a: f32, b: f32, emin: i32) -> Product {
        let field = |x: f32| {
            if x == 0.0 || !x.is_finite() {
                emin
            } else {
                exponent(f64::from(x)).max(emin)
            }
        };
        Product {
            value: f64::from(a) * f64::from(b),
            operand_exponent: field(a) + field(b),
        }
    }

    /// A term known by its value only, aligned by its own exponent (tests, and sums with
    /// no 16-bit operands behind them).
    pub fn of_value(value: f64) -> Product {
        let operand_exponent = if value == 0.0 || !value.is_finite() {
            0
        } else {
            exponent(value)
        };
        Product {
            value,
            operand_exponent,
        }
    }
}

/// Parameters of a truncating block-FMA accumulation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TensorCoreModel {
    /// Products added per step (with the running accumulator).
    pub block: usize,
    /// Significant bits kept below and including the leading bit of the largest term
    /// (at most 40: the aligned terms are summed in an i64).
    pub kept_bits: u32,
    /// How each block's sum is rounded to f32.
    pub rounding: FinalRounding,
    /// Which exponent a product is aligned by.
    pub alignment: Alignment,
}

/// The A100 model of Fasi et al. (see the module documentation).
pub const A100: TensorCoreModel = TensorCoreModel {
    block: 8,
    kept_bits: 24,
    rounding: FinalRounding::TowardZero,
    alignment: Alignment::Value,
};

/// The pessimistic numerics mode's model: the A100's.
pub const PESSIMISTIC: TensorCoreModel = A100;

/// The H100's, as our mma probe measured it: one block of 16 products aligned on their
/// operands' exponents, 26 bits, toward zero (see the module documentation).
pub const H100: TensorCoreModel = TensorCoreModel {
    block: 16,
    kept_bits: 26,
    rounding: FinalRounding::TowardZero,
    alignment: Alignment::Operands,
};

/// `c + Σ products`, summed in f64 and rounded once (products exact in f64).
pub fn dot_exact(c: f32, products: &[Product]) -> f32 {
    let mut sum = f64::from(c);
    for p in products {
        sum += p.value;
    }
    sum as f32
}

/// `c + Σ products` summed exactly (in double-double: exact while the terms span under 100
/// bits, as the probe's do) and rounded once to f32 by `rounding`: the "multi-term sum, one
/// final rounding" reading of tensor-core accumulation.
pub fn dot_exact_rounded(c: f32, products: &[Product], rounding: FinalRounding) -> f32 {
    let (mut hi, mut lo) = (f64::from(c), 0.0);
    for p in products {
        let (s, e) = crate::exec::float::two_sum(hi, p.value);
        hi = s;
        lo += e;
    }
    if !hi.is_finite() {
        return hi as f32;
    }
    let (hi, lo) = crate::exec::float::two_sum(hi, lo);
    crate::exec::float::round_f32(hi, lo, rounding.ir())
}

/// `c + Σ products` by `model`: blocks of `model.block` products in order, each added to the
/// accumulator in one aligned, truncated, exact sum and rounded to f32 as `model` says.
pub fn dot_truncating(c: f32, products: &[Product], model: TensorCoreModel) -> f32 {
    let mut acc = c;
    for block in products.chunks(model.block.max(1)) {
        acc = block_fma(acc, block, model);
    }
    acc
}

/// One block step: `acc + Σ block` with every term truncated (toward zero) to the bits at or
/// above `2^(e_max − kept_bits + 1)`, `e_max` the largest exponent among the terms as
/// `model.alignment` reads them, the truncated terms summed exactly, the sum rounded to f32
/// by `model.rounding`. (One pass for the exponent, one for the sum: this runs for every
/// element of every mma in the as-compiled and pessimistic modes.)
fn block_fma(acc: f32, block: &[Product], model: TensorCoreModel) -> f32 {
    let acc = f64::from(acc);
    // The plain f64 sum says whether an infinity or NaN is in the block (finite terms under
    // 2^256 cannot overflow it).
    let mut plain = acc;
    let mut top: Option<i32> = (acc != 0.0).then(|| exponent(acc));
    for t in block {
        plain += t.value;
        if t.value != 0.0 {
            let e = match model.alignment {
                Alignment::Value => exponent(t.value),
                Alignment::Operands => t.operand_exponent,
            };
            top = Some(top.map_or(e, |m| m.max(e)));
        }
    }
    let top = match top {
        Some(top) if plain.is_finite() => top,
        // Infinities and NaN follow IEEE addition, and so does the sign of a sum of zeros.
        _ => return plain as f32,
    };
    // Weight of the last kept bit. Terms are f32 or products of two 16-bit floats: every
    // scaled term below is exact in f64, and `as i64` truncates it toward zero to an integer
    // under 2^(kept_bits + 1) (a product aligned on its operands can reach one bit above
    // `top`).
    let lsb = top - model.kept_bits as i32 + 1;
    let scale = pow2(-lsb);
    let mut sum = (acc * scale) as i64;
    for t in block {
        sum += (t.value * scale) as i64;
    }
    match model.rounding {
        FinalRounding::TowardZero => round_toward_zero(sum, lsb),
        // `sum` is under 2^53, so the product is exact and `as` rounds it once, to nearest
        // even (overflow to infinity, as IEEE round-to-nearest does).
        FinalRounding::Nearest => (sum as f64 * pow2(lsb)) as f32,
    }
}

/// `sum · 2^lsb` rounded toward zero to f32 (`sum` under 2^53 in magnitude).
fn round_toward_zero(sum: i64, lsb: i32) -> f32 {
    let magnitude = sum.unsigned_abs();
    // Drop the bits below f32's 24 (toward zero: on the magnitude).
    let extra = (64 - magnitude.leading_zeros() as i32 - 24).max(0);
    let kept = magnitude >> extra;
    let e = lsb + extra;
    // kept · 2^e is exact in f32 when it is normal there; else the general rounding.
    let top = e + 63 - kept.leading_zeros() as i32;
    if kept != 0 && (-126..=127).contains(&top) {
        let value = (kept as f64 * pow2(e)) as f32;
        return if sum < 0 { -value } else { value };
    }
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

/// 2^e as an f64 (normal range; the sums need |e| under 400).
fn pow2(e: i32) -> f64 {
    debug_assert!((-1022..=1023).contains(&e), "2^{e}");
    f64::from_bits(((e + 1023) as u64) << 52)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(e: i32) -> f64 {
        2f64.powi(e)
    }

    fn terms(values: &[f64]) -> Vec<Product> {
        values.iter().map(|&v| Product::of_value(v)).collect()
    }

    fn trunc(c: f32, products: &[f64]) -> f32 {
        dot_truncating(c, &terms(products), PESSIMISTIC)
    }

    fn exact(c: f32, products: &[f64]) -> f32 {
        dot_exact(c, &terms(products))
    }

    fn exact_rounded(c: f32, products: &[f64], rounding: FinalRounding) -> f32 {
        dot_exact_rounded(c, &terms(products), rounding)
    }

    fn truncating(c: f32, products: &[f64], model: TensorCoreModel) -> f32 {
        dot_truncating(c, &terms(products), model)
    }

    #[test]
    fn small_terms_below_the_accumulator_precision_are_dropped() {
        // 1 + 8 · 2^-25 = 1 + 2^-22 exactly; aligned to 1's exponent each 2^-25 is below the
        // 24th bit (2^-23) and truncates to 0.
        let products = [p(-25); 8];
        assert_eq!(exact(1.0, &products), 1.0 + p(-22) as f32);
        assert_eq!(trunc(1.0, &products), 1.0);
        // In the exact model the same products summed in one block keep every bit.
        let twice: Vec<f64> = [p(-25); 16].to_vec();
        assert_eq!(exact(1.0, &twice), 1.0 + p(-21) as f32);
        assert_eq!(trunc(1.0, &twice), 1.0);
    }

    #[test]
    fn truncation_is_toward_zero_for_negative_terms() {
        // -1 - 3·2^-24: the product 3·2^-24 = 2^-23 + 2^-24 keeps 2^-23 only.
        let products = [-3.0 * p(-24)];
        assert_eq!(trunc(-1.0, &products), -(1.0 + p(-23)) as f32);
        // Exactly: -(1 + 2^-23 + 2^-24) is a tie, to even: -(1 + 2^-22).
        assert_eq!(exact(-1.0, &products), -(1.0 + p(-22)) as f32);
    }

    #[test]
    fn the_final_rounding_is_toward_zero() {
        // (1 + 3·2^-23) + (1 + 2^-10) = 2 + 2^-10 + 3·2^-23: in [2, 4) the f32 ulp is 2^-22,
        // so 3·2^-23 is 1.5 ulp: nearest rounds up to 2 ulp, toward zero keeps 1.
        let c = (1.0 + 3.0 * p(-23)) as f32;
        let products = [1.0 + p(-10)];
        assert_eq!(exact(c, &products), (2.0 + p(-10) + p(-21)) as f32);
        assert_eq!(trunc(c, &products), (2.0 + p(-10) + p(-22)) as f32);
    }

    #[test]
    fn cancellation_exposes_the_alignment_loss() {
        // 1 - 1 + 2^-30: exactly 2^-30; aligned to exponent 0 the 2^-30 is gone before the
        // ones cancel.
        let products = [-1.0, p(-30)];
        assert_eq!(exact(1.0, &products), p(-30) as f32);
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
    fn the_fast_rounding_matches_the_general_one() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..100_000 {
            let r = next();
            let sum = (r >> 11) as i64 >> (r % 40) as u32;
            let sum = if r & 1 == 1 { -sum } else { sum };
            // From deep subnormal to overflow.
            let lsb = (next() % 360) as i32 - 230;
            let want = crate::exec::float::round_f32(
                sum as f64 * pow2(lsb),
                0.0,
                crate::ir::Rounding::Zero,
            );
            let got = round_toward_zero(sum, lsb);
            assert_eq!(got.to_bits(), want.to_bits(), "{sum} · 2^{lsb}");
        }
    }

    #[test]
    fn the_final_rounding_can_be_to_nearest() {
        // 1 + 0.75 ulp: 26 bits keep both low bits; nearest rounds up, toward zero drops them.
        let products = [p(-24) + p(-25)];
        let model = |rounding| TensorCoreModel {
            block: 16,
            kept_bits: 26,
            rounding,
            alignment: Alignment::Value,
        };
        let rn = truncating(1.0, &products, model(FinalRounding::Nearest));
        let rz = truncating(1.0, &products, model(FinalRounding::TowardZero));
        assert_eq!(rn, (1.0 + p(-23)) as f32);
        assert_eq!(rz, 1.0);
        // 25 bits keep 2^-24 alone: a tie, to even, down.
        let rn25 = TensorCoreModel {
            kept_bits: 25,
            ..model(FinalRounding::Nearest)
        };
        assert_eq!(truncating(1.0, &products, rn25), 1.0);
        // The H100's model keeps two bits more than the A100's: 16 terms of 2^-24 survive
        // in one block of 26 bits, not in two of 24.
        let small = [p(-24); 16];
        assert_eq!(truncating(1.0, &small, H100), (1.0 + p(-20)) as f32);
        assert_eq!(truncating(1.0, &small, A100), 1.0);
    }

    #[test]
    fn exact_sums_round_once_either_way() {
        let products = [p(-24) + p(-25), p(-40)];
        assert_eq!(
            exact_rounded(1.0, &products, FinalRounding::TowardZero),
            1.0
        );
        assert_eq!(
            exact_rounded(1.0, &products, FinalRounding::Nearest),
            exact(1.0, &products)
        );
        // Below zero, toward zero is up.
        let negative = [-(p(-24) + p(-25))];
        assert_eq!(
            exact_rounded(-1.0, &negative, FinalRounding::TowardZero),
            -1.0
        );
        assert!(exact_rounded(1.0, &[f64::INFINITY], FinalRounding::TowardZero).is_infinite());
    }

    #[test]
    fn exact_sums_agree_when_nothing_is_lost() {
        // Small multiples of 1/8: every model gives the exact result.
        let products: Vec<f64> = (0..16).map(|k| (k as f64 - 7.5) * 0.125).collect();
        assert_eq!(trunc(3.0, &products), exact(3.0, &products));
        assert_eq!(exact(3.0, &products), 3.0);
    }

    #[test]
    fn the_h100_aligns_on_operand_exponents() {
        // 1.5 · 1.5 = 2.25 leads with operand exponents 0 + 0 = 0, one below its value's 1.
        // Eight products 2^-12 · 2^-13 = 2^-25 follow: 26 bits from exponent 0 keep 2^-25
        // (lsb 2^-25), 26 bits from exponent 1 do not (lsb 2^-24).
        let f16 = -14;
        let mut products = vec![Product::new(1.5, 1.5, f16)];
        products.extend([Product::new(p(-12) as f32, p(-13) as f32, f16); 8]);
        assert_eq!(products[0].operand_exponent, 0);
        assert_eq!(products[1].operand_exponent, -25);
        let by_value = TensorCoreModel {
            alignment: Alignment::Value,
            ..H100
        };
        assert_eq!(dot_truncating(0.0, &products, H100), (2.25 + p(-22)) as f32);
        assert_eq!(dot_truncating(0.0, &products, by_value), 2.25);
        // Leading significands whose product stays under 2 align the same either way.
        products[0] = Product::new(1.25, 1.5, f16);
        assert_eq!(
            dot_truncating(0.0, &products, H100),
            dot_truncating(0.0, &products, by_value)
        );
    }

    #[test]
    fn subnormal_operands_align_at_the_least_normal_exponent() {
        // f16's 2^-24 (subnormal) reads as exponent -14; bf16's 2^-130 as -126.
        assert_eq!(Product::new(p(-24) as f32, 1.0, -14).operand_exponent, -14);
        assert_eq!(
            Product::new(p(-130) as f32, 2.0, -126).operand_exponent,
            -125
        );
        assert_eq!(Product::new(0.0, 8.0, -14).value, 0.0);
    }
}
