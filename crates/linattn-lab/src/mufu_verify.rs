//! `linattn mufu`'s verification: seeded random inputs over the range each form is used on,
//! the device's bits against the tables' prediction, counted per input class and (for ex2)
//! per quantisation grid. A table that predicts every input is the hypothesis confirmed;
//! mismatches say which inputs it misses.

use std::collections::BTreeMap;

use linattn_core::SeededRng;
use linattn_cuda::mufu_probe::table::{Ex2Grid, MufuForm, MufuOp, MufuTables};
use serde::Serialize;

/// Mismatches kept as examples per form, grid and class.
const EXAMPLES: usize = 4;

/// One class of inputs under one prediction.
#[derive(Debug, Default, Clone, Serialize)]
pub struct ClassCount {
    /// Inputs whose table entry was captured (all of them with a full table).
    pub checked: u64,
    /// Inputs whose entry a shortened table lacks: not predicted.
    pub uncovered: u64,
    pub mismatches: u64,
    /// (input, device, predicted) bits of the first few mismatches, hex.
    pub examples: Vec<[String; 3]>,
}

/// One prediction (an ex2 grid, or the only one of rsqrt and rcp) of one form.
#[derive(Debug, Clone, Serialize)]
pub struct VariantResult {
    /// `24-truncate` etc. for ex2, `mantissa` for rsqrt and rcp.
    pub variant: String,
    pub classes: BTreeMap<&'static str, ClassCount>,
}

impl VariantResult {
    pub fn mismatches(&self) -> u64 {
        self.classes.values().map(|c| c.mismatches).sum()
    }

    pub fn checked(&self) -> u64 {
        self.classes.values().map(|c| c.checked).sum()
    }
}

/// One form's verification.
#[derive(Debug, Clone, Serialize)]
pub struct FormResult {
    pub form: &'static str,
    pub samples: usize,
    pub variants: Vec<VariantResult>,
}

/// The input class a verification counts `x` under: `special` (zero, subnormal, inf, NaN),
/// then for ex2 `grid` (x·2^24 an integer, what a 24-bit table holds) or `fine` (more than
/// 24 fraction bits) for x > 0, and `grid negative`, `fine negative` for x < 0 (the sign
/// decides which ex2 table predicts x: `ex2neg` where captured); for rsqrt and rcp `normal`.
pub fn class(op: MufuOp, x: f32) -> &'static str {
    if !x.is_normal() {
        return "special";
    }
    match op {
        MufuOp::Ex2 | MufuOp::Ex2Negative => {
            let grid = (f64::from(x) * f64::from(1u32 << 24)).fract() == 0.0;
            match (grid, x < 0.0) {
                (true, false) => "grid",
                (false, false) => "fine",
                (true, true) => "grid negative",
                (false, true) => "fine negative",
            }
        }
        MufuOp::Rsqrt | MufuOp::Rcp => "normal",
    }
}

/// `count` seeded inputs for `form` (f32 bits). A quarter to a half are built from the
/// entries a table of `stride` captured, so a shortened table still checks many; the rest
/// spread over the range that matters (see each arm).
pub fn samples(form: MufuForm, count: usize, stride: u32, seed: u64) -> Vec<u32> {
    let op = form.op();
    let mut rng = SeededRng::new(seed ^ (form.probe_code() as u64).wrapping_mul(0x9e37_79b9));
    let entries = op.full_entries() / stride;
    let pick = |rng: &mut SeededRng, below: u32| (rng.next_u64() % u64::from(below)) as u32;
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        let r = rng.next_u64();
        let sign = if r & (1 << 40) != 0 {
            0x8000_0000u32
        } else {
            0
        };
        let random_bits = (r >> 8) as u32;
        let captured = pick(&mut rng, entries) * stride;
        let x: f32 = match (op, r % 8) {
            // x = n + f for a captured f and n in [-127, 127].
            (MufuOp::Ex2, 0 | 1) => {
                let n = f64::from(pick(&mut rng, 255) as i32 - 127);
                (n + f64::from(op.input(captured))) as f32
            }
            // More than 24 fraction bits: |x| < 2^-8 between two captured fractions.
            (MufuOp::Ex2, 2 | 3) => {
                let low = (entries >> 8).max(1);
                let i = pick(&mut rng, low) * stride;
                let u = f64::from(1 + pick(&mut rng, 255)) / 256.0;
                let x = ((f64::from(i) + u) / f64::from(1u32 << 24)) as f32;
                f32::from_bits(x.to_bits() | sign)
            }
            // |x| in [2^-30, 2^8), either sign.
            (MufuOp::Ex2, 4 | 5) => {
                let exponent = 97 + pick(&mut rng, 38);
                f32::from_bits(sign | exponent << 23 | (random_bits & 0x7f_ffff))
            }
            // Where ex2.approx.f32 squares a MUFU.EX2 of x/2: results down to subnormal.
            (MufuOp::Ex2, 6) => -(120.0 + 30.0 * rng.uniform()) as f32,
            // rsqrt: a captured mantissa and parity at an exponent of the same parity.
            (MufuOp::Rsqrt, 0..=3) => {
                let parity = (captured >> 23) as i32;
                let e = (2 * (pick(&mut rng, 126) as i32 - 63) + parity).clamp(-126, 127);
                f32::from_bits(((e + 127) as u32) << 23 | (captured & 0x7f_ffff))
            }
            (MufuOp::Rsqrt, 4 | 5) => normal(random_bits),
            (MufuOp::Rsqrt, 6) => -normal(random_bits),
            // rcp: a captured mantissa at any exponent, either sign.
            (MufuOp::Rcp, 0..=3) => {
                let e = pick(&mut rng, 254) + 1;
                f32::from_bits(sign | e << 23 | captured)
            }
            (MufuOp::Rcp, 4 | 5) => f32::from_bits(sign | normal(random_bits).to_bits()),
            // |x| >= 2^125: results near and below the smallest normal.
            (MufuOp::Rcp, 6) => {
                f32::from_bits(sign | (252 + pick(&mut rng, 2)) << 23 | random_bits & 0x7f_ffff)
            }
            // Zeros, subnormals, infinities, NaN and any bits at all.
            _ => special(pick(&mut rng, 6), sign, random_bits),
        };
        out.push(x.to_bits());
    }
    out
}

/// A positive normal from random bits.
fn normal(bits: u32) -> f32 {
    let e = 1 + (bits >> 23) % 254;
    f32::from_bits(e << 23 | (bits & 0x7f_ffff))
}

fn special(which: u32, sign: u32, bits: u32) -> f32 {
    f32::from_bits(match which {
        0 => sign,
        1 | 2 => sign | (bits & 0x7f_ffff).max(1),
        3 => sign | 0x7f80_0000,
        4 => 0x7fc0_0000 | (bits & 0x3f_ffff),
        _ => bits | sign,
    })
}

/// Whether `device` and `predicted` are the same result (every NaN is one result).
fn same(device: u32, predicted: f32) -> bool {
    let d = f32::from_bits(device);
    (d.is_nan() && predicted.is_nan()) || device == predicted.to_bits()
}

/// Counts `device` (the bits `form` gave at `inputs`) against the tables, per grid for ex2
/// (negative x from the `ex2neg` table where the tables hold one: `MufuTables::predict_on`).
pub fn verify(tables: &MufuTables, form: MufuForm, inputs: &[u32], device: &[u32]) -> FormResult {
    let op = form.op();
    let grids: Vec<Option<Ex2Grid>> = match op {
        MufuOp::Ex2 | MufuOp::Ex2Negative => Ex2Grid::all().into_iter().map(Some).collect(),
        MufuOp::Rsqrt | MufuOp::Rcp => vec![None],
    };
    let variants = grids
        .into_iter()
        .map(|grid| {
            let mut classes: BTreeMap<&'static str, ClassCount> = BTreeMap::new();
            for (&x, &got) in inputs.iter().zip(device) {
                let x = f32::from_bits(x);
                let count = classes.entry(class(op, x)).or_default();
                let predicted = match grid {
                    Some(g) => tables.predict_on(form, x, g),
                    None => tables.predict(form, x),
                };
                match predicted {
                    None => count.uncovered += 1,
                    Some(p) => {
                        count.checked += 1;
                        if !same(got, p) {
                            count.mismatches += 1;
                            if count.examples.len() < EXAMPLES {
                                count.examples.push([
                                    format!("{:#010x}", x.to_bits()),
                                    format!("{got:#010x}"),
                                    format!("{:#010x}", p.to_bits()),
                                ]);
                            }
                        }
                    }
                }
            }
            VariantResult {
                variant: grid.map_or_else(|| "mantissa".into(), Ex2Grid::name),
                classes,
            }
        })
        .collect();
    FormResult {
        form: form.ptx(),
        samples: inputs.len(),
        variants,
    }
}

/// The ex2 grid that predicts the ex2 forms best: fewest mismatches over `results`, ties
/// to the captured grid, then to more bits.
pub fn best_ex2_grid(results: &[FormResult]) -> Ex2Grid {
    let mut best = (u64::MAX, Ex2Grid::CAPTURED);
    let mut grids = Ex2Grid::all();
    grids.sort_by_key(|g| (*g != Ex2Grid::CAPTURED, std::cmp::Reverse(g.bits), g.round));
    for grid in grids {
        let name = grid.name();
        let total: u64 = results
            .iter()
            .flat_map(|r| &r.variants)
            .filter(|v| v.variant == name)
            .map(VariantResult::mismatches)
            .sum();
        if total < best.0 {
            best = (total, grid);
        }
    }
    best.1
}
