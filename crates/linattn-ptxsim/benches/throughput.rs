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
use linattn_ptxsim::{Arg, Checks, Device, LaunchConfig, Module, SimArch};

const HEADER: &str = ".version 9.0\n.target sm_90\n.address_size 64\n\n";

fn device(checks: Checks) -> Device {
    Device::new(SimArch::SM90, 256 << 20).with_checks(checks)
}

fn upload(dev: &Device, data: &[f32]) -> u64 {
    let bytes: Vec<u8> = data.iter().flat_map(|v| v.to_le_bytes()).collect();
    let ptr = dev.alloc(bytes.len() as u64).expect("alloc");
    dev.write(ptr, &bytes).expect("write");
    ptr
}

fn download(dev: &Device, ptr: u64, n: usize) -> Vec<f32> {
    let mut bytes = vec![0u8; 4 * n];
    dev.read(ptr, &mut bytes).expect("read");
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// One benchmark case: a loaded kernel and its launch.
struct Case {
    dev: Device,
    module: Module,
    kernel: &'static str,
    config: LaunchConfig,
    args: Vec<Arg>,
}

impl Case {
    /// Runs once; returns the warp instructions executed.
    fn run(&self) -> u64 {
        let stats = self
            .dev
            .launch(&self.module, self.kernel, &self.config, &self.args)
            .unwrap_or_else(|e| panic!("{}: {e}", self.kernel));
        stats.counters.warp_instructions
    }
}

// ---------------------------------------------------------------------------------------

const FMA_ROUNDS: usize = 64;

fn fma_kernel() -> String {
    let mut body = String::new();
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
    format!(
        r#"{HEADER}.visible .entry fma_chain(
	.param .u64 fma_chain_param_0,
	.param .u64 fma_chain_param_1
)
{{
	.reg .b32 	%r<6>;
	.reg .f32 	%f<32>;
	.reg .b64 	%rd<8>;


	ld.param.u64 	%rd1, [fma_chain_param_0];
	ld.param.u64 	%rd2, [fma_chain_param_1];
	mov.u32 	%r1, %ctaid.x;
	mov.u32 	%r2, %ntid.x;
	mov.u32 	%r3, %tid.x;
	mad.lo.s32 	%r4, %r1, %r2, %r3;
	cvta.to.global.u64 	%rd3, %rd1;
	mul.wide.s32 	%rd4, %r4, 4;
	add.s64 	%rd5, %rd3, %rd4;
	ld.global.nc.f32 	%f1, [%rd5];
	mov.f32 	%f10, 0f3F800000;
	mov.f32 	%f11, 0f3F000000;
	mov.f32 	%f12, 0f3E800000;
	mov.f32 	%f13, 0f3E000000;
	mov.f32 	%f14, 0fBF800000;
	mov.f32 	%f15, 0fBF000000;
	mov.f32 	%f16, 0fBE800000;
	mov.f32 	%f17, 0fBE000000;
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

}}
"#
    )
}

fn fma_case() -> Case {
    let dev = device(Checks::default());
    let module = dev.load(&fma_kernel()).expect("fma kernel");
    const CTAS: u32 = 64;
    const BLOCK: u32 = 256;
    let n = (CTAS * BLOCK) as usize;
    let x: Vec<f32> = (0..n).map(|i| 0.25 + (i % 97) as f32 / 400.0).collect();
    let px = upload(&dev, &x);
    let out = dev.alloc(4 * n as u64).expect("alloc");
    Case {
        dev,
        module,
        kernel: "fma_chain",
        config: LaunchConfig {
            grid: [CTAS, 1, 1],
            block: [BLOCK, 1, 1],
            dynamic_shared_bytes: 0,
        },
        args: vec![Arg::U64(px), Arg::U64(out)],
    }
}

// ---------------------------------------------------------------------------------------

const N: u32 = 128;
const TILE: u32 = 16;

fn matmul_kernel() -> String {
    let mut inner = String::new();
    for k in 0..TILE {
        inner.push_str(&format!(
            "\tld.shared.f32 \t%f{a}, [%rd11+{ao}];\n\tld.shared.f32 \t%f{b}, [%rd13+{bo}];\n\tfma.rn.f32 \t%f1, %f{a}, %f{b}, %f1;\n",
            a = 4 + 2 * k,
            b = 5 + 2 * k,
            ao = 4 * k,
            bo = 4 * TILE * k
        ));
    }
    format!(
        r#"{HEADER}.visible .entry matmul_tiled(
	.param .u64 matmul_tiled_param_0,
	.param .u64 matmul_tiled_param_1,
	.param .u64 matmul_tiled_param_2,
	.param .u32 matmul_tiled_param_3
)
{{
	.reg .pred 	%p<2>;
	.reg .b32 	%r<20>;
	.reg .f32 	%f<40>;
	.reg .b64 	%rd<24>;
	// demoted variable
	.shared .align 4 .b8 _ZZ12matmul_tiledE2As[1024];
	// demoted variable
	.shared .align 4 .b8 _ZZ12matmul_tiledE2Bs[1024];

	ld.param.u64 	%rd1, [matmul_tiled_param_0];
	ld.param.u64 	%rd2, [matmul_tiled_param_1];
	ld.param.u64 	%rd3, [matmul_tiled_param_2];
	ld.param.u32 	%r1, [matmul_tiled_param_3];
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
	mov.u64 	%rd6, _ZZ12matmul_tiledE2As;
	add.s64 	%rd7, %rd6, %rd5;
	mov.u64 	%rd8, _ZZ12matmul_tiledE2Bs;
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
	st.shared.f32 	[%rd7], %f2;
	ld.global.nc.f32 	%f3, [%rd17];
	st.shared.f32 	[%rd9], %f3;
	bar.sync 	0;
{inner}	bar.sync 	0;
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
    )
}

fn matmul_case(checks: Checks) -> Case {
    let dev = device(checks);
    let module = dev.load(&matmul_kernel()).expect("matmul kernel");
    let n = N as usize;
    // Small integers: every partial sum is exact, so the check below is exact.
    let a: Vec<f32> = (0..n * n).map(|i| ((i * 7) % 11) as f32 - 5.0).collect();
    let b: Vec<f32> = (0..n * n).map(|i| ((i * 5) % 13) as f32 - 6.0).collect();
    let (pa, pb) = (upload(&dev, &a), upload(&dev, &b));
    let pc = dev.alloc(4 * (n * n) as u64).expect("alloc");
    let case = Case {
        dev,
        module,
        kernel: "matmul_tiled",
        config: LaunchConfig {
            grid: [N / TILE, N / TILE, 1],
            block: [TILE, TILE, 1],
            dynamic_shared_bytes: 0,
        },
        args: vec![Arg::U64(pa), Arg::U64(pb), Arg::U64(pc), Arg::U32(N)],
    };
    case.run();
    let c = download(&case.dev, pc, n * n);
    for (r, row) in c.chunks_exact(n).enumerate().step_by(17) {
        for (col, &v) in row.iter().enumerate() {
            let want: f32 = (0..n).map(|k| a[r * n + k] * b[k * n + col]).sum();
            assert_eq!(v, want, "C[{r}][{col}]");
        }
    }
    case
}

// ---------------------------------------------------------------------------------------

const MMA_ITERATIONS: u32 = 64;

fn mma_kernel() -> String {
    let mma = "\tmma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%f1, %f2, %f3, %f4}, {%r2, %r3, %r4, %r5}, {%r6, %r7}, {%f1, %f2, %f3, %f4};\n";
    let body = mma.repeat(4);
    format!(
        r#"{HEADER}.visible .entry mma_loop(
	.param .u64 mma_loop_param_0,
	.param .u32 mma_loop_param_1
)
{{
	.reg .pred 	%p<2>;
	.reg .b32 	%r<12>;
	.reg .f32 	%f<8>;
	.reg .b64 	%rd<8>;


	ld.param.u64 	%rd1, [mma_loop_param_0];
	ld.param.u32 	%r9, [mma_loop_param_1];
	mov.u32 	%r1, %tid.x;
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

}}
"#
    )
}

fn mma_case() -> Case {
    let dev = device(Checks::default());
    let module = dev.load(&mma_kernel()).expect("mma kernel");
    const CTAS: u32 = 32;
    const BLOCK: u32 = 128;
    let out = dev.alloc(16 * u64::from(CTAS * BLOCK)).expect("alloc");
    Case {
        dev,
        module,
        kernel: "mma_loop",
        config: LaunchConfig {
            grid: [CTAS, 1, 1],
            block: [BLOCK, 1, 1],
            dynamic_shared_bytes: 0,
        },
        args: vec![Arg::U64(out), Arg::U32(MMA_ITERATIONS)],
    }
}

// ---------------------------------------------------------------------------------------

fn bench(c: &mut Criterion) {
    let no_checks = Checks {
        racecheck: false,
        initcheck: false,
    };
    let cases = [
        ("fma_straight_line", fma_case()),
        ("tiled_matmul_bar_sync", matmul_case(Checks::default())),
        ("tiled_matmul_bar_sync_nochecks", matmul_case(no_checks)),
        ("mma_loop", mma_case()),
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
