//! Sampled launches, for profiles at real shapes: run the CTAs of a few rows of grid y and
//! scale the counters to the whole grid.
//!
//! Why grid y: every linattn kernel whose grid has more than one row puts B·H there (the
//! chunked kernels (chunks, B·H, tiles), the recurrent scans (slices, B·H), the feature-map
//! kernels (tiles, heads)); a B·H row does the work of any other up to the offsets of its
//! head. Grid-stride kernels have one row and always run whole. The run does not trust
//! this: it compares the sampled rows' counters ([`compare`]), and if they did different
//! work it runs the other rows too, so the launch is simulated whole and its counters are
//! exact.
//!
//! Rows did the same work when they agree on every counter of the memory system and of
//! synchronisation (global and shared requests, sectors, wavefronts; atomics, shuffles,
//! barriers, mma) and on the branches executed (a loop that runs another trip count
//! executes another number of branches, in PTX one per trip). Within that, two kinds of
//! counters may follow the data:
//! * the lane counts (thread instructions, fp32 flops, bytes asked): data-dependent lane
//!   predicates (φ = elu + 1 takes `exp` on the lanes with x ≤ 0);
//! * the arithmetic warp instructions (fp32, integer, conversion, special function) and so
//!   the total and the critical path: straight-line code behind a warp-uniform branch on
//!   data (cc_forward at D = 128 rescales its accumulator only when its two state tiles'
//!   exponents differ, which they do in some CTAs of a row and not in others). Allowed
//!   only while the rows' warp instructions and critical paths are within
//!   [`ARITHMETIC_SPREAD`] of each other: past it the data-dependent part is no longer
//!   small next to the work, and a mean of a few rows no estimate of it.
//!
//! Scaling, with `r` sampled rows of `gy`: every additive counter is the sampled rows' sum ×
//! gy / r: exact for the counters the rows agree on (the sum is r × one row), the mean of
//! the sampled rows for those that follow the data (an estimate; the launch's [`Sampled`]
//! names them). Unique DRAM sectors are a union over the launch, not a sum: the union of
//! the sampled rows × gy / r, which is exact when rows touch disjoint sectors (each head's
//! slices of Q, K, V, O and state) and overcounts sectors every row shares (none in these
//! kernels; the test checks it against full runs). The critical path is the longest of the
//! sampled CTAs.
//!
//! The rows not run write nothing, so what later launches read from them is whatever the
//! buffer held: the sampled run feeds no numerical result anywhere (profiles only read
//! counters; a later launch's sampled rows read what the same rows of the earlier ones
//! wrote, as long as their grids' y agree, as they do here). Addresses in these kernels depend on indices and sizes, never on
//! data, so memcheck sees the same addresses; initcheck would flag the unwritten rows,
//! hence sampling wants it off.

use std::cell::RefCell;

use rayon::prelude::*;

mod fields;

use crate::counters::Counters;
use crate::error::SimError;
use crate::exec::cta::{CtaRunner, LaunchCtx};
use crate::exec::memory::MemoryView;
use crate::instr_class::InstrClass;

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
    /// false: the sampled rows did different work, so every row ran (exact, no scaling).
    pub scaled: bool,
    /// The counters the sampled rows differed in, "name a vs b" (the first row against the
    /// first that differed): scaled, the data-dependent arithmetic estimated by its mean;
    /// not scaled, what showed different work. Empty when the rows agreed on every warp-level
    /// counter.
    pub differed: Vec<String>,
}

impl Sampled {
    /// "simulated 2 of 64 rows of grid y (y = 0, 63), scaled ×32".
    pub fn describe(&self) -> String {
        let rows: Vec<String> = self.rows.iter().map(u32::to_string).collect();
        let differed = self.differed.join(", ");
        match (self.scaled, self.differed.is_empty()) {
            (true, true) => format!(
                "simulated {} of {} rows of grid y (y = {}), scaled ×{:.4}",
                self.rows.len(),
                self.of,
                rows.join(", "),
                f64::from(self.of) / self.rows.len() as f64
            ),
            (true, false) => format!(
                "simulated {} of {} rows of grid y (y = {}), scaled ×{:.4}; data-dependent \
                 arithmetic differed ({differed}): its mean",
                self.rows.len(),
                self.of,
                rows.join(", "),
                f64::from(self.of) / self.rows.len() as f64
            ),
            (false, _) => format!(
                "sampled rows of grid y (y = {}) differed ({differed}): all {} rows simulated",
                rows.join(", "),
                self.of
            ),
        }
    }
}

/// How far apart the sampled rows' warp instructions and critical paths may be, as a
/// fraction of the smaller, when they differ by data-dependent arithmetic only: the
/// accuracy the sampled profile is held to against full runs (tests/sampled_profile.rs).
pub const ARITHMETIC_SPREAD: f64 = 0.01;

/// Whether sampled rows may be scaled, and the counters they differed in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Comparison {
    /// The same work: equal but for the lane counts and data-dependent arithmetic (the
    /// warp-level counters that differed, if any).
    Alike(Vec<String>),
    /// Different work (the counters that show it): the launch must run whole.
    Different(Vec<String>),
}

/// Compares the counters of the sampled rows (see the module's rules).
pub fn compare(rows: &[Counters]) -> Comparison {
    let Some(first) = rows.first() else {
        return Comparison::Alike(Vec::new());
    };
    for row in &rows[1..] {
        let work = fields::differences(&same_work(first), &same_work(row));
        if !work.is_empty() {
            return Comparison::Different(work);
        }
    }
    let spread = |f: fn(&Counters) -> u64| {
        let lo = rows.iter().map(f).min().unwrap_or(0);
        let hi = rows.iter().map(f).max().unwrap_or(0);
        (lo, hi, (hi - lo) as f64 / lo.max(1) as f64)
    };
    for (name, f) in [
        (
            "warp instructions",
            (|c| c.warp_instructions) as fn(&Counters) -> u64,
        ),
        ("critical path cycles", |c| c.critical_path_cycles),
    ] {
        let (lo, hi, by) = spread(f);
        if by > ARITHMETIC_SPREAD {
            return Comparison::Different(vec![format!(
                "{name} {lo} to {hi}, +{:.2}% (data-dependent arithmetic past {}%)",
                100.0 * by,
                100.0 * ARITHMETIC_SPREAD
            )]);
        }
    }
    let differed = rows[1..]
        .iter()
        .map(|row| fields::differences(&warp_level(first), &warp_level(row)))
        .find(|d| !d.is_empty())
        .unwrap_or_default();
    Comparison::Alike(differed)
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
    let (mut counters, scaled, differed) = match compare(&counts) {
        Comparison::Alike(differed) => (
            sum_rows(&counts).scaled(u64::from(gy), rows.len() as u64),
            true,
            differed,
        ),
        Comparison::Different(differed) => {
            let rest: Vec<u32> = (0..gy).filter(|y| !rows.contains(y)).collect();
            let more = run_rows(ctx, grid, &rest)?;
            let mut all = sum_rows(&counts);
            all.add(&sum_rows(&more));
            (all, false, differed)
        }
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
        differed,
    };
    Ok((counters, Some(sampled)))
}

/// The counters that do not depend on how many lanes of a warp are active: warp
/// instructions, requests, sectors, wavefronts, mma, barriers, the critical path. The lane
/// counts (thread instructions, fp32 flops, bytes asked) follow data-dependent lane
/// predicates, so rows of identical work differ there by the inputs.
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

/// The warp-level counters less the arithmetic that a warp-uniform branch on data may add
/// or skip (fp32, integer, conversion and special-function warp instructions, hence the
/// total and the critical path): what rows doing the same work agree on exactly. Memory,
/// synchronisation, mma and branch counts stay, so another trip count or other traffic
/// shows.
fn same_work(c: &Counters) -> Counters {
    let mut w = warp_level(c);
    for class in [
        InstrClass::Fp32,
        InstrClass::Integer,
        InstrClass::Conversion,
        InstrClass::SpecialFunction,
    ] {
        w.warp_by_class[class as usize] = 0;
    }
    w.warp_instructions = 0;
    w.critical_path_cycles = 0;
    w.critical_path = Default::default();
    w
}

#[cfg(test)]
mod tests;
