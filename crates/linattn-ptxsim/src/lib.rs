//! `linattn-ptxsim`: runs the PTX that NVRTC produces for the linattn kernels on the CPU,
//! under the CUDA execution model, with compute-sanitizer-style checkers.
//!
//! * [`Device`] — simulated global memory (allocations with guard gaps, a "written" shadow),
//!   modules ([`Device::load`] parses PTX text), launches ([`Device::launch`]) over a grid of
//!   CTAs that run in parallel on the host's cores.
//! * Execution: warps of 32 lanes with per-lane program counters (independent thread
//!   scheduling; lanes at the lowest PC run together, so divergent paths reconverge where
//!   they meet), per-lane registers stored lane-contiguous so a warp instruction is one
//!   vectorisable loop, `bar.sync`, `bar.warp.sync`, `shfl.sync`, `atom`, and
//!   `mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}` with the PTX ISA fragment layout.
//! * Checkers, each a [`SimError::Fault`] naming kernel, PTX line, CTA, thread and address:
//!   memcheck (bounds and alignment of every global and shared access; always on),
//!   racecheck (shared-memory accesses of different threads not ordered by `bar.sync`, or
//!   within a warp by `bar.warp.sync`s whose member masks link them), initcheck (reads of
//!   global or shared memory never written), synccheck (barriers and warp collectives
//!   reached by part of the threads they need; always on), globalcheck (global-memory
//!   accesses of one launch that nothing orders: threads of a CTA under racecheck's rules,
//!   any two CTAs unless both only read, both only use atomics or both write one value,
//!   and stores to data the launch reads through `ld.global.nc`; see `exec::global_race`).
//!   Launches check registers as the hardware allocates them (when ptxas' count is given:
//!   [`Module::set_registers`]); [`Placement::Adversarial`] places shared variables at
//!   their declared alignment only.
//! * Schedule fuzzing: [`Schedule`] picks the order in which a CTA's warps run between
//!   synchronisation points (in order, reversed, highest PC first), to show what a missing
//!   barrier computes when the hardware picks another order.
//!
//! What it proves: the kernel's PTX, as NVRTC emitted it for the target, computes the right
//! values under the PTX execution and memory model for the launches simulated. What it
//! cannot: anything ptxas does after PTX (register allocation, scheduling, SASS bugs),
//! timing, bit-exact `.approx` results (see `exec::float`; [`Numerics::Pessimistic`] bounds
//! them by the ISA's error bounds), tensor-core accumulation order (see `exec::mma_accumulate`),
//! driver behaviour, and interleavings of warps or CTAs other than the simulated ones
//! (globalcheck reports the unordered accesses whatever the order; what an unchecked run
//! computes depends on it).

pub mod arch;
pub mod counters;
mod device;
pub mod error;
pub mod exec;
pub mod instr_class;
pub mod ir;
pub mod model;
pub mod parse;
pub mod ptxas;
pub mod sample;
pub mod source_lines;

pub use arch::SimArch;
pub use counters::{Counters, PathBreakdown};
pub use device::{Arg, Device, LaunchConfig, LaunchStats, Module};
pub use error::{Checker, Checks, Fault, Schedule, SimError, Site};
pub use exec::mufu_table::{MufuForm, MufuOp, MufuTable, MufuTables};
pub use exec::numerics::{MmaModel, Numerics};
pub use instr_class::InstrClass;
pub use parse::Placement;
pub use sample::Sampled;
pub use source_lines::{LineCount, SourceLines, PTX_TEXT};
