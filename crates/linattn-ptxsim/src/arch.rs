//! The limits of the simulated architectures, written down once.
//!
//! Sources: CUDA C++ Programming Guide, "Compute Capabilities", table "Technical
//! Specifications per Compute Capability" (8.0 and 9.0) for the per-SM and per-CTA limits
//! (64K 32-bit registers per SM and per CTA, 255 per thread), and the CUDA occupancy
//! calculator (`cuda_occupancy.h` of the CUDA toolkit) for the register allocation: per warp
//! in units of 256, from one of 4 sub-partitions of the SM's file; the NVIDIA A100 (SXM4
//! 80 GB) and H100 (SXM5) datasheets and whitepapers for the per-part numbers: SM count, L2,
//! boost clock, HBM bandwidth, dense FP16/BF16 tensor-core and FP32 peaks.

/// A simulated GPU architecture.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SimArch {
    /// `sm_80` or `sm_90`.
    pub name: &'static str,
    /// The part whose per-chip numbers are used (SMs, L2).
    pub part: &'static str,
    pub compute_capability: (u32, u32),
    pub sm_count: u32,
    pub l2_bytes: u64,
    /// Most threads in one CTA.
    pub max_threads_per_block: u32,
    pub max_block_dims: [u32; 3],
    pub max_grid_dims: [u32; 3],
    /// Static shared memory per CTA, and the dynamic + static default without opting in.
    pub max_static_shared: u32,
    /// Largest static + dynamic shared memory a CTA may opt in to
    /// (`cudaFuncAttributeMaxDynamicSharedMemorySize`).
    pub max_shared_optin: u32,
    pub shared_per_sm: u32,
    pub registers_per_sm: u32,
    /// Most registers one CTA may be allocated (`regsPerBlock`).
    pub max_registers_per_block: u32,
    pub max_registers_per_thread: u32,
    /// The SM's register file is split between this many sub-partitions (one per warp
    /// scheduler); a warp's registers all come from one of them.
    pub register_sub_partitions: u32,
    pub max_threads_per_sm: u32,
    pub max_ctas_per_sm: u32,
    pub max_warps_per_sm: u32,
    /// Registers are allocated per warp in units of this many (regs/thread rounded to 8).
    pub register_alloc_unit: u32,
    /// Shared memory is allocated per CTA in units of this many bytes, plus a reserved part.
    pub shared_alloc_unit: u32,
    pub shared_reserved_per_cta: u32,
    /// Warp schedulers per SM (each issues one warp instruction per clock).
    pub schedulers_per_sm: u32,
    pub boost_clock_ghz: f64,
    pub hbm_gbps: f64,
    /// Dense FP16/BF16 tensor-core peak (FP32 accumulate).
    pub tensor_tflops: f64,
    /// FP32 (CUDA-core) peak, an FMA counting 2.
    pub fp32_tflops: f64,
    /// Host-side cost of one kernel launch in a stream of launches (a model constant).
    pub launch_overhead_us: f64,
    /// Dependent-issue latencies of the latency model (see [`Latencies`]).
    pub latency: Latencies,
}

/// Cycles from an instruction's issue until a dependent instruction may issue, by class: the
/// latency model's constants (`exec::clock`). One figure per class, no per-kernel fitting.
///
/// Sources, and how firm each is:
/// - `alu` 4: the "arithmetic operation latency 4" row for V100/A100/H100 of Table 3 of
///   doi:10.1016/j.ultsonch.2023.106546 (PMC10448217), the dependent-FFMA figure of Jia et
///   al., "Dissecting the NVIDIA Volta GPU Architecture via Microbenchmarking" (2018). Luo et
///   al., "Benchmarking and Dissecting the Nvidia Hopper GPU Architecture" (2024,
///   arXiv:2402.13499) measure Hopper's instruction latencies; its tables were not read in
///   this step and are the first place to check every figure here.
/// - `shared_load` 20, `l2_hit` 200, `dram` 400: that same table's shared-memory, L2 and
///   global-memory latency rows (identical for A100 and H100). The model charges every
///   global load the DRAM figure: the kernels modelled stream inputs they read once per
///   launch, so their loads are first touches that miss L2.
/// - `conversion`, `sfu`, `mma`, `shfl`, `barrier`: no published figure was found; for sm_80
///   these are stated assumptions (conversion = the ALU's; MUFU ~ the high teens of the
///   Volta/Turing dissections; mma.m16n8k16 and shfl ~ the order of a shared load; bar.sync
///   = one shared-memory round trip). For sm_90 the on-chip classes are measured
///   ([`Latencies::HOPPER_MEASURED`]: `linattn latency --platform cuda`,
///   kernels/latency_probe.cu, on an H100).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Latencies {
    pub alu: u32,
    pub conversion: u32,
    pub sfu: u32,
    pub shared_load: u32,
    pub l2_hit: u32,
    pub dram: u32,
    pub mma: u32,
    pub shfl: u32,
    pub barrier: u32,
}

impl Latencies {
    /// Ampere (sm_80) and Hopper (sm_90) alike: the sources above give the same figures.
    pub const AMPERE_HOPPER: Latencies = Latencies {
        alu: 4,
        conversion: 4,
        sfu: 18,
        shared_load: 20,
        l2_hit: 200,
        dram: 400,
        mma: 32,
        shfl: 20,
        barrier: 20,
    };

    /// The H100's on-chip classes as `linattn latency --platform cuda` measured them on
    /// 2026-11-26 (`bench-results/h100/2026-11-26/latency.json`: each constant is the
    /// measured cycles per link less what the simulator's timing of the same PTX adds to
    /// its old constant, the loop control; a conversion link is two conversions). Global
    /// memory stays [`Self::AMPERE_HOPPER`]'s: the probes measured 282 (L2 hit), 690
    /// (dependent DRAM miss) and 217–436 (streaming, flushed L2) cycles, no one figure.
    pub const HOPPER_MEASURED: Latencies = Latencies {
        alu: 4,
        conversion: 5,
        sfu: 17,
        shared_load: 23,
        mma: 25,
        shfl: 24,
        barrier: 19,
        ..Self::AMPERE_HOPPER
    };
}

impl SimArch {
    /// A100 SXM4 80 GB (compute capability 8.0).
    pub const SM80: SimArch = SimArch {
        name: "sm_80",
        part: "A100",
        compute_capability: (8, 0),
        sm_count: 108,
        l2_bytes: 40 << 20,
        max_threads_per_block: 1024,
        max_block_dims: [1024, 1024, 64],
        max_grid_dims: [i32::MAX as u32, 65_535, 65_535],
        max_static_shared: 48 << 10,
        max_shared_optin: 163 << 10,
        shared_per_sm: 164 << 10,
        registers_per_sm: 65_536,
        max_registers_per_block: 65_536,
        max_registers_per_thread: 255,
        register_sub_partitions: 4,
        max_threads_per_sm: 2048,
        max_ctas_per_sm: 32,
        max_warps_per_sm: 64,
        register_alloc_unit: 256,
        shared_alloc_unit: 128,
        shared_reserved_per_cta: 1024,
        schedulers_per_sm: 4,
        boost_clock_ghz: 1.41,
        hbm_gbps: 2039.0,
        tensor_tflops: 312.0,
        fp32_tflops: 19.5,
        launch_overhead_us: 2.5,
        latency: Latencies::AMPERE_HOPPER,
    };

    /// H100 SXM (compute capability 9.0). The per-CTA and per-SM limits other than shared
    /// memory are those of 8.0. The clock is the SXM5 boost clock (1.98 GHz, H100 datasheet):
    /// the reference Nsight Compute run used `--clock-control none`, so the part boosted.
    pub const SM90: SimArch = SimArch {
        name: "sm_90",
        part: "H100",
        compute_capability: (9, 0),
        sm_count: 132,
        l2_bytes: 50 << 20,
        max_shared_optin: 227 << 10,
        shared_per_sm: 228 << 10,
        boost_clock_ghz: 1.98,
        hbm_gbps: 3352.0,
        tensor_tflops: 989.5,
        fp32_tflops: 66.9,
        latency: Latencies::HOPPER_MEASURED,
        ..Self::SM80
    };

    /// Registers allocated to one warp of threads using `per_thread` each: per_thread × 32
    /// rounded up to the allocation unit (256, i.e. per_thread rounded up to a multiple of 8).
    pub fn registers_per_warp(&self, per_thread: u32) -> u32 {
        (per_thread * 32).div_ceil(self.register_alloc_unit) * self.register_alloc_unit
    }

    /// Whether a CTA of `threads` threads using `per_thread` registers each can launch; the
    /// reason when it cannot. The rules of the CUDA occupancy calculator
    /// (`cuda_occupancy.h`, `cudaOccMaxBlocksPerSMRegsLimit`): at most 255 per thread; the
    /// warps' rounded allocations within `regsPerBlock` (the software check); and, as the
    /// hardware checks it, with the warp count rounded up to a multiple of the 4
    /// sub-partitions (it assumes every sub-partition is allocated alike).
    pub fn check_registers(&self, threads: u32, per_thread: u32) -> Result<(), String> {
        let warps = threads.div_ceil(32);
        let per_warp = u64::from(self.registers_per_warp(per_thread));
        let max = u64::from(self.max_registers_per_block);
        let allocated = per_warp * u64::from(warps);
        let assumed = per_warp * u64::from(warps.next_multiple_of(self.register_sub_partitions));
        if per_thread > self.max_registers_per_thread {
            Err(format!(
                "{per_thread} registers per thread (max {} on {})",
                self.max_registers_per_thread, self.name
            ))
        } else if allocated > max || assumed > max {
            Err(format!(
                "{per_thread} registers per thread are allocated {per_warp} per warp (in units \
                 of {}); {warps} warps need {allocated}, counted as {assumed} over the {} \
                 register sub-partitions, and a CTA may have {max}",
                self.register_alloc_unit, self.register_sub_partitions
            ))
        } else {
            Ok(())
        }
    }

    /// CTAs of `threads` threads using `per_thread` registers that the register file of one
    /// SM holds (0: the CTA cannot launch). Each sub-partition holds whole warps (the
    /// occupancy calculator's rule, see [`SimArch::check_registers`]).
    pub fn ctas_by_registers(&self, threads: u32, per_thread: u32) -> u32 {
        if self.check_registers(threads, per_thread).is_err() {
            return 0;
        }
        let per_warp = self.registers_per_warp(per_thread);
        if per_warp == 0 {
            return u32::MAX;
        }
        let per_sub_partition = self.registers_per_sm / self.register_sub_partitions;
        let warps_per_sm = per_sub_partition / per_warp * self.register_sub_partitions;
        warps_per_sm / threads.div_ceil(32).max(1)
    }

    /// `sm_80` / `sm_90` (also `80`, `90`).
    pub fn by_name(name: &str) -> Option<SimArch> {
        match name.trim().trim_start_matches("sm_") {
            "80" => Some(Self::SM80),
            "90" => Some(Self::SM90),
            _ => None,
        }
    }
}
