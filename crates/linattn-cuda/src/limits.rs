//! CUDA's launch limits, and the grids of each form's launches described against them, so
//! that `supports` refuses a problem beyond a limit — naming the limit, the value and the
//! kernel — before anything is allocated or launched, and never launches a wrong answer.
//!
//! A form builds each launch's grid as a [`Grid`]: per axis, which problem quantity lands
//! there and how many blocks that makes. The launch takes its dims from that grid
//! ([`Grid::dims`]) and the form's check runs [`check_grids`] over the grids of every launch
//! the problem would make, built by the same functions: the limit and the launch cannot drift
//! apart. Grid-stride kernels (a capped grid looping over the work) have no such limit and
//! are not listed.
//!
//! The numbers are CUDA's for every architecture the kernels target (sm_80, sm_90):
//! gridDim.x ≤ 2³¹ − 1, gridDim.y and gridDim.z ≤ 65535.

use std::fmt;

use linattn_core::{AttnError, Unsupported};

use crate::params::KernelParams;

/// Largest gridDim.x.
pub const GRID_X_MAX: u64 = (1 << 31) - 1;
/// Largest gridDim.y and gridDim.z.
pub const GRID_YZ_MAX: u64 = 65_535;
/// Longest sequence the kernels take. Token indices and N are `int` in every kernel, and
/// the kernels add up to N more to a token index (a chunk, a split or a tile start plus its
/// length, rounded up to the tile), so N ≤ 2³⁰ keeps every such sum below 2³¹.
pub const MAX_SEQ: usize = 1 << 30;

/// What lands on one grid axis: a problem quantity and the blocks it makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Axis {
    /// `B·H`, `N`, `⌈B·H·N/8⌉`: how the user's sizes give the block count.
    what: String,
    blocks: u64,
    /// For a covering axis, the count it covers (`B·H·N = …`), shown in a refusal.
    covers: Option<(String, u64)>,
}

impl Axis {
    /// One block per `what` (B·H heads, N tokens), `count` of them.
    pub fn each(what: &str, count: usize) -> Axis {
        Axis {
            what: what.to_string(),
            blocks: count as u64,
            covers: None,
        }
    }

    /// ⌈count / per_block⌉ blocks covering the `count` items `what` names (B·H·N rows, C·M
    /// entries), at least one. `count` saturates rather than wraps (see [`product`]).
    pub fn covering(what: &str, count: u64, per_block: u64) -> Axis {
        let per_block = per_block.max(1);
        Axis {
            what: format!("⌈{what}/{per_block}⌉"),
            blocks: count.div_ceil(per_block).max(1),
            covers: Some((what.to_string(), count)),
        }
    }

    /// An axis of one block.
    pub fn one() -> Axis {
        Axis::each("1", 1)
    }

    pub fn blocks(&self) -> u64 {
        self.blocks
    }
}

impl fmt::Display for Axis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} = {}", self.what, self.blocks)?;
        if let Some((what, count)) = &self.covers {
            write!(f, " ({what} = {count})")?;
        }
        Ok(())
    }
}

/// The grid of one launch of `kernel`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grid {
    kernel: &'static str,
    axes: [Axis; 3],
}

impl Grid {
    /// The grid of a launch of the entry point whose arguments are `P`.
    pub fn of<P: KernelParams>(x: Axis, y: Axis, z: Axis) -> Grid {
        Grid::named(P::SPEC.entry, x, y, z)
    }

    /// The grid of a launch of `kernel`.
    pub fn named(kernel: &'static str, x: Axis, y: Axis, z: Axis) -> Grid {
        Grid {
            kernel,
            axes: [x, y, z],
        }
    }

    pub fn kernel(&self) -> &'static str {
        self.kernel
    }

    /// `Unsupported::Problem` naming the first axis beyond its limit (or empty), its value,
    /// the limit and the kernel.
    pub fn check(&self) -> Result<(), Unsupported> {
        let names = ["x", "y", "z"];
        let limits = [GRID_X_MAX, GRID_YZ_MAX, GRID_YZ_MAX];
        for ((axis, name), limit) in self.axes.iter().zip(names).zip(limits) {
            if axis.blocks == 0 {
                return Err(Unsupported::Problem(format!(
                    "{axis}: an empty gridDim.{name} for {}",
                    self.kernel
                )));
            }
            if axis.blocks > limit {
                return Err(Unsupported::Problem(format!(
                    "{axis} exceeds gridDim.{name}'s {limit} for {}",
                    self.kernel
                )));
            }
        }
        Ok(())
    }

    /// The grid as a launch takes it, or the refusal of [`Grid::check`].
    pub fn dims(&self) -> Result<(u32, u32, u32), AttnError> {
        self.check()?;
        // Each axis is within 2³¹ − 1 now.
        let [x, y, z] = &self.axes;
        Ok((x.blocks as u32, y.blocks as u32, z.blocks as u32))
    }
}

/// The first refusal among `grids`.
pub fn check_grids(grids: &[Grid]) -> Result<(), Unsupported> {
    grids.iter().try_for_each(Grid::check)
}

/// N within [`MAX_SEQ`], or a refusal naming `kernels` (e.g. "the recurrent kernels").
pub fn check_seq(n: usize, kernels: &str) -> Result<(), Unsupported> {
    if n > MAX_SEQ {
        return Err(Unsupported::Problem(format!(
            "sequence length N = {n} exceeds {MAX_SEQ} (2^30): {kernels} index tokens in int"
        )));
    }
    Ok(())
}

/// `a·b` as u64, saturating: a product past u64 is beyond every limit anyway.
pub fn product(factors: &[usize]) -> u64 {
    factors
        .iter()
        .fold(1u64, |acc, &f| acc.saturating_mul(f as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axes_at_and_past_each_limit() {
        let grid = |x, y, z| Grid::named("k", x, y, z);
        let ok = grid(
            Axis::covering("B·H·N", 8 * GRID_X_MAX, 8),
            Axis::each("B·H", 65_535),
            Axis::one(),
        );
        assert_eq!(ok.dims().unwrap(), (GRID_X_MAX as u32, 65_535, 1));
        let x = grid(
            Axis::covering("B·H·N", 8 * GRID_X_MAX + 1, 8),
            Axis::one(),
            Axis::one(),
        );
        assert_eq!(
            x.check().unwrap_err().to_string(),
            "unsupported: ⌈B·H·N/8⌉ = 2147483648 (B·H·N = 17179869177) exceeds gridDim.x's 2147483647 for k"
        );
        let y = grid(Axis::one(), Axis::each("B·H", 65_536), Axis::one());
        assert!(y
            .check()
            .unwrap_err()
            .to_string()
            .contains("B·H = 65536 exceeds gridDim.y's 65535 for k"));
        let z = grid(Axis::one(), Axis::one(), Axis::each("B·H", 70_000));
        assert!(z
            .check()
            .unwrap_err()
            .to_string()
            .contains("gridDim.z's 65535"));
        let empty = grid(Axis::one(), Axis::each("D/64", 0), Axis::one());
        assert!(empty
            .check()
            .unwrap_err()
            .to_string()
            .contains("empty gridDim.y"));
        assert!(matches!(
            z.dims(),
            Err(AttnError::Unsupported(Unsupported::Problem(_)))
        ));
    }

    #[test]
    fn sequence_and_products() {
        assert_eq!(check_seq(MAX_SEQ, "these"), Ok(()));
        let err = check_seq(MAX_SEQ + 1, "these kernels")
            .unwrap_err()
            .to_string();
        assert!(err.contains("N = 1073741825 exceeds 1073741824"), "{err}");
        assert_eq!(product(&[3, 5, 7]), 105);
        assert_eq!(product(&[usize::MAX, usize::MAX]), u64::MAX);
    }
}
