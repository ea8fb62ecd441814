//! One CTA: its warps under independent thread scheduling, block barriers, warp
//! collectives, and the dispatch of every instruction.
//!
//! Scheduling. Every lane has its own program counter. A warp runs the group of its lanes
//! that share the lowest PC among those that can run (min-PC reconvergence: divergent
//! paths of structured code meet again at their join point), straight-line until a branch,
//! an exit, a barrier or a collective. A lane reaching `bar.sync` parks until every thread of
//! the CTA has; a lane reaching `shfl.sync`, `mma.sync` or `bar.warp.sync` parks until every
//! lane the instruction needs has reached the same instruction. Warps of a CTA run one after
//! another until each parks or exits (in the order `Checks::schedule` picks); then the
//! barrier is released, or, when threads can never meet (some exited, or wait elsewhere),
//! synccheck reports it.

use super::access::{GlobalCheck, LaneFault, MemoryCtx};
use super::alu;
use super::clock::Clocks;
use super::collective;
use super::global_race::{cta_index, CtaShadow, LaunchShadow, Names};
use super::memory::MemoryView;
use super::schedule::Schedule;
use super::shared::SharedMemory;
use super::warp::{each, lanes, Uniforms, Warp, LANES};
use crate::arch::Latencies;
use crate::counters::Counters;
use crate::error::{Checker, Checks, SimError, Site};
use crate::ir::{Instr, Kernel, Op, Src};

/// Everything a CTA needs from its launch.
#[derive(Clone, Copy)]
pub struct LaunchCtx<'a> {
    pub kernel: &'a Kernel,
    pub params: &'a [u8],
    pub memory: &'a MemoryView,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    /// Static + dynamic shared bytes.
    pub shared_bytes: u32,
    pub checks: Checks,
    /// The launch level of globalcheck, when it runs.
    pub globals: Option<&'a LaunchShadow>,
    /// Whether memory counters (sectors, wavefronts, unique sectors) are kept.
    pub count_memory: bool,
    /// The latency model's constants when warp issue clocks are kept (only while counting:
    /// they cost a pass over every instruction's registers).
    pub latency: Option<Latencies>,
    /// How `.approx` functions and `mma` accumulation are computed.
    pub numerics: super::numerics::Numerics,
}

/// One CTA as its warps see it: the launch (a copy, so reading it costs what reading
/// `LaunchCtx` does) and the special registers; `u.ctaid` is the CTA.
struct Cta<'a> {
    launch: LaunchCtx<'a>,
    u: Uniforms,
}

/// Reusable per-host-thread state: warps and shared memory of the CTA being run.
pub struct CtaRunner {
    warps: Vec<Warp>,
    shared: SharedMemory,
    /// The CTA level of globalcheck.
    global: CtaShadow,
    /// Whether a warp yields at every branch (`Schedule::HighestPcFirst`).
    switch_at_branch: bool,
    clocks: Clocks,
    pub counters: Counters,
}

impl CtaRunner {
    pub fn new() -> CtaRunner {
        CtaRunner {
            warps: Vec::new(),
            shared: SharedMemory::new(),
            global: CtaShadow::default(),
            switch_at_branch: false,
            clocks: Clocks::default(),
            counters: Counters::default(),
        }
    }

    /// Runs CTA `cta` of the launch to completion.
    pub fn run(&mut self, ctx: &LaunchCtx<'_>, cta: [u32; 3]) -> Result<(), SimError> {
        let k = ctx.kernel;
        let threads = ctx.block.iter().product::<u32>();
        let nwarps = threads.div_ceil(LANES as u32) as usize;
        let regs = (k.preds, k.regs32, k.regs64);
        while self.warps.len() < nwarps {
            self.warps.push(Warp::new(regs));
        }
        for (i, w) in self.warps.iter_mut().take(nwarps).enumerate() {
            if w.r32.len() != regs.1 as usize
                || w.r64.len() != regs.2 as usize
                || w.preds.len() != regs.0 as usize
            {
                *w = Warp::new(regs);
            }
            w.reset(i as u32, ctx.block);
        }
        self.shared.reset(
            ctx.shared_bytes as usize,
            ctx.checks.racecheck,
            ctx.checks.initcheck,
        );
        self.global.reset();
        let this = Cta {
            launch: *ctx,
            u: Uniforms {
                ntid: ctx.block,
                ctaid: cta,
                nctaid: ctx.grid,
                nwarps: nwarps as u32,
                numerics: ctx.numerics,
            },
        };
        if let Some(latency) = ctx.latency {
            self.clocks.reset(nwarps, regs, latency);
        }
        let mut bar_epoch = 1u32;
        let mut waiting = Vec::new();
        loop {
            match ctx.checks.schedule {
                Schedule::InOrder => {
                    for w in 0..nwarps {
                        self.run_warp(&this, w, bar_epoch, false)?;
                    }
                }
                Schedule::Reversed => {
                    for w in (0..nwarps).rev() {
                        self.run_warp(&this, w, bar_epoch, false)?;
                    }
                }
                Schedule::HighestPcFirst => {
                    self.switch_at_branch = true;
                    let ahead = |w: &Warp| pick_group(w, w.runnable()).0;
                    while let Some(w) = (self.warps[..nwarps].iter())
                        .filter(|w| w.runnable() != 0)
                        .max_by_key(|w| (ahead(w), w.index))
                        .map(|w| w.index as usize)
                    {
                        self.run_warp(&this, w, bar_epoch, true)?;
                    }
                    self.switch_at_branch = false;
                    // Nothing is runnable: report a warp stuck at a collective.
                    for w in 0..nwarps {
                        self.run_warp(&this, w, bar_epoch, false)?;
                    }
                }
            }
            let warps = &mut self.warps[..nwarps];
            if warps.iter().all(|w| w.exited == u32::MAX) {
                if ctx.latency.is_some() {
                    let path = self.clocks.critical_path();
                    let c = &mut self.counters;
                    c.critical_path_cycles = c.critical_path_cycles.max(path);
                }
                return Ok(());
            }
            if ctx.latency.is_some() {
                waiting.clear();
                waiting.extend(
                    warps
                        .iter()
                        .filter(|w| w.barrier != 0)
                        .map(|w| w.index as usize),
                );
            }
            release_barrier(&this, warps)?;
            if ctx.latency.is_some() {
                self.clocks.barrier(&waiting);
            }
            bar_epoch += 1;
        }
    }

    /// Runs warp `w` until all its lanes exited or parked, or with `one_stretch`, one group
    /// of its lanes (until it branches, under `switch_at_branch`).
    fn run_warp(
        &mut self,
        cta: &Cta<'_>,
        w: usize,
        bar_epoch: u32,
        one_stretch: bool,
    ) -> Result<(), SimError> {
        let mut warp = std::mem::replace(&mut self.warps[w], Warp::new((0, 0, 0)));
        let mut result = Ok(());
        loop {
            let runnable = warp.runnable();
            if runnable == 0 {
                if warp.collective != 0 {
                    result = Err(stuck_collective(cta, &warp));
                }
                break;
            }
            let (pc, mask, others_min) = pick_group(&warp, runnable);
            result = self.run_group(cta, &mut warp, bar_epoch, pc, mask, others_min);
            if result.is_err() || one_stretch {
                break;
            }
        }
        self.warps[w] = warp;
        result
    }

    /// Runs the lanes `mask`, all at `pc`, straight-line for as long as they stay together
    /// and no other lane of the warp is at or before their PC. Returns with every lane's
    /// `pc` up to date (lanes that changed PC, parked or exited: pick a new group).
    fn run_group(
        &mut self,
        cta: &Cta<'_>,
        warp: &mut Warp,
        bar_epoch: u32,
        mut pc: u32,
        mask: u32,
        others_min: u32,
    ) -> Result<(), SimError> {
        let (ctx, u) = (&cta.launch, &cta.u);
        let instrs = &ctx.kernel.instrs;
        let set_pc = |warp: &mut Warp, lanes_mask: u32, value: u32| {
            for l in lanes(lanes_mask) {
                warp.pc[l] = value;
            }
        };
        loop {
            let Some(instr) = instrs.get(pc as usize) else {
                // Falling off the end of a kernel is an implicit exit.
                warp.exited |= mask;
                return Ok(());
            };
            let active = match instr.guard {
                None => mask,
                Some((p, negate)) => {
                    let bits = warp.preds[p.index as usize];
                    mask & if negate { !bits } else { bits }
                }
            };
            self.counters.instruction(instr.class, active);
            warp.clock = if ctx.latency.is_some() {
                self.clocks.issue(warp.index as usize, instr)
            } else {
                warp.clock + 1
            };
            if instr.fp32_flops > 0 {
                self.counters.fp32_flops +=
                    u64::from(instr.fp32_flops) * u64::from(active.count_ones());
            }
            match &instr.op {
                Op::Bra { target } => {
                    let target = *target;
                    if active == mask {
                        pc = target;
                    } else if active == 0 {
                        pc += 1;
                    } else {
                        set_pc(warp, active, target);
                        set_pc(warp, mask & !active, pc + 1);
                        return Ok(());
                    }
                    if pc >= others_min || self.switch_at_branch {
                        set_pc(warp, mask, pc);
                        return Ok(());
                    }
                    continue;
                }
                Op::Ret => {
                    warp.exited |= active;
                    if active == mask {
                        return Ok(());
                    }
                }
                Op::BarSync { id } => {
                    self.counters.barriers += 1;
                    let ids = warp.read32(id, u);
                    if let Some(l) = lanes(active).find(|&l| ids[l] != 0) {
                        return Err(synccheck(
                            site(cta, warp, pc, l),
                            format!("bar.sync {} is not simulated (only barrier 0)", ids[l]),
                        ));
                    }
                    warp.barrier |= active;
                    set_pc(warp, active, pc);
                    set_pc(warp, mask & !active, pc + 1);
                    return Ok(());
                }
                Op::WarpSync { mask: m } | Op::Shfl { mask: m, .. } => {
                    let members = uniform_mask(cta, warp, pc, m, active)?;
                    return self.collective(cta, warp, pc, mask, active, members);
                }
                Op::Mma(_) => {
                    // `.sync.aligned`: all 32 lanes of the warp, so a partial last warp
                    // (lanes that do not exist count as exited) can never complete it.
                    return self.collective(cta, warp, pc, mask, active, u32::MAX);
                }
                Op::Ld {
                    space,
                    ty,
                    nc,
                    d,
                    addr,
                } => {
                    let mut mem = self.memory(cta, bar_epoch, pc);
                    if let Err(f) = mem.load(warp, *space, *ty, *nc, d, addr, active) {
                        return Err(dress(cta, warp, pc, f));
                    }
                }
                Op::St { space, ty, a, addr } => {
                    let mut mem = self.memory(cta, bar_epoch, pc);
                    if let Err(f) = mem.store(warp, *space, *ty, a, addr, active) {
                        return Err(dress(cta, warp, pc, f));
                    }
                }
                Op::Atom {
                    space,
                    op,
                    ty,
                    d,
                    addr,
                    b,
                    c,
                } => {
                    let mut mem = self.memory(cta, bar_epoch, pc);
                    let result =
                        mem.atomic(warp, *space, *op, *ty, *d, addr, b, c.as_ref(), active);
                    if let Err(f) = result {
                        return Err(dress(cta, warp, pc, f));
                    }
                }
                Op::Cvta {
                    to_generic,
                    space,
                    d,
                    a,
                } => {
                    let v = warp.read64(a, u);
                    let shared = *space == crate::ir::Space::Shared;
                    let out: [u64; LANES] = each(|l| match (shared, to_generic) {
                        (true, true) => v[l].wrapping_add(super::access::SHARED_WINDOW),
                        (true, false) => v[l].wrapping_sub(super::access::SHARED_WINDOW),
                        (false, _) => v[l],
                    });
                    warp.write64(*d, &out, active);
                }
                op => {
                    if active != 0 {
                        if let Err(message) = alu::execute(warp, op, active, u) {
                            let l = active.trailing_zeros() as usize;
                            return Err(SimError::Launch {
                                kernel: ctx.kernel.name.clone(),
                                reason: format!(
                                    "PTX line {} `{}` (thread {:?}): {message}",
                                    instr.line,
                                    ctx.kernel.text[pc as usize],
                                    thread_of(warp, l)
                                ),
                            });
                        }
                    }
                }
            }
            pc += 1;
            if pc >= others_min {
                set_pc(warp, mask & !warp.exited, pc);
                return Ok(());
            }
            if warp.exited & mask != 0 {
                set_pc(warp, mask & !warp.exited, pc);
                return Ok(());
            }
        }
    }

    fn memory<'a>(&'a mut self, cta: &'a Cta<'a>, bar_epoch: u32, pc: u32) -> MemoryCtx<'a> {
        MemoryCtx {
            global: cta.launch.memory,
            shared: &mut self.shared,
            params: cta.launch.params,
            bar_epoch,
            instr: pc,
            counting: cta.launch.kernel.counting[pc as usize],
            uniforms: &cta.u,
            initcheck: cta.launch.checks.initcheck,
            counters: cta.launch.count_memory.then_some(&mut self.counters),
            globalcheck: cta.launch.globals.map(|launch| GlobalCheck {
                shadow: &mut self.global,
                launch,
                cta: cta_index(cta.u.ctaid, cta.launch.grid),
                names: Names {
                    kernel: cta.launch.kernel,
                    grid: cta.launch.grid,
                    block: cta.launch.block,
                },
            }),
        }
    }

    /// A warp collective at `pc` reached by `active` (of the group `mask`): execute it once
    /// every lane of `members` is there, else park the arrivals.
    fn collective(
        &mut self,
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
                format!(
                    "lane {l} executes a collective whose member mask {members:#010x} excludes it"
                ),
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
                self.counters.mma += 1;
                collective::mma(warp, m.input, &m.d, &m.a, &m.b, &m.c, u)
            }
            _ => {}
        }
        for l in lanes(arrived) {
            warp.pc[l] = pc + 1;
        }
        Ok(())
    }
}

impl Default for CtaRunner {
    fn default() -> Self {
        Self::new()
    }
}

/// The lowest PC among `runnable` lanes, the lanes at it, and the lowest PC of the others.
#[inline]
fn pick_group(warp: &Warp, runnable: u32) -> (u32, u32, u32) {
    let mut min = u32::MAX;
    let mut mask = 0u32;
    let mut second = u32::MAX;
    for l in lanes(runnable) {
        let pc = warp.pc[l];
        if pc < min {
            second = min;
            min = pc;
            mask = 1 << l;
        } else if pc == min {
            mask |= 1 << l;
        } else if pc < second {
            second = pc;
        }
    }
    (min, mask, second)
}

/// The member mask of a collective, which every active lane must give alike.
fn uniform_mask(
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
fn release_barrier(cta: &Cta<'_>, warps: &mut [Warp]) -> Result<(), SimError> {
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

fn stuck_collective(cta: &Cta<'_>, warp: &Warp) -> SimError {
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

fn thread_of(warp: &Warp, lane: usize) -> [u32; 3] {
    [warp.tid[0][lane], warp.tid[1][lane], warp.tid[2][lane]]
}

fn site(cta: &Cta<'_>, warp: &Warp, pc: u32, lane: usize) -> Site {
    let kernel = cta.launch.kernel;
    let instr: Option<&Instr> = kernel.instrs.get(pc as usize);
    Site {
        kernel: kernel.name.clone(),
        line: instr.map_or(0, |i| i.line),
        instruction: kernel.text.get(pc as usize).cloned().unwrap_or_default(),
        cta: cta.u.ctaid,
        thread: thread_of(warp, lane),
    }
}

/// A synccheck fault at `site`: a barrier or collective part of its threads cannot complete.
fn synccheck(site: Site, detail: String) -> SimError {
    SimError::fault(Checker::Synccheck, site, None, detail)
}

fn dress(cta: &Cta<'_>, warp: &Warp, pc: u32, f: LaneFault) -> SimError {
    SimError::fault(f.checker, site(cta, warp, pc, f.lane), f.address, f.detail)
}
