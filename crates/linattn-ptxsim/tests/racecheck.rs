//! racecheck: shared-memory accesses of different threads, at least one a write, must be
//! ordered by `bar.sync` (any two threads of the CTA) or by `bar.warp.sync` (two lanes of one
//! warp). Each planted race is reported; the same kernel with the barrier passes and
//! computes the right value.

mod common;

use common::*;
use linattn_ptxsim::{Arg, Checker, Checks, Device, Module};

const WORD: &str = "_ZZ4raceE4word";

/// Thread `writer` stores 42 to a shared word, then (after `sync`, which may be empty)
/// thread `reader` loads it and stores it to `out[0]`.
fn write_then_read(writer: u32, reader: u32, sync: &str) -> String {
    ptx(&format!(
        r#".visible .entry race(
	.param .u64 race_param_0
)
{{
	.reg .pred 	%p<3>;
	.reg .b32 	%r<4>;
	.reg .b64 	%rd<4>;
	// demoted variable
	.shared .align 4 .u32 {WORD};

	ld.param.u64 	%rd1, [race_param_0];
	cvta.to.global.u64 	%rd2, %rd1;
	mov.u64 	%rd3, {WORD};
	mov.u32 	%r1, %tid.x;
	setp.ne.s32 	%p1, %r1, {writer};
	@%p1 bra 	$L__BB0_2;

	mov.u32 	%r2, 42;
	st.shared.u32 	[%rd3], %r2;

$L__BB0_2:
	{sync}
	setp.ne.s32 	%p2, %r1, {reader};
	@%p2 bra 	$L__BB0_4;

	ld.shared.u32 	%r3, [%rd3];
	st.global.u32 	[%rd2], %r3;

$L__BB0_4:
	ret;

}}
"#
    ))
}

fn run(
    text: &str,
    block: u32,
) -> (
    Device,
    u64,
    Result<linattn_ptxsim::LaunchStats, linattn_ptxsim::SimError>,
) {
    let dev = device();
    let module: Module = load(&dev, text);
    let out = dev.alloc_zeroed(4).expect("alloc");
    let result = dev.launch(&module, "race", &config(1, block), &[Arg::U64(out)]);
    (dev, out, result)
}

#[test]
fn read_by_another_warp_without_bar_sync_races() {
    let text = write_then_read(0, 32, "");
    let (_, _, result) = run(&text, 64);
    let fault = expect_fault(result, Checker::Racecheck);
    assert_eq!(fault.site.kernel, "race");
    assert_eq!(fault.site.line, line_of(&text, "ld.shared.u32"));
    assert_eq!(
        fault.site.thread,
        [32, 0, 0],
        "the reader is reported: {fault}"
    );
    assert_eq!(fault.address, Some(0), "shared offset of the word");
    assert!(
        fault
            .detail
            .contains("read races with a write by thread 0 (warp 0)"),
        "{fault}"
    );
}

#[test]
fn read_by_another_warp_after_bar_sync_is_ordered() {
    let text = write_then_read(0, 32, "bar.sync 	0;");
    let (dev, out, result) = run(&text, 64);
    expect_ok(result);
    assert_eq!(download_u32(&dev, out, 1), vec![42]);
}

#[test]
fn bar_warp_sync_does_not_order_two_warps() {
    // bar.warp.sync orders the lanes of one warp only.
    let text = write_then_read(0, 32, "bar.warp.sync 	-1;");
    let (_, _, result) = run(&text, 64);
    expect_fault(result, Checker::Racecheck);
}

#[test]
fn read_by_another_lane_without_bar_warp_sync_races() {
    let text = write_then_read(0, 1, "");
    let (_, _, result) = run(&text, 32);
    let fault = expect_fault(result, Checker::Racecheck);
    assert_eq!(fault.site.line, line_of(&text, "ld.shared.u32"));
    assert_eq!(fault.site.thread, [1, 0, 0], "{fault}");
    assert!(fault.detail.contains("bar.warp.sync"), "{fault}");
}

#[test]
fn read_by_another_lane_after_bar_warp_sync_is_ordered() {
    let text = write_then_read(0, 1, "bar.warp.sync 	-1;");
    let (dev, out, result) = run(&text, 32);
    expect_ok(result);
    assert_eq!(download_u32(&dev, out, 1), vec![42]);
}

#[test]
fn same_thread_needs_no_barrier() {
    let text = write_then_read(5, 5, "");
    let (dev, out, result) = run(&text, 64);
    expect_ok(result);
    assert_eq!(download_u32(&dev, out, 1), vec![42]);
}

#[test]
fn racecheck_can_be_turned_off() {
    let text = write_then_read(0, 32, "");
    let dev = device().with_checks(Checks {
        racecheck: false,
        initcheck: true,
    });
    let module = load(&dev, &text);
    let out = dev.alloc_zeroed(4).expect("alloc");
    expect_ok(dev.launch(&module, "race", &config(1, 64), &[Arg::U64(out)]));
    assert_eq!(download_u32(&dev, out, 1), vec![42]);
}

/// Thread 0 writes the word, everyone meets at a barrier, thread 0 reads it back, then
/// thread 32 overwrites it — after `sync`, which may be empty (write-after-read race).
fn read_then_overwrite(sync: &str) -> String {
    ptx(&format!(
        r#".visible .entry race(
	.param .u64 race_param_0
)
{{
	.reg .pred 	%p<4>;
	.reg .b32 	%r<5>;
	.reg .b64 	%rd<4>;
	// demoted variable
	.shared .align 4 .u32 {WORD};

	ld.param.u64 	%rd1, [race_param_0];
	cvta.to.global.u64 	%rd2, %rd1;
	mov.u32 	%r1, %tid.x;
	setp.ne.s32 	%p1, %r1, 0;
	@%p1 bra 	$L__BB0_2;

	mov.u32 	%r2, 42;
	st.shared.u32 	[{WORD}], %r2;

$L__BB0_2:
	bar.sync 	0;
	@%p1 bra 	$L__BB0_4;

	ld.shared.u32 	%r3, [{WORD}];
	st.global.u32 	[%rd2], %r3;

$L__BB0_4:
	{sync}
	setp.ne.s32 	%p2, %r1, 32;
	@%p2 bra 	$L__BB0_6;

	mov.u32 	%r4, 7;
	st.shared.u32 	[{WORD}], %r4;  // the overwrite

$L__BB0_6:
	ret;

}}
"#
    ))
}

#[test]
fn write_after_read_across_warps_without_barrier_races() {
    let text = read_then_overwrite("");
    let (_, _, result) = run(&text, 64);
    let fault = expect_fault(result, Checker::Racecheck);
    assert_eq!(fault.site.line, line_of(&text, "the overwrite"));
    assert_eq!(fault.site.thread, [32, 0, 0], "{fault}");
    assert!(
        fault
            .detail
            .contains("write races with a read by thread 0 (warp 0)"),
        "{fault}"
    );
}

#[test]
fn write_after_read_across_warps_with_barrier_passes() {
    let text = read_then_overwrite("bar.sync 	0;");
    let (dev, out, result) = run(&text, 64);
    expect_ok(result);
    assert_eq!(download_u32(&dev, out, 1), vec![42]);
}

/// The two-phase kernel: `s[tid] = in[tid]`, then `out[tid] = s[(tid + 1) % ntid]`, with
/// or without the barrier between the phases.
fn two_phase(barrier: &str) -> String {
    ptx(&format!(
        r#".visible .entry rotate(
	.param .u64 rotate_param_0,
	.param .u64 rotate_param_1
)
{{
	.reg .b32 	%r<9>;
	.reg .f32 	%f<3>;
	.reg .b64 	%rd<14>;
	// demoted variable
	.shared .align 4 .b8 _ZZ6rotateE1s[512];

	ld.param.u64 	%rd1, [rotate_param_0];
	ld.param.u64 	%rd2, [rotate_param_1];
	cvta.to.global.u64 	%rd3, %rd1;
	mov.u32 	%r1, %tid.x;
	mov.u32 	%r2, %ntid.x;
	mov.u32 	%r3, %ctaid.x;
	mad.lo.s32 	%r4, %r3, %r2, %r1;
	mul.wide.u32 	%rd4, %r4, 4;
	add.s64 	%rd5, %rd3, %rd4;
	ld.global.nc.f32 	%f1, [%rd5];
	mul.wide.u32 	%rd6, %r1, 4;
	mov.u64 	%rd7, _ZZ6rotateE1s;
	add.s64 	%rd8, %rd7, %rd6;
	st.shared.f32 	[%rd8], %f1;
	{barrier}
	add.s32 	%r5, %r1, 1;
	rem.u32 	%r6, %r5, %r2;
	mul.wide.u32 	%rd9, %r6, 4;
	add.s64 	%rd10, %rd7, %rd9;
	ld.shared.f32 	%f2, [%rd10];
	cvta.to.global.u64 	%rd11, %rd2;
	add.s64 	%rd12, %rd11, %rd4;
	st.global.f32 	[%rd12], %f2;
	ret;

}}
"#
    ))
}

const BLOCK: u32 = 128;
const CTAS: u32 = 3;

fn run_two_phase(text: &str) -> (Vec<f32>, Result<Vec<f32>, linattn_ptxsim::SimError>) {
    let dev = device();
    let module = load(&dev, text);
    let n = (BLOCK * CTAS) as usize;
    let input: Vec<f32> = (0..n).map(|i| (i * 3) as f32 - 7.5).collect();
    let pin = upload_f32(&dev, &input);
    let pout = output(&dev, n);
    let result = dev
        .launch(
            &module,
            "rotate",
            &config(CTAS, BLOCK),
            &[Arg::U64(pin), Arg::U64(pout)],
        )
        .map(|_| download_f32(&dev, pout, n));
    (input, result)
}

#[test]
fn two_phase_kernel_without_barrier_races() {
    let text = two_phase("");
    let (_, result) = run_two_phase(&text);
    let fault = expect_fault(result.map(|_| Default::default()), Checker::Racecheck);
    assert_eq!(fault.site.line, line_of(&text, "ld.shared.f32"));
    assert_eq!(fault.site.cta, [0, 0, 0]);
    // Thread 0 reads s[1], which lane 1 of its warp wrote with nothing ordering the two.
    assert_eq!(fault.site.thread, [0, 0, 0], "{fault}");
    assert_eq!(fault.address, Some(4));
    assert!(fault.detail.contains("by thread 1 (warp 0)"), "{fault}");
}

#[test]
fn two_phase_kernel_with_barrier_rotates() {
    let (input, result) = run_two_phase(&two_phase("bar.sync 	0;"));
    let out = result.unwrap_or_else(|e| panic!("the launch should pass: {e}"));
    let block = BLOCK as usize;
    for cta in 0..CTAS as usize {
        for t in 0..block {
            let expected = input[cta * block + (t + 1) % block];
            assert_eq!(out[cta * block + t], expected, "CTA {cta} thread {t}");
        }
    }
}

#[test]
fn two_phase_kernel_with_only_bar_warp_sync_is_still_wrong_across_warps() {
    // bar.warp.sync orders the lanes of each warp, not the warps: thread 31 reads s[32],
    // which warp 1 writes. Warps run in index order here, so the read comes first and
    // initcheck reports it; with initcheck off, warp 1's write races with that read.
    let text = two_phase("bar.warp.sync 	-1;");
    let (_, result) = run_two_phase(&text);
    let fault = expect_fault(result.map(|_| Default::default()), Checker::Initcheck);
    assert_eq!(fault.site.thread, [31, 0, 0], "{fault}");
    assert_eq!(fault.address, Some(128));

    let dev = device().with_checks(Checks {
        racecheck: true,
        initcheck: false,
    });
    let module = load(&dev, &text);
    let n = (BLOCK * CTAS) as usize;
    let pin = upload_f32(&dev, &vec![1.0; n]);
    let pout = output(&dev, n);
    let fault = expect_fault(
        dev.launch(
            &module,
            "rotate",
            &config(CTAS, BLOCK),
            &[Arg::U64(pin), Arg::U64(pout)],
        ),
        Checker::Racecheck,
    );
    assert_eq!(fault.site.line, line_of(&text, "st.shared.f32"));
    assert_eq!(fault.site.thread, [32, 0, 0], "{fault}");
    assert!(
        fault
            .detail
            .contains("write races with a read by thread 31 (warp 0)"),
        "{fault}"
    );
}

/// Thread 0 initialises `s_max`, then every thread's atomic max: without the barrier between
/// them, the other threads' atomics race with thread 0's plain store — even after thread 0's
/// own atomic (ordered after its store) has written the word (the shadow keeps plain writes
/// and atomics apart). With the barrier, the atomics of many threads do not race with each
/// other and give the maximum.
#[test]
fn an_atomic_races_with_an_unordered_plain_initialisation() {
    let text = |barrier: &str| {
        ptx(&format!(
            r#".visible .entry race(
	.param .u64 race_param_0
)
{{
	.reg .pred 	%p<2>;
	.reg .b32 	%r<6>;
	.reg .b64 	%rd<3>;
	.shared .align 4 .u32 s_max;

	ld.param.u64 	%rd1, [race_param_0];
	mov.u32 	%r1, %tid.x;
	setp.ne.s32 	%p1, %r1, 0;
	@%p1 bra 	$L__BB0_2;

	mov.u32 	%r2, 0;
	st.shared.u32 	[s_max], %r2;

$L__BB0_2:
{barrier}
	and.b32 	%r4, %r1, 63;
	atom.shared.max.s32 	%r5, [s_max], %r4;
	bar.sync 	0;
	@%p1 bra 	$L__BB0_4;

	ld.shared.u32 	%r5, [s_max];
	cvta.to.global.u64 	%rd2, %rd1;
	st.global.u32 	[%rd2], %r5;

$L__BB0_4:
	ret;

}}
"#
        ))
    };
    let (_, _, result) = run(&text(""), 64);
    let fault = expect_fault(result, Checker::Racecheck);
    assert!(
        fault.detail.contains("write by thread 0"),
        "{}",
        fault.detail
    );
    // Lane 1 of warp 0 already races: lanes are unordered without bar.warp.sync.
    assert_eq!(fault.site.thread, [1, 0, 0]);
    let (dev, out, result) = run(&text("\tbar.sync \t0;"), 64);
    expect_ok(result);
    assert_eq!(download_u32(&dev, out, 1), vec![63]);
}

/// C = A·B (n = 32) with 16×16 shared tiles: load a tile of A and of B, `bar.sync`, 16
/// FMAs from shared memory, then `trailing` (the second `bar.sync`, or nothing) before the
/// next iteration overwrites the tiles.
fn tiled_matmul(trailing: &str) -> String {
    let mut inner = String::new();
    for k in 0..16 {
        inner.push_str(&format!(
            "\tld.shared.f32 \t%f{a}, [%rd11+{ao}];\n\tld.shared.f32 \t%f{b}, [%rd13+{bo}];\n\tfma.rn.f32 \t%f1, %f{a}, %f{b}, %f1;\n",
            a = 4 + 2 * k,
            b = 5 + 2 * k,
            ao = 4 * k,
            bo = 64 * k
        ));
    }
    ptx(&format!(
        r#".visible .entry matmul(
	.param .u64 matmul_param_0,
	.param .u64 matmul_param_1,
	.param .u64 matmul_param_2,
	.param .u32 matmul_param_3
)
{{
	.reg .pred 	%p<2>;
	.reg .b32 	%r<20>;
	.reg .f32 	%f<40>;
	.reg .b64 	%rd<24>;
	// demoted variable
	.shared .align 4 .b8 _ZZ6matmulE2As[1024];
	// demoted variable
	.shared .align 4 .b8 _ZZ6matmulE2Bs[1024];

	ld.param.u64 	%rd1, [matmul_param_0];
	ld.param.u64 	%rd2, [matmul_param_1];
	ld.param.u64 	%rd3, [matmul_param_2];
	ld.param.u32 	%r1, [matmul_param_3];
	cvta.to.global.u64 	%rd4, %rd1;
	cvta.to.global.u64 	%rd20, %rd2;
	cvta.to.global.u64 	%rd21, %rd3;
	mov.u32 	%r2, %tid.x;
	mov.u32 	%r3, %tid.y;
	mov.u32 	%r4, %ctaid.x;
	mov.u32 	%r5, %ctaid.y;
	shl.b32 	%r6, %r5, 4;
	add.s32 	%r7, %r6, %r3;
	shl.b32 	%r8, %r4, 4;
	add.s32 	%r9, %r8, %r2;
	shl.b32 	%r10, %r3, 4;
	add.s32 	%r11, %r10, %r2;
	mul.wide.u32 	%rd5, %r11, 4;
	mov.u64 	%rd6, _ZZ6matmulE2As;
	add.s64 	%rd7, %rd6, %rd5;
	mov.u64 	%rd8, _ZZ6matmulE2Bs;
	add.s64 	%rd9, %rd8, %rd5;
	mul.wide.u32 	%rd10, %r3, 64;
	add.s64 	%rd11, %rd6, %rd10;
	mul.wide.u32 	%rd12, %r2, 4;
	add.s64 	%rd13, %rd8, %rd12;
	mad.lo.s32 	%r12, %r7, %r1, %r2;
	mul.wide.u32 	%rd14, %r12, 4;
	add.s64 	%rd15, %rd4, %rd14;
	mad.lo.s32 	%r13, %r3, %r1, %r9;
	mul.wide.u32 	%rd16, %r13, 4;
	add.s64 	%rd17, %rd20, %rd16;
	shl.b32 	%r14, %r1, 6;
	cvt.u64.u32 	%rd18, %r14;
	mov.f32 	%f1, 0f00000000;
	mov.u32 	%r15, 0;

$L__BB0_1:
	ld.global.nc.f32 	%f2, [%rd15];
	st.shared.f32 	[%rd7], %f2;  // store of the A tile
	ld.global.nc.f32 	%f3, [%rd17];
	st.shared.f32 	[%rd9], %f3;  // store of the B tile
	bar.sync 	0;
{inner}	{trailing}
	add.s64 	%rd15, %rd15, 64;
	add.s64 	%rd17, %rd17, %rd18;
	add.s32 	%r15, %r15, 16;
	setp.lt.u32 	%p1, %r15, %r1;
	@%p1 bra 	$L__BB0_1;

	mad.lo.s32 	%r16, %r7, %r1, %r9;
	mul.wide.u32 	%rd19, %r16, 4;
	add.s64 	%rd22, %rd21, %rd19;
	st.global.f32 	[%rd22], %f1;
	ret;

}}
"#
    ))
}

fn run_matmul(
    text: &str,
) -> (
    Vec<f32>,
    Vec<f32>,
    Result<Vec<f32>, linattn_ptxsim::SimError>,
) {
    const N: usize = 32;
    let dev = device();
    let module = load(&dev, text);
    let a: Vec<f32> = (0..N * N).map(|i| ((i * 7) % 11) as f32 - 5.0).collect();
    let b: Vec<f32> = (0..N * N).map(|i| ((i * 5) % 13) as f32 - 6.0).collect();
    let (pa, pb) = (upload_f32(&dev, &a), upload_f32(&dev, &b));
    let pc = output(&dev, N * N);
    let config = linattn_ptxsim::LaunchConfig {
        grid: [2, 2, 1],
        block: [16, 16, 1],
        dynamic_shared_bytes: 0,
    };
    let result = dev
        .launch(
            &module,
            "matmul",
            &config,
            &[Arg::U64(pa), Arg::U64(pb), Arg::U64(pc), Arg::U32(N as u32)],
        )
        .map(|_| download_f32(&dev, pc, N * N));
    (a, b, result)
}

#[test]
fn tiled_matmul_with_both_barriers_passes_and_multiplies() {
    let (a, b, result) = run_matmul(&tiled_matmul("bar.sync \t0;"));
    let c = result.unwrap_or_else(|e| panic!("the launch should pass: {e}"));
    for r in 0..32 {
        for n in 0..32 {
            let want: f32 = (0..32).map(|k| a[r * 32 + k] * b[k * 32 + n]).sum();
            assert_eq!(c[r * 32 + n], want, "C[{r}][{n}]");
        }
    }
}

#[test]
fn tiled_matmul_without_the_trailing_barrier_races() {
    // The classic bug: the next iteration overwrites the tiles while other threads may
    // still be reading them.
    let text = tiled_matmul("");
    let (_, _, result) = run_matmul(&text);
    let fault = expect_fault(result.map(|_| Default::default()), Checker::Racecheck);
    let stores = [
        line_of(&text, "store of the A tile"),
        line_of(&text, "store of the B tile"),
    ];
    assert!(stores.contains(&fault.site.line), "{fault}");
    assert!(
        fault.detail.starts_with("write races with a read"),
        "{fault}"
    );
}
