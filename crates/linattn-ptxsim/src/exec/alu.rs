//! Register-to-register instructions: moves, integer and float arithmetic, conversions,
//! comparisons and selects, for the active lanes of one warp.
//!
//! Integers are computed on 64-bit lanes sign- or zero-extended from the instruction's
//! type and truncated back when written, so one routine serves 16, 32 and 64 bits. f32
//! arithmetic has direct 32-bit paths (the bulk of what the kernels execute).

use std::sync::OnceLock;

use super::float;
use super::warp::{each, Lanes32, Lanes64, Uniforms, Warp, LANES};
use crate::ir::{BinOp, BoolOp, Cmp, FloatMode, IntRounding, Op, Rounding, Ty, UnOp};

type Result = std::result::Result<(), String>;

/// Runs a register-to-register `op` for the lanes of `mask`.
pub fn execute(w: &mut Warp, op: &Op, mask: u32, u: &Uniforms) -> Result {
    match op {
        Op::Mov { ty, d, a } => {
            if *ty == Ty::Pred {
                let bits = w.read_pred(a, u);
                w.write_pred(*d, bits, mask);
            } else {
                let v = w.read_ext(a, *ty, u);
                w.write_ty(*d, *ty, &v, mask);
            }
        }
        Op::Unpack { part_bytes, d, a } => {
            let v = w.read64(a, u);
            let bits = part_bytes * 8;
            for (k, reg) in d.iter().enumerate() {
                let part: Lanes64 = each(|l| {
                    let shifted = v[l] >> (bits * k as u32);
                    if bits == 64 {
                        shifted
                    } else {
                        shifted & ((1u64 << bits) - 1)
                    }
                });
                // `_` sinks are not registers; the parser rejects them, so every reg is real.
                w.write64(*reg, &part, mask);
            }
        }
        Op::Pack { part_bytes, d, a } => {
            let bits = part_bytes * 8;
            let mut out = [0u64; LANES];
            for (k, src) in a.iter().enumerate() {
                let part = w.read64(src, u);
                for l in 0..LANES {
                    out[l] |= (part[l] & ((1u64 << bits) - 1)) << (bits * k as u32);
                }
            }
            w.write64(*d, &out, mask);
        }
        Op::Bin {
            op,
            ty,
            mode,
            d,
            a,
            b,
        } => binary(w, *op, *ty, *mode, *d, a, b, mask, u)?,
        Op::MulWide { ty, d, a, b } => {
            let (x, y) = (w.read_ext(a, *ty, u), w.read_ext(b, *ty, u));
            let out: Lanes64 = each(|l| x[l].wrapping_mul(y[l]));
            let wide = if ty.bytes() == 2 { Ty::B32 } else { Ty::B64 };
            w.write_ty(*d, wide, &out, mask);
        }
        Op::Mad {
            ty,
            hi,
            wide,
            d,
            a,
            b,
            c,
        } => {
            let (x, y) = (w.read_ext(a, *ty, u), w.read_ext(b, *ty, u));
            let out_ty = if *wide { wide_type(*ty) } else { *ty };
            let z = w.read_ext(c, out_ty, u);
            let out: Lanes64 = each(|l| {
                let product = if *hi {
                    mul_hi(x[l], y[l], *ty)
                } else {
                    x[l].wrapping_mul(y[l])
                };
                product.wrapping_add(z[l])
            });
            w.write_ty(*d, out_ty, &out, mask);
        }
        Op::Fma {
            ty,
            mode,
            d,
            a,
            b,
            c,
        } => {
            if *ty != Ty::F32 {
                return Err(format!("fma on {ty:?} is not simulated"));
            }
            let (x, y, z) = (w.read32(a, u), w.read32(b, u), w.read32(c, u));
            let out = fma_lanes(&x, &y, &z, *mode);
            w.write32(*d, &out, mask);
        }
        Op::Un { op, ty, mode, d, a } => unary(w, *op, *ty, *mode, *d, a, mask, u)?,
        Op::Cvt { .. } => convert(w, op, mask, u)?,
        Op::CvtPack { dty, sat, d, a, b } => {
            let (hi, lo) = (w.read32(a, u), w.read32(b, u));
            let narrow = |x: u32| {
                let x = f32::from_bits(x);
                let x = if *sat { float::saturate(x) } else { x };
                u32::from(if *dty == Ty::F16x2 {
                    float::f32_to_f16_bits(x)
                } else {
                    float::f32_to_bf16_bits(x)
                })
            };
            let out: Lanes32 = each(|l| (narrow(hi[l]) << 16) | narrow(lo[l]));
            w.write32(*d, &out, mask);
        }
        Op::Setp {
            cmp,
            ty,
            combine,
            d,
            d_not,
            a,
            b,
        } => {
            let bits = compare(w, *cmp, *ty, a, b, u)?;
            let (value, negated) = match combine {
                None => (bits, !bits),
                Some((bop, c)) => {
                    let c = w.read_pred(c, u);
                    (logic(*bop, bits, c), logic(*bop, !bits, c))
                }
            };
            w.write_pred(*d, value, mask);
            if let Some(q) = d_not {
                w.write_pred(*q, negated, mask);
            }
        }
        Op::Selp { ty, d, a, b, p } => {
            let p = w.read_pred(p, u);
            let (x, y) = (w.read_ext(a, *ty, u), w.read_ext(b, *ty, u));
            let out: Lanes64 = each(|l| if p >> l & 1 != 0 { x[l] } else { y[l] });
            w.write_ty(*d, *ty, &out, mask);
        }
        Op::PredLogic { op, d, a, b } => {
            let bits = logic(*op, w.read_pred(a, u), w.read_pred(b, u));
            w.write_pred(*d, bits, mask);
        }
        Op::PredNot { d, a } => {
            let bits = !w.read_pred(a, u);
            w.write_pred(*d, bits, mask);
        }
        Op::Bfi {
            ty,
            d,
            a,
            b,
            pos,
            len,
        } => {
            let width = ty.bytes() * 8;
            let (x, y) = (w.read64(a, u), w.read64(b, u));
            let (p, n) = (w.read32(pos, u), w.read32(len, u));
            let out: Lanes64 = each(|l| {
                let (p, n) = (p[l] & 0xff, n[l] & 0xff);
                if n == 0 || p >= width {
                    return y[l];
                }
                let n = n.min(width - p);
                let field = if n == 64 { u64::MAX } else { (1u64 << n) - 1 };
                (y[l] & !(field << p)) | ((x[l] & field) << p)
            });
            w.write_ty(*d, *ty, &out, mask);
        }
        Op::Bfe { ty, d, a, pos, len } => {
            let width = ty.bytes() * 8;
            let x = w.read64(a, u);
            let (p, n) = (w.read32(pos, u), w.read32(len, u));
            let out: Lanes64 = each(|l| {
                let (p, n) = (p[l] & 0xff, n[l] & 0xff);
                if n == 0 {
                    return 0;
                }
                let msb = (p + n - 1).min(width - 1);
                let sign = ty.is_signed() && (x[l] >> msb) & 1 != 0;
                let mut out = 0u64;
                for i in 0..n.min(width) {
                    let bit = if p + i < width && p + i <= msb {
                        (x[l] >> (p + i)) & 1
                    } else {
                        u64::from(sign)
                    };
                    out |= bit << i;
                }
                for i in n.min(width)..width {
                    out |= u64::from(sign) << i;
                }
                out
            });
            w.write_ty(*d, *ty, &out, mask);
        }
        other => return Err(format!("{other:?} is not a register instruction")),
    }
    Ok(())
}

fn wide_type(ty: Ty) -> Ty {
    match ty {
        Ty::S16 => Ty::S32,
        Ty::U16 | Ty::B16 => Ty::U32,
        Ty::S32 => Ty::S64,
        _ => Ty::U64,
    }
}

#[inline]
fn logic(op: BoolOp, a: u32, b: u32) -> u32 {
    match op {
        BoolOp::And => a & b,
        BoolOp::Or => a | b,
        BoolOp::Xor => a ^ b,
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

#[allow(clippy::too_many_arguments)]
fn binary(
    w: &mut Warp,
    op: BinOp,
    ty: Ty,
    mode: FloatMode,
    d: crate::ir::Reg,
    a: &crate::ir::Src,
    b: &crate::ir::Src,
    mask: u32,
    u: &Uniforms,
) -> Result {
    if ty == Ty::F32 {
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
            BinOp::Div => each(|l| float::div(f(l).0, f(l).1, mode).to_bits()),
            BinOp::Min => each(|l| float::finish(float::min(f(l).0, f(l).1), mode).to_bits()),
            BinOp::Max => each(|l| float::finish(float::max(f(l).0, f(l).1), mode).to_bits()),
            _ => return Err(format!("{op:?} on f32 is not simulated")),
        };
        w.write32(d, &out, mask);
        return Ok(());
    }
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

#[allow(clippy::too_many_arguments)]
fn unary(
    w: &mut Warp,
    op: UnOp,
    ty: Ty,
    mode: FloatMode,
    d: crate::ir::Reg,
    a: &crate::ir::Src,
    mask: u32,
    u: &Uniforms,
) -> Result {
    if ty == Ty::F32 {
        let x = w.read32(a, u);
        let out: Lanes32 = each(|l| float::unary(op, f32::from_bits(x[l]), mode).to_bits());
        w.write32(d, &out, mask);
        return Ok(());
    }
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

fn compare(
    w: &Warp,
    cmp: Cmp,
    ty: Ty,
    a: &crate::ir::Src,
    b: &crate::ir::Src,
    u: &Uniforms,
) -> std::result::Result<u32, String> {
    let mut bits = 0u32;
    if ty == Ty::F32 {
        let (x, y) = (w.read32(a, u), w.read32(b, u));
        let (mut eq, mut lt, mut nan) = (0u32, 0u32, 0u32);
        for l in 0..LANES {
            let (p, q) = (f32::from_bits(x[l]), f32::from_bits(y[l]));
            eq |= u32::from(p == q) << l;
            lt |= u32::from(p < q) << l;
            nan |= u32::from(p.is_nan() || q.is_nan()) << l;
        }
        // Ordered comparisons are false on NaN; the unordered (…u) ones true.
        return Ok(match cmp {
            Cmp::Eq => eq,
            Cmp::Ne => !eq & !nan,
            Cmp::Lt => lt,
            Cmp::Le => lt | eq,
            Cmp::Gt => !(lt | eq | nan),
            Cmp::Ge => !(lt | nan),
            Cmp::Equ => eq | nan,
            Cmp::Neu => !eq,
            Cmp::Ltu => lt | nan,
            Cmp::Leu => lt | eq | nan,
            Cmp::Gtu => !(lt | eq),
            Cmp::Geu => !lt,
            Cmp::Num => !nan,
            Cmp::Nan => nan,
            _ => return Err(format!("setp.{cmp:?} on a float type")),
        });
    }
    if ty == Ty::F64 {
        let (x, y) = (w.read64(a, u), w.read64(b, u));
        for l in 0..LANES {
            bits |= u32::from(float_cmp(cmp, f64::from_bits(x[l]), f64::from_bits(y[l]))?) << l;
        }
        return Ok(bits);
    }
    if ty.is_float() {
        return Err(format!("setp on {ty:?} is not simulated"));
    }
    let (x, y) = (w.read_ext(a, ty, u), w.read_ext(b, ty, u));
    // Three masks in one pass over the lanes, then the comparison as bit logic on them.
    let (mut eq, mut lt, mut ltu) = (0u32, 0u32, 0u32);
    let signed = ty.is_signed();
    for l in 0..LANES {
        let (p, q) = (x[l], y[l]);
        eq |= u32::from(p == q) << l;
        ltu |= u32::from(p < q) << l;
        lt |= u32::from(if signed {
            (p as i64) < (q as i64)
        } else {
            p < q
        }) << l;
    }
    Ok(match cmp {
        Cmp::Eq => eq,
        Cmp::Ne => !eq,
        Cmp::Lt => lt,
        Cmp::Le => lt | eq,
        Cmp::Gt => !(lt | eq),
        Cmp::Ge => !lt,
        Cmp::Lo => ltu,
        Cmp::Ls => ltu | eq,
        Cmp::Hi => !(ltu | eq),
        Cmp::Hs => !ltu,
        _ => return Err(format!("setp.{cmp:?} on an integer type")),
    })
}

fn float_cmp(cmp: Cmp, p: f64, q: f64) -> std::result::Result<bool, String> {
    let unordered = p.is_nan() || q.is_nan();
    Ok(match cmp {
        Cmp::Eq => p == q,
        Cmp::Ne => !unordered && p != q,
        Cmp::Lt => p < q,
        Cmp::Le => p <= q,
        Cmp::Gt => p > q,
        Cmp::Ge => p >= q,
        Cmp::Equ => unordered || p == q,
        Cmp::Neu => unordered || p != q,
        Cmp::Ltu => unordered || p < q,
        Cmp::Leu => unordered || p <= q,
        Cmp::Gtu => unordered || p > q,
        Cmp::Geu => unordered || p >= q,
        Cmp::Num => !unordered,
        Cmp::Nan => unordered,
        _ => return Err(format!("setp.{cmp:?} on a float type")),
    })
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

/// `cvt` between any two of the scalar types the kernels use.
fn convert(w: &mut Warp, op: &Op, mask: u32, u: &Uniforms) -> Result {
    let Op::Cvt {
        dty,
        sty,
        rounding,
        int_rounding,
        ftz,
        sat,
        d,
        a,
    } = op
    else {
        return Err("not a cvt".into());
    };
    let (dty, sty) = (*dty, *sty);
    if let Some(()) = convert_fast(
        w,
        dty,
        sty,
        *rounding,
        *int_rounding,
        *ftz,
        *sat,
        d,
        a,
        mask,
        u,
    ) {
        return Ok(());
    }
    let x = w.read_ext(a, sty, u);
    let float_mode = FloatMode {
        rounding: rounding.unwrap_or(Rounding::Nearest),
        ftz: *ftz,
        sat: *sat,
    };
    // Source as f64 (exact for every source type here).
    let as_f64 = |bits: u64| -> f64 {
        match sty {
            Ty::F32 => {
                let v = f32::from_bits(bits as u32);
                f64::from(if *ftz { float::flush(v) } else { v })
            }
            Ty::F64 => f64::from_bits(bits),
            Ty::F16 => f64::from(float::f16_bits_to_f32(bits as u16)),
            Ty::Bf16 => f64::from(float::bf16_bits_to_f32(bits as u16)),
            t if t.is_signed() => bits as i64 as f64,
            _ => bits as f64,
        }
    };
    let mut out = [0u64; LANES];
    for l in 0..LANES {
        out[l] = match (dty.is_float(), sty.is_float()) {
            (false, false) => int_to_int(x[l], dty, *sat),
            (false, true) => {
                let v = as_f64(x[l]);
                let r = float::round_integral_f64(v, int_rounding.unwrap_or(IntRounding::Zero));
                float_to_int(r, dty)
            }
            (true, _) => {
                let v = as_f64(x[l]);
                let exact_int =
                    !sty.is_float() && sty.bytes() == 8 && v.abs() >= 9.007_199_254_740_992e15;
                if exact_int && dty != Ty::F64 {
                    // 64-bit integers above 2^53 are not exact in f64: round from the integer.
                    let r = if sty.is_signed() {
                        (x[l] as i64) as f32
                    } else {
                        x[l] as f32
                    };
                    u64::from(r.to_bits())
                } else {
                    float_result(v, dty, float_mode, *int_rounding)?
                }
            }
        };
    }
    w.write_ty(*d, dty, &out, mask);
    Ok(())
}

/// The conversions kernels execute most, each as one loop; `None` for the rest (the
/// general per-lane path handles them).
#[allow(clippy::too_many_arguments)]
fn convert_fast(
    w: &mut Warp,
    dty: Ty,
    sty: Ty,
    rounding: Option<Rounding>,
    int_rounding: Option<IntRounding>,
    ftz: bool,
    sat: bool,
    d: &crate::ir::Reg,
    a: &crate::ir::Src,
    mask: u32,
    u: &Uniforms,
) -> Option<()> {
    let nearest = matches!(rounding, None | Some(Rounding::Nearest));
    match (dty, sty) {
        // Integer widening / narrowing: the read extends by the source type, the write
        // truncates to the destination's.
        (d_ty, s_ty) if !d_ty.is_float() && !s_ty.is_float() && !sat => {
            let x = w.read_ext(a, s_ty, u);
            w.write_ty(*d, d_ty, &x, mask);
        }
        (Ty::F32, Ty::F16) if !ftz => {
            let x = w.read32(a, u);
            let out: Lanes32 = each(|l| float::f16_bits_to_f32(x[l] as u16).to_bits());
            w.write32(*d, &out, mask);
        }
        (Ty::F16, Ty::F32) if nearest && !ftz && !sat && int_rounding.is_none() => {
            let x = w.read32(a, u);
            let out: Lanes32 = each(|l| u32::from(float::f32_to_f16_bits(f32::from_bits(x[l]))));
            w.write32(*d, &out, mask);
        }
        (Ty::Bf16, Ty::F32) if nearest && !ftz && !sat && int_rounding.is_none() => {
            let x = w.read32(a, u);
            let out: Lanes32 = each(|l| u32::from(float::f32_to_bf16_bits(f32::from_bits(x[l]))));
            w.write32(*d, &out, mask);
        }
        (Ty::F32, Ty::S32) if nearest && !sat => {
            let x = w.read32(a, u);
            let out: Lanes32 = each(|l| (x[l] as i32 as f32).to_bits());
            w.write32(*d, &out, mask);
        }
        (Ty::F32, Ty::F32) if int_rounding.is_none() && rounding.is_none() && !ftz => {
            let x = w.read32(a, u);
            let out: Lanes32 = if sat {
                each(|l| float::saturate(f32::from_bits(x[l])).to_bits())
            } else {
                x
            };
            w.write32(*d, &out, mask);
        }
        _ => return None,
    }
    Some(())
}

fn int_to_int(v: u64, dty: Ty, sat: bool) -> u64 {
    if !sat {
        return v;
    }
    let bits = dty.bytes() * 8;
    let v = v as i64;
    if dty.is_signed() {
        let (lo, hi) = (-(1i64 << (bits - 1)), (1i64 << (bits - 1)) - 1);
        v.clamp(lo, hi) as u64
    } else if bits == 64 {
        v.max(0) as u64
    } else {
        v.clamp(0, (1i64 << bits) - 1) as u64
    }
}

/// Float (already rounded to an integral value) → integer, saturating; NaN → 0.
fn float_to_int(v: f64, dty: Ty) -> u64 {
    if v.is_nan() {
        return 0;
    }
    match (dty.bytes(), dty.is_signed()) {
        (8, true) => v as i64 as u64,
        (8, false) => v as u64,
        (4, true) => v as i32 as i64 as u64,
        (4, false) => u64::from(v as u32),
        (2, true) => v as i16 as i64 as u64,
        (2, false) => u64::from(v as u16),
        (_, true) => v as i8 as i64 as u64,
        (_, false) => u64::from(v as u8),
    }
}

fn float_result(
    v: f64,
    dty: Ty,
    mode: FloatMode,
    int_rounding: Option<IntRounding>,
) -> std::result::Result<u64, String> {
    let v = match int_rounding {
        Some(r) => float::round_integral_f64(v, r),
        None => v,
    };
    Ok(match dty {
        Ty::F32 => {
            let r = match mode.rounding {
                Rounding::Zero | Rounding::Down | Rounding::Up => {
                    float::round_f32(v, 0.0, mode.rounding)
                }
                _ => v as f32,
            };
            u64::from(float::finish(r, mode).to_bits())
        }
        Ty::F64 => {
            let r = if mode.sat && !v.is_nan() {
                v.clamp(0.0, 1.0)
            } else if mode.sat {
                0.0
            } else {
                v
            };
            r.to_bits()
        }
        Ty::F16 | Ty::Bf16 => {
            if !matches!(mode.rounding, Rounding::Nearest) {
                return Err("cvt to f16/bf16 is simulated with .rn only".into());
            }
            // f64 → f32 is exact for every f32/f16/bf16 source and for integers up to 2^24;
            // larger integers are far outside f16 range anyway.
            let x = v as f32;
            let x = if mode.sat { float::saturate(x) } else { x };
            u64::from(if dty == Ty::F16 {
                float::f32_to_f16_bits(x)
            } else {
                float::f32_to_bf16_bits(x)
            })
        }
        other => return Err(format!("cvt to {other:?} is not simulated")),
    })
}
