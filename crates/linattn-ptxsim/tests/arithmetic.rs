//! Instruction semantics worth pinning, in the exact PTX forms the linattn kernels use
//! (shared/reference/ptx-census.md): 16-bit conversions and their packing order, float →
//! integer saturation, fused and directed-rounding FMA, IEEE division, unordered
//! comparisons, shifts, widening multiplies, selects and bit-field insert.
//!
//! Each test runs a snippet once per thread on per-thread inputs (see
//! `common::lanes::run_lanes`) and checks every lane against a reference written here from the
//! PTX ISA, independently of the simulator's code.

mod common;

use std::cmp::Ordering;

use common::lanes::{run_lanes, run_lanes_f32};

fn f(bits: u32) -> f32 {
    f32::from_bits(bits)
}

fn next_up(x: f32) -> f32 {
    if x.is_nan() || x == f32::INFINITY {
        x
    } else if x == 0.0 {
        f32::from_bits(1)
    } else if x > 0.0 {
        f32::from_bits(x.to_bits() + 1)
    } else {
        f32::from_bits(x.to_bits() - 1)
    }
}

fn next_down(x: f32) -> f32 {
    -next_up(-x)
}

/// Decodes IEEE binary16 bits (independently of the `half` crate).
fn f16_value(bits: u16) -> f64 {
    let sign = if bits & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exponent = i32::from((bits >> 10) & 0x1f);
    let mantissa = f64::from(bits & 0x3ff);
    match exponent {
        0 => sign * mantissa * 2f64.powi(-24),
        31 if mantissa == 0.0 => sign * f64::INFINITY,
        31 => f64::NAN,
        e => sign * (1.0 + mantissa / 1024.0) * 2f64.powi(e - 15),
    }
}

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
    let nan = run_lanes_f32(CVT_F16, &single(&[f32::NAN]))[0];
    assert!(
        nan & 0x7c00 == 0x7c00 && nan & 0x03ff != 0,
        "NaN → {nan:#06x}"
    );
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
    let nan = run_lanes_f32(CVT_BF16, &single(&[f32::NAN]))[0];
    assert!(
        nan & 0x7f80 == 0x7f80 && nan & 0x7f != 0,
        "NaN → {nan:#06x}"
    );
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

// ---------------------------------------------------------------------------------------
// fma, div
// ---------------------------------------------------------------------------------------

#[test]
fn fma_rn_f32_is_fused() {
    let fused = "
	mov.b32 	%f1, %r1;
	mov.b32 	%f2, %r2;
	mov.b32 	%f3, %r3;
	fma.rn.f32 	%f4, %f1, %f2, %f3;
	mov.b32 	%r4, %f4;";
    let unfused = "
	mov.b32 	%f1, %r1;
	mov.b32 	%f2, %r2;
	mov.b32 	%f3, %r3;
	mul.rn.f32 	%f4, %f1, %f2;
	add.rn.f32 	%f5, %f4, %f3;
	mov.b32 	%r4, %f5;";
    let eps = 2f32.powi(-23);
    let inputs = [[1.0 + eps, 1.0 - eps, -1.0]];
    assert_eq!(f(run_lanes_f32(fused, &inputs)[0]), -(2f32.powi(-46)));
    assert_eq!(f(run_lanes_f32(unfused, &inputs)[0]), 0.0);
}

/// `(a·b + c).cmp(r)`, computed exactly.
fn cmp_exact(a: f32, b: f32, c: f32, r: f32) -> Ordering {
    let p = f64::from(a) * f64::from(b); // exact: 24 + 24 bits
                                         // p + c == s + e exactly (two-sum).
    let c = f64::from(c);
    let s = p + c;
    let bb = s - p;
    let e = (p - (s - bb)) + (c - bb);
    // s + e vs r: d = s - r must be exact for the comparison to be.
    let r = f64::from(r);
    let d = s - r;
    assert_eq!(d + r, s, "inexact comparison for {a:e} {b:e} {c:e} {r:e}");
    assert_eq!(s - d, r, "inexact comparison for {a:e} {b:e} {c:e} {r:e}");
    d.partial_cmp(&-e).expect("finite")
}

fn random_triples(seed: u64, n: usize) -> Vec<[f32; 3]> {
    let mut state = seed;
    let mut next = move || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let m = 1.0 + (state >> 41) as f32 / (1u64 << 23) as f32;
        let e = ((state >> 8) % 16) as i32 - 8;
        let signed = if state & (1 << 3) != 0 { -m } else { m };
        signed * 2f32.powi(e)
    };
    (0..n).map(|_| [next(), next(), next()]).collect()
}

fn fma_form(rounding: &str) -> String {
    format!(
        "
	mov.b32 	%f1, %r1;
	mov.b32 	%f2, %r2;
	mov.b32 	%f3, %r3;
	fma.{rounding}.f32 	%f4, %f1, %f2, %f3;
	mov.b32 	%r4, %f4;"
    )
}

#[test]
fn fma_directed_roundings_bracket_the_exact_result() {
    let mut inputs = random_triples(11, 600);
    // expf's range reduction: fma.rm.f32 %f, x, 0f3BBB989D, 0f3F000000.
    for x in [-3.7f32, 0.1, 12.25, -87.0, 1e-3] {
        inputs.push([x, f(0x3BBB_989D), 0.5]);
    }
    inputs.push([1.0 / 3.0, 3.0, 0.0]);
    inputs.push([-1.0 / 3.0, 3.0, 0.0]);
    inputs.push([1.5, 2.0, 0.25]); // exact: every rounding agrees
    let rm = run_lanes_f32(&fma_form("rm"), &inputs);
    let rp = run_lanes_f32(&fma_form("rp"), &inputs);
    let rz = run_lanes_f32(&fma_form("rz"), &inputs);
    let rn = run_lanes_f32(&fma_form("rn"), &inputs);
    for (k, &[a, b, c]) in inputs.iter().enumerate() {
        let (m, p, z, n) = (f(rm[k]), f(rp[k]), f(rz[k]), f(rn[k]));
        assert_eq!(
            n.to_bits(),
            a.mul_add(b, c).to_bits(),
            "fma.rn {a:e} {b:e} {c:e}"
        );
        // exact.cmp(r): m <= exact < next_up(m), next_down(p) < exact <= p.
        assert_ne!(
            cmp_exact(a, b, c, m),
            Ordering::Less,
            "fma.rm above: {a:e} {b:e} {c:e} → {m:e}"
        );
        assert_eq!(
            cmp_exact(a, b, c, next_up(m)),
            Ordering::Less,
            "fma.rm not the largest below: {a:e} {b:e} {c:e} → {m:e}"
        );
        assert_ne!(
            cmp_exact(a, b, c, p),
            Ordering::Greater,
            "fma.rp below: {a:e} {b:e} {c:e} → {p:e}"
        );
        assert_eq!(
            cmp_exact(a, b, c, next_down(p)),
            Ordering::Greater,
            "fma.rp not the smallest above: {a:e} {b:e} {c:e} → {p:e}"
        );
        let toward_zero = if z >= 0.0 { m } else { p };
        assert_eq!(
            z.to_bits(),
            toward_zero.to_bits(),
            "fma.rz {a:e} {b:e} {c:e}"
        );
    }
    // The two hand-picked inexact cases.
    let third = inputs.len() - 3;
    assert_eq!(f(rm[third]), 1.0);
    assert_eq!(f(rp[third]), next_up(1.0));
    assert_eq!(f(rm[third + 1]), -next_up(1.0));
    assert_eq!(f(rm[third + 2]), 3.25);
    assert_eq!(f(rp[third + 2]), 3.25);
}

#[test]
fn div_rn_f32_is_ieee_division() {
    let snippet = "
	mov.b32 	%f1, %r1;
	mov.b32 	%f2, %r2;
	div.rn.f32 	%f3, %f1, %f2;
	mov.b32 	%r4, %f3;";
    let mut inputs: Vec<[f32; 3]> = vec![
        [1.0, 3.0, 0.0],
        [2.0, 0.0, 0.0],
        [-2.0, 0.0, 0.0],
        [0.0, 0.0, 0.0],
        [1e-38, 1e3, 0.0],    // subnormal quotient
        [f32::MAX, 0.5, 0.0], // overflow
        [3.0, 7.0, 0.0],
        [-0.0, 5.0, 0.0],
    ];
    inputs.extend(random_triples(5, 300));
    let got = run_lanes_f32(snippet, &inputs);
    for (&[a, b, _], &g) in inputs.iter().zip(&got) {
        let q = a / b;
        if q.is_nan() {
            assert!(f(g).is_nan(), "{a} / {b}");
        } else {
            assert_eq!(g, q.to_bits(), "div.rn.f32 {a:e} / {b:e}");
        }
    }
}

#[test]
fn rcp_rn_and_approximations() {
    let snippet = "
	mov.b32 	%f1, %r1;
	rcp.rn.f32 	%f2, %f1;
	mov.b32 	%r4, %f2;
	ex2.approx.ftz.f32 	%f3, %f1;
	mov.b32 	%r7, %f3;
	cvt.u64.u32 	%rd20, %r7;";
    let xs = [3.0f32, -7.5, 0.1, 10.0, 1e-3];
    let (rcp, ex2) = run_lanes(snippet, &xs.map(|x| [x.to_bits(), 0, 0]));
    for (k, &x) in xs.iter().enumerate() {
        assert_eq!(f(rcp[k]), 1.0 / x, "rcp.rn.f32 {x}");
        let want = f64::from(x).exp2();
        let got = f64::from(f(ex2[k] as u32));
        // The ISA bounds ex2.approx at 2 ulp; the simulator rounds the exact value once.
        let ulp = f64::from(next_up(want as f32) - want as f32);
        assert!(
            (got - want).abs() <= 2.0 * ulp,
            "ex2.approx.ftz.f32 {x}: {got} vs {want}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// comparisons and selects
// ---------------------------------------------------------------------------------------

const COMPARISONS: [&str; 14] = [
    "lt", "ltu", "eq", "equ", "ne", "neu", "gt", "gtu", "ge", "geu", "le", "leu", "num", "nan",
];

fn compare_reference(op: &str, a: f32, b: f32) -> bool {
    let unordered = a.is_nan() || b.is_nan();
    match op {
        "lt" => a < b,
        "ltu" => unordered || a < b,
        "eq" => a == b,
        "equ" => unordered || a == b,
        "ne" => !unordered && a != b,
        "neu" => unordered || a != b,
        "gt" => a > b,
        "gtu" => unordered || a > b,
        "ge" => a >= b,
        "geu" => unordered || a >= b,
        "le" => a <= b,
        "leu" => unordered || a <= b,
        "num" => !unordered,
        "nan" => unordered,
        _ => unreachable!(),
    }
}

#[test]
fn setp_f32_ordered_and_unordered_comparisons() {
    let mut snippet = String::from(
        "
	mov.b32 	%f1, %r1;
	mov.b32 	%f2, %r2;
	mov.u32 	%r4, 0;",
    );
    for (k, op) in COMPARISONS.iter().enumerate() {
        let p = k + 1;
        snippet.push_str(&format!(
            "
	setp.{op}.f32 	%p{p}, %f1, %f2;
	selp.u32 	%r7, {bit}, 0, %p{p};
	or.b32 	%r4, %r4, %r7;",
            bit = 1u32 << k
        ));
    }
    let nan = f32::NAN;
    let pairs = [
        (1.0, 2.0),
        (2.0, 1.0),
        (2.0, 2.0),
        (nan, 1.0),
        (1.0, nan),
        (nan, nan),
        (-0.0, 0.0),
        (f32::INFINITY, f32::INFINITY),
    ];
    let inputs: Vec<[f32; 3]> = pairs.iter().map(|&(a, b)| [a, b, 0.0]).collect();
    let got = run_lanes_f32(&snippet, &inputs);
    for (&(a, b), &bits) in pairs.iter().zip(&got) {
        for (k, op) in COMPARISONS.iter().enumerate() {
            assert_eq!(
                bits >> k & 1 != 0,
                compare_reference(op, a, b),
                "setp.{op}.f32 {a}, {b}"
            );
        }
    }
}

#[test]
fn setp_with_combining_predicate_and_complement() {
    // setp.lt.and.s32 p|q, a, b, c: p = (a < b) & c, q = !(a < b) & c.
    let snippet = "
	setp.ne.s32 	%p1, %r3, 0;
	setp.lt.and.s32 	%p2|%p3, %r1, %r2, %p1;
	selp.u32 	%r7, 1, 0, %p2;
	selp.u32 	%r8, 2, 0, %p3;
	or.b32 	%r4, %r7, %r8;";
    let inputs = [[1, 2, 1], [3, 2, 1], [1, 2, 0], [3, 2, 0]];
    let (got, _) = run_lanes(snippet, &inputs);
    assert_eq!(got, vec![1, 2, 0, 0]);
}

#[test]
fn selp_b32_and_f32_pick_by_predicate() {
    let snippet = "
	setp.ne.s32 	%p1, %r3, 0;
	selp.b32 	%r4, %r1, %r2, %p1;
	mov.b32 	%f1, %r1;
	mov.b32 	%f2, %r2;
	selp.f32 	%f3, %f2, %f1, %p1;
	mov.b32 	%r7, %f3;
	cvt.u64.u32 	%rd20, %r7;";
    let inputs = [[10, 20, 1], [10, 20, 0], [0xdead_beef, 7, 5]];
    let (b32, f32_bits) = run_lanes(snippet, &inputs);
    assert_eq!(b32, vec![10, 20, 0xdead_beef]);
    assert_eq!(f32_bits, vec![20, 10, 7]);
}

#[test]
fn max_f32_ignores_nan_and_neg_flips_the_sign_bit() {
    let snippet = "
	mov.b32 	%f1, %r1;
	mov.b32 	%f2, %r2;
	max.f32 	%f3, %f1, %f2;
	mov.b32 	%r4, %f3;
	neg.f32 	%f4, %f1;
	mov.b32 	%r7, %f4;
	cvt.u64.u32 	%rd20, %r7;";
    let inputs = [
        [f32::NAN.to_bits(), 2f32.to_bits(), 0],
        [1f32.to_bits(), f32::NAN.to_bits(), 0],
        [(-0f32).to_bits(), 0f32.to_bits(), 0],
    ];
    let (max, neg) = run_lanes(snippet, &inputs);
    assert_eq!(f(max[0]), 2.0);
    assert_eq!(f(max[1]), 1.0);
    assert_eq!(max[2], 0, "max(-0, +0) = +0");
    assert_eq!(neg[0] as u32, f32::NAN.to_bits() ^ 0x8000_0000);
    assert_eq!(neg[2] as u32, 0);
}

// ---------------------------------------------------------------------------------------
// integers
// ---------------------------------------------------------------------------------------

#[test]
fn shifts_fill_with_the_sign_and_clamp_the_amount() {
    let snippet = "
	shr.s32 	%r4, %r1, %r2;
	shr.u32 	%r7, %r1, %r2;
	shl.b32 	%r8, %r1, %r2;
	cvt.u64.u32 	%rd21, %r7;
	cvt.u64.u32 	%rd22, %r8;
	shl.b64 	%rd22, %rd22, 32;
	or.b64 	%rd20, %rd21, %rd22;";
    let cases: &[(i32, u32)] = &[
        (-16, 2),
        (i32::MIN, 31),
        (-1, 40),
        (100, 40),
        (i32::MAX, 30),
        (-5, 0),
        (-5, 32),
        (12345, 33),
    ];
    let inputs: Vec<[u32; 3]> = cases.iter().map(|&(a, s)| [a as u32, s, 0]).collect();
    let (sar, both) = run_lanes(snippet, &inputs);
    for (k, &(a, s)) in cases.iter().enumerate() {
        let clamped = s.min(32);
        let want_sar = if clamped >= 32 { a >> 31 } else { a >> clamped };
        let want_shr = if clamped >= 32 {
            0
        } else {
            (a as u32) >> clamped
        };
        let want_shl = if clamped >= 32 {
            0
        } else {
            (a as u32) << clamped
        };
        assert_eq!(sar[k] as i32, want_sar, "shr.s32 {a}, {s}");
        assert_eq!(both[k] as u32, want_shr, "shr.u32 {a}, {s}");
        assert_eq!((both[k] >> 32) as u32, want_shl, "shl.b32 {a}, {s}");
    }
}

#[test]
fn mul_wide_sign_and_zero_extend() {
    let signed = "
	mul.wide.s32 	%rd20, %r1, %r2;";
    let unsigned = "
	mul.wide.u32 	%rd20, %r1, %r2;";
    let cases: &[(i32, i32)] = &[
        (-3, 5),
        (i32::MAX, i32::MAX),
        (i32::MIN, i32::MIN),
        (i32::MIN, -1),
        (-1, -1),
        (65_536, 65_536),
    ];
    let inputs: Vec<[u32; 3]> = cases
        .iter()
        .map(|&(a, b)| [a as u32, b as u32, 0])
        .collect();
    let (_, s) = run_lanes(signed, &inputs);
    let (_, u) = run_lanes(unsigned, &inputs);
    for (k, &(a, b)) in cases.iter().enumerate() {
        assert_eq!(
            s[k] as i64,
            i64::from(a) * i64::from(b),
            "mul.wide.s32 {a} {b}"
        );
        assert_eq!(
            u[k],
            u64::from(a as u32) * u64::from(b as u32),
            "mul.wide.u32 {a} {b}"
        );
    }
}

#[test]
fn integer_division_and_remainder_truncate_toward_zero() {
    let snippet = "
	div.s32 	%r4, %r1, %r2;
	rem.s32 	%r7, %r1, %r2;
	div.u32 	%r8, %r1, %r2;
	rem.u32 	%r9, %r1, %r2;
	mad.lo.s32 	%r10, %r4, %r2, %r7;
	setp.eq.s32 	%p1, %r10, %r1;
	selp.u32 	%r11, 1, 0, %p1;
	cvt.u64.u32 	%rd21, %r8;
	cvt.u64.u32 	%rd22, %r9;
	shl.b64 	%rd22, %rd22, 32;
	or.b64 	%rd20, %rd21, %rd22;";
    let cases: &[(i32, i32)] = &[(-7, 2), (7, -2), (-7, -2), (100, 7), (i32::MIN, 3)];
    let inputs: Vec<[u32; 3]> = cases
        .iter()
        .map(|&(a, b)| [a as u32, b as u32, 0])
        .collect();
    let (div, urem) = run_lanes(snippet, &inputs);
    for (k, &(a, b)) in cases.iter().enumerate() {
        assert_eq!(div[k] as i32, a / b, "div.s32 {a} {b}");
        assert_eq!(urem[k] as u32, (a as u32) / (b as u32), "div.u32 {a} {b}");
        assert_eq!(
            (urem[k] >> 32) as u32,
            (a as u32) % (b as u32),
            "rem.u32 {a} {b}"
        );
    }
}

/// bfi per the ISA: for (i = 0; i < len && pos + i <= 31; i++) f[pos + i] = a[i].
fn bfi_reference(a: u32, b: u32, pos: u32, len: u32) -> u32 {
    let (pos, len) = (pos & 0xff, len & 0xff);
    let mut f = b;
    let mut i = 0;
    while i < len && pos + i <= 31 {
        f = (f & !(1 << (pos + i))) | (((a >> i) & 1) << (pos + i));
        i += 1;
    }
    f
}

#[test]
fn bfi_b32_inserts_a_field() {
    // c = pos | len << 8.
    let snippet = "
	and.b32 	%r7, %r3, 255;
	shr.u32 	%r8, %r3, 8;
	bfi.b32 	%r4, %r1, %r2, %r7, %r8;";
    let cases: &[(u32, u32, u32, u32)] = &[
        (0xff, 0, 8, 4),
        (0xffff_ffff, 0x1234_5678, 16, 16),
        (0xabcd, 0xffff_ffff, 4, 0),
        (0xff, 0, 28, 8),
        (0x1, 0x8000_0000, 40, 4),
        (0xdead_beef, 0, 0, 32),
        (0x5, 0xf0f0_f0f0, 31, 1),
    ];
    let inputs: Vec<[u32; 3]> = cases
        .iter()
        .map(|&(a, b, p, l)| [a, b, p | l << 8])
        .collect();
    let (got, _) = run_lanes(snippet, &inputs);
    for (k, &(a, b, p, l)) in cases.iter().enumerate() {
        assert_eq!(
            got[k],
            bfi_reference(a, b, p, l),
            "bfi.b32 {a:#x}, {b:#x}, {p}, {l}"
        );
    }
    // The immediate form NVRTC emits.
    let (got, _) = run_lanes(
        "\n\tbfi.b32 \t%r4, %r1, %r2, 16, 16;",
        &[[0xaaaa, 0x5555, 0]],
    );
    assert_eq!(got, vec![0xaaaa_5555]);
}
