//! Counted device memory on any [`Executor`].
//!
//! * [`MemoryMeter`] + [`DeviceBuffer`] — every device allocation is counted (live and peak
//!   bytes) against a meter the backend owns, so `RunStats::device_bytes` is exact: keep one
//!   meter for staged inputs and one for outputs/workspace, `reset_peak()` before a run, read
//!   `peak()` after.
//! * [`DeviceBuffer::uninit`] for buffers a kernel writes in full (the simulator's initcheck
//!   then proves it does), [`DeviceBuffer::zeros`] for buffers a kernel accumulates into,
//!   [`DeviceBuffer::upload`] for host data. Large requests are checked against the device's
//!   free memory first, so an impossible one is a clean `AttnError::OutOfMemory`.
//! * A buffer is a kernel pointer argument through [`crate::params::Ptr`]: `ptr(&buf)`,
//!   `ptr(Some(&buf))`, `Ptr::NULL`.
//! * [`StorageElem`] — f32 / `half::f16` / `half::bf16` with f64 conversions for staging.

use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use linattn_core::{AttnError, Precision};

use crate::executor::Executor;

#[derive(Debug, Default)]
struct MeterCounts {
    live: AtomicU64,
    peak: AtomicU64,
}

/// Live and peak device bytes of the buffers allocated against it. Clones share counts.
#[derive(Debug, Clone, Default)]
pub struct MemoryMeter(Arc<MeterCounts>);

impl MemoryMeter {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn live(&self) -> u64 {
        self.0.live.load(Ordering::Relaxed)
    }

    pub fn peak(&self) -> u64 {
        self.0.peak.load(Ordering::Relaxed)
    }

    /// Starts a new measurement: peak := live.
    pub fn reset_peak(&self) {
        self.0.peak.store(self.live(), Ordering::Relaxed);
    }

    fn add(&self, bytes: u64) {
        let live = self.0.live.fetch_add(bytes, Ordering::Relaxed) + bytes;
        self.0.peak.fetch_max(live, Ordering::Relaxed);
    }

    fn sub(&self, bytes: u64) {
        self.0.live.fetch_sub(bytes, Ordering::Relaxed);
    }
}

/// Allocations at least this large are checked against the free device memory first.
pub const CHECKED_ALLOCATION_BYTES: u64 = 64 << 20;

/// Storage element types of the kernels (`LA_STORAGE`), with the host conversions staging
/// and read-back use.
pub trait StorageElem: bytemuck::Pod + Default + Send + Sync + 'static {
    const PRECISION: Precision;
    /// Rounds to nearest (one rounding from f64).
    fn from_f64(x: f64) -> Self;
    fn to_f64(self) -> f64;
}

impl StorageElem for f32 {
    const PRECISION: Precision = Precision::F32;
    fn from_f64(x: f64) -> Self {
        x as f32
    }
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
}

impl StorageElem for half::f16 {
    const PRECISION: Precision = Precision::F16;
    fn from_f64(x: f64) -> Self {
        half::f16::from_f64(x)
    }
    fn to_f64(self) -> f64 {
        half::f16::to_f64(self)
    }
}

impl StorageElem for half::bf16 {
    const PRECISION: Precision = Precision::BF16;
    fn from_f64(x: f64) -> Self {
        half::bf16::from_f64(x)
    }
    fn to_f64(self) -> f64 {
        half::bf16::to_f64(self)
    }
}

/// A device buffer of `T`, counted against a [`MemoryMeter`] while it lives.
pub struct DeviceBuffer<T> {
    exec: Arc<dyn Executor>,
    address: u64,
    len: usize,
    bytes: u64,
    meter: MemoryMeter,
    _elem: PhantomData<T>,
}

impl<T: bytemuck::Pod> DeviceBuffer<T> {
    fn alloc(
        exec: &Arc<dyn Executor>,
        meter: &MemoryMeter,
        len: usize,
        zeroed: bool,
    ) -> Result<Self, AttnError> {
        let bytes = len
            .checked_mul(std::mem::size_of::<T>())
            .map(|b| b as u64)
            .ok_or_else(|| AttnError::SizeOverflow(format!("{len} device elements")))?;
        if bytes >= CHECKED_ALLOCATION_BYTES {
            let (free, total) = exec.memory_info()?;
            if bytes > free {
                return Err(AttnError::OutOfMemory {
                    device: exec.info().name.clone(),
                    requested_bytes: bytes,
                    detail: format!("{free} bytes free of {total}"),
                });
            }
        }
        let address = exec.alloc(bytes, zeroed).map_err(|e| match e {
            AttnError::OutOfMemory { detail, .. } => AttnError::OutOfMemory {
                device: exec.info().name.clone(),
                requested_bytes: bytes,
                detail,
            },
            other => other,
        })?;
        meter.add(bytes);
        Ok(DeviceBuffer {
            exec: exec.clone(),
            address,
            len,
            bytes,
            meter: meter.clone(),
            _elem: PhantomData,
        })
    }

    /// `len` zeroed elements (a zero-length request still allocates one byte, since CUDA
    /// rejects empty allocations, but reports `len() == 0`).
    pub fn zeros(
        exec: &Arc<dyn Executor>,
        meter: &MemoryMeter,
        len: usize,
    ) -> Result<Self, AttnError> {
        Self::alloc(exec, meter, len, true)
    }

    /// `len` elements of undefined contents, for buffers kernels write in full.
    pub fn uninit(
        exec: &Arc<dyn Executor>,
        meter: &MemoryMeter,
        len: usize,
    ) -> Result<Self, AttnError> {
        Self::alloc(exec, meter, len, false)
    }

    /// A copy of `host` on the device.
    pub fn upload(
        exec: &Arc<dyn Executor>,
        meter: &MemoryMeter,
        host: &[T],
    ) -> Result<Self, AttnError> {
        let buffer = Self::alloc(exec, meter, host.len(), false)?;
        if !host.is_empty() {
            exec.upload(buffer.address, bytemuck::cast_slice(host))?;
        }
        Ok(buffer)
    }

    /// The contents (waits for the device).
    pub fn download(&self) -> Result<Vec<T>, AttnError> {
        let mut host = vec![T::zeroed(); self.len];
        if self.len > 0 {
            self.exec
                .download(self.address, bytemuck::cast_slice_mut(&mut host))?;
        }
        Ok(host)
    }

    /// Sets every byte to zero.
    pub fn zero(&mut self) -> Result<(), AttnError> {
        self.exec.memset_zero(self.address, self.bytes)
    }
}

impl<T: StorageElem> DeviceBuffer<T> {
    /// Host conversion from f64 then upload (staging).
    pub fn upload_f64(
        exec: &Arc<dyn Executor>,
        meter: &MemoryMeter,
        host: &[f64],
    ) -> Result<Self, AttnError> {
        let converted: Vec<T> = host.iter().map(|&x| T::from_f64(x)).collect();
        Self::upload(exec, meter, &converted)
    }

    /// The contents widened to f64.
    pub fn download_f64(&self) -> Result<Vec<f64>, AttnError> {
        Ok(self.download()?.into_iter().map(T::to_f64).collect())
    }
}

impl<T> DeviceBuffer<T> {
    /// Elements requested.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes counted against the meter.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The device address (valid while the buffer lives).
    pub fn address(&self) -> u64 {
        self.address
    }
}

impl<T> Drop for DeviceBuffer<T> {
    fn drop(&mut self) {
        self.exec.free(self.address);
        self.meter.sub(self.bytes);
    }
}
