//! Float semantics of PTX: IEEE rounding modes, flush-to-zero, saturation, the `.approx`
//! functions, and 16-bit conversions.
//!
//! Exact where PTX is exact: add/sub/mul/fma/div/sqrt/rcp with `.rn`, `.rz`, `.rm`, `.rp`
//! are correctly rounded (directed modes through an exact f64 error term). The `.approx`
//! functions (ex2, lg2, rsqrt, rcp.approx, sin, cos, tanh) are computed in f64 and rounded
//! once: within a few ulp of what hardware returns (the PTX ISA bounds ex2.approx at 2 ulp,
//! rsqrt.approx at ~2^-22.9 relative) but not bit-identical to it; `exec::numerics` moves
//! them to the edge of those bounds in its pessimistic mode.
//!
//! Subnormals of the `.approx` functions, as the PTX ISA (9.7.3) gives them: `.ftz` flushes
//! inputs and results to sign-preserving zero; without it subnormals are supported (for
//! rsqrt.approx.f32 ptxas scales a subnormal input by 2^24 before `MUFU.RSQ` and the result
//! by 2^12 after: finite on the H100, `bench-results/h100/2026-11-26/mufu/`), tanh.approx
//! passes subnormal inputs through, and div.approx
//! returns a signed zero (NaN for an infinite dividend) when 2^126 < |divisor| < 2^128.

use crate::ir::{FloatMode, IntRounding, Rounding, UnOp};

/// Sign-preserving flush of an f32 subnormal to zero.
#[inline]
pub fn flush(x: f32) -> f32 {
    if x.is_subnormal() {
        f32::from_bits(x.to_bits() & 0x8000_0000)
    } else {
        x
    }
}

/// `.sat`: clamp to [0, 1], NaN → +0.
#[inline]
pub fn saturate(x: f32) -> f32 {
    if x.is_nan() {
        0.0
    } else {
        x.clamp(0.0, 1.0)
    }
}

fn next_up(x: f32) -> f32 {
    if x.is_nan() || x == f32::INFINITY {
        return x;
    }
    if x == 0.0 {
        return f32::from_bits(1);
    }
    let bits = x.to_bits();
    f32::from_bits(if x > 0.0 { bits + 1 } else { bits - 1 })
}

fn next_down(x: f32) -> f32 {
    -next_up(-x)
}

/// Exact sum of two f64 as (rounded sum, exact error).
#[inline]
pub fn two_sum(a: f64, b: f64) -> (f64, f64) {
    let s = a + b;
    let bb = s - a;
    let err = (a - (s - bb)) + (b - bb);
    (s, err)
}

/// Rounds the exact value `hi + lo` (|lo| ≤ half an f64 ulp of hi) to f32 in `mode`.
pub fn round_f32(hi: f64, lo: f64, mode: Rounding) -> f32 {
    if hi.is_nan() {
        return f32::NAN;
    }
    let nearest = hi as f32;
    match mode {
        Rounding::Zero | Rounding::Down | Rounding::Up => {
            let n = f64::from(nearest);
            // Compare the exact value hi + lo with the candidate n.
            let above = n > hi || (n == hi && lo < 0.0);
            let below = n < hi || (n == hi && lo > 0.0);
            let toward_zero_down = hi > 0.0 || (hi == 0.0 && lo > 0.0);
            match mode {
                Rounding::Down if above => next_down(nearest),
                Rounding::Up if below => next_up(nearest),
                Rounding::Zero if toward_zero_down && above => next_down(nearest),
                Rounding::Zero if !toward_zero_down && below => next_up(nearest),
                _ if nearest.is_infinite() && !hi.is_infinite() => {
                    // Overflow: directed modes stop at the largest finite value unless the
                    // direction is toward the infinity.
                    match (mode, nearest > 0.0) {
                        (Rounding::Up, true) | (Rounding::Down, false) => nearest,
                        (_, true) => f32::MAX,
                        (_, false) => f32::MIN,
                    }
                }
                _ => nearest,
            }
        }
        _ => {
            if lo == 0.0 || nearest.is_infinite() {
                return nearest;
            }
            // Double rounding matters only when hi sits exactly halfway between two f32.
            let n = f64::from(nearest);
            let other = if n > hi {
                next_down(nearest)
            } else if n < hi {
                next_up(nearest)
            } else {
                return nearest;
            };
            let o = f64::from(other);
            if (n - hi).abs() == (o - hi).abs() {
                // Exactly halfway: the error term decides.
                let toward_other = (o > hi) == (lo > 0.0);
                if toward_other {
                    return other;
                }
            }
            nearest
        }
    }
}

/// a + b in `mode` (ftz and sat applied).
#[inline]
pub fn add(a: f32, b: f32, mode: FloatMode) -> f32 {
    let (a, b) = ftz_in(a, b, mode.ftz);
    let r = match mode.rounding {
        Rounding::Zero | Rounding::Down | Rounding::Up => {
            let (s, e) = two_sum(f64::from(a), f64::from(b));
            round_f32(s, e, mode.rounding)
        }
        _ => a + b,
    };
    finish(r, mode)
}

#[inline]
pub fn mul(a: f32, b: f32, mode: FloatMode) -> f32 {
    let (a, b) = ftz_in(a, b, mode.ftz);
    let r = match mode.rounding {
        Rounding::Zero | Rounding::Down | Rounding::Up => {
            round_f32(f64::from(a) * f64::from(b), 0.0, mode.rounding)
        }
        _ => a * b,
    };
    finish(r, mode)
}

/// Fused a·b + c with one rounding in `mode`.
#[inline]
pub fn fma(a: f32, b: f32, c: f32, mode: FloatMode) -> f32 {
    let (a, b) = ftz_in(a, b, mode.ftz);
    let c = if mode.ftz { flush(c) } else { c };
    let product = f64::from(a) * f64::from(b); // exact: 24 + 24 bits
    let r = if product.is_infinite() || c.is_infinite() || product.is_nan() || c.is_nan() {
        (product + f64::from(c)) as f32
    } else {
        let (s, e) = two_sum(product, f64::from(c));
        round_f32(s, e, mode.rounding)
    };
    finish(r, mode)
}

pub fn div(a: f32, b: f32, mode: FloatMode) -> f32 {
    let (a, b) = ftz_in(a, b, mode.ftz);
    let r = match mode.rounding {
        // d = a · (1/b), and 1/b of such a b is subnormal, flushed (ISA, div.approx.f32).
        Rounding::Approx if b.is_finite() && b.abs() > 2f32.powi(126) => {
            if a.is_infinite() {
                f32::NAN
            } else {
                f32::from_bits((a.to_bits() ^ b.to_bits()) & 0x8000_0000)
            }
        }
        Rounding::Zero | Rounding::Down | Rounding::Up => {
            let (x, y) = (f64::from(a), f64::from(b));
            let q = x / y;
            if !q.is_finite() || q == 0.0 {
                round_f32(q, 0.0, mode.rounding)
            } else {
                // Sign of the exact remainder says on which side of q the quotient lies.
                let remainder = (-q).mul_add(y, x);
                let lo = if remainder == 0.0 {
                    0.0
                } else {
                    remainder.signum() * y.signum() * f64::MIN_POSITIVE
                };
                round_f32(q, lo, mode.rounding)
            }
        }
        _ => a / b,
    };
    finish(r, mode)
}

#[inline]
fn ftz_in(a: f32, b: f32, ftz: bool) -> (f32, f32) {
    if ftz {
        (flush(a), flush(b))
    } else {
        (a, b)
    }
}

#[inline]
pub fn finish(r: f32, mode: FloatMode) -> f32 {
    let r = if mode.ftz { flush(r) } else { r };
    if mode.sat {
        saturate(r)
    } else {
        r
    }
}

/// PTX min/max: a NaN operand yields the other one; −0 < +0.
#[inline]
pub fn min(a: f32, b: f32) -> f32 {
    if a.is_nan() {
        return b;
    }
    if b.is_nan() {
        return a;
    }
    if a == b {
        return if a.is_sign_negative() { a } else { b };
    }
    if a < b {
        a
    } else {
        b
    }
}

/// The mirror of [`min`]: negation swaps the order, +0 and −0, and keeps NaNs NaN.
#[inline]
pub fn max(a: f32, b: f32) -> f32 {
    -min(-a, -b)
}

/// Rounds to an integral value (cvt.{rni,rzi,rmi,rpi}; float → integer conversions round
/// first, then saturate).
pub fn round_integral_f64(x: f64, rounding: IntRounding) -> f64 {
    match rounding {
        IntRounding::Nearest => x.round_ties_even(),
        IntRounding::Zero => x.trunc(),
        IntRounding::Down => x.floor(),
        IntRounding::Up => x.ceil(),
    }
}

/// f32 → f16 bits, round to nearest even (cvt.rn.f16.f32).
#[inline]
pub fn f32_to_f16_bits(x: f32) -> u16 {
    half::f16::from_f32(x).to_bits()
}

#[inline]
pub fn f16_bits_to_f32(bits: u16) -> f32 {
    half::f16::from_bits(bits).to_f32()
}

/// f32 → bf16 bits, round to nearest even, NaN stays NaN (cvt.rn.bf16.f32).
#[inline]
pub fn f32_to_bf16_bits(x: f32) -> u16 {
    half::bf16::from_f32(x).to_bits()
}

#[inline]
pub fn bf16_bits_to_f32(bits: u16) -> f32 {
    f32::from_bits(u32::from(bits) << 16)
}

/// The input an f32 unary function sees: flushed under `.ftz`.
#[inline]
pub fn approx_input(x: f32, mode: FloatMode) -> f32 {
    if mode.ftz {
        flush(x)
    } else {
        x
    }
}

/// The exact value (to f64 precision) of an approximate function at `x`.
pub fn approx_exact(op: UnOp, x: f32) -> f64 {
    let wide = f64::from(x);
    match op {
        UnOp::Rcp => 1.0 / wide,
        UnOp::Sqrt => wide.sqrt(),
        UnOp::Rsqrt => 1.0 / wide.sqrt(),
        UnOp::Ex2 => wide.exp2(),
        UnOp::Lg2 => wide.log2(),
        UnOp::Sin => wide.sin(),
        UnOp::Cos => wide.cos(),
        UnOp::Tanh => wide.tanh(),
        UnOp::Neg | UnOp::Abs | UnOp::Not | UnOp::Popc | UnOp::Clz | UnOp::Brev => wide,
    }
}

/// The `.approx` and IEEE unary functions on f32.
pub fn unary(op: UnOp, x: f32, mode: FloatMode) -> f32 {
    let x = approx_input(x, mode);
    let wide = f64::from(x);
    let r = match op {
        UnOp::Neg => -x,
        UnOp::Abs => x.abs(),
        UnOp::Rcp => match mode.rounding {
            Rounding::Nearest | Rounding::Approx | Rounding::Full => 1.0 / x,
            r => div(
                1.0,
                x,
                FloatMode {
                    rounding: r,
                    ftz: false,
                    sat: false,
                    contractible: false,
                },
            ),
        },
        UnOp::Sqrt => match mode.rounding {
            Rounding::Nearest | Rounding::Approx | Rounding::Full => x.sqrt(),
            r => {
                let s = wide.sqrt();
                let lo = (-s).mul_add(s, wide);
                round_f32(s, lo, r)
            }
        },
        // tanh.approx has no .ftz: a subnormal input is its own result (ISA, tanh).
        UnOp::Tanh if x.is_subnormal() => x,
        UnOp::Rsqrt | UnOp::Ex2 | UnOp::Lg2 | UnOp::Sin | UnOp::Cos | UnOp::Tanh => {
            approx_exact(op, x) as f32
        }
        UnOp::Not | UnOp::Popc | UnOp::Clz | UnOp::Brev => x,
    };
    // Neg and abs are bit operations: no flush of the result, no saturation.
    if matches!(op, UnOp::Neg | UnOp::Abs) {
        return r;
    }
    finish(r, mode)
}

#[cfg(test)]
mod tests {
    use super::*;

    const RN: FloatMode = FloatMode {
        rounding: Rounding::Nearest,
        ftz: false,
        sat: false,
        contractible: false,
    };

    fn mode(rounding: Rounding) -> FloatMode {
        FloatMode { rounding, ..RN }
    }

    #[test]
    fn fma_is_fused() {
        // (1 + 2^-23)(1 - 2^-23) - 1 = -2^-46 exactly; unfused gives 0.
        let a = 1.0 + f32::EPSILON;
        let b = 1.0 - f32::EPSILON;
        assert_eq!(fma(a, b, -1.0, RN), -(2f32.powi(-46)));
        assert_eq!(fma(a, b, -1.0, RN), a.mul_add(b, -1.0));
    }

    #[test]
    fn fma_matches_hardware_mul_add_on_random_values() {
        let mut state = 0x1234_5678_9abc_def0u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            f32::from_bits((state as u32 & 0x3fff_ffff) | 0x3000_0000)
                * if state & (1 << 40) != 0 { -1.0 } else { 1.0 }
        };
        for _ in 0..100_000 {
            let (a, b, c) = (next(), next(), next());
            assert_eq!(
                fma(a, b, c, RN).to_bits(),
                a.mul_add(b, c).to_bits(),
                "{a} {b} {c}"
            );
        }
    }

    #[test]
    fn directed_rounding() {
        let third = 1.0f32 / 3.0;
        let down = fma(1.0, 1.0 / 3.0, 0.0, mode(Rounding::Down));
        assert_eq!(down, third.min(down));
        assert!(add(1.0, 1e-10, mode(Rounding::Up)) > 1.0);
        assert_eq!(add(1.0, 1e-10, mode(Rounding::Down)), 1.0);
        assert_eq!(add(1.0, 1e-10, RN), 1.0);
        assert!(add(-1.0, -1e-10, mode(Rounding::Down)) < -1.0);
        assert_eq!(add(-1.0, -1e-10, mode(Rounding::Zero)), -1.0);
        // 1/3 rounds up in f32: 3 × it is exactly 1 + 2^-25, which .rz truncates to 1.
        assert_eq!(mul(3.0, 1.0 / 3.0, mode(Rounding::Zero)), 1.0);
        assert_eq!(mul(3.0, 1.0 / 3.0, mode(Rounding::Up)), 1.0 + f32::EPSILON);
        assert_eq!(mul(-3.0, 1.0 / 3.0, mode(Rounding::Zero)), -1.0);
        assert!(div(1.0, 3.0, mode(Rounding::Up)) > div(1.0, 3.0, mode(Rounding::Down)));
        assert_eq!(div(1.0, 4.0, mode(Rounding::Up)), 0.25);
    }

    #[test]
    fn min_max_follow_ptx() {
        assert_eq!(max(f32::NAN, 1.0), 1.0);
        assert_eq!(min(2.0, f32::NAN), 2.0);
        assert!(max(-0.0, 0.0).is_sign_positive());
        assert!(min(0.0, -0.0).is_sign_negative());
    }

    #[test]
    fn sixteen_bit_conversions_round_to_nearest_even() {
        assert_eq!(f32_to_f16_bits(1.0), 0x3c00);
        assert_eq!(f32_to_f16_bits(65520.0), 0x7c00); // rounds to inf
        assert_eq!(f32_to_bf16_bits(1.0 + 2f32.powi(-8)), 0x3f80); // tie to even
        assert_eq!(bf16_bits_to_f32(0x3f80), 1.0);
        assert_eq!(f16_bits_to_f32(0x0001), 2f32.powi(-24));
    }
}
