//! Bit fields: `bfi` (insert) and `bfe` (extract, sign-filled for signed types).

use crate::exec::warp::{each, Lanes64, Uniforms, Warp};
use crate::ir::{Reg, Src, Ty};

/// `bfi d, a, b, pos, len`: a's low `len` bits inserted into b at `pos`.
#[inline]
#[allow(clippy::too_many_arguments)]
pub fn bfi(
    w: &mut Warp,
    ty: Ty,
    d: Reg,
    a: &Src,
    b: &Src,
    pos: &Src,
    len: &Src,
    mask: u32,
    u: &Uniforms,
) {
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
    w.write_ty(d, ty, &out, mask);
}

/// `bfe d, a, pos, len`: `len` bits of a from `pos`, zero- or sign-extended by `ty`.
#[inline]
#[allow(clippy::too_many_arguments)]
pub fn bfe(w: &mut Warp, ty: Ty, d: Reg, a: &Src, pos: &Src, len: &Src, mask: u32, u: &Uniforms) {
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
    w.write_ty(d, ty, &out, mask);
}
