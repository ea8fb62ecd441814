//! One CTA's shared memory with the racecheck and initcheck shadow.
//!
//! The shadow keeps, per 4-byte granule (every shared store the kernels compile to is 32-bit
//! or wider), the last write and a summary of the reads since
//! the last CTA barrier. Two accesses of different threads are ordered when a `bar.sync`
//! separates them (CTA barrier epochs), or when both threads are in one warp and a
//! `bar.warp.sync` of that warp separates them (warp-sync epochs). Anything else with a
//! write on either side is a race: between warps, and between lanes of one warp, which the
//! PTX memory model does not order without `bar.warp.sync` (independent thread scheduling).

/// No thread / many threads, in the shadow's thread and warp fields.
const NONE: u16 = u16::MAX;
const MANY: u16 = u16::MAX - 1;

#[derive(Clone, Copy)]
struct Granule {
    w_tid: u16,
    w_atomic: bool,
    w_bar: u32,
    w_wsync: u32,
    w_instr: u32,
    r_tid: u16,
    r_warp: u16,
    r_bar: u32,
    r_wsync: u32,
    r_instr: u32,
}

const FRESH: Granule = Granule {
    w_tid: NONE,
    w_atomic: false,
    w_bar: 0,
    w_wsync: 0,
    w_instr: 0,
    r_tid: NONE,
    r_warp: NONE,
    r_bar: 0,
    r_wsync: 0,
    r_instr: 0,
};

/// Who accesses: linear thread id, its warp's sync epoch, the CTA barrier epoch, and the
/// instruction index.
#[derive(Clone, Copy)]
pub struct Accessor {
    pub tid: u16,
    pub wsync: u32,
    pub bar: u32,
    pub instr: u32,
}

impl Accessor {
    fn warp(&self) -> u16 {
        self.tid / 32
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
    pub fn on_read(&mut self, offset: usize, size: u32, who: Accessor) -> Result<(), SharedFault> {
        if self.shadow.is_empty() {
            return Ok(());
        }
        let (race, init) = (self.race, self.init);
        for g in granules(offset, size) {
            let s = &mut self.shadow[g];
            if s.w_tid == NONE {
                if init {
                    return Err(SharedFault::Uninitialised);
                }
            } else if race && s.w_bar == who.bar && !ordered(s.w_tid, s.w_wsync, who) {
                return Err(SharedFault::Race {
                    this_is_write: false,
                    other_is_write: true,
                    other_tid: Some(s.w_tid),
                    other_instr: s.w_instr,
                });
            }
            if race {
                record_read(s, who);
            }
        }
        Ok(())
    }

    /// Shadow update for a write (or an atomic read-modify-write).
    #[inline]
    pub fn on_write(
        &mut self,
        offset: usize,
        size: u32,
        who: Accessor,
        atomic: bool,
    ) -> Result<(), SharedFault> {
        if self.shadow.is_empty() {
            return Ok(());
        }
        let race = self.race;
        for g in granules(offset, size) {
            let s = &mut self.shadow[g];
            if race {
                if s.w_tid != NONE
                    && s.w_bar == who.bar
                    && !(atomic && s.w_atomic)
                    && !ordered(s.w_tid, s.w_wsync, who)
                {
                    return Err(SharedFault::Race {
                        this_is_write: true,
                        other_is_write: true,
                        other_tid: Some(s.w_tid),
                        other_instr: s.w_instr,
                    });
                }
                if s.r_bar == who.bar && s.r_tid != NONE && reads_conflict(s, who) {
                    return Err(SharedFault::Race {
                        this_is_write: true,
                        other_is_write: false,
                        other_tid: (s.r_tid != MANY).then_some(s.r_tid),
                        other_instr: s.r_instr,
                    });
                }
            }
            s.w_tid = who.tid;
            s.w_atomic = atomic;
            s.w_bar = who.bar;
            s.w_wsync = who.wsync;
            s.w_instr = who.instr;
        }
        Ok(())
    }
}

/// Bytes tracked by one shadow entry.
const GRANULE: usize = 4;

#[inline]
fn granules(offset: usize, size: u32) -> std::ops::Range<usize> {
    offset / GRANULE..(offset + size as usize).div_ceil(GRANULE)
}

/// Whether an earlier access by `tid` at warp-sync epoch `wsync` (same CTA barrier epoch)
/// happens before `who`'s.
#[inline]
fn ordered(tid: u16, wsync: u32, who: Accessor) -> bool {
    tid == who.tid || (tid / 32 == who.warp() && wsync < who.wsync)
}

#[inline]
fn record_read(s: &mut Granule, who: Accessor) {
    if s.r_bar != who.bar || s.r_tid == NONE {
        s.r_bar = who.bar;
        s.r_tid = who.tid;
        s.r_warp = who.warp();
        s.r_wsync = who.wsync;
        s.r_instr = who.instr;
        return;
    }
    if s.r_warp == who.warp() {
        if s.r_wsync < who.wsync {
            // Earlier reads of this warp are ordered before everything it does from now on;
            // for the other warps any reader of this warp is as good as another.
            s.r_tid = who.tid;
            s.r_wsync = who.wsync;
            s.r_instr = who.instr;
        } else if s.r_tid != who.tid {
            s.r_tid = MANY;
        }
    } else if s.r_warp != MANY {
        s.r_warp = MANY;
        s.r_tid = MANY;
        s.r_instr = who.instr;
    }
}

#[inline]
fn reads_conflict(s: &Granule, who: Accessor) -> bool {
    if s.r_warp == MANY || s.r_warp != who.warp() {
        return true;
    }
    s.r_tid != who.tid && s.r_wsync >= who.wsync
}
