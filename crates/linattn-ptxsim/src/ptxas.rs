//! What ptxas does to a kernel's memory accesses before the hardware counts them.
//!
//! The simulator runs PTX; Nsight Compute counts the SASS ptxas makes of it. For the memory
//! counters two of ptxas' rewrites matter, both read off the SASS (`nvdisasm` of the cubin
//! NVRTC 13.0 builds for sm_90) of the kernels the H100 run of 2026-11-25 profiled
//! (bench-results/h100), and both needed for the simulator's counters to equal its:
//!
//! * **Vectorisation.** Two scalar (or two `.v2`) accesses of one space through one base
//!   register at adjacent offsets, in one basic block with nothing between them that could
//!   alias, become one access of twice the width when ptxas can prove the pair aligned to
//!   it: `st.global.f32 [r]; st.global.f32 [r+4]` → `STG.E.64` in cc_forward_state (NVVM
//!   had split one `float2` store of the fragment; the `.v2` stores through the same `r`
//!   tell ptxas it is 8-aligned), `ld.shared.f32 [r]; ld.shared.f32 [r+4]` → `LDS.64` in the
//!   z⁰ dot product of cc_forward. The pair then takes one request and the sectors (or
//!   wavefronts) of one 8-byte access, not two.
//! * **Redundant shared loads.** NVVM reloads an mma fragment from shared memory it already
//!   loaded (the `asm volatile` of `mma.sync` between them); ptxas knows the asm touches no
//!   memory and reuses the registers: cc_forward's A fragments of q̃ are loaded once for
//!   q̃k̃ᵀ and once more for q̃S⁰ in the PTX, once in the SASS. A shared load whose address
//!   register and offset repeat an earlier load that dominates it, with no shared store,
//!   atomic, barrier or redefinition of the register on any path between, is not counted.
//!
//! Alignment is what ptxas can prove: trailing zero bits of each register through the
//! integer arithmetic that builds addresses (flow-insensitive, the weakest over all of a
//! register's definitions), raised where a vector access through a once-defined register
//! requires it (PTX: a `.vN` access is aligned to its whole size). Warp instruction counts are
//! left as PTX counts them; only the memory counters follow this plan.

use crate::ir::{Address, Bank, BinOp, Instr, Op, Reg, Space, Src};

/// How one instruction's memory access is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counting {
    /// As it stands.
    Own,
    /// For itself and a later partner, as one access of `bytes` per lane at this
    /// instruction's lane addresses plus `delta` (the lower of the two).
    Fused { delta: i64, bytes: u32 },
    /// Counted by the earlier instruction it was fused with.
    Folded,
    /// A shared load ptxas drops (its value is already in registers).
    Reused,
}

/// The counting plan of a kernel's instructions, one entry per instruction.
pub fn plan(instrs: &[Instr]) -> Vec<Counting> {
    let cfg = Cfg::new(instrs);
    let align = Alignment::new(instrs);
    let mut plan = vec![Counting::Own; instrs.len()];
    reuse_shared_loads(instrs, &cfg, &mut plan);
    fuse_adjacent(instrs, &cfg, &align, &mut plan);
    plan
}

/// A memory access's shape: load or store, space, element bytes, vector width, address.
#[derive(Clone, Copy, PartialEq)]
struct Access {
    store: bool,
    space: Space,
    elem: u32,
    width: u32,
    nc: bool,
    addr: Address,
}

fn access(op: &Op) -> Option<Access> {
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
fn defs(op: &Op) -> Vec<Reg> {
    match op {
        Op::Mov { d, .. }
        | Op::Pack { d, .. }
        | Op::Bin { d, .. }
        | Op::MulWide { d, .. }
        | Op::Mad { d, .. }
        | Op::Fma { d, .. }
        | Op::Un { d, .. }
        | Op::CvtPack { d, .. }
        | Op::Selp { d, .. }
        | Op::PredLogic { d, .. }
        | Op::PredNot { d, .. }
        | Op::Bfi { d, .. }
        | Op::Bfe { d, .. }
        | Op::Cvta { d, .. }
        | Op::Atom { d, .. } => vec![*d],
        Op::Cvt(c) => vec![c.d],
        Op::Unpack { d, .. } | Op::Ld { d, .. } => d.clone(),
        Op::Setp { d, d_not, .. } => std::iter::once(*d).chain(*d_not).collect(),
        Op::Shfl { d, p, .. } => std::iter::once(*d).chain(*p).collect(),
        Op::Mma(m) => m.d.to_vec(),
        Op::St { .. } | Op::Bra { .. } | Op::Ret | Op::BarSync { .. } | Op::WarpSync { .. } => {
            Vec::new()
        }
    }
}

/// Whether `op` may change what a load of `space` reads, or order other threads' writes
/// before the next one (barriers).
fn clobbers(op: &Op, space: Space) -> bool {
    let overlaps = |s: &Space| *s == space || *s == Space::Generic || space == Space::Generic;
    match op {
        Op::St { space: s, .. } | Op::Atom { space: s, .. } => overlaps(s),
        Op::BarSync { .. } | Op::WarpSync { .. } => true,
        _ => false,
    }
}

/// Basic blocks, their successors, dominators and reachability.
struct Cfg {
    /// Block of each instruction, and each block's instruction range.
    block_of: Vec<usize>,
    ranges: Vec<(usize, usize)>,
    /// `dom[b]` has bit a when block a dominates b.
    dom: Vec<Vec<u64>>,
    /// `reach[a]` has bit b when b can be reached from a along at least one edge.
    reach: Vec<Vec<u64>>,
}

fn bit(set: &[u64], i: usize) -> bool {
    set[i / 64] >> (i % 64) & 1 == 1
}

fn set_bit(set: &mut [u64], i: usize) {
    set[i / 64] |= 1 << (i % 64);
}

impl Cfg {
    fn new(instrs: &[Instr]) -> Cfg {
        let n = instrs.len();
        let mut leader = vec![false; n + 1];
        leader[0] = true;
        for (i, ins) in instrs.iter().enumerate() {
            match ins.op {
                Op::Bra { target } => {
                    leader[(target as usize).min(n)] = true;
                    leader[i + 1] = true;
                }
                Op::Ret => leader[i + 1] = true,
                _ => {}
            }
        }
        let mut ranges = Vec::new();
        let mut block_of = vec![0; n];
        let mut start = 0;
        for i in 1..=n {
            if leader[i] || i == n {
                if start < i {
                    ranges.push((start, i));
                }
                start = i;
            }
        }
        for (b, &(s, e)) in ranges.iter().enumerate() {
            block_of[s..e].iter_mut().for_each(|x| *x = b);
        }
        let blocks = ranges.len();
        let succ: Vec<Vec<usize>> = ranges
            .iter()
            .map(|&(_, e)| {
                let last = &instrs[e - 1];
                let next = (e < n).then(|| block_of[e]);
                match last.op {
                    Op::Bra { target } => {
                        let t = (target as usize) < n;
                        let to = t.then(|| block_of[target as usize]);
                        match last.guard {
                            None => to.into_iter().collect(),
                            Some(_) => to.into_iter().chain(next).collect(),
                        }
                    }
                    Op::Ret if last.guard.is_none() => Vec::new(),
                    _ => next.into_iter().collect(),
                }
            })
            .collect();
        let words = blocks.div_ceil(64).max(1);
        let mut reach = vec![vec![0u64; words]; blocks];
        for (b, row) in reach.iter_mut().enumerate() {
            let mut stack = succ[b].clone();
            while let Some(x) = stack.pop() {
                if !bit(row, x) {
                    set_bit(row, x);
                    stack.extend(&succ[x]);
                }
            }
        }
        // Dominators, iteratively: dom(entry) = {entry}, dom(b) = {b} ∪ ⋂ dom(preds).
        let mut preds = vec![Vec::new(); blocks];
        for (b, s) in succ.iter().enumerate() {
            for &x in s {
                preds[x].push(b);
            }
        }
        let full = vec![u64::MAX; words];
        let mut dom = vec![full.clone(); blocks];
        if blocks > 0 {
            dom[0] = vec![0; words];
            set_bit(&mut dom[0], 0);
        }
        let mut changed = true;
        while changed {
            changed = false;
            for b in 1..blocks {
                let mut next = if preds[b].is_empty() {
                    vec![0; words]
                } else {
                    full.clone()
                };
                for &p in &preds[b] {
                    next.iter_mut().zip(&dom[p]).for_each(|(x, y)| *x &= y);
                }
                set_bit(&mut next, b);
                if next != dom[b] {
                    dom[b] = next;
                    changed = true;
                }
            }
        }
        Cfg {
            block_of,
            ranges,
            dom,
            reach,
        }
    }

    /// Whether every execution of instruction `j` comes after one of instruction `i`.
    fn dominates(&self, i: usize, j: usize) -> bool {
        let (a, b) = (self.block_of[i], self.block_of[j]);
        if a == b {
            i < j
        } else {
            bit(&self.dom[b], a)
        }
    }

    /// The instructions any path from `i` to `j` (excluding both) may execute: the rest of
    /// `i`'s block, the start of `j`'s, and every block on a path between them.
    fn between(&self, i: usize, j: usize) -> Vec<(usize, usize)> {
        let (a, b) = (self.block_of[i], self.block_of[j]);
        let on_path = |x: usize| bit(&self.reach[a], x) && bit(&self.reach[x], b);
        if a == b && !on_path(a) {
            return vec![(i + 1, j)];
        }
        let mut spans = vec![(i + 1, self.ranges[a].1), (self.ranges[b].0, j)];
        for x in 0..self.ranges.len() {
            if on_path(x) {
                spans.push(self.ranges[x]);
            }
        }
        spans
    }
}

/// Provable alignment (trailing zero bits) of every 32- and 64-bit register.
struct Alignment {
    r32: Vec<u32>,
    r64: Vec<u32>,
}

/// Alignments are tracked up to 2^12 bytes (more than any access needs).
const MAX_TZ: u32 = 12;

impl Alignment {
    fn new(instrs: &[Instr]) -> Alignment {
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
            if def_count.get(base) <= 1 && offset_tz >= need {
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
                    let value = a.transfer(&ins.op);
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

    fn get(&self, r: Reg) -> u32 {
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

    /// Trailing zero bits of what `op` writes, given its operands'.
    fn transfer(&self, op: &Op) -> u32 {
        let t = |s: &Src| self.src(s);
        let v = match op {
            Op::Mov { a, .. } | Op::Cvta { a, .. } => t(a),
            Op::Cvt(c) if !c.dty.is_float() && !c.sty.is_float() => t(&c.a),
            Op::Bin { op, ty, a, b, .. } if !ty.is_float() => match op {
                BinOp::Add | BinOp::Sub | BinOp::Min | BinOp::Max | BinOp::Or | BinOp::Xor => {
                    t(a).min(t(b))
                }
                BinOp::MulLo => t(a) + t(b),
                BinOp::And => t(a).max(t(b)),
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

/// Marks shared loads ptxas serves from registers (see the module docs).
fn reuse_shared_loads(instrs: &[Instr], cfg: &Cfg, plan: &mut [Counting]) {
    let loads: Vec<(usize, Access)> = instrs
        .iter()
        .enumerate()
        .filter(|(_, ins)| ins.guard.is_none())
        .filter_map(|(i, ins)| Some((i, access(&ins.op)?)))
        .filter(|(_, a)| !a.store && a.space == Space::Shared && a.addr.base.is_some())
        .collect();
    for (k, &(j, later)) in loads.iter().enumerate() {
        let Some(base) = later.addr.base else {
            continue;
        };
        let earlier = loads[..k].iter().find(|&&(i, a)| {
            plan[i] != Counting::Reused
                && a == later
                && cfg.dominates(i, j)
                && cfg.between(i, j).iter().all(|&(s, e)| {
                    instrs[s..e]
                        .iter()
                        .all(|x| !clobbers(&x.op, Space::Shared) && !defs(&x.op).contains(&base))
                })
        });
        if earlier.is_some() {
            plan[j] = Counting::Reused;
        }
    }
}

/// Pairs adjacent accesses into one of twice the width (see the module docs).
fn fuse_adjacent(instrs: &[Instr], cfg: &Cfg, align: &Alignment, plan: &mut [Counting]) {
    for i in 0..instrs.len() {
        let Some(a) = access(&instrs[i].op) else {
            continue;
        };
        let Some(base) = a.addr.base else { continue };
        let step = i64::from(a.elem * a.width);
        let bytes = 2 * a.elem * a.width;
        if plan[i] != Counting::Own
            || !matches!(a.space, Space::Shared | Space::Global)
            || bytes > 16
            || align.get(base) < bytes.trailing_zeros()
        {
            continue;
        }
        let (_, end) = cfg.ranges[cfg.block_of[i]];
        for j in i + 1..end {
            let x = &instrs[j];
            let partner = access(&x.op).filter(|b| {
                plan[j] == Counting::Own
                    && x.guard == instrs[i].guard
                    && (b.store, b.space, b.elem, b.width, b.nc)
                        == (a.store, a.space, a.elem, a.width, a.nc)
                    && b.addr.base == Some(base)
                    && (b.addr.offset - a.addr.offset).abs() == step
            });
            if let Some(b) = partner {
                let low = a.addr.offset.min(b.addr.offset);
                if low.rem_euclid(i64::from(bytes)) == 0 {
                    plan[i] = Counting::Fused {
                        delta: low - a.addr.offset,
                        bytes,
                    };
                    plan[j] = Counting::Folded;
                }
                break;
            }
            // Anything that may alias the pair, orders memory, or moves the base ends the
            // search: ptxas would not move one access across it.
            let aliases = match access(&x.op) {
                Some(o) => {
                    (a.store || o.store)
                        && (o.space == a.space
                            || o.space == Space::Generic
                            || a.space == Space::Generic)
                }
                None => clobbers(&x.op, a.space),
            };
            if aliases || defs(&x.op).contains(&base) {
                break;
            }
        }
    }
}
