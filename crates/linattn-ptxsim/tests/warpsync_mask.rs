//! `bar.warp.sync membermask` orders the shared accesses of the lanes in its mask only (PTX
//! ISA, `bar.warp.sync`: memory ordering "among threads participating in barrier"), and
//! transitively through lanes that two syncs share. Each planted race below was missed while
//! any completed `bar.warp.sync` ordered every lane of the warp; the same kernels with a
//! mask that holds both lanes pass and compute the right value.

mod common;

use common::*;
use linattn_ptxsim::{Arg, Checker, Fault, LaunchStats, SimError};

const WORD: &str = "_ZZ8warpsyncE4word";

/// One step of the kernel: the lanes of `lanes` do `action`, the others skip it.
#[derive(Clone, Copy)]
enum Action {
    /// Store 42 to the shared word.
    Write,
    /// Load the shared word and store it to `out[tid]`.
    Read,
    /// `bar.warp.sync mask`.
    Sync(u32),
    /// `bar.sync 0` (all threads, whatever `lanes` says).
    BarSync,
}

/// The kernel `warpsync` (one pointer, `out`): the steps in order, each behind a branch on
/// `(lanes >> %tid.x) & 1`, as NVRTC writes `if (lanes >> threadIdx.x & 1) { ... }`.
fn kernel(steps: &[(u32, Action)]) -> String {
    let mut body = format!(
        "\tcvta.to.global.u64 \t%rd2, %rd1;
\tmov.u64 \t%rd3, {WORD};
\tmov.u32 \t%r1, %tid.x;
\tmul.wide.u32 \t%rd4, %r1, 4;
\tadd.s64 \t%rd5, %rd2, %rd4;
"
    );
    for (i, &(lanes, action)) in steps.iter().enumerate() {
        let instr = match action {
            Action::Write => "mov.u32 \t%r2, 42;\n\tst.shared.u32 \t[%rd3], %r2;".to_string(),
            Action::Read => {
                "ld.shared.u32 \t%r3, [%rd3];\n\tst.global.u32 \t[%rd5], %r3;".to_string()
            }
            Action::Sync(mask) => format!("bar.warp.sync \t{mask:#x};"),
            Action::BarSync => {
                body += "\tbar.sync \t0;\n";
                continue;
            }
        };
        body += &format!(
            "\tmov.u32 \t%r4, {lanes:#x};
\tshr.u32 \t%r5, %r4, %r1;
\tand.b32 \t%r6, %r5, 1;
\tsetp.eq.s32 \t%p1, %r6, 0;
\t@%p1 bra \t$L__BB0_{i};

\t{instr}

$L__BB0_{i}:
"
        );
    }
    body += "\tret;\n";
    out_only(
        "warpsync",
        &[("pred", 2), ("b32", 7), ("b64", 6)],
        &format!("// demoted variable\n.shared .align 4 .u32 {WORD};"),
        &body,
    )
}

/// One warp of 32 threads runs `text` with a zeroed `out` of 32 words.
fn run(text: &str) -> (Loaded, u64, Result<LaunchStats, SimError>) {
    let k = Loaded::new(text.to_string());
    let out = k.dev.alloc_zeroed(4 * 32).expect("alloc");
    let result = k.launch(1, 32, &[Arg::U64(out)]);
    (k, out, result)
}

/// The launch passed; `out[lane]` is 42.
fn expect_read_42(text: &str, lane: usize) {
    let (k, out, result) = run(text);
    expect_ok(result);
    assert_eq!(k.download_u32(out, 32)[lane], 42, "out[{lane}]");
}

/// The launch stopped with a racecheck fault by `thread`; the fault.
fn expect_race(text: &str, thread: u32) -> Fault {
    let (_, _, result) = run(text);
    let fault = expect_fault(result, Checker::Racecheck);
    assert_eq!(fault.site.thread, [thread, 0, 0], "{fault}");
    fault
}

/// Lane 0 writes, the lanes of `mask` execute `bar.warp.sync mask`, lane 5 reads.
fn write_sync_read(mask: u32) -> String {
    kernel(&[
        (1, Action::Write),
        (mask, Action::Sync(mask)),
        (1 << 5, Action::Read),
    ])
}

#[test]
fn sync_of_the_writer_alone_does_not_order_the_reader() {
    let text = write_sync_read(0x1);
    let fault = expect_race(&text, 5);
    assert_eq!(fault.site.line, line_of(&text, "ld.shared.u32"));
    assert_says(&fault, "read races with a write by thread 0 (warp 0)");
}

#[test]
fn sync_of_the_reader_alone_does_not_order_it_either() {
    expect_race(&write_sync_read(1 << 5), 5);
}

#[test]
fn sync_of_other_lanes_orders_nothing() {
    expect_race(&write_sync_read(0xffff_ff00), 5);
}

#[test]
fn sync_holding_writer_and_reader_orders_them() {
    expect_read_42(&write_sync_read(0x21), 5);
}

#[test]
fn full_mask_sync_orders_every_lane() {
    expect_read_42(&write_sync_read(u32::MAX), 5);
}

#[test]
fn ordering_is_transitive_through_a_shared_lane() {
    // 0 → (sync {0,1}) → 1 → (sync {1,2}) → 2.
    let text = kernel(&[
        (1, Action::Write),
        (0x3, Action::Sync(0x3)),
        (0x6, Action::Sync(0x6)),
        (1 << 2, Action::Read),
    ]);
    expect_read_42(&text, 2);
}

#[test]
fn a_chain_in_the_wrong_order_does_not_order() {
    // Lane 1 meets lane 2 before it meets lane 0: nothing links lane 0's write to lane 2.
    let text = kernel(&[
        (1, Action::Write),
        (0x6, Action::Sync(0x6)),
        (0x3, Action::Sync(0x3)),
        (1 << 2, Action::Read),
    ]);
    expect_race(&text, 2);
}

/// Lane 0 writes, `bar.sync`, lanes 0 and 3 read, the lanes of `mask` sync, lane 3
/// overwrites: lane 0's read must be ordered before lane 3's write.
fn reads_sync_write(mask: u32) -> String {
    kernel(&[
        (1, Action::Write),
        (0, Action::BarSync),
        (0x9, Action::Read),
        (mask, Action::Sync(mask)),
        (1 << 3, Action::Write),
    ])
}

#[test]
fn write_after_two_reads_needs_both_readers_in_the_mask() {
    let text = reads_sync_write(1 << 3);
    let fault = expect_race(&text, 3);
    assert_says(&fault, "write races with a read by several threads");
}

#[test]
fn write_after_two_reads_with_both_readers_in_the_mask_passes() {
    let (k, out, result) = run(&reads_sync_write(0x9));
    expect_ok(result);
    let words = k.download_u32(out, 32);
    assert_eq!((words[0], words[3]), (42, 42));
}

#[test]
fn reads_ordered_by_an_earlier_sync_stay_ordered() {
    // Lane 0 reads, syncs with lane 3, lane 3 reads, syncs with lane 6 alone; lane 6 writes:
    // lane 0's read reaches lane 6 through lane 3.
    let text = kernel(&[
        (1, Action::Write),
        (0, Action::BarSync),
        (0x1, Action::Read),
        (0x9, Action::Sync(0x9)),
        (0x8, Action::Read),
        (0x48, Action::Sync(0x48)),
        (1 << 6, Action::Write),
    ]);
    let (_, _, result) = run(&text);
    expect_ok(result);
}

#[test]
fn lane_outside_the_mask_executing_bar_warp_sync_is_a_synccheck_fault() {
    // PTX ISA, bar.warp.sync: "The behavior of bar.warp.sync is undefined if the executing
    // thread is not in the membermask." Every lane executes a sync whose mask is lane 0.
    let text = kernel(&[(u32::MAX, Action::Sync(0x1))]);
    let (_, _, result) = run(&text);
    let fault = expect_fault(result, Checker::Synccheck);
    assert_eq!(fault.site.thread, [1, 0, 0], "{fault}");
    assert_eq!(fault.site.line, line_of(&text, "bar.warp.sync"));
    assert_says(&fault, "excludes it");
}
