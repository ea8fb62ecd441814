//! Host-memory meter: a global allocator that counts live bytes and their peak, so the
//! harness can report a CPU backend's extra memory per run (SPEC §8's memory column).
//! A binary opts in with `#[global_allocator] static A: CountingAllocator = CountingAllocator;`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// The system allocator plus two counters (relaxed atomics: a few ns per allocation).
pub struct CountingAllocator;

unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged to the system allocator.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            note_alloc(layout.size());
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged to the system allocator.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            note_alloc(layout.size());
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator, i.e. from `System`, with this layout.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: same contract as GlobalAlloc::realloc, forwarded to `System`.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
            note_alloc(new_size);
        }
        p
    }
}

fn note_alloc(size: usize) {
    INSTALLED.store(true, Ordering::Relaxed);
    let live = LIVE.fetch_add(size, Ordering::Relaxed) + size;
    PEAK.fetch_max(live, Ordering::Relaxed);
}

/// Reading the meter.
pub struct HostMemory;

impl HostMemory {
    /// True once the counting allocator has seen an allocation (i.e. it is installed).
    pub fn is_metered() -> bool {
        INSTALLED.load(Ordering::Relaxed)
    }
    /// Live bytes now.
    pub fn live() -> usize {
        LIVE.load(Ordering::Relaxed)
    }
    /// Starts a measurement: resets the peak to the live bytes and returns them (the baseline).
    pub fn start() -> usize {
        let live = LIVE.load(Ordering::Relaxed);
        PEAK.store(live, Ordering::Relaxed);
        live
    }
    /// Peak bytes above `baseline` since [`HostMemory::start`].
    pub fn peak_above(baseline: usize) -> usize {
        PEAK.load(Ordering::Relaxed).saturating_sub(baseline)
    }
}

impl HostMemory {
    /// Bytes the OS reports as available (`MemAvailable` of /proc/meminfo), if readable.
    pub fn available() -> Option<u64> {
        let text = std::fs::read_to_string("/proc/meminfo").ok()?;
        text.lines()
            .find_map(|l| l.strip_prefix("MemAvailable:"))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|kib| kib * 1024)
    }

    /// Refuses, with a typed error, an allocation of `bytes` for `what` that would not fit in
    /// available memory (keeping a 10% margin): Rust aborts on allocation failure and Linux
    /// overcommit would OOM-kill later, so large buffers are checked before they are made.
    pub fn ensure_available(bytes: u64, what: &str) -> Result<(), crate::AttnError> {
        match Self::available() {
            Some(avail) if bytes > avail / 10 * 9 => Err(crate::AttnError::OutOfMemory {
                device: "host".into(),
                requested_bytes: bytes,
                detail: format!("{what}; {avail} bytes available"),
            }),
            _ => Ok(()),
        }
    }
}
