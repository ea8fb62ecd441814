//! `.npy` input and output for `linattn attend`: 4-D `[B, H, N, D]` arrays of little-endian
//! `float32` (`'<f4'`) or `float64` (`'<f8'`), format versions 1.0, 2.0 and 3.0. Fortran-order
//! arrays are read and converted to C order (what the backends take).
//!
//! The header dict is parsed by `py_literal` (a full Python-literal parser, the one npyz
//! uses); the magic, the version, the header length, the dtype, the rank, the alignment of
//! the data (its offset and length whole elements) and the data length are checked here so
//! that every refusal is an [`AttnError::BadFile`] saying exactly what is wrong with which
//! file. Files are written by hand (a version 1.0 header, or 2.0 when the header is over 64 KiB), atomically.

use crate::results::write_bytes_atomic;
use linattn_core::{AttnError, Tensor};
use py_literal::Value;
use std::fmt;
use std::fs;
use std::path::Path;

/// The `.npy` magic string that opens every file.
const MAGIC: &[u8] = b"\x93NUMPY";

/// Element types linattn reads and writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NpyDtype {
    F32,
    F64,
}

impl NpyDtype {
    /// The numpy type string (`descr`).
    pub fn descr(self) -> &'static str {
        match self {
            NpyDtype::F32 => "<f4",
            NpyDtype::F64 => "<f8",
        }
    }
    fn item_bytes(self) -> usize {
        match self {
            NpyDtype::F32 => 4,
            NpyDtype::F64 => 8,
        }
    }
}

impl fmt::Display for NpyDtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NpyDtype::F32 => "float32 '<f4'",
            NpyDtype::F64 => "float64 '<f8'",
        })
    }
}

/// A 4-D array read from a `.npy` file: the data widened to f64, plus the file's dtype so
/// that results can be written back in the same precision.
#[derive(Debug, Clone, PartialEq)]
pub struct NpyArray {
    pub tensor: Tensor,
    pub dtype: NpyDtype,
}

fn bad(path: &Path, reason: impl Into<String>) -> AttnError {
    AttnError::BadFile {
        path: path.display().to_string(),
        reason: reason.into(),
    }
}

/// Reads a 4-D float32/float64 `.npy` file.
pub fn read_npy(path: &Path) -> Result<NpyArray, AttnError> {
    let bytes = fs::read(path).map_err(|e| bad(path, format!("cannot read: {e}")))?;
    parse_npy(&bytes).map_err(|reason| bad(path, reason))
}

/// Parses the bytes of a `.npy` file; the error is the reason, without the path.
pub(crate) fn parse_npy(bytes: &[u8]) -> Result<NpyArray, String> {
    if !bytes.starts_with(MAGIC) {
        return Err("not a .npy file (it does not start with the \\x93NUMPY magic)".into());
    }
    let (major, minor) = match bytes.get(MAGIC.len()..MAGIC.len() + 2) {
        Some(&[major, minor]) => (major, minor),
        _ => return Err("truncated header (no format version after the magic)".into()),
    };
    if !(1..=3).contains(&major) {
        return Err(format!(
            "unsupported .npy format version {major}.{minor} (expected 1.0, 2.0 or 3.0)"
        ));
    }
    // Version 1.0 stores the header length in a u16, 2.0 and 3.0 in a u32. The length is
    // checked against the file before anything is read, so a huge one allocates nothing.
    let prefix = if major == 1 { 10 } else { 12 };
    let header_len = match bytes.get(MAGIC.len() + 2..prefix) {
        Some(&[a, b]) => usize::from(u16::from_le_bytes([a, b])),
        Some(&[a, b, c, d]) => u32::from_le_bytes([a, b, c, d]) as usize,
        _ => return Err("truncated header (no header length after the version)".into()),
    };
    let (header, data) = match bytes[prefix..].split_at_checked(header_len) {
        Some(split) => split,
        None => {
            return Err(format!(
                "truncated header: {header_len} bytes announced, the file holds {}",
                bytes.len() - prefix
            ))
        }
    };
    let header = parse_header(header, major)?;

    let dtype = match header.descr {
        Value::String(ref s) if s == "<f4" => NpyDtype::F32,
        Value::String(ref s) if s == "<f8" => NpyDtype::F64,
        Value::String(other) => {
            return Err(format!(
                "unsupported dtype '{other}' (expected little-endian float32 '<f4' or \
                 float64 '<f8')"
            ))
        }
        other => {
            return Err(format!(
                "unsupported structured dtype {other:?} (expected '<f4' or '<f8')"
            ))
        }
    };
    let dims: [usize; 4] = match header.shape[..] {
        [b, h, n, d] => [b, h, n, d],
        _ => {
            return Err(format!(
                "expected a 4-D array [B, H, N, D], found {}-D shape {:?}",
                header.shape.len(),
                header.shape
            ))
        }
    };
    let elements = dims
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| format!("shape {dims:?} overflows"))?;
    let expected_bytes = elements
        .checked_mul(dtype.item_bytes())
        .ok_or_else(|| format!("shape {dims:?} overflows"))?;
    // numpy pads the header so the data starts 16- or 64-aligned; a file whose data is not
    // whole elements from where they start was not written by it, and is refused rather
    // than read shifted.
    let item = dtype.item_bytes();
    let offset = prefix + header_len;
    if offset % item != 0 {
        return Err(format!(
            "misaligned data: it starts at byte {offset}, not a multiple of the {item}-byte \
             element size of {}",
            dtype.descr()
        ));
    }
    if data.len() % item != 0 {
        return Err(format!(
            "data of {} bytes is not a whole number of {item}-byte {} elements \
             (truncated or misaligned; shape {dims:?} needs {expected_bytes} bytes)",
            data.len(),
            dtype.descr()
        ));
    }
    if data.len() < expected_bytes {
        return Err(format!(
            "truncated data: shape {dims:?} of {} needs {expected_bytes} bytes, the file holds {}",
            dtype.descr(),
            data.len()
        ));
    }
    if data.len() > expected_bytes {
        return Err(format!(
            "{} unexpected bytes after the {expected_bytes} bytes of shape {dims:?}",
            data.len() - expected_bytes
        ));
    }
    let values: Vec<f64> = match dtype {
        NpyDtype::F32 => data
            .chunks_exact(4)
            .map(|c| f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]])))
            .collect(),
        NpyDtype::F64 => data
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
            .collect(),
    };
    let values = if header.fortran_order {
        fortran_to_c(dims, &values)
    } else {
        values
    };
    let tensor = Tensor::from_vec(dims, values).map_err(|e| e.to_string())?;
    Ok(NpyArray { tensor, dtype })
}

/// The values of a Fortran-order (first index fastest) array of `dims`, in C order (last
/// index fastest).
fn fortran_to_c(dims: [usize; 4], fortran: &[f64]) -> Vec<f64> {
    let [b, h, n, d] = dims;
    let mut c_order = vec![0.0; fortran.len()];
    for (at, &x) in fortran.iter().enumerate() {
        let (i0, rest) = (at % b, at / b);
        let (i1, rest) = (rest % h, rest / h);
        let (i2, i3) = (rest % n, rest / n);
        c_order[((i0 * h + i1) * n + i2) * d + i3] = x;
    }
    c_order
}

/// Deepest bracket nesting accepted in a header (see [`parse_header`]).
const MAX_HEADER_DEPTH: usize = 4;

/// The three keys of a `.npy` header dict.
struct Header {
    descr: Value,
    fortran_order: bool,
    shape: Vec<usize>,
}

/// Parses the header dict (a Python literal: latin-1 text before version 3.0, UTF-8 from
/// it on) with `py_literal`, the parser npyz uses, keeping every dimension a checked usize.
fn parse_header(text: &[u8], major: u8) -> Result<Header, String> {
    let malformed = |why: String| format!("malformed .npy header: {why}");
    let text: String = if major >= 3 {
        std::str::from_utf8(text)
            .map_err(|_| malformed("not UTF-8".into()))?
            .to_owned()
    } else {
        text.iter().map(|&b| char::from(b)).collect()
    };
    // py_literal's PEG parser backtracks exponentially in the nesting depth (each unclosed
    // brace about triples the time: 8 took 9 s in the fuzz build, the fuzzer's 50 would never
    // finish): refuse deep nesting before parsing. A float array's
    // header nests 2 deep (dict, shape tuple); a structured dtype 3 or 4.
    let mut depth = 0usize;
    for c in text.chars() {
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        if depth > MAX_HEADER_DEPTH {
            return Err(malformed(format!(
                "brackets nested more than {MAX_HEADER_DEPTH} deep"
            )));
        }
    }
    let literal: Value = text
        .strip_suffix('\n')
        .unwrap_or(&text)
        .parse()
        .map_err(|e| malformed(format!("not a Python literal: {e}")))?;
    let Value::Dict(entries) = literal else {
        return Err(malformed("expected a Python dict literal".into()));
    };
    let take = |key: &str| {
        entries
            .iter()
            .position(|(k, _)| matches!(k, Value::String(s) if s == key))
            .map(|i| entries[i].1.clone())
            .ok_or_else(|| malformed(format!("dict is missing key '{key}'")))
    };
    let descr = take("descr")?;
    let fortran_order = match take("fortran_order")? {
        Value::Boolean(b) => b,
        other => {
            return Err(malformed(format!(
                "'fortran_order' is {other:?}, not a bool"
            )))
        }
    };
    let shape = match take("shape")? {
        Value::Tuple(items) | Value::List(items) => items
            .iter()
            .map(|item| match item {
                Value::Integer(x) => usize::try_from(x)
                    .map_err(|_| format!("dimension {x} is negative or does not fit in memory")),
                other => Err(malformed(format!("dimension {other:?} is not an integer"))),
            })
            .collect::<Result<Vec<_>, _>>()?,
        other => return Err(malformed(format!("'shape' is {other:?}, not a tuple"))),
    };
    Ok(Header {
        descr,
        fortran_order,
        shape,
    })
}

/// The bytes of a `.npy` file holding `tensor` as `dtype` (f64 values narrowed for f32).
fn encode_npy(tensor: &Tensor, dtype: NpyDtype) -> Vec<u8> {
    let [b, h, n, d] = tensor.dims();
    let dict = format!(
        "{{'descr': '{}', 'fortran_order': False, 'shape': ({b}, {h}, {n}, {d}), }}",
        dtype.descr()
    );
    // Version 1.0 stores the header length in a u16; larger headers need version 2.0.
    // The header (with its newline) is padded with spaces so the data starts 64-aligned.
    let (version, prefix_len) = if dict.len() + 1 + 10 <= u16::MAX as usize {
        (1u8, 10usize)
    } else {
        (2u8, 12usize)
    };
    let unpadded = prefix_len + dict.len() + 1;
    let padding = (64 - unpadded % 64) % 64;
    let header_len = dict.len() + padding + 1;

    let mut out = Vec::with_capacity(prefix_len + header_len + tensor.len() * 8);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[version, 0]);
    if version == 1 {
        // Fits: checked against u16::MAX above.
        out.extend_from_slice(&(header_len as u16).to_le_bytes());
    } else {
        out.extend_from_slice(&(header_len as u32).to_le_bytes());
    }
    out.extend_from_slice(dict.as_bytes());
    out.extend(std::iter::repeat_n(b' ', padding));
    out.push(b'\n');
    match dtype {
        NpyDtype::F32 => {
            for &x in tensor.data() {
                out.extend_from_slice(&(x as f32).to_le_bytes());
            }
        }
        NpyDtype::F64 => {
            for &x in tensor.data() {
                out.extend_from_slice(&x.to_le_bytes());
            }
        }
    }
    out
}

/// Writes `tensor` to `path` as a `.npy` file of `dtype`, atomically.
pub fn write_npy(path: &Path, tensor: &Tensor, dtype: NpyDtype) -> Result<(), AttnError> {
    write_bytes_atomic(path, &encode_npy(tensor, dtype))
}

#[cfg(test)]
mod tests;
