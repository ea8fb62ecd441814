//! The alignment ptxas can prove for each register: trailing zero bits through the integer
//! arithmetic that builds addresses (flow-insensitive, the weakest over all of a register's
//! definitions), raised where a vector access through a once-defined register requires it
//! (PTX: a `.vN` access is aligned to its whole size).

use super::operands::{access, defs};
use crate::ir::{Bank, BinOp, Instr, Op, Reg, Src};

/// Provable alignment (trailing zero bits) of every 32- and 64-bit register.
pub(super) struct Alignment {
    r32: Vec<u32>,
    r64: Vec<u32>,
}

/// Alignments are tracked up to 2^12 bytes (more than any access needs).
const MAX_TZ: u32 = 12;

impl Alignment {
    pub(super) fn new(instrs: &[Instr]) -> Alignment {
        let scaled = Alignment::solve(instrs, None);
        Alignment::solve(instrs, Some(&scaled))
    }

    /// The greatest fixpoint over `instrs`; with `scaled` None, the scaled alignment (below).
    fn solve(instrs: &[Instr], scaled: Option<&Alignment>) -> Alignment {
        let size = |bank: Bank| {
            instrs
                .iter()
                .flat_map(|i| defs(&i.op))
                .chain(instrs.iter().filter_map(|i| access(&i.op)?.addr.base))
                .filter(|r| r.bank == bank)
                .map(|r| r.index as usize + 1)
                .max()
                .unwrap_or(0)
        };
        let mut a = Alignment {
            r32: vec![MAX_TZ; size(Bank::R32)],
            r64: vec![MAX_TZ; size(Bank::R64)],
        };
        // Registers never defined here are unknown; registers defined once take what their
        // naturally aligned accesses require.
        let mut def_count = Alignment {
            r32: vec![0; a.r32.len()],
            r64: vec![0; a.r64.len()],
        };
        for r in instrs.iter().flat_map(|i| defs(&i.op)) {
            if let Some(c) = def_count.slot(r) {
                *c += 1;
            }
        }
        let mut floor = Alignment {
            r32: vec![0; a.r32.len()],
            r64: vec![0; a.r64.len()],
        };
        for acc in instrs.iter().filter_map(|i| access(&i.op)) {
            let Some(base) = acc.addr.base else { continue };
            let need = (acc.elem * acc.width).max(1).trailing_zeros();
            let offset_tz = (acc.addr.offset as u64).trailing_zeros().min(MAX_TZ);
            if scaled.is_some() && def_count.get(base) <= 1 && offset_tz >= need {
                if let Some(f) = floor.slot(base) {
                    *f = (*f).max(need);
                }
            }
        }
        for (bank, counts) in [(Bank::R32, &def_count.r32), (Bank::R64, &def_count.r64)] {
            for (index, &c) in counts.iter().enumerate() {
                if c == 0 {
                    let r = Reg {
                        bank,
                        index: index as u32,
                    };
                    let f = floor.get(r);
                    if let Some(x) = a.slot(r) {
                        *x = f;
                    }
                }
            }
        }
        // Greatest fixpoint of tz(r) = max(floor(r), min over r's definitions).
        loop {
            let mut next = Alignment {
                r32: vec![MAX_TZ; a.r32.len()],
                r64: vec![MAX_TZ; a.r64.len()],
            };
            for ins in instrs {
                for d in defs(&ins.op) {
                    let value = a.transfer(&ins.op, scaled);
                    if let Some(x) = next.slot(d) {
                        *x = (*x).min(value);
                    }
                }
            }
            for (bank, counts) in [(Bank::R32, &def_count.r32), (Bank::R64, &def_count.r64)] {
                for (index, &c) in counts.iter().enumerate() {
                    let r = Reg {
                        bank,
                        index: index as u32,
                    };
                    let f = floor.get(r);
                    if let Some(x) = next.slot(r) {
                        *x = if c == 0 { f } else { (*x).max(f) };
                    }
                }
            }
            if next.r32 == a.r32 && next.r64 == a.r64 {
                return a;
            }
            a = next;
        }
    }

    fn slot(&mut self, r: Reg) -> Option<&mut u32> {
        match r.bank {
            Bank::R32 => self.r32.get_mut(r.index as usize),
            Bank::R64 => self.r64.get_mut(r.index as usize),
            Bank::Pred => None,
        }
    }

    pub(super) fn get(&self, r: Reg) -> u32 {
        match r.bank {
            Bank::R32 => self.r32.get(r.index as usize).copied().unwrap_or(0),
            Bank::R64 => self.r64.get(r.index as usize).copied().unwrap_or(0),
            Bank::Pred => 0,
        }
    }

    fn src(&self, s: &Src) -> u32 {
        match s {
            Src::Reg(r) => self.get(*r),
            Src::Imm(v) => v.trailing_zeros().min(MAX_TZ),
            Src::Special(_) => 0,
        }
    }

    /// Trailing zero bits of what `op` writes, given its operands'. With `scaled` (the main
    /// pass), what ptxas keeps through a difference: `a - imm` is `a + (-imm)`, but of
    /// `a - %r` only what %r's scaled alignment says. The scaled alignment (`scaled` None) is
    /// the power of two a register is a multiple of by construction (shifts, multiplies,
    /// sums of such), not through `and`, `or`, `xor`, which a negation does not keep for
    /// ptxas 13.0.88: `64 - (x << 6)` and `64 - 64·x` keep 6 bits (one LDS.64 of a pair at
    /// `4·that`), `64 - (x & -64)`, `64 - (y | 64)`, `(x & -64) - (t & 96)` keep none (two
    /// LDS; cc_backward_h's s_col_max pair at D or M ≥ 128 is the `and` form).
    fn transfer(&self, op: &Op, scaled: Option<&Alignment>) -> u32 {
        let t = |s: &Src| self.src(s);
        let v = match op {
            Op::Mov { a, .. } | Op::Cvta { a, .. } => t(a),
            Op::Cvt(c) if !c.dty.is_float() && !c.sty.is_float() => t(&c.a),
            Op::Bin { op, ty, a, b, .. } if !ty.is_float() => match op {
                BinOp::Add | BinOp::Min | BinOp::Max => t(a).min(t(b)),
                BinOp::Or | BinOp::Xor if scaled.is_some() => t(a).min(t(b)),
                BinOp::Sub => match (b, scaled) {
                    (Src::Reg(r), Some(s)) => t(a).min(s.get(*r)),
                    _ => t(a).min(t(b)),
                },
                BinOp::MulLo => t(a) + t(b),
                BinOp::And if scaled.is_some() => t(a).max(t(b)),
                BinOp::Shl => match b {
                    Src::Imm(k) => t(a) + (*k).min(u64::from(MAX_TZ)) as u32,
                    _ => t(a),
                },
                _ => 0,
            },
            Op::MulWide { a, b, .. } => t(a) + t(b),
            Op::Mad {
                hi: false, a, b, c, ..
            } => (t(a) + t(b)).min(t(c)),
            Op::Selp { a, b, .. } => t(a).min(t(b)),
            _ => 0,
        };
        v.min(MAX_TZ)
    }
}
