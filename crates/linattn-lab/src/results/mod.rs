//! The results JSON written by `linattn bench`, `linattn profile` and scripts/peers.py, read
//! by `compare` and `report` (bench-results/SCHEMA.md). The floor of the crate: it imports
//! none of the commands above it.
//!
//! - [`schema`]: the file, its environment and grid, the schema version;
//! - [`cell`]: one bench cell and the key it is matched on;
//! - [`profiles`]: the `profiles` section (`linattn profile`'s per-kernel records);
//! - [`output`]: loading, atomic writing, where output goes;
//! - [`host`]: probing the machine and the build for the `environment` section.

pub(crate) mod cell;
pub(crate) mod host;
pub(crate) mod output;
pub(crate) mod profiles;
pub(crate) mod schema;

#[cfg(test)]
pub(crate) mod tests;

pub use cell::{Cell, CellKey, CellShape, CellStatus, CellWall, Mode, PeakSource};
pub use host::{probe_environment, GpuEnvironment};
pub(crate) use output::{
    check_writable, checkout_root, prepare_output_dir, prepare_output_file, slug,
    write_bytes_atomic, write_json_atomic,
};
pub use schema::{
    CopyBandwidth, Environment, GemmRateRecord, GridRecord, ResultsFile, SweepProgress, SweepState,
    SCHEMA_VERSION,
};
