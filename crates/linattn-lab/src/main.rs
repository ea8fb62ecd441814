//! `linattn`: see the library crate for the subcommands.

use linattn_core::CountingAllocator;
use std::process::ExitCode;

/// Counts host allocations so `bench` can report CPU backends' peak memory.
#[global_allocator]
static ALLOC: CountingAllocator = CountingAllocator;

fn main() -> ExitCode {
    linattn_lab::run_cli()
}
