//! What every part of a CTA's execution reads: the launch it belongs to, the CTA's own
//! special registers, and how a fault names the thread and instruction it happened at.

use crate::arch::Latencies;
use crate::error::{Checker, Checks, SimError, Site};
use crate::exec::access::LaneFault;
use crate::exec::global_race::LaunchShadow;
use crate::exec::memory::MemoryView;
use crate::exec::numerics::Numerics;
use crate::exec::warp::{Uniforms, Warp};
use crate::ir::{Instr, Kernel};

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
    pub numerics: Numerics,
    /// How `mma` sums.
    pub mma: crate::exec::numerics::MmaModel,
    /// Warp instructions per instruction of the kernel (its index in `kernel.instrs`), summed
    /// over the launch's CTAs, when a profile asks for source lines.
    pub instr_counts: Option<&'a [std::sync::atomic::AtomicU64]>,
}

/// One CTA as its warps see it: the launch (a copy, so reading it costs what reading
/// `LaunchCtx` does) and the special registers; `u.ctaid` is the CTA.
pub(super) struct Cta<'a> {
    pub(super) launch: LaunchCtx<'a>,
    pub(super) u: Uniforms,
}

pub(super) fn thread_of(warp: &Warp, lane: usize) -> [u32; 3] {
    [warp.tid[0][lane], warp.tid[1][lane], warp.tid[2][lane]]
}

pub(super) fn site(cta: &Cta<'_>, warp: &Warp, pc: u32, lane: usize) -> Site {
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
pub(super) fn synccheck(site: Site, detail: String) -> SimError {
    SimError::fault(Checker::Synccheck, site, None, detail)
}

pub(super) fn dress(cta: &Cta<'_>, warp: &Warp, pc: u32, f: LaneFault) -> SimError {
    SimError::fault(f.checker, site(cta, warp, pc, f.lane), f.address, f.detail)
}
