//! Comparisons and selects, in the exact PTX forms the linattn kernels use
//! (shared/reference/ptx-census.md): ordered and unordered `setp` on f32, `setp` with a
//! combining predicate and its complement, `selp`.
//!
//! Each test runs a snippet once per thread on per-thread inputs (see
//! `common::lanes::run_lanes`) and checks every lane against a reference written here from the
//! PTX ISA, independently of the simulator's code.

mod common;

use common::lanes::{run_lanes, run_lanes_f32};

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
