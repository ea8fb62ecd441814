//! `mov` (scalar, and the vector forms that split or join a register) and `cvt`.

use super::parts::Parts;
use crate::error::SimError;
use crate::ir::{Cvt, IntRounding, Op, Rounding, Ty};

pub(super) fn decode_mov(p: &Parts<'_>) -> Result<Op, SimError> {
    let ty = p.typed(2)?;
    let dst = p.vector(0)?;
    let src = p.vector(1)?;
    match (dst.len(), src.len()) {
        (1, 1) => Ok(Op::Mov {
            ty,
            d: p.reg(&dst[0])?,
            a: p.src_text(&src[0], ty)?,
        }),
        (n, 1) => Ok(Op::Unpack {
            part_bytes: ty.bytes() / n as u32,
            d: dst.iter().map(|d| p.reg(d)).collect::<Result<_, _>>()?,
            a: p.src_text(&src[0], ty)?,
        }),
        (1, n) => {
            let part_ty = match ty.bytes() / n as u32 {
                1 => Ty::B8,
                2 => Ty::B16,
                4 => Ty::B32,
                _ => return Err(p.fail("bad vector mov")),
            };
            Ok(Op::Pack {
                part_bytes: part_ty.bytes(),
                d: p.reg(&dst[0])?,
                a: src
                    .iter()
                    .map(|s| p.src_text(s, part_ty))
                    .collect::<Result<_, _>>()?,
            })
        }
        _ => Err(p.fail("bad vector mov")),
    }
}

pub(super) fn decode_cvt(p: &Parts<'_>) -> Result<Op, SimError> {
    let types = p.types();
    let [dty, sty] = types[..] else {
        return Err(p.fail("cvt needs a destination and a source type"));
    };
    let mode = p.float_mode()?;
    let int_rounding = p.mods.iter().find_map(|m| match *m {
        "rni" => Some(IntRounding::Nearest),
        "rzi" => Some(IntRounding::Zero),
        "rmi" => Some(IntRounding::Down),
        "rpi" => Some(IntRounding::Up),
        _ => None,
    });
    let rounding = p
        .mods
        .iter()
        .any(|m| matches!(*m, "rn" | "rz" | "rm" | "rp"))
        .then_some(mode.rounding);
    if matches!(dty, Ty::F16x2 | Ty::Bf16x2) {
        p.count(3)?;
        if rounding != Some(Rounding::Nearest) {
            return Err(p.fail("packed cvt is simulated with .rn only"));
        }
        let (d, [a, b]) = p.dst_srcs(sty)?;
        let sat = mode.sat;
        return Ok(Op::CvtPack { dty, sat, d, a, b });
    }
    p.count(2)?;
    let (d, [a]) = p.dst_srcs(sty)?;
    Ok(Op::Cvt(Cvt {
        dty,
        sty,
        rounding,
        int_rounding,
        ftz: mode.ftz,
        sat: mode.sat,
        d,
        a,
    }))
}
