//! A performance *model* of a launch on the part an architecture names: theoretical occupancy
//! from the CUDA occupancy calculator's rules, a roofline lower bound on time from the
//! counters, and ([`launch`]) a latency term: the CTAs' critical paths from the warp issue
//! clocks (`exec::clock`), in waves over the SMs. Never a measurement: no caches but an
//! infinite L2 (DRAM traffic = the unique sectors), one latency per instruction class, no
//! ptxas scheduling (PTX is timed as written), no clock throttling, perfect overlap of the
//! bounds but one: an SM's latency path and its issue time overlap as [`overlap`] says.

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
    let by_registers = arch.ctas_by_registers(threads, registers);
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

/// The exponent of [`overlap`]. The H100 run of 2026-11-27 alone would choose 1.6–2.0 (the
/// flat optimum of the mean |log(model / measured)| over its eight SM-bound chunked launches
/// at (2, 16384, 16, 128)), but above 1 the time would fall as the longer demand grows
/// (∂/∂max = 1 − a·r^(a+1) at r = min/max): 1 is the largest exponent that keeps it monotone.
pub const OVERLAP_EXPONENT: i32 = 1;

/// The cycles of an SM whose warps need `latency` cycles along their critical path and
/// `issue` cycles of its schedulers: max + min · (min / max)^[`OVERLAP_EXPONENT`].
///
/// Why not max: warps that share a scheduler hide each other's issue behind their stalls
/// only when one demand dwarfs the other. Where the two are alike they add up: on the H100
/// (2026-11-27, ncu's scheduler statistics) the segmented chunked kernels, 2 CTAs of 8 warps
/// per SM with path ≈ issue in the model, issued on 39–48% of cycles and took 1.8–2.4× the
/// max (`cc_forward_seg` 642 µs against a modelled 341). With this combination those eight
/// launches are modelled at 0.82–1.18× of their measured time (0.42–0.93× with the max); a
/// path far longer than issue, as in the small launches of the N = 4096 runs, is unchanged.
pub fn overlap(latency: f64, issue: f64) -> f64 {
    let (hi, lo) = (latency.max(issue), latency.min(issue));
    if hi <= 0.0 {
        return 0.0;
    }
    hi + lo * (lo / hi).powi(OVERLAP_EXPONENT)
}

/// The model of one launch: the roofline's bounds, and the latency/issue time of its CTAs
/// scheduled in waves on the SMs (see [`launch`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LaunchModel {
    pub roofline: Roofline,
    /// Waves of CTAs, each SM taking its CTAs' critical path and its issue time (warp
    /// instructions of its resident CTAs / schedulers) combined by [`overlap`].
    pub sm_s: f64,
    /// Whether `sm_s` was set by the critical path ("latency") or by issue ("issue").
    pub sm_bound: &'static str,
    /// max(sm, dram, tensor, fp32) + launch overhead.
    pub total_s: f64,
    /// Which of latency / issue / dram / tensor / fp32 is the largest.
    pub bound: &'static str,
}

/// The model of one launch of `ctas` CTAs with counters `c` (the critical path is that of
/// the launch's longest CTA: `Counters::critical_path_cycles`) at occupancy `occ`.
///
/// Per wave, each SM holds up to `occ.ctas_per_sm` CTAs and takes [`overlap`](critical
/// path, their warp instructions / schedulers) cycles; full waves, then the last wave's tail with
/// ceil(rest / SMs) CTAs per SM. Every CTA is charged the longest CTA's critical path and
/// the launch's mean instructions per CTA. Clock: the part's boost clock (`SimArch`).
pub fn launch(arch: &SimArch, c: &Counters, ctas: u64, occ: &Occupancy) -> LaunchModel {
    let roofline = roofline(arch, c, 1);
    let ctas = ctas.max(1);
    let resident = u64::from(occ.ctas_per_sm.max(1));
    let sms = u64::from(arch.sm_count.max(1));
    let per_wave = sms * resident;
    let (full, rest) = (ctas / per_wave, ctas % per_wave);
    let path = c.critical_path_cycles as f64;
    let issue_per_cta =
        c.warp_instructions as f64 / ctas as f64 / f64::from(arch.schedulers_per_sm);
    // (latency cycles, issue cycles) of one wave with `k` CTAs on the busiest SM.
    let wave = |k: u64| (path, k as f64 * issue_per_cta);
    let mut waves = vec![(full, wave(resident))];
    if rest > 0 {
        waves.push((1, wave(rest.div_ceil(sms))));
    }
    let (mut cycles, mut latency_cycles, mut issue_cycles) = (0.0, 0.0, 0.0);
    for (n, (lat, issue)) in waves {
        let n = n as f64;
        cycles += n * overlap(lat, issue);
        latency_cycles += n * lat;
        issue_cycles += n * issue;
    }
    let sm_s = cycles / (arch.boost_clock_ghz * 1e9);
    let sm_bound = if latency_cycles >= issue_cycles {
        "latency"
    } else {
        "issue"
    };
    let bounds = [
        (sm_s, sm_bound),
        (roofline.dram_s, "dram"),
        (roofline.tensor_s, "tensor"),
        (roofline.fp32_s, "fp32"),
    ];
    let (largest, bound) = bounds
        .iter()
        .copied()
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .unwrap_or((0.0, "dram"));
    LaunchModel {
        roofline,
        sm_s,
        sm_bound,
        total_s: largest + roofline.launch_s,
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

    #[test]
    fn launch_takes_waves_of_the_critical_path_or_of_issue() {
        let h100 = SimArch::SM90;
        let occ = occupancy(&h100, 256, 32, 0); // 8 CTAs per SM
        let cycle = 1.0 / (h100.boost_clock_ghz * 1e9);
        // 2 CTAs, a 10^6-cycle path, few instructions: latency-bound, one wave.
        let c = Counters {
            critical_path_cycles: 1_000_000,
            warp_instructions: 1000,
            ..Counters::default()
        };
        let m = launch(&h100, &c, 2, &occ);
        assert_eq!(m.bound, "latency");
        // The 125 cycles of issue add 125²/10⁶ to the path: the path to a part in 10⁷.
        assert!((m.sm_s - 1e6 * cycle).abs() < 1e-7 * m.sm_s);
        // 132 · 8 + 1 CTAs: one full wave and a tail of one CTA: two critical paths.
        let m = launch(&h100, &c, 132 * 8 + 1, &occ);
        assert!((m.sm_s - 2e6 * cycle).abs() < 1e-7 * m.sm_s);
        // A short path and many instructions: issue-bound, 8 resident CTAs' instructions / 4.
        let c = Counters {
            critical_path_cycles: 100,
            warp_instructions: 132 * 8 * 4000,
            ..Counters::default()
        };
        let m = launch(&h100, &c, 132 * 8, &occ);
        assert_eq!(m.sm_bound, "issue");
        let expect = 8000.0 + 100.0 * (100.0 / 8000.0);
        assert!((m.sm_s - expect * cycle).abs() < 1e-9 * m.sm_s);
        assert!((m.total_s - m.sm_s - 2.5e-6).abs() < 1e-12);
        // Path and issue alike (8 resident CTAs' 8000 cycles of issue, a 8000-cycle path):
        // they add up, not the longer alone.
        let c = Counters {
            critical_path_cycles: 8000,
            warp_instructions: 132 * 8 * 4000,
            ..Counters::default()
        };
        let m = launch(&h100, &c, 132 * 8, &occ);
        assert!((m.sm_s - 16_000.0 * cycle).abs() < 1e-9 * m.sm_s);
    }

    #[test]
    fn overlap_is_the_longer_when_one_dwarfs_the_other_and_the_sum_when_alike() {
        assert_eq!(overlap(0.0, 0.0), 0.0);
        assert_eq!(overlap(100.0, 0.0), 100.0);
        assert_eq!(overlap(0.0, 100.0), 100.0);
        assert_eq!(overlap(100.0, 100.0), 200.0);
        // Symmetric, and min·(min/max) on top of the max: 100 + 50 · 0.5.
        assert_eq!(overlap(100.0, 50.0), 125.0);
        assert_eq!(overlap(50.0, 100.0), 125.0);
        // Between max and max + min, growing with either.
        for (a, b) in [(1e6, 125.0), (3.0, 7.0), (606_424.0, 672_000.0)] {
            let t = overlap(a, b);
            assert!(t >= a.max(b) && t <= a + b, "{a} {b} {t}");
            assert!(overlap(a * 1.01, b) > t && overlap(a, b * 1.01) > t);
        }
    }
}
