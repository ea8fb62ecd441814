//! Warp collectives once every lane they need has arrived: `shfl.sync` and
//! `mma.sync.aligned.m16n8k16` (the fragment layout of the PTX ISA, "Matrix Fragments for
//! mma.m16n8k16 with floating point type").

use super::float;
use super::mma_accumulate::Product;
use super::warp::{each, Lanes32, Uniforms, Warp, LANES};
use crate::ir::{MmaInput, Reg, ShflMode, Src};

/// Result of `shfl.sync` for lane `lane`: the source lane and whether it is in range.
#[inline]
pub fn shfl_source(mode: ShflMode, lane: u32, b: u32, c: u32) -> (u32, bool) {
    let b = b & 0x1f;
    let clamp = c & 0x1f;
    let segment = (c >> 8) & 0x1f;
    let min_lane = lane & segment;
    let max_lane = min_lane | (clamp & !segment);
    let (j, ok) = match mode {
        ShflMode::Up => {
            // The ISA bounds .up below by maxLane (not minLane): with CUDA's
            // `__shfl_up_sync` (cval = 0) the two coincide; a nonzero clamp raises the bound.
            let j = lane as i32 - b as i32;
            (j, j >= max_lane as i32)
        }
        ShflMode::Down => {
            let j = lane + b;
            (j as i32, j <= max_lane)
        }
        ShflMode::Bfly => {
            let j = lane ^ b;
            (j as i32, j <= max_lane)
        }
        ShflMode::Idx => {
            let j = min_lane | (b & !segment);
            (j as i32, j <= max_lane)
        }
    };
    if ok {
        (j as u32, true)
    } else {
        (lane, false)
    }
}

/// Executes `shfl.sync` for `lanes` (all in the member mask, all arrived). Returns the first
/// lane that read from a lane outside `members`, if any (undefined value on hardware).
#[allow(clippy::too_many_arguments)]
pub fn shfl(
    w: &mut Warp,
    mode: ShflMode,
    d: Reg,
    p: Option<Reg>,
    a: &Src,
    b: &Src,
    c: &Src,
    lanes: u32,
    members: u32,
    u: &Uniforms,
) -> Option<(u32, u32)> {
    let (va, vb, vc) = (w.read32(a, u), w.read32(b, u), w.read32(c, u));
    let mut out: Lanes32 = [0; LANES];
    let mut valid = 0u32;
    let mut stray = None;
    for lane in 0..LANES as u32 {
        if lanes >> lane & 1 == 0 {
            continue;
        }
        let l = lane as usize;
        let (src, ok) = shfl_source(mode, lane, vb[l], vc[l]);
        if ok && members >> src & 1 == 0 && stray.is_none() {
            stray = Some((lane, src));
        }
        out[l] = va[src as usize];
        valid |= u32::from(ok) << lane;
    }
    w.write32(d, &out, lanes);
    if let Some(p) = p {
        w.write_pred(p, valid, lanes);
    }
    stray
}

/// D = A·B + C for the 16×8×16 tile spread over the warp's 32 lanes.
///
/// The product of two 16-bit floats is exact in f64 (with its operands' exponents, which
/// the H100 aligns it by); the 16 products of a row·column and C are summed by the launch's
/// mma model (`exec::numerics::MmaModel`, `exec::mma_accumulate`):
/// in f64 and rounded once, or by a truncating tensor-core model.
pub fn mma(
    w: &mut Warp,
    input: MmaInput,
    d: &[Reg; 4],
    a: &[Src; 4],
    b: &[Src; 2],
    c: &[Src; 4],
    u: &Uniforms,
) {
    let widen = |bits: u32| -> f32 {
        match input {
            MmaInput::F16 => float::f16_bits_to_f32(bits as u16),
            MmaInput::Bf16 => float::bf16_bits_to_f32(bits as u16),
        }
    };
    // The least normal exponent of the input type: where a subnormal operand aligns.
    let emin = match input {
        MmaInput::F16 => -14,
        MmaInput::Bf16 => -126,
    };
    let ra: [Lanes32; 4] = each(|k| w.read32(&a[k], u));
    let rb: [Lanes32; 2] = each(|k| w.read32(&b[k], u));
    let rc: [Lanes32; 4] = each(|k| w.read32(&c[k], u));
    // A as [row][k]; B transposed, as [n][k], so both operands of a dot product are rows.
    let mut ma = [[0f32; 16]; 16];
    let mut mbt = [[0f32; 16]; 8];
    for lane in 0..LANES {
        let (g, t) = (lane / 4, lane % 4);
        // Register i/2 holds elements i (low half) and i+1.
        for (r, reg) in ra.iter().enumerate() {
            let (lo, hi) = (widen(reg[lane] & 0xffff), widen(reg[lane] >> 16));
            let row = if r % 2 == 0 { g } else { g + 8 };
            let col = 2 * t + if r >= 2 { 8 } else { 0 };
            ma[row][col] = lo;
            ma[row][col + 1] = hi;
        }
        for (r, reg) in rb.iter().enumerate() {
            let k = 2 * t + 8 * r;
            mbt[g][k] = widen(reg[lane] & 0xffff);
            mbt[g][k + 1] = widen(reg[lane] >> 16);
        }
    }
    let mut out: [Lanes32; 4] = [[0; LANES]; 4];
    for lane in 0..LANES {
        let (g, t) = (lane / 4, lane % 4);
        for (i, reg) in out.iter_mut().enumerate() {
            let row = if i < 2 { g } else { g + 8 };
            let col = 2 * t + (i & 1);
            let (a_row, b_col) = (&ma[row], &mbt[col]);
            let products: [Product; 16] =
                std::array::from_fn(|k| Product::new(a_row[k], b_col[k], emin));
            let c = f32::from_bits(rc[i][lane]);
            let d = u.mma.accumulate(c, &products);
            reg[lane] = d.to_bits();
        }
    }
    for (k, reg) in d.iter().enumerate() {
        w.write32(*reg, &out[k], u32::MAX);
    }
}
