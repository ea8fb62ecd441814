//! Entry points for fuzz targets (`fuzz/`): each takes arbitrary bytes, runs one parser the
//! binary uses on untrusted input, and must return (an error is fine) without panicking.

use crate::bench::{looks_like_json, parse_grid_text, resolve_grid_with, BenchArgs};

/// The .npy reader on a file's bytes.
pub fn npy_bytes(bytes: &[u8]) {
    let _ = crate::npy::parse_npy(bytes);
}

/// The `linattn bench --grid FILE` path on a file's bytes, as far as the sweep's problems:
/// the text read as a file named `.toml` would be (JSON when it opens with `{`) and as one
/// named `.json`, resolved with no flags given, every problem built and validated.
pub fn grid_text(bytes: &[u8]) {
    // `read_to_string` refuses a file that is not UTF-8 before any parsing.
    let Ok(text) = std::str::from_utf8(bytes) else {
        return;
    };
    let sniffed = looks_like_json(text);
    let readings: &[bool] = if sniffed { &[true] } else { &[false, true] };
    for &is_json in readings {
        let Ok(file) = parse_grid_text(text, is_json) else {
            continue;
        };
        let Ok(grid) = resolve_grid_with(&BenchArgs::default(), file) else {
            continue;
        };
        let _ = grid.record();
        for problem in grid.problems() {
            let _ = problem.validate();
        }
    }
}
