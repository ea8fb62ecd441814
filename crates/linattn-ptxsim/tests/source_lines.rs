//! Warp instructions per CUDA source line (`Device::count_source_lines`, `Module::source_lines`)
//! on PTX written as NVRTC writes it with `-lineinfo`: `.loc` before the instructions (with
//! `function_name … inlined_at …` for inlined code), `.file` after the entries and a
//! `.section .debug_str` block at the end. Counts known by hand: a loop of `trips` trips.

mod common;

use common::*;
use linattn_ptxsim::{Arg, InstrClass, LaunchConfig, LineCount, SourceLines};

/// `out[tid] = Σ_{i<trips} i` per thread: a setup line (4 instructions), the loop body
/// inlined from `b.cuh:20` (add, add, setp; the branch at `a.cu:11`), one instruction the
/// compiler made for no line (line 0), then the store at `a.cu:12` (3 instructions + ret).
fn looped() -> String {
    let entry = Entry {
        name: "looped",
        params: &[("u64", "%rd1"), ("u32", "%r1")],
        regs: &[("b32", 6), ("b64", 5), ("pred", 2)],
        body: "\t.loc\t1 10 3
\tcvta.to.global.u64 \t%rd2, %rd1;
\tmov.u32 \t%r2, %tid.x;
\tmov.u32 \t%r3, 0;
\tmov.u32 \t%r4, 0;
$L__BB0_1:
\t.loc\t2 20 5, function_name $L__info_string0, inlined_at 1 11 7
\tadd.s32 \t%r4, %r4, %r3;
\tadd.s32 \t%r3, %r3, 1;
\tsetp.lt.u32 \t%p1, %r3, %r1;
\t.loc\t1 11 7
\t@%p1 bra \t$L__BB0_1;
\t.loc\t1 0 7
\tmov.u32 \t%r5, %r4;
\t.loc\t1 12 3
\tmul.wide.u32 \t%rd3, %r2, 4;
\tadd.s64 \t%rd4, %rd2, %rd3;
\tst.global.u32 \t[%rd4], %r5;
\tret;
",
        ..Entry::default()
    }
    .text();
    ptx(&format!(
        "{entry}\t.file\t1 \"/src/a.cu\"\n\t.file\t2 \"/src/b.cuh\", 1700000000, 512\n\
         \t.section\t.debug_str\n\t{{\n$L__info_string0:\n.b8 95,90,49,0\n\t}}\n"
    ))
}

fn line<'a>(lines: &'a SourceLines, file: &str, line: u32) -> &'a LineCount {
    lines
        .lines
        .iter()
        .find(|l| l.file == file && l.line == line)
        .unwrap_or_else(|| panic!("no {file}:{line} in {lines:?}"))
}

#[test]
fn warp_instructions_land_on_their_lines_and_sum_to_the_launch() {
    let (ctas, threads, trips) = (3u32, 64u32, 5u32);
    let warps = u64::from(ctas * threads / 32);
    let k = Loaded::new(looped());
    k.dev.count_source_lines(true);
    let out = k.output((ctas * threads) as usize);
    let stats = expect_ok(k.launch(ctas, threads, &[Arg::U64(out), Arg::U32(trips)]));
    let sum: u32 = (0..trips).sum();
    assert!(k
        .download_u32(out, threads as usize)
        .iter()
        .all(|&v| v == sum));

    let counts = stats
        .instr_counts
        .as_deref()
        .expect("counted per instruction");
    let lines = k
        .module
        .source_lines("looped", counts)
        .expect("the kernel exists");
    assert_eq!(lines.total(), stats.counters.warp_instructions);
    // The parameter loads come before any .loc: no line.
    assert_eq!(line(&lines, "", 0).warp_instructions, 2 * warps);
    assert_eq!(line(&lines, "/src/a.cu", 10).warp_instructions, 4 * warps);
    let body = line(&lines, "/src/b.cuh", 20);
    assert_eq!(body.warp_instructions, 3 * u64::from(trips) * warps);
    assert_eq!(body.static_instructions, 3);
    assert_eq!(
        body.by_class[InstrClass::Integer as usize],
        body.warp_instructions
    );
    let branch = line(&lines, "/src/a.cu", 11);
    assert_eq!(branch.warp_instructions, u64::from(trips) * warps);
    assert_eq!(branch.classes(), vec![(InstrClass::Control, 1.0)]);
    assert_eq!(line(&lines, "/src/a.cu", 0).warp_instructions, warps);
    let store = line(&lines, "/src/a.cu", 12);
    assert_eq!(store.warp_instructions, 4 * warps);
    assert_eq!(store.static_instructions, 4);
    assert_eq!(store.by_class[InstrClass::GlobalStore as usize], warps);
    // Ranked: the loop body first.
    assert_eq!(
        (lines.lines[0].file.as_str(), lines.lines[0].line),
        ("/src/b.cuh", 20)
    );
}

#[test]
fn counting_lines_changes_no_counter_and_is_off_by_default() {
    let run = |count: bool| {
        let k = Loaded::new(looped());
        k.dev.count_memory(true);
        k.dev.count_source_lines(count);
        let out = k.output(128);
        expect_ok(k.launch(2, 64, &[Arg::U64(out), Arg::U32(7)]))
    };
    let (off, on) = (run(false), run(true));
    assert_eq!(off.instr_counts, None);
    assert!(on.instr_counts.is_some());
    assert_eq!(off.counters, on.counters);
}

#[test]
fn a_sampled_launch_scales_its_lines_as_its_counters() {
    let k = Loaded::new(looped());
    k.dev.count_source_lines(true);
    let out = k.output(8 * 64);
    let config = LaunchConfig {
        grid: [1, 8, 1],
        block: [64, 1, 1],
        dynamic_shared_bytes: 0,
    };
    let args = [Arg::U64(out), Arg::U32(3)];
    let whole = expect_ok(k.launch_with(&config, &args));
    let sampled = expect_ok(
        k.dev
            .launch_sampled(&k.module, "looped", &config, &args, Some(2)),
    );
    assert!(sampled.sampled.as_ref().is_some_and(|s| s.scaled));
    assert_eq!(sampled.instr_counts, whole.instr_counts);
    assert_eq!(
        sampled.instr_counts.map(|c| c.iter().sum::<u64>()),
        Some(whole.counters.warp_instructions)
    );
}

#[test]
fn ptx_without_line_information_counts_under_no_line() {
    let text = in_out(
        "plain",
        &[("b32", 3), ("b64", 7)],
        "\tadd.s64 \t%rd6, %rd4, %rd5;\n\tst.global.u32 \t[%rd6], %r1;\n\tret;\n",
    );
    let k = Loaded::new(ptx(&text));
    k.dev.count_source_lines(true);
    let out = k.output(32);
    let stats = expect_ok(k.launch(1, 32, &[Arg::U64(0), Arg::U64(out)]));
    let lines = k
        .module
        .source_lines("plain", stats.instr_counts.as_deref().unwrap_or_default())
        .expect("the kernel exists");
    assert_eq!(lines.lines.len(), 1);
    assert_eq!((lines.lines[0].file.as_str(), lines.lines[0].line), ("", 0));
    assert_eq!(lines.total(), stats.counters.warp_instructions);
}

#[test]
fn ptx_lines_count_each_instruction_at_its_own_line_of_the_text() {
    let text = looped();
    let (trips, warps) = (4u32, 2u64);
    let k = Loaded::new(text.clone());
    k.dev.count_source_lines(true);
    let out = k.output(64);
    let stats = expect_ok(k.launch(1, 64, &[Arg::U64(out), Arg::U32(trips)]));
    let lines = k
        .module
        .ptx_lines("looped", stats.instr_counts.as_deref().unwrap_or_default())
        .expect("the kernel exists");
    assert_eq!(lines.total(), stats.counters.warp_instructions);
    // Every PTX line holds one instruction; the loop body's three each ran `trips` times per
    // warp, found at the text's own line numbers (not at the .loc's b.cuh:20).
    let at = |needle: &str| {
        1 + text
            .lines()
            .position(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("{needle}")) as u32
    };
    for needle in ["add.s32 \t%r4", "add.s32 \t%r3", "setp.lt.u32"] {
        let l = line(&lines, linattn_ptxsim::PTX_TEXT, at(needle));
        assert_eq!(l.static_instructions, 1, "{needle}");
        assert_eq!(l.warp_instructions, u64::from(trips) * warps, "{needle}");
    }
    let store = line(&lines, linattn_ptxsim::PTX_TEXT, at("st.global.u32"));
    assert_eq!(
        (store.warp_instructions, store.classes()),
        (warps, vec![(InstrClass::GlobalStore, 1.0)])
    );
    assert!(lines.lines.iter().all(|l| l.static_instructions == 1));
}
