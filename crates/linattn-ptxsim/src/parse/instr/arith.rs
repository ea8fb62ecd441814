//! Register arithmetic: binary and unary ops (integer and float), `mul.wide`, `mad`/`fma`,
//! and the bit-field `bfi`/`bfe`.

use super::parts::Parts;
use crate::error::SimError;
use crate::ir::{BinOp, Op, Ty, UnOp};

pub(super) fn bin_op(base: &str) -> Option<BinOp> {
    Some(match base {
        "add" => BinOp::Add,
        "sub" => BinOp::Sub,
        "mul" => BinOp::MulLo,
        "min" => BinOp::Min,
        "max" => BinOp::Max,
        "and" => BinOp::And,
        "or" => BinOp::Or,
        "xor" => BinOp::Xor,
        "shl" => BinOp::Shl,
        "shr" => BinOp::Shr,
        "div" => BinOp::Div,
        "rem" => BinOp::Rem,
        _ => return None,
    })
}

pub(super) fn un_op(base: &str) -> Option<UnOp> {
    Some(match base {
        "neg" => UnOp::Neg,
        "abs" => UnOp::Abs,
        "not" => UnOp::Not,
        "popc" => UnOp::Popc,
        "clz" => UnOp::Clz,
        "brev" => UnOp::Brev,
        "rcp" => UnOp::Rcp,
        "sqrt" => UnOp::Sqrt,
        "rsqrt" => UnOp::Rsqrt,
        "ex2" => UnOp::Ex2,
        "lg2" => UnOp::Lg2,
        "sin" => UnOp::Sin,
        "cos" => UnOp::Cos,
        "tanh" => UnOp::Tanh,
        _ => return None,
    })
}

/// `add`, `sub`, `mul`, `min`, `max`, logic, shifts, `div`, `rem` (`bin_op` of the base).
pub(super) fn decode_bin(p: &Parts<'_>) -> Result<Op, SimError> {
    let ty = p.typed(3)?;
    let op = match (bin_op(p.base), p.has("hi")) {
        (Some(BinOp::MulLo), true) => BinOp::MulHi,
        (Some(op), _) => op,
        (None, _) => unreachable!("guarded by is_some"),
    };
    // Shift amounts are always .u32.
    let b_ty = if matches!(op, BinOp::Shl | BinOp::Shr) {
        Ty::U32
    } else {
        ty
    };
    let mode = p.float_mode()?;
    let (d, [a]) = p.dst_srcs(ty)?;
    let b = p.src(2, b_ty)?;
    Ok(Op::Bin {
        op,
        ty,
        mode,
        d,
        a,
        b,
    })
}

/// `mul.wide`: 16×16 → 32 or 32×32 → 64.
pub(super) fn decode_mul_wide(p: &Parts<'_>) -> Result<Op, SimError> {
    let ty = p.typed(3)?;
    let (d, [a, b]) = p.dst_srcs(ty)?;
    Ok(Op::MulWide { ty, d, a, b })
}

/// `mad` / `fma`: fused on floats, `.lo`/`.hi`/`.wide` on integers.
pub(super) fn decode_mad(p: &Parts<'_>) -> Result<Op, SimError> {
    let ty = p.typed(4)?;
    let (d, [a, b, c]) = p.dst_srcs(ty)?;
    if ty.is_float() {
        Ok(Op::Fma {
            ty,
            mode: p.float_mode()?,
            d,
            a,
            b,
            c,
        })
    } else {
        let wide = p.has("wide");
        let c = if wide { p.src(3, wide_of(ty))? } else { c };
        Ok(Op::Mad {
            ty,
            hi: p.has("hi"),
            wide,
            d,
            a,
            b,
            c,
        })
    }
}

fn wide_of(ty: Ty) -> Ty {
    match ty {
        Ty::S16 => Ty::S32,
        Ty::U16 => Ty::U32,
        Ty::S32 => Ty::S64,
        _ => Ty::U64,
    }
}

/// `neg`, `abs`, `not`, bit counts and the float functions (`un_op` of the base).
pub(super) fn decode_un(p: &Parts<'_>) -> Result<Op, SimError> {
    let ty = p.typed(2)?;
    let mode = p.float_mode()?;
    let (d, [a]) = p.dst_srcs(ty)?;
    let op = un_op(p.base).unwrap_or(UnOp::Neg);
    Ok(Op::Un { op, ty, mode, d, a })
}

/// `bfi d, a, b, pos, len`.
pub(super) fn decode_bfi(p: &Parts<'_>) -> Result<Op, SimError> {
    let ty = p.typed(5)?;
    let (d, [a, b]) = p.dst_srcs(ty)?;
    Ok(Op::Bfi {
        ty,
        d,
        a,
        b,
        pos: p.src(3, Ty::U32)?,
        len: p.src(4, Ty::U32)?,
    })
}

/// `bfe d, a, pos, len`.
pub(super) fn decode_bfe(p: &Parts<'_>) -> Result<Op, SimError> {
    let ty = p.typed(4)?;
    let (d, [a]) = p.dst_srcs(ty)?;
    Ok(Op::Bfe {
        ty,
        d,
        a,
        pos: p.src(2, Ty::U32)?,
        len: p.src(3, Ty::U32)?,
    })
}
