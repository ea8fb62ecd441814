//! What one instruction touches, for ptxas' rewrites: the memory access it makes (if any)
//! and the registers it defines. Shared by the fusion and reuse rules and the alignment
//! analysis.

use crate::ir::{Address, Op, Reg, Space};

/// A memory access's shape: load or store, space, element bytes, vector width, address.
#[derive(Clone, Copy, PartialEq)]
pub(super) struct Access {
    pub(super) store: bool,
    pub(super) space: Space,
    pub(super) elem: u32,
    pub(super) width: u32,
    pub(super) nc: bool,
    pub(super) addr: Address,
}

pub(super) fn access(op: &Op) -> Option<Access> {
    match op {
        Op::Ld {
            space,
            ty,
            nc,
            d,
            addr,
        } => Some(Access {
            store: false,
            space: *space,
            elem: ty.bytes(),
            width: d.len() as u32,
            nc: *nc,
            addr: *addr,
        }),
        Op::St { space, ty, a, addr } => Some(Access {
            store: true,
            space: *space,
            elem: ty.bytes(),
            width: a.len() as u32,
            nc: false,
            addr: *addr,
        }),
        _ => None,
    }
}

/// Registers an operation writes.
pub(super) fn defs(op: &Op) -> Vec<Reg> {
    let mut regs = Vec::new();
    op.each_dest(&mut |r| regs.push(r));
    regs
}
