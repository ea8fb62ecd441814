//! NVRTC compilation (PTX, cubin and ptxas' report) with a process cache and an on-disk
//! cache, and the parser of ptxas' `-v` report.
//!
//! * [`compile`]`(&variant, Arch::SM90)` — NVRTC compiles `PRELUDE + "#line 1 name" + source`
//!   (with the variant's headers, which the source `#include`s by name) for a real `sm_XX`
//!   with `-Xptxas -v`; returns [`CompiledKernel`] with the PTX (what the
//!   simulator runs), the cubin (what a GPU loads), the log and the parsed ptxas report.
//!   Errors: `AttnError::Compile` holding the log.
//! * The on-disk cache keeps each compile under a hash of (program text, headers, options,
//!   NVRTC version; the text read from `LINATTN_KERNEL_DIR` when set) in `$LINATTN_CACHE_DIR`, else `<cargo target dir>/linattn-nvrtc-cache`, else
//!   the temp dir; `LINATTN_NVRTC_CACHE=0` turns it off. Entries are written atomically, so
//!   concurrent test processes share it safely.

use std::collections::HashMap;
use std::ffi::{c_char, c_int, CString};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::nvrtc::sys as nvrtc;
use linattn_core::AttnError;

use super::probe::{nvrtc_available, nvrtc_version};
use super::sync::lock;
use super::variant::{Arch, KernelHeader, KernelVariant};

/// The shared prelude, prepended to every kernel source.
pub const PRELUDE: &str = include_str!("../../../../kernels/prelude.cuh");

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
    /// The PTX NVRTC produced on the way to the cubin (what the PTX simulator runs).
    pub ptx: String,
    pub log: String,
    pub report: Vec<PtxasReport>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct CompileKey {
    source_name: &'static str,
    /// The texts too: two programs may share a name (tests build several `probe.cu`).
    source: &'static str,
    headers: &'static [KernelHeader],
    defines: Vec<(String, String)>,
    line_info: bool,
    arch: Arch,
}

impl CompileKey {
    pub(crate) fn of(variant: &KernelVariant, arch: Arch) -> Self {
        CompileKey {
            source_name: variant.source_name,
            source: variant.source,
            headers: variant.headers,
            defines: variant.defines.clone(),
            line_info: variant.line_info,
            arch,
        }
    }
}

type CompileCache = Mutex<HashMap<CompileKey, Arc<CompiledKernel>>>;
static COMPILE_CACHE: OnceLock<CompileCache> = OnceLock::new();

/// Compiles `variant` for `arch` (cached in the process and on disk). Needs NVRTC only, no
/// GPU.
pub fn compile(variant: &KernelVariant, arch: Arch) -> Result<Arc<CompiledKernel>, AttnError> {
    nvrtc_available()?;
    let key = CompileKey::of(variant, arch);
    let cache = COMPILE_CACHE.get_or_init(Default::default);
    if let Some(hit) = lock(cache)?.get(&key) {
        return Ok(hit.clone());
    }
    // Compiled outside the lock so other threads' lookups are not held up; a racing compile
    // of the same key just does the work twice.
    let compiled = Arc::new(match disk::load(variant, arch) {
        Some(hit) => hit,
        None => {
            let compiled = compile_uncached(variant, arch)?;
            disk::store(variant, arch, &compiled);
            compiled
        }
    });
    lock(cache)?.insert(key, compiled.clone());
    Ok(compiled)
}

/// The NVRTC options for `variant` on `arch`.
pub fn nvrtc_options(variant: &KernelVariant, arch: Arch) -> Vec<String> {
    let mut options = vec![
        format!("--gpu-architecture={arch}"),
        "--std=c++17".to_string(),
        "-Xptxas".to_string(),
        "-v".to_string(),
    ];
    if variant.line_info {
        options.push("-lineinfo".to_string());
    }
    options.extend(variant.defines.iter().map(|(k, v)| format!("-D{k}={v}")));
    options
}

/// The NVRTC program: the prelude, then the kernel source, each opened by a `#line 1` naming
/// its own file, so that errors and `-lineinfo`'s `.loc` lines point into `prelude.cuh` or
/// the kernel, never one for the other.
///
/// With `LINATTN_KERNEL_DIR` set, `prelude.cuh`, the kernel's `.cu` and its headers are read
/// from that directory instead of the copies embedded at build time: edit a kernel and rerun
/// without rebuilding (a file missing there falls back to the embedded one).
fn program_text(variant: &KernelVariant) -> String {
    let prelude = from_kernel_dir("prelude.cuh").unwrap_or_else(|| PRELUDE.to_string());
    let source = from_kernel_dir(variant.source_name).unwrap_or_else(|| variant.source.to_string());
    format!(
        "#line 1 \"prelude.cuh\"\n{prelude}\n#line 1 \"{}\"\n{source}",
        variant.source_name
    )
}

/// The text a compile reads for the kernel file `name`: from `LINATTN_KERNEL_DIR` when there,
/// else `embedded` (the copy built in).
pub fn file_text(name: &str, embedded: &str) -> String {
    from_kernel_dir(name).unwrap_or_else(|| embedded.to_string())
}

/// The variant's headers as (include name, text), each from `LINATTN_KERNEL_DIR` when there.
fn header_texts(variant: &KernelVariant) -> Vec<(&'static str, String)> {
    variant
        .headers
        .iter()
        .map(|h| {
            let text = from_kernel_dir(h.name).unwrap_or_else(|| h.text.to_string());
            (h.name, text)
        })
        .collect()
}

fn from_kernel_dir(name: &str) -> Option<String> {
    let dir = std::env::var_os("LINATTN_KERNEL_DIR")?;
    std::fs::read_to_string(std::path::Path::new(&dir).join(name)).ok()
}

fn compile_uncached(variant: &KernelVariant, arch: Arch) -> Result<CompiledKernel, AttnError> {
    let label = variant.label();
    let fail = |what: String| AttnError::Compile(format!("{label} for {arch}: {what}"));
    let source =
        CString::new(program_text(variant)).map_err(|_| fail("source holds a NUL byte".into()))?;
    let name = CString::new(variant.source_name).map_err(|_| fail("bad source name".into()))?;
    let mut header_names = Vec::new();
    let mut header_sources = Vec::new();
    for (include, text) in header_texts(variant) {
        header_names.push(CString::new(include).map_err(|_| fail("bad header name".into()))?);
        header_sources.push(
            CString::new(text).map_err(|_| fail(format!("header {include} holds a NUL byte")))?,
        );
    }
    let header_name_ptrs: Vec<*const c_char> = header_names.iter().map(|h| h.as_ptr()).collect();
    let header_source_ptrs: Vec<*const c_char> =
        header_sources.iter().map(|h| h.as_ptr()).collect();
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
            header_sources.len() as c_int,
            header_source_ptrs.as_ptr(),
            header_name_ptrs.as_ptr(),
        );
        if status != nvrtc::nvrtcResult::NVRTC_SUCCESS {
            return Err(fail(format!("nvrtcCreateProgram: {status:?}")));
        }
        let compiled =
            nvrtc::nvrtcCompileProgram(program, option_ptrs.len() as c_int, option_ptrs.as_ptr());
        let log = program_log(program);
        let binaries = if compiled == nvrtc::nvrtcResult::NVRTC_SUCCESS {
            program_cubin(program).and_then(|cubin| Ok((cubin, program_ptx(program)?)))
        } else {
            Err(format!("{compiled:?}"))
        };
        nvrtc::nvrtcDestroyProgram(&mut program);
        let (cubin, ptx) = binaries.map_err(|status| fail(format!("{status}\n{log}")))?;
        let report = parse_ptxas_log(&log);
        check_entry_points(variant, &report).map_err(fail)?;
        Ok(CompiledKernel {
            label,
            arch,
            cubin,
            ptx,
            log,
            report,
        })
    }
}

/// Every entry point the variant lists is in ptxas' report.
fn check_entry_points(variant: &KernelVariant, report: &[PtxasReport]) -> Result<(), String> {
    match variant
        .entry_points
        .iter()
        .find(|entry| !report.iter().any(|r| &r.kernel == *entry))
    {
        Some(entry) => Err(format!(
            "entry point '{entry}' not exported (ptxas reported: {})",
            report
                .iter()
                .map(|r| r.kernel.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )),
        None => Ok(()),
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

/// # Safety
/// `program` must be a live, successfully compiled NVRTC program.
unsafe fn program_ptx(program: nvrtc::nvrtcProgram) -> Result<String, String> {
    let mut size = 0usize;
    let status = nvrtc::nvrtcGetPTXSize(program, &mut size);
    if status != nvrtc::nvrtcResult::NVRTC_SUCCESS || size == 0 {
        return Err(format!("no PTX ({status:?})"));
    }
    let mut ptx = vec![0u8; size];
    let status = nvrtc::nvrtcGetPTX(program, ptx.as_mut_ptr().cast());
    if status != nvrtc::nvrtcResult::NVRTC_SUCCESS {
        return Err(format!("nvrtcGetPTX: {status:?}"));
    }
    let end = ptx.iter().position(|&b| b == 0).unwrap_or(ptx.len());
    String::from_utf8(ptx[..end].to_vec()).map_err(|_| "PTX is not UTF-8".to_string())
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

/// The on-disk compile cache (see the module docs).
mod disk {
    use super::*;
    use std::io::Write;

    const MAGIC: &[u8] = b"linattn-nvrtc-cache-1\n";

    fn dir() -> Option<PathBuf> {
        if std::env::var("LINATTN_NVRTC_CACHE").as_deref() == Ok("0") {
            return None;
        }
        if let Some(dir) = std::env::var_os("LINATTN_CACHE_DIR") {
            return Some(PathBuf::from(dir));
        }
        let exe = std::env::current_exe().ok()?;
        let target = exe
            .ancestors()
            .find(|a| a.file_name().is_some_and(|n| n == "target"));
        Some(match target {
            Some(t) => t.join("linattn-nvrtc-cache"),
            None => std::env::temp_dir().join("linattn-nvrtc-cache"),
        })
    }

    /// 128-bit FNV-1a of everything that determines NVRTC's output.
    fn key(variant: &KernelVariant, arch: Arch) -> String {
        let version = nvrtc_version().map_or((0, 0), |v| v);
        let headers: String = header_texts(variant)
            .into_iter()
            .map(|(name, text)| format!("{name}\0{text}\0"))
            .collect();
        let text = format!(
            "{}\0{headers}{}\0{:?}",
            program_text(variant),
            nvrtc_options(variant, arch).join("\0"),
            version
        );
        let fnv = |seed: u64| {
            text.bytes().fold(seed, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
            })
        };
        format!(
            "{}-{arch}-{:016x}{:016x}",
            variant.source_name.trim_end_matches(".cu"),
            fnv(0xcbf2_9ce4_8422_2325),
            fnv(0x6c62_272e_07bb_0142)
        )
    }

    fn path(variant: &KernelVariant, arch: Arch) -> Option<PathBuf> {
        Some(dir()?.join(key(variant, arch)))
    }

    pub(super) fn load(variant: &KernelVariant, arch: Arch) -> Option<CompiledKernel> {
        let bytes = std::fs::read(path(variant, arch)?).ok()?;
        let mut rest = bytes.strip_prefix(MAGIC)?;
        let mut field = || -> Option<Vec<u8>> {
            let len = u64::from_le_bytes(rest.get(..8)?.try_into().ok()?) as usize;
            let value = rest.get(8..8 + len)?.to_vec();
            rest = &rest[8 + len..];
            Some(value)
        };
        let log = String::from_utf8(field()?).ok()?;
        let ptx = String::from_utf8(field()?).ok()?;
        let cubin = field()?;
        let report = parse_ptxas_log(&log);
        check_entry_points(variant, &report).ok()?;
        Some(CompiledKernel {
            label: variant.label(),
            arch,
            cubin,
            ptx,
            log,
            report,
        })
    }

    /// Best effort: a cache that cannot be written only costs the next compile.
    pub(super) fn store(variant: &KernelVariant, arch: Arch, compiled: &CompiledKernel) {
        let Some(path) = path(variant, arch) else {
            return;
        };
        let write = || -> std::io::Result<()> {
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)?;
            }
            let tmp = path.with_extension(format!("tmp{}", std::process::id()));
            let mut file = std::fs::File::create(&tmp)?;
            file.write_all(MAGIC)?;
            for field in [
                compiled.log.as_bytes(),
                compiled.ptx.as_bytes(),
                &compiled.cubin,
            ] {
                file.write_all(&(field.len() as u64).to_le_bytes())?;
                file.write_all(field)?;
            }
            file.sync_all()?;
            std::fs::rename(&tmp, &path)
        };
        let _ = write();
    }
}
