//! `FusedMulAdd`: a `mul.f32` that ptxas folded into the `add.f32` / `sub.f32` using it
//! (`ptxas/contract.rs`), computed as the FFMA the hardware runs: the exact product and the
//! addend, each sign-flipped as the subtraction needs (exact), rounded once to nearest even.

use crate::exec::float;
use crate::exec::warp::{each, Uniforms, Warp};
use crate::ir::{FloatMode, Reg, Rounding, Src};

const SIGN: u32 = 0x8000_0000;

const RN: FloatMode = FloatMode {
    rounding: Rounding::Nearest,
    ftz: false,
    sat: false,
    contractible: false,
};

#[allow(clippy::too_many_arguments)]
pub fn fused_mul_add(
    w: &mut Warp,
    d: Reg,
    (a, b, c): (&Src, &Src, &Src),
    negate_product: bool,
    negate_addend: bool,
    mask: u32,
    u: &Uniforms,
) {
    let (x, y, z) = (w.read32(a, u), w.read32(b, u), w.read32(c, u));
    let flip = |bits: u32, on: bool| f32::from_bits(if on { bits ^ SIGN } else { bits });
    let out = each(|l| {
        float::fma(
            flip(x[l], negate_product),
            f32::from_bits(y[l]),
            flip(z[l], negate_addend),
            RN,
        )
        .to_bits()
    });
    w.write32(d, &out, mask);
}
