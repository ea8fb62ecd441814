//! globalcheck: races on global memory within one launch.
//!
//! Two levels, both per 2-byte half of a 4-byte word (kernels store f16/bf16 elements, so
//! two threads may own the two halves of one word), and both sparse: only touched words
//! are tracked, and everything is dropped when the launch (or the CTA) ends.
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
//! A CTA registers each kind of access to a half in the launch shadow once (the CTA shadow
//! remembers which it registered), and a lock-free summary per half (which CTA came first,
//! the kinds it and the others used) lets a read, `.nc` read or atomic that some other CTA
//! already made without conflict skip the locked map: data every CTA reads costs one atomic
//! load per CTA and half, not a lock.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard, OnceLock};

use super::race::{Accessor, Granule, Race, FRESH};
use crate::ir::Kernel;

/// How a lane touches global memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Read,
    NcRead,
    Write,
    Atomic,
}

impl Kind {
    fn bit(self) -> u8 {
        match self {
            Kind::Read => 1,
            Kind::NcRead => 2,
            Kind::Write => 4,
            Kind::Atomic => 8,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Read => "read",
            Kind::NcRead => "ld.global.nc read",
            Kind::Write => "write",
            Kind::Atomic => "atomic",
        }
    }

    fn reads(self) -> bool {
        matches!(self, Kind::Read | Kind::NcRead)
    }

    fn modifies(self) -> bool {
        matches!(self, Kind::Write | Kind::Atomic)
    }
}

/// Whether accesses `a` and `b` of different CTAs conflict: not both reads, not both
/// atomics, not two writes of the same value.
fn across_ctas(a: Witness, b: Witness) -> bool {
    let same_value =
        a.kind == Kind::Write && b.kind == Kind::Write && a.value.is_some() && a.value == b.value;
    let both_read = a.kind.reads() && b.kind.reads();
    let both_atomic = a.kind == Kind::Atomic && b.kind == Kind::Atomic;
    !(both_read || both_atomic || same_value)
}

/// Whether `a` and `b` break `.nc`'s promise, whoever did them.
fn breaks_nc(a: Kind, b: Kind) -> bool {
    (a == Kind::NcRead && b.modifies()) || (b == Kind::NcRead && a.modifies())
}

/// One access as the report names it: CTA (linear index in the grid), linear thread id in
/// the CTA, instruction index and kind.
#[derive(Clone, Copy, Debug)]
pub struct Witness {
    pub cta: u32,
    pub tid: u16,
    pub instr: u32,
    pub kind: Kind,
    /// The 16 bits a write stored in the half, when it covered it.
    pub value: Option<u32>,
}

/// What globalcheck found.
#[derive(Clone, Copy, Debug)]
pub enum GlobalFault {
    /// Two threads of this CTA in one barrier interval (the race tracker's rules).
    InCta { this: Kind, tid: u16, race: Race },
    /// Against an access of another CTA, or a store against an `.nc` read.
    Launch { this: Kind, other: Witness },
}

/// Fibonacci hashing of a word or half index: the std SipHash costs more than the rest of
/// a tracked access.
#[derive(Default)]
pub struct IndexHasher(u64);

impl Hasher for IndexHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u64(&mut self, i: u64) {
        self.0 = (i ^ (i >> 29))
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            .rotate_left(26);
    }
}

type IndexMap<V> = HashMap<u64, V, BuildHasherDefault<IndexHasher>>;

/// One word as this CTA sees it: its two halves, and the kinds of access this CTA has
/// registered in the launch shadow for each.
#[derive(Clone, Copy)]
struct Word {
    halves: [Granule; 2],
    registered: [u8; 2],
    /// The value of this CTA's last write registered per half.
    values: [Option<u32>; 2],
}

/// The CTA level (one per host thread, reset for each CTA).
#[derive(Default)]
pub struct CtaShadow {
    words: IndexMap<Word>,
}

impl CtaShadow {
    pub fn reset(&mut self) {
        self.words.clear();
    }

    /// Checks and records an access of `size` bytes at device address `address` by `who`
    /// of CTA `cta` (linear index); `stored`: the bytes a write stores (little-endian,
    /// `size` of them).
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
        let first = address / 2;
        let end = (address + u64::from(size.max(1))).div_ceil(2);
        let mut half = first;
        while half < end {
            let word = half / 2;
            let entry = self.words.entry(word).or_insert(Word {
                halves: [FRESH; 2],
                registered: [0; 2],
                values: [None; 2],
            });
            // The halves of this word the access covers.
            let last = end.min(2 * word + 2);
            let mut fresh = [None; 2];
            for h in half..last {
                let slot = (h % 2) as usize;
                let g = &mut entry.halves[slot];
                let value = stored.and_then(|bytes| half_value(bytes, address, h));
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
                // A write of another value than this CTA registered is news too. Reads and
                // atomics another CTA made already are not (see `represented`); writes are
                // compared by value, which the summary does not keep.
                let news = if kind == Kind::Write {
                    entry.registered[slot] & kind.bit() == 0 || entry.values[slot] != value
                } else {
                    entry.registered[slot] & kind.bit() == 0
                        && !launch
                            .summary(h)
                            .is_some_and(|s| represented(s.load(Relaxed), cta, kind))
                };
                if news {
                    fresh[slot] = Some(Witness {
                        cta,
                        tid: who.tid,
                        instr: who.instr,
                        kind,
                        value,
                    });
                }
                entry.registered[slot] |= kind.bit();
                if kind == Kind::Write {
                    entry.values[slot] = value;
                }
            }
            if fresh.iter().any(Option::is_some) {
                launch.register(word, fresh)?;
            }
            half = last;
        }
        Ok(())
    }
}

/// The accesses of a half that the launch level keeps: for the first CTA that touched it
/// and for any other, one read (an `.nc` one preferred) and one modifying access (a write
/// preferred). That is enough to find every conflict: until one is reported, a half that
/// several CTAs touch is only read, or only updated atomically, by all of them.
#[derive(Clone, Copy, Default)]
struct Half {
    first: [Option<Witness>; 2],
    other: [Option<Witness>; 2],
}

impl Half {
    fn check(&self, w: Witness) -> Result<(), Witness> {
        let kept = self.first.iter().chain(&self.other).flatten();
        for &k in kept {
            if (k.cta != w.cta && across_ctas(w, k)) || breaks_nc(w.kind, k.kind) {
                return Err(k);
            }
        }
        Ok(())
    }

    fn record(&mut self, w: Witness) {
        let first_cta = self.first.iter().flatten().next().map(|k| k.cta);
        let slots = if first_cta.is_none_or(|c| c == w.cta) {
            &mut self.first
        } else {
            &mut self.other
        };
        let slot = &mut slots[usize::from(w.kind.modifies())];
        let better = |old: Witness| match w.kind {
            Kind::NcRead => old.kind == Kind::Read,
            Kind::Write => old.kind == Kind::Atomic,
            _ => false,
        };
        if slot.is_none_or(better) {
            *slot = Some(w);
        }
    }
}

/// Shards of the launch level, so host threads running different CTAs rarely wait.
const SHARDS: usize = 64;

/// Halves per page of the summary (pages are made when first touched).
const PAGE: u64 = 1024;

/// One allocation's summaries.
struct Span {
    base: u64,
    halves: u64,
    pages: Box<[OnceLock<Box<[AtomicU64]>>]>,
}

/// The launch level, shared by every CTA of one launch.
pub struct LaunchShadow {
    shards: Box<[Mutex<IndexMap<[Half; 2]>>]>,
    /// Per allocation (by base address), a summary word per half: bits 0–31 the first CTA
    /// to touch it + 1 (0: none yet), 32–35 the kinds it used, 36–39 the kinds of the others.
    spans: Vec<Span>,
}

/// Whether `cta`'s `kind` of access adds nothing to `summary`: the first CTA used it (and
/// `cta` is that CTA), or another CTA than the first did. In a launch with no conflict yet
/// the kinds of all CTAs but one are alike (all reads, or all atomics), so an access that
/// another CTA made without conflict cannot conflict now.
fn represented(summary: u64, cta: u32, kind: Kind) -> bool {
    let first = summary as u32;
    let kinds = if first == cta.wrapping_add(1) {
        summary >> 32
    } else {
        summary >> 36
    };
    first != 0 && kinds as u8 & 0xf & kind.bit() != 0
}

/// `summary` with `cta`'s `kind` of access added.
fn summarise(summary: u64, cta: u32, kind: Kind) -> u64 {
    let me = u64::from(cta.wrapping_add(1));
    let first = match summary & 0xffff_ffff {
        0 => me,
        f => f,
    };
    let shift = if first == me { 32 } else { 36 };
    (summary & !0xffff_ffff) | first | (u64::from(kind.bit()) << shift)
}

impl LaunchShadow {
    /// The launch level for a launch over the allocations `spans` (base, bytes).
    pub fn new(spans: impl Iterator<Item = (u64, u64)>) -> LaunchShadow {
        let spans = spans
            .map(|(base, bytes)| {
                let halves = bytes.div_ceil(2);
                Span {
                    base,
                    halves,
                    pages: (0..halves.div_ceil(PAGE))
                        .map(|_| OnceLock::new())
                        .collect(),
                }
            })
            .collect();
        LaunchShadow {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            spans,
        }
    }

    /// The summary of the half at device address 2·`half`, if it is in an allocation.
    fn summary(&self, half: u64) -> Option<&AtomicU64> {
        let address = 2 * half;
        let k = self.spans.partition_point(|s| s.base <= address);
        let span = self.spans.get(k.checked_sub(1)?)?;
        let i = (address - span.base) / 2;
        if i >= span.halves {
            return None;
        }
        let page = span.pages[(i / PAGE) as usize]
            .get_or_init(|| (0..PAGE).map(|_| AtomicU64::new(0)).collect());
        Some(&page[(i % PAGE) as usize])
    }

    fn shard(&self, word: u64) -> MutexGuard<'_, IndexMap<[Half; 2]>> {
        // Neighbouring words share a shard: a CTA's run of words takes one lock after another
        // of the same shard, which stays in its core's cache.
        let k = ((word >> 4).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 58) as usize % SHARDS;
        self.shards[k].lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Checks each access of `accesses` (one per half of `word`, or none) against the
    /// accesses kept for its half, then keeps it.
    fn register(&self, word: u64, accesses: [Option<Witness>; 2]) -> Result<(), GlobalFault> {
        let mut shard = self.shard(word);
        let halves = shard.entry(word).or_default();
        for (half, w) in halves.iter_mut().zip(accesses) {
            let Some(w) = w else { continue };
            half.check(w).map_err(|other| GlobalFault::Launch {
                this: w.kind,
                other,
            })?;
            half.record(w);
        }
        // Under the lock, after the map: a summary bit promises the map has the access.
        for (slot, w) in accesses.iter().enumerate() {
            if let (Some(w), Some(s)) = (w, self.summary(2 * word + slot as u64)) {
                let _ = s.fetch_update(Relaxed, Relaxed, |x| Some(summarise(x, w.cta, w.kind)));
            }
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
