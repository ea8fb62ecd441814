//! Memory instructions: `ld`/`ldu`, `st` (scalar and vector), `atom`/`red`, and the
//! address-space conversion `cvta`.

use super::parts::Parts;
use crate::error::SimError;
use crate::ir::{AtomOp, Op, Space, Ty};

pub(super) fn decode_ld(p: &Parts<'_>) -> Result<Op, SimError> {
    p.count(2)?;
    p.reject(&["local", "const", "tex"])?;
    let ty = p.ty()?;
    let d = vector_operand(p, 0, |r| p.reg(r))?;
    Ok(Op::Ld {
        space: p.space(),
        ty,
        nc: p.has("nc") || p.base == "ldu",
        d,
        addr: p.address(1)?,
    })
}

pub(super) fn decode_st(p: &Parts<'_>) -> Result<Op, SimError> {
    p.count(2)?;
    p.reject(&["local", "const", "param"])?;
    let ty = p.ty()?;
    let a = vector_operand(p, 1, |r| p.src_text(r, ty))?;
    Ok(Op::St {
        space: p.space(),
        ty,
        a,
        addr: p.address(0)?,
    })
}

/// Operand `k`, a register or a `{...}` vector of as many as the `.vN` modifier says, each
/// element resolved by `element`.
fn vector_operand<T>(
    p: &Parts<'_>,
    k: usize,
    element: impl Fn(&str) -> Result<T, SimError>,
) -> Result<Vec<T>, SimError> {
    let elements = (p.vector(k)?.iter())
        .map(|e| element(e))
        .collect::<Result<Vec<_>, _>>()?;
    check_vector(p, elements.len())?;
    Ok(elements)
}

fn check_vector(p: &Parts<'_>, elements: usize) -> Result<(), SimError> {
    let declared = if p.has("v2") {
        2
    } else if p.has("v4") {
        4
    } else if p.has("v8") {
        return Err(p.fail(".v8 accesses are not simulated"));
    } else {
        1
    };
    if declared == elements {
        Ok(())
    } else {
        Err(p.fail(format!("vector width {declared} but {elements} registers")))
    }
}

pub(super) fn decode_atom(p: &Parts<'_>) -> Result<Op, SimError> {
    let ty = p.ty()?;
    let op = p
        .mods
        .iter()
        .find_map(|m| {
            Some(match *m {
                "add" => AtomOp::Add,
                "min" => AtomOp::Min,
                "max" => AtomOp::Max,
                "exch" => AtomOp::Exch,
                "cas" => AtomOp::Cas,
                "and" => AtomOp::And,
                "or" => AtomOp::Or,
                "xor" => AtomOp::Xor,
                "inc" => AtomOp::Inc,
                "dec" => AtomOp::Dec,
                _ => return None,
            })
        })
        .ok_or_else(|| p.fail("atomic without an operation"))?;
    if ty.bytes() != 4 {
        return Err(p.fail("only 32-bit atomics are simulated"));
    }
    // `red` has no destination: operands shift by one.
    let (d, first) = if p.base == "red" {
        (None, 0)
    } else {
        (Some(p.dst(0)?), 1)
    };
    let c = if op == AtomOp::Cas {
        p.count(first + 3)?;
        Some(p.src(first + 2, ty)?)
    } else {
        p.count(first + 2)?;
        None
    };
    let space = p.space();
    if !matches!(space, Space::Global | Space::Shared) {
        return Err(p.fail("atomics are simulated on .global and .shared only"));
    }
    Ok(Op::Atom {
        space,
        op,
        ty,
        d: d.unwrap_or(crate::ir::Reg {
            bank: crate::ir::Bank::R32,
            index: u32::MAX,
        }),
        addr: p.address(first)?,
        b: p.src(first + 1, ty)?,
        c,
    })
}

/// `cvta.to.{global,shared}` and `cvta.{global,shared}`.
pub(super) fn decode_cvta(p: &Parts<'_>) -> Result<Op, SimError> {
    p.count(2)?;
    let space = p.space();
    if !matches!(space, Space::Global | Space::Shared) {
        return Err(p.fail("cvta to or from this space is not simulated"));
    }
    Ok(Op::Cvta {
        to_generic: !p.has("to"),
        space,
        d: p.dst(0)?,
        a: p.src(1, Ty::U64)?,
    })
}
