//! Integer arithmetic, in the exact PTX forms the linattn kernels use
//! (shared/reference/ptx-census.md): shifts, widening multiplies, division and remainder,
//! bit-field insert.
//!
//! Each test runs a snippet once per thread on per-thread inputs (see
//! `common::lanes::run_lanes`) and checks every lane against a reference written here from the
//! PTX ISA, independently of the simulator's code.

mod common;

use common::lanes::run_lanes;

#[test]
fn shifts_fill_with_the_sign_and_clamp_the_amount() {
    let snippet = "
	shr.s32 	%r4, %r1, %r2;
	shr.u32 	%r7, %r1, %r2;
	shl.b32 	%r8, %r1, %r2;
	cvt.u64.u32 	%rd21, %r7;
	cvt.u64.u32 	%rd22, %r8;
	shl.b64 	%rd22, %rd22, 32;
	or.b64 	%rd20, %rd21, %rd22;";
    let cases: &[(i32, u32)] = &[
        (-16, 2),
        (i32::MIN, 31),
        (-1, 40),
        (100, 40),
        (i32::MAX, 30),
        (-5, 0),
        (-5, 32),
        (12345, 33),
    ];
    let inputs: Vec<[u32; 3]> = cases.iter().map(|&(a, s)| [a as u32, s, 0]).collect();
    let (sar, both) = run_lanes(snippet, &inputs);
    for (k, &(a, s)) in cases.iter().enumerate() {
        let clamped = s.min(32);
        let want_sar = if clamped >= 32 { a >> 31 } else { a >> clamped };
        let want_shr = if clamped >= 32 {
            0
        } else {
            (a as u32) >> clamped
        };
        let want_shl = if clamped >= 32 {
            0
        } else {
            (a as u32) << clamped
        };
        assert_eq!(sar[k] as i32, want_sar, "shr.s32 {a}, {s}");
        assert_eq!(both[k] as u32, want_shr, "shr.u32 {a}, {s}");
        assert_eq!((both[k] >> 32) as u32, want_shl, "shl.b32 {a}, {s}");
    }
}

#[test]
fn mul_wide_sign_and_zero_extend() {
    let signed = "
	mul.wide.s32 	%rd20, %r1, %r2;";
    let unsigned = "
	mul.wide.u32 	%rd20, %r1, %r2;";
    let cases: &[(i32, i32)] = &[
        (-3, 5),
        (i32::MAX, i32::MAX),
        (i32::MIN, i32::MIN),
        (i32::MIN, -1),
        (-1, -1),
        (65_536, 65_536),
    ];
    let inputs: Vec<[u32; 3]> = cases
        .iter()
        .map(|&(a, b)| [a as u32, b as u32, 0])
        .collect();
    let (_, s) = run_lanes(signed, &inputs);
    let (_, u) = run_lanes(unsigned, &inputs);
    for (k, &(a, b)) in cases.iter().enumerate() {
        assert_eq!(
            s[k] as i64,
            i64::from(a) * i64::from(b),
            "mul.wide.s32 {a} {b}"
        );
        assert_eq!(
            u[k],
            u64::from(a as u32) * u64::from(b as u32),
            "mul.wide.u32 {a} {b}"
        );
    }
}

#[test]
fn integer_division_and_remainder_truncate_toward_zero() {
    let snippet = "
	div.s32 	%r4, %r1, %r2;
	rem.s32 	%r7, %r1, %r2;
	div.u32 	%r8, %r1, %r2;
	rem.u32 	%r9, %r1, %r2;
	mad.lo.s32 	%r10, %r4, %r2, %r7;
	setp.eq.s32 	%p1, %r10, %r1;
	selp.u32 	%r11, 1, 0, %p1;
	cvt.u64.u32 	%rd21, %r8;
	cvt.u64.u32 	%rd22, %r9;
	shl.b64 	%rd22, %rd22, 32;
	or.b64 	%rd20, %rd21, %rd22;";
    let cases: &[(i32, i32)] = &[(-7, 2), (7, -2), (-7, -2), (100, 7), (i32::MIN, 3)];
    let inputs: Vec<[u32; 3]> = cases
        .iter()
        .map(|&(a, b)| [a as u32, b as u32, 0])
        .collect();
    let (div, urem) = run_lanes(snippet, &inputs);
    for (k, &(a, b)) in cases.iter().enumerate() {
        assert_eq!(div[k] as i32, a / b, "div.s32 {a} {b}");
        assert_eq!(urem[k] as u32, (a as u32) / (b as u32), "div.u32 {a} {b}");
        assert_eq!(
            (urem[k] >> 32) as u32,
            (a as u32) % (b as u32),
            "rem.u32 {a} {b}"
        );
    }
}

/// bfi per the ISA: for (i = 0; i < len && pos + i <= 31; i++) f[pos + i] = a[i].
fn bfi_reference(a: u32, b: u32, pos: u32, len: u32) -> u32 {
    let (pos, len) = (pos & 0xff, len & 0xff);
    let mut f = b;
    let mut i = 0;
    while i < len && pos + i <= 31 {
        f = (f & !(1 << (pos + i))) | (((a >> i) & 1) << (pos + i));
        i += 1;
    }
    f
}

#[test]
fn bfi_b32_inserts_a_field() {
    // c = pos | len << 8.
    let snippet = "
	and.b32 	%r7, %r3, 255;
	shr.u32 	%r8, %r3, 8;
	bfi.b32 	%r4, %r1, %r2, %r7, %r8;";
    let cases: &[(u32, u32, u32, u32)] = &[
        (0xff, 0, 8, 4),
        (0xffff_ffff, 0x1234_5678, 16, 16),
        (0xabcd, 0xffff_ffff, 4, 0),
        (0xff, 0, 28, 8),
        (0x1, 0x8000_0000, 40, 4),
        (0xdead_beef, 0, 0, 32),
        (0x5, 0xf0f0_f0f0, 31, 1),
    ];
    let inputs: Vec<[u32; 3]> = cases
        .iter()
        .map(|&(a, b, p, l)| [a, b, p | l << 8])
        .collect();
    let (got, _) = run_lanes(snippet, &inputs);
    for (k, &(a, b, p, l)) in cases.iter().enumerate() {
        assert_eq!(
            got[k],
            bfi_reference(a, b, p, l),
            "bfi.b32 {a:#x}, {b:#x}, {p}, {l}"
        );
    }
    // The immediate form NVRTC emits.
    let (got, _) = run_lanes(
        "\n\tbfi.b32 \t%r4, %r1, %r2, 16, 16;",
        &[[0xaaaa, 0x5555, 0]],
    );
    assert_eq!(got, vec![0xaaaa_5555]);
}
