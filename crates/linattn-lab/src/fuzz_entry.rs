//! Entry points for fuzz targets (`fuzz/`): each takes arbitrary bytes, runs one parser the
//! binary uses on untrusted input, and must return (an error is fine) without panicking.

/// The .npy reader on a file's bytes.
pub fn npy_bytes(bytes: &[u8]) {
    let _ = crate::npy::parse_npy(bytes);
}
