//! Host-memory meter: a global allocator that counts live bytes and their peak, so the
//! harness can report a CPU backend's extra memory per run (SPEC §8's memory column).
//! A binary opts in with `#[global_allocator] static A: CountingAllocator = CountingAllocator;`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

static LIVE: AtomicUsize = AtomicUsize::new(0);
/// Lowest live bytes since the measurement started.
static TROUGH: AtomicUsize = AtomicUsize::new(0);
/// Largest rise of live bytes above an earlier trough since the measurement started: the
/// memory a run built up, even when it first freed results of the previous run.
static RISE: AtomicUsize = AtomicUsize::new(0);
/// Highest live bytes since the measurement started.
static PEAK_LIVE: AtomicUsize = AtomicUsize::new(0);
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
        note_dealloc(layout.size());
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: same contract as GlobalAlloc::realloc, forwarded to `System`.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            note_dealloc(layout.size());
            note_alloc(new_size);
        }
        p
    }
}

fn note_alloc(size: usize) {
    INSTALLED.store(true, Ordering::Relaxed);
    let live = LIVE.fetch_add(size, Ordering::Relaxed) + size;
    PEAK_LIVE.fetch_max(live, Ordering::Relaxed);
    RISE.fetch_max(
        live.saturating_sub(TROUGH.load(Ordering::Relaxed)),
        Ordering::Relaxed,
    );
}

fn note_dealloc(size: usize) {
    let live = LIVE.fetch_sub(size, Ordering::Relaxed).saturating_sub(size);
    TROUGH.fetch_min(live, Ordering::Relaxed);
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
    /// Starts a measurement and returns the live bytes (the baseline).
    pub fn start() -> usize {
        let live = LIVE.load(Ordering::Relaxed);
        TROUGH.store(live, Ordering::Relaxed);
        PEAK_LIVE.store(live, Ordering::Relaxed);
        RISE.store(0, Ordering::Relaxed);
        live
    }
    /// Highest live bytes since [`HostMemory::start`]. Minus the live bytes of a reference
    /// point (say, right after staging) it counts everything held above that point, buffers
    /// a backend reuses from run to run included (a rise would not see them).
    pub fn peak_live() -> usize {
        PEAK_LIVE.load(Ordering::Relaxed)
    }
    /// Peak extra bytes since [`HostMemory::start`]: the largest rise of live bytes above
    /// the lowest point before it. At least the peak above `baseline`, and unlike it not
    /// hidden when the run first frees the previous run's results (a backend dropping its
    /// last output, autograd graph included, before computing the next).
    pub fn peak_above(baseline: usize) -> usize {
        let _ = baseline; // the trough starts at the baseline, so the rise covers it
        RISE.load(Ordering::Relaxed)
    }
}

/// One `<field> <n> kB` line of /proc/meminfo, in bytes.
fn meminfo_bytes(field: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
        .map(|kib| kib * 1024)
}

impl HostMemory {
    /// Bytes the OS reports as available (`MemAvailable` of /proc/meminfo), if readable.
    pub fn available() -> Option<u64> {
        meminfo_bytes("MemAvailable:")
    }

    /// Installed host memory (`MemTotal` of /proc/meminfo), if readable.
    pub fn total() -> Option<u64> {
        meminfo_bytes("MemTotal:")
    }

    /// Refuses, with a typed error, an allocation of `bytes` for `what` that would not fit in
    /// available memory (keeping a 10% margin): Rust aborts on allocation failure and Linux
    /// overcommit would OOM-kill later, so large buffers are checked before they are made.
    pub fn ensure_available(bytes: u64, what: &str) -> Result<(), crate::error::AttnError> {
        match Self::available() {
            Some(avail) if bytes > avail / 10 * 9 => Err(crate::error::AttnError::OutOfMemory {
                device: "host".into(),
                requested_bytes: bytes,
                detail: format!("{what}; {avail} bytes available"),
            }),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The meter is global: these tests drive its counters directly rather than installing
    // the allocator in the test binary.
    #[test]
    fn rise_counts_a_rebuild_after_a_free() {
        LIVE.store(1000, Ordering::Relaxed);
        let base = HostMemory::start();
        note_dealloc(800); // the previous result is dropped: live 200
        note_alloc(700); // the new one is built: live 900, rise 700 above the trough
        note_alloc(100);
        note_dealloc(300);
        assert_eq!(HostMemory::live(), 700);
        assert_eq!(HostMemory::peak_above(base), 800);
        assert_eq!(HostMemory::peak_live(), 1000);
    }
}
