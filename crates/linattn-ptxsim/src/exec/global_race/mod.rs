//! globalcheck: races on global memory within one launch.
//!
//! Two levels, both per 2-byte half of a 4-byte word (kernels store f16/bf16 elements, so
//! two threads may own the two halves of one word); the launch level is dropped when the
//! launch ends, the CTA level forgotten when the CTA does.
//!
//! * Within a CTA ([`CtaShadow`], one per host thread, reset per CTA): the same tracker and
//!   ordering rules as the shared-memory racecheck ([`super::race`]): `bar.sync` orders the
//!   threads of a CTA (it is a CTA-scope fence too), `bar.warp.sync` the lanes of a warp.
//! * Across CTAs ([`LaunchShadow`], one per launch, shared by the host threads): which CTAs
//!   read, wrote, updated atomically or read through `ld.global.nc` each half. Nothing
//!   orders two CTAs of one launch, so any two accesses of different CTAs conflict unless
//!   both are reads or both are atomics. Fences (`membar`, `fence`) are refused by the
//!   parser, so the "write, fence, atomic flag" handshake cannot occur in simulated PTX: an
//!   atomic of one CTA against a plain access of another is flagged (none of the project's
//!   kernels communicates between CTAs: their only atomic is a shared-memory `atomicMax`).
//! * Two unordered writes of the same value do not conflict (feature_map's fm_favor_exp:
//!   every row of a head stores the head's shift): the half ends up holding it whichever
//!   lands last. A read unordered with either still does.
//! * `ld.global.nc` promises the data is read-only for the whole launch: a store or an
//!   atomic to a half that the launch also reads through `.nc` is flagged, in either order,
//!   whichever thread did it, the same one included.
//!
//! The launch level is dense (see [`launch`]): a half that one CTA alone touches costs its
//! accesses no lock. The CTA level is dense too, in pages of word pairs that a host thread
//! keeps from CTA to CTA; a word's generation stamp says whether this CTA touched it, so a
//! new CTA starts clean without clearing anything.

mod launch;
mod witness;

use std::sync::atomic::Ordering::Relaxed;

pub use launch::LaunchShadow;
use launch::{represented, Located, CTA_PAGE_WORDS};
use witness::breaks_nc;
pub use witness::{GlobalFault, Kind, Witness};

use super::race::{Accessor, Granule, FRESH};
use crate::ir::Kernel;

/// One word pair as this CTA sees it: its two halves, and the kinds of access this CTA has
/// registered in the launch shadow for each.
#[derive(Clone, Copy)]
struct Word {
    /// The CTA that last touched it (`CtaShadow::gen`); any other: untouched by this one.
    gen: u32,
    halves: [Granule; 2],
    registered: [u8; 2],
    /// The value of this CTA's last write registered per half.
    values: [Option<u32>; 2],
}

const UNTOUCHED: Word = Word {
    gen: 0,
    halves: [FRESH; 2],
    registered: [0; 2],
    values: [None; 2],
};

type Page = Box<[Word; CTA_PAGE_WORDS as usize]>;

/// The CTA level (one per host thread, reset for each CTA): dense pages of word pairs over
/// the launch's allocations (`LaunchShadow::cta_pages` of them), made when first touched.
pub struct CtaShadow {
    /// The launch whose layout `table` follows (`LaunchShadow::id`; 0: none yet).
    launch: u64,
    /// This CTA's stamp: words stamped otherwise are untouched by it. Never 0.
    gen: u32,
    table: Vec<Option<Page>>,
    /// The pages of `table` this CTA touched (back to `pool` when it ends).
    touched: Vec<usize>,
    pool: Vec<Page>,
}

impl Default for CtaShadow {
    fn default() -> CtaShadow {
        CtaShadow {
            launch: 0,
            gen: 1,
            table: Vec::new(),
            touched: Vec::new(),
            pool: Vec::new(),
        }
    }
}

impl CtaShadow {
    /// Forgets the CTA that ran: a new stamp, its pages back to the pool.
    pub fn reset(&mut self) {
        for i in self.touched.drain(..) {
            if let Some(page) = self.table[i].take() {
                self.pool.push(page);
            }
        }
        self.gen = self.gen.wrapping_add(1);
        if self.gen == 0 {
            // After 2³² CTAs on this thread, old stamps could come back.
            for page in &mut self.pool {
                page.fill(UNTOUCHED);
            }
            self.gen = 1;
        }
    }

    /// The table laid out for `launch` (a new launch: its allocations, not the last's).
    fn follow(&mut self, launch: &LaunchShadow) {
        if self.launch != launch.id {
            for i in self.touched.drain(..) {
                if let Some(page) = self.table[i].take() {
                    self.pool.push(page);
                }
            }
            self.table.clear();
            self.table.resize_with(launch.cta_pages, || None);
            self.launch = launch.id;
        }
    }

    /// This CTA's word of the `k`-th half from `at`.
    #[inline]
    fn word(&mut self, at: &Located, k: u64) -> &mut Word {
        let (page, slot) = at.cta_slot(k);
        let gen = self.gen;
        let entry = &mut self.table[page];
        if entry.is_none() {
            *entry = Some(
                self.pool
                    .pop()
                    .unwrap_or_else(|| Box::new([UNTOUCHED; CTA_PAGE_WORDS as usize])),
            );
            self.touched.push(page);
        }
        let word = match entry {
            Some(p) => &mut p[slot],
            None => unreachable!("the page was just made"),
        };
        if word.gen != gen {
            *word = Word { gen, ..UNTOUCHED };
        }
        word
    }

    /// Checks and records an access of `size` bytes at device address `address` by `who`
    /// of CTA `cta` (linear index); `stored`: the bytes a write stores (little-endian,
    /// `size` of them). Accesses outside the launch's allocations are memcheck's.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub fn access(
        &mut self,
        launch: &LaunchShadow,
        cta: u32,
        address: u64,
        size: u32,
        kind: Kind,
        stored: Option<&[u8]>,
        who: Accessor<'_>,
    ) -> Result<(), GlobalFault> {
        self.follow(launch);
        let first = address / 2;
        let Some(at) = launch.locate(first) else {
            return Ok(());
        };
        let end = (address + u64::from(size.max(1))).div_ceil(2);
        for k in 0..(end - first).min(at.left) {
            let h = first + k;
            let slot = ((at.index + k) % 2) as usize;
            let value = stored.and_then(|bytes| half_value(bytes, address, h));
            let entry = self.word(&at, k);
            let g = &mut entry.halves[slot];
            let result = match kind {
                Kind::Read | Kind::NcRead => g.read(who),
                Kind::Write => g.write(who, false, true, value),
                Kind::Atomic => g.write(who, true, true, None),
            };
            result.map_err(|race| GlobalFault::InCta {
                this: kind,
                tid: who.tid,
                race,
            })?;
            let registered = entry.registered[slot] & kind.bit() != 0;
            // A write of another value than this CTA registered is news too. Reads and
            // atomics another CTA made already are not (see `represented`); writes are
            // compared by value, which the summary does not keep.
            let news = if kind == Kind::Write {
                !registered || entry.values[slot] != value
            } else {
                !registered
            };
            entry.registered[slot] |= kind.bit();
            if kind == Kind::Write {
                entry.values[slot] = value;
            }
            if !news {
                continue;
            }
            let cell = launch.cell(at, k);
            if kind != Kind::Write && represented(cell.summary.load(Relaxed), cta, kind) {
                continue;
            }
            let w = Witness {
                cta,
                tid: who.tid,
                instr: who.instr,
                kind,
                value,
            };
            launch.register(cell, h, w)?;
        }
        Ok(())
    }
}

/// The 16-bit value `stored` (bytes from `address`) puts in half `h`, if it covers it.
fn half_value(stored: &[u8], address: u64, h: u64) -> Option<u32> {
    let at = usize::try_from((2 * h).checked_sub(address)?).ok()?;
    let bytes = stored.get(at..at + 2)?;
    Some(u32::from(u16::from_le_bytes([bytes[0], bytes[1]])))
}

/// What a report needs to name threads and instructions.
pub struct Names<'a> {
    pub kernel: &'a Kernel,
    pub grid: [u32; 3],
    pub block: [u32; 3],
}

impl Names<'_> {
    fn instr(&self, index: u32) -> String {
        let i = index as usize;
        match (self.kernel.instrs.get(i), self.kernel.text.get(i)) {
            (Some(instr), Some(text)) => format!("PTX line {} `{text}`", instr.line),
            _ => format!("instruction #{index}"),
        }
    }

    fn thread(&self, tid: u16) -> String {
        let [x, y, z] = unflatten(u64::from(tid), self.block);
        format!("thread ({x},{y},{z})")
    }

    fn cta(&self, cta: u32) -> String {
        let [x, y, z] = unflatten(u64::from(cta), self.grid);
        format!("CTA ({x},{y},{z})")
    }
}

/// `(x, y, z)` of a linear index in `dims` (x fastest).
fn unflatten(i: u64, dims: [u32; 3]) -> [u64; 3] {
    let [dx, dy, _] = dims.map(|d| u64::from(d.max(1)));
    [i % dx, i / dx % dy, i / (dx * dy)]
}

/// A CTA's linear index in the grid (x fastest), as the launch shadow keeps it. Grids of
/// 2³² CTAs or more would alias, far beyond anything a CPU simulates.
pub fn cta_index(cta: [u32; 3], grid: [u32; 3]) -> u32 {
    let [x, y, z] = cta.map(u64::from);
    let [gx, gy, _] = grid.map(u64::from);
    (x + gx * (y + gy * z)) as u32
}

impl GlobalFault {
    /// The report's detail: the other access, and why the two conflict.
    pub fn describe(&self, names: &Names<'_>) -> String {
        match *self {
            GlobalFault::InCta { this, tid, race } => {
                let at = names.instr(race.other_instr);
                let other = match race.other_tid {
                    Some(t) => format!(
                        "{} (warp {}) of the same CTA at {at}",
                        names.thread(t),
                        t / 32
                    ),
                    None => format!("several threads of the same CTA (the last at {at})"),
                };
                let warp_sync = race.other_tid.is_some_and(|t| t / 32 == tid / 32);
                format!(
                    "global {} races with a {} by {other} in the same barrier interval (no \
                     bar.sync{} orders them)",
                    this.name(),
                    if race.other_is_write { "write" } else { "read" },
                    if warp_sync { " or bar.warp.sync" } else { "" }
                )
            }
            GlobalFault::Launch { this, other } => {
                let whom = format!(
                    "{} {} at {}",
                    names.cta(other.cta),
                    names.thread(other.tid),
                    names.instr(other.instr)
                );
                if breaks_nc(this, other.kind) {
                    format!(
                        "global {} of a word the launch also {} ({whom}): ld.global.nc \
                         requires the data to be read-only for the whole launch",
                        this.name(),
                        if other.kind == Kind::NcRead {
                            "reads through ld.global.nc"
                        } else if other.kind == Kind::Write {
                            "writes"
                        } else {
                            "updates atomically"
                        }
                    )
                } else {
                    format!(
                        "global {} races with a {} by {whom}: different CTAs of one launch, \
                         and nothing orders them (CTAs may share a word only to read it, to update it \
                         atomically, or to write one value to it)",
                        this.name(),
                        other.kind.name()
                    )
                }
            }
        }
    }
}
