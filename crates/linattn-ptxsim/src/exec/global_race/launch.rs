//! globalcheck's launch level: which CTAs read, wrote, updated atomically or read through
//! `ld.global.nc` each half of the launch's allocations.
//!
//! Dense, per allocation, in pages made when first touched: per half a summary word (which
//! CTA came first, the kinds it and the others used) and the first CTA's two kept accesses
//! (packed in atomics). While one CTA alone touches a half (most halves: each CTA reads its
//! own rows and writes its own outputs) its accesses need no lock: a compare-and-swap on
//! the summary that expects no other CTA. Every other access takes the lock of its shard,
//! adds itself to the summary first, then checks against the first CTA's kept accesses and
//! the other CTAs' (a map, under the lock): whichever of the two comes second in the
//! summary's order sees the other's access.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};

use super::witness::{across_ctas, breaks_nc, GlobalFault, Kind, Witness};

/// Fibonacci hashing of a word index: the std SipHash costs more than the rest of an access.
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

/// What the launch level keeps of a half for the CTAs other than the first that touched
/// it: one read (an `.nc` one preferred) and one modifying access (a write preferred). With
/// the first CTA's two, that is enough to find every conflict: until one is reported, a
/// half that several CTAs touch is only read, or only updated atomically, by all of them.
type Kept = [Option<Witness>; 2];

/// Whether `new` should replace the kept access `old` of its slot.
fn better(new: Kind, old: Kind) -> bool {
    match new {
        Kind::NcRead => old == Kind::Read,
        Kind::Write => old == Kind::Atomic,
        _ => false,
    }
}

fn check(kept: &Kept, w: Witness) -> Result<(), Witness> {
    for &k in kept.iter().flatten() {
        if (k.cta != w.cta && across_ctas(w, k)) || breaks_nc(w.kind, k.kind) {
            return Err(k);
        }
    }
    Ok(())
}

fn record(kept: &mut Kept, w: Witness) {
    let slot = &mut kept[usize::from(w.kind.modifies())];
    if slot.is_none_or(|old| better(w.kind, old.kind)) {
        *slot = Some(w);
    }
}

/// Instruction indices kept in a packed witness: 28 bits (PTX of 2²⁸ instructions is far
/// beyond any kernel; a larger index would only be misnamed in a report).
const INSTR_MAX: u32 = (1 << 28) - 1;

/// A witness without its CTA, in one word: bit 0 set, kind (2 bits), whether a value is
/// known (1), the value (16), thread id (16), instruction (28).
fn pack(w: Witness) -> u64 {
    let kind = match w.kind {
        Kind::Read => 0,
        Kind::NcRead => 1,
        Kind::Write => 2,
        Kind::Atomic => 3,
    };
    let value = w.value.map_or(0, |v| 1 | u64::from(v & 0xffff) << 1);
    1 | kind << 1 | value << 3 | u64::from(w.tid) << 20 | u64::from(w.instr.min(INSTR_MAX)) << 36
}

fn unpack(x: u64, cta: u32) -> Option<Witness> {
    if x & 1 == 0 {
        return None;
    }
    let kind = [Kind::Read, Kind::NcRead, Kind::Write, Kind::Atomic][(x >> 1 & 3) as usize];
    Some(Witness {
        cta,
        tid: (x >> 20) as u16,
        instr: (x >> 36) as u32,
        kind,
        value: (x >> 3 & 1 == 1).then_some((x >> 4) as u32 & 0xffff),
    })
}

/// One half of an allocation at the launch level.
#[derive(Default)]
pub struct Cell {
    /// Bits 0–31 the first CTA to touch the half + 1 (0: none yet), 32–35 the kinds it
    /// used, 36–39 the kinds of the others.
    pub summary: AtomicU64,
    /// The first CTA's kept read and modifying access (`pack`; 0: none), written by the
    /// host thread running that CTA only.
    first: [AtomicU64; 2],
}

impl Cell {
    /// The first CTA's `w` kept, if its slot is empty or holds a worse one.
    fn keep_first(&self, w: Witness) {
        let slot = &self.first[usize::from(w.kind.modifies())];
        let old = unpack(slot.load(Relaxed), w.cta);
        if old.is_none_or(|old| better(w.kind, old.kind)) {
            slot.store(pack(w), Relaxed);
        }
    }

    /// `w` against the first CTA's kept accesses.
    fn check_first(&self, first: u32, w: Witness) -> Result<(), Witness> {
        let kept = self
            .first
            .each_ref()
            .map(|s| unpack(s.load(Relaxed), first));
        check(&kept, w)
    }
}

/// Whether `cta`'s `kind` of access adds nothing to `summary`: the first CTA used it (and
/// `cta` is that CTA), or another CTA than the first did. In a launch with no conflict yet
/// the kinds of all CTAs but one are alike (all reads, or all atomics), so an access that
/// another CTA made without conflict cannot conflict now.
pub fn represented(summary: u64, cta: u32, kind: Kind) -> bool {
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

/// Shards of the locked level, so host threads running different CTAs rarely wait.
const SHARDS: usize = 64;

/// Halves per page of cells (pages are made when first touched).
const PAGE: u64 = 1024;

/// Words per page of the CTA level's dense shadow.
pub const CTA_PAGE_WORDS: u64 = 64;

/// One allocation.
struct Span {
    /// Its first half (device address / 2) and how many halves it spans.
    first: u64,
    halves: u64,
    pages: Box<[OnceLock<Box<[Cell]>>]>,
    /// Index of its first page in the CTA level's table.
    cta_page: usize,
}

/// Where a half lies in the launch's allocations.
#[derive(Clone, Copy)]
pub struct Located {
    span: usize,
    /// The half's index in its allocation.
    pub index: u64,
    /// Halves of the allocation from this one on.
    pub left: u64,
    /// The CTA level's page of the half's word pair (see `cta_page`).
    cta_page0: usize,
}

impl Located {
    /// The CTA level's page (an index into its table) and slot of the `k`-th half from here.
    pub fn cta_slot(&self, k: u64) -> (usize, usize) {
        let word = (self.index + k) / 2;
        (
            self.cta_page0 + (word / CTA_PAGE_WORDS) as usize,
            (word % CTA_PAGE_WORDS) as usize,
        )
    }
}

/// Distinct ids for launch shadows, so a host thread's CTA level knows when a launch ends.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// The launch level, shared by every CTA of one launch.
pub struct LaunchShadow {
    pub id: u64,
    /// Pages the CTA level's table needs (`CTA_PAGE_WORDS` word pairs each).
    pub cta_pages: usize,
    spans: Vec<Span>,
    shards: Box<[Mutex<IndexMap<[Kept; 2]>>]>,
}

impl LaunchShadow {
    /// The launch level for a launch over the allocations `spans` (base, bytes), in
    /// ascending, disjoint order.
    pub fn new(spans: impl Iterator<Item = (u64, u64)>) -> LaunchShadow {
        let mut cta_pages = 0;
        let spans = spans
            .map(|(base, bytes)| {
                let first = base / 2;
                let halves = (base + bytes).div_ceil(2) - first;
                let span = Span {
                    first,
                    halves,
                    pages: (0..halves.div_ceil(PAGE))
                        .map(|_| OnceLock::new())
                        .collect(),
                    cta_page: cta_pages,
                };
                // A span's halves pair up from its first: its last word may be half full.
                cta_pages += halves.div_ceil(2).div_ceil(CTA_PAGE_WORDS) as usize;
                span
            })
            .collect();
        LaunchShadow {
            id: NEXT_ID.fetch_add(1, Relaxed),
            cta_pages,
            spans,
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
        }
    }

    /// The allocation holding half `half` (device address / 2).
    pub fn locate(&self, half: u64) -> Option<Located> {
        let k = self.spans.partition_point(|s| s.first <= half);
        let span = k.checked_sub(1)?;
        let s = &self.spans[span];
        let index = half - s.first;
        (index < s.halves).then_some(Located {
            span,
            index,
            left: s.halves - index,
            cta_page0: s.cta_page,
        })
    }

    /// The cell of the `k`-th half from `at` (within its allocation: `k < at.left`).
    pub fn cell(&self, at: Located, k: u64) -> &Cell {
        let i = at.index + k;
        let page = self.spans[at.span].pages[(i / PAGE) as usize]
            .get_or_init(|| (0..PAGE).map(|_| Cell::default()).collect());
        &page[(i % PAGE) as usize]
    }

    fn shard(&self, word: u64) -> MutexGuard<'_, IndexMap<[Kept; 2]>> {
        // Neighbouring words share a shard: a CTA's run of words takes one lock after another
        // of the same shard, which stays in its core's cache.
        let k = ((word >> 4).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 58) as usize % SHARDS;
        self.shards[k].lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Checks `w`, an access of half `half` (device address / 2) whose cell is `cell`,
    /// against the accesses kept for the half, then keeps it.
    pub fn register(&self, cell: &Cell, half: u64, w: Witness) -> Result<(), GlobalFault> {
        let fault = |other| GlobalFault::Launch {
            this: w.kind,
            other,
        };
        let me = u64::from(w.cta.wrapping_add(1));
        let bit = u64::from(w.kind.bit()) << 32;
        let mut s = cell.summary.load(Acquire);
        // The first CTA, while no other touched the half: no lock.
        loop {
            if s & 0xffff_ffff == 0 {
                match cas(&cell.summary, s, me) {
                    Ok(()) => s = me,
                    Err(now) => s = now,
                }
                continue;
            }
            if s & 0xffff_ffff != me || s >> 36 & 0xf != 0 {
                break;
            }
            // Only the .nc promise can break within the CTA.
            cell.check_first(w.cta, w).map_err(fault)?;
            // Kept before the summary says so: whoever sees the bit sees the access.
            cell.keep_first(w);
            if s | bit == s {
                return Ok(());
            }
            match cas(&cell.summary, s, s | bit) {
                Ok(()) => return Ok(()),
                Err(now) => s = now,
            }
        }
        let mut shard = self.shard(half / 2);
        // In the summary before the check: a first CTA that adds a kind after this either
        // fails its compare-and-swap and waits for this lock, or came first in the
        // summary's order, its access kept before, and checked here.
        let s = summarise(
            cell.summary
                .fetch_update(AcqRel, Acquire, |x| Some(summarise(x, w.cta, w.kind)))
                .unwrap_or_else(|x| x),
            w.cta,
            w.kind,
        );
        let first = (s as u32).wrapping_sub(1);
        cell.check_first(first, w).map_err(fault)?;
        let kept = &mut shard.entry(half / 2).or_default()[(half % 2) as usize];
        check(kept, w).map_err(fault)?;
        if first == w.cta {
            cell.keep_first(w);
        } else {
            record(kept, w);
        }
        Ok(())
    }
}

fn cas(a: &AtomicU64, old: u64, new: u64) -> Result<(), u64> {
    const ORDER: (Ordering, Ordering) = (AcqRel, Acquire);
    a.compare_exchange(old, new, ORDER.0, ORDER.1).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(cta: u32, tid: u16, kind: Kind, value: Option<u32>) -> Witness {
        Witness {
            cta,
            tid,
            instr: 77,
            kind,
            value,
        }
    }

    #[test]
    fn witnesses_pack_and_unpack() {
        for kind in [Kind::Read, Kind::NcRead, Kind::Write, Kind::Atomic] {
            for value in [None, Some(0), Some(0xffff), Some(0x1234)] {
                let x = w(9, 0x3ff, kind, value);
                let y = unpack(pack(x), 9).expect("a packed witness");
                assert_eq!(
                    (y.cta, y.tid, y.instr, y.kind, y.value),
                    (9, 0x3ff, 77, kind, value)
                );
            }
        }
        assert!(unpack(0, 3).is_none());
    }

    #[test]
    fn the_last_half_of_an_odd_sized_allocation_is_located() {
        // 7 bytes at 0x100: halves 0x80..0x84, the last one half inside.
        let launch = LaunchShadow::new([(0x100, 7), (0x200, 4)].into_iter());
        let at = launch.locate(0x83).expect("the last half");
        assert_eq!((at.index, at.left), (3, 1));
        assert!(launch.locate(0x84).is_none());
        assert!(launch.locate(0x7f).is_none());
        let next = launch.locate(0x100).expect("the second allocation");
        assert_eq!(next.index, 0);
        // The two allocations' CTA pages do not overlap.
        assert_ne!(at.cta_slot(0).0, next.cta_slot(0).0);
    }

    #[test]
    fn a_second_cta_finds_the_first_ctas_lock_free_write() {
        let launch = LaunchShadow::new([(0x100, 64)].into_iter());
        let at = launch.locate(0x80).expect("in the allocation");
        let cell = launch.cell(at, 0);
        launch
            .register(cell, 0x80, w(0, 1, Kind::Write, Some(5)))
            .expect("the first write");
        launch
            .register(cell, 0x80, w(0, 2, Kind::Write, Some(5)))
            .expect("the same CTA's second write");
        // The same value from another CTA is fine, another value is not.
        launch
            .register(cell, 0x80, w(1, 3, Kind::Write, Some(5)))
            .expect("the same value");
        match launch.register(cell, 0x80, w(2, 4, Kind::Write, Some(6))) {
            Err(GlobalFault::Launch { other, .. }) => assert_eq!(other.cta, 0),
            _ => panic!("another value from a third CTA must race"),
        }
    }

    #[test]
    fn the_first_cta_finds_a_later_ctas_access_under_the_lock() {
        let launch = LaunchShadow::new([(0x100, 64)].into_iter());
        let at = launch.locate(0x81).expect("in the allocation");
        let cell = launch.cell(at, 0);
        launch
            .register(cell, 0x81, w(4, 1, Kind::Read, None))
            .expect("the first read");
        launch
            .register(cell, 0x81, w(5, 1, Kind::Read, None))
            .expect("another CTA's read");
        match launch.register(cell, 0x81, w(4, 2, Kind::Write, Some(1))) {
            Err(GlobalFault::Launch { other, .. }) => assert_eq!(other.cta, 5),
            _ => panic!("the first CTA's write against another CTA's read must race"),
        }
    }

    #[test]
    fn a_store_to_a_half_the_same_cta_read_through_nc_is_caught_lock_free() {
        let launch = LaunchShadow::new([(0x100, 64)].into_iter());
        let at = launch.locate(0x90).expect("in the allocation");
        let cell = launch.cell(at, 0);
        launch
            .register(cell, 0x90, w(0, 1, Kind::NcRead, None))
            .expect("the .nc read");
        match launch.register(cell, 0x90, w(0, 1, Kind::Write, Some(1))) {
            Err(GlobalFault::Launch { other, .. }) => assert_eq!(other.kind, Kind::NcRead),
            _ => panic!("a store to what the launch reads through .nc must be caught"),
        }
    }

    #[test]
    fn two_ctas_on_two_host_threads_find_their_conflicts() {
        // CTA 0 writes halves 0..n in ascending order while CTA 1 reads them in descending
        // order, each on its own thread and stopping at its first fault: whichever touches
        // a half second must report it, so at least one of them does, wherever they meet.
        let n = 4096;
        for _ in 0..20 {
            let launch = LaunchShadow::new([(0x10000, 2 * n)].into_iter());
            let run = |cta: u32, kind: Kind| {
                let launch = &launch;
                move || {
                    for k in 0..n {
                        let k = if cta == 0 { k } else { n - 1 - k };
                        let at = launch.locate(0x8000 + k).expect("in the allocation");
                        let value = (kind == Kind::Write).then_some(1);
                        let cell = launch.cell(at, 0);
                        launch.register(cell, 0x8000 + k, w(cta, 0, kind, value))?;
                    }
                    Ok::<(), GlobalFault>(())
                }
            };
            let (a, b) = std::thread::scope(|s| {
                let a = s.spawn(run(0, Kind::Write));
                let b = s.spawn(run(1, Kind::Read));
                (a.join(), b.join())
            });
            let faults = [a, b]
                .into_iter()
                .filter(|r| matches!(r, Ok(Err(GlobalFault::Launch { .. }))))
                .count();
            assert!(faults >= 1, "a write and a read of two CTAs met unseen");
        }
    }
}
