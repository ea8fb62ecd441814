//! racecheck: shared-memory accesses of different threads, at least one a write, must be
//! ordered by `bar.sync` (any two threads of the CTA) or by `bar.warp.sync` (two lanes of one
//! warp). Each planted race is reported; the same kernel with the barrier passes and
//! computes the right value.

mod common;

use common::*;
use linattn_ptxsim::{Arg, Checker, Checks, Device, Fault, LaunchStats, SimError};

const WORD: &str = "_ZZ4raceE4word";

/// The one-pointer kernel `race` (`out` in `%rd2`) with `regs` and `body`.
fn race(regs: &[(&str, u32)], decls: &str, body: &str) -> String {
    let body = format!("\tcvta.to.global.u64 \t%rd2, %rd1;\n{body}");
    out_only("race", regs, decls, &body)
}

/// Thread `writer` stores 42 to a shared word, then (after `sync`, which may be empty)
/// thread `reader` loads it and stores it to `out[0]`.
fn write_then_read(writer: u32, reader: u32, sync: &str) -> String {
    race(
        &[("pred", 3), ("b32", 4), ("b64", 4)],
        &format!("// demoted variable\n.shared .align 4 .u32 {WORD};"),
        &format!(
            r#"	mov.u64 	%rd3, {WORD};
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
"#
        ),
    )
}

/// Runs `text` (the `race` kernel) with one CTA of `block` threads and a zeroed `out`.
fn run(text: &str, block: u32) -> (Loaded, u64, Result<LaunchStats, SimError>) {
    run_on(device(), text, block)
}

fn run_on(dev: Device, text: &str, block: u32) -> (Loaded, u64, Result<LaunchStats, SimError>) {
    let k = Loaded::on(dev, text.to_string());
    let out = k.dev.alloc_zeroed(4).expect("alloc");
    let result = k.launch(1, block, &[Arg::U64(out)]);
    (k, out, result)
}

/// The launch stopped with a racecheck fault; the fault.
fn race_fault(text: &str, block: u32) -> Fault {
    let (_, _, result) = run(text, block);
    expect_fault(result, Checker::Racecheck)
}

/// [`write_then_read`] with `sync` is race-free: the reader stores the 42.
fn expect_ordered(writer: u32, reader: u32, sync: &str, block: u32) {
    expect_word(run(&write_then_read(writer, reader, sync), block), 42);
}

/// One test per row: `name: (writer, reader, sync, block)` is [`expect_ordered`].
macro_rules! ordered {
    ($($name:ident: ($writer:expr, $reader:expr, $sync:expr, $block:expr);)*) => {$(
        #[test]
        fn $name() {
            expect_ordered($writer, $reader, $sync, $block);
        }
    )*};
}

ordered! {
    read_by_another_warp_after_bar_sync_is_ordered: (0, 32, "bar.sync \t0;", 64);
    read_by_another_lane_after_bar_warp_sync_is_ordered: (0, 1, "bar.warp.sync \t-1;", 32);
    same_thread_needs_no_barrier: (5, 5, "", 64);
}

/// The launch passed and left `want` in `out[0]`.
fn expect_word(run: (Loaded, u64, Result<LaunchStats, SimError>), want: u32) {
    let (k, out, result) = run;
    expect_ok(result);
    assert_eq!(k.download_u32(out, 1), vec![want]);
}

#[test]
fn read_by_another_warp_without_bar_sync_races() {
    let text = write_then_read(0, 32, "");
    let fault = race_fault(&text, 64);
    assert_eq!(fault.site.kernel, "race");
    assert_at(&fault, line_of(&text, "ld.shared.u32"), [32, 0, 0]);
    assert_eq!(fault.address, Some(0), "shared offset of the word");
    assert_says(&fault, "read races with a write by thread 0 (warp 0)");
}

#[test]
fn bar_warp_sync_does_not_order_two_warps() {
    // bar.warp.sync orders the lanes of one warp only.
    let text = write_then_read(0, 32, "bar.warp.sync 	-1;");
    race_fault(&text, 64);
}

#[test]
fn read_by_another_lane_without_bar_warp_sync_races() {
    let text = write_then_read(0, 1, "");
    let fault = race_fault(&text, 32);
    assert_at(&fault, line_of(&text, "ld.shared.u32"), [1, 0, 0]);
    assert_says(&fault, "bar.warp.sync");
}

#[test]
fn racecheck_can_be_turned_off() {
    let text = write_then_read(0, 32, "");
    let dev = device().with_checks(Checks {
        racecheck: false,
        initcheck: true,
        ..Checks::default()
    });
    expect_word(run_on(dev, &text, 64), 42);
}

/// Thread 0 writes the word, everyone meets at a barrier, thread 0 reads it back, then
/// thread 32 overwrites it — after `sync`, which may be empty (write-after-read race).
fn read_then_overwrite(sync: &str) -> String {
    race(
        &[("pred", 4), ("b32", 5), ("b64", 4)],
        &format!("// demoted variable\n.shared .align 4 .u32 {WORD};"),
        &format!(
            r#"	mov.u32 	%r1, %tid.x;
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
"#
        ),
    )
}

#[test]
fn write_after_read_across_warps_without_barrier_races() {
    let text = read_then_overwrite("");
    let fault = race_fault(&text, 64);
    assert_at(&fault, line_of(&text, "the overwrite"), [32, 0, 0]);
    assert_says(&fault, "write races with a read by thread 0 (warp 0)");
}

#[test]
fn write_after_read_across_warps_with_barrier_passes() {
    let text = read_then_overwrite("bar.sync 	0;");
    expect_word(run(&text, 64), 42);
}

/// The two-phase kernel: `s[tid] = in[tid]`, then `out[tid] = s[(tid + 1) % ntid]`, with
/// or without the barrier between the phases.
fn two_phase(barrier: &str) -> String {
    Entry {
        name: "rotate",
        params: &[("u64", "%rd1"), ("u64", "%rd2")],
        regs: &[("b32", 9), ("f32", 3), ("b64", 14)],
        decls: "// demoted variable\n.shared .align 4 .b8 _ZZ6rotateE1s[512];",
        body: &format!(
            r#"	cvta.to.global.u64 	%rd3, %rd1;
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
"#
        ),
        ..Entry::default()
    }
    .ptx()
}

const BLOCK: u32 = 128;
const CTAS: u32 = 3;

/// Runs the two-phase kernel on `input`; the output, or the error.
fn run_two_phase(dev: Device, text: &str, input: &[f32]) -> Result<Vec<f32>, SimError> {
    let k = Loaded::on(dev, text.to_string());
    let n = (BLOCK * CTAS) as usize;
    assert_eq!(input.len(), n);
    let pin = upload_f32(&k.dev, input);
    let pout = k.output(n);
    k.launch(CTAS, BLOCK, &[Arg::U64(pin), Arg::U64(pout)])
        .map(|_| k.download_f32(pout, n))
}

fn two_phase_input() -> Vec<f32> {
    (0..(BLOCK * CTAS) as usize)
        .map(|i| (i * 3) as f32 - 7.5)
        .collect()
}

#[test]
fn two_phase_kernel_without_barrier_races() {
    let text = two_phase("");
    let result = run_two_phase(device(), &text, &two_phase_input());
    let fault = expect_fault(result.map(|_| Default::default()), Checker::Racecheck);
    assert_eq!(fault.site.line, line_of(&text, "ld.shared.f32"));
    assert_eq!(fault.site.cta, [0, 0, 0]);
    // Thread 0 reads s[1], which lane 1 of its warp wrote with nothing ordering the two.
    assert_eq!(fault.site.thread, [0, 0, 0], "{fault}");
    assert_eq!(fault.address, Some(4));
    assert_says(&fault, "by thread 1 (warp 0)");
}

#[test]
fn two_phase_kernel_with_barrier_rotates() {
    let input = two_phase_input();
    let result = run_two_phase(device(), &two_phase("bar.sync 	0;"), &input);
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
    let result = run_two_phase(device(), &text, &two_phase_input());
    let fault = expect_fault(result.map(|_| Default::default()), Checker::Initcheck);
    assert_eq!(fault.site.thread, [31, 0, 0], "{fault}");
    assert_eq!(fault.address, Some(128));

    let dev = device().with_checks(Checks {
        racecheck: true,
        initcheck: false,
        ..Checks::default()
    });
    let result = run_two_phase(dev, &text, &vec![1.0; (BLOCK * CTAS) as usize]);
    let fault = expect_fault(result.map(|_| Default::default()), Checker::Racecheck);
    assert_at(&fault, line_of(&text, "st.shared.f32"), [32, 0, 0]);
    assert_says(&fault, "write races with a read by thread 31 (warp 0)");
}

/// Thread 0 initialises `s_max`, then every thread's atomic max: without the barrier between
/// them, the other threads' atomics race with thread 0's plain store — even after thread 0's
/// own atomic (ordered after its store) has written the word (the shadow keeps plain writes
/// and atomics apart). With the barrier, the atomics of many threads do not race with each
/// other and give the maximum.
#[test]
fn an_atomic_races_with_an_unordered_plain_initialisation() {
    let text = |barrier: &str| {
        race(
            &[("pred", 2), ("b32", 6), ("b64", 3)],
            ".shared .align 4 .u32 s_max;",
            &format!(
                r#"	mov.u32 	%r1, %tid.x;
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
	st.global.u32 	[%rd2], %r5;

$L__BB0_4:
	ret;
"#
            ),
        )
    };
    let fault = race_fault(&text(""), 64);
    assert!(
        fault.detail.contains("write by thread 0"),
        "{}",
        fault.detail
    );
    // Lane 1 of warp 0 already races: lanes are unordered without bar.warp.sync.
    assert_eq!(fault.site.thread, [1, 0, 0]);
    expect_word(run(&text("\tbar.sync \t0;"), 64), 63);
}

/// Runs the tiled matmul (see `common::matmul`) for n = 32; the problem and C, or the error.
fn run_matmul(text: &str) -> (matmul::Problem, Result<Vec<f32>, SimError>) {
    let k = Loaded::new(text.to_string());
    let problem = matmul::Problem::new(&k.dev, 32);
    let result = k
        .launch_with(&problem.config, &problem.args)
        .map(|_| k.download_f32(problem.c, 32 * 32));
    (problem, result)
}

#[test]
fn tiled_matmul_with_both_barriers_passes_and_multiplies() {
    let (problem, result) = run_matmul(&matmul::kernel("bar.sync \t0;"));
    let c = result.unwrap_or_else(|e| panic!("the launch should pass: {e}"));
    problem.check(&c, 1);
}

#[test]
fn tiled_matmul_without_the_trailing_barrier_races() {
    // The classic bug: the next iteration overwrites the tiles while other threads may
    // still be reading them.
    let text = matmul::kernel("");
    let (_, result) = run_matmul(&text);
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
