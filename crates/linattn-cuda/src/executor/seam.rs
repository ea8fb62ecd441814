//! The seam itself: the [`Executor`] trait and every value that crosses it (device info,
//! platform, kernel arguments, launch shapes, loaded kernels), with the launch check both
//! executors run. It names neither implementation, so both can build on it.

use std::any::Any;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use linattn_core::{AttnError, Unsupported};
use linattn_ptxsim::SimArch;

use std::collections::HashMap;
use std::sync::Mutex;

use super::gemm::GemmCall;
use crate::runtime::nvrtc::{CompileKey, CompiledKernel};
use crate::runtime::{compile, lock, Arch, KernelVariant, PtxasReport};

/// What a device reports about itself.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DeviceInfo {
    pub name: String,
    pub compute_capability: (u32, u32),
    pub sm_count: u32,
    pub l2_bytes: u64,
    pub total_memory_bytes: u64,
    /// Largest dynamic + static shared memory one block may opt in to.
    pub max_shared_per_block_optin: u64,
    /// e.g. "13.0" (a GPU's driver), or "ptxsim" for the simulator.
    pub driver_version: String,
    /// e.g. "13.0", or the reason NVRTC is unavailable.
    pub nvrtc_version: String,
}

/// Which executor a backend runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Platform {
    /// The machine's GPU through cudarc.
    Cuda,
    /// The PTX simulator, modelling the given architecture.
    Sim,
}

impl Platform {
    /// The backend-name family: `cuda` or `sim`.
    pub fn family(self) -> &'static str {
        match self {
            Platform::Cuda => "cuda",
            Platform::Sim => "sim",
        }
    }

    /// Where backends of this platform keep their data.
    pub fn device_kind(self) -> linattn_core::DeviceKind {
        match self {
            Platform::Cuda => linattn_core::DeviceKind::Cuda,
            Platform::Sim => linattn_core::DeviceKind::Sim,
        }
    }

    /// Cheap availability check (no device opened).
    pub fn available(self) -> Result<(), Unsupported> {
        match self {
            Platform::Cuda => crate::runtime::gpu_available(),
            Platform::Sim => crate::runtime::nvrtc_available(),
        }
    }

    pub const ALL: [Platform; 2] = [Platform::Cuda, Platform::Sim];
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.family())
    }
}

/// One kernel argument, passed by value (pointers as device addresses). Backends build these
/// lists only through the typed argument structs of [`crate::params`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum KernelArg {
    Ptr(u64),
    I32(i32),
    U32(u32),
    I64(i64),
    F32(f32),
}

/// Grid, block and dynamic shared memory of one launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Launch {
    pub grid: (u32, u32, u32),
    pub block: (u32, u32, u32),
    pub shared_bytes: u32,
}

impl Launch {
    /// A 1-D block of `threads` over `grid`, no dynamic shared memory.
    pub fn new(grid: (u32, u32, u32), threads: u32) -> Launch {
        Launch {
            grid,
            block: (threads, 1, 1),
            shared_bytes: 0,
        }
    }

    pub fn with_shared(mut self, bytes: u32) -> Launch {
        self.shared_bytes = bytes;
        self
    }

    pub fn with_block(mut self, block: (u32, u32, u32)) -> Launch {
        self.block = block;
        self
    }
}

/// A loaded kernel: entry point of a compiled variant on one executor.
#[derive(Clone)]
pub struct Kernel {
    pub entry: String,
    pub label: String,
    /// ptxas' report for this entry (registers, static shared memory).
    pub ptxas: Option<PtxasReport>,
    /// The executor's own handle (a CUDA function, a simulator module).
    pub(crate) inner: Arc<dyn Any + Send + Sync>,
}

impl fmt::Debug for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Kernel({} of {})", self.entry, self.label)
    }
}

/// What a backend needs from a device.
pub trait Executor: Send + Sync {
    fn platform(&self) -> Platform;
    fn info(&self) -> &DeviceInfo;
    /// The architecture kernels are compiled for.
    fn arch(&self) -> Arch;

    /// `bytes` of device memory: zero-filled when `zeroed`, else undefined contents (the
    /// simulator's initcheck then reports reads before writes). Returns the address.
    fn alloc(&self, bytes: u64, zeroed: bool) -> Result<u64, AttnError>;
    /// Frees an address `alloc` returned. Errors are only reported, never fatal.
    fn free(&self, address: u64);
    fn upload(&self, address: u64, data: &[u8]) -> Result<(), AttnError>;
    fn download(&self, address: u64, out: &mut [u8]) -> Result<(), AttnError>;
    fn memset_zero(&self, address: u64, bytes: u64) -> Result<(), AttnError>;
    fn copy(&self, dst: u64, src: u64, bytes: u64) -> Result<(), AttnError>;
    /// (free, total) device bytes.
    fn memory_info(&self) -> Result<(u64, u64), AttnError>;

    /// Entry point `entry` of `variant`, compiled for [`Executor::arch`] and loaded (both
    /// cached).
    fn kernel(&self, variant: &KernelVariant, entry: &str) -> Result<Kernel, AttnError>;
    /// Lets `kernel` use up to `bytes` of dynamic shared memory (above 48 KiB).
    fn allow_dynamic_shared(&self, kernel: &Kernel, bytes: u32) -> Result<(), AttnError>;
    /// Launches `kernel`. The shape is checked against the device first ([`check_launch`]).
    fn launch(&self, kernel: &Kernel, launch: &Launch, args: &[KernelArg])
        -> Result<(), AttnError>;

    /// Whether [`Executor::gemm`] can run here: cuBLAS loadable on a GPU; the simulator has
    /// no BLAS library (its GEMMs are kernels it simulates).
    fn blas_available(&self) -> Result<(), Unsupported>;
    /// A strided-batched GEMM through the device's BLAS library, enqueued in order with the
    /// executor's other work. `call`'s addresses must be this executor's allocations holding
    /// `batch` matrices at the plan's strides.
    fn gemm(&self, call: &GemmCall<'_>) -> Result<(), AttnError>;

    /// Device time of the work `work` enqueues (CUDA events on a GPU; host wall time on the
    /// simulator, which is not a GPU time).
    fn time(&self, work: &mut dyn FnMut() -> Result<(), AttnError>) -> Result<Duration, AttnError>;
    fn synchronize(&self) -> Result<(), AttnError>;
    /// Evicts the L2 cache (a GPU writes a buffer twice its size; the simulator has none).
    fn flush_l2(&self) -> Result<(), AttnError>;
}

/// Checks a launch shape against the device and the kernel's ptxas report; names the
/// kernel in the error.
pub fn check_launch(info: &DeviceInfo, kernel: &Kernel, launch: &Launch) -> Result<(), AttnError> {
    let (gx, gy, gz) = launch.grid;
    let (bx, by, bz) = launch.block;
    let threads = u64::from(bx) * u64::from(by) * u64::from(bz);
    let registers = kernel.ptxas.as_ref().map_or(0, |r| r.registers);
    let static_shared = kernel.ptxas.as_ref().map_or(0, |r| r.shared_bytes);
    let total_shared = static_shared + u64::from(launch.shared_bytes);
    let bad = if gx == 0 || gy == 0 || gz == 0 || threads == 0 {
        Some("an empty grid or block".to_string())
    } else if gx > i32::MAX as u32 {
        Some(format!("grid x = {gx} exceeds 2^31 - 1"))
    } else if gy > 65_535 || gz > 65_535 {
        Some(format!("grid ({gx}, {gy}, {gz}) exceeds 65535 in y or z"))
    } else if threads > 1024 {
        Some(format!("{threads} threads per block (max 1024)"))
    } else if let Err(reason) = register_rules(info).check_registers(threads as u32, registers) {
        Some(reason)
    } else if total_shared > info.max_shared_per_block_optin {
        Some(format!(
            "{total_shared} bytes of shared memory ({static_shared} static + {} dynamic; max {})",
            launch.shared_bytes, info.max_shared_per_block_optin
        ))
    } else {
        None
    };
    match bad {
        Some(reason) => Err(AttnError::InvalidArgument(format!(
            "launch of {}: {reason}",
            kernel.entry
        ))),
        None => Ok(()),
    }
}

/// The register-file rules of `info`'s architecture: registers are allocated per warp in
/// units of 256 over 4 sub-partitions (the occupancy calculator's rule, as the simulator
/// applies it), not as a per-thread product. Every architecture since sm_70 shares them,
/// so a device the simulator does not model takes sm_80's.
fn register_rules(info: &DeviceInfo) -> SimArch {
    let (major, minor) = info.compute_capability;
    SimArch::by_name(&format!("{major}{minor}")).unwrap_or(SimArch::SM80)
}

/// The ptxas report of `entry` in a compiled variant.
pub(crate) fn report_for(reports: &[PtxasReport], entry: &str) -> Option<PtxasReport> {
    reports.iter().find(|r| r.kernel == entry).cloned()
}

/// What both executors do to load `entry` of `variant`: refuse an entry the variant does not
/// list, compile it for `arch` (cached), and load its module once per compiled variant
/// through `load` (a CUDA module, a simulator module) into `modules`.
pub(crate) fn load_module<M: Clone>(
    modules: &Mutex<HashMap<CompileKey, M>>,
    variant: &KernelVariant,
    entry: &str,
    arch: Arch,
    load: impl FnOnce(&CompiledKernel) -> Result<M, AttnError>,
) -> Result<(Arc<CompiledKernel>, M), AttnError> {
    if !variant.entry_points.iter().any(|e| e == entry) {
        return Err(AttnError::State(format!(
            "{} does not list entry point '{entry}'",
            variant.label()
        )));
    }
    let compiled = compile(variant, arch)?;
    let key = CompileKey::of(variant, arch);
    let cached = lock(modules)?.get(&key).cloned();
    let module = match cached {
        Some(module) => module,
        None => {
            let module = load(&compiled)?;
            lock(modules)?.insert(key, module.clone());
            module
        }
    };
    Ok((compiled, module))
}

/// Refuses dynamic shared memory beyond what one block of the device may opt in to.
pub(crate) fn check_shared_opt_in(info: &DeviceInfo, bytes: u32) -> Result<(), AttnError> {
    if u64::from(bytes) > info.max_shared_per_block_optin {
        return Err(AttnError::InvalidArgument(format!(
            "{bytes} bytes of shared memory requested; {} allows {} per block",
            info.name, info.max_shared_per_block_optin
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h100() -> DeviceInfo {
        DeviceInfo {
            name: "H100".into(),
            compute_capability: (9, 0),
            sm_count: 132,
            l2_bytes: 50 << 20,
            total_memory_bytes: 80 << 30,
            max_shared_per_block_optin: 227 << 10,
            driver_version: "13.0".into(),
            nvrtc_version: "13.0".into(),
        }
    }

    fn kernel(registers: u32) -> Kernel {
        Kernel {
            entry: "probe".into(),
            label: "probe".into(),
            ptxas: Some(PtxasReport {
                kernel: "probe".into(),
                registers,
                ..PtxasReport::default()
            }),
            inner: Arc::new(()),
        }
    }

    #[test]
    fn registers_are_checked_per_warp_not_as_a_per_thread_product() {
        // 31 warps × 66 registers: 65 472 as a product fits the 65 536 of an SM, but each
        // warp is allocated 66 · 32 = 2112 rounded up to 2304, and 31 of those do not.
        let launch = Launch::new((1, 1, 1), 31 * 32);
        let err = check_launch(&h100(), &kernel(66), &launch).unwrap_err();
        assert!(err.to_string().contains("allocated 2304 per warp"), "{err}");
        // 64 registers are 2048 per warp, exactly the unit: 31 warps fit.
        check_launch(&h100(), &kernel(64), &launch).unwrap();
        // More than 255 per thread never launches, whatever the block.
        let err = check_launch(&h100(), &kernel(256), &Launch::new((1, 1, 1), 32)).unwrap_err();
        assert!(
            err.to_string().contains("256 registers per thread"),
            "{err}"
        );
    }

    #[test]
    fn grid_and_block_limits_name_the_dimension() {
        let k = kernel(32);
        let too_tall = Launch::new((1, 65_536, 1), 32);
        let err = check_launch(&h100(), &k, &too_tall).unwrap_err();
        assert!(err.to_string().contains("exceeds 65535 in y or z"), "{err}");
        let empty = Launch::new((0, 1, 1), 32);
        assert!(check_launch(&h100(), &k, &empty).is_err());
        let wide = Launch::new((1, 1, 1), 1025);
        let err = check_launch(&h100(), &k, &wide).unwrap_err();
        assert!(err.to_string().contains("1025 threads per block"), "{err}");
    }
}
