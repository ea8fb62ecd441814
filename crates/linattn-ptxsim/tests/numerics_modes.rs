//! Numerics modes (`Device::with_numerics`) and the `.approx` functions' subnormals.
//!
//! * Subnormals, per instruction, in the default mode: references written from the PTX ISA
//!   (9.7.3, "Floating Point Instructions", each instruction's "Subnormal numbers" note);
//!   for rsqrt.approx.f32 as the H100 computed it on 2026-11-26 (finite: ptxas scales the
//!   input, `bench-results/h100/2026-11-26/mufu/mufu.json`).
//! * Planted kernels whose result depends on the approximation: a threshold on ex2.approx and
//!   an mma with cancellation give the exact answer in `Numerics::Exact` and another one in
//!   `Numerics::Pessimistic`, which stays inside the ISA's bounds and reproduces run to run.

mod common;

use common::lanes::run_lanes_on;
use common::*;
use linattn_ptxsim::{Arg, Numerics};

/// Runs the lanes `snippet` (see `common::lanes`) on a device in `numerics`, one thread per
/// input triple; returns `(out32, out64)`.
fn run(numerics: Numerics, snippet: &str, inputs: &[[f32; 3]]) -> (Vec<u32>, Vec<u64>) {
    let bits: Vec<[u32; 3]> = inputs.iter().map(|t| t.map(f32::to_bits)).collect();
    run_lanes_on(device().with_numerics(numerics), snippet, &bits)
}

/// `op` (a full instruction name, `ex2.approx.ftz.f32`) of `%r1` in the default mode, per input.
fn unary(op: &str, xs: &[f32]) -> Vec<f32> {
    let snippet = format!(
        "
	mov.b32 	%f1, %r1;
	{op} 	%f2, %f1;
	mov.b32 	%r4, %f2;"
    );
    let inputs: Vec<[f32; 3]> = xs.iter().map(|&x| [x, 0.0, 0.0]).collect();
    let (out, _) = run(Numerics::Exact, &snippet, &inputs);
    out.into_iter().map(f32::from_bits).collect()
}

/// `a op b` (a full instruction name, `div.approx.f32`) in the default mode, per pair.
fn binary(op: &str, pairs: &[(f32, f32)]) -> Vec<f32> {
    let snippet = format!(
        "
	mov.b32 	%f1, %r1;
	mov.b32 	%f2, %r2;
	{op} 	%f3, %f1, %f2;
	mov.b32 	%r4, %f3;"
    );
    let inputs: Vec<[f32; 3]> = pairs.iter().map(|&(a, b)| [a, b, 0.0]).collect();
    let (out, _) = run(Numerics::Exact, &snippet, &inputs);
    out.into_iter().map(f32::from_bits).collect()
}

fn p(e: i32) -> f32 {
    2f32.powi(e)
}

/// Bit-exact comparison (signed zeros, NaN as NaN), naming the instruction and input.
fn assert_same(what: &str, inputs: &[f32], got: &[f32], want: &[f32]) {
    for ((x, g), w) in inputs.iter().zip(got).zip(want) {
        let same = (g.is_nan() && w.is_nan()) || g.to_bits() == w.to_bits();
        assert!(same, "{what}({x:e}) = {g:e}, want {w:e}");
    }
}

/// A positive and a negative subnormal, and the smallest one.
const SUBNORMALS: [f32; 3] = [1.5e-40, -3.0e-39, f32::from_bits(1)];

#[test]
fn rsqrt_approx_of_a_subnormal_is_finite_unless_ftz() {
    // ptxas 13.0.88 compiles rsqrt.approx.f32 to `MUFU.RSQ(x·2^24)·2^12` where |x| < 2^-126,
    // and the H100 returned finite results there (a negative input: NaN), not the ±inf an
    // earlier reading assumed. `.ftz` flushes the input: ±inf.
    let got = unary("rsqrt.approx.f32", &SUBNORMALS);
    for (x, r) in SUBNORMALS.iter().zip(&got) {
        let want = 1.0 / f64::from(*x).sqrt();
        if *x > 0.0 {
            assert!(
                r.is_finite() && (f64::from(*r) / want - 1.0).abs() < 1e-6,
                "rsqrt.approx.f32({x:e}) = {r:e}, not ≈ {want:e}"
            );
        } else {
            assert!(r.is_nan(), "rsqrt.approx.f32({x:e}) = {r:e}, not NaN");
        }
    }
    let ftz = unary("rsqrt.approx.ftz.f32", &SUBNORMALS);
    assert_same(
        "rsqrt.approx.ftz.f32",
        &SUBNORMALS,
        &ftz,
        &[f32::INFINITY, f32::NEG_INFINITY, f32::INFINITY],
    );
    for op in ["rsqrt.approx.f32", "rsqrt.approx.ftz.f32"] {
        assert_eq!(unary(op, &[4.0, p(-126)]), [0.5, p(63)], "{op}");
    }
}

#[test]
fn ex2_approx_keeps_subnormal_results_unless_ftz() {
    // 2^-130 and 2^-149 are subnormal results; a subnormal input gives 2^tiny = 1.
    let xs = [-130.0, -149.0, 1e-40];
    assert_same(
        "ex2.approx.f32",
        &xs,
        &unary("ex2.approx.f32", &xs),
        &[p(-130), p(-149), 1.0],
    );
    let ftz = unary("ex2.approx.ftz.f32", &xs);
    assert_same("ex2.approx.ftz.f32", &xs, &ftz, &[0.0, 0.0, 1.0]);
}

#[test]
fn lg2_approx_reads_subnormal_inputs_unless_ftz() {
    let xs = [p(-140), p(-149)];
    assert_same(
        "lg2.approx.f32",
        &xs,
        &unary("lg2.approx.f32", &xs),
        &[-140.0, -149.0],
    );
    let ftz = unary("lg2.approx.ftz.f32", &xs);
    assert_same("lg2.approx.ftz.f32", &xs, &ftz, &[f32::NEG_INFINITY; 2]);
}

#[test]
fn rcp_approx_subnormal_inputs_and_results() {
    // 1/(1.5·2^-128) ≈ 2^127.4 is finite; flushed, the input is 0 and the result +inf.
    // 1/(1.5·2^127) is subnormal; flushed, +0.
    let xs = [1.5 * p(-128), 1.5 * p(127), -1.5 * p(127)];
    let exact: Vec<f32> = xs.iter().map(|&x| (1.0 / f64::from(x)) as f32).collect();
    assert!(exact[0].is_finite() && exact[1].is_subnormal());
    assert_same("rcp.approx.f32", &xs, &unary("rcp.approx.f32", &xs), &exact);
    let ftz = unary("rcp.approx.ftz.f32", &xs);
    assert_same("rcp.approx.ftz.f32", &xs, &ftz, &[f32::INFINITY, 0.0, -0.0]);
}

#[test]
fn sqrt_sin_cos_approx_subnormals_follow_ftz() {
    let xs = [p(-140), -p(-140)];
    let root = unary("sqrt.approx.f32", &xs);
    assert_eq!(root[0], p(-70));
    assert!(
        root[1].is_nan(),
        "sqrt of a negative subnormal: {}",
        root[1]
    );
    // Flushed to -0, whose square root is -0 (ISA table).
    let root = unary("sqrt.approx.ftz.f32", &xs);
    assert_same("sqrt.approx.ftz.f32", &xs, &root, &[0.0, -0.0]);
    assert_same("sin.approx.f32", &xs, &unary("sin.approx.f32", &xs), &xs);
    assert_same(
        "sin.approx.ftz.f32",
        &xs,
        &unary("sin.approx.ftz.f32", &xs),
        &[0.0, -0.0],
    );
    for op in ["cos.approx.f32", "cos.approx.ftz.f32"] {
        assert_same(op, &xs, &unary(op, &xs), &[1.0, 1.0]);
    }
}

#[test]
fn tanh_approx_passes_subnormals_through() {
    let xs = SUBNORMALS;
    assert_same("tanh.approx.f32", &xs, &unary("tanh.approx.f32", &xs), &xs);
}

#[test]
fn div_approx_by_a_huge_divisor_is_zero_and_div_full_is_not() {
    // div.approx.f32 computes a·(1/b): for 2^126 < |b| < 2^128, 1/b is subnormal and
    // flushed: a signed zero, or NaN for an infinite a. div.full.f32 is full-range.
    let big = 1.5 * p(126);
    let pairs = [(1.0, big), (-1.0, big), (1.0, -big), (f32::INFINITY, big)];
    let xs: Vec<f32> = pairs.iter().map(|p| p.0).collect();
    let got = binary("div.approx.f32", &pairs);
    assert_same("div.approx.f32", &xs, &got, &[0.0, -0.0, -0.0, f32::NAN]);
    let full = binary("div.full.f32", &pairs[..1]);
    assert_eq!(full[0], (1.0 / f64::from(big)) as f32);
    assert!(full[0].is_subnormal());
    // Below 2^126 div.approx divides.
    assert_eq!(binary("div.approx.f32", &[(1.0, p(125))])[0], p(-125));
}

/// A threshold on ex2.approx, as softmax-style kernels compare exponentials: `%r4` = 1 when
/// 2^x ≥ the correctly rounded 2^x (passed in), `%rd20` = the bits of 2^x.
const EX2_THRESHOLD: &str = "
	mov.b32 	%f1, %r1;
	mov.b32 	%f2, %r2;
	ex2.approx.ftz.f32 	%f3, %f1;
	setp.ge.f32 	%p1, %f3, %f2;
	selp.u32 	%r4, 1, 0, %p1;
	mov.b32 	%r8, %f3;
	cvt.u64.u32 	%rd20, %r8;";

#[test]
fn ex2_threshold_differs_between_exact_and_pessimistic() {
    let inputs: Vec<[f32; 3]> = (0..64)
        .map(|i| {
            let x = i as f32 * 0.37 - 11.3;
            [x, f64::from(x).exp2() as f32, 0.0]
        })
        .collect();
    let (exact, values) = run(Numerics::Exact, EX2_THRESHOLD, &inputs);
    assert!(
        exact.iter().all(|&v| v == 1),
        "exact: every 2^x meets itself"
    );
    for (t, &v) in inputs.iter().zip(&values) {
        assert_eq!(f32::from_bits(v as u32), t[1], "exact ex2({})", t[0]);
    }
    let (pessimistic, moved) = run(Numerics::Pessimistic, EX2_THRESHOLD, &inputs);
    let below = pessimistic.iter().filter(|&&v| v == 0).count();
    assert!(
        below > 0 && below < inputs.len(),
        "pessimistic: {below} of {} below the rounded value",
        inputs.len()
    );
    for (t, &v) in inputs.iter().zip(&moved) {
        let apart = (i64::from(v as u32) - i64::from(t[1].to_bits())).abs();
        assert_eq!(
            apart, 2,
            "pessimistic ex2({}) is 2 ulp off, the ISA's bound",
            t[0]
        );
    }
    // Deterministic: the same inputs give the same bits.
    assert_eq!(run(Numerics::Pessimistic, EX2_THRESHOLD, &inputs).1, moved);
}

#[test]
fn rsqrt_guarded_by_a_positive_test_is_finite_for_subnormals_in_every_mode() {
    // feature_map's `sq > 0 ? rsqrtf(sq) : 0`: a subnormal sq passes the guard, and the
    // non-ftz rsqrt of it is large but finite (≈ 3.16e19 at 1e-39; pessimistic: within the
    // ISA's bound of it).
    let snippet = "
	mov.b32 	%f1, %r1;
	setp.gt.f32 	%p1, %f1, 0f00000000;
	rsqrt.approx.f32 	%f2, %f1;
	selp.f32 	%f3, %f2, 0f00000000, %p1;
	mov.b32 	%r4, %f3;";
    let want = 1.0 / f64::from(1e-39f32).sqrt();
    for numerics in Numerics::ALL {
        let (out, _) = run(numerics, snippet, &[[1e-39, 0.0, 0.0], [0.0, 0.0, 0.0]]);
        let r = f64::from(f32::from_bits(out[0]));
        assert!((r / want - 1.0).abs() < 1e-6, "{numerics}: {r:e}");
        assert_eq!(f32::from_bits(out[1]), 0.0, "{numerics}");
    }
}

/// One mma per warp whose A has every row equal to `a` and B every column equal to `b`, so
/// every element of D is `c + Σ_k a_k·b_k`; thread 0 stores D's first element.
fn mma_dot(numerics: Numerics, a: [f32; 16], b: [f32; 16], c: f32) -> f32 {
    let h = |x: f32| {
        let v = half::f16::from_f32(x);
        assert_eq!(v.to_f32(), x, "{x} is not an f16");
        u32::from(v.to_bits())
    };
    let pack = |v: &[f32; 16], k: usize| h(v[k]) | h(v[k + 1]) << 16;
    // Per lane (fragment layout of the PTX ISA): a0..a3 hold columns 2t, 2t+1 (rows g, g+8:
    // equal here) and 2t+8, 2t+9; b0, b1 rows 2t, 2t+1 and 2t+8, 2t+9.
    let mut words = Vec::new();
    for lane in 0..32 {
        let t = lane % 4;
        let (lo, hi) = (pack(&a, 2 * t), pack(&a, 2 * t + 8));
        words.extend([lo, lo, hi, hi, pack(&b, 2 * t), pack(&b, 2 * t + 8)]);
    }
    let body = "	cvta.to.global.u64 	%rd3, %rd1;
	cvta.to.global.u64 	%rd4, %rd2;
	mov.u32 	%r1, %tid.x;
	mul.wide.u32 	%rd5, %r1, 24;
	add.s64 	%rd6, %rd3, %rd5;
	ld.global.nc.u32 	%r2, [%rd6];
	ld.global.nc.u32 	%r3, [%rd6+4];
	ld.global.nc.u32 	%r4, [%rd6+8];
	ld.global.nc.u32 	%r5, [%rd6+12];
	ld.global.nc.u32 	%r6, [%rd6+16];
	ld.global.nc.u32 	%r7, [%rd6+20];
	mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%f2, %f3, %f4, %f5}, {%r2, %r3, %r4, %r5}, {%r6, %r7}, {%f1, %f1, %f1, %f1};
	setp.ne.u32 	%p1, %r1, 0;
	@%p1 bra 	$L__BB0_2;
	st.global.f32 	[%rd4], %f2;
$L__BB0_2:
	ret;
";
    let text = Entry {
        name: "mma_dot",
        params: &[("u64", "%rd1"), ("u64", "%rd2"), ("f32", "%f1")],
        regs: &[("pred", 2), ("b32", 8), ("f32", 6), ("b64", 8)],
        body,
        ..Entry::default()
    }
    .ptx();
    let k = Loaded::on(device().with_numerics(numerics), text);
    let input = upload_u32(&k.dev, &words);
    let out = k.output(1);
    expect_ok(k.launch(1, 32, &[Arg::U64(input), Arg::U64(out), Arg::F32(c)]));
    k.download_f32(out, 1)[0]
}

#[test]
fn mma_cancellation_differs_between_exact_and_pessimistic() {
    // 1 + (-1)(1) + (2^-12)(2^-12): exactly 2^-24. Tensor cores align the block to the
    // largest exponent (0) and truncate beyond 24 bits: the 2^-24 is gone before the ones
    // cancel.
    let mut a = [0.0; 16];
    let mut b = [0.0; 16];
    (a[0], b[0]) = (-1.0, 1.0);
    (a[1], b[1]) = (p(-12), p(-12));
    assert_eq!(mma_dot(Numerics::Exact, a, b, 1.0), p(-24));
    assert_eq!(mma_dot(Numerics::Pessimistic, a, b, 1.0), 0.0);
    // The same small product in the second block of 8 (k = 8) meets a zero accumulator there
    // and survives: the block order is part of the model.
    (a[1], b[1], a[8], b[8]) = (0.0, 0.0, p(-12), p(-12));
    assert_eq!(mma_dot(Numerics::Pessimistic, a, b, 1.0), p(-24));
}

#[test]
fn mma_small_products_into_a_large_accumulator_truncate() {
    // 1 + 16 · (2^-12 · 2^-13) = 1 + 2^-21 exactly; each 2^-25 is below the 24 bits of the
    // accumulator's 1 and truncates away.
    let a = [p(-12); 16];
    let b = [p(-13); 16];
    assert_eq!(mma_dot(Numerics::Exact, a, b, 1.0), 1.0 + p(-21));
    assert_eq!(mma_dot(Numerics::Pessimistic, a, b, 1.0), 1.0);
    // Exact sums (multiples of 1/8) agree in both modes.
    let a: [f32; 16] = std::array::from_fn(|k| (k as f32 - 7.0) * 0.125);
    let b = [2.0; 16];
    let want = 3.0 + a.iter().sum::<f32>() * 2.0;
    for numerics in Numerics::ALL {
        assert_eq!(mma_dot(numerics, a, b, 3.0), want, "{numerics}");
    }
}
