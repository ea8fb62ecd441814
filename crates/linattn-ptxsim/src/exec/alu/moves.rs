//! `mov` of a scalar or predicate, and the vector forms that split a wide register into
//! parts or join parts into one.

use crate::exec::warp::{each, Lanes64, Uniforms, Warp, LANES};
use crate::ir::{Reg, Src, Ty};

/// `mov`: a predicate as lane bits, anything else extended from `ty`.
#[inline]
pub fn mov(w: &mut Warp, ty: Ty, d: Reg, a: &Src, mask: u32, u: &Uniforms) {
    if ty == Ty::Pred {
        let bits = w.read_pred(a, u);
        w.write_pred(d, bits, mask);
    } else {
        let v = w.read_ext(a, ty, u);
        w.write_ty(d, ty, &v, mask);
    }
}

/// `mov.b32 {%rs1, %rs2}, %r` and friends: the parts of `a`, low first.
#[inline]
pub fn unpack(w: &mut Warp, part_bytes: u32, d: &[Reg], a: &Src, mask: u32, u: &Uniforms) {
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

/// `mov.b32 %r, {%rs1, %rs2}`: the parts of `a` concatenated, first = lowest.
#[inline]
pub fn pack(w: &mut Warp, part_bytes: u32, d: Reg, a: &[Src], mask: u32, u: &Uniforms) {
    let bits = part_bytes * 8;
    let mut out = [0u64; LANES];
    for (k, src) in a.iter().enumerate() {
        let part = w.read64(src, u);
        for l in 0..LANES {
            out[l] |= (part[l] & ((1u64 << bits) - 1)) << (bits * k as u32);
        }
    }
    w.write64(d, &out, mask);
}
