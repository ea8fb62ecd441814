//! Which `mul.f32` ptxas folds into the `add.f32` / `sub.f32` that use it (FFMA in the
//! SASS), so that a device loading modules as compiled rounds those once, as the hardware
//! does, instead of twice.
//!
//! The rule, read off ptxas 13.0.88 for sm_90 (`-lineinfo` gives each SASS instruction's PTX
//! line; `crates/linattn-cuda/tests/contraction_vs_ptxas.rs` holds it to every kernel
//! variant): a `mul.f32` with no rounding modifier, unguarded, whose result register has
//! no other definition in the kernel and whose every use is one operand of an unguarded or
//! guarded `add.f32` / `sub.f32` without rounding modifier, is contracted into all of them
//! (the FMUL disappears; a product used three times becomes three FFMAs). A product with any
//! other use (a store, an `fma`, a compare) stays an FMUL and its adds stay FADDs, and so does
//! one whose register another path also defines (a φ of the PTX). NVVM has already fused
//! what it saw in one basic block, so what remains are products crossing blocks.
//!
//! The fused instruction reads the product's operands at the add; the rule also requires
//! each register operand of the `mul` to have a single definition, so that they still hold
//! the values the `mul` read.

use std::collections::HashMap;

use crate::ir::{BinOp, FloatMode, Instr, Op, Reg, Src, Ty};

/// One contraction: the add (or sub) at `add` absorbs the product at `mul`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Contraction {
    pub mul: usize,
    pub add: usize,
}

fn plain(mode: &FloatMode) -> bool {
    mode.contractible && !mode.ftz && !mode.sat
}

/// A contractible `mul.f32 d, a, b`: (d, a, b).
fn product(instr: &Instr) -> Option<(Reg, &Src, &Src)> {
    match &instr.op {
        Op::Bin {
            op: BinOp::MulLo,
            ty: Ty::F32,
            mode,
            d,
            a,
            b,
        } if plain(mode) && instr.guard.is_none() => Some((*d, a, b)),
        _ => None,
    }
}

/// A contractible `add.f32` / `sub.f32 d, a, b`: (is_sub, d, a, b).
fn sum(op: &Op) -> Option<(bool, Reg, &Src, &Src)> {
    match op {
        Op::Bin {
            op: op @ (BinOp::Add | BinOp::Sub),
            ty: Ty::F32,
            mode,
            d,
            a,
            b,
        } if plain(mode) => Some((*op == BinOp::Sub, *d, a, b)),
        _ => None,
    }
}

/// Every contraction ptxas makes in `instrs` (see the module comment).
pub fn find(instrs: &[Instr]) -> Vec<Contraction> {
    let mut defs: HashMap<Reg, u32> = HashMap::new();
    let mut uses: HashMap<Reg, Vec<usize>> = HashMap::new();
    for (i, instr) in instrs.iter().enumerate() {
        instr
            .op
            .each_dest(&mut |r| *defs.entry(r).or_default() += 1);
        instr
            .op
            .each_source(&mut |r| uses.entry(r).or_default().push(i));
        if let Some((p, _)) = instr.guard {
            uses.entry(p).or_default().push(i);
        }
    }
    let single_def = |r: &Reg| defs.get(r) == Some(&1);
    let mut found = Vec::new();
    for (m, instr) in instrs.iter().enumerate() {
        let Some((d, a, b)) = product(instr) else {
            continue;
        };
        let operands_fixed = [a, b].iter().all(|s| match s {
            Src::Reg(r) => single_def(r),
            _ => true,
        });
        if !single_def(&d) || !operands_fixed {
            continue;
        }
        let Some(users) = uses.get(&d) else { continue };
        // A register read twice by one instruction appears twice: such an add (d + d) is
        // not one operand's use, and fails the check below.
        let contractible = users.iter().all(|&u| {
            sum(&instrs[u].op)
                .is_some_and(|(_, _, x, y)| (*x == Src::Reg(d)) != (*y == Src::Reg(d)))
                && users.iter().filter(|&&v| v == u).count() == 1
        });
        if contractible {
            found.extend(users.iter().map(|&add| Contraction { mul: m, add }));
        }
    }
    // An add of two contractible products absorbs one (the first operand's), as one FFMA.
    let mut seen = std::collections::HashSet::new();
    found.retain(|c| seen.insert(c.add));
    found
}

/// Rewrites each contracted add into a [`Op::FusedMulAdd`] of its product's operands; the
/// products stay (their results are no longer read). Returns how many adds were rewritten.
pub fn apply(instrs: &mut [Instr]) -> usize {
    let found = find(instrs);
    for c in &found {
        let Some((pd, pa, pb)) = product(&instrs[c.mul]).map(|(d, a, b)| (d, *a, *b)) else {
            continue;
        };
        let Some((is_sub, d, x, y)) = sum(&instrs[c.add].op).map(|(s, d, x, y)| (s, d, *x, *y))
        else {
            continue;
        };
        let product_first = x == Src::Reg(pd);
        let addend = if product_first { y } else { x };
        // x − p = −p + x; p − y = p + (−y); x + p, p + y: no sign.
        let (negate_product, negate_addend) = match (is_sub, product_first) {
            (false, _) => (false, false),
            (true, true) => (false, true),
            (true, false) => (true, false),
        };
        let instr = &mut instrs[c.add];
        instr.op = Op::FusedMulAdd {
            d,
            a: pa,
            b: pb,
            c: addend,
            negate_product,
            negate_addend,
        };
        instr.class = instr.op.class();
        instr.fp32_flops = instr.op.fp32_flops();
    }
    found.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{Bank, Rounding};

    fn f(i: u32) -> Src {
        Src::Reg(reg(i))
    }
    fn reg(i: u32) -> Reg {
        Reg {
            bank: Bank::R32,
            index: i,
        }
    }
    fn mode(contractible: bool) -> FloatMode {
        FloatMode {
            rounding: Rounding::Nearest,
            ftz: false,
            sat: false,
            contractible,
        }
    }
    fn bin(op: BinOp, d: u32, a: Src, b: Src, contractible: bool) -> Instr {
        let op = Op::Bin {
            op,
            ty: Ty::F32,
            mode: mode(contractible),
            d: reg(d),
            a,
            b,
        };
        Instr {
            guard: None,
            class: op.class(),
            fp32_flops: op.fp32_flops(),
            op,
            line: 0,
        }
    }
    fn mov(d: u32) -> Instr {
        let op = Op::Mov {
            ty: Ty::F32,
            d: reg(d),
            a: Src::Imm(0),
        };
        Instr {
            guard: None,
            class: op.class(),
            fp32_flops: 0,
            op,
            line: 0,
        }
    }

    #[test]
    fn a_product_used_only_by_adds_is_contracted_into_each() {
        // r1, r2 defined once; r3 = r1·r2; r5 = r4 − r3; r6 = r3 + r4.
        let mut k = vec![
            mov(1),
            mov(2),
            mov(4),
            bin(BinOp::MulLo, 3, f(1), f(2), true),
            bin(BinOp::Sub, 5, f(4), f(3), true),
            bin(BinOp::Add, 6, f(3), f(4), true),
        ];
        assert_eq!(apply(&mut k), 2);
        assert!(matches!(
            k[4].op,
            Op::FusedMulAdd {
                negate_product: true,
                negate_addend: false,
                ..
            }
        ));
        assert!(matches!(
            k[5].op,
            Op::FusedMulAdd {
                negate_product: false,
                negate_addend: false,
                ..
            }
        ));
        assert_eq!(k[5].fp32_flops, 2);
    }

    #[test]
    fn other_uses_rounding_modifiers_and_phis_keep_the_product() {
        let base = || vec![mov(1), mov(2), mov(4)];
        // Another use (an fma reads r3).
        let mut k = base();
        k.push(bin(BinOp::MulLo, 3, f(1), f(2), true));
        k.push(bin(BinOp::Add, 5, f(3), f(4), true));
        k.push(bin(BinOp::MulLo, 6, f(3), f(4), false));
        assert!(find(&k).is_empty());
        // mul.rn: explicit rounding.
        let mut k = base();
        k.push(bin(BinOp::MulLo, 3, f(1), f(2), false));
        k.push(bin(BinOp::Add, 5, f(3), f(4), true));
        assert!(find(&k).is_empty());
        // add.rn.
        let mut k = base();
        k.push(bin(BinOp::MulLo, 3, f(1), f(2), true));
        k.push(bin(BinOp::Add, 5, f(3), f(4), false));
        assert!(find(&k).is_empty());
        // r3 also defined elsewhere (a φ).
        let mut k = base();
        k.push(mov(3));
        k.push(bin(BinOp::MulLo, 3, f(1), f(2), true));
        k.push(bin(BinOp::Add, 5, f(3), f(4), true));
        assert!(find(&k).is_empty());
        // An operand of the product redefined (its value at the add may differ).
        let mut k = base();
        k.push(bin(BinOp::MulLo, 3, f(1), f(2), true));
        k.push(mov(1));
        k.push(bin(BinOp::Add, 5, f(3), f(4), true));
        assert!(find(&k).is_empty());
    }
}
