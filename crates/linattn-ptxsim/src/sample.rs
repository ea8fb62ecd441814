//! Sampled launches, for profiles at real shapes: run the CTAs of a few rows of grid y and
//! scale the counters to the whole grid.
//!
//! Why grid y: every linattn kernel whose grid has more than one row puts B·H there (the
//! chunked kernels (chunks, B·H, tiles), the recurrent scans (slices, B·H), the feature-map
//! kernels (tiles, heads)); a B·H row does the work of any other up to the offsets of its
//! head. Grid-stride kernels have one row and always run whole. The run does not trust
//! this: it compares the warp-level counters of the sampled rows (warp instructions,
//! requests, sectors, wavefronts, mma, critical path), and if any two differ it runs the
//! other rows too, so the launch is simulated whole and its counters are exact.
//!
//! Rows are alike when their warp-level counters are equal ([`warp_level`]); the lane counts
//! (thread instructions, fp32 flops, bytes asked) follow data-dependent branches and may
//! differ. Scaling, with `r` sampled rows of `gy`: every additive counter is the sampled
//! rows' sum × gy / r: exact for the warp-level ones (the sum is r × one row), the mean of
//! the sampled rows for the lane counts. Unique DRAM
//! sectors are a union over the launch, not a sum: the union of the sampled rows × gy / r,
//! which is exact when rows touch disjoint sectors (each head's slices of Q, K, V, O and
//! state) and overcounts sectors every row shares (none in these kernels; the test checks
//! it against full runs). The critical path is the longest of the sampled CTAs.
//!
//! The rows not run write nothing, so what later launches read from them is whatever the
//! buffer held: the sampled run feeds no numerical result anywhere (profiles only read
//! counters). Addresses in these kernels depend on indices and sizes, never on data, so
//! memcheck sees the same addresses; initcheck would flag the unwritten rows, hence
//! sampling wants it off.

use std::cell::RefCell;

use rayon::prelude::*;

use crate::counters::Counters;
use crate::error::SimError;
use crate::exec::cta::{CtaRunner, LaunchCtx};
use crate::exec::memory::MemoryView;

thread_local! {
    static RUNNER: RefCell<CtaRunner> = RefCell::new(CtaRunner::new());
}

/// What a sampled launch ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sampled {
    /// The rows of grid y whose CTAs (every x and z) ran.
    pub rows: Vec<u32>,
    /// Rows of grid y in the launch.
    pub of: u32,
    /// false: the sampled rows' counters differed, so every row ran (exact, no scaling).
    pub scaled: bool,
}

impl Sampled {
    /// "simulated 2 of 64 rows of grid y (y = 0, 63), scaled ×32".
    pub fn describe(&self) -> String {
        let rows: Vec<String> = self.rows.iter().map(u32::to_string).collect();
        if self.scaled {
            format!(
                "simulated {} of {} rows of grid y (y = {}), scaled ×{:.4}",
                self.rows.len(),
                self.of,
                rows.join(", "),
                f64::from(self.of) / self.rows.len() as f64
            )
        } else {
            format!(
                "sampled rows of grid y (y = {}) differed: all {} rows simulated",
                rows.join(", "),
                self.of
            )
        }
    }
}

/// `n` rows of `0..gy`, evenly spaced, first and last included (n ≥ 2 and n < gy).
pub fn sample_rows(gy: u32, n: u32) -> Vec<u32> {
    let n = n.clamp(2, gy.max(2));
    let last = u64::from(gy - 1);
    let mut rows: Vec<u32> = (0..u64::from(n))
        .map(|i| ((i * last + u64::from(n - 1) / 2) / u64::from(n - 1)) as u32)
        .collect();
    rows.dedup();
    rows
}

/// Runs every CTA of the given rows of grid y (all x, z); the counters per row, in `rows`
/// order. CTAs run in parallel in waves; the first fault (lowest CTA in the first wave with
/// one) is returned.
pub fn run_rows(ctx: &LaunchCtx, grid: [u32; 3], rows: &[u32]) -> Result<Vec<Counters>, SimError> {
    let [gx, _, gz] = grid.map(u64::from);
    let per_row = gx * gz;
    let total = per_row * rows.len() as u64;
    let wave = (rayon::current_num_threads() as u64 * 8).max(1);
    let mut counters = vec![Counters::default(); rows.len()];
    let mut first = 0;
    while first < total {
        let last = (first + wave).min(total);
        let results: Vec<(usize, Result<(), SimError>, Counters)> = (first..last)
            .into_par_iter()
            .map(|index| {
                let (row, within) = ((index / per_row) as usize, index % per_row);
                let cta = [(within % gx) as u32, rows[row], (within / gx) as u32];
                RUNNER.with(|runner| {
                    let mut runner = runner.borrow_mut();
                    runner.counters = Counters::default();
                    let result = runner.run(ctx, cta);
                    (row, result, runner.counters)
                })
            })
            .collect();
        for (row, result, c) in results {
            result?;
            counters[row].add(&c);
        }
        first = last;
    }
    Ok(counters)
}

pub fn sum_rows(rows: &[Counters]) -> Counters {
    let mut total = Counters::default();
    for r in rows {
        total.add(r);
    }
    total
}

/// Runs `n` rows of grid y and scales; runs the rest when the rows differ. The counters
/// include the unique sectors (from `view`).
pub fn sampled_run(
    ctx: &LaunchCtx,
    grid: [u32; 3],
    n: u32,
    view: &MemoryView,
) -> Result<(Counters, Option<Sampled>), SimError> {
    let gy = grid[1];
    let rows = sample_rows(gy, n);
    let counts = run_rows(ctx, grid, &rows)?;
    let alike = counts
        .windows(2)
        .all(|w| warp_level(&w[0]) == warp_level(&w[1]));
    let (mut counters, scaled) = if alike {
        (
            sum_rows(&counts).scaled(u64::from(gy), rows.len() as u64),
            true,
        )
    } else {
        let rest: Vec<u32> = (0..gy).filter(|y| !rows.contains(y)).collect();
        let more = run_rows(ctx, grid, &rest)?;
        let mut all = sum_rows(&counts);
        all.add(&sum_rows(&more));
        (all, false)
    };
    if ctx.count_memory {
        let (loaded, stored) = view.touched_sectors();
        let (num, den) = if scaled {
            (u64::from(gy), rows.len() as u64)
        } else {
            (1, 1)
        };
        counters.unique_load_sectors = loaded * num / den;
        counters.unique_store_sectors = stored * num / den;
    }
    let sampled = Sampled {
        rows,
        of: gy,
        scaled,
    };
    Ok((counters, Some(sampled)))
}

/// The counters that do not depend on how many lanes of a warp are active: warp
/// instructions, requests, sectors, wavefronts, mma, barriers, the critical path. The lane
/// counts (thread instructions, fp32 flops, bytes asked) follow data-dependent branches
/// (φ = elu + 1 takes `exp` on the lanes with x ≤ 0), so rows of identical work differ
/// there by the inputs: those are scaled as the sampled rows' mean, an estimate.
fn warp_level(c: &Counters) -> Counters {
    Counters {
        thread_instructions: 0,
        thread_by_class: [0; 13],
        fp32_flops: 0,
        global_load_bytes: 0,
        global_store_bytes: 0,
        ..*c
    }
}

#[cfg(test)]
mod tests {
    use super::sample_rows;

    #[test]
    fn rows_are_spread_and_keep_both_ends() {
        assert_eq!(sample_rows(64, 2), vec![0, 63]);
        assert_eq!(sample_rows(64, 3), vec![0, 32, 63]);
        assert_eq!(sample_rows(5, 4), vec![0, 1, 3, 4]);
        assert_eq!(sample_rows(3, 1), vec![0, 2]);
    }
}
