//! memcheck: every global and shared access must lie inside a live allocation (or the CTA's
//! shared window) and be aligned to its size. Planted bugs: an off-by-one bound check in a
//! vector add, a misaligned 4-byte global load, a shared store past the array.

mod common;

use common::*;
use linattn_ptxsim::{Arg, Checker, LaunchStats, SimError};

/// `c[i] = a[i] + b[i]` for `i < n`, as NVRTC compiles it; `guard` is the comparison of
/// the bound check (`ge` is right, `gt` lets thread `n` through).
fn vadd(guard: &str) -> String {
    Entry {
        name: "vadd",
        params: &[
            ("u64", "%rd1"),
            ("u64", "%rd2"),
            ("u64", "%rd3"),
            ("u32", "%r2"),
        ],
        regs: &[("pred", 2), ("b32", 6), ("f32", 4), ("b64", 11)],
        body: &format!(
            r#"	mov.u32 	%r3, %ctaid.x;
	mov.u32 	%r4, %ntid.x;
	mov.u32 	%r5, %tid.x;
	mad.lo.s32 	%r1, %r3, %r4, %r5;
	setp.{guard}.s32 	%p1, %r1, %r2;
	@%p1 bra 	$L__BB0_2;

	cvta.to.global.u64 	%rd4, %rd1;
	mul.wide.s32 	%rd5, %r1, 4;
	add.s64 	%rd6, %rd4, %rd5;
	cvta.to.global.u64 	%rd7, %rd2;
	add.s64 	%rd8, %rd7, %rd5;
	ld.global.nc.f32 	%f1, [%rd8];  // load of b[i]
	ld.global.nc.f32 	%f2, [%rd6];  // load of a[i]
	add.f32 	%f3, %f2, %f1;
	cvta.to.global.u64 	%rd9, %rd3;
	add.s64 	%rd10, %rd9, %rd5;
	st.global.f32 	[%rd10], %f3;

$L__BB0_2:
	ret;
"#
        ),
        ..Entry::default()
    }
    .ptx()
}

const N: usize = 100;

struct VaddRun {
    k: Loaded,
    b: u64,
    c: u64,
    result: Result<LaunchStats, SimError>,
}

fn run_vadd(guard: &str) -> VaddRun {
    let k = Loaded::new(vadd(guard));
    let a: Vec<f32> = (0..N).map(|i| i as f32).collect();
    let b: Vec<f32> = (0..N).map(|i| 0.5 * i as f32 + 1.0).collect();
    let (pa, pb) = (upload_f32(&k.dev, &a), upload_f32(&k.dev, &b));
    let pc = k.output(N);
    // Two CTAs of 64 threads: thread N = 100 is thread 36 of CTA 1.
    let args = [Arg::U64(pa), Arg::U64(pb), Arg::U64(pc), Arg::U32(N as u32)];
    let result = k.launch(2, 64, &args);
    VaddRun {
        k,
        b: pb,
        c: pc,
        result,
    }
}

#[test]
fn off_by_one_bound_check_reads_past_the_end() {
    let run = run_vadd("gt");
    let fault = expect_fault(run.result, Checker::Memcheck);
    assert_eq!(fault.site.kernel, "vadd");
    assert_eq!(
        fault.site.line,
        run.k.line_of("load of b[i]"),
        "the first out-of-bounds access is the load of b[N]: {fault}"
    );
    assert!(
        fault.site.instruction.starts_with("ld.global.nc.f32"),
        "{fault}"
    );
    assert_eq!(fault.site.cta, [1, 0, 0], "{fault}");
    assert_eq!(fault.site.thread, [36, 0, 0], "{fault}");
    assert_eq!(
        fault.address,
        Some(run.b + 4 * N as u64),
        "the address is one element past the 400-byte allocation: {fault}"
    );
    assert_says(&fault, "past the end");
    // The report names all of it in one line.
    let shown = fault.to_string();
    assert!(shown.starts_with("memcheck: vadd at PTX line"), "{shown}");
    assert!(shown.contains("CTA (1,0,0) thread (36,0,0)"), "{shown}");
}

#[test]
fn correct_bound_check_passes_and_adds() {
    let run = run_vadd("ge");
    let stats = expect_ok(run.result);
    assert_eq!(stats.ctas, 2);
    assert!(stats.counters.warp_instructions > 0);
    let c = run.k.download_f32(run.c, N);
    for (i, &v) in c.iter().enumerate() {
        assert_eq!(v, i as f32 + (0.5 * i as f32 + 1.0), "c[{i}]");
    }
}

/// Every thread loads the word at byte `offset` of `in` and stores it to `out[tid]`.
fn misaligned_kernel(offset: u32) -> String {
    ptx(&in_out(
        "misaligned",
        &[("b32", 3), ("b64", 6)],
        &format!(
            r#"	ld.global.u32 	%r2, [%rd3+{offset}];
	add.s64 	%rd5, %rd4, %rd5;
	st.global.u32 	[%rd5], %r2;
	ret;
"#
        ),
    ))
}

/// Launches [`misaligned_kernel`] on `input` with a 32-word output.
fn run_misaligned(offset: u32, input: impl Fn(&Loaded) -> u64) -> (u64, OutputRun) {
    let k = Loaded::new(misaligned_kernel(offset));
    let input = input(&k);
    let out = k.output(32);
    let result = k.launch(1, 32, &[Arg::U64(input), Arg::U64(out)]);
    (input, OutputRun { k, out, result })
}

#[test]
fn misaligned_four_byte_load_is_a_memcheck_fault() {
    let (input, run) = run_misaligned(2, |k| upload_u32(&k.dev, &[1, 2, 3, 4]));
    let fault = run.fault_at(Checker::Memcheck, "ld.global.u32", [0, 0, 0]);
    assert_eq!(fault.address, Some(input + 2));
    assert_says(&fault, "misaligned");

    // The same load at an aligned offset passes.
    let (_, run) = run_misaligned(4, |k| upload_u32(&k.dev, &[1, 2, 3, 4]));
    assert_eq!(run.words(32), vec![2; 32]);
}

/// Each thread stores its id to `s[tid]` of a 32-word shared array, then the block's
/// first warp copies it out. `stride` 4 is right; `stride` 5 walks off the array.
fn shared_store(stride: u32) -> Loaded {
    Loaded::new(out_only(
        "shared_store",
        &[("pred", 2), ("b32", 5), ("b64", 7)],
        "// demoted variable\n.shared .align 4 .b8 _ZZ12shared_storeE4tile[128];",
        &format!(
            r#"	mov.u32 	%r1, %tid.x;
	mov.u64 	%rd2, _ZZ12shared_storeE4tile;
	mul.wide.u32 	%rd3, %r1, {stride};
	add.s64 	%rd4, %rd2, %rd3;
	st.shared.u32 	[%rd4], %r1;
	bar.sync 	0;
	ld.shared.u32 	%r2, [%rd4];
	cvta.to.global.u64 	%rd5, %rd1;
	mul.wide.u32 	%rd6, %r1, 4;
	add.s64 	%rd5, %rd5, %rd6;
	st.global.u32 	[%rd5], %r2;
	ret;
"#
        ),
    ))
}

#[test]
fn shared_store_past_the_array_is_a_memcheck_fault() {
    // Stride 5: thread 1 stores 4 bytes at offset 5, misaligned.
    let run = shared_store(5).run_with_output(1, 32, 32, false);
    let fault = run.fault_at(Checker::Memcheck, "st.shared.u32", [1, 0, 0]);
    assert_eq!(fault.address, Some(5));

    // Stride 8: aligned, but thread 16 stores at byte 128, just past the array.
    let fault = shared_store(8)
        .run_with_output(1, 32, 32, false)
        .fault(Checker::Memcheck);
    assert_eq!(fault.site.thread, [16, 0, 0], "{fault}");
    assert_eq!(fault.address, Some(128));
    assert_says(&fault, "past the CTA's 128 shared bytes");

    let run = shared_store(4).run_with_output(1, 32, 32, false);
    assert_eq!(run.words(32), (0..32).collect::<Vec<u32>>());
}

#[test]
fn use_after_free_is_named() {
    let (input, run) = run_misaligned(0, |k| {
        let input = upload_u32(&k.dev, &[9; 4]);
        k.dev.free(input).expect("free");
        input
    });
    let fault = run.fault(Checker::Memcheck);
    assert_eq!(fault.address, Some(input));
    assert_says(&fault, "use after free");
}

/// Each thread loads a float4 from a 16-byte aligned shared array at byte offset
/// `16 * tid + skew` and stores its sum.
fn vector_load(skew: u32) -> Loaded {
    Loaded::new(out_only(
        "vec4",
        &[("b32", 3), ("f32", 8), ("b64", 8)],
        "// demoted variable\n.shared .align 16 .b8 _ZZ4vec4E4tile[544];",
        &format!(
            r#"	mov.u32 	%r1, %tid.x;
	cvt.rn.f32.u32 	%f1, %r1;
	mul.wide.u32 	%rd2, %r1, 16;
	mov.u64 	%rd3, _ZZ4vec4E4tile;
	add.s64 	%rd4, %rd3, %rd2;
	st.shared.f32 	[%rd4], %f1;
	st.shared.f32 	[%rd4+4], %f1;
	st.shared.f32 	[%rd4+8], %f1;
	st.shared.f32 	[%rd4+12], %f1;
	bar.sync 	0;
	ld.shared.v4.f32 	{{%f2, %f3, %f4, %f5}}, [%rd4+{skew}];
	add.f32 	%f6, %f2, %f3;
	add.f32 	%f6, %f6, %f4;
	add.f32 	%f6, %f6, %f5;
	cvta.to.global.u64 	%rd5, %rd1;
	mul.wide.u32 	%rd6, %r1, 4;
	add.s64 	%rd7, %rd5, %rd6;
	st.global.f32 	[%rd7], %f6;
	ret;
"#
        ),
    ))
}

#[test]
fn vector_loads_must_be_aligned_to_their_whole_size() {
    // 8-byte aligned is enough for each float, not for the float4.
    let run = vector_load(8).run_with_output(1, 32, 32, false);
    let fault = run.fault_at(Checker::Memcheck, "ld.shared.v4.f32", [0, 0, 0]);
    assert_eq!(fault.address, Some(8));
    assert_says(&fault, "misaligned 16-byte");

    let run = vector_load(0).run_with_output(1, 32, 32, false);
    let expected: Vec<f32> = (0..32).map(|t| 4.0 * t as f32).collect();
    assert_eq!(run.floats(32), expected);
}
