//! synccheck: a barrier or warp collective that only part of the threads it needs can
//! reach. `bar.sync` needs every thread of the CTA; `shfl.sync` / `bar.warp.sync` every
//! lane of their member mask; `mma.sync.aligned` the whole warp (see tests/mma.rs).

mod common;

use common::*;
use linattn_ptxsim::Checker;

/// One CTA of `block` threads, with a zeroed output of one word per thread.
fn launch(text: &str, block: u32) -> OutputRun {
    Loaded::new(text.to_string()).run_with_output(1, block, block as usize, true)
}

/// Threads `tid < limit` write their id to shared memory and meet at `bar.sync 0`, then
/// store their neighbour's id; the others return straight away.
fn barrier_in_branch(limit: u32) -> String {
    out_only(
        "partial_barrier",
        &[("pred", 2), ("b32", 6), ("b64", 9)],
        "// demoted variable\n.shared .align 4 .b8 _ZZ15partial_barrierE1s[256];",
        &format!(
            r#"	mov.u32 	%r1, %tid.x;
	setp.ge.u32 	%p1, %r1, {limit};
	@%p1 bra 	$L__BB0_2;

	mul.wide.u32 	%rd2, %r1, 4;
	mov.u64 	%rd3, _ZZ15partial_barrierE1s;
	add.s64 	%rd4, %rd3, %rd2;
	st.shared.u32 	[%rd4], %r1;
	bar.sync 	0;
	add.s32 	%r2, %r1, 1;
	rem.u32 	%r3, %r2, {limit};
	mul.wide.u32 	%rd5, %r3, 4;
	add.s64 	%rd6, %rd3, %rd5;
	ld.shared.u32 	%r4, [%rd6];
	cvta.to.global.u64 	%rd7, %rd1;
	add.s64 	%rd8, %rd7, %rd2;
	st.global.u32 	[%rd8], %r4;

$L__BB0_2:
	ret;
"#
        ),
    )
}

#[test]
fn bar_sync_reached_by_part_of_the_cta() {
    let text = barrier_in_branch(16);
    let fault = launch(&text, 64).fault_at(Checker::Synccheck, "bar.sync", [16, 0, 0]);
    assert_eq!(fault.site.kernel, "partial_barrier");
    assert_says(&fault, "part of the CTA");
}

#[test]
fn bar_sync_reached_by_every_thread_passes() {
    let text = barrier_in_branch(64);
    let expected: Vec<u32> = (0..64).map(|t| (t + 1) % 64).collect();
    assert_eq!(launch(&text, 64).words(64), expected);
}

#[test]
fn two_different_barriers_are_a_divergent_barrier() {
    // if (tid < 32) { bar.sync } else { bar.sync }: two distinct barrier instructions.
    let text = out_only(
        "two_barriers",
        &[("pred", 2), ("b32", 3), ("b64", 5)],
        "",
        r#"	mov.u32 	%r1, %tid.x;
	setp.gt.u32 	%p1, %r1, 31;
	@%p1 bra 	$L__BB0_2;

	bar.sync 	0;  // then-branch barrier
	mov.u32 	%r2, 1;
	bra.uni 	$L__BB0_3;

$L__BB0_2:
	bar.sync 	0;  // else-branch barrier
	mov.u32 	%r2, 2;

$L__BB0_3:
	cvta.to.global.u64 	%rd2, %rd1;
	mul.wide.u32 	%rd3, %r1, 4;
	add.s64 	%rd4, %rd2, %rd3;
	st.global.u32 	[%rd4], %r2;
	ret;
"#,
    );
    let fault = launch(&text, 64).fault(Checker::Synccheck);
    assert_says(&fault, "different bar.sync");
    let lines = [
        line_of(&text, "then-branch barrier"),
        line_of(&text, "else-branch barrier"),
    ];
    assert!(lines.contains(&fault.site.line), "{fault}");
}

/// Lanes `lane < active` run a full-mask butterfly shuffle; the others branch around it
/// to the store (or, with `exit_others`, return at once).
fn divergent_shuffle(active: u32, exit_others: bool) -> String {
    let skip = if exit_others {
        "$L__BB0_3"
    } else {
        "$L__BB0_2"
    };
    out_only(
        "divergent_shfl",
        &[("pred", 2), ("b32", 5), ("b64", 5)],
        "",
        &format!(
            r#"	mov.u32 	%r1, %tid.x;
	add.s32 	%r4, %r1, 100;
	setp.ge.u32 	%p1, %r1, {active};
	@%p1 bra 	{skip};

	shfl.sync.bfly.b32 	%r4, %r4, 1, 31, -1;

$L__BB0_2:
	cvta.to.global.u64 	%rd2, %rd1;
	mul.wide.u32 	%rd3, %r1, 4;
	add.s64 	%rd4, %rd2, %rd3;
	st.global.u32 	[%rd4], %r4;

$L__BB0_3:
	ret;
"#
        ),
    )
}

#[test]
fn full_mask_shuffle_by_half_a_warp_whose_other_half_exits() {
    let text = divergent_shuffle(16, true);
    let fault = launch(&text, 32).fault(Checker::Synccheck);
    assert_eq!(fault.site.line, line_of(&text, "shfl.sync.bfly.b32"));
    assert!(
        fault.site.thread[0] < 16,
        "a lane that waits at the shuffle: {fault}"
    );
}

#[test]
fn full_mask_shuffle_by_half_a_warp_whose_other_half_goes_on() {
    // The other half does not exit: it runs the store and then exits, never reaching the
    // shuffle either.
    let text = divergent_shuffle(16, false);
    let fault = launch(&text, 32).fault(Checker::Synccheck);
    assert_eq!(fault.site.line, line_of(&text, "shfl.sync.bfly.b32"));
}

#[test]
fn full_mask_shuffle_by_the_whole_warp_passes() {
    let text = divergent_shuffle(32, true);
    let expected: Vec<u32> = (0..32).map(|l| 100 + (l ^ 1)).collect();
    assert_eq!(launch(&text, 32).words(32), expected);
}

#[test]
fn full_mask_shuffle_in_a_partial_warp() {
    // A block of 48 threads: warp 1 has 16 lanes, and lanes 16..31 of a full member mask do
    // not exist.
    let text = divergent_shuffle(64, true);
    let fault = launch(&text, 48).fault(Checker::Synccheck);
    assert_eq!(fault.site.thread[0] / 32, 1, "{fault}");
}

#[test]
fn lane_outside_the_member_mask_executing_the_shuffle() {
    let text = divergent_shuffle(32, true).replace(", 31, -1;", ", 31, 0x0000ffff;");
    let fault = launch(&text, 32).fault(Checker::Synccheck);
    assert_eq!(fault.site.thread, [16, 0, 0], "{fault}");
    assert_says(&fault, "excludes it");
}

#[test]
fn half_warp_member_mask_matching_the_branch_passes() {
    // __shfl_xor_sync(0xffff, x, 1) inside `if (lane < 16)`: legal.
    let text = divergent_shuffle(16, false).replace(", 31, -1;", ", 31, 0x0000ffff;");
    let expected: Vec<u32> = (0..32)
        .map(|l| if l < 16 { 100 + (l ^ 1) } else { 100 + l })
        .collect();
    assert_eq!(launch(&text, 32).words(32), expected);
}

#[test]
fn bar_warp_sync_missed_by_exited_lanes() {
    let text = divergent_shuffle(8, true).replace(
        "shfl.sync.bfly.b32 	%r4, %r4, 1, 31, -1;",
        "bar.warp.sync 	-1;",
    );
    let fault = launch(&text, 32).fault(Checker::Synccheck);
    assert_eq!(fault.site.line, line_of(&text, "bar.warp.sync"));
}
