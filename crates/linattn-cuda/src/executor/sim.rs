//! The simulator executor: the same kernels, compiled by NVRTC for a real `sm_XX` exactly as
//! for a GPU, run from their PTX by `linattn-ptxsim` on the CPU with every checker on.
//!
//! * Architecture: `sm_90` (H100 limits) unless [`set_arch`] or `LINATTN_SIM_ARCH=sm_80`
//!   chose `sm_80` (A100) before first use.
//! * Memory: `LINATTN_SIM_MEMORY_GIB` GiB, else half the host's available memory, at most
//!   80 GiB (an H100's). Allocations are exact; an access outside one is a memcheck fault.
//! * Times are host wall times of the simulation: they say nothing about a GPU.
//! * Faults (memcheck, racecheck, initcheck, synccheck) are `AttnError::KernelFault` naming
//!   kernel, PTX line, CTA, thread and address.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use linattn_core::{AttnError, HostMemory, Unsupported};
/// The simulator's counters, instruction classes, arch numbers and performance model, for
/// profiles of simulated runs.
pub use linattn_ptxsim::{
    model, Counters, InstrClass, LineCount, Sampled, SimArch, SourceLines, PTX_TEXT,
};
use linattn_ptxsim::{Arg, Device, LaunchConfig, Module};
pub use linattn_ptxsim::{Checks, MmaModel, Numerics, Placement};

use super::gemm::GemmCall;
use super::seam::{
    check_launch, check_shared_opt_in, load_module, report_for, DeviceInfo, Executor, Kernel,
    KernelArg, Launch, Platform,
};
pub use super::sim_launch::{sim_error, LaunchRecord, PtxLines};
use super::trace::Recorder;
use crate::runtime::nvrtc::CompileKey;
use crate::runtime::{lock, nvrtc_available, nvrtc_version, Arch, KernelVariant};

/// Shared memory a CTA may use without opting in.
const DEFAULT_SHARED: u64 = 48 << 10;

static ARCH: OnceLock<Arch> = OnceLock::new();

/// Chooses the simulated architecture (`sm_80` or `sm_90`) before the executor is first
/// used. Fails if it is already in use with another one, or for an unknown arch.
pub fn set_arch(arch: Arch) -> Result<(), AttnError> {
    sim_arch_of(arch)?;
    choose_once(&ARCH, arch, |a| a.to_string())
}

/// Sets `cell` to `value` unless it holds another value already: the simulator's settings
/// are chosen once per process, before its executor starts. `describe` names a value in the
/// error ("the simulator already runs …; cannot switch to …").
fn choose_once<T: Copy + PartialEq>(
    cell: &OnceLock<T>,
    value: T,
    describe: impl Fn(T) -> String,
) -> Result<(), AttnError> {
    let chosen = *cell.get_or_init(|| value);
    if chosen != value {
        return Err(AttnError::InvalidArgument(format!(
            "the simulator already runs {}; cannot switch to {} in this process",
            describe(chosen),
            describe(value)
        )));
    }
    Ok(())
}

static CHECKS: OnceLock<Checks> = OnceLock::new();

/// Chooses which optional checkers (racecheck, initcheck) the executor runs, before it is
/// first used; both are on unless chosen otherwise. Memcheck and synccheck always run.
/// Counters do not depend on the checkers, so `linattn profile` turns them off (about twice
/// as fast); `linattn check` and the tests keep them on.
pub fn set_checks(checks: Checks) -> Result<(), AttnError> {
    choose_once(&CHECKS, checks, |c| format!("with {c:?}"))
}

/// Unless chosen: every checker but globalcheck, which costs 5–10× the simulator's time;
/// `linattn check` turns it on, and its planted-bug tests run it directly.
fn checks() -> Checks {
    *CHECKS.get_or_init(|| Checks {
        globalcheck: false,
        ..Checks::default()
    })
}

static NUMERICS: OnceLock<Numerics> = OnceLock::new();

/// Chooses how the executor computes `.approx` functions and `mma` accumulation (see
/// [`Numerics`]), before it is first used; [`Numerics::Exact`] unless chosen otherwise.
pub fn set_numerics(numerics: Numerics) -> Result<(), AttnError> {
    choose_once(&NUMERICS, numerics, |n| format!("with {n} numerics"))
}

static MMA_MODEL: OnceLock<Option<MmaModel>> = OnceLock::new();

/// Chooses how the executor sums `mma` whatever the numerics mode (`None`: the mode's own
/// model), before it is first used.
pub fn set_mma_model(model: Option<MmaModel>) -> Result<(), AttnError> {
    choose_once(&MMA_MODEL, model, |m| match m {
        Some(m) => format!("with the {m} mma model"),
        None => "with its numerics mode's mma model".into(),
    })
}

static PLACEMENT: OnceLock<Placement> = OnceLock::new();

/// Chooses how the simulator lays out shared variables (`Placement`: declared unless chosen
/// otherwise), before the executor is first used.
pub fn set_shared_placement(placement: Placement) -> Result<(), AttnError> {
    choose_once(&PLACEMENT, placement, |p| {
        format!("with {p:?} shared placement")
    })
}

/// The simulated architecture (sm_90 unless chosen otherwise).
pub fn arch() -> Arch {
    *ARCH.get_or_init(|| {
        std::env::var("LINATTN_SIM_ARCH")
            .ok()
            .and_then(|name| SimArch::by_name(&name))
            .map_or(Arch::SM90, |a| Arch {
                major: a.compute_capability.0,
                minor: a.compute_capability.1,
            })
    })
}

fn sim_arch_of(arch: Arch) -> Result<SimArch, AttnError> {
    SimArch::by_name(&arch.to_string()).ok_or_else(|| {
        AttnError::InvalidArgument(format!("the simulator models sm_80 and sm_90, not {arch}"))
    })
}

/// The process-wide simulator executor, or why it cannot run (it needs NVRTC for the PTX).
pub fn executor() -> Result<Arc<dyn Executor>, Unsupported> {
    shared().map(|e| e as Arc<dyn Executor>)
}

static EXECUTOR: OnceLock<Result<Arc<SimExecutor>, Unsupported>> = OnceLock::new();

/// The simulator executor if this process has used it (never starts it).
pub fn started() -> Option<Arc<SimExecutor>> {
    EXECUTOR.get().and_then(|e| e.as_ref().ok().cloned())
}

/// The simulator executor with its own type (for its counters).
pub fn shared() -> Result<Arc<SimExecutor>, Unsupported> {
    nvrtc_available()
        .map_err(|e| Unsupported::Unavailable(format!("the PTX simulator needs NVRTC: {e}")))?;
    EXECUTOR
        .get_or_init(|| {
            SimExecutor::new(arch())
                .map(Arc::new)
                .map_err(|e| Unsupported::Unavailable(e.to_string()))
        })
        .clone()
}

fn memory_bytes() -> u64 {
    if let Some(gib) = std::env::var("LINATTN_SIM_MEMORY_GIB")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
    {
        return (gib * (1u64 << 30) as f64) as u64;
    }
    let half_available = HostMemory::available().unwrap_or(8 << 30) / 2;
    half_available.min(80 << 30)
}

/// A loaded kernel: its module and entry point (and the module's PTX, for traces).
struct SimKernel {
    module: Module,
    key: (CompileKey, String),
    ptx: Arc<str>,
}

pub struct SimExecutor {
    device: Device,
    info: DeviceInfo,
    arch: Arch,
    modules: Mutex<HashMap<CompileKey, Module>>,
    /// Dynamic shared memory each kernel opted in to (cuFuncSetAttribute).
    opt_in: Mutex<HashMap<(CompileKey, String), u32>>,
    counters: Mutex<Counters>,
    /// Launches recorded since [`SimExecutor::start_profile`], per profiling thread (a
    /// launch runs on its caller's thread, so concurrent profiles do not mix).
    profile: Mutex<HashMap<std::thread::ThreadId, Vec<LaunchRecord>>>,
    /// Rows of grid y that profiled launches simulate (0: all); see `linattn_ptxsim::sample`.
    sample: std::sync::atomic::AtomicU32,
    /// Whether kernels load from `-lineinfo` compiles and profiled launches keep their warp
    /// instructions per source line ([`SimExecutor::set_source_lines`]).
    source_lines: std::sync::atomic::AtomicBool,
    /// Whether profiled launches keep their warp instructions per PTX line
    /// ([`SimExecutor::set_ptx_lines`]).
    ptx_lines: std::sync::atomic::AtomicBool,
    sim_arch: SimArch,
    /// Everything asked of the executor since [`SimExecutor::start_trace`] (any thread:
    /// trace single-threaded runs).
    trace: Mutex<Option<Recorder>>,
}

impl SimExecutor {
    pub fn new(arch: Arch) -> Result<SimExecutor, AttnError> {
        let sim_arch = sim_arch_of(arch)?;
        let memory = memory_bytes();
        let numerics = *NUMERICS.get_or_init(Numerics::default);
        let placement = *PLACEMENT.get_or_init(Placement::default);
        // LINATTN_MUFU_TABLES: the GPU's own .approx bits in as-compiled numerics.
        linattn_ptxsim::exec::mufu_file::install_from_env().map_err(AttnError::InvalidArgument)?;
        let mut device = Device::new(sim_arch, memory)
            .with_checks(checks())
            .with_numerics(numerics)
            .with_shared_placement(placement);
        if let Some(model) = *MMA_MODEL.get_or_init(|| None) {
            device = device.with_mma_model(model);
        }
        let info = DeviceInfo {
            name: format!("ptxsim {} ({} limits)", sim_arch.name, sim_arch.part),
            compute_capability: sim_arch.compute_capability,
            sm_count: sim_arch.sm_count,
            l2_bytes: sim_arch.l2_bytes,
            total_memory_bytes: memory,
            max_shared_per_block_optin: u64::from(sim_arch.max_shared_optin),
            driver_version: "ptxsim".into(),
            nvrtc_version: match nvrtc_version() {
                Ok((a, b)) => format!("{a}.{b}"),
                Err(e) => e.to_string(),
            },
        };
        Ok(SimExecutor {
            device,
            info,
            arch,
            modules: Mutex::new(HashMap::new()),
            opt_in: Mutex::new(HashMap::new()),
            counters: Mutex::new(Counters::default()),
            profile: Mutex::new(HashMap::new()),
            sample: std::sync::atomic::AtomicU32::new(0),
            source_lines: std::sync::atomic::AtomicBool::new(false),
            ptx_lines: std::sync::atomic::AtomicBool::new(false),
            sim_arch,
            trace: Mutex::new(None),
        })
    }

    /// From now on every allocation, upload, fill, copy and launch is also recorded in a
    /// trace (`executor::trace`), until [`SimExecutor::finish_trace`].
    pub fn start_trace(&self) {
        if let Ok(mut t) = self.trace.lock() {
            *t = Some(Recorder::default());
        }
    }

    /// Marks the launches that follow as `phase` of `backend` in the trace being recorded.
    pub fn trace_phase(&self, backend: &str, phase: &str) {
        self.traced(|t| t.phase(backend, phase));
    }

    /// Stops tracing and writes the trace to `dir` (see `executor::trace`).
    pub fn finish_trace(&self, dir: &std::path::Path, source: &str) -> Result<(), AttnError> {
        let recorder = lock(&self.trace)?
            .take()
            .ok_or_else(|| AttnError::State("finish_trace without start_trace".into()))?;
        recorder.write(dir, self.sim_arch.name, source)
    }

    fn traced(&self, f: impl FnOnce(&mut Recorder)) {
        if let Ok(mut t) = self.trace.lock() {
            if let Some(recorder) = t.as_mut() {
                f(recorder);
            }
        }
    }

    /// The simulated architecture's limits and per-part numbers (for the model).
    pub fn sim_arch(&self) -> SimArch {
        self.sim_arch
    }

    /// From now on every launch this thread makes is recorded, with the memory counters on
    /// (they stay on for every launch while any thread profiles).
    pub fn start_profile(&self) {
        if let Ok(mut profile) = self.profile.lock() {
            profile.insert(std::thread::current().id(), Vec::new());
            self.device.count_memory(true);
        }
    }

    /// The launches this thread made since [`SimExecutor::start_profile`]; its profiling
    /// stops.
    pub fn finish_profile(&self) -> Vec<LaunchRecord> {
        let Ok(mut profile) = self.profile.lock() else {
            return Vec::new();
        };
        let log = profile
            .remove(&std::thread::current().id())
            .unwrap_or_default();
        if profile.is_empty() {
            self.device.count_memory(false);
        }
        log
    }

    /// From now on, launches recorded by a profile simulate only `rows` rows of grid y (at
    /// least 2) when they have more, and scale their counters (`linattn_ptxsim::sample`);
    /// `None`: every CTA. Launches outside a profile (check, bench) always run whole. Their
    /// outputs are garbage for the rows not run: for counters only.
    pub fn set_sample(&self, rows: Option<u32>) {
        let n = rows.map_or(0, |r| r.max(2));
        self.sample.store(n, std::sync::atomic::Ordering::Relaxed);
    }

    /// From now on, kernels load from their `-lineinfo` compiles (the same code: NVRTC adds
    /// `.loc` directives) and launches keep their warp instructions per CUDA source line
    /// ([`LaunchRecord::source_lines`]); `false`: back to the plain compiles. Set it before the
    /// backends load their kernels (a kernel loaded earlier counts under no line).
    pub fn set_source_lines(&self, on: bool) {
        self.source_lines
            .store(on, std::sync::atomic::Ordering::Relaxed);
        self.count_lines();
    }

    /// From now on, profiled launches keep their warp instructions per line of their PTX text
    /// ([`LaunchRecord::ptx_lines`], with the text), from the plain compiles (or the
    /// `-lineinfo` ones under [`SimExecutor::set_source_lines`], which keeps them too).
    pub fn set_ptx_lines(&self, on: bool) {
        self.ptx_lines
            .store(on, std::sync::atomic::Ordering::Relaxed);
        self.count_lines();
    }

    fn count_lines(&self) {
        let on =
            |flag: &std::sync::atomic::AtomicBool| flag.load(std::sync::atomic::Ordering::Relaxed);
        self.device
            .count_source_lines(on(&self.source_lines) || on(&self.ptx_lines));
    }

    /// Instructions executed by every launch so far.
    pub fn counters(&self) -> Counters {
        self.counters.lock().map(|c| *c).unwrap_or_default()
    }

    fn sim_kernel(kernel: &Kernel) -> Result<&SimKernel, AttnError> {
        kernel.inner.downcast_ref::<SimKernel>().ok_or_else(|| {
            AttnError::State(format!(
                "{kernel:?} was not loaded by the simulator executor"
            ))
        })
    }
}

impl Executor for SimExecutor {
    fn platform(&self) -> Platform {
        Platform::Sim
    }

    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn arch(&self) -> Arch {
        self.arch
    }

    fn alloc(&self, bytes: u64, zeroed: bool) -> Result<u64, AttnError> {
        let result = if zeroed {
            self.device.alloc_zeroed(bytes)
        } else {
            self.device.alloc(bytes)
        };
        let address = result.map_err(sim_error)?;
        self.traced(|t| t.alloc(address, bytes, zeroed));
        Ok(address)
    }

    fn free(&self, address: u64) {
        self.traced(|t| t.free(address));
        let _ = self.device.free(address);
    }

    fn upload(&self, address: u64, data: &[u8]) -> Result<(), AttnError> {
        self.device.write(address, data).map_err(sim_error)?;
        self.traced(|t| t.upload(address, data));
        Ok(())
    }

    fn download(&self, address: u64, out: &mut [u8]) -> Result<(), AttnError> {
        self.device.read(address, out).map_err(sim_error)
    }

    fn memset_zero(&self, address: u64, bytes: u64) -> Result<(), AttnError> {
        self.device.fill(address, bytes, 0).map_err(sim_error)?;
        self.traced(|t| t.fill(address, bytes));
        Ok(())
    }

    fn copy(&self, dst: u64, src: u64, bytes: u64) -> Result<(), AttnError> {
        self.device.copy(dst, src, bytes).map_err(sim_error)?;
        self.traced(|t| t.copy(dst, src, bytes));
        Ok(())
    }

    fn memory_info(&self) -> Result<(u64, u64), AttnError> {
        Ok(self.device.memory_info())
    }

    fn kernel(&self, variant: &KernelVariant, entry: &str) -> Result<Kernel, AttnError> {
        let lined;
        let variant = if self.source_lines.load(std::sync::atomic::Ordering::Relaxed) {
            lined = variant.clone().with_line_info();
            &lined
        } else {
            variant
        };
        let (compiled, module) = load_module(&self.modules, variant, entry, self.arch, |c| {
            let fail = |e| AttnError::Compile(format!("ptxsim cannot load {}: {e}", c.label));
            let mut module = self.device.load(&c.ptx).map_err(fail)?;
            // ptxas' register counts, so launches check the register file per warp.
            for report in &c.report {
                module
                    .set_registers(&report.kernel, report.registers)
                    .map_err(fail)?;
            }
            Ok(module)
        })?;
        let key = CompileKey::of(variant, self.arch);
        module.kernel(entry).map_err(sim_error)?;
        Ok(Kernel {
            entry: entry.to_string(),
            label: compiled.label.clone(),
            ptxas: report_for(&compiled.report, entry),
            inner: Arc::new(SimKernel {
                module,
                key: (key, entry.to_string()),
                ptx: Arc::from(compiled.ptx.as_str()),
            }),
        })
    }

    fn allow_dynamic_shared(&self, kernel: &Kernel, bytes: u32) -> Result<(), AttnError> {
        check_shared_opt_in(&self.info, bytes)?;
        let key = Self::sim_kernel(kernel)?.key.clone();
        lock(&self.opt_in)?.insert(key, bytes);
        Ok(())
    }

    fn launch(
        &self,
        kernel: &Kernel,
        launch: &Launch,
        args: &[KernelArg],
    ) -> Result<(), AttnError> {
        check_launch(&self.info, kernel, launch)?;
        let sim = Self::sim_kernel(kernel)?;
        let static_shared = kernel.ptxas.as_ref().map_or(0, |r| r.shared_bytes);
        if static_shared + u64::from(launch.shared_bytes) > DEFAULT_SHARED {
            let allowed = lock(&self.opt_in)?.get(&sim.key).copied().unwrap_or(0);
            if launch.shared_bytes > allowed {
                return Err(AttnError::InvalidArgument(format!(
                    "launch of {}: {} bytes of dynamic shared memory (+ {static_shared} static) \
                     exceed 48 KiB and the kernel opted in to {allowed} \
                     (cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES) missing)",
                    kernel.entry, launch.shared_bytes
                )));
            }
        }
        let raw_args = args;
        let args: Vec<Arg> = args
            .iter()
            .map(|a| match *a {
                KernelArg::Ptr(p) => Arg::U64(p),
                KernelArg::I32(v) => Arg::I32(v),
                KernelArg::U32(v) => Arg::U32(v),
                KernelArg::I64(v) => Arg::I64(v),
                KernelArg::F32(v) => Arg::F32(v),
            })
            .collect();
        let config = LaunchConfig {
            grid: [launch.grid.0, launch.grid.1, launch.grid.2],
            block: [launch.block.0, launch.block.1, launch.block.2],
            dynamic_shared_bytes: launch.shared_bytes,
        };
        let profiling = self
            .profile
            .lock()
            .is_ok_and(|p| p.contains_key(&std::thread::current().id()));
        let sample = match self.sample.load(std::sync::atomic::Ordering::Relaxed) {
            0 => None,
            n if profiling => Some(n),
            _ => None,
        };
        let stats = self
            .device
            .launch_sampled(&sim.module, &kernel.entry, &config, &args, sample)
            .map_err(sim_error)?;
        if let Ok(mut counters) = self.counters.lock() {
            counters.add(&stats.counters);
        }
        let record = LaunchRecord {
            entry: kernel.entry.clone(),
            label: kernel.label.clone(),
            grid: launch.grid,
            block: launch.block,
            dynamic_shared: launch.shared_bytes,
            static_shared,
            registers: kernel.ptxas.as_ref().map_or(0, |r| r.registers),
            counters: stats.counters,
            sampled: stats.sampled.clone(),
            source_lines: match &stats.instr_counts {
                Some(counts) if self.source_lines.load(std::sync::atomic::Ordering::Relaxed) => {
                    Some(
                        sim.module
                            .source_lines(&kernel.entry, counts)
                            .map_err(sim_error)?,
                    )
                }
                _ => None,
            },
            ptx_lines: match &stats.instr_counts {
                Some(counts) => Some(PtxLines {
                    lines: sim
                        .module
                        .ptx_lines(&kernel.entry, counts)
                        .map_err(sim_error)?,
                    ptx: sim.ptx.clone(),
                }),
                None => None,
            },
        };
        self.traced(|t| t.launch(&sim.ptx, &record, raw_args));
        if let Ok(mut profile) = self.profile.lock() {
            if let Some(log) = profile.get_mut(&std::thread::current().id()) {
                log.push(record);
            }
        }
        Ok(())
    }

    fn blas_available(&self) -> Result<(), Unsupported> {
        Err(Unsupported::Unavailable(
            "the simulator has no BLAS library; its GEMMs are simulated kernels".into(),
        ))
    }

    fn gemm(&self, call: &GemmCall<'_>) -> Result<(), AttnError> {
        self.blas_available()?;
        Err(AttnError::State(format!(
            "{}: no BLAS on the simulator",
            call.what
        )))
    }

    fn time(&self, work: &mut dyn FnMut() -> Result<(), AttnError>) -> Result<Duration, AttnError> {
        let start = Instant::now();
        work()?;
        Ok(start.elapsed())
    }

    fn synchronize(&self) -> Result<(), AttnError> {
        Ok(())
    }

    fn flush_l2(&self) -> Result<(), AttnError> {
        Ok(())
    }
}
