//! Atomic file writes: a temporary file beside the target, synced, then renamed onto it.

use crate::error::AttnError;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Writes `bytes` to `path` so that a reader (or a crash) sees the old file or the new one,
/// never half of one; on any failure the target is untouched and the temporary file removed.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

pub fn write_bytes_atomic(path: &Path, bytes: &[u8]) -> Result<(), AttnError> {
    let io_err =
        |what: &str, e: std::io::Error| AttnError::Io(format!("{what} {}: {e}", path.display()));
    let file_name = path
        .file_name()
        .ok_or_else(|| AttnError::InvalidArgument(format!("{} names no file", path.display())))?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let temp = dir.join(format!(
        ".{}.tmp-{}-{}",
        file_name.to_string_lossy(),
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let written = (|| -> std::io::Result<()> {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        Ok(())
    })();
    if let Err(e) = written {
        let _ = fs::remove_file(&temp);
        return Err(io_err("cannot write a temporary file beside", e));
    }
    if let Err(e) = fs::rename(&temp, path) {
        let _ = fs::remove_file(&temp);
        return Err(io_err("cannot rename a temporary file onto", e));
    }
    // Make the rename itself durable; not every filesystem allows fsync on a directory.
    if let Ok(d) = fs::File::open(&dir) {
        let _ = d.sync_all();
    }
    Ok(())
}
