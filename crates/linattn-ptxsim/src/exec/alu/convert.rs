//! `cvt` between any two of the scalar types the kernels use (integer widths, f16, bf16,
//! f32, f64, with rounding, flush and saturation modifiers), and the packed f16x2/bf16x2
//! form.

use crate::exec::float;
use crate::exec::warp::{each, Lanes32, Uniforms, Warp, LANES};
use crate::ir::{Cvt, FloatMode, IntRounding, Reg, Rounding, Src, Ty};

/// `cvt.rn.{f16x2,bf16x2}.f32 d, a, b`: a narrowed into the upper half, b into the lower.
#[inline]
#[allow(clippy::too_many_arguments)]
pub fn cvt_pack(
    w: &mut Warp,
    dty: Ty,
    sat: bool,
    d: Reg,
    a: &Src,
    b: &Src,
    mask: u32,
    u: &Uniforms,
) {
    let (hi, lo) = (w.read32(a, u), w.read32(b, u));
    let narrow = |x: u32| {
        let x = f32::from_bits(x);
        let x = if sat { float::saturate(x) } else { x };
        u32::from(if dty == Ty::F16x2 {
            float::f32_to_f16_bits(x)
        } else {
            float::f32_to_bf16_bits(x)
        })
    };
    let out: Lanes32 = each(|l| (narrow(hi[l]) << 16) | narrow(lo[l]));
    w.write32(d, &out, mask);
}

/// `cvt` between any two of the scalar types the kernels use.
pub fn convert(w: &mut Warp, c: &Cvt, mask: u32, u: &Uniforms) -> Result<(), String> {
    if let Some(()) = convert_fast(w, c, mask, u) {
        return Ok(());
    }
    let (dty, sty, int_rounding) = (c.dty, c.sty, c.int_rounding);
    let (a, ftz, sat) = (&c.a, c.ftz, c.sat);
    let x = w.read_ext(a, sty, u);
    let float_mode = FloatMode {
        rounding: c.rounding.unwrap_or(Rounding::Nearest),
        ftz,
        sat,
        contractible: false,
    };
    // Source as f64 (exact for every source type here).
    let as_f64 = |bits: u64| -> f64 {
        match sty {
            Ty::F32 => {
                let v = f32::from_bits(bits as u32);
                f64::from(if ftz { float::flush(v) } else { v })
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
            (false, false) => int_to_int(x[l], dty, sat),
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
                    float_result(v, dty, float_mode, int_rounding)?
                }
            }
        };
    }
    w.write_ty(c.d, dty, &out, mask);
    Ok(())
}

/// The conversions kernels execute most, each as one loop; `None` for the rest (the
/// general per-lane path handles them).
fn convert_fast(w: &mut Warp, c: &Cvt, mask: u32, u: &Uniforms) -> Option<()> {
    let (dty, sty, rounding, int_rounding) = (c.dty, c.sty, c.rounding, c.int_rounding);
    let (d, a, ftz, sat) = (&c.d, &c.a, c.ftz, c.sat);
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
