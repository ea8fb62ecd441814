//! The limits of the simulated architectures, written down once.
//!
//! Sources: CUDA C++ Programming Guide, "Compute Capabilities", table "Technical
//! Specifications per Compute Capability" (8.0 and 9.0) for the per-SM and per-CTA limits
//! and the allocation granularities of the CUDA occupancy calculator; the NVIDIA A100 (SXM4
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
    pub max_registers_per_thread: u32,
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
        max_registers_per_thread: 255,
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
    };

    /// H100 SXM (compute capability 9.0). The per-CTA and per-SM limits other than shared
    /// memory are those of 8.0.
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
        ..Self::SM80
    };

    /// `sm_80` / `sm_90` (also `80`, `90`).
    pub fn by_name(name: &str) -> Option<SimArch> {
        match name.trim().trim_start_matches("sm_") {
            "80" => Some(Self::SM80),
            "90" => Some(Self::SM90),
            _ => None,
        }
    }
}
