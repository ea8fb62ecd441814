//! The `.mufu` file of one MUFU table (`exec::mufu_table`): a text header, then the
//! deviations (one int8 per entry) gzipped; a directory of them (`ex2.mufu`, `rsqrt.mufu`,
//! `rcp.mufu`, and `ex2neg.mufu` where captured), and installing it from `LINATTN_MUFU_TABLES`.
//!
//! ```text
//! LINATTN-MUFU 1
//! op=ex2
//! entries=16777216
//! stride=1
//! ex2_grid=24-truncate
//! source=NVIDIA H100 80GB HBM3, driver 580.95.05, 2026-11-26
//! payload_sha256=<64 hex digits of the uncompressed deviations>
//! payload_gzip_bytes=<n>
//!
//! <n bytes of gzip>
//! ```
//!
//! Reading checks everything a damaged or foreign file could get wrong (magic, keys, sizes,
//! the digest) and names the problem; writing goes through a temporary file and a rename.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use flate2::Compression;
use sha2::{Digest, Sha256};

use crate::exec::mufu_table::{self, Ex2Grid, MufuOp, MufuTable, MufuTables};

/// The environment variable naming a directory of tables ([`install_from_env`]).
pub const ENV: &str = "LINATTN_MUFU_TABLES";

const MAGIC: &str = "LINATTN-MUFU 1";
/// A header is a few hundred bytes; more means this is not one.
const MAX_HEADER: usize = 4096;

/// Why a table file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum MufuError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: not a usable MUFU table: {what}")]
    Format { path: PathBuf, what: String },
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn digest(deviations: &[i8]) -> String {
    let bytes: Vec<u8> = deviations.iter().map(|&d| d as u8).collect();
    hex(&Sha256::digest(&bytes))
}

/// Writes `table` to `path` (a temporary file beside it, then renamed).
pub fn write_table(path: &Path, table: &MufuTable) -> Result<(), MufuError> {
    let io = |source| MufuError::Io {
        path: path.to_path_buf(),
        source,
    };
    let payload: Vec<u8> = table.deviations.iter().map(|&d| d as u8).collect();
    let mut gz = GzEncoder::new(Vec::new(), Compression::default());
    gz.write_all(&payload).map_err(io)?;
    let gz = gz.finish().map_err(io)?;
    let source = table.source.replace(['\n', '\r'], " ");
    let header = format!(
        "{MAGIC}\nop={}\nentries={}\nstride={}\nex2_grid={}\nsource={source}\n\
         payload_sha256={}\npayload_gzip_bytes={}\n\n",
        table.op.name(),
        table.deviations.len(),
        table.stride,
        table.grid.name(),
        digest(&table.deviations),
        gz.len()
    );
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(header.as_bytes())?;
        f.write_all(&gz)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io(e)
    })
}

/// Reads and checks the table in `path`.
pub fn read_table(path: &Path) -> Result<MufuTable, MufuError> {
    let bytes = std::fs::read(path).map_err(|source| MufuError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    parse_table(&bytes).map_err(|what| MufuError::Format {
        path: path.to_path_buf(),
        what,
    })
}

/// The table in `bytes`, or what is wrong with them.
pub fn parse_table(bytes: &[u8]) -> Result<MufuTable, String> {
    let end = bytes
        .windows(2)
        .take(MAX_HEADER)
        .position(|w| w == b"\n\n")
        .ok_or("no header (a MUFU table starts with 'LINATTN-MUFU 1' and a blank line)")?;
    let header = std::str::from_utf8(&bytes[..end]).map_err(|_| "header is not UTF-8")?;
    let mut lines = header.lines();
    if lines.next() != Some(MAGIC) {
        return Err(format!("first line is not '{MAGIC}'"));
    }
    let fields: Vec<(&str, &str)> = lines
        .map(|l| {
            l.split_once('=')
                .ok_or(format!("header line '{l}' is not key=value"))
        })
        .collect::<Result<_, _>>()?;
    let field = |key: &str| {
        fields
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| *v)
            .ok_or(format!("header lacks '{key}='"))
    };
    let number = |key: &str| {
        field(key)?
            .parse::<u64>()
            .map_err(|_| format!("'{key}' is not a number"))
    };
    let op = MufuOp::from_name(field("op")?).ok_or_else(|| {
        let known: Vec<&str> = MufuOp::ALL.iter().map(|op| op.name()).collect();
        format!(
            "unknown op '{}' ({})",
            field("op").unwrap_or(""),
            known.join(", ")
        )
    })?;
    let entries = number("entries")?;
    let stride = u32::try_from(number("stride")?).map_err(|_| "stride is out of range")?;
    let grid = Ex2Grid::parse(field("ex2_grid")?).ok_or_else(|| {
        format!(
            "ex2_grid '{}' is not like 24-truncate",
            field("ex2_grid").unwrap_or("")
        )
    })?;
    let sha = field("payload_sha256")?;
    let gz_len = number("payload_gzip_bytes")?;
    let gz = &bytes[end + 2..];
    if gz.len() as u64 != gz_len {
        return Err(format!(
            "payload is {} bytes, the header says {gz_len} (truncated or appended to)",
            gz.len()
        ));
    }
    if entries > u64::from(op.full_entries()) {
        return Err(format!(
            "{entries} entries: more than the {} of a {} table",
            op.full_entries(),
            op.name()
        ));
    }
    let mut payload = Vec::with_capacity(entries as usize);
    GzDecoder::new(gz)
        .take(entries + 1)
        .read_to_end(&mut payload)
        .map_err(|e| format!("payload does not decompress: {e}"))?;
    if payload.len() as u64 != entries {
        return Err(format!(
            "payload holds {} entries, the header says {entries}",
            payload.len()
        ));
    }
    let deviations: Vec<i8> = payload.into_iter().map(|b| b as i8).collect();
    let actual = digest(&deviations);
    if actual != sha {
        return Err(format!(
            "payload sha256 is {actual}, the header says {sha} (corrupted)"
        ));
    }
    let mut table = MufuTable::new(op, stride, deviations)?;
    table.grid = grid;
    table.source = field("source")?.to_string();
    Ok(table)
}

/// The file of `op`'s table in a directory: `DIR/<name>.mufu`.
pub fn table_path(dir: &Path, op: MufuOp) -> PathBuf {
    dir.join(format!("{}.mufu", op.name()))
}

/// `ex2.mufu`, `rsqrt.mufu`, `rcp.mufu` and, if present, `ex2neg.mufu` from `dir`, each
/// checked to hold its op. An `ex2neg.mufu` must carry `ex2.mufu`'s grid (the one both are
/// predicted on); without it, negative ex2 inputs are predicted as before it existed.
pub fn load_dir(dir: &Path) -> Result<MufuTables, MufuError> {
    let load = |op: MufuOp| {
        let path = table_path(dir, op);
        let table = read_table(&path)?;
        if table.op != op {
            return Err(MufuError::Format {
                path: path.clone(),
                what: format!("holds the {} table, not {}", table.op.name(), op.name()),
            });
        }
        Ok(table)
    };
    let ex2 = load(MufuOp::Ex2)?;
    let rsqrt = load(MufuOp::Rsqrt)?;
    let rcp = load(MufuOp::Rcp)?;
    let negative_path = table_path(dir, MufuOp::Ex2Negative);
    let ex2_negative = match std::fs::symlink_metadata(&negative_path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        _ => Some(load(MufuOp::Ex2Negative)?),
    };
    if let Some(negative) = &ex2_negative {
        if negative.grid != ex2.grid {
            return Err(MufuError::Format {
                path: negative_path,
                what: format!(
                    "ex2_grid {} differs from ex2.mufu's {} (both are predicted on one grid)",
                    negative.grid.name(),
                    ex2.grid.name()
                ),
            });
        }
    }
    Ok(MufuTables {
        ex2,
        rsqrt,
        rcp,
        ex2_negative,
    })
}

/// Installs the tables in the directory [`ENV`] names, if it is set; Ok(false) if not.
pub fn install_from_env() -> Result<bool, String> {
    let Some(dir) = std::env::var_os(ENV) else {
        return Ok(false);
    };
    let tables = load_dir(Path::new(&dir)).map_err(|e| format!("{ENV}: {e}"))?;
    mufu_table::install(tables)?;
    Ok(true)
}
