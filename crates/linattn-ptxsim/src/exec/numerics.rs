//! Numerics modes: how far from the correctly rounded value the simulator lets the PTX
//! `.approx` functions and the tensor-core accumulation land.
//!
//! * [`Numerics::Exact`] (default): `.approx` results are the exact value rounded once to
//!   f32; `mma` sums in f64 and rounds once. Hardware is within a few ulp of this.
//! * [`Numerics::AsCompiled`]: as Exact, but each `mul.f32` that ptxas folds into the
//!   `add.f32` / `sub.f32` using it runs fused, rounded once, as the SASS does
//!   (`ptxas::contract`, applied when a device in this mode loads a module).
//! * [`Numerics::Pessimistic`]: every `.approx` result is moved to the edge of the error bound
//!   the PTX ISA documents for it (9.7.3, "Floating Point Instructions"), and `mma` accumulates
//!   by the truncating model of `exec::mma_accumulate`. A kernel whose tolerances hold here
//!   holds them on any hardware that meets the ISA's bounds.
//!
//! Each mode has an `mma` accumulation model ([`Numerics::mma_model`]: exact, exact, A100), which
//! a device may override ([`MmaModel`], `Device::with_mma_model`) to compare models on one
//! mode's other numerics.
//!
//! The direction of each perturbation (up or down) is a hash of the instruction and its input
//! bits, so runs reproduce and one input always gives one output, as on hardware (the MUFU
//! unit is a function of its input).

use std::fmt;
use std::str::FromStr;

use crate::exec::float;
use crate::exec::mma_accumulate::{self, TensorCoreModel};
use crate::ir::{FloatMode, Rounding, UnOp};

/// How the simulator computes the results hardware only approximates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Numerics {
    /// `.approx` functions correctly rounded; `mma` exact, rounded once.
    #[default]
    Exact,
    /// Exact, plus the multiply-adds ptxas contracts fused (one rounding) as on the GPU.
    AsCompiled,
    /// `.approx` functions at the edge of their documented error bound; `mma` truncating.
    Pessimistic,
}

impl Numerics {
    /// Every mode, for command-line help and tests.
    pub const ALL: [Numerics; 3] = [Numerics::Exact, Numerics::AsCompiled, Numerics::Pessimistic];

    pub fn name(self) -> &'static str {
        match self {
            Numerics::Exact => "exact",
            Numerics::AsCompiled => "as-compiled",
            Numerics::Pessimistic => "pessimistic",
        }
    }
}

impl Numerics {
    /// How `mma` sums in this mode unless a device overrides it.
    pub fn mma_model(self) -> MmaModel {
        match self {
            Numerics::Exact => MmaModel::Exact,
            Numerics::AsCompiled => AS_COMPILED_MMA,
            Numerics::Pessimistic => MmaModel::A100,
        }
    }
}

/// The as-compiled mode's `mma` model: the H100's, as `linattn mma-probe` measured it on
/// 2026-11-26 (the one candidate of 50 that predicts all 718 probe vectors;
/// `mma_accumulate`'s documentation). On the chunked backends it makes 128 of 136 error
/// figures of the default grid equal the H100's bit for bit, against 31 with exact sums and
/// 85 with the terms aligned on their values' exponents (README, "Against the H100").
pub const AS_COMPILED_MMA: MmaModel = MmaModel::H100;

/// How the simulator's `mma` sums `c + Σ a_k·b_k` (see `exec::mma_accumulate`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MmaModel {
    /// In f64, rounded once to nearest.
    Exact,
    /// Fasi et al.'s A100 model (`mma_accumulate::A100`).
    A100,
    /// The H100's, as the mma probe measured it (`mma_accumulate::H100`).
    H100,
}

impl MmaModel {
    pub const ALL: [MmaModel; 3] = [MmaModel::Exact, MmaModel::A100, MmaModel::H100];

    pub fn name(self) -> &'static str {
        match self {
            MmaModel::Exact => "exact",
            MmaModel::A100 => "a100",
            MmaModel::H100 => "h100",
        }
    }

    /// The truncating model's parameters (none for exact).
    pub fn tensor_core(self) -> Option<TensorCoreModel> {
        match self {
            MmaModel::Exact => None,
            MmaModel::A100 => Some(mma_accumulate::A100),
            MmaModel::H100 => Some(mma_accumulate::H100),
        }
    }

    /// `c + Σ products` by this model.
    #[inline]
    pub fn accumulate(self, c: f32, products: &[mma_accumulate::Product]) -> f32 {
        match self.tensor_core() {
            None => mma_accumulate::dot_exact(c, products),
            Some(model) => mma_accumulate::dot_truncating(c, products, model),
        }
    }
}

impl fmt::Display for MmaModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for MmaModel {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        MmaModel::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = MmaModel::ALL.iter().map(|m| m.name()).collect();
                format!("unknown mma model '{s}' (known: {})", names.join(", "))
            })
    }
}

impl fmt::Display for Numerics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Numerics {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Numerics::ALL
            .into_iter()
            .find(|n| n.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Numerics::ALL.iter().map(|n| n.name()).collect();
                format!("unknown numerics mode '{s}' (known: {})", names.join(", "))
            })
    }
}

/// The error bound the PTX ISA documents for one result.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Bound {
    /// Ulps from the correctly rounded result.
    Ulps(u32),
    /// |result − exact| ≤ this × |exact|.
    Relative(f64),
    /// |result − exact| ≤ this.
    Absolute(f64),
}

/// Whether `op` in `mode` is one of the approximate unary functions.
pub fn is_approx_unary(op: UnOp, mode: FloatMode) -> bool {
    match op {
        UnOp::Ex2 | UnOp::Lg2 | UnOp::Rsqrt | UnOp::Sin | UnOp::Cos | UnOp::Tanh => true,
        UnOp::Rcp | UnOp::Sqrt => mode.rounding == Rounding::Approx,
        _ => false,
    }
}

/// Whether a `div` in `mode` is approximate (`.approx`, `.full`).
pub fn is_approx_div(mode: FloatMode) -> bool {
    matches!(mode.rounding, Rounding::Approx | Rounding::Full)
}

/// The ISA's bound for `op` at input `x` (after any flush), whose exact result is `exact`.
fn unary_bound(op: UnOp, x: f32, exact: f64) -> Bound {
    use std::f64::consts::PI;
    match op {
        // "The maximum ulp error is 2 ulp from correctly rounded result".
        UnOp::Ex2 => Bound::Ulps(2),
        // rcp.approx.f32: "The maximum ulp error is 1 across the full range of inputs".
        UnOp::Rcp => Bound::Ulps(1),
        // "maximum relative error for rsqrt.f32 over the entire positive finite
        // floating-point range is 2^-22.9".
        UnOp::Rsqrt => Bound::Relative(2f64.powf(-22.9)),
        // sqrt.approx.f32: "maximum relative error ... is 2^-23".
        UnOp::Sqrt => Bound::Relative(2f64.powi(-23)),
        // "maximum absolute error is 2^-22 when the input operand is in the range (0.5, 2).
        // For positive finite inputs outside of this interval, maximum relative error is
        // 2^-22."
        UnOp::Lg2 if x > 0.5 && x < 2.0 => Bound::Absolute(2f64.powi(-22)),
        UnOp::Lg2 => Bound::Relative(2f64.powi(-22)),
        // sin/cos: absolute 2^-20.5 on [-2π, 2π], 2^-14.7 on [-100π, 100π]; beyond, the ISA
        // promises nothing: the wider bound is kept there.
        UnOp::Sin | UnOp::Cos if f64::from(x).abs() <= 2.0 * PI => {
            Bound::Absolute(2f64.powf(-20.5))
        }
        UnOp::Sin | UnOp::Cos => Bound::Absolute(2f64.powf(-14.7)),
        // "The maximum relative error over the entire floating point range is 2^-11."
        UnOp::Tanh => Bound::Relative(2f64.powi(-11)),
        _ => {
            debug_assert!(false, "{op:?} has no approximation bound ({exact})");
            Bound::Ulps(0)
        }
    }
}

/// `op` at the edge of its documented error bound: the correctly rounded result moved as far
/// as the bound allows in a direction hashed from the input. The ISA's special cases (zeros,
/// infinities, NaN, and tanh's pass-through of subnormals) stay exact.
pub fn pessimistic_unary(op: UnOp, x: f32, mode: FloatMode) -> f32 {
    let rounded = float::unary(op, x, mode);
    let input = float::approx_input(x, mode);
    let special = !input.is_finite()
        || !rounded.is_finite()
        || rounded == 0.0
        || (op == UnOp::Tanh && input.is_subnormal())
        || (matches!(op, UnOp::Ex2 | UnOp::Cos) && input == 0.0);
    if special {
        return rounded;
    }
    let exact = float::approx_exact(op, input);
    let up = direction(op as u64, input.to_bits(), 0);
    let moved = perturb(rounded, exact, unary_bound(op, input, exact), up);
    float::finish(moved, mode)
}

/// `div.approx` / `div.full` at the edge of their 2-ulp bound (for div.approx, the ISA
/// bounds |b| in [2^-126, 2^126] only; beyond, its zero or NaN stays as it is).
pub fn pessimistic_div(a: f32, b: f32, mode: FloatMode) -> f32 {
    let rounded = float::div(a, b, mode);
    if !rounded.is_finite() || rounded == 0.0 || !a.is_finite() || !b.is_finite() {
        return rounded;
    }
    let up = direction(0x0d1f, a.to_bits(), b.to_bits());
    let exact = f64::from(a) / f64::from(b);
    float::finish(perturb(rounded, exact, Bound::Ulps(2), up), mode)
}

/// `rounded` (the correctly rounded value of `exact`) moved toward +∞ (`up`) or −∞ to the
/// farthest f32 within `bound`; never across zero, never to infinity.
fn perturb(rounded: f32, exact: f64, bound: Bound, up: bool) -> f32 {
    let target = match bound {
        Bound::Ulps(n) => return step(rounded, n, up),
        Bound::Relative(r) => r * exact.abs(),
        Bound::Absolute(a) => a,
    };
    let edge = if up { exact + target } else { exact - target };
    // The farthest f32 still inside the bound: round the edge back toward the exact value.
    let inside = float::round_f32(edge, 0.0, if up { Rounding::Down } else { Rounding::Up });
    // Never across zero (a sign flip is not an approximation error the ISA tables allow for
    // these functions' exact zeros), never to infinity; and never closer than the correctly
    // rounded value, which is inside every bound.
    let inside = if inside.signum() != rounded.signum() || inside == 0.0 {
        rounded
    } else {
        inside.clamp(f32::MIN, f32::MAX)
    };
    if (f64::from(inside) - exact).abs() < (f64::from(rounded) - exact).abs() {
        rounded
    } else {
        inside
    }
}

/// `x` moved `n` ulps toward +∞ (`up`) or −∞, stopping at the largest finite magnitude and
/// before zero.
fn step(x: f32, n: u32, up: bool) -> f32 {
    let away_from_zero = up == (x > 0.0);
    let bits = x.to_bits();
    let magnitude = bits & 0x7fff_ffff;
    let moved = if away_from_zero {
        magnitude.saturating_add(n).min(f32::MAX.to_bits())
    } else {
        magnitude.saturating_sub(n).max(1)
    };
    f32::from_bits((bits & 0x8000_0000) | moved)
}

/// Up or down, from a hash of (instruction, input bits): splitmix64's finaliser, whose
/// output bits each depend on every input bit.
fn direction(op: u64, a: u32, b: u32) -> bool {
    let mut z = op
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .wrapping_add(u64::from(a) << 32 | u64::from(b));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    z & 1 == 1
}

#[cfg(test)]
mod tests {
    use super::*;

    const APPROX: FloatMode = FloatMode {
        rounding: Rounding::Approx,
        ftz: false,
        sat: false,
        contractible: false,
    };

    fn ulps_apart(a: f32, b: f32) -> u32 {
        (a.to_bits() as i64 - b.to_bits() as i64).unsigned_abs() as u32
    }

    #[test]
    fn names_round_trip() {
        for n in Numerics::ALL {
            assert_eq!(n.name().parse::<Numerics>(), Ok(n));
        }
        let err = "fast".parse::<Numerics>().unwrap_err();
        assert!(err.contains("exact, as-compiled, pessimistic"), "{err}");
    }

    #[test]
    fn mma_models_round_trip_and_follow_the_modes() {
        for m in MmaModel::ALL {
            assert_eq!(m.name().parse::<MmaModel>(), Ok(m));
        }
        let err = "v100".parse::<MmaModel>().unwrap_err();
        assert!(err.contains("exact, a100, h100"), "{err}");
        assert_eq!(Numerics::Exact.mma_model(), MmaModel::Exact);
        assert_eq!(Numerics::Pessimistic.mma_model(), MmaModel::A100);
        assert_eq!(
            MmaModel::A100.tensor_core(),
            Some(mma_accumulate::PESSIMISTIC)
        );
    }

    #[test]
    fn ex2_moves_exactly_two_ulps_both_ways() {
        let (mut ups, mut downs) = (0, 0);
        for i in 1..2000 {
            let x = i as f32 * 0.0123 - 11.0;
            let exact = float::unary(UnOp::Ex2, x, APPROX);
            let got = pessimistic_unary(UnOp::Ex2, x, APPROX);
            assert_eq!(ulps_apart(got, exact), 2, "ex2({x}): {got} vs {exact}");
            if got > exact {
                ups += 1
            } else {
                downs += 1
            }
        }
        // The hash is balanced enough to perturb both ways often.
        assert!(ups > 800 && downs > 800, "{ups} up, {downs} down");
    }

    #[test]
    fn relative_and_absolute_bounds_hold_and_are_used() {
        for i in 1..500 {
            let x = i as f32 * 0.731;
            for (op, rel) in [
                (UnOp::Rsqrt, 2f64.powf(-22.9)),
                (UnOp::Tanh, 2f64.powi(-11)),
            ] {
                let exact = float::approx_exact(op, x);
                let got = f64::from(pessimistic_unary(op, x, APPROX));
                let err = (got - exact).abs() / exact.abs();
                assert!(err <= rel, "{op:?}({x}): relative error {err:e}");
                // At least half the bound: the edge, not the middle.
                if op == UnOp::Tanh && x < 4.0 {
                    assert!(err >= rel / 2.0, "{op:?}({x}): only {err:e}");
                }
            }
            let y = x * 0.01 - 2.0;
            let exact = float::approx_exact(UnOp::Sin, y);
            let got = f64::from(pessimistic_unary(UnOp::Sin, y, APPROX));
            let err = (got - exact).abs();
            assert!(err <= 2f64.powf(-20.5), "sin({y}): {err:e}");
            assert!(
                err >= 2f64.powf(-20.5) - 2f64.powi(-24),
                "sin({y}): only {err:e}"
            );
        }
    }

    #[test]
    fn special_values_stay_exact() {
        let cases = [
            (UnOp::Ex2, 0.0, 1.0),
            (UnOp::Ex2, f32::NEG_INFINITY, 0.0),
            (UnOp::Rsqrt, f32::INFINITY, 0.0),
            (UnOp::Rsqrt, 0.0, f32::INFINITY),
            (UnOp::Lg2, 1.0, 0.0),
            (UnOp::Cos, 0.0, 1.0),
            (UnOp::Sin, -0.0, -0.0),
            (UnOp::Tanh, 1e-40, 1e-40),
        ];
        for (op, x, want) in cases {
            let got = pessimistic_unary(op, x, APPROX);
            assert_eq!(got.to_bits(), want.to_bits(), "{op:?}({x}) = {got}");
        }
        assert!(pessimistic_unary(UnOp::Lg2, -1.0, APPROX).is_nan());
    }

    #[test]
    fn steps_stop_at_the_finite_range_and_before_zero() {
        assert_eq!(step(f32::MAX, 2, true), f32::MAX);
        assert_eq!(step(-f32::MAX, 2, false), -f32::MAX);
        assert_eq!(step(f32::from_bits(1), 2, false), f32::from_bits(1));
        assert_eq!(step(1.0, 1, false), 1.0 - f32::EPSILON / 2.0);
        assert_eq!(step(-1.0, 1, true), -(1.0 - f32::EPSILON / 2.0));
    }

    #[test]
    fn div_full_is_two_ulps_off() {
        let mode = FloatMode {
            rounding: Rounding::Full,
            ..APPROX
        };
        let got = pessimistic_div(1.0, 3.0, mode);
        assert_eq!(ulps_apart(got, 1.0 / 3.0), 2);
        assert_eq!(pessimistic_div(0.0, 3.0, mode), 0.0);
    }
}
