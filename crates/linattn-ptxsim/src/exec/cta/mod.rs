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
//!
//! This file schedules and dispatches; `rendezvous` holds the barrier and collective rules,
//! `context` the launch a CTA reads and how faults name their site.

mod context;
mod rendezvous;

pub use context::LaunchCtx;
use context::{dress, site, synccheck, thread_of, Cta};
use rendezvous::{collective, release_barrier, stuck_collective, uniform_mask};

use super::access::{GlobalCheck, MemoryCtx};
use super::alu;
use super::clock::Clocks;
use super::global_race::{cta_index, CtaShadow, Names};
use super::schedule::Schedule;
use super::shared::SharedMemory;
use super::warp::{each, lanes, Uniforms, Warp, LANES};
use crate::counters::Counters;
use crate::error::SimError;
use crate::ir::Op;

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
    /// Warp instructions per kernel instruction of the CTA being run, when the launch keeps
    /// them (`LaunchCtx::instr_counts`; empty otherwise).
    instr_counts: Vec<u64>,
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
            instr_counts: Vec::new(),
        }
    }

    /// Runs CTA `cta` of the launch to completion; with `ctx.instr_counts`, adds the CTA's
    /// warp instructions per kernel instruction there (one pass per CTA, not an atomic per
    /// instruction).
    pub fn run(&mut self, ctx: &LaunchCtx<'_>, cta: [u32; 3]) -> Result<(), SimError> {
        self.instr_counts.clear();
        if ctx.instr_counts.is_some() {
            self.instr_counts.resize(ctx.kernel.instrs.len(), 0);
        }
        let result = self.run_cta(ctx, cta);
        if let Some(total) = ctx.instr_counts {
            for (sum, &n) in total.iter().zip(&self.instr_counts) {
                if n > 0 {
                    sum.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
                }
            }
        }
        result
    }

    fn run_cta(&mut self, ctx: &LaunchCtx<'_>, cta: [u32; 3]) -> Result<(), SimError> {
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
                mma: ctx.mma,
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
                    let (path, parts) = self.clocks.critical_path_parts();
                    self.counters.longest_path(path, &parts);
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
            if let Some(n) = self.instr_counts.get_mut(pc as usize) {
                *n += 1;
            }
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
                    return collective(&mut self.counters, cta, warp, pc, mask, active, members);
                }
                Op::Mma(_) => {
                    // `.sync.aligned`: all 32 lanes of the warp, so a partial last warp
                    // (lanes that do not exist count as exited) can never complete it.
                    return collective(&mut self.counters, cta, warp, pc, mask, active, u32::MAX);
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
