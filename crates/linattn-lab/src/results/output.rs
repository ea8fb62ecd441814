//! Reading and writing results files: validation on load, atomic writes, where output goes
//! (the checkout's bench-results/, device directory names).

use linattn_core::AttnError;
use serde::Serialize;
use std::fs;
use std::path::{Path, PathBuf};

use super::schema::{ResultsFile, OLDEST_SCHEMA_VERSION, SCHEMA_VERSION};

impl ResultsFile {
    /// Reads and validates a results file; every failure is a `BadFile` naming the path.
    pub fn load(path: &Path) -> Result<ResultsFile, AttnError> {
        let bad = |reason: String| AttnError::BadFile {
            path: path.display().to_string(),
            reason,
        };
        let text = fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
        let file: ResultsFile =
            serde_json::from_str(&text).map_err(|e| bad(format!("not a results file: {e}")))?;
        if !(OLDEST_SCHEMA_VERSION..=SCHEMA_VERSION).contains(&file.schema_version) {
            return Err(bad(format!(
                "schema_version {} (this linattn reads {OLDEST_SCHEMA_VERSION} to \
                 {SCHEMA_VERSION})",
                file.schema_version
            )));
        }
        Ok(file)
    }
}

/// Refuses an output path whose directory does not exist (or that names no file) before a
/// long run, rather than after it.
pub fn check_writable(path: &Path) -> Result<(), AttnError> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
    if dir.is_some_and(|d| !d.is_dir()) || path.file_name().is_none() {
        return Err(AttnError::InvalidArgument(format!(
            "{}: the directory does not exist or no file is named",
            path.display()
        )));
    }
    Ok(())
}

/// Makes sure `path` can be written before a long run produces it: creates its directory
/// and writes (then removes) a probe file there. Errors name the path and the reason.
pub(crate) fn prepare_output_file(path: &Path) -> Result<(), AttnError> {
    if path.file_name().is_none() || path.is_dir() {
        return Err(AttnError::InvalidArgument(format!(
            "{}: names a directory, not a file",
            path.display()
        )));
    }
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    prepare_output_dir(dir)
}

/// Creates `dir` (and its parents) and checks that a file can be written in it.
pub(crate) fn prepare_output_dir(dir: &Path) -> Result<(), AttnError> {
    let unwritable = |e: std::io::Error| {
        AttnError::InvalidArgument(format!("{}: cannot write there: {e}", dir.display()))
    };
    std::fs::create_dir_all(dir).map_err(unwritable)?;
    let probe = dir.join(format!(".linattn-write-probe-{}", std::process::id()));
    std::fs::write(&probe, b"").map_err(unwritable)?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// Serializes `value` as pretty JSON and writes it atomically: into a temporary file in the
/// target's directory, flushed and fsynced, then renamed over the target. A reader (or a
/// crash) sees the old file or the new one, never half of one; on any failure the target
/// is untouched and the temporary file is removed.
pub fn write_json_atomic<T: Serialize>(path: &Path, value: &T) -> Result<(), AttnError> {
    // Serialize first: a serialization error must not even create a file.
    let mut text = serde_json::to_string_pretty(value)
        .map_err(|e| AttnError::State(format!("cannot serialize results: {e}")))?;
    text.push('\n');
    write_bytes_atomic(path, text.as_bytes())
}

/// Moved to linattn-core, where decode states are saved with it too.
pub use linattn_core::write_bytes_atomic;

/// The nearest directory at or above the working directory holding both `bench-results/`
/// and a `Cargo.toml`: the linattn checkout.
pub(crate) fn checkout_root() -> Option<PathBuf> {
    let cwd = std::env::current_dir().ok()?;
    cwd.ancestors()
        .find(|d| d.join("bench-results").is_dir() && d.join("Cargo.toml").is_file())
        .map(Path::to_path_buf)
}

/// Lower-case letters, digits and '-' only: a device name usable as a directory.
pub fn slug(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') && !out.is_empty() {
            out.push('-');
        }
    }
    let trimmed = out.trim_end_matches('-').to_string();
    if trimmed.is_empty() {
        "unknown-device".into()
    } else {
        trimmed
    }
}

#[cfg(test)]
mod tests {
    use super::slug;

    #[test]
    fn slugs_are_path_safe() {
        assert_eq!(slug("NVIDIA H100 80GB HBM3"), "nvidia-h100-80gb-hbm3");
        assert_eq!(slug("  AMD EPYC(tm) 7B13 "), "amd-epyc-tm-7b13");
        assert_eq!(slug("///"), "unknown-device");
    }
}
