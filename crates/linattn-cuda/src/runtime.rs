//! The CUDA runtime every linattn-cuda module (and linattn-softmax) builds on.
//!
//! # Availability (cheap, cached, never panics)
//! * [`nvrtc_available`] — libnvrtc loadable (see *Finding libnvrtc*) and answering.
//! * [`gpu_available`] — libcuda loadable, `cuInit` ok, at least one device.
//!   Both return `Unsupported::Unavailable("...")`, which `Backend::supports` can pass on as is.
//!   cudarc panics when a library is absent: nothing here calls into cudarc before these checks.
//!
//! # Compiling kernels (works without a GPU)
//! * [`KernelVariant`] — one `.cu` source (embedded with `include_str!`) + `-D` defines + the
//!   entry points it must export + whether it is hot (a spill is then a test failure).
//!   Build it with [`KernelVariant::new`]`(name, SOURCE).define(k, v).entry("la_x").hot()`.
//! * [`compile`]`(&variant, Arch::SM90)` — NVRTC compiles `PRELUDE + "#line 1 name" + source`
//!   for a real `sm_XX` with `-Xptxas -v`; returns [`CompiledKernel`] with the cubin, the log
//!   and the parsed ptxas report ([`PtxasReport`] per entry point). Errors: `AttnError::Compile`
//!   holding the log. Cached process-wide by (source name, defines, arch).
//! * Shared `-D` vocabulary: [`storage_define`] (`LA_STORAGE`), [`map_define`] (`LA_MAP`),
//!   [`head_dim_class`] (`LA_DK_MAX`/`LA_DV_MAX` classes 32/64/128/256), [`check_head_dim`].
//!
//! # Device side (only after [`gpu_available`] is `Ok`)
//! * [`gpu`]`()` — the process-wide [`Gpu`]: one context, one stream (all launches, copies
//!   and events go on it, so ordering is implicit), [`DeviceInfo`], the module cache.
//! * [`Gpu::function`]`(&variant, "entry")` — compile for the device's own arch, load, look up.
//! * [`launch`] (unsafe, like every untyped kernel launch): checks the launch shape against the
//!   device limits first, names the kernel in errors. Arguments go through cudarc's builder:
//!   ```ignore
//!   let f = gpu.function(&variant, "la_noncausal_state")?;
//!   let mut args = gpu.stream().launch_builder(&f);
//!   args.arg(k.slice()).arg(v.slice_mut()).arg(&n_i32);
//!   unsafe { runtime::launch(args, gpu, cfg, "la_noncausal_state") }?;
//!   ```
//!   Pointers may also go by value as raw addresses — [`DeviceBuffer::device_address`], or
//!   [`address_of`]`(Option<&DeviceBuffer>)` which gives 0 (a null pointer) for `None` — handy
//!   for optional arguments: `let a = buf.device_address(); args.arg(&a);`. Sizes:
//!   [`blocks_for`]`(n, per_block)`, [`as_i32`]`("what", n)` (typed `SizeOverflow`).
//! * [`MemoryMeter`] + [`DeviceBuffer`] — every device allocation is counted (live and peak
//!   bytes) against a meter the backend owns, so `RunStats::device_bytes` is exact: keep one
//!   meter for staged inputs and one for outputs/workspace, `reset_peak()` before a run, read
//!   `peak()` after. [`DeviceBuffer::zeros`] / [`DeviceBuffer::upload`] check `cuMemGetInfo`
//!   before large allocations and turn `CUDA_ERROR_OUT_OF_MEMORY` into `AttnError::OutOfMemory`.
//! * [`Gpu::time`]`(|| { launches })` — CUDA events around the closure's work on the stream.
//! * [`Gpu::flush_l2`] — writes a buffer of 2× the L2 size (for `Backend::flush_cache`).
//! * [`StorageElem`] — f32 / `half::f16` / `half::bf16` with f64 conversions for staging.
//! * Errors: [`CudaResultExt::cuda`]`("cuMemAlloc")` maps a `DriverError` to
//!   `AttnError::Cuda("<call>: <error>")` (or `OutOfMemory`).
//!
//! # Finding libnvrtc
//! cudarc dlopens `libnvrtc.so.13` by soname. When the default loader path lacks it, this
//! module dlopens it by absolute path (RTLD_GLOBAL, builtins first) from, in order:
//! `$LINATTN_NVRTC_DIR`, `.nvrtc/nvidia/cu13/lib` in the executable's ancestors and in this
//! repository, `/usr/local/cuda/lib64`, `/usr/local/cuda/targets/x86_64-linux/lib`, and
//! python `site-packages`/`dist-packages` `nvidia/cu13/lib` (pip wheel
//! `nvidia-cuda-nvrtc`). glibc then resolves cudarc's soname dlopen to the loaded library,
//! so `LD_LIBRARY_PATH` is not needed.

use std::collections::HashMap;
use std::ffi::{c_char, c_int, CString};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use cudarc::driver::sys as cu;
use cudarc::driver::{
    CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, DeviceRepr, DriverError,
    LaunchArgs, LaunchConfig, ValidAsZeroBits,
};
use cudarc::nvrtc::sys as nvrtc;
use linattn_core::{AttnError, FeatureMap, Precision, Unsupported};

/// The shared prelude, prepended to every kernel source.
pub const PRELUDE: &str = include_str!("../../../kernels/prelude.cuh");

// ============================================================================================
// Availability
// ============================================================================================

static NVRTC_STATUS: OnceLock<Result<(i32, i32), Unsupported>> = OnceLock::new();
static GPU_STATUS: OnceLock<Result<(), Unsupported>> = OnceLock::new();

/// `Ok` when NVRTC can be called. Cached; never panics.
pub fn nvrtc_available() -> Result<(), Unsupported> {
    nvrtc_version().map(|_| ())
}

/// NVRTC's (major, minor) version, e.g. (13, 0).
pub fn nvrtc_version() -> Result<(i32, i32), Unsupported> {
    NVRTC_STATUS.get_or_init(probe_nvrtc).clone()
}

fn probe_nvrtc() -> Result<(i32, i32), Unsupported> {
    // SAFETY: is_culib_present only tries dlopen on candidate names.
    if !unsafe { nvrtc::is_culib_present() } {
        preload_nvrtc_from_known_dirs();
    }
    if !unsafe { nvrtc::is_culib_present() } {
        let searched: Vec<String> = nvrtc_search_dirs()
            .iter()
            .map(|d| d.display().to_string())
            .collect();
        return Err(Unsupported::Unavailable(format!(
            "no NVRTC (libnvrtc.so.13 not found on the loader path nor in {}; set \
             LINATTN_NVRTC_DIR or LD_LIBRARY_PATH)",
            searched.join(", ")
        )));
    }
    let (mut major, mut minor): (c_int, c_int) = (0, 0);
    // SAFETY: the library is present (checked above), so cudarc's loader will not panic.
    let status = unsafe { nvrtc::nvrtcVersion(&mut major, &mut minor) };
    if status != nvrtc::nvrtcResult::NVRTC_SUCCESS {
        return Err(Unsupported::Unavailable(format!(
            "NVRTC present but nvrtcVersion failed: {status:?}"
        )));
    }
    Ok((major, minor))
}

/// Directories searched for libnvrtc when the default loader path lacks it, in order.
pub fn nvrtc_search_dirs() -> Vec<PathBuf> {
    const WHEEL_LIB: &str = ".nvrtc/nvidia/cu13/lib";
    let mut dirs = Vec::new();
    if let Some(dir) = std::env::var_os("LINATTN_NVRTC_DIR") {
        dirs.push(PathBuf::from(dir));
    }
    if let Ok(exe) = std::env::current_exe() {
        // target/<profile>/deps/<test> or target/<profile>/<bin>: the repo is 3–4 levels up.
        for ancestor in exe.ancestors().skip(1).take(5) {
            dirs.push(ancestor.join(WHEEL_LIB));
        }
    }
    dirs.push(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(WHEEL_LIB),
    );
    dirs.push(PathBuf::from("/usr/local/cuda/lib64"));
    dirs.push(PathBuf::from("/usr/local/cuda/targets/x86_64-linux/lib"));
    let mut python_roots: Vec<PathBuf> = vec!["/usr/local/lib".into(), "/usr/lib".into()];
    for var in ["VIRTUAL_ENV", "CONDA_PREFIX"] {
        if let Some(root) = std::env::var_os(var) {
            python_roots.push(PathBuf::from(root).join("lib"));
        }
    }
    if let Some(home) = std::env::var_os("HOME") {
        python_roots.push(PathBuf::from(home).join(".local/lib"));
    }
    for root in python_roots {
        let Ok(entries) = std::fs::read_dir(&root) else {
            continue;
        };
        let mut pythons: Vec<PathBuf> = entries
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with("python3"))
            .map(|e| e.path())
            .collect();
        pythons.sort();
        for python in pythons {
            for packages in ["site-packages", "dist-packages"] {
                dirs.push(python.join(packages).join("nvidia/cu13/lib"));
            }
        }
    }
    dirs
}

/// Loaded by absolute path and kept for the life of the process (cudarc's soname lookups
/// resolve to them).
static PRELOADED: Mutex<Vec<libloading::os::unix::Library>> = Mutex::new(Vec::new());

fn preload_nvrtc_from_known_dirs() {
    use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_NOW};
    for dir in nvrtc_search_dirs() {
        let nvrtc_lib = dir.join("libnvrtc.so.13");
        if !nvrtc_lib.is_file() {
            continue;
        }
        // libnvrtc dlopens its builtins by soname at compile time: load them first, from the
        // same directory, so that lookup finds them too.
        let builtins = dir.join("libnvrtc-builtins.so.13.0");
        let mut loaded = Vec::new();
        for path in [builtins, nvrtc_lib] {
            if !path.is_file() {
                continue;
            }
            // SAFETY: loading NVIDIA's library runs only its initialisers.
            match unsafe { Library::open(Some(&path), RTLD_NOW | RTLD_GLOBAL) } {
                Ok(lib) => loaded.push(lib),
                Err(_) => {
                    loaded.clear();
                    break;
                }
            }
        }
        if !loaded.is_empty() {
            if let Ok(mut keep) = PRELOADED.lock() {
                keep.extend(loaded);
            }
            return;
        }
    }
}

/// `Ok` when a CUDA device can be used: libcuda present, `cuInit` ok, a device exists.
/// Cached; never panics.
pub fn gpu_available() -> Result<(), Unsupported> {
    GPU_STATUS.get_or_init(probe_gpu).clone()
}

fn probe_gpu() -> Result<(), Unsupported> {
    // SAFETY: only dlopen attempts.
    if !unsafe { cu::is_culib_present() } {
        return Err(Unsupported::Unavailable(
            "no CUDA driver (libcuda.so.1 not found)".into(),
        ));
    }
    cudarc::driver::result::init()
        .map_err(|e| Unsupported::Unavailable(format!("no CUDA device: cuInit failed: {e}")))?;
    let count = cudarc::driver::result::device::get_count()
        .map_err(|e| Unsupported::Unavailable(format!("no CUDA device: {e}")))?;
    if count < 1 {
        return Err(Unsupported::Unavailable("no CUDA device".into()));
    }
    Ok(())
}

// ============================================================================================
// Errors
// ============================================================================================

/// Maps cudarc driver errors to `AttnError`, naming the failed call.
pub trait CudaResultExt<T> {
    fn cuda(self, call: &str) -> Result<T, AttnError>;
}

impl<T> CudaResultExt<T> for Result<T, DriverError> {
    fn cuda(self, call: &str) -> Result<T, AttnError> {
        self.map_err(|e| cuda_error(call, e))
    }
}

/// `CUDA_ERROR_OUT_OF_MEMORY` → `AttnError::OutOfMemory`, anything else → `AttnError::Cuda`.
pub fn cuda_error(call: &str, error: DriverError) -> AttnError {
    if error.0 == cu::cudaError_enum::CUDA_ERROR_OUT_OF_MEMORY {
        AttnError::OutOfMemory {
            device: "cuda:0".into(),
            requested_bytes: 0,
            detail: format!("{call} returned CUDA_ERROR_OUT_OF_MEMORY"),
        }
    } else {
        AttnError::Cuda(format!("{call}: {error}"))
    }
}

// ============================================================================================
// Kernel variants and the compile-time vocabulary
// ============================================================================================

/// One compilable kernel: a source, its `-D` specialisation and the entry points it exports.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KernelVariant {
    /// File name under `kernels/`, e.g. `noncausal.cu` (names the program in logs).
    pub source_name: &'static str,
    /// The source text (`include_str!`), without the prelude.
    pub source: &'static str,
    /// `-DNAME=VALUE` pairs, kept in insertion order (part of the cache key).
    pub defines: Vec<(String, String)>,
    /// `extern "C"` kernels the variant must export; compilation fails if ptxas does not
    /// report one of them.
    pub entry_points: Vec<String>,
    /// Hot kernels (those that carry a form's main loop) must not spill: the compile-all
    /// test fails when ptxas reports spill bytes for them.
    pub hot: bool,
}

impl KernelVariant {
    pub fn new(source_name: &'static str, source: &'static str) -> Self {
        KernelVariant {
            source_name,
            source,
            defines: Vec::new(),
            entry_points: Vec::new(),
            hot: false,
        }
    }

    pub fn define(mut self, name: impl Into<String>, value: impl fmt::Display) -> Self {
        self.defines.push((name.into(), value.to_string()));
        self
    }

    pub fn entry(mut self, name: impl Into<String>) -> Self {
        self.entry_points.push(name.into());
        self
    }

    /// [`entry`](Self::entry) for each of `names`, in order.
    pub fn entries(self, names: &[&str]) -> Self {
        names
            .iter()
            .fold(self, |variant, &name| variant.entry(name))
    }

    pub fn hot(mut self) -> Self {
        self.hot = true;
        self
    }

    /// `noncausal.cu[LA_STORAGE=1,LA_MAP=1]`: for logs and tables.
    pub fn label(&self) -> String {
        let defines: Vec<String> = self
            .defines
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        format!("{}[{}]", self.source_name, defines.join(","))
    }
}

/// A real GPU architecture `sm_{major}{minor}` (real, so NVRTC runs ptxas).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Arch {
    pub major: u32,
    pub minor: u32,
}

impl Arch {
    pub const SM80: Arch = Arch { major: 8, minor: 0 };
    pub const SM90: Arch = Arch { major: 9, minor: 0 };
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sm_{}{}", self.major, self.minor)
    }
}

/// Smallest and largest head dim (D or M) the kernels take; dims are multiples of 16.
pub const MIN_HEAD_DIM: usize = 16;
pub const MAX_HEAD_DIM: usize = 256;
/// Head-dim classes: kernels size their per-thread arrays by the class (`LA_DK_MAX`,
/// `LA_DV_MAX`) and loop to the runtime dim, so 4 classes cover every supported dim.
pub const HEAD_DIM_CLASSES: [usize; 4] = [32, 64, 128, 256];

/// `Ok` for 16 ≤ dim ≤ 256, dim a multiple of 16; otherwise `Unsupported::Problem` naming the
/// dim (`what` is e.g. "head dim D" or "value dim M").
pub fn check_head_dim(what: &str, dim: usize) -> Result<(), Unsupported> {
    if (MIN_HEAD_DIM..=MAX_HEAD_DIM).contains(&dim) && dim % 16 == 0 {
        Ok(())
    } else {
        Err(Unsupported::Problem(format!(
            "{what} = {dim}: CUDA kernels take {MIN_HEAD_DIM}..={MAX_HEAD_DIM} in multiples of 16"
        )))
    }
}

/// The class (32, 64, 128 or 256) that holds `dim`; `dim` need not be a multiple of 16 (a
/// feature dim C = D+1 for `1+cos`), but must be in 1..=256.
pub fn head_dim_class(what: &str, dim: usize) -> Result<usize, Unsupported> {
    HEAD_DIM_CLASSES
        .iter()
        .copied()
        .find(|&class| dim >= 1 && dim <= class)
        .ok_or_else(|| {
            Unsupported::Problem(format!(
                "{what} = {dim}: CUDA kernels take at most {MAX_HEAD_DIM}"
            ))
        })
}

/// `("LA_STORAGE", "0"|"1"|"2")` for f32, f16, bf16; f64 has no CUDA kernels.
pub fn storage_define(precision: Precision) -> Result<(String, String), Unsupported> {
    let code = match precision {
        Precision::F32 => 0,
        Precision::F16 => 1,
        Precision::BF16 => 2,
        Precision::F64 => {
            return Err(Unsupported::Problem(
                "CUDA kernels store f32, f16 or bf16, not f64".into(),
            ))
        }
    };
    Ok(("LA_STORAGE".into(), code.to_string()))
}

/// `("LA_MAP", code)` for the maps fused in kernels (identity 0, elu+1 1, relu 2). `None` for
/// maps that need the separate φ stage (see `feature_map`); the core then uses identity.
pub fn map_define(map: &FeatureMap) -> Option<(String, String)> {
    let code = match map {
        FeatureMap::Identity => 0,
        FeatureMap::EluPlusOne => 1,
        FeatureMap::Relu => 2,
        _ => return None,
    };
    Some(("LA_MAP".into(), code.to_string()))
}

// ============================================================================================
// NVRTC compilation and the ptxas report
// ============================================================================================

/// ptxas' resource report for one entry point.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PtxasReport {
    pub kernel: String,
    pub registers: u32,
    pub spill_stores_bytes: u64,
    pub spill_loads_bytes: u64,
    /// Static shared memory (`__shared__` arrays); dynamic shared memory is not included.
    pub shared_bytes: u64,
    pub stack_frame_bytes: u64,
}

impl PtxasReport {
    pub fn spills(&self) -> bool {
        self.spill_stores_bytes > 0 || self.spill_loads_bytes > 0
    }
}

/// A compiled variant: cubin for one arch, the NVRTC log, ptxas' per-kernel report.
#[derive(Debug, Clone)]
pub struct CompiledKernel {
    pub label: String,
    pub arch: Arch,
    pub cubin: Vec<u8>,
    pub log: String,
    pub report: Vec<PtxasReport>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct CompileKey {
    source_name: &'static str,
    defines: Vec<(String, String)>,
    arch: Arch,
}

impl CompileKey {
    fn of(variant: &KernelVariant, arch: Arch) -> Self {
        CompileKey {
            source_name: variant.source_name,
            defines: variant.defines.clone(),
            arch,
        }
    }
}

type CompileCache = Mutex<HashMap<CompileKey, Arc<CompiledKernel>>>;
static COMPILE_CACHE: OnceLock<CompileCache> = OnceLock::new();

/// Compiles `variant` for `arch` (cached process-wide). Needs NVRTC only, no GPU.
pub fn compile(variant: &KernelVariant, arch: Arch) -> Result<Arc<CompiledKernel>, AttnError> {
    nvrtc_available()?;
    let key = CompileKey::of(variant, arch);
    let cache = COMPILE_CACHE.get_or_init(Default::default);
    if let Some(hit) = lock(cache)?.get(&key) {
        return Ok(hit.clone());
    }
    // Compiled outside the lock so other threads' lookups are not held up; a racing compile
    // of the same key just does the work twice.
    let compiled = Arc::new(compile_uncached(variant, arch)?);
    lock(cache)?.insert(key, compiled.clone());
    Ok(compiled)
}

fn lock<T>(mutex: &Mutex<T>) -> Result<std::sync::MutexGuard<'_, T>, AttnError> {
    mutex
        .lock()
        .map_err(|_| AttnError::State("a thread panicked while holding a runtime lock".into()))
}

/// The NVRTC options for `variant` on `arch`.
pub fn nvrtc_options(variant: &KernelVariant, arch: Arch) -> Vec<String> {
    let mut options = vec![
        format!("--gpu-architecture={arch}"),
        "--std=c++17".to_string(),
        "-Xptxas".to_string(),
        "-v".to_string(),
    ];
    options.extend(variant.defines.iter().map(|(k, v)| format!("-D{k}={v}")));
    options
}

fn compile_uncached(variant: &KernelVariant, arch: Arch) -> Result<CompiledKernel, AttnError> {
    let label = variant.label();
    let fail = |what: String| AttnError::Compile(format!("{label} for {arch}: {what}"));
    // #line makes errors in the kernel point at its own file and line.
    let program_text = format!(
        "{PRELUDE}\n#line 1 \"{}\"\n{}",
        variant.source_name, variant.source
    );
    let source = CString::new(program_text).map_err(|_| fail("source holds a NUL byte".into()))?;
    let name = CString::new(variant.source_name).map_err(|_| fail("bad source name".into()))?;
    let options: Vec<CString> = nvrtc_options(variant, arch)
        .into_iter()
        .map(CString::new)
        .collect::<Result<_, _>>()
        .map_err(|_| fail("a define holds a NUL byte".into()))?;
    let option_ptrs: Vec<*const c_char> = options.iter().map(|o| o.as_ptr()).collect();

    let mut program: nvrtc::nvrtcProgram = std::ptr::null_mut();
    // SAFETY: NVRTC is loaded (nvrtc_available); pointers outlive the program; the program
    // is destroyed on every path below.
    unsafe {
        let status = nvrtc::nvrtcCreateProgram(
            &mut program,
            source.as_ptr(),
            name.as_ptr(),
            0,
            std::ptr::null(),
            std::ptr::null(),
        );
        if status != nvrtc::nvrtcResult::NVRTC_SUCCESS {
            return Err(fail(format!("nvrtcCreateProgram: {status:?}")));
        }
        let compiled =
            nvrtc::nvrtcCompileProgram(program, option_ptrs.len() as c_int, option_ptrs.as_ptr());
        let log = program_log(program);
        let cubin = if compiled == nvrtc::nvrtcResult::NVRTC_SUCCESS {
            program_cubin(program)
        } else {
            Err(format!("{compiled:?}"))
        };
        nvrtc::nvrtcDestroyProgram(&mut program);
        let cubin = cubin.map_err(|status| fail(format!("{status}\n{log}")))?;
        let report = parse_ptxas_log(&log);
        for entry in &variant.entry_points {
            if !report.iter().any(|r| &r.kernel == entry) {
                return Err(fail(format!(
                    "entry point '{entry}' not exported (ptxas reported: {})",
                    report
                        .iter()
                        .map(|r| r.kernel.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
        }
        Ok(CompiledKernel {
            label,
            arch,
            cubin,
            log,
            report,
        })
    }
}

/// # Safety
/// `program` must be a live NVRTC program.
unsafe fn program_log(program: nvrtc::nvrtcProgram) -> String {
    let mut size = 0usize;
    if nvrtc::nvrtcGetProgramLogSize(program, &mut size) != nvrtc::nvrtcResult::NVRTC_SUCCESS {
        return String::from("(no log)");
    }
    let mut buffer = vec![0u8; size.max(1)];
    if nvrtc::nvrtcGetProgramLog(program, buffer.as_mut_ptr().cast())
        != nvrtc::nvrtcResult::NVRTC_SUCCESS
    {
        return String::from("(no log)");
    }
    let end = buffer.iter().position(|&b| b == 0).unwrap_or(buffer.len());
    String::from_utf8_lossy(&buffer[..end]).into_owned()
}

/// # Safety
/// `program` must be a live, successfully compiled NVRTC program.
unsafe fn program_cubin(program: nvrtc::nvrtcProgram) -> Result<Vec<u8>, String> {
    let mut size = 0usize;
    let status = nvrtc::nvrtcGetCUBINSize(program, &mut size);
    if status != nvrtc::nvrtcResult::NVRTC_SUCCESS || size == 0 {
        return Err(format!(
            "no cubin ({status:?}); is the target a real sm_XX?"
        ));
    }
    let mut cubin = vec![0u8; size];
    let status = nvrtc::nvrtcGetCUBIN(program, cubin.as_mut_ptr().cast());
    if status != nvrtc::nvrtcResult::NVRTC_SUCCESS {
        return Err(format!("nvrtcGetCUBIN: {status:?}"));
    }
    Ok(cubin)
}

/// Parses ptxas' `-v` output (as NVRTC puts it in the program log) into one report per entry
/// point, in the order ptxas compiled them. Non-entry (`.func`) property blocks are skipped.
///
/// ```text
/// ptxas info    : Compiling entry function 'la_x' for 'sm_90'
/// ptxas info    : Function properties for la_x
///     8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads
/// ptxas info    : Used 40 registers, used 1 barriers, 2048 bytes smem, 400 bytes cmem[0]
/// ```
pub fn parse_ptxas_log(log: &str) -> Vec<PtxasReport> {
    let mut reports: Vec<PtxasReport> = Vec::new();
    // Index into `reports` of the entry whose properties the next lines describe.
    let mut current: Option<usize> = None;
    let mut properties_of: Option<String> = None;
    for line in log.lines() {
        let line = line.trim();
        if let Some(rest) = line_after(line, "Compiling entry function '") {
            let name = rest.split('\'').next().unwrap_or_default().to_string();
            current = match reports.iter().position(|r| r.kernel == name) {
                Some(i) => Some(i),
                None => {
                    reports.push(PtxasReport {
                        kernel: name,
                        ..Default::default()
                    });
                    Some(reports.len() - 1)
                }
            };
        } else if let Some(rest) = line_after(line, "Function properties for ") {
            properties_of = Some(rest.trim().to_string());
        } else if line.contains("bytes stack frame") {
            let target = properties_of
                .as_deref()
                .and_then(|name| reports.iter().position(|r| r.kernel == name));
            if let Some(i) = target {
                let report = &mut reports[i];
                for part in line.split(',') {
                    let value = number_before_bytes(part);
                    if part.contains("stack frame") {
                        report.stack_frame_bytes = value;
                    } else if part.contains("spill stores") {
                        report.spill_stores_bytes = value;
                    } else if part.contains("spill loads") {
                        report.spill_loads_bytes = value;
                    }
                }
            }
        } else if let Some(rest) = line_after(line, "Used ") {
            if let Some(i) = current {
                let report = &mut reports[i];
                report.registers = leading_number(rest) as u32;
                for part in rest.split(',') {
                    if part.contains("bytes smem") {
                        report.shared_bytes = number_before_bytes(part);
                    }
                }
            }
        }
    }
    reports
}

fn line_after<'a>(line: &'a str, marker: &str) -> Option<&'a str> {
    line.find(marker).map(|at| &line[at + marker.len()..])
}

/// `ptxas . 8 bytes stack frame` → 8: the last number before "bytes".
fn number_before_bytes(text: &str) -> u64 {
    let before = text.split("bytes").next().unwrap_or_default();
    before
        .split_whitespace()
        .last()
        .and_then(|token| token.parse().ok())
        .unwrap_or(0)
}

fn leading_number(text: &str) -> u64 {
    let digits: String = text
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    digits.parse().unwrap_or(0)
}

// ============================================================================================
// The device: context, stream, modules
// ============================================================================================

/// What the device reports about itself.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DeviceInfo {
    pub name: String,
    pub compute_capability: (u32, u32),
    pub sm_count: u32,
    pub l2_bytes: u64,
    pub total_memory_bytes: u64,
    /// Largest dynamic + static shared memory one block may opt in to.
    pub max_shared_per_block_optin: u64,
    /// e.g. "13.0".
    pub driver_version: String,
    /// e.g. "13.0", or the reason NVRTC is unavailable.
    pub nvrtc_version: String,
}

/// The process-wide device state. Obtain with [`gpu`].
pub struct Gpu {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    info: DeviceInfo,
    arch: Arch,
    modules: Mutex<HashMap<CompileKey, Arc<CudaModule>>>,
    l2_flush: Mutex<Option<CudaSlice<u8>>>,
}

static GPU: OnceLock<Result<Gpu, AttnError>> = OnceLock::new();

/// The process-wide device 0 (context and stream created on first use).
pub fn gpu() -> Result<&'static Gpu, AttnError> {
    gpu_available()?;
    GPU.get_or_init(Gpu::open).as_ref().map_err(Clone::clone)
}

impl Gpu {
    fn open() -> Result<Gpu, AttnError> {
        let ctx = CudaContext::new(0).cuda("cuCtxCreate (device 0)")?;
        // One stream for everything: cudarc's per-buffer event tracking (meant for
        // multi-stream use) would add event records to every launch and copy.
        // SAFETY: no buffer is ever used on another stream.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.default_stream();
        let attr = |a: cu::CUdevice_attribute, name: &str| {
            ctx.attribute(a)
                .cuda(&format!("cuDeviceGetAttribute({name})"))
        };
        use cu::CUdevice_attribute as A;
        let major = attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, "cc major")?;
        let minor = attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, "cc minor")?;
        let sm_count = attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, "SM count")?;
        let l2 = attr(A::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, "L2 size")?;
        let smem_optin = attr(
            A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
            "shared optin",
        )?;
        let mut driver: c_int = 0;
        // SAFETY: libcuda is loaded (gpu_available).
        unsafe { cu::cuDriverGetVersion(&mut driver) }
            .result()
            .cuda("cuDriverGetVersion")?;
        let info = DeviceInfo {
            name: ctx.name().cuda("cuDeviceGetName")?,
            compute_capability: (major as u32, minor as u32),
            sm_count: sm_count as u32,
            l2_bytes: l2 as u64,
            total_memory_bytes: ctx.total_mem().cuda("cuDeviceTotalMem")? as u64,
            max_shared_per_block_optin: smem_optin as u64,
            driver_version: format!("{}.{}", driver / 1000, (driver % 1000) / 10),
            nvrtc_version: match nvrtc_version() {
                Ok((a, b)) => format!("{a}.{b}"),
                Err(e) => e.to_string(),
            },
        };
        Ok(Gpu {
            arch: Arch {
                major: major as u32,
                minor: minor as u32,
            },
            ctx,
            stream,
            info,
            modules: Mutex::new(HashMap::new()),
            l2_flush: Mutex::new(None),
        })
    }

    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// The device's own architecture (kernels are compiled for exactly this).
    pub fn arch(&self) -> Arch {
        self.arch
    }

    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// The one stream all work goes on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// (free, total) device memory in bytes.
    pub fn memory_info(&self) -> Result<(u64, u64), AttnError> {
        let (free, total) = self.ctx.mem_get_info().cuda("cuMemGetInfo")?;
        Ok((free as u64, total as u64))
    }

    /// Waits for all work on the stream.
    pub fn synchronize(&self) -> Result<(), AttnError> {
        self.stream.synchronize().cuda("cuStreamSynchronize")
    }

    /// `entry` of `variant`, compiled for this device (cached) and loaded (cached).
    pub fn function(
        &self,
        variant: &KernelVariant,
        entry: &str,
    ) -> Result<CudaFunction, AttnError> {
        if !variant.entry_points.iter().any(|e| e == entry) {
            return Err(AttnError::State(format!(
                "{} does not list entry point '{entry}'",
                variant.label()
            )));
        }
        let key = CompileKey::of(variant, self.arch);
        let cached = lock(&self.modules)?.get(&key).cloned();
        let module = match cached {
            Some(module) => module,
            None => {
                let compiled = compile(variant, self.arch)?;
                let module = self
                    .ctx
                    .load_module(cudarc::nvrtc::Ptx::from_binary(compiled.cubin.clone()))
                    .cuda(&format!("cuModuleLoadData({})", compiled.label))?;
                lock(&self.modules)?.insert(key, module.clone());
                module
            }
        };
        module
            .load_function(entry)
            .cuda(&format!("cuModuleGetFunction({entry})"))
    }

    /// Lets `function` use up to `bytes` of dynamic shared memory (needed above 48 KiB).
    pub fn allow_dynamic_shared(
        &self,
        function: &CudaFunction,
        bytes: u32,
    ) -> Result<(), AttnError> {
        if u64::from(bytes) > self.info.max_shared_per_block_optin {
            return Err(AttnError::InvalidArgument(format!(
                "{bytes} bytes of shared memory requested; {} allows {} per block",
                self.info.name, self.info.max_shared_per_block_optin
            )));
        }
        function
            .set_attribute(
                cu::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                bytes as i32,
            )
            .cuda("cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)")
    }

    /// Device time of the work `launches` enqueues on the stream, measured with CUDA events
    /// (waits for that work to finish).
    pub fn time<F>(&self, launches: F) -> Result<Duration, AttnError>
    where
        F: FnOnce() -> Result<(), AttnError>,
    {
        let flags = Some(cu::CUevent_flags::CU_EVENT_DEFAULT);
        let start = self
            .stream
            .record_event(flags)
            .cuda("cuEventRecord(start)")?;
        launches()?;
        let end = self.stream.record_event(flags).cuda("cuEventRecord(end)")?;
        let ms = start.elapsed_ms(&end).cuda("cuEventElapsedTime")?;
        Ok(Duration::from_secs_f64(f64::from(ms.max(0.0)) / 1e3))
    }

    /// Evicts L2 by writing a buffer of twice its size (kept for the life of the process).
    pub fn flush_l2(&self) -> Result<(), AttnError> {
        let mut guard = lock(&self.l2_flush)?;
        if guard.is_none() {
            let bytes = (2 * self.info.l2_bytes).max(1 << 20) as usize;
            // SAFETY: contents are never read; the memset below writes every byte.
            let buffer =
                unsafe { self.stream.alloc::<u8>(bytes) }.cuda("cuMemAlloc(L2 flush buffer)")?;
            *guard = Some(buffer);
        }
        if let Some(buffer) = guard.as_mut() {
            self.stream
                .memset_zeros(buffer)
                .cuda("cuMemsetD8Async(L2 flush)")?;
        }
        Ok(())
    }
}

/// Checks a launch shape against the device limits, then launches; names the kernel in
/// errors.
///
/// # Safety
/// The arguments pushed on `args` must match the kernel's parameters in number, type and
/// order, and the buffers must be large enough for the indices the kernel computes from them.
pub unsafe fn launch(
    mut args: LaunchArgs<'_>,
    gpu: &Gpu,
    config: LaunchConfig,
    kernel: &str,
) -> Result<(), AttnError> {
    let (gx, gy, gz) = config.grid_dim;
    let (bx, by, bz) = config.block_dim;
    let threads = u64::from(bx) * u64::from(by) * u64::from(bz);
    let bad = if gx == 0 || gy == 0 || gz == 0 || threads == 0 {
        Some("an empty grid or block".to_string())
    } else if gy > 65_535 || gz > 65_535 {
        Some(format!("grid ({gx}, {gy}, {gz}) exceeds 65535 in y or z"))
    } else if threads > 1024 {
        Some(format!("{threads} threads per block (max 1024)"))
    } else if u64::from(config.shared_mem_bytes) > gpu.info.max_shared_per_block_optin {
        Some(format!(
            "{} bytes of dynamic shared memory (max {})",
            config.shared_mem_bytes, gpu.info.max_shared_per_block_optin
        ))
    } else {
        None
    };
    if let Some(reason) = bad {
        return Err(AttnError::InvalidArgument(format!(
            "launch of {kernel}: {reason}"
        )));
    }
    args.launch(config)
        .map(|_| ())
        .cuda(&format!("cuLaunchKernel({kernel})"))
}

/// Blocks of `per_block` covering `n` items (for 1-D grids), as u32.
pub fn blocks_for(n: usize, per_block: usize) -> Result<u32, AttnError> {
    let blocks = n.div_ceil(per_block.max(1)).max(1);
    u32::try_from(blocks).map_err(|_| AttnError::SizeOverflow(format!("{blocks} blocks")))
}

/// A host count as the `int` kernels take, or `SizeOverflow`.
pub fn as_i32(what: &str, n: usize) -> Result<i32, AttnError> {
    i32::try_from(n).map_err(|_| AttnError::SizeOverflow(format!("{what} = {n} exceeds i32")))
}

// ============================================================================================
// Counted device memory
// ============================================================================================

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

/// Allocations at least this large are checked against `cuMemGetInfo` first, so an
/// impossible request is a clean `OutOfMemory` naming the sizes.
pub const CHECKED_ALLOCATION_BYTES: u64 = 64 << 20;

/// A device buffer counted against a [`MemoryMeter`] while it lives.
pub struct DeviceBuffer<T> {
    slice: CudaSlice<T>,
    len: usize,
    bytes: u64,
    meter: MemoryMeter,
}

impl<T: DeviceRepr + ValidAsZeroBits + Copy + Default + Unpin> DeviceBuffer<T> {
    /// `len` zeroed elements. A zero-length request allocates one element (CUDA rejects empty
    /// allocations) but reports `len() == 0`.
    pub fn zeros(gpu: &Gpu, meter: &MemoryMeter, len: usize) -> Result<Self, AttnError> {
        let alloc_len = len.max(1);
        let bytes = Self::bytes_for(alloc_len)?;
        Self::check_free(gpu, bytes)?;
        let slice = gpu
            .stream
            .alloc_zeros::<T>(alloc_len)
            .map_err(|e| oom_detail(cuda_error("cuMemAlloc", e), gpu, bytes))?;
        meter.add(bytes);
        Ok(DeviceBuffer {
            slice,
            len,
            bytes,
            meter: meter.clone(),
        })
    }

    /// A copy of `host` on the device.
    pub fn upload(gpu: &Gpu, meter: &MemoryMeter, host: &[T]) -> Result<Self, AttnError> {
        let mut buffer = Self::zeros(gpu, meter, host.len())?;
        if !host.is_empty() {
            gpu.stream
                .memcpy_htod(host, &mut buffer.slice)
                .cuda("cuMemcpyHtoD")?;
        }
        Ok(buffer)
    }

    /// The contents (waits for the stream).
    pub fn download(&self) -> Result<Vec<T>, AttnError> {
        if self.len == 0 {
            return Ok(Vec::new());
        }
        let mut host = vec![T::default(); self.len];
        gpu()?
            .stream
            .memcpy_dtoh(&self.slice.slice(..self.len), &mut host)
            .cuda("cuMemcpyDtoH")?;
        Ok(host)
    }

    /// Sets every byte to zero (asynchronously, on the stream).
    pub fn zero(&mut self, gpu: &Gpu) -> Result<(), AttnError> {
        gpu.stream
            .memset_zeros(&mut self.slice)
            .cuda("cuMemsetD8Async")
    }

    fn bytes_for(len: usize) -> Result<u64, AttnError> {
        len.checked_mul(std::mem::size_of::<T>())
            .map(|b| b as u64)
            .ok_or_else(|| AttnError::SizeOverflow(format!("{len} device elements")))
    }

    fn check_free(gpu: &Gpu, bytes: u64) -> Result<(), AttnError> {
        if bytes < CHECKED_ALLOCATION_BYTES {
            return Ok(());
        }
        let (free, total) = gpu.memory_info()?;
        if bytes > free {
            return Err(AttnError::OutOfMemory {
                device: gpu.info.name.clone(),
                requested_bytes: bytes,
                detail: format!("{free} bytes free of {total}"),
            });
        }
        Ok(())
    }
}

impl<T: StorageElem> DeviceBuffer<T> {
    /// Host conversion from f64 then upload (staging).
    pub fn upload_f64(gpu: &Gpu, meter: &MemoryMeter, host: &[f64]) -> Result<Self, AttnError> {
        let converted: Vec<T> = host.iter().map(|&x| T::from_f64(x)).collect();
        Self::upload(gpu, meter, &converted)
    }

    /// The contents widened to f64.
    pub fn download_f64(&self) -> Result<Vec<f64>, AttnError> {
        Ok(self.download()?.into_iter().map(T::to_f64).collect())
    }
}

fn oom_detail(error: AttnError, gpu: &Gpu, bytes: u64) -> AttnError {
    match error {
        AttnError::OutOfMemory { detail, .. } => AttnError::OutOfMemory {
            device: gpu.info.name.clone(),
            requested_bytes: bytes,
            detail,
        },
        other => other,
    }
}

impl<T> DeviceBuffer<T> {
    /// Elements requested (the allocation may hold one more when this is 0).
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

    /// For `launch_builder(..).arg(buffer.slice())`.
    pub fn slice(&self) -> &CudaSlice<T> {
        &self.slice
    }

    pub fn slice_mut(&mut self) -> &mut CudaSlice<T> {
        &mut self.slice
    }

    /// The raw device address, for kernel parameters passed by value (`args.arg(&addr)`),
    /// e.g. optional pointers that may be null (see [`address_of`]). The buffer must outlive
    /// the kernels that use the address.
    pub fn device_address(&self) -> u64 {
        use cudarc::driver::DevicePtr;
        // Event tracking is off (one stream), so the guard records nothing.
        let (address, _guard) = self.slice.device_ptr(self.slice.stream());
        address
    }
}

/// The device address of `buffer`, or 0 (a null pointer for the kernel) when absent.
pub fn address_of<T>(buffer: Option<&DeviceBuffer<T>>) -> u64 {
    buffer.map_or(0, DeviceBuffer::device_address)
}

impl<T> Drop for DeviceBuffer<T> {
    fn drop(&mut self) {
        self.meter.sub(self.bytes);
    }
}

/// Storage element types of the kernels (`LA_STORAGE`), with the host conversions staging
/// and read-back use.
pub trait StorageElem:
    DeviceRepr + ValidAsZeroBits + Copy + Default + Send + Sync + Unpin + 'static
{
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

// ============================================================================================
// Bandwidth probe
// ============================================================================================

/// Device-to-device copy bandwidth samples in GB/s (10⁹ bytes/s), counting read + write bytes
/// (2 × `bytes` per copy). One warm-up copy is not sampled.
pub fn measure_copy_bandwidth(bytes: usize, repeats: usize) -> Result<Vec<f64>, AttnError> {
    if bytes == 0 || repeats == 0 {
        return Err(AttnError::InvalidArgument(
            "copy bandwidth needs bytes > 0 and repeats > 0".into(),
        ));
    }
    let gpu = gpu()?;
    let meter = MemoryMeter::new();
    let source = DeviceBuffer::<u8>::zeros(gpu, &meter, bytes)?;
    let mut target = DeviceBuffer::<u8>::zeros(gpu, &meter, bytes)?;
    let mut copy = || {
        gpu.stream
            .memcpy_dtod(&source.slice, &mut target.slice)
            .cuda("cuMemcpyDtoDAsync")
    };
    copy()?;
    let mut samples = Vec::with_capacity(repeats);
    for _ in 0..repeats {
        let elapsed = gpu.time(&mut copy)?;
        let seconds = elapsed.as_secs_f64().max(1e-9);
        samples.push(2.0 * bytes as f64 / seconds / 1e9);
    }
    Ok(samples)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = "\
ptxas info    : 0 bytes gmem
ptxas info    : Function properties for la_helper
ptxas         .     16 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Compiling entry function 'la_fast' for 'sm_90'
ptxas info    : Function properties for la_fast
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 4096 bytes smem, 400 bytes cmem[0]
ptxas info    : Compile time = 4.075 ms
ptxas info    : Compiling entry function 'la_heavy' for 'sm_90'
ptxas info    : Function properties for la_heavy
ptxas         .     264 bytes stack frame, 132 bytes spill stores, 128 bytes spill loads
ptxas info    : Used 255 registers, used 0 barriers, 372 bytes cmem[0]
";

    #[test]
    fn ptxas_log_gives_one_report_per_entry_point() {
        let reports = parse_ptxas_log(LOG);
        assert_eq!(
            reports,
            vec![
                PtxasReport {
                    kernel: "la_fast".into(),
                    registers: 40,
                    spill_stores_bytes: 0,
                    spill_loads_bytes: 0,
                    shared_bytes: 4096,
                    stack_frame_bytes: 0,
                },
                PtxasReport {
                    kernel: "la_heavy".into(),
                    registers: 255,
                    spill_stores_bytes: 132,
                    spill_loads_bytes: 128,
                    shared_bytes: 0,
                    stack_frame_bytes: 264,
                },
            ]
        );
        assert!(!reports[0].spills());
        assert!(reports[1].spills());
    }

    #[test]
    fn ptxas_parser_ignores_unrelated_text() {
        assert!(parse_ptxas_log("").is_empty());
        assert!(parse_ptxas_log("warning: something\nUsed registers").is_empty());
    }

    #[test]
    fn head_dims_are_multiples_of_16_from_16_to_256() {
        for dim in (16..=256).step_by(16) {
            assert_eq!(check_head_dim("head dim D", dim), Ok(()), "D = {dim}");
        }
        for dim in [0, 8, 15, 17, 40, 50, 100, 257, 272, 512] {
            let error = check_head_dim("head dim D", dim).expect_err("must be refused");
            assert!(
                matches!(&error, Unsupported::Problem(text) if text.contains(&format!("D = {dim}"))),
                "{error}"
            );
        }
    }

    #[test]
    fn head_dim_classes_round_up() {
        let class = |d| head_dim_class("C", d).ok();
        assert_eq!(class(16), Some(32));
        assert_eq!(class(48), Some(64));
        assert_eq!(class(65), Some(128));
        assert_eq!(class(80), Some(128));
        assert_eq!(class(96), Some(128));
        assert_eq!(class(256), Some(256));
        assert_eq!(class(257), None);
        assert_eq!(class(0), None);
    }

    #[test]
    fn storage_defines_cover_gpu_precisions_only() {
        assert_eq!(storage_define(Precision::F16).map(|d| d.1), Ok("1".into()));
        assert!(storage_define(Precision::F64).is_err());
        assert!(map_define(&FeatureMap::Softmax).is_none());
        assert_eq!(map_define(&FeatureMap::Relu).map(|d| d.1), Some("2".into()));
    }

    #[test]
    fn variant_label_lists_defines() {
        let variant = KernelVariant::new("x.cu", "")
            .define("LA_STORAGE", 1)
            .define("LA_MAP", 2);
        assert_eq!(variant.label(), "x.cu[LA_STORAGE=1,LA_MAP=2]");
    }
}
