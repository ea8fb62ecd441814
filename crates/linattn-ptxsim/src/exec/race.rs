//! The race tracker shared by the shared-memory racecheck and the global-memory checker
//! (within one CTA): per granule, the last plain write and a summary of the reads and the
//! atomics since the last CTA barrier.
//!
//! Two accesses of different threads are ordered when a `bar.sync` separates them (CTA
//! barrier epochs), or when both threads are in one warp and `bar.warp.sync`s whose member
//! masks hold both (directly, or through lanes they share) separate them (the warp's lane
//! order, `Warp::warp_sync`). Anything else with a write on either side is a race:
//! between warps, and between lanes of one warp, which the PTX memory model does not order
//! without `bar.warp.sync` (independent thread scheduling). Atomics conflict with plain
//! accesses, not with each other. Where the caller passes the values stored (globalcheck),
//! two unordered plain writes of the same value do not conflict: whichever lands last, the
//! granule holds that value (readers unordered with either write still conflict).

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
/// current barrier interval (so an atomic never hides an earlier plain write from a later
/// check).
#[derive(Clone, Copy)]
pub struct Granule {
    w_tid: u16,
    /// The value of the last plain write, when the caller gave one.
    w_value: Option<u32>,
    w_bar: u32,
    w_wsync: u32,
    w_instr: u32,
    reads: Accesses,
    atomics: Accesses,
}

/// A granule no thread has touched.
pub const FRESH: Granule = Granule {
    w_tid: NONE,
    w_value: None,
    w_bar: 0,
    w_wsync: 0,
    w_instr: 0,
    reads: NO_ACCESSES,
    atomics: NO_ACCESSES,
};

/// Who accesses: linear thread id in the CTA, its warp's clock, what its lane knows of the
/// other lanes (`Warp::known` of the lane), the CTA barrier epoch, and the instruction index.
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
        // No entry of `known` exceeds the warp's clock (syncs stamp it with the clock), so
        // with no sync since the accesses' stamp only the own lane is ordered: skip the loop.
        if self.wsync <= wsync {
            return before;
        }
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

/// `this` access conflicts with an earlier one of the same CTA (`other_tid` and
/// `other_instr`; `None` when several threads read).
#[derive(Clone, Copy, Debug)]
pub struct Race {
    pub this_is_write: bool,
    pub other_is_write: bool,
    pub other_tid: Option<u16>,
    pub other_instr: u32,
}

impl Granule {
    /// Whether any thread wrote the granule (plainly or atomically).
    #[inline]
    pub fn written(&self) -> bool {
        self.w_tid != NONE || self.atomics.tid != NONE
    }

    /// A plain read by `who`: checked against the writes, then recorded.
    #[inline]
    pub fn read(&mut self, who: Accessor<'_>) -> Result<(), Race> {
        check_plain_write(self, who, None)?;
        check_accesses(&self.atomics, who, false, true)?;
        record(&mut self.reads, who);
        Ok(())
    }

    /// A plain write of `value` (if known), or an atomic read-modify-write, by `who`:
    /// checked when `check`, then recorded (initcheck needs the record without the check).
    #[inline]
    pub fn write(
        &mut self,
        who: Accessor<'_>,
        atomic: bool,
        check: bool,
        value: Option<u32>,
    ) -> Result<(), Race> {
        if check {
            let value = if atomic { None } else { value };
            check_plain_write(self, who, Some(value))?;
            check_accesses(&self.reads, who, true, false)?;
            if !atomic {
                check_accesses(&self.atomics, who, true, true)?;
            }
        }
        if atomic {
            record(&mut self.atomics, who);
        } else {
            self.w_tid = who.tid;
            self.w_value = value;
            self.w_bar = who.bar;
            self.w_wsync = who.wsync;
            self.w_instr = who.instr;
        }
        Ok(())
    }
}

/// `who`'s access against the granule's last plain write; `write` is `None` for a read, else
/// `Some(value stored, if known)`.
#[inline]
fn check_plain_write(
    s: &Granule,
    who: Accessor<'_>,
    write: Option<Option<u32>>,
) -> Result<(), Race> {
    let same_value = write.flatten().is_some_and(|v| s.w_value == Some(v));
    if s.w_tid != NONE && s.w_bar == who.bar && !ordered(s.w_tid, s.w_wsync, who) && !same_value {
        return Err(Race {
            this_is_write: write.is_some(),
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
) -> Result<(), Race> {
    if a.tid != NONE && a.bar == who.bar && conflicts(a, who) {
        return Err(Race {
            this_is_write,
            other_is_write: others_write,
            other_tid: (a.tid != MANY).then_some(a.tid),
            other_instr: a.instr,
        });
    }
    Ok(())
}

/// Whether an earlier access by `tid` at warp-sync epoch `wsync` (same CTA barrier epoch)
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
