//! `Device::with_shared_placement(Placement::Adversarial)` places each `.shared` variable at
//! its declared alignment and no more (offset ≡ align mod 2·align), so a vector access wider
//! than the declaration promises faults as misaligned, as it may on hardware when the layout
//! changes. The declared placement (offset 0 for the first variable) lets it pass.

mod common;

use common::*;
use linattn_ptxsim::{Checker, Device, LaunchStats, Placement, SimError};

const BUF: &str = "_ZZ4vec4E3buf";

/// Threads 0..4 write `buf[tid*4 .. tid*4+4)` word by word, `bar.sync`, then each reads its
/// 16 bytes with one `ld.shared.v4.u32` and stores their sum to `out[tid]`. `buf` is 64
/// bytes declared `.align {align}`, declared after a 4-byte variable `pad` (never used) when
/// `behind`, so even the declared layout puts it at offset 4 unless its alignment moves it.
fn vec4_kernel(align: u32, behind: bool) -> String {
    let decls = format!(
        "{}.shared .align {align} .b8 {BUF}[64];",
        if behind {
            ".shared .align 4 .u32 _ZZ4vec4E3pad;\n"
        } else {
            ""
        }
    );
    let body = format!(
        "\tcvta.to.global.u64 \t%rd2, %rd1;
\tmov.u32 \t%r1, %tid.x;
\tmov.u64 \t%rd3, {BUF};
\tmul.wide.u32 \t%rd4, %r1, 16;
\tadd.s64 \t%rd5, %rd3, %rd4;
\tst.shared.u32 \t[%rd5], %r1;
\tst.shared.u32 \t[%rd5+4], %r1;
\tst.shared.u32 \t[%rd5+8], %r1;
\tst.shared.u32 \t[%rd5+12], %r1;
\tbar.sync \t0;
\tld.shared.v4.u32 \t{{%r2, %r3, %r4, %r5}}, [%rd5];
\tadd.s32 \t%r6, %r2, %r3;
\tadd.s32 \t%r7, %r4, %r5;
\tadd.s32 \t%r8, %r6, %r7;
\tmul.wide.u32 \t%rd6, %r1, 4;
\tadd.s64 \t%rd7, %rd2, %rd6;
\tst.global.u32 \t[%rd7], %r8;
\tret;
"
    );
    out_only("vec4", &[("b32", 9), ("b64", 8)], &decls, &body)
}

fn device_with(placement: Placement) -> Device {
    let dev = device().with_shared_placement(placement);
    assert_eq!(dev.shared_placement(), placement);
    dev
}

/// One CTA of 4 threads of `text` on a device with `placement`.
fn run(text: &str, placement: Placement) -> OutputRun {
    Loaded::on(device_with(placement), text.to_string()).run_with_output(1, 4, 4, false)
}

fn expect_sums(run: OutputRun) {
    assert_eq!(run.words(4), vec![0, 4, 8, 12]);
}

#[test]
fn under_aligned_vector_read_passes_when_the_layout_happens_to_align_it() {
    expect_sums(run(&vec4_kernel(4, false), Placement::Declared));
}

#[test]
fn under_aligned_vector_read_faults_in_the_adversarial_placement() {
    let text = vec4_kernel(4, false);
    let fault = run(&text, Placement::Adversarial).fault_at(
        Checker::Memcheck,
        "ld.shared.v4.u32",
        [0, 0, 0],
    );
    assert_says(&fault, "misaligned 16-byte shared access");
    // Offset 4: aligned to 4, not to 8.
    assert_eq!(fault.address, Some(4));
}

#[test]
fn correctly_declared_alignment_passes_in_both_placements() {
    for placement in [Placement::Declared, Placement::Adversarial] {
        expect_sums(run(&vec4_kernel(16, false), placement));
        expect_sums(run(&vec4_kernel(16, true), placement));
    }
}

#[test]
fn behind_another_variable_the_declared_layout_faults_too() {
    // The declared layout already puts a `.align 4` buffer behind a 4-byte word at offset 4.
    let fault = run(&vec4_kernel(4, true), Placement::Declared).fault(Checker::Memcheck);
    assert_says(&fault, "misaligned");
}

#[test]
fn eight_byte_alignment_is_not_sixteen() {
    // `.align 8` promises 8: adversarially at offset 8 mod 16.
    let fault = run(&vec4_kernel(8, false), Placement::Adversarial).fault(Checker::Memcheck);
    assert_eq!(fault.address, Some(8));
}

/// A kernel with `bytes` of static shared memory (`.align 4`) whose thread 0 writes and
/// reads back the last word.
fn last_word_kernel(bytes: u32) -> String {
    let last = bytes - 4;
    out_only(
        "last",
        &[("b32", 3), ("b64", 3)],
        &format!(".shared .align 4 .b8 _ZZ4lastE3big[{bytes}];"),
        &format!(
            "\tcvta.to.global.u64 \t%rd2, %rd1;
\tmov.u32 \t%r1, 7;
\tst.shared.u32 \t[_ZZ4lastE3big+{last}], %r1;
\tld.shared.u32 \t%r2, [_ZZ4lastE3big+{last}];
\tst.global.u32 \t[%rd2], %r2;
\tret;
"
        ),
    )
}

#[test]
fn limits_count_the_declared_layout_and_the_placed_one_is_allocated() {
    // 48 KiB of static shared memory is the limit; the adversarial padding (4 bytes here)
    // is the simulator's, not the kernel's, and the last word is still inside the CTA's.
    let run = Loaded::on(
        device_with(Placement::Adversarial),
        last_word_kernel(48 << 10),
    )
    .run_with_output(1, 1, 1, false);
    assert_eq!(run.words(1), vec![7]);
    let over: Result<LaunchStats, SimError> = Loaded::on(
        device_with(Placement::Adversarial),
        last_word_kernel((48 << 10) + 4),
    )
    .run_with_output(1, 1, 1, false)
    .result;
    match over {
        Err(SimError::Launch { reason, .. }) => assert!(reason.contains("static shared")),
        other => panic!(
            "expected the static shared limit, got {:?}",
            other.map(|_| ())
        ),
    }
}

#[test]
fn dynamic_shared_memory_is_offset_too_but_keeps_its_16_bytes() {
    // `extern __shared__ __align__(16)`: v4 reads of it pass adversarially; the base is
    // 16 mod 32.
    let text = ptx(&format!(
        ".extern .shared .align 16 .b8 dyn[];\n\n{}",
        Entry {
            name: "dynv4",
            params: &[("u64", "%rd1")],
            regs: &[("b32", 6), ("b64", 4)],
            body: "\tcvta.to.global.u64 \t%rd2, %rd1;
\tmov.u32 \t%r1, 3;
\tst.shared.u32 \t[dyn], %r1;
\tst.shared.u32 \t[dyn+4], %r1;
\tst.shared.u32 \t[dyn+8], %r1;
\tst.shared.u32 \t[dyn+12], %r1;
\tld.shared.v4.u32 \t{%r2, %r3, %r4, %r5}, [dyn];
\tadd.s32 \t%r2, %r2, %r5;
\tst.global.u32 \t[%rd2], %r2;
\tret;
",
            ..Entry::default()
        }
        .text()
    ));
    let k = Loaded::on(device_with(Placement::Adversarial), text);
    let out = k.output(1);
    let config = linattn_ptxsim::LaunchConfig {
        grid: [1, 1, 1],
        block: [1, 1, 1],
        dynamic_shared_bytes: 16,
    };
    expect_ok(k.launch_with(&config, &[linattn_ptxsim::Arg::U64(out)]));
    assert_eq!(k.download_u32(out, 1), vec![6]);
}
