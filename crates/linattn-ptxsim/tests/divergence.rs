//! Divergence and reconvergence under per-lane program counters: an if/else on lane parity,
//! a loop whose trip count depends on the lane, then a full-warp shuffle reduction and a
//! block barrier after the paths have met again. Right values, no synccheck fault.

mod common;

use common::*;
use linattn_ptxsim::{Arg, Counters};

fn kernel() -> Loaded {
    Loaded::new(
        Entry {
            name: "diverge",
            params: &[("u64", "%rd1"), ("u64", "%rd2")],
            regs: &[("pred", 4), ("b32", 26), ("b64", 10)],
            decls: "// demoted variable\n.shared .align 4 .b8 _ZZ7divergeE6totals[32];",
            body: r#"	mov.u32 	%r1, %tid.x;
	and.b32 	%r2, %r1, 31;
	and.b32 	%r3, %r2, 1;
	setp.eq.s32 	%p1, %r3, 0;
	@%p1 bra 	$L__BB0_2;

	// odd lanes: v = 3 * lane
	mul.lo.s32 	%r4, %r2, 3;
	bra.uni 	$L__BB0_3;

$L__BB0_2:
	// even lanes: v = 1000 - lane
	mov.u32 	%r5, 1000;
	sub.s32 	%r4, %r5, %r2;

$L__BB0_3:
	// for (i = 1; i <= lane % 5; ++i) v += i;
	rem.u32 	%r6, %r2, 5;
	setp.eq.s32 	%p2, %r6, 0;
	@%p2 bra 	$L__BB0_6;

	mov.u32 	%r7, 0;

$L__BB0_5:
	add.s32 	%r7, %r7, 1;
	add.s32 	%r4, %r4, %r7;
	setp.lt.u32 	%p3, %r7, %r6;
	@%p3 bra 	$L__BB0_5;

$L__BB0_6:
	cvta.to.global.u64 	%rd3, %rd1;
	// Each CTA writes its own slice of the outputs (globalcheck: CTAs must not share words).
	mov.u32 	%r24, %ctaid.x;
	mov.u32 	%r25, %ntid.x;
	mad.lo.s32 	%r24, %r24, %r25, %r1;
	mul.wide.u32 	%rd4, %r24, 4;
	add.s64 	%rd5, %rd3, %rd4;
	st.global.u32 	[%rd5], %r4;
	shfl.sync.bfly.b32 	%r8, %r4, 16, 31, -1;
	add.s32 	%r9, %r8, %r4;
	shfl.sync.bfly.b32 	%r10, %r9, 8, 31, -1;
	add.s32 	%r11, %r10, %r9;
	shfl.sync.bfly.b32 	%r12, %r11, 4, 31, -1;
	add.s32 	%r13, %r12, %r11;
	shfl.sync.bfly.b32 	%r14, %r13, 2, 31, -1;
	add.s32 	%r15, %r14, %r13;
	shfl.sync.bfly.b32 	%r16, %r15, 1, 31, -1;
	add.s32 	%r17, %r16, %r15;
	// lane 0 of each warp publishes the warp's total; after the barrier every thread
	// adds its own warp's total and the next warp's.
	shr.u32 	%r18, %r1, 5;
	mov.u64 	%rd6, _ZZ7divergeE6totals;
	setp.ne.s32 	%p1, %r2, 0;
	@%p1 bra 	$L__BB0_8;

	mul.wide.u32 	%rd7, %r18, 4;
	add.s64 	%rd8, %rd6, %rd7;
	st.shared.u32 	[%rd8], %r17;

$L__BB0_8:
	bar.sync 	0;
	mov.u32 	%r19, %ntid.x;
	shr.u32 	%r20, %r19, 5;
	add.s32 	%r21, %r18, 1;
	rem.u32 	%r22, %r21, %r20;
	mul.wide.u32 	%rd7, %r22, 4;
	add.s64 	%rd8, %rd6, %rd7;
	ld.shared.u32 	%r23, [%rd8];
	add.s32 	%r23, %r23, %r17;
	cvta.to.global.u64 	%rd9, %rd2;
	add.s64 	%rd9, %rd9, %rd4;
	st.global.u32 	[%rd9], %r23;
	ret;
"#,
            ..Entry::default()
        }
        .ptx(),
    )
}

/// Runs `ctas` CTAs of `threads` threads; each thread's value, each thread's total (CTA by
/// CTA), the counters.
fn run(ctas: u32, threads: usize) -> (Vec<u32>, Vec<u32>, Counters) {
    let k = kernel();
    let threads = threads * ctas as usize;
    let (values, totals) = (k.output(threads), k.output(threads));
    let block = threads as u32 / ctas;
    let stats = expect_ok(k.launch(ctas, block, &[values, totals].map(Arg::U64)));
    let (values, totals) = (
        k.download_u32(values, threads),
        k.download_u32(totals, threads),
    );
    (values, totals, stats.counters)
}

fn value(lane: u32) -> u32 {
    let base = if lane % 2 == 1 { 3 * lane } else { 1000 - lane };
    base + (1..=lane % 5).sum::<u32>()
}

#[test]
fn if_else_loop_and_shuffle_reduction_reconverge() {
    const THREADS: usize = 2 * 128;
    let (values, totals, c) = run(2, 128);
    let expected_values: Vec<u32> = (0..THREADS as u32).map(|t| value(t % 32)).collect();
    assert_eq!(values, expected_values);
    let warp_total: u32 = (0..32).map(value).sum();
    assert_eq!(totals, vec![2 * warp_total; THREADS]);
    // The paths really diverged: some warp instructions ran with part of the lanes.
    assert!(
        c.thread_instructions < 32 * c.warp_instructions,
        "no partial-mask warp instruction: {c:?}"
    );
}

#[test]
fn reconvergence_keeps_lanes_together_for_the_shuffle() {
    // Same kernel, one warp; each lane's input to the reduction differs, so a shuffle run by
    // a partial group (before the paths met) would give a different sum.
    let (_, totals, _) = run(1, 32);
    let warp_total: u32 = (0..32).map(value).sum();
    assert_eq!(totals, vec![2 * warp_total; 32]);
}
