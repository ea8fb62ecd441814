//! Conversions, in the exact PTX forms the linattn kernels use
//! (shared/reference/ptx-census.md): `cvt` to and from 16-bit floats and the packing order
//! of the packed and vector-`mov` forms, float → integer saturation, float → integral float
//! roundings and clamping, large integers → f32.
//!
//! Each test runs a snippet once per thread on per-thread inputs (see
//! `common::lanes::run_lanes`) and checks every lane against a reference written here from the
//! PTX ISA, independently of the simulator's code.

mod common;

use common::ieee::{f, f16_value};
use common::lanes::{run_lanes, run_lanes_f32};

// ---------------------------------------------------------------------------------------
// cvt to 16-bit floats
// ---------------------------------------------------------------------------------------

const CVT_F16: &str = "
	mov.b32 	%f1, %r1;
	cvt.rn.f16.f32 	%rs1, %f1;
	cvt.u32.u16 	%r4, %rs1;";

const CVT_BF16: &str = "
	mov.b32 	%f1, %r1;
	cvt.rn.bf16.f32 	%rs1, %f1;
	cvt.u32.u16 	%r4, %rs1;";

fn single(values: &[f32]) -> Vec<[f32; 3]> {
    values.iter().map(|&v| [v, 0.0, 0.0]).collect()
}

/// `snippet` turns an f32 NaN into a 16-bit NaN: all `exponent` bits set, some `mantissa`
/// bit set.
fn assert_nan_stays_nan(snippet: &str, exponent: u32, mantissa: u32) {
    let nan = run_lanes_f32(snippet, &single(&[f32::NAN]))[0];
    assert!(
        nan & exponent == exponent && nan & mantissa != 0,
        "NaN → {nan:#06x}"
    );
}

#[test]
fn cvt_rn_f16_f32_rounds_to_nearest_even() {
    let p = |e: i32| 2f32.powi(e);
    let cases: &[(f32, u32)] = &[
        (1.0, 0x3c00),
        (-2.0, 0xc000),
        (0.0, 0x0000),
        (-0.0, 0x8000),
        (65504.0, 0x7bff),
        (65519.0, 0x7bff),
        (65520.0, 0x7c00), // halfway to 2^16: even is infinity
        (1e6, 0x7c00),
        (f32::INFINITY, 0x7c00),
        (f32::NEG_INFINITY, 0xfc00),
        (1.0 + p(-11), 0x3c00),          // tie: even mantissa 0
        (1.0 + 3.0 * p(-11), 0x3c02),    // tie: even mantissa 2
        (1.0 + p(-11) + p(-20), 0x3c01), // just above the tie
        (p(-14), 0x0400),                // smallest normal
        (p(-24), 0x0001),                // smallest subnormal
        (p(-25), 0x0000),                // tie with zero: even is zero
        (1.5 * p(-24), 0x0002),          // tie between 1 and 2 ulps
        (p(-25) + p(-30), 0x0001),
        (1e-10, 0x0000),
        (-1e-10, 0x8000),
    ];
    let inputs: Vec<f32> = cases.iter().map(|c| c.0).collect();
    let got = run_lanes_f32(CVT_F16, &single(&inputs));
    for (&(x, want), &g) in cases.iter().zip(&got) {
        assert_eq!(g, want, "cvt.rn.f16.f32 of {x:e}: {g:#06x} != {want:#06x}");
    }
    assert_nan_stays_nan(CVT_F16, 0x7c00, 0x03ff);
}

#[test]
fn cvt_rn_f16_f32_is_the_nearest_value_on_random_inputs() {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let inputs: Vec<f32> = (0..1024)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            // magnitudes 2^-26 .. 2^17: subnormal, normal and overflowing f16
            let m = 1.0 + (state >> 40) as f32 / (1u64 << 24) as f32;
            let e = (state % 44) as i32 - 26;
            let signed = if state & (1 << 20) != 0 { -m } else { m };
            signed * 2f32.powi(e)
        })
        .collect();
    let got = run_lanes_f32(CVT_F16, &single(&inputs));
    for (&x, &bits) in inputs.iter().zip(&got) {
        let bits = bits as u16;
        let r = f16_value(bits);
        let x = f64::from(x);
        if r.is_infinite() {
            assert!(x.abs() >= 65520.0, "{x:e} overflowed to {bits:#06x}");
            continue;
        }
        // Neighbours on either side (same sign, magnitude ±1 ulp).
        let mag = bits & 0x7fff;
        let sign = bits & 0x8000;
        let up = f16_value(sign | (mag + 1));
        let error = (x - r).abs();
        assert!(
            error <= (x - up).abs(),
            "{x:e} → {bits:#06x}, next is nearer"
        );
        if mag > 0 {
            let down = f16_value(sign | (mag - 1));
            assert!(
                error <= (x - down).abs(),
                "{x:e} → {bits:#06x}, previous is nearer"
            );
            let tie = error == (x - down).abs() || error == (x - up).abs();
            assert!(!tie || mag % 2 == 0, "{x:e}: tie not rounded to even");
        }
    }
}

/// bf16 round-to-nearest-even as integer arithmetic on the f32 bits (finite inputs).
fn bf16_reference(x: f32) -> u32 {
    let bits = x.to_bits();
    (bits + 0x7fff + ((bits >> 16) & 1)) >> 16
}

#[test]
fn cvt_rn_bf16_f32_rounds_to_nearest_even() {
    let p = |e: i32| 2f32.powi(e);
    let cases: &[(f32, u32)] = &[
        (1.0, 0x3f80),
        (-1.0, 0xbf80),
        (1.0 + p(-8), 0x3f80),       // tie: even
        (1.0 + 3.0 * p(-8), 0x3f82), // tie: even
        (1.0 + p(-8) + p(-20), 0x3f81),
        (f32::MAX, 0x7f80), // rounds up to infinity
        (-f32::MAX, 0xff80),
        (f32::INFINITY, 0x7f80),
        (f(1), 0x0000),       // tiny subnormal
        (f(0x8000), 0x0000),  // tie with zero
        (f(0x18000), 0x0002), // tie between 1 and 2
        (-0.0, 0x8000),
    ];
    let mut inputs: Vec<f32> = cases.iter().map(|c| c.0).collect();
    let mut state = 7u32;
    for _ in 0..500 {
        state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        let x = f(state);
        if x.is_finite() {
            inputs.push(x);
        }
    }
    let got = run_lanes_f32(CVT_BF16, &single(&inputs));
    for (k, (&x, &g)) in inputs.iter().zip(&got).enumerate() {
        let want = cases.get(k).map_or_else(|| bf16_reference(x), |c| c.1);
        assert_eq!(g, want, "cvt.rn.bf16.f32 of {x:e} ({:#010x})", x.to_bits());
    }
    assert_nan_stays_nan(CVT_BF16, 0x7f80, 0x7f);
}

#[test]
fn packed_cvt_puts_the_first_source_in_the_upper_half() {
    let f16x2 = "
	mov.b32 	%f1, %r1;
	mov.b32 	%f2, %r2;
	cvt.rn.f16x2.f32 	%r4, %f1, %f2;";
    let bf16x2 = "
	mov.b32 	%f1, %r1;
	mov.b32 	%f2, %r2;
	cvt.rn.bf16x2.f32 	%r4, %f1, %f2;";
    let inputs = [
        [1.0, 2.0, 0.0],
        [-0.5, 65520.0, 0.0],
        [3.0, 1.0 + 2f32.powi(-11), 0.0],
    ];
    assert_eq!(
        run_lanes_f32(f16x2, &inputs),
        vec![0x3c00_4000, 0xb800_7c00, 0x4200_3c00]
    );
    let inputs = [[1.0, 2.0, 0.0], [-0.5, 1.0 + 3.0 * 2f32.powi(-8), 0.0]];
    assert_eq!(
        run_lanes_f32(bf16x2, &inputs),
        vec![0x3f80_4000, 0xbf00_3f82]
    );
}

#[test]
fn mov_b32_packs_and_unpacks_halves_low_first() {
    // mov.b32 {%rs1, %rs2}, %r1: %rs1 = low half. mov.b32 %r4, {%rs2, %rs1}: swaps them.
    let swap = "
	mov.b32 	{%rs1, %rs2}, %r1;
	mov.b32 	%r4, {%rs2, %rs1};
	cvt.u64.u16 	%rd20, %rs1;";
    let (out32, out64) = run_lanes(swap, &[[0x1234_5678, 0, 0], [0xbeef_0001, 0, 0]]);
    assert_eq!(out32, vec![0x5678_1234, 0x0001_beef]);
    assert_eq!(out64, vec![0x5678, 0x0001]);
}

#[test]
fn cvt_f32_f16_widens_exactly() {
    let snippet = "
	cvt.u16.u32 	%rs1, %r1;
	cvt.f32.f16 	%f1, %rs1;
	mov.b32 	%r4, %f1;";
    let halves: Vec<u32> = vec![0x3c00, 0x0001, 0x03ff, 0x7bff, 0xfc00, 0x8000, 0x3555];
    let inputs: Vec<[u32; 3]> = halves.iter().map(|&h| [h, 0, 0]).collect();
    let (got, _) = run_lanes(snippet, &inputs);
    for (&h, &g) in halves.iter().zip(&got) {
        assert_eq!(
            f64::from(f(g)),
            f16_value(h as u16),
            "cvt.f32.f16 of {h:#06x}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// float → integer and float → integral float
// ---------------------------------------------------------------------------------------

#[test]
fn cvt_rzi_s32_f32_truncates_saturates_and_maps_nan_to_zero() {
    let snippet = "
	mov.b32 	%f1, %r1;
	cvt.rzi.s32.f32 	%r4, %f1;";
    let cases: &[(f32, i32)] = &[
        (2.7, 2),
        (-2.7, -2),
        (-0.5, 0),
        (2_147_483_520.0, 2_147_483_520), // largest f32 below 2^31
        (2_147_483_648.0, i32::MAX),
        (3e9, i32::MAX),
        (-2_147_483_648.0, i32::MIN),
        (-3e9, i32::MIN),
        (f32::INFINITY, i32::MAX),
        (f32::NEG_INFINITY, i32::MIN),
        (f32::NAN, 0),
        (-f32::NAN, 0),
    ];
    let inputs: Vec<f32> = cases.iter().map(|c| c.0).collect();
    let got = run_lanes_f32(snippet, &single(&inputs));
    for (&(x, want), &g) in cases.iter().zip(&got) {
        assert_eq!(g as i32, want, "cvt.rzi.s32.f32 of {x}");
    }
}

#[test]
fn cvt_integral_float_roundings() {
    let form = |rounding: &str| {
        format!(
            "
	mov.b32 	%f1, %r1;
	cvt.{rounding}.f32.f32 	%f2, %f1;
	mov.b32 	%r4, %f2;"
        )
    };
    let xs = [2.5f32, 3.5, -2.5, -0.3, 1.7, -1.7, 8_388_609.0];
    let expect = |rounding: &str, x: f32| -> f32 {
        match rounding {
            "rni" => x.round_ties_even(),
            "rzi" => x.trunc(),
            "rmi" => x.floor(),
            _ => unreachable!(),
        }
    };
    for rounding in ["rni", "rzi", "rmi"] {
        let got = run_lanes_f32(&form(rounding), &single(&xs));
        for (&x, &g) in xs.iter().zip(&got) {
            assert_eq!(
                f(g).to_bits(),
                expect(rounding, x).to_bits(),
                "cvt.{rounding}.f32.f32 of {x}"
            );
        }
    }
    // rni: ties to even, and the sign of zero survives.
    let got = run_lanes_f32(&form("rni"), &single(&[-0.3]));
    assert_eq!(got[0], 0x8000_0000, "-0.3 rounds to -0.0");
}

#[test]
fn cvt_sat_f32_f32_clamps_to_unit_interval() {
    let snippet = "
	mov.b32 	%f1, %r1;
	cvt.sat.f32.f32 	%f2, %f1;
	mov.b32 	%r4, %f2;";
    let cases: &[(f32, f32)] = &[
        (0.25, 0.25),
        (1.5, 1.0),
        (-0.5, 0.0),
        (f32::NAN, 0.0),
        (f32::INFINITY, 1.0),
    ];
    let inputs: Vec<f32> = cases.iter().map(|c| c.0).collect();
    let got = run_lanes_f32(snippet, &single(&inputs));
    for (&(x, want), &g) in cases.iter().zip(&got) {
        assert_eq!(f(g).to_bits(), want.to_bits(), "cvt.sat.f32.f32 of {x}");
    }
}

#[test]
fn cvt_rn_f32_s32_rounds_large_integers() {
    let snippet = "
	cvt.rn.f32.s32 	%f1, %r1;
	mov.b32 	%r4, %f1;";
    let xs: [i32; 5] = [16_777_217, 16_777_219, -16_777_217, i32::MAX, i32::MIN];
    let inputs: Vec<[u32; 3]> = xs.iter().map(|&x| [x as u32, 0, 0]).collect();
    let (got, _) = run_lanes(snippet, &inputs);
    let want = [
        16_777_216.0f32,
        16_777_220.0,
        -16_777_216.0,
        2_147_483_648.0,
        -2_147_483_648.0,
    ];
    for ((&x, &g), &w) in xs.iter().zip(&got).zip(&want) {
        assert_eq!(f(g), w, "cvt.rn.f32.s32 of {x}");
    }
}
