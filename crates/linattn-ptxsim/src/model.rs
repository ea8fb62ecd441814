//! A performance *model* of a launch on the part an architecture names: theoretical occupancy
//! from the CUDA occupancy calculator's rules, and a roofline lower bound on time from the
//! counters. Never a measurement: no caches but an infinite L2 (DRAM traffic = the unique
//! sectors), no latency, no ptxas scheduling, no clock throttling, perfect overlap of the
//! bounds, every SM busy (no wave quantisation).

use crate::arch::SimArch;
use crate::counters::{Counters, MMA_FLOPS};

/// Theoretical occupancy of a kernel on one SM.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Occupancy {
    /// Resident CTAs per SM.
    pub ctas_per_sm: u32,
    /// Resident warps per SM.
    pub warps_per_sm: u32,
    /// `warps_per_sm / max_warps_per_sm`.
    pub fraction: f64,
    /// What limits it: "registers", "shared memory", "threads", "CTAs" (or "launch" when the
    /// CTA cannot fit at all).
    pub limiter: &'static str,
}

/// CTAs of `threads` threads using `registers` per thread and `shared_bytes` (static +
/// dynamic) that fit on one SM of `arch`.
pub fn occupancy(arch: &SimArch, threads: u32, registers: u32, shared_bytes: u64) -> Occupancy {
    let warps = threads.div_ceil(32).max(1);
    let unit = arch.register_alloc_unit;
    let regs_per_warp = (registers.max(1) * 32).div_ceil(unit) * unit;
    let by_registers = arch.registers_per_sm / (regs_per_warp * warps).max(1);
    let smem_unit = u64::from(arch.shared_alloc_unit);
    let smem =
        (shared_bytes + u64::from(arch.shared_reserved_per_cta)).div_ceil(smem_unit) * smem_unit;
    let by_shared = (u64::from(arch.shared_per_sm) / smem.max(1)) as u32;
    let by_threads = arch.max_warps_per_sm / warps;
    let limits = [
        (by_registers, "registers"),
        (by_shared, "shared memory"),
        (by_threads, "threads"),
        (arch.max_ctas_per_sm, "CTAs"),
    ];
    let (ctas, limiter) = limits
        .iter()
        .copied()
        .min_by_key(|(n, _)| *n)
        .unwrap_or((0, "launch"));
    let limiter = if ctas == 0 { "launch" } else { limiter };
    Occupancy {
        ctas_per_sm: ctas,
        warps_per_sm: ctas * warps,
        fraction: f64::from(ctas * warps) / f64::from(arch.max_warps_per_sm),
        limiter,
    }
}

/// The roofline lower bound of some launches' time on `arch`: the largest of the DRAM,
/// tensor-core, FP32 and issue times, plus the launch overheads.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Roofline {
    pub dram_s: f64,
    pub tensor_s: f64,
    pub fp32_s: f64,
    pub issue_s: f64,
    pub launch_s: f64,
    /// max(dram, tensor, fp32, issue) + launch.
    pub total_s: f64,
    /// Which of the four is the largest.
    pub bound: &'static str,
}

pub fn roofline(arch: &SimArch, c: &Counters, launches: u64) -> Roofline {
    let dram_s = c.unique_dram_bytes() as f64 / (arch.hbm_gbps * 1e9);
    let tensor_s = (c.mma * MMA_FLOPS) as f64 / (arch.tensor_tflops * 1e12);
    let fp32_s = c.fp32_flops as f64 / (arch.fp32_tflops * 1e12);
    let issue_rate =
        f64::from(arch.sm_count) * f64::from(arch.schedulers_per_sm) * arch.boost_clock_ghz * 1e9;
    let issue_s = c.warp_instructions as f64 / issue_rate;
    let launch_s = launches as f64 * arch.launch_overhead_us * 1e-6;
    let bounds = [
        (dram_s, "dram"),
        (tensor_s, "tensor"),
        (fp32_s, "fp32"),
        (issue_s, "issue"),
    ];
    let (largest, bound) = bounds
        .iter()
        .copied()
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .unwrap_or((0.0, "dram"));
    Roofline {
        dram_s,
        tensor_s,
        fp32_s,
        issue_s,
        launch_s,
        total_s: largest + launch_s,
        bound,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn occupancy_follows_the_calculator_rules() {
        let h100 = SimArch::SM90;
        // 256 threads, 24 registers, no shared memory: threads limit (8 CTAs × 8 warps = 64;
        // registers would allow 10).
        let o = occupancy(&h100, 256, 24, 0);
        assert_eq!(
            (o.ctas_per_sm, o.warps_per_sm, o.limiter),
            (8, 64, "threads")
        );
        assert!((o.fraction - 1.0).abs() < 1e-12);
        // 128 registers per thread: 128·32 = 4096 per warp, 8 warps → 2 CTAs.
        let o = occupancy(&h100, 256, 128, 0);
        assert_eq!((o.ctas_per_sm, o.limiter), (2, "registers"));
        // 255 registers round up to 256 (8-register granularity per thread).
        assert_eq!(occupancy(&h100, 256, 255, 0).ctas_per_sm, 1);
        // 100 KB of shared memory (+1 KB reserved) per CTA: 2 CTAs in 228 KB.
        let o = occupancy(&h100, 128, 32, 100 << 10);
        assert_eq!((o.ctas_per_sm, o.limiter), (2, "shared memory"));
        // The A100 has 164 KB: one such CTA.
        assert_eq!(occupancy(&SimArch::SM80, 128, 32, 100 << 10).ctas_per_sm, 1);
        // Tiny CTAs: the 32-CTA limit.
        assert_eq!(occupancy(&h100, 32, 16, 0).limiter, "CTAs");
    }

    #[test]
    fn roofline_picks_the_largest_bound() {
        let h100 = SimArch::SM90;
        let c = Counters {
            unique_load_sectors: 1 << 30,
            ..Counters::default()
        };
        let r = roofline(&h100, &c, 1);
        assert_eq!(r.bound, "dram");
        assert!((r.dram_s - 32.0 * (1u64 << 30) as f64 / 3352e9).abs() < 1e-12);
        assert!((r.total_s - r.dram_s - 2.5e-6).abs() < 1e-12);
        let c = Counters {
            mma: 1 << 30,
            ..Counters::default()
        };
        assert_eq!(roofline(&h100, &c, 0).bound, "tensor");
    }
}
