//! Invalid launches are refused before any CTA runs, with `SimError::Launch` naming the
//! kernel: argument count and kinds, block size against `.maxntid` / `.reqntid` and the
//! architecture, grid limits, shared memory limits. Unknown kernel names are `NoKernel`.

mod common;

use common::*;
use linattn_ptxsim::{Arg, Checks, Device, LaunchConfig, SimArch, SimError};

/// `out[tid] = scale * tid` with the performance directive `directive` (`.maxntid 256, 1, 1`
/// unless a test says otherwise); if `n > 0` it also stores to `dyn_smem[tid]` (dynamic
/// shared memory).
fn kernel(directive: &str) -> String {
    let entry = Entry {
        name: "scaled",
        params: &[("u64", "%rd1"), ("f32", "%f1"), ("u32", "%r1")],
        directives: directive,
        regs: &[("pred", 2), ("b32", 4), ("f32", 4), ("b64", 7)],
        body: r#"	mov.u32 	%r2, %tid.x;
	cvt.rn.f32.u32 	%f2, %r2;
	mul.f32 	%f3, %f1, %f2;
	mul.wide.u32 	%rd4, %r2, 4;
	setp.eq.s32 	%p1, %r1, 0;
	@%p1 bra 	$L__BB0_2;

	mov.u64 	%rd2, dyn_smem;
	add.s64 	%rd6, %rd2, %rd4;
	st.shared.f32 	[%rd6], %f3;

$L__BB0_2:
	cvta.to.global.u64 	%rd3, %rd1;
	add.s64 	%rd5, %rd3, %rd4;
	st.global.f32 	[%rd5], %f3;
	ret;
"#,
        ..Entry::default()
    };
    ptx(&format!(
        ".extern .shared .align 16 .b8 dyn_smem[];\n\n{}",
        entry.text()
    ))
}

const MAXNTID: &str = ".maxntid 256, 1, 1";

/// The kernel with `directive` on `dev`, and an output of `words` words.
fn setup_on(dev: Device, directive: &str, words: usize) -> (Loaded, u64) {
    let k = Loaded::on(dev, kernel(directive));
    let out = k.output(words);
    (k, out)
}

/// The kernel with `.maxntid 256, 1, 1` and an output of 1024 words.
fn setup() -> (Loaded, u64) {
    setup_on(device(), MAXNTID, 1024)
}

/// The launch is refused with a `SimError::Launch` naming the kernel; its reason.
fn refused(k: &Loaded, config: &LaunchConfig, args: &[Arg]) -> String {
    match k.launch_with(config, args) {
        Err(SimError::Launch { kernel, reason }) => {
            assert_eq!(kernel, "scaled");
            reason
        }
        Err(other) => panic!("expected a launch error for {config:?} {args:?}, got: {other}"),
        Ok(_) => panic!("expected a launch error for {config:?} {args:?}, the launch passed"),
    }
}

fn args(out: u64) -> [Arg; 3] {
    [Arg::U64(out), Arg::F32(2.0), Arg::U32(0)]
}

#[test]
fn a_valid_launch_passes() {
    let (k, out) = setup();
    expect_ok(k.launch_with(&config(1, 256), &args(out)));
    let got = k.download_f32(out, 256);
    assert_eq!(got[255], 510.0);
}

#[test]
fn wrong_argument_count() {
    let (k, out) = setup();
    let reason = refused(&k, &config(1, 32), &[Arg::U64(out), Arg::F32(2.0)]);
    assert!(reason.contains("takes 3 parameters, 2 given"), "{reason}");
    refused(
        &k,
        &config(1, 32),
        &[Arg::U64(out), Arg::F32(2.0), Arg::U32(0), Arg::U32(0)],
    );
}

#[test]
fn integer_given_for_an_f32_parameter() {
    let (k, out) = setup();
    let reason = refused(
        &k,
        &config(1, 32),
        &[Arg::U64(out), Arg::I32(2), Arg::U32(0)],
    );
    assert!(reason.contains("parameter 1"), "{reason}");
}

#[test]
fn float_given_for_an_integer_parameter_and_wrong_sizes() {
    let (k, out) = setup();
    // A float for the .u32; a 32-bit value for the pointer; a 64-bit value for the .u32;
    // an f64 for the .f32 (`refused` names the arguments of a launch that passes).
    for args in [
        [Arg::U64(out), Arg::F32(2.0), Arg::F32(0.0)],
        [Arg::U32(0), Arg::F32(2.0), Arg::U32(0)],
        [Arg::U64(out), Arg::F32(2.0), Arg::U64(0)],
        [Arg::U64(out), Arg::F64(2.0), Arg::U32(0)],
    ] {
        refused(&k, &config(1, 32), &args);
    }
}

#[test]
fn block_larger_than_maxntid() {
    let (k, out) = setup();
    let reason = refused(&k, &config(1, 257), &args(out));
    assert!(reason.contains(".maxntid"), "{reason}");
    // 16 x 16 = 256 is within .maxntid 256, 1, 1 (the product counts). The kernel indexes by
    // %tid.x only, so the rows of the block store to the same words: globalcheck (off here)
    // would report that; this test is about the launch being accepted.
    let (k, out) = setup_on(
        device().with_checks(Checks {
            globalcheck: false,
            ..Checks::default()
        }),
        MAXNTID,
        1024,
    );
    let square = config_3d([1, 1, 1], [16, 16, 1]);
    expect_ok(k.launch_with(&square, &args(out)));
}

#[test]
fn block_larger_than_the_architecture_allows() {
    let (k, out) = setup_on(device(), "", 2048);
    let reason = refused(&k, &config(1, 1025), &args(out));
    assert!(reason.contains("block dimension x = 1025"), "{reason}");
    let wide = config_3d([1, 1, 1], [32, 33, 1]);
    let reason = refused(&k, &wide, &args(out));
    assert!(reason.contains("1056 threads per block"), "{reason}");
    let deep = config_3d([1, 1, 1], [1, 1, 65]);
    refused(&k, &deep, &args(out));
    expect_ok(k.launch_with(&config(1, 1024), &args(out)));
}

#[test]
fn reqntid_must_match_exactly() {
    let (k, out) = setup_on(device(), ".reqntid 128, 1, 1", 256);
    let reason = refused(&k, &config(1, 64), &args(out));
    assert!(reason.contains(".reqntid"), "{reason}");
    expect_ok(k.launch_with(&config(1, 128), &args(out)));
}

#[test]
fn grid_y_over_65535() {
    let (k, out) = setup();
    let tall = config_3d([1, 65_536, 1], [32, 1, 1]);
    let reason = refused(&k, &tall, &args(out));
    assert!(reason.contains("grid dimension y = 65536"), "{reason}");
    let tall_z = LaunchConfig {
        grid: [1, 1, 65_536],
        ..tall
    };
    refused(&k, &tall_z, &args(out));
}

#[test]
fn empty_grid_or_block() {
    let (k, out) = setup();
    refused(&k, &config(0, 32), &args(out));
    refused(&k, &config(1, 0), &args(out));
}

#[test]
fn dynamic_shared_memory_over_the_limit() {
    let (k, out) = setup();
    let limit = SimArch::SM90.max_shared_optin;
    let over = LaunchConfig {
        grid: [1, 1, 1],
        block: [32, 1, 1],
        dynamic_shared_bytes: limit + 1,
    };
    let reason = refused(&k, &over, &args(out));
    assert!(reason.contains("shared memory"), "{reason}");
    // Exactly at the limit is fine, and the kernel may use it.
    let at = LaunchConfig {
        dynamic_shared_bytes: limit,
        ..over
    };
    expect_ok(k.launch_with(&at, &[Arg::U64(out), Arg::F32(2.0), Arg::U32(1)]));
    // sm_80 allows less.
    let (a100, out) = setup_on(Device::new(SimArch::SM80, 1 << 20), MAXNTID, 32);
    refused(&a100, &at, &args(out));
}

#[test]
fn touching_dynamic_shared_memory_without_any_is_memcheck() {
    let (k, out) = setup();
    let fault = expect_fault(
        k.launch(1, 32, &[Arg::U64(out), Arg::F32(2.0), Arg::U32(1)]),
        linattn_ptxsim::Checker::Memcheck,
    );
    assert_eq!(fault.site.line, k.line_of("st.shared.f32"));
}

#[test]
fn unknown_kernel_name() {
    let (k, out) = setup();
    match k
        .dev
        .launch(&k.module, "scaled_v2", &config(1, 32), &args(out))
    {
        Err(SimError::NoKernel { name, known }) => {
            assert_eq!(name, "scaled_v2");
            assert_eq!(known, "scaled");
        }
        other => panic!("expected NoKernel, got {other:?}"),
    }
}
