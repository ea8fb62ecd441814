//! Control flow and synchronisation: `bra` to a label, `bar.sync` and `bar.warp.sync`.

use super::parts::Parts;
use crate::error::SimError;
use crate::ir::{Op, Ty};

/// `bra label`.
pub(super) fn decode_bra(p: &Parts<'_>) -> Result<Op, SimError> {
    p.count(1)?;
    let label = p.operand(0)?;
    let target = p
        .scope
        .label(label)
        .ok_or_else(|| p.fail(format!("unknown label {label}")))?;
    Ok(Op::Bra { target })
}

/// `bar.warp.sync mask`, or `bar.sync id` / `barrier.sync id` (without a thread count).
pub(super) fn decode_bar(p: &Parts<'_>) -> Result<Op, SimError> {
    if p.has("warp") {
        p.count(1)?;
        Ok(Op::WarpSync {
            mask: p.src(0, Ty::U32)?,
        })
    } else {
        p.reject(&["arrive", "red"])?;
        if p.operands.len() != 1 {
            return Err(p.fail("bar.sync with a thread count is not simulated"));
        }
        Ok(Op::BarSync {
            id: p.src(0, Ty::U32)?,
        })
    }
}
