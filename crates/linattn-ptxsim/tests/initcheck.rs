//! initcheck: reads of device memory that was allocated without initialisation and never
//! written (by the host or a kernel), and of shared memory no thread of the CTA wrote.

mod common;

use common::*;
use linattn_ptxsim::{Arg, Checker, Checks, Device, LaunchStats, SimError};

/// `out[i] = 2 * in[i]` for `i < n`.
fn scale() -> String {
    Entry {
        name: "scale",
        params: &[("u64", "%rd1"), ("u64", "%rd2"), ("u32", "%r2")],
        regs: &[("pred", 2), ("b32", 3), ("f32", 3), ("b64", 8)],
        body: r#"	mov.u32 	%r1, %tid.x;
	setp.ge.u32 	%p1, %r1, %r2;
	@%p1 bra 	$L__BB0_2;

	cvta.to.global.u64 	%rd3, %rd1;
	mul.wide.u32 	%rd4, %r1, 4;
	add.s64 	%rd5, %rd3, %rd4;
	ld.global.nc.f32 	%f1, [%rd5];
	add.f32 	%f2, %f1, %f1;
	cvta.to.global.u64 	%rd6, %rd2;
	add.s64 	%rd7, %rd6, %rd4;
	st.global.f32 	[%rd7], %f2;

$L__BB0_2:
	ret;
"#,
        ..Entry::default()
    }
    .ptx()
}

const N: usize = 64;

fn launch_scale(dev: &Device, input: u64, out: u64) -> Result<LaunchStats, SimError> {
    let module = load(dev, &scale());
    dev.launch(
        &module,
        "scale",
        &config(1, N as u32),
        &[Arg::U64(input), Arg::U64(out), Arg::U32(N as u32)],
    )
}

#[test]
fn reading_an_allocation_never_written_is_reported() {
    let dev = device();
    let input = dev.alloc(4 * N as u64).expect("alloc");
    let out = output(&dev, N);
    let fault = expect_fault(launch_scale(&dev, input, out), Checker::Initcheck);
    assert_eq!(fault.site.kernel, "scale");
    assert_at(&fault, line_of(&scale(), "ld.global.nc.f32"), [0, 0, 0]);
    assert_eq!(fault.address, Some(input));
    assert_says(&fault, "never written");
}

#[test]
fn after_the_host_writes_it_the_same_launch_passes() {
    let dev = device();
    let input = dev.alloc(4 * N as u64).expect("alloc");
    let data: Vec<f32> = (0..N).map(|i| i as f32 * 0.25).collect();
    let bytes: Vec<u8> = data.iter().flat_map(|v| v.to_le_bytes()).collect();
    dev.write(input, &bytes).expect("write");
    let out = output(&dev, N);
    expect_ok(launch_scale(&dev, input, out));
    let expected: Vec<f32> = data.iter().map(|v| 2.0 * v).collect();
    assert_eq!(download_f32(&dev, out, N), expected);
}

#[test]
fn a_partly_written_allocation_is_reported_at_the_first_unwritten_word() {
    let dev = device();
    let input = dev.alloc(4 * N as u64).expect("alloc");
    dev.write(input, &[0u8; 4 * 40]).expect("write");
    let out = output(&dev, N);
    let fault = expect_fault(launch_scale(&dev, input, out), Checker::Initcheck);
    assert_eq!(fault.site.thread, [40, 0, 0], "{fault}");
    assert_eq!(fault.address, Some(input + 160));
}

#[test]
fn zeroed_and_filled_allocations_count_as_written() {
    let dev = device();
    let zeroed = dev.alloc_zeroed(4 * N as u64).expect("alloc");
    let out = output(&dev, N);
    expect_ok(launch_scale(&dev, zeroed, out));
    assert_eq!(download_f32(&dev, out, N), vec![0.0; N]);

    let filled = dev.alloc(4 * N as u64).expect("alloc");
    dev.fill(filled, 4 * N as u64, 0).expect("fill");
    expect_ok(launch_scale(&dev, filled, out));
}

#[test]
fn what_a_kernel_wrote_a_later_launch_may_read() {
    let dev = device();
    let data = upload_f32(&dev, &[1.5; N]);
    let once = output(&dev, N);
    let twice = output(&dev, N);
    expect_ok(launch_scale(&dev, data, once));
    expect_ok(launch_scale(&dev, once, twice));
    assert_eq!(download_f32(&dev, twice, N), vec![6.0; N]);
}

#[test]
fn initcheck_can_be_turned_off() {
    let dev = device().with_checks(Checks {
        racecheck: true,
        initcheck: false,
        ..Checks::default()
    });
    let input = dev.alloc(4 * N as u64).expect("alloc");
    let out = output(&dev, N);
    expect_ok(launch_scale(&dev, input, out));
}

/// Every thread reads `s[tid]` of a shared array; with `write`, it first stores there.
fn shared_read(write: bool) -> Loaded {
    let store = if write {
        "st.shared.f32 	[%rd4], %f1;"
    } else {
        ""
    };
    Loaded::new(out_only(
        "shared_read",
        &[("b32", 2), ("f32", 3), ("b64", 7)],
        "// demoted variable\n.shared .align 4 .b8 _ZZ11shared_readE4tile[256];",
        &format!(
            r#"	mov.u32 	%r1, %tid.x;
	cvt.rn.f32.s32 	%f1, %r1;
	mul.wide.u32 	%rd2, %r1, 4;
	mov.u64 	%rd3, _ZZ11shared_readE4tile;
	add.s64 	%rd4, %rd3, %rd2;
	{store}
	ld.shared.f32 	%f2, [%rd4];
	cvta.to.global.u64 	%rd5, %rd1;
	add.s64 	%rd6, %rd5, %rd2;
	st.global.f32 	[%rd6], %f2;
	ret;
"#
        ),
    ))
}

#[test]
fn reading_shared_memory_no_thread_wrote_is_reported() {
    let run = shared_read(false).run_with_output(2, 64, 64, false);
    let fault = run.fault_at(Checker::Initcheck, "ld.shared.f32", [0, 0, 0]);
    assert_eq!(fault.site.cta, [0, 0, 0]);
    assert_eq!(fault.address, Some(0));
    assert_says(&fault, "shared memory read before");
}

#[test]
fn shared_memory_written_first_passes() {
    let run = shared_read(true).run_with_output(1, 64, 64, false);
    let expected: Vec<f32> = (0..64).map(|t| t as f32).collect();
    assert_eq!(run.floats(64), expected);
}

#[test]
fn shared_memory_does_not_carry_over_between_ctas() {
    // CTA 0 writes its tile; CTA 1 of a kernel that only reads must still be reported,
    // even though the host thread that ran CTA 0 may reuse the same buffer.
    let dev = device();
    let writer = load(&dev, &shared_read(true).text);
    let reader = load(&dev, &shared_read(false).text);
    let out = output(&dev, 64);
    expect_ok(dev.launch(&writer, "shared_read", &config(1, 64), &[Arg::U64(out)]));
    expect_fault(
        dev.launch(&reader, "shared_read", &config(1, 64), &[Arg::U64(out)]),
        Checker::Initcheck,
    );
}
