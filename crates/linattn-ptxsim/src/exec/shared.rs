//! One CTA's shared memory with the racecheck and initcheck shadow.
//!
//! The shadow keeps, per 4-byte granule (every shared store the kernels compile to is 32-bit
//! or wider), the race tracker's [`Granule`]: the last write and a summary of the reads
//! since the last CTA barrier (the ordering rules, `bar.sync` and `bar.warp.sync` member
//! masks, are in [`super::race`]).

use super::race::{Accessor, Granule, Race, FRESH};

/// A conflict found by the shadow.
pub enum SharedFault {
    /// Read of bytes no thread of this CTA has written.
    Uninitialised,
    /// The access conflicts with an earlier one of another thread.
    Race(Race),
}

impl From<Race> for SharedFault {
    fn from(race: Race) -> Self {
        SharedFault::Race(race)
    }
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
            if init && !s.written() {
                return Err(SharedFault::Uninitialised);
            }
            if race {
                s.read(who)?;
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
            if atomic && init && !s.written() {
                return Err(SharedFault::Uninitialised);
            }
            s.write(who, atomic, race, None)?;
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
