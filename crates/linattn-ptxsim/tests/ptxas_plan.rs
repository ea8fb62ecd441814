//! The memory counters count what ptxas makes of the PTX (`linattn_ptxsim::ptxas`): adjacent
//! accesses it can prove aligned become one vector access, shared loads it can serve from
//! registers are dropped. Each kernel here is checked for its values too: the plan changes
//! only what is counted, never what runs.

mod common;

use common::*;
use linattn_ptxsim::{Arg, Counters};

/// Each thread t writes 4 floats (t, t+1, t+2, t+3) to out[4t..4t+4]: two scalar stores
/// then one `.v2` store through `%rd6`, or (`v2_evidence` false) four scalar stores, where
/// nothing tells ptxas `%rd6` is 8-aligned.
fn run_stores(v2_evidence: bool) -> Counters {
    let tail = if v2_evidence {
        "\tst.global.v2.f32 \t[%rd6+8], {%f3, %f4};\n"
    } else {
        "\tst.global.f32 \t[%rd6+8], %f3;\n\tst.global.f32 \t[%rd6+12], %f4;\n"
    };
    let body = format!(
        "\tcvta.to.global.u64 \t%rd2, %rd1;
\tmov.u32 \t%r1, %tid.x;
\tmul.wide.u32 \t%rd5, %r1, 16;
\tadd.s64 \t%rd6, %rd2, %rd5;
\tcvt.rn.f32.u32 \t%f1, %r1;
\tadd.f32 \t%f2, %f1, 0f3F800000;
\tadd.f32 \t%f3, %f1, 0f40000000;
\tadd.f32 \t%f4, %f1, 0f40400000;
\tst.global.f32 \t[%rd6], %f1;
\tst.global.f32 \t[%rd6+4], %f2;
{tail}\tret;
"
    );
    let text = Entry {
        name: "stores",
        params: &[("u64", "%rd1")],
        regs: &[("b32", 4), ("f32", 6), ("b64", 8)],
        body: &body,
        ..Entry::default()
    }
    .ptx();
    let k = Loaded::new(text);
    k.dev.count_memory(true);
    let out = k.output(128);
    let c = expect_ok(k.launch(1, 32, &[Arg::U64(out)])).counters;
    let expected: Vec<f32> = (0..128).map(|i| (i / 4 + i % 4) as f32).collect();
    assert_eq!(k.download_f32(out, 128), expected);
    c
}

#[test]
fn adjacent_stores_proven_aligned_count_as_one_vector_store() {
    // 32 lanes × 8 bytes at a 16-byte stride: 16 sectors per 8-byte request.
    let fused = run_stores(true);
    assert_eq!(fused.global_store_requests, 2);
    assert_eq!(fused.global_store_sectors, 32);
    assert_eq!(fused.unique_store_sectors, 16);
    // Without the .v2 store nothing proves %rd6 8-aligned (the pointer parameter could be
    // any multiple of 4): four scalar stores, 16 sectors each.
    let scalar = run_stores(false);
    assert_eq!(scalar.global_store_requests, 4);
    assert_eq!(scalar.global_store_sectors, 64);
    assert_eq!(scalar.unique_store_sectors, 16);
}

/// One warp: thread t stores t to tile[t], then (after a barrier) loads `loads` (PTX text,
/// using `%rd4` = &tile[0] and `%rd5` = &tile[t]) and writes %r4 + %r5 to out[t].
fn run_shared(loads: &str) -> (Counters, Vec<u32>) {
    let body = format!(
        "\tcvta.to.global.u64 \t%rd2, %rd1;
\tmov.u32 \t%r1, %tid.x;
\tmul.wide.u32 \t%rd3, %r1, 4;
\tmov.u64 \t%rd4, tile;
\tadd.s64 \t%rd5, %rd4, %rd3;
\tst.shared.u32 \t[%rd5], %r1;
\tbar.sync \t0;
{loads}\tadd.s32 \t%r6, %r4, %r5;
\tadd.s64 \t%rd6, %rd2, %rd3;
\tst.global.u32 \t[%rd6], %r6;
\tret;
"
    );
    let text = Entry {
        name: "shared",
        params: &[("u64", "%rd1")],
        regs: &[("pred", 4), ("b32", 8), ("b64", 8)],
        decls: ".shared .align 16 .b8 tile[128];",
        body: &body,
        ..Entry::default()
    }
    .ptx();
    let k = Loaded::new(text);
    k.dev.count_memory(true);
    let out = k.output(32);
    let c = expect_ok(k.launch(1, 32, &[Arg::U64(out)])).counters;
    (c, k.download_u32(out, 32))
}

#[test]
fn a_repeated_shared_load_is_counted_once_unless_a_barrier_separates_them() {
    // tile[t] loaded twice through the same register: one request.
    let (c, out) = run_shared("\tld.shared.u32 \t%r4, [%rd5];\n\tld.shared.u32 \t%r5, [%rd5];\n");
    assert_eq!(out, (0..32).map(|t| 2 * t).collect::<Vec<u32>>());
    assert_eq!(c.shared_load_requests, 1);
    assert_eq!(c.shared_load_wavefronts, 1);
    // A barrier between them (another warp may have written): two.
    let (c, _) = run_shared(
        "\tld.shared.u32 \t%r4, [%rd5];\n\tbar.sync \t0;\n\tld.shared.u32 \t%r5, [%rd5];\n",
    );
    assert_eq!(c.shared_load_requests, 2);
    // A shared store between them: two.
    let (c, _) = run_shared(
        "\tld.shared.u32 \t%r4, [%rd5];\n\tst.shared.u32 \t[%rd5], %r1;\n\tld.shared.u32 \t%r5, [%rd5];\n",
    );
    assert_eq!(c.shared_load_requests, 2);
}

/// Two trips of a loop whose body starts with a barrier, loads tile[t], branches (`between`
/// on the branch's side: nothing, or a shared store) and loads tile[t] again in the next block.
fn run_shared_loop(between: &str) -> (Counters, Vec<u32>) {
    run_shared(&format!(
        "\tmov.u32 \t%r7, 0;
$L_top:
\tbar.sync \t0;
\tld.shared.u32 \t%r4, [%rd5];
\tsetp.eq.u32 \t%p1, %r7, 5;
\t@%p1 bra \t$L_join;
{between}\tadd.s32 \t%r4, %r4, 1;
$L_join:
\tld.shared.u32 \t%r5, [%rd5];
\tadd.s32 \t%r7, %r7, 1;
\tsetp.lt.u32 \t%p2, %r7, 2;
\t@%p2 bra \t$L_top;
"
    ))
}

#[test]
fn a_repeated_shared_load_in_a_loop_is_counted_once_per_trip() {
    // The barrier at the top of the loop runs between the second load of one trip and the
    // first of the next, never between a first load and the second load it dominates: ptxas
    // keeps the value in a register (cc_forward_h's A fragments of v, loaded again for the
    // split's lo mma, have no LDS in the SASS). One request per trip, two trips.
    let (c, out) = run_shared_loop("");
    assert_eq!(out, (0..32).map(|t| 2 * t + 1).collect::<Vec<u32>>());
    assert_eq!(c.shared_load_requests, 2);
    assert_eq!(c.shared_load_wavefronts, 2);
    // A shared store on a path between them still makes the second load its own.
    let (c, out) = run_shared_loop("\tst.shared.u32 \t[%rd5], %r1;\n");
    assert_eq!(out, (0..32).map(|t| 2 * t + 1).collect::<Vec<u32>>());
    assert_eq!(c.shared_load_requests, 4);
}

#[test]
fn a_pointer_chase_through_shared_memory_counts_every_load() {
    // tile[t] holds its own address; `ld [%r3] -> %r3` twice: the second load's base is the
    // first one's result, not the register it was read through. ptxas issues both
    // (lp_shared_chase's unrolled chase is one LDS per ld.shared in the SASS).
    let (c, out) = run_shared(
        "\tcvt.u32.u64 \t%r3, %rd5;\n\tst.shared.u32 \t[%rd5], %r3;\n\tld.shared.u32 \t%r3, [%r3];\n\tld.shared.u32 \t%r3, [%r3];\n\tcvt.u32.u64 \t%r2, %rd5;\n\tsub.s32 \t%r4, %r3, %r2;\n\tmov.u32 \t%r5, %r1;\n",
    );
    assert_eq!(out, (0..32).collect::<Vec<u32>>());
    assert_eq!(c.shared_load_requests, 2);
}

#[test]
fn adjacent_warp_uniform_shared_loads_fuse_into_one_packed_wavefront() {
    // tile[2], tile[3] by every lane: the symbol is 16-aligned, so ptxas makes one LDS.64;
    // all lanes read one address, so it takes one wavefront (two as two scalar loads).
    let (c, out) = run_shared(
        "\tld.shared.u32 \t%r4, [%rd4+8];\n\tmul.lo.s32 \t%r7, %r1, 3;\n\tld.shared.u32 \t%r5, [%rd4+12];\n",
    );
    assert_eq!(out, vec![5; 32]);
    assert_eq!(c.shared_load_requests, 1);
    assert_eq!(c.shared_load_wavefronts, 1);
    // tile[1], tile[2]: not 8-aligned, two loads.
    let (c, out) =
        run_shared("\tld.shared.u32 \t%r4, [%rd4+4];\n\tld.shared.u32 \t%r5, [%rd4+8];\n");
    assert_eq!(out, vec![3; 32]);
    assert_eq!(c.shared_load_requests, 2);
    assert_eq!(c.shared_load_wavefronts, 2);

    // tile[0..4] by every lane through the symbol itself (no base register, as NVVM writes
    // a fixed index): four scalars, 16-aligned, become one packed LDS.128: two wavefronts.
    let (c, out) = run_shared(
        "\tld.shared.u32 \t%r4, [tile];\n\tld.shared.u32 \t%r5, [tile+4];\n\tld.shared.u32 \t%r6, [tile+8];\n\tld.shared.u32 \t%r7, [tile+12];\n\tadd.s32 \t%r4, %r4, %r6;\n\tadd.s32 \t%r5, %r5, %r7;\n",
    );
    assert_eq!(out, vec![6; 32]);
    assert_eq!(c.shared_load_requests, 1);
    assert_eq!(c.shared_load_wavefronts, 2);
}

#[test]
fn a_difference_keeps_alignment_only_from_a_scaled_subtrahend() {
    // tile[8], tile[9] through %rd7 = tile + 4·%r7, %r7 = 8 by a difference: one LDS.64 when
    // ptxas proves %r7 even (see ptxas/align.rs), else two LDS.
    let pair = |index: &str| {
        run_shared(&format!(
            "{index}\tmul.wide.u32 \t%rd0, %r7, 4;\n\tadd.s64 \t%rd7, %rd4, %rd0;\n\tld.shared.u32 \t%r4, [%rd7];\n\tld.shared.u32 \t%r5, [%rd7+4];\n"
        ))
    };
    // (tid & 64) + 72 − 64: an immediate subtrahend keeps the minuend's alignment.
    let (c, out) =
        pair("\tand.b32 \t%r2, %r1, 64;\n\tadd.s32 \t%r3, %r2, 72;\n\tsub.s32 \t%r7, %r3, 64;\n");
    assert_eq!(out, vec![17; 32]);
    assert_eq!(c.shared_load_requests, 1);
    // 8 − ((tid >> 5) << 6): a shifted subtrahend keeps its 6 bits.
    let (c, out) = pair(
        "\tshr.u32 \t%r0, %r1, 5;\n\tshl.b32 \t%r2, %r0, 6;\n\tmov.u32 \t%r3, 8;\n\tsub.s32 \t%r7, %r3, %r2;\n",
    );
    assert_eq!(out, vec![17; 32]);
    assert_eq!(c.shared_load_requests, 1);
    // 8 − (tid & 64): a masked subtrahend keeps nothing.
    let (c, out) =
        pair("\tand.b32 \t%r2, %r1, 64;\n\tmov.u32 \t%r3, 8;\n\tsub.s32 \t%r7, %r3, %r2;\n");
    assert_eq!(out, vec![17; 32]);
    assert_eq!(c.shared_load_requests, 2);
}
