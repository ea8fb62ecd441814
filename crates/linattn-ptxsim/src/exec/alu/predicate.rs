//! Predicates: `setp` comparisons (ordered and unordered on floats, signed and unsigned on
//! integers) with their optional combining op, predicate logic, and `selp`.

use crate::exec::warp::{each, Lanes64, Uniforms, Warp, LANES};
use crate::ir::{BoolOp, Cmp, Reg, Src, Ty};

/// `setp`: `d` = a cmp b (combined with `c` when the instruction has `.and`/`.or`/`.xor`),
/// `d_not` the complement's combination.
#[inline]
#[allow(clippy::too_many_arguments)]
pub fn setp(
    w: &mut Warp,
    cmp: Cmp,
    ty: Ty,
    combine: &Option<(BoolOp, Src)>,
    d: Reg,
    d_not: Option<Reg>,
    a: &Src,
    b: &Src,
    mask: u32,
    u: &Uniforms,
) -> Result<(), String> {
    let bits = compare(w, cmp, ty, a, b, u)?;
    let (value, negated) = match combine {
        None => (bits, !bits),
        Some((bop, c)) => {
            let c = w.read_pred(c, u);
            (logic(*bop, bits, c), logic(*bop, !bits, c))
        }
    };
    w.write_pred(d, value, mask);
    if let Some(q) = d_not {
        w.write_pred(q, negated, mask);
    }
    Ok(())
}

/// `selp`: a where the predicate `p` is set, else b.
#[inline]
#[allow(clippy::too_many_arguments)]
pub fn selp(w: &mut Warp, ty: Ty, d: Reg, a: &Src, b: &Src, p: &Src, mask: u32, u: &Uniforms) {
    let p = w.read_pred(p, u);
    let (x, y) = (w.read_ext(a, ty, u), w.read_ext(b, ty, u));
    let out: Lanes64 = each(|l| if p >> l & 1 != 0 { x[l] } else { y[l] });
    w.write_ty(d, ty, &out, mask);
}

/// `and`/`or`/`xor` on predicates.
#[inline]
pub fn pred_logic(w: &mut Warp, op: BoolOp, d: Reg, a: &Src, b: &Src, mask: u32, u: &Uniforms) {
    let bits = logic(op, w.read_pred(a, u), w.read_pred(b, u));
    w.write_pred(d, bits, mask);
}

/// `not` on a predicate.
#[inline]
pub fn pred_not(w: &mut Warp, d: Reg, a: &Src, mask: u32, u: &Uniforms) {
    let bits = !w.read_pred(a, u);
    w.write_pred(d, bits, mask);
}

#[inline]
fn logic(op: BoolOp, a: u32, b: u32) -> u32 {
    match op {
        BoolOp::And => a & b,
        BoolOp::Or => a | b,
        BoolOp::Xor => a ^ b,
    }
}

fn compare(
    w: &Warp,
    cmp: Cmp,
    ty: Ty,
    a: &Src,
    b: &Src,
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
