//! f32 arithmetic, in the exact PTX forms the linattn kernels use
//! (shared/reference/ptx-census.md): fused and directed-rounding FMA, IEEE division,
//! `rcp.rn` and `ex2.approx`, `max` with NaN and `neg`.
//!
//! Each test runs a snippet once per thread on per-thread inputs (see
//! `common::lanes::run_lanes`) and checks every lane against a reference written here from the
//! PTX ISA, independently of the simulator's code.

mod common;

use std::cmp::Ordering;

use common::ieee::{f, next_down, next_up};
use common::lanes::{run_lanes, run_lanes_f32};

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

/// `r`, the result of `fma.{name}` rounding toward the exact `a·b + c` from `side` (`Less`:
/// from below, `Greater`: from above), is not past the exact value, and `inward(r)`, the
/// next float toward it, is: `r` is the closest float on that side.
fn assert_directed(
    [a, b, c]: [f32; 3],
    r: f32,
    side: Ordering,
    inward: fn(f32) -> f32,
    name: &str,
) {
    // exact.cmp(r)
    assert_ne!(
        cmp_exact(a, b, c, r),
        side,
        "fma.{name} past the exact result: {a:e} {b:e} {c:e} → {r:e}"
    );
    assert_eq!(
        cmp_exact(a, b, c, inward(r)),
        side,
        "fma.{name} not the closest on its side: {a:e} {b:e} {c:e} → {r:e}"
    );
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
        // m <= exact < next_up(m), next_down(p) < exact <= p.
        assert_directed([a, b, c], m, Ordering::Less, next_up, "rm");
        assert_directed([a, b, c], p, Ordering::Greater, next_down, "rp");
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
