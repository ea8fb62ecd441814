//! What the machine can do, measured once per run: copy bandwidth (host and GPU) and the
//! GPU's identity.

use crate::results::{CopyBandwidth, GemmRateRecord};
use crate::stats::SampleStats;
use linattn_core::{AttnError, DeviceKind, HostMemory};
use std::time::Instant;

pub(super) mod gpu {
    use crate::results::GpuEnvironment;
    use linattn_core::AttnError;

    /// Name, driver, CUDA/NVRTC versions and memory of device 0; `None` without a GPU.
    pub fn environment() -> Option<GpuEnvironment> {
        let info = linattn_cuda::device_info(linattn_cuda::Platform::Cuda).ok()?;
        Some(GpuEnvironment {
            name: info.name,
            driver_version: kernel_driver_version(),
            // The CUDA version the driver API reports (cuDriverGetVersion).
            cuda_version: Some(info.driver_version),
            nvrtc_version: Some(info.nvrtc_version),
            memory_bytes: Some(info.total_memory_bytes),
        })
    }

    /// The NVIDIA kernel driver's version ("580.65.06"), from /proc on Linux.
    fn kernel_driver_version() -> Option<String> {
        let text = std::fs::read_to_string("/proc/driver/nvidia/version").ok()?;
        let line = text.lines().next()?;
        line.split_whitespace()
            .find(|w| w.chars().next().is_some_and(|c| c.is_ascii_digit()) && w.contains('.'))
            .map(str::to_string)
    }

    /// (free, total) device bytes.
    pub fn memory_info() -> Option<(u64, u64)> {
        linattn_cuda::memory_info(linattn_cuda::Platform::Cuda).ok()
    }

    /// Device-to-device copy bandwidth samples in GB/s.
    pub fn copy_bandwidth(bytes: u64, repeats: usize) -> Result<Vec<f64>, AttnError> {
        let bytes = usize::try_from(bytes)
            .map_err(|_| AttnError::SizeOverflow(format!("copy buffer of {bytes} bytes")))?;
        linattn_cuda::measure_copy_bandwidth(linattn_cuda::Platform::Cuda, bytes, repeats)
    }
}

/// Host memcpy bandwidth: `bytes` copied (read once, written once) `repeats` times.
pub(super) fn cpu_copy_bandwidth(repeats: usize) -> Option<CopyBandwidth> {
    // 256 MiB defeats every cache; halve it when the host is short of memory.
    let mut bytes: usize = 256 << 20;
    while HostMemory::ensure_available(2 * bytes as u64, "copy-bandwidth buffers").is_err() {
        bytes /= 2;
        if bytes < (16 << 20) {
            return None;
        }
    }
    let src: Vec<u8> = (0..bytes).map(|i| i as u8).collect();
    let mut dst = vec![0u8; bytes];
    dst.copy_from_slice(&src); // fault the pages in before timing
    let mut samples = Vec::with_capacity(repeats);
    for _ in 0..repeats {
        let t = Instant::now();
        dst.copy_from_slice(std::hint::black_box(&src));
        std::hint::black_box(&mut dst);
        let secs = t.elapsed().as_secs_f64();
        if secs > 0.0 {
            samples.push(2.0 * bytes as f64 / secs / 1e9);
        }
    }
    let median = SampleStats::of(&samples)?.median;
    Some(CopyBandwidth {
        device: DeviceKind::Cpu,
        bytes: bytes as u64,
        samples_gbps: samples,
        median_gbps: median,
    })
}

pub(super) fn gpu_copy_bandwidth() -> Result<CopyBandwidth, AttnError> {
    // 1 GiB, or a quarter of free memory on a small device.
    let bytes = match gpu::memory_info() {
        Some((free, _)) => (1u64 << 30).min(free / 4),
        None => 1u64 << 30,
    };
    let samples = gpu::copy_bandwidth(bytes, 10)?;
    let median = SampleStats::of(&samples)
        .ok_or_else(|| AttnError::State("copy bandwidth: no samples".into()))?
        .median;
    Ok(CopyBandwidth {
        device: DeviceKind::Cuda,
        bytes,
        samples_gbps: samples,
        median_gbps: median,
    })
}

/// `k` samples of the host's fp32 GEMM rate (GFLOP/s) on the products of
/// [`cpu_gemm_rate`], after one warm-up product: taken around each CPU cell.
pub(super) fn cpu_gemm_samples(k: usize) -> Vec<f64> {
    linattn_cpu::gemm::measure_f32_rate_with(1024, k).samples_gflops
}

/// The host's fp32 GEMM rate (5 products of 1024² matrices on every core, ≈ 0.2 s on two
/// cores), once per run.
pub(super) fn cpu_gemm_rate() -> GemmRateRecord {
    let rate = linattn_cpu::gemm::measure_f32_rate();
    GemmRateRecord {
        shape: rate.shape,
        samples_gflops: rate.samples_gflops,
        median_gflops: rate.gflops,
    }
}
