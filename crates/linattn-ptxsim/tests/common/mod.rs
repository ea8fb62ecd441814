//! Shared helpers of the simulator's integration tests: the PTX module header, a device,
//! host <-> device copies, launch shorthands, fault expectations, and a "lanes" harness
//! that runs an instruction snippet once per thread on per-thread inputs.
//!
//! Every kernel the tests run is hand-written PTX in the shape NVRTC emits
//! (`ld.param.u64`, `cvta.to.global.u64`, `mov.u32 %r1, %tid.x;`, `$L__BB0_n:` labels), so
//! the tests need neither NVRTC nor a GPU.

#![allow(dead_code)]

use linattn_ptxsim::{
    Arg, Checker, Device, Fault, LaunchConfig, LaunchStats, Module, SimArch, SimError,
};

/// The module header NVRTC 13 writes for sm_90.
pub const HEADER: &str = "//\n\
// Hand-written in the style of the NVIDIA NVVM Compiler output\n\
//\n\
\n\
.version 9.0\n\
.target sm_90\n\
.address_size 64\n\
\n";

/// `body` (one or more `.entry` definitions) behind the module header.
pub fn ptx(body: &str) -> String {
    format!("{HEADER}{body}")
}

/// A simulated H100 with 256 MiB of device memory.
pub fn device() -> Device {
    Device::new(SimArch::SM90, 256 << 20)
}

/// Loads `text`, panicking with the parser's message and the text if it does not parse.
pub fn load(dev: &Device, text: &str) -> Module {
    dev.load(text)
        .unwrap_or_else(|e| panic!("the test PTX does not load: {e}\n{text}"))
}

/// A 1-D launch.
pub fn config(grid: u32, block: u32) -> LaunchConfig {
    LaunchConfig {
        grid: [grid, 1, 1],
        block: [block, 1, 1],
        dynamic_shared_bytes: 0,
    }
}

pub fn upload_u32(dev: &Device, data: &[u32]) -> u64 {
    let bytes: Vec<u8> = data.iter().flat_map(|v| v.to_le_bytes()).collect();
    let ptr = dev.alloc(bytes.len() as u64).expect("alloc");
    dev.write(ptr, &bytes).expect("write");
    ptr
}

pub fn upload_f32(dev: &Device, data: &[f32]) -> u64 {
    let bits: Vec<u32> = data.iter().map(|v| v.to_bits()).collect();
    upload_u32(dev, &bits)
}

/// An output buffer of `n` 32-bit words, allocated without initialisation (a kernel that
/// read it before writing would be an initcheck fault).
pub fn output(dev: &Device, words: usize) -> u64 {
    dev.alloc(4 * words as u64).expect("alloc")
}

pub fn download_u32(dev: &Device, ptr: u64, n: usize) -> Vec<u32> {
    let mut bytes = vec![0u8; 4 * n];
    dev.read(ptr, &mut bytes).expect("read");
    bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

pub fn download_f32(dev: &Device, ptr: u64, n: usize) -> Vec<f32> {
    download_u32(dev, ptr, n)
        .into_iter()
        .map(f32::from_bits)
        .collect()
}

pub fn download_u64(dev: &Device, ptr: u64, n: usize) -> Vec<u64> {
    let mut bytes = vec![0u8; 8 * n];
    dev.read(ptr, &mut bytes).expect("read");
    bytes
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect()
}

/// The launch passed; its stats.
pub fn expect_ok(result: Result<LaunchStats, SimError>) -> LaunchStats {
    result.unwrap_or_else(|e| panic!("the launch should pass, it failed: {e}"))
}

/// The launch stopped with a fault of `checker`; the fault.
pub fn expect_fault(result: Result<LaunchStats, SimError>, checker: Checker) -> Fault {
    match result {
        Err(SimError::Fault(fault)) if fault.checker == checker => *fault,
        Err(other) => panic!("expected a {checker} fault, got: {other}"),
        Ok(stats) => panic!(
            "expected a {checker} fault, but the launch passed ({} warp instructions)",
            stats.counters.warp_instructions
        ),
    }
}

/// The 1-based line of `text` that contains `needle` (which must occur on exactly one line).
pub fn line_of(text: &str, needle: &str) -> u32 {
    let hits: Vec<usize> = text
        .lines()
        .enumerate()
        .filter(|(_, l)| l.contains(needle))
        .map(|(i, _)| i + 1)
        .collect();
    assert_eq!(
        hits.len(),
        1,
        "`{needle}` should be on exactly one line of the test PTX, found on lines {hits:?}"
    );
    hits[0] as u32
}

/// A kernel for instruction-semantics tests. Thread `i < n` loads `%r1`, `%r2`, `%r3` from
/// `a[i]`, `b[i]`, `c[i]` (.b32 each), runs `snippet`, then stores `%r4` to `out32[i]` and
/// `%rd20` to `out64[i]`.
///
/// The snippet may use `%r7..%r31`, `%f0..%f31`, `%rs0..%rs15`, `%p0..%p14` and
/// `%rd20..%rd31` freely (the harness owns `%r1..%r6`, `%rd1..%rd19` and `%p15`; `%r4` and
/// `%rd20` start at zero).
pub fn lanes_kernel(name: &str, snippet: &str) -> String {
    format!(
        r#".visible .entry {name}(
	.param .u64 {name}_param_0,
	.param .u64 {name}_param_1,
	.param .u64 {name}_param_2,
	.param .u64 {name}_param_3,
	.param .u64 {name}_param_4,
	.param .u32 {name}_param_5
)
{{
	.reg .pred 	%p<16>;
	.reg .b16 	%rs<16>;
	.reg .b32 	%r<32>;
	.reg .f32 	%f<32>;
	.reg .b64 	%rd<32>;


	ld.param.u64 	%rd1, [{name}_param_0];
	ld.param.u64 	%rd2, [{name}_param_1];
	ld.param.u64 	%rd3, [{name}_param_2];
	ld.param.u64 	%rd4, [{name}_param_3];
	ld.param.u64 	%rd5, [{name}_param_4];
	ld.param.u32 	%r5, [{name}_param_5];
	mov.u32 	%r6, %tid.x;
	setp.ge.u32 	%p15, %r6, %r5;
	@%p15 bra 	$L__BB0_2;

	cvta.to.global.u64 	%rd6, %rd1;
	mul.wide.u32 	%rd7, %r6, 4;
	add.s64 	%rd8, %rd6, %rd7;
	ld.global.nc.u32 	%r1, [%rd8];
	cvta.to.global.u64 	%rd9, %rd2;
	add.s64 	%rd10, %rd9, %rd7;
	ld.global.nc.u32 	%r2, [%rd10];
	cvta.to.global.u64 	%rd11, %rd3;
	add.s64 	%rd12, %rd11, %rd7;
	ld.global.nc.u32 	%r3, [%rd12];
{snippet}
	cvta.to.global.u64 	%rd13, %rd4;
	add.s64 	%rd14, %rd13, %rd7;
	st.global.u32 	[%rd14], %r4;
	cvta.to.global.u64 	%rd15, %rd5;
	mul.wide.u32 	%rd16, %r6, 8;
	add.s64 	%rd17, %rd15, %rd16;
	st.global.u64 	[%rd17], %rd20;

$L__BB0_2:
	ret;

}}
"#
    )
}

/// Runs `snippet` (see [`lanes_kernel`]) on one CTA with one thread per input triple;
/// returns `(out32, out64)`.
pub fn run_lanes(snippet: &str, inputs: &[[u32; 3]]) -> (Vec<u32>, Vec<u64>) {
    let n = inputs.len();
    assert!((1..=1024).contains(&n));
    let text = ptx(&lanes_kernel("lanes", snippet));
    let dev = device();
    let module = load(&dev, &text);
    let column = |k: usize| -> Vec<u32> { inputs.iter().map(|t| t[k]).collect() };
    let a = upload_u32(&dev, &column(0));
    let b = upload_u32(&dev, &column(1));
    let c = upload_u32(&dev, &column(2));
    let out32 = output(&dev, n);
    let out64 = output(&dev, 2 * n);
    let result = dev.launch(
        &module,
        "lanes",
        &config(1, n as u32),
        &[
            Arg::U64(a),
            Arg::U64(b),
            Arg::U64(c),
            Arg::U64(out32),
            Arg::U64(out64),
            Arg::U32(n as u32),
        ],
    );
    if let Err(e) = result {
        panic!("the snippet failed: {e}\n{snippet}");
    }
    (download_u32(&dev, out32, n), download_u64(&dev, out64, n))
}

/// Like [`run_lanes`] for f32 inputs; returns `out32` as the raw bits.
pub fn run_lanes_f32(snippet: &str, inputs: &[[f32; 3]]) -> Vec<u32> {
    let bits: Vec<[u32; 3]> = inputs.iter().map(|t| t.map(f32::to_bits)).collect();
    run_lanes(snippet, &bits).0
}
