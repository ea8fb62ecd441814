//! Integer arithmetic and logic: binary and unary ops, `mul.wide`, `mad`.
//!
//! Values are computed on 64-bit lanes sign- or zero-extended from the instruction's type
//! and truncated back when written, so one routine serves 16, 32 and 64 bits.

use crate::exec::warp::{each, Lanes32, Lanes64, Uniforms, Warp, LANES};
use crate::ir::{BinOp, Reg, Src, Ty, UnOp};

/// `mul.wide`: the full product, written at twice the source width.
#[inline]
pub fn mul_wide(w: &mut Warp, ty: Ty, d: Reg, a: &Src, b: &Src, mask: u32, u: &Uniforms) {
    let (x, y) = (w.read_ext(a, ty, u), w.read_ext(b, ty, u));
    let out: Lanes64 = each(|l| x[l].wrapping_mul(y[l]));
    let wide = if ty.bytes() == 2 { Ty::B32 } else { Ty::B64 };
    w.write_ty(d, wide, &out, mask);
}

/// `mad.lo` / `mad.hi` / `mad.wide`: a·b + c, the product's low or high half (or all of it
/// at twice the width).
#[inline]
#[allow(clippy::too_many_arguments)]
pub fn mad(
    w: &mut Warp,
    ty: Ty,
    hi: bool,
    wide: bool,
    d: Reg,
    a: &Src,
    b: &Src,
    c: &Src,
    mask: u32,
    u: &Uniforms,
) {
    let (x, y) = (w.read_ext(a, ty, u), w.read_ext(b, ty, u));
    let out_ty = if wide { wide_type(ty) } else { ty };
    let z = w.read_ext(c, out_ty, u);
    let out: Lanes64 = each(|l| {
        let product = if hi {
            mul_hi(x[l], y[l], ty)
        } else {
            x[l].wrapping_mul(y[l])
        };
        product.wrapping_add(z[l])
    });
    w.write_ty(d, out_ty, &out, mask);
}

fn wide_type(ty: Ty) -> Ty {
    match ty {
        Ty::S16 => Ty::S32,
        Ty::U16 | Ty::B16 => Ty::U32,
        Ty::S32 => Ty::S64,
        _ => Ty::U64,
    }
}

fn mul_hi(a: u64, b: u64, ty: Ty) -> u64 {
    let bits = ty.bytes() * 8;
    if bits == 64 {
        if ty.is_signed() {
            ((i128::from(a as i64) * i128::from(b as i64)) >> 64) as u64
        } else {
            ((u128::from(a) * u128::from(b)) >> 64) as u64
        }
    } else if ty.is_signed() {
        ((a as i64).wrapping_mul(b as i64) >> bits) as u64
    } else {
        a.wrapping_mul(b) >> bits
    }
}

/// Integer binary op on values extended from `ty`.
#[inline]
fn int_bin(op: BinOp, ty: Ty, a: u64, b: u64) -> u64 {
    let bits = u64::from(ty.bytes() * 8);
    let signed = ty.is_signed();
    match op {
        BinOp::Add => a.wrapping_add(b),
        BinOp::Sub => a.wrapping_sub(b),
        BinOp::MulLo => a.wrapping_mul(b),
        BinOp::MulHi => mul_hi(a, b, ty),
        BinOp::Min if signed => (a as i64).min(b as i64) as u64,
        BinOp::Max if signed => (a as i64).max(b as i64) as u64,
        BinOp::Min => a.min(b),
        BinOp::Max => a.max(b),
        BinOp::And => a & b,
        BinOp::Or => a | b,
        BinOp::Xor => a ^ b,
        BinOp::Shl => {
            if b >= bits {
                0
            } else {
                a << b
            }
        }
        BinOp::Shr if signed => ((a as i64) >> b.min(63)) as u64,
        BinOp::Shr => {
            if b >= bits {
                0
            } else {
                a >> b
            }
        }
        // Division by zero has no defined result in PTX: all ones here, never a trap.
        BinOp::Div if b == 0 => u64::MAX,
        BinOp::Rem if b == 0 => a,
        BinOp::Div if signed => (a as i64).wrapping_div(b as i64) as u64,
        BinOp::Rem if signed => (a as i64).wrapping_rem(b as i64) as u64,
        BinOp::Div => a / b,
        BinOp::Rem => a % b,
    }
}

/// A binary op on an integer type (f32 has its own path; other floats are an error).
#[allow(clippy::too_many_arguments)]
pub fn binary(
    w: &mut Warp,
    op: BinOp,
    ty: Ty,
    d: Reg,
    a: &Src,
    b: &Src,
    mask: u32,
    u: &Uniforms,
) -> Result<(), String> {
    if ty.is_float() {
        return Err(format!("{op:?} on {ty:?} is not simulated"));
    }
    if ty.bytes() == 4 && matches!(op, BinOp::Add | BinOp::Sub | BinOp::And | BinOp::Or) {
        // Width-independent ops straight on 32-bit lanes.
        let (x, y) = (w.read32(a, u), w.read32(b, u));
        let out: Lanes32 = match op {
            BinOp::Add => each(|l| x[l].wrapping_add(y[l])),
            BinOp::Sub => each(|l| x[l].wrapping_sub(y[l])),
            BinOp::And => each(|l| x[l] & y[l]),
            _ => each(|l| x[l] | y[l]),
        };
        w.write32(d, &out, mask);
        return Ok(());
    }
    let x = w.read_ext(a, ty, u);
    let shift = matches!(op, BinOp::Shl | BinOp::Shr);
    let y = if shift {
        w.read_ext(b, Ty::U32, u)
    } else {
        w.read_ext(b, ty, u)
    };
    // Dispatch on the operation once, then one loop over the lanes (no per-lane match).
    macro_rules! per_lane {
        ($f:expr) => {{
            let f = $f;
            each::<u64, LANES>(|l| f(x[l], y[l]))
        }};
    }
    let bits = u64::from(ty.bytes() * 8);
    let signed = ty.is_signed();
    let out: Lanes64 = match op {
        BinOp::Add => per_lane!(|a: u64, b: u64| a.wrapping_add(b)),
        BinOp::Sub => per_lane!(|a: u64, b: u64| a.wrapping_sub(b)),
        BinOp::MulLo => per_lane!(|a: u64, b: u64| a.wrapping_mul(b)),
        BinOp::And => per_lane!(|a: u64, b: u64| a & b),
        BinOp::Or => per_lane!(|a: u64, b: u64| a | b),
        BinOp::Xor => per_lane!(|a: u64, b: u64| a ^ b),
        BinOp::Shl => per_lane!(|a: u64, b: u64| if b >= bits { 0 } else { a << b }),
        BinOp::Shr if signed => per_lane!(|a: u64, b: u64| ((a as i64) >> b.min(63)) as u64),
        BinOp::Shr => per_lane!(|a: u64, b: u64| if b >= bits { 0 } else { a >> b }),
        BinOp::Min if signed => per_lane!(|a: u64, b: u64| (a as i64).min(b as i64) as u64),
        BinOp::Max if signed => per_lane!(|a: u64, b: u64| (a as i64).max(b as i64) as u64),
        BinOp::Min => per_lane!(|a: u64, b: u64| a.min(b)),
        BinOp::Max => per_lane!(|a: u64, b: u64| a.max(b)),
        _ => per_lane!(|a: u64, b: u64| int_bin(op, ty, a, b)),
    };
    w.write_ty(d, ty, &out, mask);
    Ok(())
}

/// A unary op on an integer type (f32 has its own path; other floats are an error).
pub fn unary(
    w: &mut Warp,
    op: UnOp,
    ty: Ty,
    d: Reg,
    a: &Src,
    mask: u32,
    u: &Uniforms,
) -> Result<(), String> {
    if ty.is_float() {
        return Err(format!("{op:?} on {ty:?} is not simulated"));
    }
    let bits = ty.bytes() * 8;
    let x = w.read_ext(a, ty, u);
    let width_mask = if bits == 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    };
    let out: Lanes64 = each(|l| {
        let v = x[l];
        match op {
            UnOp::Neg => v.wrapping_neg(),
            UnOp::Abs => (v as i64).wrapping_abs() as u64,
            UnOp::Not => !v,
            UnOp::Popc => u64::from((v & width_mask).count_ones()),
            UnOp::Clz => u64::from((v & width_mask).leading_zeros() - (64 - bits)),
            UnOp::Brev => (v & width_mask).reverse_bits() >> (64 - bits),
            _ => v,
        }
    });
    if !matches!(
        op,
        UnOp::Neg | UnOp::Abs | UnOp::Not | UnOp::Popc | UnOp::Clz | UnOp::Brev
    ) {
        return Err(format!("{op:?} on {ty:?} is not simulated"));
    }
    // popc and clz write a .u32 result whatever the source width.
    let out_ty = if matches!(op, UnOp::Popc | UnOp::Clz) {
        Ty::U32
    } else {
        ty
    };
    w.write_ty(d, out_ty, &out, mask);
    Ok(())
}
