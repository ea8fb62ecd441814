//! Simulator speed in warp instructions per second (criterion reports it as elements/s;
//! one element = one warp instruction, counted from `LaunchStats` of a calibration run).
//!
//! * `fma_straight_line`: 512 dependent-chain `fma.rn.f32` per thread over 8 accumulators,
//!   no branches (the bulk of the linattn kernels' fully unrolled tiles).
//! * `tiled_matmul_bar_sync`: C = A·B, N = 128, 16×16 shared-memory tiles, two `bar.sync`
//!   per tile, with racecheck + initcheck (the default) and with both off.
//! * `mma_loop`: a loop of `mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32`.
//!
//! `cargo bench -p linattn-ptxsim --bench throughput`

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, SamplingMode, Throughput};
use linattn_ptxsim::{Arg, Checks, LaunchConfig};

// The tests' kernel builder, device and copies, and the tiled matmul they also run.
#[path = "../tests/common/mod.rs"]
mod common;

use common::{config, matmul, upload_f32, Entry, Loaded};

/// One benchmark case: a loaded kernel and its launch.
struct Case {
    k: Loaded,
    config: LaunchConfig,
    args: Vec<Arg>,
}

impl Case {
    /// `text` loaded on a device with `checks`; `launch` sets up the buffers on it and
    /// gives the launch.
    fn new(
        text: String,
        checks: Checks,
        launch: impl FnOnce(&Loaded) -> (LaunchConfig, Vec<Arg>),
    ) -> Case {
        let k = Loaded::on(common::device().with_checks(checks), text);
        let (config, args) = launch(&k);
        Case { k, config, args }
    }

    /// A 1-D launch of `ctas` CTAs of `block` threads with the default checks; `args` sets
    /// up the buffers for that many threads.
    fn one_d(text: String, ctas: u32, block: u32, args: fn(&Loaded, usize) -> Vec<Arg>) -> Case {
        Case::new(text, Checks::default(), |k| {
            (config(ctas, block), args(k, (ctas * block) as usize))
        })
    }

    /// Runs once; returns the warp instructions executed.
    fn run(&self) -> u64 {
        let stats = (self.k.launch_with(&self.config, &self.args))
            .unwrap_or_else(|e| panic!("{}: {e}", self.k.kernel));
        stats.counters.warp_instructions
    }
}

// ---------------------------------------------------------------------------------------

const FMA_ROUNDS: usize = 64;

fn fma_kernel() -> String {
    // acc_k starts at ±2^-(k mod 4): 1, 0.5, 0.25, 0.125, then the same negated.
    let mut body = String::new();
    for k in 0..8 {
        let start = if k < 4 { 1.0f32 } else { -1.0 } / (1 << (k % 4)) as f32;
        body.push_str(&format!(
            "\tmov.f32 \t%f{acc}, 0f{bits:08X};\n",
            acc = 10 + k,
            bits = start.to_bits()
        ));
    }
    for round in 0..FMA_ROUNDS {
        for k in 0..8 {
            // acc_k = acc_k * x + c_round
            let c = 0.5f32 + round as f32 / 1024.0;
            body.push_str(&format!(
                "\tfma.rn.f32 \t%f{acc}, %f{acc}, %f1, 0f{bits:08X};\n",
                acc = 10 + k,
                bits = c.to_bits()
            ));
        }
    }
    Entry {
        name: "fma_chain",
        params: &[("u64", "%rd1"), ("u64", "%rd2")],
        regs: &[("b32", 6), ("f32", 32), ("b64", 8)],
        body: &format!(
            r#"	mov.u32 	%r1, %ctaid.x;
	mov.u32 	%r2, %ntid.x;
	mov.u32 	%r3, %tid.x;
	mad.lo.s32 	%r4, %r1, %r2, %r3;
	cvta.to.global.u64 	%rd3, %rd1;
	mul.wide.s32 	%rd4, %r4, 4;
	add.s64 	%rd5, %rd3, %rd4;
	ld.global.nc.f32 	%f1, [%rd5];
{body}	add.f32 	%f20, %f10, %f11;
	add.f32 	%f21, %f12, %f13;
	add.f32 	%f22, %f14, %f15;
	add.f32 	%f23, %f16, %f17;
	add.f32 	%f24, %f20, %f21;
	add.f32 	%f25, %f22, %f23;
	add.f32 	%f26, %f24, %f25;
	cvta.to.global.u64 	%rd6, %rd2;
	add.s64 	%rd7, %rd6, %rd4;
	st.global.f32 	[%rd7], %f26;
	ret;
"#
        ),
        ..Entry::default()
    }
    .ptx()
}

/// `x[i] = 0.25 + (i mod 97) / 400` in, one f32 out per thread.
fn fma_args(k: &Loaded, threads: usize) -> Vec<Arg> {
    let x: Vec<f32> = (0..threads)
        .map(|i| 0.25 + (i % 97) as f32 / 400.0)
        .collect();
    vec![
        Arg::U64(upload_f32(&k.dev, &x)),
        Arg::U64(k.output(threads)),
    ]
}

// ---------------------------------------------------------------------------------------

const N: usize = 128;

fn matmul_case(checks: Checks) -> Case {
    let mut problem = None;
    let case = Case::new(matmul::kernel("bar.sync \t0;"), checks, |k| {
        let p = problem.insert(matmul::Problem::new(&k.dev, N));
        (p.config, p.args.clone())
    });
    let problem = problem.expect("set up by Case::new");
    case.run();
    problem.check(&case.k.download_f32(problem.c, N * N), 17);
    case
}

// ---------------------------------------------------------------------------------------

const MMA_ITERATIONS: u32 = 64;

fn mma_kernel() -> String {
    let mma = "\tmma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%f1, %f2, %f3, %f4}, {%r2, %r3, %r4, %r5}, {%r6, %r7}, {%f1, %f2, %f3, %f4};\n";
    let body = mma.repeat(4);
    Entry {
        name: "mma_loop",
        params: &[("u64", "%rd1"), ("u32", "%r9")],
        regs: &[("pred", 2), ("b32", 12), ("f32", 8), ("b64", 8)],
        body: &format!(
            r#"	mov.u32 	%r1, %tid.x;
	and.b32 	%r8, %r1, 7;
	// A = 2^-8 (f16 0x1c00) plus a lane-dependent low bit, B = 1.0
	or.b32 	%r2, %r8, 469769216;
	mov.u32 	%r3, 469769216;
	mov.u32 	%r4, 469769216;
	or.b32 	%r5, %r8, 469769216;
	mov.u32 	%r6, 1006648320;
	mov.u32 	%r7, 1006648320;
	mov.f32 	%f1, 0f00000000;
	mov.f32 	%f2, 0f00000000;
	mov.f32 	%f3, 0f00000000;
	mov.f32 	%f4, 0f00000000;
	mov.u32 	%r10, 0;

$L__BB0_1:
{body}	add.s32 	%r10, %r10, 1;
	setp.lt.u32 	%p1, %r10, %r9;
	@%p1 bra 	$L__BB0_1;

	mov.u32 	%r11, %ctaid.x;
	mov.u32 	%r8, %ntid.x;
	mad.lo.s32 	%r11, %r11, %r8, %r1;
	cvta.to.global.u64 	%rd2, %rd1;
	mul.wide.u32 	%rd3, %r11, 16;
	add.s64 	%rd4, %rd2, %rd3;
	st.global.f32 	[%rd4], %f1;
	st.global.f32 	[%rd4+4], %f2;
	st.global.f32 	[%rd4+8], %f3;
	st.global.f32 	[%rd4+12], %f4;
	ret;
"#
        ),
        ..Entry::default()
    }
    .ptx()
}

/// Four f32 out per thread, and the loop count.
fn mma_args(k: &Loaded, threads: usize) -> Vec<Arg> {
    vec![Arg::U64(k.output(4 * threads)), Arg::U32(MMA_ITERATIONS)]
}

// ---------------------------------------------------------------------------------------

fn bench(c: &mut Criterion) {
    let no_checks = Checks {
        racecheck: false,
        initcheck: false,
        globalcheck: false,
        ..Checks::default()
    };
    let cases = [
        (
            "fma_straight_line",
            Case::one_d(fma_kernel(), 64, 256, fma_args),
        ),
        ("tiled_matmul_bar_sync", matmul_case(Checks::default())),
        ("tiled_matmul_bar_sync_nochecks", matmul_case(no_checks)),
        ("mma_loop", Case::one_d(mma_kernel(), 32, 128, mma_args)),
    ];
    let mut group = c.benchmark_group("ptxsim_warp_instructions");
    // Flat sampling: every launch takes milliseconds, so 10 samples of a few launches each.
    group
        .sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    for (name, case) in &cases {
        let warp_instructions = case.run();
        eprintln!(
            "{name}: {warp_instructions} warp instructions per launch ({} CTAs of {:?})",
            case.config.grid.iter().product::<u32>(),
            case.config.block
        );
        group.throughput(Throughput::Elements(warp_instructions));
        group.bench_function(*name, |b| b.iter(|| std::hint::black_box(case.run())));
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
