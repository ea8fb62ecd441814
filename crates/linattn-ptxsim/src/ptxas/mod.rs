//! What ptxas does to a kernel's memory accesses before the hardware counts them.
//!
//! The simulator runs PTX; Nsight Compute counts the SASS ptxas makes of it. For the memory
//! counters two of ptxas' rewrites matter, both read off the SASS (`nvdisasm` of the cubin
//! NVRTC 13.0 builds for sm_90) of the kernels the H100 run of 2026-11-25 profiled
//! (bench-results/h100), and both needed for the simulator's counters to equal its:
//!
//! * **Vectorisation.** Accesses of one space through one base register (or one symbol) at
//!   adjacent offsets, in one basic block with nothing between them that could alias, become
//!   one access of twice the width when ptxas can prove it aligned to that width, and again,
//!   up to 16 bytes: `st.global.f32 [r]; st.global.f32 [r+4]` → `STG.E.64` in
//!   cc_forward_state (NVVM had split one `float2` store of the fragment; the `.v2` stores
//!   through the same `r` tell ptxas it is 8-aligned), `ld.shared.f32 [r]; [r+4]` → `LDS.64`
//!   in the z⁰ dot product of cc_forward, `ld.shared.f32 [vs]; [vs+4]; [vs+8]; [vs+12]` →
//!   `LDS.128` in nc_accumulate. The group then takes one request and the sectors (or
//!   wavefronts) of one access of its width.
//! * **Redundant shared loads.** NVVM loads some mma fragments from shared memory twice
//!   (cc_forward's A fragments of q̃: once for q̃k̃ᵀ, once more for q̃S⁰, through the same
//!   address register, `asm volatile` mma.sync between); ptxas loads them once (16 LDS fewer
//!   in the SASS than ld.shared in the PTX; the H100 counted 16 wavefronts per warp fewer).
//!   A shared load whose address register and offset repeat an earlier load that dominates it, with no shared store,
//!   atomic, barrier or redefinition of the register on any path between, is not counted.
//!   A path between is one from the earlier load to the later that does not run the earlier
//!   one again: in a loop holding both, what runs after the later load and before the next
//!   trip's earlier one (a barrier at the top of the body) does not separate them. The
//!   chunk walks of causal_chunked.cu load one mma operand twice per chunk (the split's hi
//!   and lo passes: cc_forward_h's A fragments, cc_backward_h's B); the SASS has no LDS for
//!   the second, and the H100 run of 2026-11-26 counted 16 (32) wavefronts per warp and
//!   chunk fewer than when every path around the loop counted.
//!
//! Alignment is what ptxas can prove: trailing zero bits of each register through the
//! integer arithmetic that builds addresses (flow-insensitive, the weakest over all of a
//! register's definitions), raised where a vector access through a once-defined register
//! requires it (PTX: a `.vN` access is aligned to its whole size). Warp instruction counts are
//! left as PTX counts them; only the memory counters follow this plan.

mod align;
mod cfg;
pub mod contract;
mod operands;

pub use crate::ir::Counting;
use crate::ir::{Instr, Op, Reg, Space};
use align::Alignment;
use cfg::Cfg;
use operands::{access, defs, Access};

/// The counting plan of a kernel's instructions, one entry per instruction.
pub fn plan(instrs: &[Instr]) -> Vec<Counting> {
    let cfg = Cfg::new(instrs);
    let align = Alignment::new(instrs);
    let mut plan = vec![Counting::Own; instrs.len()];
    reuse_shared_loads(instrs, &cfg, &mut plan);
    fuse_adjacent(instrs, &cfg, &align, &mut plan);
    plan
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

/// Marks shared loads ptxas serves from registers (see the module docs).
fn reuse_shared_loads(instrs: &[Instr], cfg: &Cfg, plan: &mut [Counting]) {
    let loads: Vec<(usize, Access)> = instrs
        .iter()
        .enumerate()
        .filter(|(_, ins)| ins.guard.is_none())
        .filter_map(|(i, ins)| Some((i, access(&ins.op)?)))
        .filter(|(_, a)| !a.store && a.space == Space::Shared)
        .collect();
    for (k, &(j, later)) in loads.iter().enumerate() {
        // No base register: a symbol's fixed address.
        let base = later.addr.base;
        let earlier = loads[..k].iter().find(|&&(i, a)| {
            plan[i] != Counting::Reused
                && a == later
                // `ld [%r] -> %r` (a pointer chase) moves its own base.
                && !base.is_some_and(|r| defs(&instrs[i].op).contains(&r))
                && cfg.dominates(i, j)
                && cfg.between(i, j).iter().all(|&(s, e)| {
                    instrs[s..e].iter().all(|x| {
                        !clobbers(&x.op, Space::Shared)
                            && !base.is_some_and(|r| defs(&x.op).contains(&r))
                    })
                })
        });
        if earlier.is_some() {
            plan[j] = Counting::Reused;
        }
    }
}

/// Accesses ptxas issues as one: instructions of one block, adjacent addresses.
struct Unit {
    members: Vec<usize>,
    first: usize,
    last: usize,
    /// Lowest offset from the base register, and the bytes per lane from there.
    low: i64,
    bytes: u32,
}

/// Joins adjacent accesses into ones of twice the width, up to 16 bytes (scalars into pairs,
/// pairs, fused or `.v2`, into quads; see the module docs).
fn fuse_adjacent(instrs: &[Instr], cfg: &Cfg, align: &Alignment, plan: &mut [Counting]) {
    let shape = |i: usize| {
        let a = access(&instrs[i].op)?;
        let fusable = plan[i] == Counting::Own
            && matches!(a.space, Space::Shared | Space::Global)
            && a.elem * a.width <= 8;
        fusable.then_some((a, instrs[i].guard))
    };
    let mut units: Vec<Unit> = (0..instrs.len())
        .filter_map(|i| {
            let (a, _) = shape(i)?;
            Some(Unit {
                members: vec![i],
                first: i,
                last: i,
                low: a.addr.offset,
                bytes: a.elem * a.width,
            })
        })
        .collect();
    loop {
        let mut joined = false;
        let mut next: Vec<Unit> = Vec::new();
        let mut taken = vec![false; units.len()];
        for u in 0..units.len() {
            if taken[u] {
                continue;
            }
            taken[u] = true;
            let partner = (u + 1..units.len())
                .filter(|&v| !taken[v])
                .find(|&v| joinable(instrs, cfg, align, &shape, &units[u], &units[v]));
            let Some(v) = partner else {
                next.push(std::mem::replace(&mut units[u], empty_unit()));
                continue;
            };
            taken[v] = true;
            joined = true;
            let (a, b) = (&units[u], &units[v]);
            next.push(Unit {
                members: a.members.iter().chain(&b.members).copied().collect(),
                first: a.first.min(b.first),
                last: a.last.max(b.last),
                low: a.low.min(b.low),
                bytes: 2 * a.bytes,
            });
        }
        next.sort_by_key(|u| u.first);
        units = next;
        if !joined {
            break;
        }
    }
    for u in units.iter().filter(|u| u.members.len() > 1) {
        let lead = u.first;
        let offset = access(&instrs[lead].op).map_or(0, |a| a.addr.offset);
        plan[lead] = Counting::Fused {
            delta: u.low - offset,
            bytes: u.bytes,
        };
        for &m in u.members.iter().filter(|&&m| m != lead) {
            plan[m] = Counting::Folded;
        }
    }
}

fn empty_unit() -> Unit {
    Unit {
        members: Vec::new(),
        first: 0,
        last: 0,
        low: 0,
        bytes: 0,
    }
}

/// Whether units `a` and `b` (`b` starting later) join: same kind of access through the same
/// base under the same guard, adjacent, the pair aligned to its width as far as ptxas can
/// prove, in one block, and nothing between them that may alias or moves the base.
fn joinable(
    instrs: &[Instr],
    cfg: &Cfg,
    align: &Alignment,
    shape: &impl Fn(usize) -> Option<(Access, Option<(Reg, bool)>)>,
    a: &Unit,
    b: &Unit,
) -> bool {
    let (Some((x, gx)), Some((y, gy))) = (shape(a.first), shape(b.first)) else {
        return false;
    };
    let bytes = 2 * a.bytes;
    let same = (x.store, x.space, x.elem, x.nc, x.addr.base, gx)
        == (y.store, y.space, y.elem, y.nc, y.addr.base, gy);
    // No base register: a symbol's address, its offset all there is to align.
    let base = x.addr.base;
    if !same
        || a.bytes != b.bytes
        || bytes > 16
        || (a.low - b.low).abs() != i64::from(a.bytes)
        || a.low.min(b.low).rem_euclid(i64::from(bytes)) != 0
        || base.is_some_and(|r| align.get(r) < bytes.trailing_zeros())
    {
        return false;
    }
    let (first, last) = (a.first.min(b.first), a.last.max(b.last));
    if cfg.block_of[first] != cfg.block_of[last] {
        return false;
    }
    (first + 1..last)
        .filter(|i| !a.members.contains(i) && !b.members.contains(i))
        .all(|i| {
            let op = &instrs[i].op;
            let aliases = match access(op) {
                Some(o) => {
                    (x.store || o.store)
                        && (o.space == x.space
                            || o.space == Space::Generic
                            || x.space == Space::Generic)
                }
                None => clobbers(op, x.space),
            };
            !aliases && !base.is_some_and(|r| defs(op).contains(&r))
        })
}
