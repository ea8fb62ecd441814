//! Bit-exact `.approx` functions from tables captured on a GPU (issue #23).
//!
//! The H100's MUFU unit returns results up to 2 ulp from the correctly rounded value the
//! simulator computes (`exec::float`). No bit-exact public model of it exists, so the device
//! itself is asked (`linattn mufu`, `kernels/mufu_probe.cu`), under the hypothesis that each
//! result depends on a few input bits only:
//!
//! * `MUFU.RCP` (`rcp.approx.ftz.f32`): the 23 mantissa bits; `1/(2^e·1.m) = 2^-e · T[m]`.
//! * `MUFU.RSQ` (`rsqrt.approx.ftz.f32`): the mantissa and the exponent's parity p;
//!   `rsqrt(2^(2k+p)·1.m) = 2^-k · T[p·2^23 + m]`.
//! * `MUFU.EX2` (`ex2.approx.ftz.f32`): the fraction f of x = n + f in fixed point;
//!   `2^x = 2^n · T[f quantised]`, T captured at f = i/2^24 (all exact f32). How many fraction
//!   bits the unit keeps, and whether it truncates or rounds, is an [`Ex2Grid`] chosen by the
//!   capture's verification.
//! * `MUFU.EX2` of x < 0, where its own table was captured (`ex2neg`, [`MufuOp::Ex2Negative`]):
//!   sign-magnitude, `2^-|x| = 2^-m · U[g quantised]` for |x| = m + g (m = floor(|x|), g
//!   quantised on the same grid as f, so truncation is toward zero on |x|), U captured at
//!   −i/2^24. The H100 capture of 2026-11-26 had no U: its verification of `2^n · T[f]` held
//!   for every x ≥ 0 and missed negative x only (x = −6.15e-9: the device 1.0, that is U\[0\],
//!   the prediction T[2^24 − 1]/2 one ulp under), and the last bits of U do not follow from
//!   T. A directory without `ex2neg.mufu` keeps predicting negative x from T, as before.
//!
//! T is stored as deviations from the correctly rounded result (int8 ulps), so a table of
//! a correctly rounded unit is all zeros. The PTX forms that are not a bare MUFU are
//! predicted by the SASS ptxas 13.0.88 emits for them (`nvdisasm` of an sm_90 cubin):
//! `ex2.approx.f32` of x < −126 is `MUFU.EX2(x/2)` squared by one `FMUL` (so its results
//! may be subnormal), otherwise `MUFU.EX2(x)`; `rsqrt.approx.f32` of a subnormal x is
//! `MUFU.RSQ(x·2^24)·2^12` (`FSETP.GEU |x|, 2^-126`, then two predicated `FMUL`s), otherwise
//! `MUFU.RSQ(x)`. The H100 capture of 2026-11-26 bore that out: the earlier prediction,
//! subnormal inputs flushed to ±inf, missed 174 889 of its 437 542 special inputs.
//!
//! In `Numerics::AsCompiled`, once tables are [`install`]ed (`linattn check --mufu-tables`,
//! or `LINATTN_MUFU_TABLES`, both read by `exec::mufu_file`), the four forms the kernels
//! use take their results from here (`exec::alu::float_arith`); any other mode, form or
//! uncaptured index is unchanged.

use std::sync::OnceLock;

use crate::exec::float;
use crate::exec::numerics::Numerics;
use crate::ir::{FloatMode, Rounding, UnOp};

/// One MUFU function, captured through the PTX form that maps onto it alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MufuOp {
    /// `MUFU.EX2` at x = i/2^24 in [0, 1): T.
    Ex2,
    Rsqrt,
    Rcp,
    /// `MUFU.EX2` at x = −i/2^24 in (−1, 0]: U, the unit's results for negative x.
    Ex2Negative,
}

impl MufuOp {
    pub const ALL: [MufuOp; 4] = [MufuOp::Ex2, MufuOp::Rsqrt, MufuOp::Rcp, MufuOp::Ex2Negative];

    /// File stem and JSON key: `ex2`, `rsqrt`, `rcp`, `ex2neg`.
    pub fn name(self) -> &'static str {
        match self {
            MufuOp::Ex2 => "ex2",
            MufuOp::Rsqrt => "rsqrt",
            MufuOp::Rcp => "rcp",
            MufuOp::Ex2Negative => "ex2neg",
        }
    }

    pub fn from_name(name: &str) -> Option<MufuOp> {
        MufuOp::ALL.into_iter().find(|op| op.name() == name)
    }

    /// The PTX form the table is captured with (a bare MUFU instruction in SASS).
    pub fn capture_form(self) -> MufuForm {
        match self {
            MufuOp::Ex2 | MufuOp::Ex2Negative => MufuForm::Ex2Ftz,
            MufuOp::Rsqrt => MufuForm::RsqrtFtz,
            MufuOp::Rcp => MufuForm::RcpFtz,
        }
    }

    /// Entries of a full table: 2^24 (ex2, ex2neg, rsqrt) or 2^23 (rcp).
    pub fn full_entries(self) -> u32 {
        match self {
            MufuOp::Ex2 | MufuOp::Ex2Negative | MufuOp::Rsqrt => 1 << 24,
            MufuOp::Rcp => 1 << 23,
        }
    }

    /// The input whose result is entry `index`: i/2^24 (ex2), −i/2^24 (ex2neg; −0 at 0),
    /// 2^p·1.m (rsqrt), 1.m (rcp). All exact in f32.
    pub fn input(self, index: u32) -> f32 {
        debug_assert!(index < self.full_entries());
        match self {
            MufuOp::Ex2 => index as f32 / (1u32 << 24) as f32,
            MufuOp::Ex2Negative => -(index as f32 / (1u32 << 24) as f32),
            MufuOp::Rsqrt | MufuOp::Rcp => f32::from_bits((127 << 23) + index),
        }
    }

    /// The correctly rounded result at `input(index)`, the origin of the deviations. From
    /// the `libm` crate (pure Rust), so every machine computes the same bits.
    pub fn correctly_rounded(self, index: u32) -> f32 {
        let x = f64::from(self.input(index));
        match self {
            MufuOp::Ex2 | MufuOp::Ex2Negative => libm::exp2(x) as f32,
            MufuOp::Rsqrt => (1.0 / x.sqrt()) as f32,
            MufuOp::Rcp => 1.0 / self.input(index),
        }
    }
}

/// A PTX form the simulator predicts from a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MufuForm {
    Ex2Ftz,
    Ex2,
    RsqrtFtz,
    Rsqrt,
    RcpFtz,
}

impl MufuForm {
    pub const ALL: [MufuForm; 5] = [
        MufuForm::Ex2Ftz,
        MufuForm::Ex2,
        MufuForm::RsqrtFtz,
        MufuForm::Rsqrt,
        MufuForm::RcpFtz,
    ];

    pub fn ptx(self) -> &'static str {
        match self {
            MufuForm::Ex2Ftz => "ex2.approx.ftz.f32",
            MufuForm::Ex2 => "ex2.approx.f32",
            MufuForm::RsqrtFtz => "rsqrt.approx.ftz.f32",
            MufuForm::Rsqrt => "rsqrt.approx.f32",
            MufuForm::RcpFtz => "rcp.approx.ftz.f32",
        }
    }

    /// The `op` argument of `kernels/mufu_probe.cu` that evaluates this form.
    pub fn probe_code(self) -> i32 {
        self as i32
    }

    /// The table of the form's MUFU function (ex2: of x ≥ 0; [`MufuOp::Ex2Negative`] holds
    /// x < 0 where it was captured).
    pub fn op(self) -> MufuOp {
        match self {
            MufuForm::Ex2Ftz | MufuForm::Ex2 => MufuOp::Ex2,
            MufuForm::RsqrtFtz | MufuForm::Rsqrt => MufuOp::Rsqrt,
            MufuForm::RcpFtz => MufuOp::Rcp,
        }
    }

    /// The form of a simulated instruction, if a table predicts it.
    pub fn of(op: UnOp, mode: FloatMode) -> Option<MufuForm> {
        match (op, mode.ftz) {
            (UnOp::Ex2, true) => Some(MufuForm::Ex2Ftz),
            (UnOp::Ex2, false) => Some(MufuForm::Ex2),
            (UnOp::Rsqrt, true) => Some(MufuForm::RsqrtFtz),
            (UnOp::Rsqrt, false) => Some(MufuForm::Rsqrt),
            (UnOp::Rcp, true) if mode.rounding == Rounding::Approx => Some(MufuForm::RcpFtz),
            _ => None,
        }
    }
}

/// How `MUFU.EX2` turns the fraction of x into a table index: `bits` fraction bits kept,
/// by truncation (floor) or rounding to nearest (ties to even).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ex2Grid {
    pub bits: u32,
    pub round: bool,
}

impl Ex2Grid {
    /// The capture's own grid, used until a verification chooses another.
    pub const CAPTURED: Ex2Grid = Ex2Grid {
        bits: 24,
        round: false,
    };

    /// Every grid the verification tries: 20..=24 bits, truncated or rounded.
    pub fn all() -> Vec<Ex2Grid> {
        (20..=24)
            .flat_map(|bits| [false, true].map(|round| Ex2Grid { bits, round }))
            .collect()
    }

    /// `24-truncate`, `22-round`, ...
    pub fn name(self) -> String {
        format!(
            "{}-{}",
            self.bits,
            if self.round { "round" } else { "truncate" }
        )
    }

    pub fn parse(text: &str) -> Option<Ex2Grid> {
        let (bits, how) = text.split_once('-')?;
        let bits: u32 = bits.parse().ok().filter(|b| (20..=24).contains(b))?;
        let round = match how {
            "truncate" => false,
            "round" => true,
            _ => return None,
        };
        Some(Ex2Grid { bits, round })
    }

    /// x = n + f, f quantised: (n, table index). For x ≥ 0 (the negative table's |x| = m + g)
    /// the truncation is toward zero; an f that rounds up to 1 carries into n.
    fn split(self, x: f64) -> (f64, u32) {
        let n = x.floor();
        let scaled = (x - n) * f64::from(1u32 << self.bits); // exact: x has 24 bits
        let mut k = if self.round {
            scaled.round_ties_even()
        } else {
            scaled.floor()
        } as u32;
        let mut n = n;
        if k == 1 << self.bits {
            (n, k) = (n + 1.0, 0);
        }
        k <<= 24 - self.bits;
        (n, k)
    }
}

/// One MUFU function's table: the deviation (ulps) of each captured entry from the
/// correctly rounded result. A table may hold every `stride`-th entry only (the
/// simulator's own, shortened captures); the others are not predicted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MufuTable {
    pub op: MufuOp,
    pub stride: u32,
    pub deviations: Vec<i8>,
    /// ex2 only: how the fraction is quantised.
    pub grid: Ex2Grid,
    /// What captured it (device, driver, date): one line.
    pub source: String,
}

impl MufuTable {
    /// A table of `deviations`, entry k at index k·stride. Errors if they do not cover the
    /// op's index range exactly.
    pub fn new(op: MufuOp, stride: u32, deviations: Vec<i8>) -> Result<MufuTable, String> {
        let full = u64::from(op.full_entries());
        if stride == 0 || u64::from(stride) * deviations.len() as u64 != full {
            return Err(format!(
                "{} table: {} entries at stride {stride} do not cover its {full} indices",
                op.name(),
                deviations.len()
            ));
        }
        Ok(MufuTable {
            op,
            stride,
            deviations,
            grid: Ex2Grid::CAPTURED,
            source: String::new(),
        })
    }

    /// The table of the device results `bits` (entry k: the result at input(k·stride)).
    /// Errors if one is not within int8 ulps of the correctly rounded value.
    pub fn from_results(op: MufuOp, stride: u32, bits: &[u32]) -> Result<MufuTable, String> {
        let mut deviations = Vec::with_capacity(bits.len());
        for (k, &got) in bits.iter().enumerate() {
            let index = k as u32 * stride;
            let want = op.correctly_rounded(index).to_bits();
            let ulps = i64::from(got) - i64::from(want);
            let dev = i8::try_from(ulps).map_err(|_| {
                format!(
                    "{}({:e}) = {:#010x} is {ulps} ulps from the correctly rounded {:#010x}: \
                     outside a table's int8 range",
                    op.capture_form().ptx(),
                    op.input(index),
                    got,
                    want
                )
            })?;
            deviations.push(dev);
        }
        MufuTable::new(op, stride, deviations)
    }

    /// The captured result at table `index`, if captured.
    pub fn result_at(&self, index: u32) -> Option<f32> {
        if index % self.stride != 0 {
            return None;
        }
        let dev = *self.deviations.get((index / self.stride) as usize)?;
        let base = self.op.correctly_rounded(index).to_bits();
        Some(f32::from_bits(base.wrapping_add_signed(i32::from(dev))))
    }

    /// How many entries deviate by −2, −1, 0, +1, +2 ulps, and by more (either way).
    pub fn histogram(&self) -> ([u64; 5], u64) {
        let mut counts = [0u64; 5];
        let mut other = 0;
        for &d in &self.deviations {
            match usize::try_from(i32::from(d) + 2) {
                Ok(i) if i < 5 => counts[i] += 1,
                _ => other += 1,
            }
        }
        (counts, other)
    }

    /// The MUFU unit (the table's capture form) at `x`, on the table's own grid. The
    /// negative ex2 table predicts x ≤ 0 only (None for x > 0); `MufuTables` chooses which
    /// ex2 table a sign goes to.
    pub fn mufu(&self, x: f32) -> Option<f32> {
        self.mufu_on(x, self.grid)
    }

    /// As [`MufuTable::mufu`], ex2 quantising on `grid` (ignored by rsqrt and rcp).
    pub fn mufu_on(&self, x: f32, grid: Ex2Grid) -> Option<f32> {
        let x = float::flush(x);
        if x.is_nan() {
            return Some(f32::NAN);
        }
        match self.op {
            MufuOp::Ex2 | MufuOp::Ex2Negative => self.ex2(x, grid),
            MufuOp::Rsqrt => self.rsqrt(x),
            MufuOp::Rcp => self.rcp(x),
        }
    }

    /// T (ex2): 2^x = 2^n · T[f], x = n + f. U (ex2neg), sign-magnitude: 2^-|x| = 2^-m · U[g],
    /// |x| = m + g (toward zero when truncating; a g rounding up to 1 carries into m), and
    /// no prediction for x > 0. Both: f or g quantised on `grid`, the same cut-offs and flush.
    fn ex2(&self, x: f32, grid: Ex2Grid) -> Option<f32> {
        let negative_table = self.op == MufuOp::Ex2Negative;
        if negative_table && x > 0.0 {
            return None;
        }
        if x == f32::INFINITY || x >= 128.0 {
            return Some(f32::INFINITY);
        }
        if x == f32::NEG_INFINITY || x < -160.0 {
            return Some(0.0);
        }
        let (n, index) = if negative_table {
            let (m, index) = grid.split(-f64::from(x));
            (-m, index)
        } else {
            grid.split(f64::from(x))
        };
        Some(scale(self.result_at(index)?, n as i32))
    }

    fn rsqrt(&self, x: f32) -> Option<f32> {
        if x == 0.0 {
            return Some(if x.is_sign_negative() {
                f32::NEG_INFINITY
            } else {
                f32::INFINITY
            });
        }
        if x < 0.0 {
            return Some(f32::NAN);
        }
        if x == f32::INFINITY {
            return Some(0.0);
        }
        let e = (x.to_bits() >> 23) as i32 - 127;
        let parity = e.rem_euclid(2);
        let index = ((parity as u32) << 23) | (x.to_bits() & 0x7f_ffff);
        Some(scale(self.result_at(index)?, -(e - parity) / 2))
    }

    fn rcp(&self, x: f32) -> Option<f32> {
        let sign = x.to_bits() & 0x8000_0000;
        let magnitude = if x == 0.0 {
            f32::INFINITY
        } else if x.is_infinite() {
            0.0
        } else {
            let e = ((x.to_bits() >> 23) & 0xff) as i32 - 127;
            scale(self.result_at(x.to_bits() & 0x7f_ffff)?, -e)
        };
        Some(f32::from_bits(magnitude.to_bits() | sign))
    }
}

/// t · 2^n with the unit's flush: a subnormal result is +0, an overflow +inf.
fn scale(t: f32, n: i32) -> f32 {
    let r = f64::from(t) * 2f64.powi(n.clamp(-300, 300));
    if r < f64::from(f32::MIN_POSITIVE) {
        0.0
    } else {
        r as f32 // exact in the normal range; inf beyond it
    }
}

/// The tables a simulator predicts the five forms from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MufuTables {
    /// ex2 of x ≥ 0 (and of every x when `ex2_negative` is None). Its grid applies to both.
    pub ex2: MufuTable,
    pub rsqrt: MufuTable,
    pub rcp: MufuTable,
    /// ex2 of x < 0 (U), where captured. None (a directory without `ex2neg.mufu`, like the
    /// H100's of 2026-11-26): negative x predicted as 2^n · T\[f\], n = floor(x), as before.
    pub ex2_negative: Option<MufuTable>,
}

impl MufuTables {
    /// The table of `op`; None for an uncaptured `ex2neg`.
    pub fn table(&self, op: MufuOp) -> Option<&MufuTable> {
        match op {
            MufuOp::Ex2 => Some(&self.ex2),
            MufuOp::Rsqrt => Some(&self.rsqrt),
            MufuOp::Rcp => Some(&self.rcp),
            MufuOp::Ex2Negative => self.ex2_negative.as_ref(),
        }
    }

    /// `MUFU.EX2` at `x` on `grid`: x < 0 (after the input flush: −0 and negative subnormals
    /// are x ≥ 0) from the negative table where loaded, everything else from `ex2`.
    pub fn ex2_mufu(&self, x: f32, grid: Ex2Grid) -> Option<f32> {
        match &self.ex2_negative {
            Some(negative) if float::flush(x) < 0.0 => negative.mufu_on(x, grid),
            _ => self.ex2.mufu_on(x, grid),
        }
    }

    /// For a log line: where ex2 of x < 0 comes from.
    pub fn ex2_negative_note(&self) -> &'static str {
        if self.ex2_negative.is_some() {
            "ex2 of x < 0 from ex2neg.mufu"
        } else {
            "no ex2neg.mufu: ex2 of x < 0 from ex2.mufu as 2^floor(x)·T[f]"
        }
    }

    /// `form` at `x` as the SASS computes it, or None where the table lacks the entry.
    pub fn predict(&self, form: MufuForm, x: f32) -> Option<f32> {
        self.predict_on(form, x, self.ex2.grid)
    }

    /// As [`MufuTables::predict`], ex2 quantising on `grid`.
    pub fn predict_on(&self, form: MufuForm, x: f32, grid: Ex2Grid) -> Option<f32> {
        match form {
            // FSETP.GEU x, -126; FMUL x/2; MUFU.EX2; FMUL y·y (round to nearest, no ftz).
            MufuForm::Ex2 if x < -126.0 => {
                let y = self.ex2_mufu(x * 0.5, grid)?;
                Some(y * y)
            }
            MufuForm::Ex2 | MufuForm::Ex2Ftz => self.ex2_mufu(x, grid),
            // FSETP.GEU |x|, 2^-126; @!P FMUL x·2^24; MUFU.RSQ; @!P FMUL r·2^12 (both exact).
            MufuForm::Rsqrt if x != 0.0 && x.abs() < f32::MIN_POSITIVE => {
                Some(self.rsqrt.mufu(x * 16_777_216.0)? * 4096.0)
            }
            MufuForm::Rsqrt | MufuForm::RsqrtFtz => self.rsqrt.mufu(x),
            MufuForm::RcpFtz => self.rcp.mufu(x),
        }
    }

    /// A simulated unary instruction: the table's result for the forms it predicts (with
    /// `.sat` applied), else the simulator's own (`float::unary`).
    pub fn unary(&self, op: UnOp, x: f32, mode: FloatMode) -> f32 {
        MufuForm::of(op, mode)
            .and_then(|form| self.predict(form, x))
            .map_or_else(|| float::unary(op, x, mode), |r| float::finish(r, mode))
    }
}

static INSTALLED: OnceLock<MufuTables> = OnceLock::new();

/// Makes `tables` the ones every `Numerics::AsCompiled` device of this process uses. Once
/// per process: installing other tables after is an error.
pub fn install(tables: MufuTables) -> Result<(), String> {
    match INSTALLED.set(tables) {
        Ok(()) => Ok(()),
        Err(tables) if INSTALLED.get() == Some(&tables) => Ok(()),
        Err(_) => Err("other MUFU tables are already in use in this process".into()),
    }
}

/// The installed tables, where a device in `numerics` uses them (as-compiled only).
pub fn for_numerics(numerics: Numerics) -> Option<&'static MufuTables> {
    match numerics {
        Numerics::AsCompiled => INSTALLED.get(),
        _ => None,
    }
}
