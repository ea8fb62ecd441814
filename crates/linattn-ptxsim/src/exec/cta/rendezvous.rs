//! Where the threads of a CTA meet: warp collectives (`shfl.sync`, `mma.sync`,
//! `bar.warp.sync`) run once every member lane has arrived, `bar.sync` releases once every
//! thread of the CTA has, and synccheck reports the rendezvous that can never complete
//! (a member that exited, divergent barriers, disagreeing member masks).

use super::context::{site, synccheck, Cta};
use crate::counters::Counters;
use crate::error::{Checker, SimError};
use crate::exec::collective;
use crate::exec::warp::{lanes, Warp, LANES};
use crate::ir::{Op, Src};

/// A warp collective at `pc` reached by `active` (of the group `mask`): execute it once
/// every lane of `members` is there, else park the arrivals.
pub(super) fn collective(
    counters: &mut Counters,
    cta: &Cta<'_>,
    warp: &mut Warp,
    pc: u32,
    mask: u32,
    active: u32,
    members: u32,
) -> Result<(), SimError> {
    let u = &cta.u;
    let instr = &cta.launch.kernel.instrs[pc as usize];
    // Lanes outside the group that skip it (false guard) just move on.
    for l in lanes(mask & !active) {
        warp.pc[l] = pc + 1;
    }
    if active == 0 {
        return Ok(());
    }
    let parked_here = lanes(warp.collective)
        .filter(|&l| warp.pc[l] == pc)
        .fold(0u32, |m, l| m | 1 << l);
    let arrived = active | parked_here;
    if let Some(l) = lanes(active).find(|&l| members >> l & 1 == 0) {
        return Err(synccheck(
            site(cta, warp, pc, l),
            format!("lane {l} executes a collective whose member mask {members:#010x} excludes it"),
        ));
    }
    let gone = members & warp.exited;
    if gone != 0 {
        let l = active.trailing_zeros() as usize;
        return Err(synccheck(
            site(cta, warp, pc, l),
            format!(
                "lanes {} of member mask {members:#010x} have exited (or do not exist) and \
                 can never reach this collective",
                lane_list(gone)
            ),
        ));
    }
    if members & !arrived != 0 {
        warp.collective |= active;
        for l in lanes(active) {
            warp.pc[l] = pc;
        }
        return Ok(());
    }
    // Everyone is here.
    warp.collective &= !arrived;
    match &instr.op {
        Op::WarpSync { .. } => warp.warp_sync(members),
        Op::Shfl {
            mode,
            d,
            p,
            a,
            b,
            c,
            ..
        } => {
            let stray = collective::shfl(warp, *mode, *d, *p, a, b, c, arrived, members, u);
            if let Some((lane, src)) = stray {
                return Err(synccheck(
                    site(cta, warp, pc, lane as usize),
                    format!(
                        "shfl.sync reads lane {src}, which is not in the member mask \
                         {members:#010x} (undefined value)"
                    ),
                ));
            }
        }
        Op::Mma(m) => {
            counters.mma += 1;
            collective::mma(warp, m.input, &m.d, &m.a, &m.b, &m.c, u)
        }
        _ => {}
    }
    for l in lanes(arrived) {
        warp.pc[l] = pc + 1;
    }
    Ok(())
}
/// The member mask of a collective, which every active lane must give alike.
pub(super) fn uniform_mask(
    cta: &Cta<'_>,
    warp: &Warp,
    pc: u32,
    m: &Src,
    active: u32,
) -> Result<u32, SimError> {
    let values = warp.read32(m, &cta.u);
    let first = active.trailing_zeros() as usize;
    if first >= LANES {
        return Ok(0);
    }
    if let Some(l) = lanes(active).find(|&l| values[l] != values[first]) {
        return Err(synccheck(
            site(cta, warp, pc, l),
            format!(
                "member mask {:#010x} differs from lane {first}'s {:#010x} at the same \
                 collective (not simulated)",
                values[l], values[first]
            ),
        ));
    }
    Ok(values[first])
}

/// Every thread of the CTA that has not exited is parked at a `bar.sync`: check they are at
/// the same one and nobody exited, then let them all go on.
pub(super) fn release_barrier(cta: &Cta<'_>, warps: &mut [Warp]) -> Result<(), SimError> {
    let mut barrier_pc = None;
    for w in warps.iter() {
        if let Some(l) = lanes(w.barrier).next() {
            barrier_pc = Some((w.pc[l], w.index, l));
            break;
        }
    }
    let Some((pc, first_warp, first_lane)) = barrier_pc else {
        return Ok(());
    };
    for w in warps.iter() {
        let present = w.valid & !w.exited;
        if let Some(l) = lanes(w.barrier).find(|&l| w.pc[l] != pc) {
            return Err(synccheck(
                site(cta, w, w.pc[l], l),
                format!(
                    "waits at a different bar.sync than thread {} (PTX line {}): divergent \
                     barrier",
                    first_warp * LANES as u32 + first_lane as u32,
                    cta.launch.kernel.instrs[pc as usize].line
                ),
            ));
        }
        let exited = w.valid & w.exited;
        if exited != 0 {
            let l = exited.trailing_zeros() as usize;
            return Err(SimError::fault(
                Checker::Synccheck,
                site(cta, w, pc, l),
                None,
                format!(
                    "bar.sync is reached by part of the CTA: thread {} (and {} more) exited \
                     before it",
                    w.linear_tid(l),
                    exited.count_ones() - 1
                ),
            ));
        }
        debug_assert_eq!(present & !w.barrier, 0);
    }
    for w in warps.iter_mut() {
        for l in lanes(w.barrier) {
            w.pc[l] = pc + 1;
        }
        w.barrier = 0;
        w.wsync += 1;
    }
    Ok(())
}

pub(super) fn stuck_collective(cta: &Cta<'_>, warp: &Warp) -> SimError {
    let l = warp.collective.trailing_zeros() as usize;
    let pc = warp.pc[l];
    let elsewhere = warp.valid & !warp.exited & !warp.collective;
    let detail = format!(
        "lanes {} wait at this warp collective, but lanes {} are parked elsewhere{}: \
         divergent warp collective",
        lane_list(warp.collective & lanes_at(warp, pc)),
        lane_list(elsewhere | (warp.collective & !lanes_at(warp, pc))),
        if warp.barrier != 0 {
            " (at bar.sync)"
        } else {
            ""
        }
    );
    SimError::fault(Checker::Synccheck, site(cta, warp, pc, l), None, detail)
}

fn lanes_at(warp: &Warp, pc: u32) -> u32 {
    (0..LANES).fold(0, |m, l| m | (u32::from(warp.pc[l] == pc) << l))
}

fn lane_list(mask: u32) -> String {
    let list: Vec<String> = lanes(mask).map(|l| l.to_string()).collect();
    format!("{{{}}}", list.join(","))
}
