//! One CTA's shared memory with the racecheck and initcheck shadow.
//!
//! The shadow keeps, per 4-byte granule (every shared store the kernels compile to is 32-bit
//! or wider), the last write and a summary of the reads since
//! the last CTA barrier. Two accesses of different threads are ordered when a `bar.sync`
//! separates them (CTA barrier epochs), or when both threads are in one warp and
//! `bar.warp.sync`s whose member masks hold both (directly, or through lanes they share)
//! separate them (the warp's lane order, `Warp::warp_sync`). Anything else with a write on
//! either side is a race: between warps, and between lanes of one warp, which the PTX memory
//! model does not order without `bar.warp.sync` (independent thread scheduling).

/// No thread / many threads, in the shadow's thread and warp fields.
const NONE: u16 = u16::MAX;
const MANY: u16 = u16::MAX - 1;

/// Accesses of one kind (plain reads, or atomics) to a granule within one CTA barrier
/// interval: one thread, or several (`MANY`), of one warp or several. Within one warp,
/// `lanes` holds the accessing lanes whose accesses are not known to happen before a later
/// one's, and `wsync` the latest warp clock among them: a lane whose `Warp::known` entry for
/// each of them exceeds it is ordered after all of them. Never a missed race; a false one
/// only when partial-mask syncs order a later access after an older read of one lane by a
/// sync numbered at or below a newer, unordered read's clock (full masks: exact).
#[derive(Clone, Copy)]
struct Accesses {
    tid: u16,
    warp: u16,
    lanes: u32,
    bar: u32,
    wsync: u32,
    instr: u32,
}

const NO_ACCESSES: Accesses = Accesses {
    tid: NONE,
    warp: NONE,
    lanes: 0,
    bar: 0,
    wsync: 0,
    instr: 0,
};

/// The shadow of one granule: the last plain write, and the reads and the atomics of the
/// current barrier interval (atomics conflict with plain accesses, not with each other, so
/// an atomic never hides an earlier plain write from a later check).
#[derive(Clone, Copy)]
struct Granule {
    w_tid: u16,
    w_bar: u32,
    w_wsync: u32,
    w_instr: u32,
    reads: Accesses,
    atomics: Accesses,
}

const FRESH: Granule = Granule {
    w_tid: NONE,
    w_bar: 0,
    w_wsync: 0,
    w_instr: 0,
    reads: NO_ACCESSES,
    atomics: NO_ACCESSES,
};

/// Who accesses: linear thread id, its warp's clock, what its lane knows of the other
/// lanes (`Warp::known` of the lane), the CTA barrier epoch, and the instruction index.
#[derive(Clone, Copy)]
pub struct Accessor<'w> {
    pub tid: u16,
    pub wsync: u32,
    pub known: &'w [u32; 32],
    pub bar: u32,
    pub instr: u32,
}

impl Accessor<'_> {
    fn warp(&self) -> u16 {
        self.tid / 32
    }

    fn lane_bit(&self) -> u32 {
        1 << (self.tid % 32)
    }

    /// Of `lanes` (of this warp, accesses stamped `wsync` or earlier), those whose
    /// accesses happen before this one: its own lane, and lanes a sync since ordered.
    fn lanes_before(&self, lanes: u32, wsync: u32) -> u32 {
        let mut before = lanes & self.lane_bit();
        let mut rest = lanes & !before;
        while rest != 0 {
            let l = rest.trailing_zeros() as usize;
            rest &= rest - 1;
            if self.known[l] > wsync {
                before |= 1 << l;
            }
        }
        before
    }
}

/// A conflict found by the shadow.
pub enum SharedFault {
    /// Read of bytes no thread of this CTA has written.
    Uninitialised,
    /// `this` conflicts with an earlier access (`other_tid`, `other_instr`; `MANY` threads
    /// when several read).
    Race {
        this_is_write: bool,
        other_is_write: bool,
        other_tid: Option<u16>,
        other_instr: u32,
    },
}

pub struct SharedMemory {
    data: Vec<u8>,
    shadow: Vec<Granule>,
    race: bool,
    init: bool,
}

impl SharedMemory {
    pub fn new() -> SharedMemory {
        SharedMemory {
            data: Vec::new(),
            shadow: Vec::new(),
            race: false,
            init: false,
        }
    }

    /// Resets for a new CTA of `bytes` shared bytes. Contents start as garbage on a GPU;
    /// here they start as zero, and initcheck reports reads before writes.
    pub fn reset(&mut self, bytes: usize, racecheck: bool, initcheck: bool) {
        self.data.clear();
        self.data.resize(bytes, 0);
        self.race = racecheck;
        self.init = initcheck;
        self.shadow.clear();
        if racecheck || initcheck {
            self.shadow.resize(bytes.div_ceil(GRANULE), FRESH);
        }
    }

    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// Whether the shadow is kept (racecheck or initcheck on).
    #[inline]
    pub fn tracked(&self) -> bool {
        !self.shadow.is_empty()
    }

    #[inline]
    pub fn load32(&self, offset: usize) -> u32 {
        let d = &self.data[offset..offset + 4];
        u32::from_le_bytes([d[0], d[1], d[2], d[3]])
    }

    /// Reads `size` ∈ {1, 2, 4, 8} bytes (bounds checked by the caller).
    #[inline]
    pub fn load(&self, offset: usize, size: u32) -> u64 {
        let d = &self.data[offset..];
        match size {
            4 => u64::from(u32::from_le_bytes([d[0], d[1], d[2], d[3]])),
            2 => u64::from(u16::from_le_bytes([d[0], d[1]])),
            8 => u64::from_le_bytes([d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]]),
            _ => u64::from(d[0]),
        }
    }

    #[inline]
    pub fn store(&mut self, offset: usize, size: u32, value: u64) {
        let d = &mut self.data[offset..];
        match size {
            4 => d[..4].copy_from_slice(&(value as u32).to_le_bytes()),
            2 => d[..2].copy_from_slice(&(value as u16).to_le_bytes()),
            8 => d[..8].copy_from_slice(&value.to_le_bytes()),
            _ => d[0] = value as u8,
        }
    }

    /// Shadow update for a read of `[offset, offset + size)`.
    #[inline]
    pub fn on_read(
        &mut self,
        offset: usize,
        size: u32,
        who: Accessor<'_>,
    ) -> Result<(), SharedFault> {
        if self.shadow.is_empty() {
            return Ok(());
        }
        let (race, init) = (self.race, self.init);
        for g in granules(offset, size) {
            let s = &mut self.shadow[g];
            if s.w_tid == NONE && s.atomics.tid == NONE {
                if init {
                    return Err(SharedFault::Uninitialised);
                }
            } else if race {
                check_plain_write(s, who, false)?;
                check_accesses(&s.atomics, who, false, true)?;
            }
            if race {
                record(&mut s.reads, who);
            }
        }
        Ok(())
    }

    /// Shadow update for a plain write, or an atomic read-modify-write.
    #[inline]
    pub fn on_write(
        &mut self,
        offset: usize,
        size: u32,
        who: Accessor<'_>,
        atomic: bool,
    ) -> Result<(), SharedFault> {
        if self.shadow.is_empty() {
            return Ok(());
        }
        let (race, init) = (self.race, self.init);
        for g in granules(offset, size) {
            let s = &mut self.shadow[g];
            // An atomic reads the old value: it must have been written.
            if atomic && init && s.w_tid == NONE && s.atomics.tid == NONE {
                return Err(SharedFault::Uninitialised);
            }
            if race {
                check_plain_write(s, who, true)?;
                check_accesses(&s.reads, who, true, false)?;
                if !atomic {
                    check_accesses(&s.atomics, who, true, true)?;
                }
            }
            if atomic {
                record(&mut s.atomics, who);
            } else {
                s.w_tid = who.tid;
                s.w_bar = who.bar;
                s.w_wsync = who.wsync;
                s.w_instr = who.instr;
            }
        }
        Ok(())
    }
}

/// `who`'s access against the granule's last plain write.
#[inline]
fn check_plain_write(
    s: &Granule,
    who: Accessor<'_>,
    this_is_write: bool,
) -> Result<(), SharedFault> {
    if s.w_tid != NONE && s.w_bar == who.bar && !ordered(s.w_tid, s.w_wsync, who) {
        return Err(SharedFault::Race {
            this_is_write,
            other_is_write: true,
            other_tid: Some(s.w_tid),
            other_instr: s.w_instr,
        });
    }
    Ok(())
}

/// `who`'s access against the reads (or atomics) of this barrier interval.
#[inline]
fn check_accesses(
    a: &Accesses,
    who: Accessor<'_>,
    this_is_write: bool,
    others_write: bool,
) -> Result<(), SharedFault> {
    if a.tid != NONE && a.bar == who.bar && conflicts(a, who) {
        return Err(SharedFault::Race {
            this_is_write,
            other_is_write: others_write,
            other_tid: (a.tid != MANY).then_some(a.tid),
            other_instr: a.instr,
        });
    }
    Ok(())
}

/// Bytes tracked by one shadow entry.
const GRANULE: usize = 4;

#[inline]
fn granules(offset: usize, size: u32) -> std::ops::Range<usize> {
    offset / GRANULE..(offset + size as usize).div_ceil(GRANULE)
}

/// Whether an earlier access by `tid` at warp clock `wsync` (same CTA barrier epoch)
/// happens before `who`'s.
#[inline]
fn ordered(tid: u16, wsync: u32, who: Accessor<'_>) -> bool {
    tid == who.tid || (tid / 32 == who.warp() && who.known[usize::from(tid % 32)] > wsync)
}

/// Adds `who` to the accesses of this barrier interval.
#[inline]
fn record(a: &mut Accesses, who: Accessor<'_>) {
    if a.bar != who.bar || a.tid == NONE {
        *a = Accesses {
            tid: who.tid,
            warp: who.warp(),
            lanes: who.lane_bit(),
            bar: who.bar,
            wsync: who.wsync,
            instr: who.instr,
        };
        return;
    }
    if a.warp == who.warp() {
        // Accesses ordered before `who`'s need no tracking of their own: whatever comes
        // after `who`'s unordered with them is unordered with `who`'s too (or ordered after
        // both), so checking against `who` finds the race.
        let unordered = a.lanes & !who.lanes_before(a.lanes, a.wsync);
        if unordered == 0 {
            a.tid = who.tid;
            a.instr = who.instr;
        } else {
            a.tid = MANY;
        }
        a.lanes = unordered | who.lane_bit();
        a.wsync = who.wsync;
    } else if a.warp != MANY {
        a.warp = MANY;
        a.tid = MANY;
        a.instr = who.instr;
    }
}

/// Whether accesses recorded in `a` (same barrier interval) are unordered with `who`'s.
#[inline]
fn conflicts(a: &Accesses, who: Accessor<'_>) -> bool {
    if a.warp == MANY || a.warp != who.warp() {
        return true;
    }
    a.lanes & !who.lanes_before(a.lanes, a.wsync) != 0
}
