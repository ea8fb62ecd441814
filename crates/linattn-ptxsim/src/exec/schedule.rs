//! The order in which a CTA's warps run between synchronisation points (schedule fuzzing).
//!
//! The simulator runs one warp at a time. Between two `bar.sync`, a race-free kernel
//! computes the same values in any order; a kernel that reads what another warp writes
//! without a barrier gets whatever the order gives it. [`Schedule::InOrder`] is what a
//! GPU happens to do most often for small CTAs; the others show what a missing barrier does
//! when the hardware picks differently (racecheck and globalcheck report such races in
//! every schedule; the schedule changes what unchecked runs compute).

use std::fmt;
use std::str::FromStr;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Schedule {
    /// Warp 0 first, each until it parks at a barrier or exits (the default).
    #[default]
    InOrder,
    /// The last warp first, each until it parks or exits.
    Reversed,
    /// Repeatedly the warp whose next instruction has the highest PC (the last warp on a
    /// tie), for one straight-line stretch: warps switch at every branch, so a warp that
    /// is further along its code runs before the others catch up.
    HighestPcFirst,
}

impl Schedule {
    pub const NAMES: &'static str = "in-order, reversed, highest-pc";
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Schedule::InOrder => "in-order",
            Schedule::Reversed => "reversed",
            Schedule::HighestPcFirst => "highest-pc",
        })
    }
}

impl FromStr for Schedule {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "in-order" => Ok(Schedule::InOrder),
            "reversed" => Ok(Schedule::Reversed),
            "highest-pc" => Ok(Schedule::HighestPcFirst),
            _ => Err(format!(
                "unknown schedule '{s}' (one of: {})",
                Schedule::NAMES
            )),
        }
    }
}
