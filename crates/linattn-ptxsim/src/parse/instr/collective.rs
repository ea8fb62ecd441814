//! Warp collectives: `shfl.sync` and `mma.sync.aligned.m16n8k16`.

use super::parts::Parts;
use crate::error::SimError;
use crate::ir::{MmaInput, MmaOperands, Op, Reg, ShflMode, Src, Ty};

pub(super) fn decode_shfl(p: &Parts<'_>) -> Result<Op, SimError> {
    if !p.has("sync") {
        return Err(p.fail("shfl without .sync is not simulated (removed in sm_70+)"));
    }
    p.count(5)?;
    let modes = [
        ("up", ShflMode::Up),
        ("down", ShflMode::Down),
        ("bfly", ShflMode::Bfly),
        ("idx", ShflMode::Idx),
    ];
    let mode = (p.pick(&modes)).ok_or_else(|| p.fail("shfl without a mode"))?;
    let (d, pred) = match p.operand(0)?.split_once('|') {
        Some((d, q)) => (p.reg(d)?, Some(p.reg(q)?)),
        None => (p.dst(0)?, None),
    };
    Ok(Op::Shfl {
        mode,
        d,
        p: pred,
        a: p.src(1, Ty::B32)?,
        b: p.src(2, Ty::U32)?,
        c: p.src(3, Ty::U32)?,
        mask: p.src(4, Ty::U32)?,
    })
}

pub(super) fn decode_mma(p: &Parts<'_>) -> Result<Op, SimError> {
    let shape_ok = p.has("sync") && p.has("aligned") && p.has("m16n8k16");
    let layout_ok = p.has("row") && p.has("col");
    let types = p.types();
    let input = match types[..] {
        [Ty::F32, Ty::F16, Ty::F16, Ty::F32] => MmaInput::F16,
        [Ty::F32, Ty::Bf16, Ty::Bf16, Ty::F32] => MmaInput::Bf16,
        _ => return Err(p.fail("only mma .f32.{f16,bf16}.{f16,bf16}.f32 is simulated")),
    };
    if !shape_ok || !layout_ok {
        return Err(p.fail("only mma.sync.aligned.m16n8k16.row.col is simulated"));
    }
    p.count(4)?;
    let regs = |k: usize, n: usize, ty: Ty| -> Result<Vec<Src>, SimError> {
        let v = p.vector(k)?;
        if v.len() != n {
            return Err(p.fail(format!("mma operand {} needs {n} registers", k + 1)));
        }
        v.iter().map(|r| p.src_text(r, ty)).collect()
    };
    let d = p.vector(0)?;
    if d.len() != 4 {
        return Err(p.fail("mma destination needs 4 registers"));
    }
    let d: Vec<Reg> = d.iter().map(|r| p.reg(r)).collect::<Result<_, _>>()?;
    let a = regs(1, 4, Ty::B32)?;
    let b = regs(2, 2, Ty::B32)?;
    let c = regs(3, 4, Ty::F32)?;
    Ok(Op::Mma(Box::new(MmaOperands {
        input,
        d: [d[0], d[1], d[2], d[3]],
        a: [a[0], a[1], a[2], a[3]],
        b: [b[0], b[1]],
        c: [c[0], c[1], c[2], c[3]],
    })))
}
