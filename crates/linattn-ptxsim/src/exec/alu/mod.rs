//! Register-to-register instructions: moves, integer and float arithmetic, conversions,
//! comparisons and selects, for the active lanes of one warp.
//!
//! This module dispatches on the operation; each family's semantics is a child module.
//! Integers are computed on 64-bit lanes sign- or zero-extended from the instruction's
//! type and truncated back when written, so one routine serves 16, 32 and 64 bits. f32
//! arithmetic has direct 32-bit paths (the bulk of what the kernels execute).

mod bits;
mod contracted;
mod convert;
mod float_arith;
mod integer;
mod moves;
mod predicate;

use super::warp::{Uniforms, Warp};
use crate::ir::{Op, Ty};

/// Runs a register-to-register `op` for the lanes of `mask`.
pub fn execute(w: &mut Warp, op: &Op, mask: u32, u: &Uniforms) -> Result<(), String> {
    match op {
        Op::Mov { ty, d, a } => moves::mov(w, *ty, *d, a, mask, u),
        Op::Unpack { part_bytes, d, a } => moves::unpack(w, *part_bytes, d, a, mask, u),
        Op::Pack { part_bytes, d, a } => moves::pack(w, *part_bytes, *d, a, mask, u),
        Op::Bin {
            op,
            ty: Ty::F32,
            mode,
            d,
            a,
            b,
        } => float_arith::binary(w, *op, *mode, *d, a, b, mask, u)?,
        Op::Bin {
            op, ty, d, a, b, ..
        } => integer::binary(w, *op, *ty, *d, a, b, mask, u)?,
        Op::MulWide { ty, d, a, b } => integer::mul_wide(w, *ty, *d, a, b, mask, u),
        Op::Mad {
            ty,
            hi,
            wide,
            d,
            a,
            b,
            c,
        } => integer::mad(w, *ty, *hi, *wide, *d, a, b, c, mask, u),
        Op::Fma {
            ty,
            mode,
            d,
            a,
            b,
            c,
        } => float_arith::fma(w, *ty, *mode, *d, a, b, c, mask, u)?,
        Op::FusedMulAdd {
            d,
            a,
            b,
            c,
            negate_product,
            negate_addend,
        } => contracted::fused_mul_add(w, *d, (a, b, c), *negate_product, *negate_addend, mask, u),
        Op::Un {
            op,
            ty: Ty::F32,
            mode,
            d,
            a,
        } => float_arith::unary(w, *op, *mode, *d, a, mask, u),
        Op::Un { op, ty, d, a, .. } => integer::unary(w, *op, *ty, *d, a, mask, u)?,
        Op::Cvt(c) => convert::convert(w, c, mask, u)?,
        Op::CvtPack { dty, sat, d, a, b } => convert::cvt_pack(w, *dty, *sat, *d, a, b, mask, u),
        Op::Setp {
            cmp,
            ty,
            combine,
            d,
            d_not,
            a,
            b,
        } => predicate::setp(w, *cmp, *ty, combine, *d, *d_not, a, b, mask, u)?,
        Op::Selp { ty, d, a, b, p } => predicate::selp(w, *ty, *d, a, b, p, mask, u),
        Op::PredLogic { op, d, a, b } => predicate::pred_logic(w, *op, *d, a, b, mask, u),
        Op::PredNot { d, a } => predicate::pred_not(w, *d, a, mask, u),
        Op::Bfi {
            ty,
            d,
            a,
            b,
            pos,
            len,
        } => bits::bfi(w, *ty, *d, a, b, pos, len, mask, u),
        Op::Bfe { ty, d, a, pos, len } => bits::bfe(w, *ty, *d, a, pos, len, mask, u),
        other => return Err(format!("{other:?} is not a register instruction")),
    }
    Ok(())
}
