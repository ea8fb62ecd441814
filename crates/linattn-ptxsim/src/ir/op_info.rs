//! What an operation is to the counters and the issue clocks: its instruction class, its
//! fp32 flops, and the registers it reads and writes.

use super::{Address, BinOp, Op, Reg, Space, Src, Ty, UnOp};
use crate::instr_class::InstrClass;

impl Op {
    /// Its class for the counters.
    pub fn class(&self) -> InstrClass {
        let float = |ty: &Ty| matches!(ty, Ty::F32 | Ty::F64);
        match self {
            Op::Bin {
                op: BinOp::Div, ty, ..
            } if float(ty) => InstrClass::SpecialFunction,
            Op::Bin { ty, .. } | Op::Fma { ty, .. } | Op::Setp { ty, .. } | Op::Selp { ty, .. }
                if float(ty) =>
            {
                InstrClass::Fp32
            }
            Op::FusedMulAdd { .. } => InstrClass::Fp32,
            Op::Un { op, ty, .. } if float(ty) => match op {
                UnOp::Neg | UnOp::Abs => InstrClass::Fp32,
                _ => InstrClass::SpecialFunction,
            },
            Op::Cvt { .. } | Op::CvtPack { .. } | Op::Cvta { .. } => InstrClass::Conversion,
            Op::Mma(_) => InstrClass::Mma,
            Op::Ld { space, .. } => match space {
                Space::Global => InstrClass::GlobalLoad,
                Space::Shared => InstrClass::SharedLoad,
                Space::Param => InstrClass::Integer,
                Space::Generic => InstrClass::GlobalLoad,
            },
            Op::St { space, .. } => match space {
                Space::Shared => InstrClass::SharedStore,
                _ => InstrClass::GlobalStore,
            },
            Op::Atom { .. } => InstrClass::Atomic,
            Op::Shfl { .. } => InstrClass::Shuffle,
            Op::BarSync { .. } | Op::WarpSync { .. } => InstrClass::Barrier,
            Op::Bra { .. } | Op::Ret => InstrClass::Control,
            _ => InstrClass::Integer,
        }
    }

    /// Floating-point operations one active lane performs (fma = 2), for the fp32 roofline;
    /// 0 for everything that is not fp32 arithmetic.
    pub fn fp32_flops(&self) -> u32 {
        match self {
            Op::Fma { ty: Ty::F32, .. } | Op::FusedMulAdd { .. } => 2,
            Op::Bin {
                ty: Ty::F32,
                op: BinOp::Add | BinOp::Sub | BinOp::MulLo | BinOp::Div,
                ..
            } => 1,
            _ => 0,
        }
    }
}

impl Op {
    /// Calls `f` on every register the operation reads (guard predicates are the
    /// instruction's, not the operation's): the issue clocks and ptxas' rewrites read it.
    pub fn each_source(&self, f: &mut impl FnMut(Reg)) {
        let op = self;
        match op {
            Op::Mov { a, .. }
            | Op::Unpack { a, .. }
            | Op::Un { a, .. }
            | Op::PredNot { a, .. }
            | Op::Cvta { a, .. } => src_reg(a, f),
            Op::Cvt(c) => src_reg(&c.a, f),
            Op::Pack { a, .. } | Op::St { a, .. } => {
                for s in a {
                    src_reg(s, f);
                }
                if let Op::St { addr: ad, .. } = op {
                    addr_reg(ad, f);
                }
            }
            Op::Bin { a, b, .. }
            | Op::MulWide { a, b, .. }
            | Op::CvtPack { a, b, .. }
            | Op::PredLogic { a, b, .. } => {
                src_reg(a, f);
                src_reg(b, f);
            }
            Op::Mad { a, b, c, .. } | Op::Fma { a, b, c, .. } | Op::FusedMulAdd { a, b, c, .. } => {
                src_reg(a, f);
                src_reg(b, f);
                src_reg(c, f);
            }
            Op::Setp { a, b, combine, .. } => {
                src_reg(a, f);
                src_reg(b, f);
                if let Some((_, p)) = combine {
                    src_reg(p, f);
                }
            }
            Op::Selp { a, b, p, .. } => {
                src_reg(a, f);
                src_reg(b, f);
                src_reg(p, f);
            }
            Op::Bfi { a, b, pos, len, .. } => {
                src_reg(a, f);
                src_reg(b, f);
                src_reg(pos, f);
                src_reg(len, f);
            }
            Op::Bfe { a, pos, len, .. } => {
                src_reg(a, f);
                src_reg(pos, f);
                src_reg(len, f);
            }
            Op::Ld { addr: ad, .. } => addr_reg(ad, f),
            Op::Atom { addr: ad, b, c, .. } => {
                addr_reg(ad, f);
                src_reg(b, f);
                if let Some(c) = c {
                    src_reg(c, f);
                }
            }
            Op::Bra { .. } | Op::Ret => {}
            Op::BarSync { id } => src_reg(id, f),
            Op::WarpSync { mask } => src_reg(mask, f),
            Op::Shfl { a, b, c, mask, .. } => {
                src_reg(a, f);
                src_reg(b, f);
                src_reg(c, f);
                src_reg(mask, f);
            }
            Op::Mma(m) => {
                for s in m.a.iter().chain(&m.b).chain(&m.c) {
                    src_reg(s, f);
                }
            }
        }
    }

    /// Calls `f` on every register the operation writes (the issue clocks and ptxas'
    /// rewrites both read it).
    pub fn each_dest(&self, f: &mut impl FnMut(Reg)) {
        match self {
            Op::Mov { d, .. }
            | Op::Pack { d, .. }
            | Op::Bin { d, .. }
            | Op::MulWide { d, .. }
            | Op::Mad { d, .. }
            | Op::Fma { d, .. }
            | Op::FusedMulAdd { d, .. }
            | Op::Un { d, .. }
            | Op::CvtPack { d, .. }
            | Op::Selp { d, .. }
            | Op::PredLogic { d, .. }
            | Op::PredNot { d, .. }
            | Op::Bfi { d, .. }
            | Op::Bfe { d, .. }
            | Op::Cvta { d, .. } => f(*d),
            // `red` has no destination (index u32::MAX).
            Op::Atom { d, .. } => {
                if d.index != u32::MAX {
                    f(*d)
                }
            }
            Op::Cvt(c) => f(c.d),
            Op::Unpack { d, .. } | Op::Ld { d, .. } => {
                for r in d {
                    f(*r);
                }
            }
            Op::Setp { d, d_not, .. } => {
                f(*d);
                if let Some(n) = d_not {
                    f(*n);
                }
            }
            Op::Shfl { d, p, .. } => {
                f(*d);
                if let Some(p) = p {
                    f(*p);
                }
            }
            Op::Mma(m) => {
                for r in m.d {
                    f(r);
                }
            }
            Op::St { .. } | Op::Bra { .. } | Op::Ret | Op::BarSync { .. } | Op::WarpSync { .. } => {
            }
        }
    }
}

fn src_reg(s: &Src, f: &mut impl FnMut(Reg)) {
    if let Src::Reg(r) = s {
        f(*r);
    }
}

fn addr_reg(a: &Address, f: &mut impl FnMut(Reg)) {
    if let Some(r) = a.base {
        f(r);
    }
}
