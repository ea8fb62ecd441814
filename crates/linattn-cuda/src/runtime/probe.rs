//! Availability of NVRTC and of a CUDA device: cheap, cached, never panics.
//!
//! cudarc panics when a library is absent: nothing here calls into cudarc before checking
//! that the library loads.
//!
//! # Finding libnvrtc
//! cudarc dlopens `libnvrtc.so.13` by soname. When the default loader path lacks it, this
//! module dlopens it by absolute path (RTLD_GLOBAL, builtins first) from, in order:
//! `$LINATTN_NVRTC_DIR`, `.nvrtc/nvidia/cu13/lib` in the executable's ancestors and in this
//! repository, the user cache the binary provisions ([`super::provision`]:
//! `~/.cache/linattn/nvrtc-13.0.88/nvidia/cu13/lib`), `/usr/local/cuda/lib64`,
//! `/usr/local/cuda/targets/x86_64-linux/lib`, and python `site-packages`/`dist-packages`
//! `nvidia/cu13/lib` (pip wheel `nvidia-cuda-nvrtc`). glibc then resolves cudarc's soname
//! dlopen to the loaded library, so `LD_LIBRARY_PATH` is not needed.
//!
//! `LINATTN_NVRTC_NO_SEARCH=1` narrows this to `$LINATTN_NVRTC_DIR` and the user cache only
//! (the loader path is not tried either): tests use it to see linattn on a machine without
//! NVRTC, whatever this one has installed.
//!
//! Every reason here starts with a short clause ("no NVRTC", "no CUDA driver") before the
//! first `:`, which tables show alone (the details go in a footnote).

use std::ffi::c_int;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use cudarc::driver::sys as cu;
use cudarc::nvrtc::sys as nvrtc;
use linattn_core::Unsupported;
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
    let on_loader_path = !search_restricted() && loader_finds_nvrtc();
    // In the restricted search the loader path is consulted only after a preload by absolute
    // path succeeded (it then resolves to that library).
    let preloaded = !on_loader_path && preload_nvrtc_from_known_dirs();
    let found = on_loader_path || (preloaded && loader_finds_nvrtc());
    if !found {
        let searched: Vec<String> = nvrtc_search_dirs()
            .iter()
            .map(|d| d.display().to_string())
            .collect();
        let (before, after) = if search_restricted() {
            ("", " (LINATTN_NVRTC_NO_SEARCH: nowhere else)")
        } else {
            ("on the loader path nor ", "")
        };
        return Err(Unsupported::Unavailable(format!(
            "no NVRTC: libnvrtc.so.13 not found {before}in [{}]{after}; run `just nvrtc`, or set \
             LINATTN_NVRTC_DIR or LD_LIBRARY_PATH",
            searched.join(", ")
        )));
    }
    let (mut major, mut minor): (c_int, c_int) = (0, 0);
    // SAFETY: the library is present (checked above), so cudarc's loader will not panic.
    let status = unsafe { nvrtc::nvrtcVersion(&mut major, &mut minor) };
    if status != nvrtc::nvrtcResult::NVRTC_SUCCESS {
        return Err(Unsupported::Unavailable(format!(
            "NVRTC unusable: nvrtcVersion failed: {status:?}"
        )));
    }
    Ok((major, minor))
}

/// Whether cudarc's soname lookup finds libnvrtc (the default loader path, or a library
/// already loaded).
fn loader_finds_nvrtc() -> bool {
    // SAFETY: is_culib_present only tries dlopen on candidate names.
    unsafe { nvrtc::is_culib_present() }
}

/// `LINATTN_NVRTC_NO_SEARCH` set (and not "0"): only `$LINATTN_NVRTC_DIR` and the user cache.
fn search_restricted() -> bool {
    std::env::var_os("LINATTN_NVRTC_NO_SEARCH").is_some_and(|v| !v.is_empty() && v != "0")
}

/// Whether the NVRTC probe would find a library to load, without loading one for good and
/// without touching the cached status: the binary asks this before deciding to provision.
pub fn nvrtc_locatable() -> bool {
    (!search_restricted() && loader_finds_nvrtc())
        || nvrtc_search_dirs()
            .iter()
            .any(|d| d.join("libnvrtc.so.13").is_file())
}

/// The cache directory's name: the pinned version, so a new pin installs beside the old.
pub(super) const CACHE_NAME: &str = "nvrtc-13.0.88";

/// Where the NVRTC wheel puts the libraries, inside its install directory.
pub(super) const WHEEL_LIB: &str = "nvidia/cu13/lib";

/// `$XDG_CACHE_HOME/linattn` (when set and absolute), else `$HOME/.cache/linattn`.
pub fn cache_root() -> Option<PathBuf> {
    let xdg = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute());
    let base = xdg.or_else(|| {
        std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .map(|h| PathBuf::from(h).join(".cache"))
    })?;
    Some(base.join("linattn"))
}

/// The directory [`super::provision`] installs the wheel into (present or not).
pub fn provisioned_dir() -> Option<PathBuf> {
    cache_root().map(|root| root.join(CACHE_NAME))
}

/// Where libnvrtc lies once the wheel is installed: a directory the probe searches.
pub fn provisioned_lib_dir() -> Option<PathBuf> {
    provisioned_dir().map(|dir| dir.join(WHEEL_LIB))
}

/// Directories searched for libnvrtc when the default loader path lacks it, in order.
pub fn nvrtc_search_dirs() -> Vec<PathBuf> {
    let repo_wheel_lib = Path::new(".nvrtc").join(WHEEL_LIB);
    let mut dirs = Vec::new();
    if let Some(dir) = std::env::var_os("LINATTN_NVRTC_DIR") {
        dirs.push(PathBuf::from(dir));
    }
    let cache = provisioned_lib_dir();
    if search_restricted() {
        dirs.extend(cache);
        return dirs;
    }
    if let Ok(exe) = std::env::current_exe() {
        // target/<profile>/deps/<test> or target/<profile>/<bin>: the repo is 3–4 levels up.
        for ancestor in exe.ancestors().skip(1).take(5) {
            dirs.push(ancestor.join(&repo_wheel_lib));
        }
    }
    dirs.push(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(&repo_wheel_lib),
    );
    // The pinned wheel linattn installed comes before a system CUDA, whose NVRTC may be
    // newer than the GPU machines' drivers accept.
    dirs.extend(cache);
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

/// Loads libnvrtc (and its builtins) from the first search directory where that works;
/// true when one did.
fn preload_nvrtc_from_known_dirs() -> bool {
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
            return true;
        }
    }
    false
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
            "no CUDA driver: libcuda.so.1 not found".into(),
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
