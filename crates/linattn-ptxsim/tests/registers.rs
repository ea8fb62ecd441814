//! Registers as the hardware allocates them (CUDA occupancy calculator, `cuda_occupancy.h`):
//! per warp, in units of 256 (a multiple of 8 per thread), each warp from one of the SM's 4
//! register sub-partitions, at most 255 per thread and 64K per CTA. A launch whose CTA does
//! not fit is refused, though registers × threads may fit; occupancy counts the rounded
//! allocations. The per-thread product (`registers * threads <= 65536`) missed both planted
//! launches below.

mod common;

use common::*;
use linattn_ptxsim::model::occupancy;
use linattn_ptxsim::{Arg, SimArch, SimError};

/// `out[tid] = tid`, with ptxas' register count `registers` recorded (if any).
fn kernel(registers: Option<u32>) -> Loaded {
    let text = out_only(
        "regs",
        &[("b32", 2), ("b64", 5)],
        "",
        "\tcvta.to.global.u64 \t%rd2, %rd1;
\tmov.u32 \t%r1, %tid.x;
\tmul.wide.u32 \t%rd3, %r1, 4;
\tadd.s64 \t%rd4, %rd2, %rd3;
\tst.global.u32 \t[%rd4], %r1;
\tret;
",
    );
    let mut k = Loaded::new(text);
    if let Some(n) = registers {
        k.module
            .set_registers("regs", n)
            .expect("the kernel exists");
    }
    k
}

/// One CTA of `threads` threads of the kernel using `registers` per thread.
fn launch(registers: Option<u32>, threads: u32) -> Result<(), SimError> {
    let k = kernel(registers);
    let out = k.output(threads as usize);
    k.launch(1, threads, &[Arg::U64(out)])?;
    let got = k.download_u32(out, threads as usize);
    assert_eq!(got, (0..threads).collect::<Vec<u32>>());
    Ok(())
}

/// The launch is refused for its registers; the reason.
fn refused(registers: u32, threads: u32) -> String {
    match launch(Some(registers), threads) {
        Err(SimError::Launch { kernel, reason }) => {
            assert_eq!(kernel, "regs");
            assert!(reason.contains("too many resources requested"), "{reason}");
            reason
        }
        Err(other) => panic!("expected a launch error, got: {other}"),
        Ok(()) => panic!("{registers} registers × {threads} threads should not launch"),
    }
}

#[test]
fn registers_round_up_per_warp() {
    // 201 × 320 = 64320 fits 64K per thread, but a warp gets 208 × 32 = 6656, and 10 warps
    // 66560.
    let reason = refused(201, 320);
    assert!(reason.contains("allocated 6656 per warp"), "{reason}");
    // 200 registers are a whole unit: 6400 × 10 = 64000 fits (and 10 warps round up to 12
    // sub-partition slots: 76800 > 64K, so the hardware check refuses it too).
    assert_eq!(SimArch::SM90.registers_per_warp(200), 6400);
    refused(200, 320);
    // 8 warps of 200: 51200, 8 slots: fits.
    launch(Some(200), 256).expect("8 warps of 200 registers fit");
}

#[test]
fn the_hardware_counts_warps_in_multiples_of_the_sub_partitions() {
    // 224 × 32 = 7168 per warp; 9 warps = 64512 fit 64K, but the hardware counts 12.
    let reason = refused(224, 288);
    assert!(reason.contains("counted as 86016"), "{reason}");
    // 8 warps of the same: 57344, 8 slots: fits.
    launch(Some(224), 256).expect("8 warps of 224 registers fit");
}

#[test]
fn a_full_register_file_launches() {
    // 255 → 256 per thread, 8 warps: exactly 64K.
    launch(Some(255), 256).expect("256 threads of 255 registers fit");
    // 1024 threads of 64 registers: exactly 64K.
    launch(Some(64), 1024).expect("1024 threads of 64 registers fit");
    refused(65, 1024);
}

#[test]
fn more_than_255_registers_per_thread_is_refused() {
    let reason = refused(256, 32);
    assert!(reason.contains("max 255"), "{reason}");
}

#[test]
fn without_a_register_count_nothing_is_checked() {
    launch(None, 1024).expect("no register count recorded");
}

#[test]
fn registers_of_an_unknown_kernel_are_refused() {
    let mut k = kernel(None);
    match k.module.set_registers("nope", 32) {
        Err(SimError::NoKernel { name, .. }) => assert_eq!(name, "nope"),
        other => panic!("expected NoKernel, got {other:?}"),
    }
}

#[test]
fn occupancy_counts_rounded_warps_per_sub_partition() {
    let h100 = SimArch::SM90;
    // 2 warps of 200 registers: 6400 per warp, 2 per 16K sub-partition, 8 warps per SM: 4
    // CTAs (65536 / 12800 would give 5).
    let o = occupancy(&h100, 64, 200, 0);
    assert_eq!((o.ctas_per_sm, o.limiter), (4, "registers"));
    // The H100's measured 28.12% for cr_forward (288 threads, 76 registers): 76 → 80, 2560
    // per warp, 6 per sub-partition, 24 warps, 2 CTAs of 9 warps = 18 of 64.
    let o = occupancy(&h100, 288, 76, 0);
    assert_eq!(o.warps_per_sm, 18);
    // A CTA the hardware refuses has no occupancy.
    let o = occupancy(&h100, 288, 224, 0);
    assert_eq!((o.ctas_per_sm, o.limiter), (0, "launch"));
}
