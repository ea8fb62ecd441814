//! f32 arithmetic: binary and unary ops and fused multiply-add, on 32-bit lanes (the bulk of
//! what the kernels execute). The rounding, flush and saturation rules are `exec::float`'s;
//! in the pessimistic numerics mode the approximate ones go through `exec::numerics`.

use std::sync::OnceLock;

use crate::exec::float;
use crate::exec::mufu_table;
use crate::exec::numerics::{self, Numerics};
use crate::exec::warp::{each, Lanes32, Uniforms, Warp};
use crate::ir::{BinOp, FloatMode, Reg, Rounding, Src, Ty, UnOp};

/// A binary op on f32; round-to-nearest without ftz or sat uses the host's arithmetic.
#[allow(clippy::too_many_arguments)]
pub fn binary(
    w: &mut Warp,
    op: BinOp,
    mode: FloatMode,
    d: Reg,
    a: &Src,
    b: &Src,
    mask: u32,
    u: &Uniforms,
) -> Result<(), String> {
    let (x, y) = (w.read32(a, u), w.read32(b, u));
    let f = |l: usize| (f32::from_bits(x[l]), f32::from_bits(y[l]));
    let plain = mode.rounding == Rounding::Nearest && !mode.ftz && !mode.sat;
    let out: Lanes32 = match op {
        BinOp::Add if plain => each(|l| (f(l).0 + f(l).1).to_bits()),
        BinOp::Sub if plain => each(|l| (f(l).0 - f(l).1).to_bits()),
        BinOp::MulLo if plain => each(|l| (f(l).0 * f(l).1).to_bits()),
        BinOp::Add => each(|l| float::add(f(l).0, f(l).1, mode).to_bits()),
        BinOp::Sub => each(|l| float::add(f(l).0, -f(l).1, mode).to_bits()),
        BinOp::MulLo => each(|l| float::mul(f(l).0, f(l).1, mode).to_bits()),
        BinOp::Div if u.numerics == Numerics::Pessimistic && numerics::is_approx_div(mode) => {
            each(|l| numerics::pessimistic_div(f(l).0, f(l).1, mode).to_bits())
        }
        BinOp::Div => each(|l| float::div(f(l).0, f(l).1, mode).to_bits()),
        BinOp::Min => each(|l| float::finish(float::min(f(l).0, f(l).1), mode).to_bits()),
        BinOp::Max => each(|l| float::finish(float::max(f(l).0, f(l).1), mode).to_bits()),
        _ => return Err(format!("{op:?} on f32 is not simulated")),
    };
    w.write32(d, &out, mask);
    Ok(())
}

/// A unary op on f32.
pub fn unary(w: &mut Warp, op: UnOp, mode: FloatMode, d: Reg, a: &Src, mask: u32, u: &Uniforms) {
    let x = w.read32(a, u);
    let out: Lanes32 = if u.numerics == Numerics::Pessimistic && numerics::is_approx_unary(op, mode)
    {
        each(|l| numerics::pessimistic_unary(op, f32::from_bits(x[l]), mode).to_bits())
    } else if let Some(tables) = mufu_table::for_numerics(u.numerics) {
        // As-compiled with captured MUFU tables: the GPU's own bits (exec/mufu_table.rs).
        each(|l| tables.unary(op, f32::from_bits(x[l]), mode).to_bits())
    } else {
        each(|l| float::unary(op, f32::from_bits(x[l]), mode).to_bits())
    };
    w.write32(d, &out, mask);
}

/// `fma` / `mad` on floats: a·b + c with one rounding (f32 only).
#[inline]
#[allow(clippy::too_many_arguments)]
pub fn fma(
    w: &mut Warp,
    ty: Ty,
    mode: FloatMode,
    d: Reg,
    a: &Src,
    b: &Src,
    c: &Src,
    mask: u32,
    u: &Uniforms,
) -> Result<(), String> {
    if ty != Ty::F32 {
        return Err(format!("fma on {ty:?} is not simulated"));
    }
    let (x, y, z) = (w.read32(a, u), w.read32(b, u), w.read32(c, u));
    let out = fma_lanes(&x, &y, &z, mode);
    w.write32(d, &out, mask);
    Ok(())
}

/// a·b + c per lane, fused. Uses the host's FMA instruction when it has one (bit-identical:
/// both are IEEE fused multiply-add), else the exact f64 emulation.
fn fma_lanes(a: &Lanes32, b: &Lanes32, c: &Lanes32, mode: FloatMode) -> Lanes32 {
    if mode.rounding == Rounding::Nearest && !mode.ftz && !mode.sat && host_fma() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: host_fma() checked that the CPU has FMA.
        return unsafe { fma_lanes_x86(a, b, c) };
    }
    each(|l| {
        float::fma(
            f32::from_bits(a[l]),
            f32::from_bits(b[l]),
            f32::from_bits(c[l]),
            mode,
        )
        .to_bits()
    })
}

fn host_fma() -> bool {
    static FMA: OnceLock<bool> = OnceLock::new();
    *FMA.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            std::arch::is_x86_feature_detected!("fma")
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    })
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "fma")]
unsafe fn fma_lanes_x86(a: &Lanes32, b: &Lanes32, c: &Lanes32) -> Lanes32 {
    each(|l| {
        f32::from_bits(a[l])
            .mul_add(f32::from_bits(b[l]), f32::from_bits(c[l]))
            .to_bits()
    })
}
