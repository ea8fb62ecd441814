//! The limits of the simulated architectures, written down once.
//!
//! Sources: CUDA C++ Programming Guide, "Compute Capabilities", table "Technical
//! Specifications per Compute Capability" (8.0 and 9.0), and the A100 / H100 whitepapers for
//! the per-part numbers (SM count, L2).

/// A simulated GPU architecture.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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
}

impl SimArch {
    /// A100 (compute capability 8.0).
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
    };

    /// H100 SXM (compute capability 9.0).
    pub const SM90: SimArch = SimArch {
        name: "sm_90",
        part: "H100",
        compute_capability: (9, 0),
        sm_count: 132,
        l2_bytes: 50 << 20,
        max_threads_per_block: 1024,
        max_block_dims: [1024, 1024, 64],
        max_grid_dims: [i32::MAX as u32, 65_535, 65_535],
        max_static_shared: 48 << 10,
        max_shared_optin: 227 << 10,
        shared_per_sm: 228 << 10,
        registers_per_sm: 65_536,
        max_registers_per_thread: 255,
        max_threads_per_sm: 2048,
        max_ctas_per_sm: 32,
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
