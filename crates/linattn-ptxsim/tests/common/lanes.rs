//! The "lanes" harness: an instruction snippet run once per thread on per-thread inputs.

use super::{device, download_u64, ptx, upload_u32, Entry, Loaded};
use linattn_ptxsim::{Arg, Device};

/// A kernel for instruction-semantics tests. Thread `i < n` loads `%r1`, `%r2`, `%r3` from
/// `a[i]`, `b[i]`, `c[i]` (.b32 each), runs `snippet`, then stores `%r4` to `out32[i]` and
/// `%rd20` to `out64[i]`.
///
/// The snippet may use `%r7..%r31`, `%f0..%f31`, `%rs0..%rs15`, `%p0..%p14` and
/// `%rd20..%rd31` freely (the harness owns `%r1..%r6`, `%rd1..%rd19` and `%p15`; `%r4` and
/// `%rd20` start at zero).
pub fn lanes_kernel(name: &str, snippet: &str) -> String {
    let body = format!(
        "	mov.u32 	%r6, %tid.x;
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
"
    );
    Entry {
        name,
        params: &[
            ("u64", "%rd1"),
            ("u64", "%rd2"),
            ("u64", "%rd3"),
            ("u64", "%rd4"),
            ("u64", "%rd5"),
            ("u32", "%r5"),
        ],
        regs: &[
            ("pred", 16),
            ("b16", 16),
            ("b32", 32),
            ("f32", 32),
            ("b64", 32),
        ],
        body: &body,
        ..Entry::default()
    }
    .text()
}

/// Runs `snippet` (see [`lanes_kernel`]) on one CTA with one thread per input triple;
/// returns `(out32, out64)`.
pub fn run_lanes(snippet: &str, inputs: &[[u32; 3]]) -> (Vec<u32>, Vec<u64>) {
    run_lanes_on(device(), snippet, inputs)
}

/// [`run_lanes`] on `dev` (a device in another numerics mode, say).
pub fn run_lanes_on(dev: Device, snippet: &str, inputs: &[[u32; 3]]) -> (Vec<u32>, Vec<u64>) {
    let n = inputs.len();
    assert!((1..=1024).contains(&n));
    let k = Loaded::on(dev, ptx(&lanes_kernel("lanes", snippet)));
    let column = |c: usize| -> Vec<u32> { inputs.iter().map(|t| t[c]).collect() };
    let [a, b, c] = [0, 1, 2].map(|c| upload_u32(&k.dev, &column(c)));
    let (out32, out64) = (k.output(n), k.output(2 * n));
    let args = [a, b, c, out32, out64].map(Arg::U64);
    let result = k.launch(1, n as u32, &[&args[..], &[Arg::U32(n as u32)]].concat());
    if let Err(e) = result {
        panic!("the snippet failed: {e}\n{snippet}");
    }
    (k.download_u32(out32, n), download_u64(&k.dev, out64, n))
}

/// Like [`run_lanes`] for f32 inputs; returns `out32` as the raw bits.
pub fn run_lanes_f32(snippet: &str, inputs: &[[f32; 3]]) -> Vec<u32> {
    let bits: Vec<[u32; 3]> = inputs.iter().map(|t| t.map(f32::to_bits)).collect();
    run_lanes(snippet, &bits).0
}
