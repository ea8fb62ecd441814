//! globalcheck: global-memory accesses of one launch that nothing orders. Each probe of
//! issue #23 (lane 0 writes / lane 1 reads; warp 0 writes / warp 1 reads, in either code
//! order; two CTAs writing one word; a store to data read through `ld.global.nc`) is
//! reported with the checker on and computes without it; the fixed kernel (a barrier, or
//! atomics) passes with it on. The schedules show what a missing barrier computes.

mod common;

use common::*;
use linattn_ptxsim::{Arg, Checker, Checks, Device, Fault, LaunchStats, Schedule, SimError};

const SCHEDULES: [Schedule; 3] = [
    Schedule::InOrder,
    Schedule::Reversed,
    Schedule::HighestPcFirst,
];

/// A device with globalcheck `on` and the warp order `schedule`.
fn dev(on: bool, schedule: Schedule) -> Device {
    device().with_checks(Checks {
        globalcheck: on,
        schedule,
        ..Checks::default()
    })
}

/// The one-pointer kernel `probe` (`out` in `%rd2`, `%tid.x` in `%r1`) with `body`.
fn probe(body: &str) -> String {
    let body = format!(
        "\tcvta.to.global.u64 \t%rd2, %rd1;\n\tmov.u32 \t%r1, %tid.x;\n\
         \tmov.u32 \t%r5, %ctaid.x;\n{body}"
    );
    let regs = [("pred", 3), ("b16", 2), ("b32", 8), ("b64", 4)];
    out_only("probe", &regs, "", &body)
}

/// Thread `writer` stores 42 to `out[1]`, thread `reader` loads `out[1]` into `out[0]`, with
/// `sync` (which may be empty) between them; `reader_first` puts the load first in the code.
fn write_read(writer: u32, reader: u32, sync: &str, reader_first: bool) -> String {
    let write = format!(
        "\tsetp.ne.s32 \t%p1, %r1, {writer};\n\t@%p1 bra \t$L__BB0_W;\n\
         \tmov.u32 \t%r2, 42;\n\tst.global.u32 \t[%rd2+4], %r2;\n$L__BB0_W:\n"
    );
    let read = format!(
        "\tsetp.ne.s32 \t%p2, %r1, {reader};\n\t@%p2 bra \t$L__BB0_R;\n\
         \tld.global.u32 \t%r3, [%rd2+4];\n\tst.global.u32 \t[%rd2], %r3;\n$L__BB0_R:\n"
    );
    let (first, second) = if reader_first {
        (read, write)
    } else {
        (write, read)
    };
    probe(&format!("{first}\t{sync}\n{second}\tret;\n"))
}

/// Runs `text` on `dev`: `grid` CTAs of `block` threads, `out` of 4 zeroed words.
fn run_on(
    dev: Device,
    text: &str,
    grid: u32,
    block: u32,
) -> (Loaded, u64, Result<LaunchStats, SimError>) {
    let k = Loaded::on(dev, text.to_string());
    let out = k.dev.alloc_zeroed(16).expect("alloc");
    let result = k.launch(grid, block, &[Arg::U64(out)]);
    (k, out, result)
}

/// The launch passed; `out[..n]`.
fn words(run: (Loaded, u64, Result<LaunchStats, SimError>), n: usize) -> Vec<u32> {
    let (k, out, result) = run;
    expect_ok(result);
    k.download_u32(out, n)
}

/// With globalcheck on, the launch stops with its fault.
fn fault(text: &str, grid: u32, block: u32) -> Fault {
    let (_, _, result) = run_on(dev(true, Schedule::InOrder), text, grid, block);
    expect_fault(result, Checker::Globalcheck)
}

#[test]
fn lane_reading_another_lanes_global_write_races() {
    let text = write_read(0, 1, "", false);
    let f = fault(&text, 1, 32);
    assert_at(&f, line_of(&text, "ld.global.u32"), [1, 0, 0]);
    let store = line_of(&text, "st.global.u32 \t[%rd2+4]");
    assert_says(
        &f,
        &format!("read races with a write by thread (0,0,0) (warp 0) of the same CTA at PTX line {store}"),
    );
    assert_says(&f, "bar.warp.sync");
    // Unchecked, the simulator's order happens to give the value.
    assert_eq!(
        words(run_on(dev(false, Schedule::InOrder), &text, 1, 32), 1),
        [42]
    );
    // bar.warp.sync orders the lanes of a warp.
    let fixed = write_read(0, 1, "bar.warp.sync \t-1;", false);
    assert_eq!(
        words(run_on(dev(true, Schedule::InOrder), &fixed, 1, 32), 1),
        [42]
    );
}

#[test]
fn warp_reading_another_warps_global_write_races() {
    let text = write_read(0, 32, "", false);
    let f = fault(&text, 1, 64);
    assert_eq!(f.site.kernel, "probe");
    assert_eq!(f.site.cta, [0, 0, 0]);
    assert_at(&f, line_of(&text, "ld.global.u32"), [32, 0, 0]);
    assert_says(&f, "read races with a write by thread (0,0,0) (warp 0)");
    assert!(
        !f.detail.contains("bar.warp.sync"),
        "only bar.sync orders two warps: {f}"
    );
    assert_eq!(
        words(run_on(dev(false, Schedule::InOrder), &text, 1, 64), 1),
        [42]
    );
    // bar.warp.sync does not order two warps; bar.sync does.
    fault(&write_read(0, 32, "bar.warp.sync \t-1;", false), 1, 64);
    let fixed = write_read(0, 32, "bar.sync \t0;", false);
    for schedule in SCHEDULES {
        let got = words(run_on(dev(true, schedule), &fixed, 1, 64), 1);
        assert_eq!(got, [42], "{schedule}");
    }
}

#[test]
fn read_before_the_other_warps_write_is_caught_in_every_schedule() {
    // The code order of the H100 probe that read 0: the write comes second.
    let text = write_read(0, 32, "", true);
    for schedule in SCHEDULES {
        let (_, _, result) = run_on(dev(true, schedule), &text, 1, 64);
        let f = expect_fault(result, Checker::Globalcheck);
        assert_says(&f, "races with a");
        assert_says(&f, "of the same CTA");
    }
    let text = write_read(0, 32, "", false);
    for schedule in SCHEDULES {
        let (_, _, result) = run_on(dev(true, schedule), &text, 1, 64);
        expect_fault(result, Checker::Globalcheck);
    }
}

#[test]
fn a_missing_barrier_changes_the_result_with_the_schedule() {
    let text = write_read(0, 32, "", false);
    let got = |schedule| words(run_on(dev(false, schedule), &text, 1, 64), 1)[0];
    assert_eq!(
        got(Schedule::InOrder),
        42,
        "warp 0 writes before warp 1 reads"
    );
    assert_eq!(
        got(Schedule::Reversed),
        0,
        "warp 1 reads before warp 0 writes"
    );
    // Both warps start at the same PC; the last warp wins the tie and runs ahead.
    assert_eq!(got(Schedule::HighestPcFirst), 0);
    // With the barrier every schedule agrees.
    let fixed = write_read(0, 32, "bar.sync \t0;", false);
    for schedule in SCHEDULES {
        let got = words(run_on(dev(false, schedule), &fixed, 1, 64), 1);
        assert_eq!(got, [42], "{schedule}");
    }
}

/// Thread 0 of every CTA applies `op` to `out[0]` with `%r3 = ctaid + 1`.
fn every_cta(op: &str) -> String {
    probe(&format!(
        "\tsetp.ne.s32 \t%p1, %r1, 0;\n\t@%p1 bra \t$L__BB0_2;\n\
         \tadd.s32 \t%r3, %r5, 1;\n\t{op}\n$L__BB0_2:\n\tret;\n"
    ))
}

#[test]
fn two_ctas_writing_one_word_race() {
    let text = every_cta("st.global.u32 \t[%rd2], %r3;");
    let (_, out, result) = run_on(dev(true, Schedule::InOrder), &text, 2, 32);
    let f = expect_fault(result, Checker::Globalcheck);
    assert_eq!(f.address, Some(out));
    assert_at(&f, line_of(&text, "st.global.u32"), [0, 0, 0]);
    // Whichever CTA stores second reports the other.
    let other = if f.site.cta == [0, 0, 0] { 1 } else { 0 };
    assert_says(
        &f,
        &format!("write races with a write by CTA ({other},0,0) thread (0,0,0)"),
    );
    assert_says(&f, "different CTAs");
    let got = words(run_on(dev(false, Schedule::InOrder), &text, 2, 32), 1)[0];
    assert!(got == 1 || got == 2, "one CTA's value: {got}");
}

/// Every thread of every CTA stores `value` (a register of the probe, or an immediate moved
/// into one) to `out[0]`.
fn everyone_stores(value: &str) -> String {
    probe(&format!(
        "\tadd.s32 \t%r3, %r5, 1;\n\tmov.u32 \t%r4, {value};\n\
         \tst.global.u32 \t[%rd2], %r4;\n\tret;\n"
    ))
}

#[test]
fn writes_of_the_same_value_do_not_race_but_of_different_values_do() {
    // feature_map's fm_favor_exp stores each head's shift from every row of the head.
    let same = everyone_stores("7");
    assert_eq!(
        words(run_on(dev(true, Schedule::InOrder), &same, 3, 64), 1),
        [7]
    );
    // Different values within a CTA (the thread's id), and across CTAs (the CTA's).
    let f = fault(&everyone_stores("%r1"), 1, 64);
    assert_says(
        &f,
        "write races with a write by thread (0,0,0) (warp 0) of the same CTA",
    );
    let f = fault(&everyone_stores("%r3"), 2, 1);
    assert_says(&f, "different CTAs");
}

#[test]
fn atomics_of_two_ctas_on_one_word_do_not_race() {
    for op in [
        "atom.global.add.u32 \t%r4, [%rd2], %r3;",
        "red.global.add.u32 \t[%rd2], %r3;",
    ] {
        let text = every_cta(op);
        assert_eq!(
            words(run_on(dev(true, Schedule::InOrder), &text, 4, 32), 1),
            [10],
            "{op}"
        );
    }
}

#[test]
fn a_plain_read_of_another_ctas_atomic_races() {
    // CTA 0 adds atomically, CTA 1 reads the word plainly (no fence can order them).
    let text = every_cta(
        "setp.ne.s32 \t%p2, %r5, 0;\n\t@%p2 ld.global.u32 \t%r4, [%rd2];\n\
         \t@!%p2 atom.global.add.u32 \t%r4, [%rd2], %r3;",
    );
    let f = fault(&text, 2, 32);
    assert_says(&f, "different CTAs");
    assert_eq!(
        words(run_on(dev(false, Schedule::InOrder), &text, 2, 32), 1),
        [1]
    );
}

#[test]
fn ctas_reading_one_word_and_writing_their_own_do_not_race() {
    // Every CTA reads out[3] (read-only, by every thread) and writes out[ctaid].
    let text = every_cta(
        "ld.global.u32 \t%r4, [%rd2+12];\n\tmul.wide.u32 \t%rd3, %r5, 4;\n\
         \tadd.s64 \t%rd3, %rd2, %rd3;\n\tadd.s32 \t%r4, %r4, %r3;\n\tst.global.u32 \t[%rd3], %r4;",
    );
    assert_eq!(
        words(run_on(dev(true, Schedule::InOrder), &text, 3, 32), 3),
        [1, 2, 3]
    );
}

#[test]
fn a_write_to_a_word_many_ctas_read_races() {
    // Eight CTAs read out[3] (after the second, reads take the summary's lock-free path);
    // CTA 5 also writes it.
    let text = every_cta(
        "ld.global.u32 \t%r4, [%rd2+12];\n\tsetp.ne.s32 \t%p2, %r5, 5;\n\
         \t@!%p2 st.global.u32 \t[%rd2+12], %r3;",
    );
    let f = fault(&text, 8, 32);
    assert_says(&f, "different CTAs");
    // The same with every CTA updating it atomically and CTA 5 reading it plainly.
    let text = every_cta(
        "setp.ne.s32 \t%p2, %r5, 5;\n\t@%p2 atom.global.add.u32 \t%r4, [%rd2+12], %r3;\n\
         \t@!%p2 ld.global.u32 \t%r4, [%rd2+12];",
    );
    let f = fault(&text, 8, 32);
    assert_says(&f, "different CTAs");
}

/// `in` (`%rd3`) is read by thread 0 through `load` (`ld.global.nc` or not) into `out`
/// (`%rd4`); thread `writer` of CTA `writer_cta` stores 7 to `in[0]`, before the load in
/// code order when `store_first`. A `bar.sync` between the two orders them within a CTA,
/// which `.nc` does not care about.
fn nc_kernel(load: &str, writer: u32, writer_cta: u32, store_first: bool) -> String {
    // %r7: the thread's index in the grid (CTAs of 32 threads).
    let store = format!(
        "\tsetp.ne.s32 \t%p1, %r7, {};\n\t@%p1 bra \t$L__BB0_S;\n\tmov.u32 \t%r2, 7;\n\
         \tst.global.u32 \t[%rd3], %r2;\n$L__BB0_S:\n",
        32 * writer_cta + writer
    );
    let read = format!(
        "\tsetp.ne.s32 \t%p2, %r7, 0;\n\t@%p2 bra \t$L__BB0_L;\n\
         \t{load} \t%r3, [%rd3];\n\tst.global.u32 \t[%rd4], %r3;\n$L__BB0_L:\n"
    );
    let (first, second) = if store_first {
        (store, read)
    } else {
        (read, store)
    };
    ptx(&in_out(
        "nc",
        &[("pred", 3), ("b32", 8), ("b64", 6)],
        &format!(
            "\tmov.u32 \t%r6, %ctaid.x;\n\tmad.lo.s32 \t%r7, %r6, 32, %r1;\n\
             {first}\tbar.sync \t0;\n{second}\tret;\n"
        ),
    ))
}

fn run_nc(dev: Device, text: &str, grid: u32) -> (Loaded, u64, Result<LaunchStats, SimError>) {
    let k = Loaded::on(dev, text.to_string());
    let input = upload_u32(&k.dev, &[5]);
    let out = k.dev.alloc_zeroed(4).expect("alloc");
    let result = k.launch(grid, 32, &[Arg::U64(input), Arg::U64(out)]);
    (k, out, result)
}

#[test]
fn store_to_a_word_read_through_nc_is_reported_in_either_order() {
    // (writer thread, writer CTA, store first in code, grid): the same thread, another
    // thread, another CTA.
    for (writer, cta, store_first, grid) in [
        (0, 0, false, 1),
        (0, 0, true, 1),
        (1, 0, false, 1),
        (0, 1, true, 2),
    ] {
        let text = nc_kernel("ld.global.nc.u32", writer, cta, store_first);
        let (_, _, result) = run_nc(dev(true, Schedule::InOrder), &text, grid);
        let f = expect_fault(result, Checker::Globalcheck);
        assert_says(&f, "ld.global.nc");
        assert_says(&f, "read-only for the whole launch");
        let (_, _, result) = run_nc(dev(false, Schedule::InOrder), &text, grid);
        expect_ok(result);
    }
    // Unchecked, the same thread reads what it stored.
    let text = nc_kernel("ld.global.nc.u32", 0, 0, true);
    let (k, out, result) = run_nc(dev(false, Schedule::InOrder), &text, 1);
    expect_ok(result);
    assert_eq!(k.download_u32(out, 1), [7]);
}

#[test]
fn coherent_load_after_own_store_is_fine() {
    // The fixed kernel: a plain ld.global; the same thread stores then loads.
    let text = nc_kernel("ld.global.u32", 0, 0, true);
    let (k, out, result) = run_nc(dev(true, Schedule::InOrder), &text, 1);
    expect_ok(result);
    assert_eq!(k.download_u32(out, 1), [7]);
    // Read-only data read through .nc by every CTA is what .nc is for.
    let text = nc_kernel("ld.global.nc.u32", 99, 0, false);
    let (k, out, result) = run_nc(dev(true, Schedule::InOrder), &text, 3);
    expect_ok(result);
    assert_eq!(k.download_u32(out, 1), [5]);
}

/// Thread t stores the 16-bit value t to `out` + 2·`stride`·t.
fn halves(stride: u32) -> String {
    probe(&format!(
        "\tmul.wide.u32 \t%rd3, %r1, {};\n\tadd.s64 \t%rd3, %rd2, %rd3;\n\
         \tcvt.u16.u32 \t%rs1, %r1;\n\tst.global.u16 \t[%rd3], %rs1;\n\tret;\n",
        2 * stride
    ))
}

#[test]
fn threads_storing_the_two_halves_of_a_word_do_not_race() {
    let got = words(run_on(dev(true, Schedule::InOrder), &halves(1), 1, 8), 4);
    assert_eq!(got, [0x0001_0000, 0x0003_0002, 0x0005_0004, 0x0007_0006]);
    // Stride 0: every thread stores to the same half.
    let f = fault(&halves(0), 1, 8);
    assert_says(&f, "write races with a write by thread (0,0,0)");
}

#[test]
fn schedules_parse_by_name() {
    for schedule in SCHEDULES {
        assert_eq!(schedule.to_string().parse::<Schedule>(), Ok(schedule));
    }
    let err = "random".parse::<Schedule>().expect_err("unknown");
    assert!(err.contains("in-order, reversed, highest-pc"), "{err}");
}

#[test]
fn the_last_half_of_an_odd_sized_allocation_is_checked() {
    // Six bytes: the last half is alone in its word. Every thread stores its id there.
    let text = probe("\tcvt.u16.u32 \t%rs1, %r1;\n\tst.global.u16 \t[%rd2+4], %rs1;\n\tret;\n");
    let k = Loaded::on(dev(true, Schedule::InOrder), text.clone());
    let out = k.dev.alloc_zeroed(6).expect("alloc");
    let f = expect_fault(k.launch(1, 2, &[Arg::U64(out)]), Checker::Globalcheck);
    assert_eq!(f.address, Some(out + 4));
    assert_says(&f, "write races with a write by thread (0,0,0)");
    // One thread alone stores there without a fault.
    let k = Loaded::on(dev(true, Schedule::InOrder), text);
    let out = k.dev.alloc_zeroed(6).expect("alloc");
    expect_ok(k.launch(1, 1, &[Arg::U64(out)]));
}

#[test]
fn two_launches_in_a_row_share_no_state() {
    // Thread nctaid − 1 of each CTA: with one CTA it stores 42 to out[1]; with two it
    // loads out[1] and stores it to out[0]. Within either launch nothing races; a first
    // launch's write kept into the second would race with both CTAs' reads.
    let text = probe(
        "\tmov.u32 \t%r6, %nctaid.x;\n\tsub.s32 \t%r7, %r6, 1;\n\
         \tsetp.ne.s32 \t%p1, %r1, %r7;\n\t@%p1 bra \t$L__BB0_E;\n\
         \tsetp.ne.s32 \t%p2, %r6, 1;\n\t@%p2 bra \t$L__BB0_R;\n\
         \tmov.u32 \t%r2, 42;\n\tst.global.u32 \t[%rd2+4], %r2;\n\tbra \t$L__BB0_E;\n\
         $L__BB0_R:\n\tld.global.u32 \t%r3, [%rd2+4];\n\tst.global.u32 \t[%rd2], %r3;\n\
         $L__BB0_E:\n\tret;\n",
    );
    let k = Loaded::on(dev(true, Schedule::InOrder), text);
    let out = k.dev.alloc_zeroed(16).expect("alloc");
    for _ in 0..40 {
        expect_ok(k.launch(1, 32, &[Arg::U64(out)]));
        expect_ok(k.launch(2, 32, &[Arg::U64(out)]));
    }
    assert_eq!(k.download_u32(out, 2), [42, 42]);
}
