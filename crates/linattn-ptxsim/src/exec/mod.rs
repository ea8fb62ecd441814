//! Execution: device memory, one CTA's warps and shared memory, the instruction semantics.

pub(crate) mod access;
pub(crate) mod alu;
pub(crate) mod clock;
pub(crate) mod collective;
pub mod cta;
pub(crate) mod float;
pub(crate) mod global_race;
pub(crate) mod memory;
pub mod mma_accumulate;
pub mod mufu_file;
pub mod mufu_table;
pub mod numerics;
pub(crate) mod race;
pub mod schedule;
pub(crate) mod shared;
pub(crate) mod warp;
