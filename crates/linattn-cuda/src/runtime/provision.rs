//! Installing the pinned NVRTC wheel once into the user cache, for the `linattn` binary.
//!
//! Only the binary's command entry calls [`provision_nvrtc`] (tests and library users never
//! download anything); [`super::probe::provisioned_lib_dir`], one of the probe's search
//! directories, is where NVRTC is then found.
//!
//! * Cache: `$XDG_CACHE_HOME/linattn/nvrtc-13.0.88`, else `$HOME/.cache/linattn/nvrtc-13.0.88`.
//! * `python3 -m pip install --no-deps --target <temp dir beside it>`, then one rename into
//!   place: the cache is either absent or complete. Two processes racing both install; the
//!   first rename wins and the other drops its copy.
//! * Off with `LINATTN_NO_PROVISION=1`, or when `LINATTN_NVRTC_DIR` is set (the user chose).
//!   `LINATTN_PYTHON` replaces `python3` (tests point it at a fake pip).

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use super::probe::{nvrtc_locatable, provisioned_dir, CACHE_NAME, WHEEL_LIB};

/// The wheel the kernels are compiled with: the GPU machines' CUDA 13.0 drivers reject PTX
/// from a newer NVRTC.
pub const NVRTC_WHEEL: &str = "nvidia-cuda-nvrtc==13.0.88";

/// What [`provision_nvrtc`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Provision {
    /// NVRTC is already found: nothing to do.
    Present,
    /// Turned off (`LINATTN_NO_PROVISION`, or `LINATTN_NVRTC_DIR` set): nothing was tried.
    Off,
    /// The wheel is now in this directory.
    Installed(PathBuf),
    /// Installing failed for this one-line reason; the run goes on without NVRTC.
    Failed(String),
}

/// How to install, from the environment.
#[derive(Debug, Clone)]
struct Plan {
    /// The python interpreter that runs pip.
    python: OsString,
    /// The final install directory (`.../nvrtc-13.0.88`).
    target: PathBuf,
    /// How the target is shown (`~/...` under `$HOME`).
    shown: String,
}

impl Plan {
    /// The plan for this process's environment; `None` when no cache directory can be named
    /// (neither `XDG_CACHE_HOME` nor `HOME` is set).
    fn from_env() -> Option<Plan> {
        let target = provisioned_dir()?;
        let shown = match std::env::var_os("HOME").filter(|h| !h.is_empty()) {
            Some(home) => match target.strip_prefix(&home) {
                Ok(rest) => format!("~/{}", rest.display()),
                Err(_) => target.display().to_string(),
            },
            None => target.display().to_string(),
        };
        Some(Plan {
            python: std::env::var_os("LINATTN_PYTHON").unwrap_or_else(|| "python3".into()),
            target,
            shown,
        })
    }
}

fn env_flag(name: &str) -> bool {
    std::env::var_os(name).is_some_and(|v| !v.is_empty() && v != "0")
}

/// Makes NVRTC available when it is not, by installing the pinned wheel into the user
/// cache; one line on `out` before and one after. Must run before the first NVRTC probe
/// (its result is cached for the process). Never panics.
pub fn provision_nvrtc(out: &mut dyn Write) -> Provision {
    if env_flag("LINATTN_NO_PROVISION") || std::env::var_os("LINATTN_NVRTC_DIR").is_some() {
        return Provision::Off;
    }
    if nvrtc_locatable() {
        return Provision::Present;
    }
    match Plan::from_env() {
        Some(plan) => install(&plan, out),
        None => {
            let reason = "no cache directory (neither XDG_CACHE_HOME nor HOME is set)";
            let _ = writeln!(out, "{}", unavailable_line(reason));
            Provision::Failed(reason.into())
        }
    }
}

/// The line printed when installing failed.
fn unavailable_line(reason: &str) -> String {
    format!(
        "NVRTC unavailable: could not install {NVRTC_WHEEL} ({reason}); run `just nvrtc` or \
         set LINATTN_NVRTC_DIR"
    )
}

/// Installs the wheel per `plan` (see the module doc), printing the two lines.
fn install(plan: &Plan, out: &mut dyn Write) -> Provision {
    let _ = writeln!(
        out,
        "NVRTC not found: installing the pinned wheel {NVRTC_WHEEL} into {} (once; \
         LINATTN_NO_PROVISION=1 turns this off)",
        plan.shown
    );
    let _ = out.flush();
    let start = Instant::now();
    match install_quietly(plan) {
        Ok(()) => {
            let seconds = start.elapsed().as_secs_f64();
            let _ = writeln!(out, "NVRTC installed in {seconds:.0} s");
            Provision::Installed(plan.target.clone())
        }
        Err(reason) => {
            let _ = writeln!(out, "{}", unavailable_line(&reason));
            Provision::Failed(reason)
        }
    }
}

fn install_quietly(plan: &Plan) -> Result<(), String> {
    if has_library(&plan.target) {
        return Ok(());
    }
    let parent = plan
        .target
        .parent()
        .ok_or_else(|| format!("{} has no parent directory", plan.target.display()))?;
    std::fs::create_dir_all(parent)
        .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
    // Beside the target (same filesystem, so the rename is atomic), unique per process.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let temp = parent.join(format!(
        ".{CACHE_NAME}.partial-{}-{nanos}",
        std::process::id()
    ));
    let result = run_pip(plan, &temp).and_then(|()| move_into_place(&temp, &plan.target));
    // Gone after a successful rename; what a failed pip left otherwise.
    let _ = std::fs::remove_dir_all(&temp);
    result
}

fn has_library(dir: &Path) -> bool {
    dir.join(WHEEL_LIB).join("libnvrtc.so.13").is_file()
}

fn run_pip(plan: &Plan, temp: &Path) -> Result<(), String> {
    let python = Path::new(&plan.python).display().to_string();
    let output = Command::new(&plan.python)
        .args(["-m", "pip", "install", "--quiet", "--no-deps"])
        .args([
            "--disable-pip-version-check",
            "--retries",
            "2",
            "--timeout",
            "30",
        ])
        .arg("--target")
        .arg(temp)
        .arg(NVRTC_WHEEL)
        .output()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => format!("{python} not found"),
            _ => format!("cannot run {python}: {e}"),
        })?;
    if !output.status.success() {
        return Err(pip_failure(&String::from_utf8_lossy(&output.stderr)));
    }
    if !has_library(temp) {
        return Err(format!(
            "pip succeeded but left no {WHEEL_LIB}/libnvrtc.so.13"
        ));
    }
    Ok(())
}

/// A failed pip run's stderr, in a few words: its most telling line, shortened.
fn pip_failure(stderr: &str) -> String {
    let lines: Vec<&str> = stderr
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    if lines.iter().any(|l| l.contains("No module named pip")) {
        return "python has no pip".into();
    }
    let network = [
        "NewConnectionError",
        "Temporary failure in name resolution",
        "Network is unreachable",
        "ConnectTimeout",
        "ReadTimeout",
        "Could not find a version that satisfies",
        "No matching distribution found",
    ];
    let hint = if lines.iter().any(|l| network.iter().any(|n| l.contains(n))) {
        "pip: no network? "
    } else {
        "pip: "
    };
    // pip's last line is usually the conclusion ("ERROR: No matching distribution ...").
    let last = lines
        .last()
        .copied()
        .unwrap_or("exited with an error and said nothing");
    let mut text = format!("{hint}{last}");
    if text.chars().count() > 120 {
        text = text.chars().take(119).collect::<String>() + "…";
    }
    text
}

/// Renames `temp` to `target`; when another process got there first with a complete
/// install, keeps theirs.
fn move_into_place(temp: &Path, target: &Path) -> Result<(), String> {
    match std::fs::rename(temp, target) {
        Ok(()) => Ok(()),
        Err(_) if has_library(target) => Ok(()),
        Err(first) => {
            // A target without the library is what an interrupted manual copy leaves: replace it.
            if target.exists() {
                std::fs::remove_dir_all(target)
                    .map_err(|e| format!("cannot replace {}: {e}", target.display()))?;
            }
            std::fs::rename(temp, target).map_err(|e| {
                format!(
                    "cannot move the install into {}: {e} (first try: {first})",
                    target.display()
                )
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pip_without_network_says_so_in_one_line() {
        let stderr = "WARNING: Retrying (Retry(total=1, ...)) after connection broken by \
                      'NewConnectionError(...: Temporary failure in name resolution)'\n\
                      ERROR: Could not find a version that satisfies the requirement \
                      nvidia-cuda-nvrtc==13.0.88 (from versions: none)\n\
                      ERROR: No matching distribution found for nvidia-cuda-nvrtc==13.0.88\n";
        let reason = pip_failure(stderr);
        assert_eq!(
            reason,
            "pip: no network? ERROR: No matching distribution found for \
             nvidia-cuda-nvrtc==13.0.88"
        );
        assert!(!reason.contains('\n'));
    }

    #[test]
    fn python_without_pip_and_silent_failures_are_named() {
        assert_eq!(
            pip_failure("/usr/bin/python3: No module named pip\n"),
            "python has no pip"
        );
        assert_eq!(
            pip_failure("\n  \n"),
            "pip: exited with an error and said nothing"
        );
        let long = format!("ERROR: {}", "x".repeat(300));
        let reason = pip_failure(&long);
        assert_eq!(reason.chars().count(), 120);
        assert!(reason.ends_with('…'));
    }

    #[test]
    fn unavailable_line_names_the_wheel_and_the_ways_out() {
        let line = unavailable_line("python3 not found");
        assert!(line.starts_with("NVRTC unavailable: could not install nvidia-cuda-nvrtc==13.0.88"));
        assert!(line.contains("(python3 not found)"));
        assert!(line.contains("just nvrtc") && line.contains("LINATTN_NVRTC_DIR"));
    }
}
