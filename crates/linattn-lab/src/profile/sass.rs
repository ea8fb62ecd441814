//! What ptxas makes of the kernels: per CUDA source line (`linattn profile --lines`), the
//! SASS instructions of the kernel's `-lineinfo` cubin (`nvdisasm -g`) beside the PTX the
//! simulator counted there, which shows where the model's PTX count and the hardware's
//! instruction stream part (`ex2.approx.f32`: one PTX instruction, four SASS); per launch
//! (`--sass`, and with `--lines`), its executed SASS estimated per PTX line
//! ([`super::sass_cost`]), from ptxas's own line table of the module's PTX (`ptxas
//! -lineinfo`, `nvdisasm -gp`).

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex};

use linattn_cuda::executor::sim::LaunchRecord;

use linattn_cuda::runtime::{compile, Arch};

use crate::kernels::all_variants;
use crate::results::profiles::ProfileRecord;

use super::sass_text::{per_line, VariantSass};

/// The `nvdisasm` to use: `LINATTN_NVDISASM`, else one on `PATH`.
fn nvdisasm() -> PathBuf {
    std::env::var_os("LINATTN_NVDISASM").map_or_else(|| PathBuf::from("nvdisasm"), PathBuf::from)
}

/// The `ptxas` to use: `LINATTN_PTXAS`, else one on `PATH`.
fn ptxas() -> PathBuf {
    std::env::var_os("LINATTN_PTXAS").map_or_else(|| PathBuf::from("ptxas"), PathBuf::from)
}

/// What ptxas made of a module: SASS per PTX line, and the CUDA line of each PTX line.
struct ModuleSass {
    sass: VariantSass,
    source_lines: HashMap<u32, (String, u32)>,
}

/// Each module assembled so far, by a hash of its text and the arch.
static TABLES: Mutex<BTreeMap<u64, Arc<ModuleSass>>> = Mutex::new(BTreeMap::new());
/// Why an estimate could not be made, the first time it failed (the profile goes on).
static UNAVAILABLE: Mutex<Option<String>> = Mutex::new(None);

/// A launch's executed SASS warp instructions, estimated: in all, and per CUDA source line
/// (its `-lineinfo` compile's `.loc`; empty for a plain compile).
pub(super) struct LaunchSass {
    pub total: f64,
    pub by_source_line: HashMap<(String, u32), f64>,
}

/// The launch's executed SASS, estimated from its warp instructions per PTX line
/// ([`LaunchRecord::ptx_lines`]; None without them) and the SASS ptxas makes of its module
/// for `arch` (`sm_90`) ([`super::sass_cost`]). None, with the reason kept for
/// [`unavailable`], when the tools cannot run.
pub(super) fn launch_estimate(launch: &LaunchRecord, arch: &str) -> Option<LaunchSass> {
    let counted = launch.ptx_lines.as_ref()?;
    let key = {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (arch, &*counted.ptx).hash(&mut h);
        h.finish()
    };
    let unavailable = |why: String| {
        UNAVAILABLE
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert(why);
    };
    let module = {
        let mut tables = TABLES.lock().unwrap_or_else(|e| e.into_inner());
        match tables.get(&key) {
            Some(t) => t.clone(),
            None => match ptx_line_sass(&counted.ptx, arch) {
                Ok(sass) => {
                    let source_lines = super::sass_cost::source_line_of_ptx_lines(&counted.ptx);
                    let module = Arc::new(ModuleSass { sass, source_lines });
                    tables.entry(key).or_insert(module).clone()
                }
                Err(why) => {
                    unavailable(why);
                    return None;
                }
            },
        }
    };
    let Some(kernel) = module.sass.get(&launch.entry) else {
        unavailable(format!("nvdisasm shows no {}", launch.entry));
        return None;
    };
    let per_line =
        super::sass_cost::per_ptx_line(&counted.lines, &counted.ptx, &launch.entry, kernel);
    // Per CUDA line where the PTX has them (a line before any `.loc`: under no line, as
    // `SourceLines::of` counts it).
    let mut by_source_line: HashMap<(String, u32), f64> = HashMap::new();
    if !module.source_lines.is_empty() {
        for (line, sass) in &per_line {
            let at = module.source_lines.get(line).cloned().unwrap_or_default();
            *by_source_line.entry(at).or_default() += sass;
        }
    }
    Some(LaunchSass {
        total: per_line.values().sum(),
        by_source_line,
    })
}

/// Why some launch had no estimate (the first reason), if one had none.
pub(super) fn unavailable() -> Option<String> {
    UNAVAILABLE
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
}

/// Per kernel of `ptx`, assembled by ptxas for `arch` (`sm_90`) with `-lineinfo`: SASS
/// instructions per PTX line (file `linattn_cuda::executor::sim::PTX_TEXT`, as `nvdisasm -gp` names it).
fn ptx_line_sass(ptx: &str, arch: &str) -> Result<VariantSass, String> {
    let dir = tempfile::tempdir().map_err(|e| format!("a temporary directory: {e}"))?;
    let (source, cubin) = (dir.path().join("k.ptx"), dir.path().join("k.cubin"));
    std::fs::write(&source, ptx.trim_end_matches('\0'))
        .map_err(|e| format!("{}: {e}", source.display()))?;
    run(Command::new(ptxas())
        .arg(format!("-arch={arch}"))
        .arg("-lineinfo")
        .arg("-o")
        .arg(&cubin)
        .arg(&source))?;
    let sass = run(Command::new(nvdisasm()).arg("-gp").arg(&cubin))?;
    Ok(per_line(&sass))
}

/// Runs a CUDA tool: its stdout, or why not (naming the variable that points at it).
fn run(cmd: &mut Command) -> Result<String, String> {
    let tool = cmd.get_program().to_string_lossy().into_owned();
    let out = cmd.output().map_err(|e| {
        format!("{tool}: {e} (set LINATTN_PTXAS / LINATTN_NVDISASM; .ci/run installs the pinned wheels)")
    })?;
    if !out.status.success() {
        return Err(format!(
            "{tool}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Fills each kernel's lines' `sass_static` from the `-lineinfo` cubins of `arch`; the reason
/// when it cannot (no nvdisasm, a variant that does not compile): the profile is complete
/// without it.
pub(super) fn annotate(profiles: &mut [ProfileRecord], arch: Arch) -> Result<(), String> {
    let mut by_variant: HashMap<String, VariantSass> = HashMap::new();
    for p in profiles.iter_mut() {
        for k in p.kernels.iter_mut().filter(|k| !k.source_lines.is_empty()) {
            if !by_variant.contains_key(&k.variant) {
                let sass = variant_sass(&k.variant, arch)?;
                by_variant.insert(k.variant.clone(), sass);
            }
            let Some(lines) = by_variant[&k.variant].get(&k.kernel) else {
                return Err(format!("nvdisasm shows no {} in {}", k.kernel, k.variant));
            };
            for l in &mut k.source_lines {
                let sass = lines.get(&(l.file.clone(), l.line));
                l.sass_static = Some(sass.map_or(0, |c| c.total()));
            }
        }
    }
    Ok(())
}

/// Per kernel that has one: the PTX warp instructions per token beside the estimated
/// executed SASS (`--sass`).
pub(super) fn render_estimates(profiles: &[ProfileRecord]) -> String {
    let mut b = tabled::builder::Builder::new();
    b.push_record([
        "backend",
        "phase",
        "kernel",
        "PTX warp instr/token",
        "SASS, estimated",
        "SASS / PTX",
    ]);
    let mut any = false;
    for p in profiles {
        for k in &p.kernels {
            let Some(est) = k.sass_per_token_estimate else {
                continue;
            };
            any = true;
            let ptx = k.per_token.warp_instructions;
            b.push_record([
                p.backend.clone(),
                k.phase.clone(),
                k.kernel.clone(),
                format!("{ptx:.2}"),
                format!("{est:.2}"),
                format!("{:.3}", est / ptx.max(f64::MIN_POSITIVE)),
            ]);
        }
    }
    if !any {
        return String::new();
    }
    let mut t = b.build();
    t.with(tabled::settings::Style::sharp());
    format!(
        "executed SASS per token, estimated from the PTX executed per PTX line and the SASS \
         ptxas makes of each (an estimate, not a count):\n{t}\n"
    )
}

/// Per kernel of `label`'s `-lineinfo` compile for `arch`: SASS instructions per (file name,
/// line).
fn variant_sass(label: &str, arch: Arch) -> Result<VariantSass, String> {
    let variant = all_variants()
        .into_iter()
        .find(|v| v.label() == label)
        .ok_or_else(|| format!("no kernel variant {label}"))?
        .with_line_info();
    let compiled = compile(&variant, arch).map_err(|e| e.to_string())?;
    let dir = tempfile::tempdir().map_err(|e| format!("a temporary directory: {e}"))?;
    let cubin = dir.path().join("kernels.cubin");
    std::fs::write(&cubin, &compiled.cubin).map_err(|e| format!("{}: {e}", cubin.display()))?;
    let sass =
        run(Command::new(nvdisasm()).arg("-g").arg(&cubin)).map_err(|e| format!("{label}: {e}"))?;
    Ok(per_line(&sass))
}

#[cfg(test)]
mod tests {
    use super::all_variants;

    #[test]
    fn the_files_of_every_sim_backend_are_found() {
        let variants = all_variants();
        for name in [
            "prelude.cuh",
            "softmax.cu",
            "causal_chunked.cu",
            "causal_chunked_states.cuh",
            "noncausal.cu",
        ] {
            assert!(
                linattn_cuda::kernel_file_text(name, &variants).is_some(),
                "{name}"
            );
        }
        assert!(linattn_cuda::kernel_file_text("nope.cu", &variants).is_none());
    }
}
