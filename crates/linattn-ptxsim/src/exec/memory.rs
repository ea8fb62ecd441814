//! Simulated device (global) memory: allocations with guard gaps between them, 32-bit words
//! that CTAs running on different host threads read and write without data races (relaxed
//! atomics), and a per-byte "written" shadow for initcheck.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};

use crate::error::SimError;

/// First device address handed out; low addresses stay unmapped so a null or small
/// pointer never hits an allocation.
const BASE_ADDRESS: u64 = 0x7f00_0000_0000;
/// Allocations are aligned like `cudaMalloc`'s, and separated by at least this much unmapped
/// space, so an access just past the end of one never lands in the next.
const ALIGNMENT: u64 = 256;
const GUARD: u64 = 4096;

/// One allocation: words and a 4-bit-per-word initialised mask.
pub struct Allocation {
    pub base: u64,
    pub bytes: u64,
    words: Box<[AtomicU32]>,
    init: Box<[AtomicU8]>,
}

impl Allocation {
    /// Never-written memory holds 0xff bytes: NaN in f32, f16 and bf16, so an output a kernel
    /// forgets to write shows up as non-finite even where no kernel reads it.
    fn new(base: u64, bytes: u64, initialised: bool) -> Allocation {
        let words = bytes.div_ceil(4) as usize;
        let (mask, fill) = if initialised { (0xf, 0) } else { (0, u32::MAX) };
        Allocation {
            base,
            bytes,
            words: (0..words).map(|_| AtomicU32::new(fill)).collect(),
            init: (0..words).map(|_| AtomicU8::new(mask)).collect(),
        }
    }

    pub fn end(&self) -> u64 {
        self.base + self.bytes
    }

    /// Reads `size` ∈ {1, 2, 4, 8} bytes at `offset` (aligned to `size`, in bounds).
    /// Returns the value and whether every byte was written before.
    #[inline]
    pub fn load(&self, offset: u64, size: u32) -> (u64, bool) {
        let word = (offset / 4) as usize;
        match size {
            8 => {
                let lo = self.words[word].load(Relaxed);
                let hi = self.words[word + 1].load(Relaxed);
                let init = self.init[word].load(Relaxed) & self.init[word + 1].load(Relaxed);
                (u64::from(lo) | (u64::from(hi) << 32), init == 0xf)
            }
            4 => (
                u64::from(self.words[word].load(Relaxed)),
                self.init[word].load(Relaxed) == 0xf,
            ),
            _ => {
                let shift = (offset % 4) as u32;
                let mask = byte_mask(shift, size);
                let value = self.words[word].load(Relaxed) >> (shift * 8);
                let value = if size == 2 {
                    value & 0xffff
                } else {
                    value & 0xff
                };
                let init = self.init[word].load(Relaxed) & mask == mask;
                (u64::from(value), init)
            }
        }
    }

    /// Writes the low `size` bytes of `value` at `offset` (aligned, in bounds).
    #[inline]
    pub fn store(&self, offset: u64, size: u32, value: u64) {
        let word = (offset / 4) as usize;
        match size {
            8 => {
                self.words[word].store(value as u32, Relaxed);
                self.words[word + 1].store((value >> 32) as u32, Relaxed);
                self.mark(word, 0xf);
                self.mark(word + 1, 0xf);
            }
            4 => {
                self.words[word].store(value as u32, Relaxed);
                self.mark(word, 0xf);
            }
            _ => {
                let shift = (offset % 4) as u32;
                let bits = if size == 2 { 0xffff } else { 0xff };
                let keep = !(bits << (shift * 8));
                let new = ((value as u32) & bits) << (shift * 8);
                // Other CTAs may write the other bytes of this word concurrently.
                let _ = self.words[word].fetch_update(Relaxed, Relaxed, |w| Some((w & keep) | new));
                self.mark(word, byte_mask(shift, size));
            }
        }
    }

    /// Atomic read-modify-write of a 32-bit word; returns the old value.
    pub fn update(&self, offset: u64, f: impl Fn(u32) -> u32) -> (u32, bool) {
        let word = (offset / 4) as usize;
        let init = self.init[word].load(Relaxed) == 0xf;
        let old = self.words[word]
            .fetch_update(Relaxed, Relaxed, |w| Some(f(w)))
            .unwrap_or_else(|w| w);
        self.mark(word, 0xf);
        (old, init)
    }

    #[inline]
    fn mark(&self, word: usize, mask: u8) {
        if self.init[word].load(Relaxed) & mask != mask {
            self.init[word].fetch_or(mask, Relaxed);
        }
    }

    fn write_bytes(&self, offset: u64, data: &[u8]) {
        for (k, &byte) in data.iter().enumerate() {
            self.store(offset + k as u64, 1, u64::from(byte));
        }
    }

    fn write_words(&self, offset: u64, data: &[u8]) {
        // Fast path for word-aligned runs; the ragged ends go byte by byte.
        let head = ((4 - offset % 4) % 4).min(data.len() as u64) as usize;
        self.write_bytes(offset, &data[..head]);
        let body = &data[head..];
        let words = body.len() / 4;
        let first = ((offset + head as u64) / 4) as usize;
        for k in 0..words {
            let w = u32::from_le_bytes([
                body[4 * k],
                body[4 * k + 1],
                body[4 * k + 2],
                body[4 * k + 3],
            ]);
            self.words[first + k].store(w, Relaxed);
            self.init[first + k].store(0xf, Relaxed);
        }
        self.write_bytes(offset + (head + 4 * words) as u64, &body[4 * words..]);
    }

    fn read_bytes(&self, offset: u64, out: &mut [u8]) {
        for (k, byte) in out.iter_mut().enumerate() {
            *byte = self.load(offset + k as u64, 1).0 as u8;
        }
    }

    fn read_words(&self, offset: u64, out: &mut [u8]) {
        let head = ((4 - offset % 4) % 4).min(out.len() as u64) as usize;
        let (head_out, body) = out.split_at_mut(head);
        self.read_bytes(offset, head_out);
        let words = body.len() / 4;
        let first = ((offset + head as u64) / 4) as usize;
        let (full, tail) = body.split_at_mut(4 * words);
        for (k, chunk) in full.chunks_exact_mut(4).enumerate() {
            chunk.copy_from_slice(&self.words[first + k].load(Relaxed).to_le_bytes());
        }
        self.read_bytes(offset + (head + 4 * words) as u64, tail);
    }
}

#[inline]
fn byte_mask(shift: u32, size: u32) -> u8 {
    (((1u32 << size) - 1) << shift) as u8
}

/// The device's memory: live allocations by base address, plus the ranges freed recently
/// (so a use after free is named as such).
pub struct GlobalMemory {
    live: BTreeMap<u64, Arc<Allocation>>,
    freed: Vec<(u64, u64)>,
    next: u64,
    used: u64,
    capacity: u64,
}

/// Why an address is not accessible.
pub enum AccessError {
    Unmapped(String),
    Misaligned,
}

impl GlobalMemory {
    pub fn new(capacity: u64) -> GlobalMemory {
        GlobalMemory {
            live: BTreeMap::new(),
            freed: Vec::new(),
            next: BASE_ADDRESS,
            used: 0,
            capacity,
        }
    }

    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    pub fn used(&self) -> u64 {
        self.used
    }

    /// A new allocation of `bytes` (at least 1), zero-filled and marked written when
    /// `initialised`, else marked never written (initcheck then flags reads before writes).
    pub fn alloc(&mut self, bytes: u64, initialised: bool) -> Result<u64, SimError> {
        let bytes = bytes.max(1);
        let free = self.capacity.saturating_sub(self.used);
        if bytes > free {
            return Err(SimError::OutOfMemory {
                requested: bytes,
                free,
                total: self.capacity,
            });
        }
        let base = self.next;
        self.next = (base + bytes + GUARD).div_ceil(ALIGNMENT) * ALIGNMENT;
        self.used += bytes;
        self.live
            .insert(base, Arc::new(Allocation::new(base, bytes, initialised)));
        Ok(base)
    }

    pub fn free(&mut self, base: u64) -> Result<(), SimError> {
        match self.live.remove(&base) {
            Some(allocation) => {
                self.used -= allocation.bytes;
                self.freed.push((base, allocation.end()));
                if self.freed.len() > 4096 {
                    self.freed.drain(..2048);
                }
                Ok(())
            }
            None => Err(SimError::Memory(format!(
                "free of {base:#x}, which is not the start of a live allocation"
            ))),
        }
    }

    fn find(&self, address: u64, len: u64) -> Result<(&Arc<Allocation>, u64), SimError> {
        let (_, allocation) = self
            .live
            .range(..=address)
            .next_back()
            .filter(|(_, a)| address + len <= a.end())
            .ok_or_else(|| {
                SimError::Memory(format!(
                    "{len} bytes at {address:#x}: {}",
                    self.describe(address)
                ))
            })?;
        Ok((allocation, address - allocation.base))
    }

    /// Host → device copy.
    pub fn write(&self, address: u64, data: &[u8]) -> Result<(), SimError> {
        let (allocation, offset) = self.find(address, data.len() as u64)?;
        allocation.write_words(offset, data);
        Ok(())
    }

    /// Device → host copy (reads of never-written bytes are allowed here: the host may
    /// copy a partly written buffer).
    pub fn read(&self, address: u64, out: &mut [u8]) -> Result<(), SimError> {
        let (allocation, offset) = self.find(address, out.len() as u64)?;
        allocation.read_words(offset, out);
        Ok(())
    }

    /// Sets `len` bytes to `value` (memset), marking them written.
    pub fn fill(&self, address: u64, len: u64, value: u8) -> Result<(), SimError> {
        let (allocation, offset) = self.find(address, len)?;
        let chunk = vec![value; len.min(1 << 20) as usize];
        let mut done = 0;
        while done < len {
            let n = (len - done).min(chunk.len() as u64) as usize;
            allocation.write_words(offset + done, &chunk[..n]);
            done += n as u64;
        }
        Ok(())
    }

    /// A read-only view for one launch.
    pub fn view(&self) -> MemoryView {
        let allocations: Vec<Arc<Allocation>> = self.live.values().cloned().collect();
        MemoryView {
            touched: allocations.iter().map(|_| Default::default()).collect(),
            allocations,
            freed: self.freed.clone(),
        }
    }

    fn describe(&self, address: u64) -> String {
        describe(
            address,
            self.live.values().map(|a| (a.base, a.end())),
            &self.freed,
        )
    }
}

fn describe(address: u64, live: impl Iterator<Item = (u64, u64)>, freed: &[(u64, u64)]) -> String {
    if freed.iter().any(|&(b, e)| (b..e).contains(&address)) {
        return "inside a freed allocation (use after free)".into();
    }
    let mut nearest: Option<(u64, u64, u64)> = None;
    for (base, end) in live {
        let distance = if address < base {
            base - address
        } else {
            address.saturating_sub(end - 1)
        };
        if nearest.is_none_or(|n| distance < n.2) {
            nearest = Some((base, end, distance));
        }
    }
    match nearest {
        Some((base, end, _)) if address >= end => format!(
            "{} bytes past the end of the {}-byte allocation at {base:#x}",
            address - end,
            end - base
        ),
        Some((base, end, _)) if address < base => format!(
            "{} bytes before the {}-byte allocation at {base:#x}",
            base - address,
            end - base
        ),
        _ => "not in any allocation".into(),
    }
}

/// The allocations live during one launch, sorted by base address, and the sectors this
/// launch touched in each. The sector sets belong to the view, not the allocations, so
/// launches running at once on different host threads count their own sectors only.
pub struct MemoryView {
    allocations: Vec<Arc<Allocation>>,
    freed: Vec<(u64, u64)>,
    /// Per allocation: one bit per 32-byte sector read / written (memory counters only;
    /// made on first use).
    touched: Vec<[OnceLock<Box<[AtomicU64]>>; 2]>,
}

impl MemoryView {
    /// Marks the sectors of an access as touched by this launch (memory counters).
    pub fn mark(&self, address: u64, bytes: u32, store: bool) {
        let k = self.allocations.partition_point(|a| a.base <= address);
        if k == 0 || address >= self.allocations[k - 1].end() {
            return;
        }
        let a = &self.allocations[k - 1];
        let bits = self.touched[k - 1][usize::from(store)].get_or_init(|| {
            (0..a.bytes.div_ceil(32).div_ceil(64))
                .map(|_| AtomicU64::new(0))
                .collect()
        });
        let offset = address - a.base;
        for sector in offset / 32..=(offset + u64::from(bytes.max(1)) - 1) / 32 {
            let (word, bit) = ((sector / 64) as usize, sector % 64);
            if bits[word].load(Relaxed) & (1 << bit) == 0 {
                bits[word].fetch_or(1 << bit, Relaxed);
            }
        }
    }

    /// The allocations of the launch: (base address, bytes), by address.
    pub fn spans(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.allocations.iter().map(|a| (a.base, a.bytes))
    }

    /// Distinct sectors (read, written) by this launch so far.
    pub fn touched_sectors(&self) -> (u64, u64) {
        let count = |store: bool| -> u64 {
            self.touched
                .iter()
                .filter_map(|t| t[usize::from(store)].get())
                .flat_map(|bits| bits.iter())
                .map(|w| u64::from(w.load(Relaxed).count_ones()))
                .sum()
        };
        (count(false), count(true))
    }

    /// The allocation holding `[address, address + size)` and the offset into it.
    #[inline]
    pub fn find(&self, address: u64, size: u32) -> Result<(&Allocation, u64), AccessError> {
        if address % u64::from(size.max(1)) != 0 {
            return Err(AccessError::Misaligned);
        }
        let k = self.allocations.partition_point(|a| a.base <= address);
        if k > 0 {
            let a = &self.allocations[k - 1];
            if address + u64::from(size) <= a.end() {
                return Ok((a, address - a.base));
            }
        }
        Err(AccessError::Unmapped(describe(
            address,
            self.allocations.iter().map(|a| (a.base, a.end())),
            &self.freed,
        )))
    }
}
