//! `shfl.sync` semantics against the PTX ISA's pseudo-code (section "Data Movement and
//! Conversion Instructions: shfl.sync"):
//!
//! ```text
//! bval = b[4:0]; cval = c[4:0]; segmask = c[12:8];
//! maxLane = (lane & segmask) | (cval & ~segmask);
//! minLane = (lane & segmask);
//! .up:   j = lane - bval; pval = (j >= maxLane);
//! .down: j = lane + bval; pval = (j <= maxLane);
//! .bfly: j = lane ^ bval; pval = (j <= maxLane);
//! .idx:  j = minLane | (bval & ~segmask); pval = (j <= maxLane);
//! if (!pval) j = lane;  d = a[j];  p = pval;
//! ```
//!
//! (For `.up` the clamp value is a lower bound: CUDA's `__shfl_up_sync` passes
//! `c = (32 - width) << 8`, i.e. cval = 0, so maxLane is the segment's first lane.)

mod common;

use common::*;
use linattn_ptxsim::Arg;

#[derive(Debug, Clone, Copy)]
enum Mode {
    Up,
    Down,
    Bfly,
    Idx,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Up => "up",
            Mode::Down => "down",
            Mode::Bfly => "bfly",
            Mode::Idx => "idx",
        }
    }
}

/// The ISA pseudo-code, transcribed: (source lane, pval).
fn isa_shfl(mode: Mode, lane: u32, b: u32, c: u32) -> (u32, bool) {
    let bval = b & 0x1f;
    let cval = c & 0x1f;
    let segmask = (c >> 8) & 0x1f;
    let max_lane = (lane & segmask) | (cval & !segmask);
    let min_lane = lane & segmask;
    let (j, pval) = match mode {
        Mode::Up => {
            let j = lane as i32 - bval as i32;
            (j, j >= max_lane as i32)
        }
        Mode::Down => {
            let j = (lane + bval) as i32;
            (j, j <= max_lane as i32)
        }
        Mode::Bfly => {
            let j = (lane ^ bval) as i32;
            (j, j <= max_lane as i32)
        }
        Mode::Idx => {
            let j = (min_lane | (bval & !segmask)) as i32;
            (j, j <= max_lane as i32)
        }
    };
    if pval {
        (j as u32, true)
    } else {
        (lane, false)
    }
}

/// One warp: lane `l` shuffles `a = 1000 + l` with `b = bs[l]` and the immediate `c`;
/// stores `d` to `out[l]` and `p` (0/1) to `out[32 + l]`.
fn shfl_kernel(mode: Mode, c: u32) -> String {
    let mode = mode.name();
    ptx(&in_out(
        "shfl_test",
        &[("pred", 2), ("b32", 6), ("b64", 8)],
        &format!(
            r#"	add.s64 	%rd6, %rd3, %rd5;
	ld.global.nc.u32 	%r2, [%rd6];
	add.s32 	%r3, %r1, 1000;
	shfl.sync.{mode}.b32 	%r4|%p1, %r3, %r2, {c}, -1;
	selp.u32 	%r5, 1, 0, %p1;
	add.s64 	%rd7, %rd4, %rd5;
	st.global.u32 	[%rd7], %r4;
	st.global.u32 	[%rd7+128], %r5;
	ret;
"#
        ),
    ))
}

/// (d, p) per lane from the simulator.
fn simulate(mode: Mode, bs: &[u32; 32], c: u32) -> Vec<(u32, bool)> {
    let k = Loaded::new(shfl_kernel(mode, c));
    let pb = upload_u32(&k.dev, bs);
    let out = k.output(64);
    expect_ok(k.launch(1, 32, &[Arg::U64(pb), Arg::U64(out)]));
    let v = k.download_u32(out, 64);
    (0..32).map(|l| (v[l], v[32 + l] != 0)).collect()
}

fn check(mode: Mode, bs: &[u32; 32], c: u32) {
    let got = simulate(mode, bs, c);
    for lane in 0..32u32 {
        let (src, pval) = isa_shfl(mode, lane, bs[lane as usize], c);
        assert_eq!(
            got[lane as usize],
            (1000 + src, pval),
            "shfl.sync.{}.b32 lane {lane}, b = {:#x}, c = {c:#x}: expected the value of lane \
             {src} and p = {pval}",
            mode.name(),
            bs[lane as usize]
        );
    }
}

/// CUDA's `width`-wide segments: `c` of `__shfl_{down,xor,sync}` and of `__shfl_up_sync`.
fn c_of(width: u32) -> u32 {
    ((32 - width) << 8) | 0x1f
}

fn c_up_of(width: u32) -> u32 {
    (32 - width) << 8
}

#[test]
fn up_matches_the_isa() {
    for b in [0, 1, 2, 5, 16, 31, 33] {
        for c in [0, 0x1f, c_up_of(16), c_of(16), c_up_of(8), 0x3, 0x1003] {
            check(Mode::Up, &[b; 32], c);
        }
    }
}

#[test]
fn down_matches_the_isa() {
    for b in [0, 1, 3, 8, 31, 32, 37] {
        for c in [0x1f, c_of(16), c_of(8), c_of(4), 0x0, 0x10, 0x0810] {
            check(Mode::Down, &[b; 32], c);
        }
    }
}

#[test]
fn bfly_matches_the_isa() {
    for b in [0, 1, 2, 4, 8, 16, 31] {
        for c in [0x1f, c_of(16), c_of(8), 0x0f, 0x0] {
            check(Mode::Bfly, &[b; 32], c);
        }
    }
}

#[test]
fn idx_matches_the_isa() {
    let reversed: [u32; 32] = std::array::from_fn(|l| 31 - l as u32);
    let rotated: [u32; 32] = std::array::from_fn(|l| (l as u32 + 3) % 32);
    let big: [u32; 32] = std::array::from_fn(|l| 0xffff_ff00 | (l as u32 * 7));
    for bs in [[0; 32], [7; 32], [31; 32], reversed, rotated, big] {
        for c in [0x1f, c_of(16), c_of(8), 0x0f, 0x0, 0x1f1f] {
            check(Mode::Idx, &bs, c);
        }
    }
}

#[test]
fn worked_examples_in_width_16_segments() {
    // __shfl_down_sync(~0, x, 1, 16): lane 15 is the top of its segment, keeps its own value
    // and reports p = false; lane 14 reads lane 15.
    let down = simulate(Mode::Down, &[1; 32], 0x101f);
    assert_eq!(down[14], (1015, true));
    assert_eq!(down[15], (1015, false));
    assert_eq!(down[16], (1017, true));
    assert_eq!(down[31], (1031, false));
    // __shfl_up_sync(~0, x, 1, 16): c = 0x1000, lane 16 is the bottom of its segment.
    let up = simulate(Mode::Up, &[1; 32], 0x1000);
    assert_eq!(up[0], (1000, false));
    assert_eq!(up[1], (1000, true));
    assert_eq!(up[16], (1016, false));
    assert_eq!(up[17], (1016, true));
    // With a clamp value for .up, maxLane = cval is a lower bound: only lanes with
    // lane - 1 >= 3 receive.
    let up = simulate(Mode::Up, &[1; 32], 0x3);
    assert_eq!(up[3], (1003, false));
    assert_eq!(up[4], (1003, true));
    // __shfl_sync(~0, x, 5, 16): each half-warp broadcasts its own lane 5.
    let idx = simulate(Mode::Idx, &[5; 32], 0x101f);
    assert_eq!(idx[0], (1005, true));
    assert_eq!(idx[20], (1021, true));
    // Butterfly with lane mask 16 in width-16 segments: lane 3 would read lane 19, above its
    // segment's maxLane 15, so it keeps its own value; lane 19 reads lane 3, which is below
    // its maxLane 31: the ISA puts no lower bound on .bfly.
    let bfly = simulate(Mode::Bfly, &[16; 32], 0x101f);
    assert_eq!(bfly[3], (1003, false));
    assert_eq!(bfly[19], (1003, true));
}

/// The 5-step butterfly reduction the kernels use (`shfl.sync.bfly.b32 %r, %r, k, 31, -1`).
#[test]
fn butterfly_reduction_sums_the_warp() {
    // Step i: f_{2i+1} -> r_{2i+2}, shuffled into r_{2i+3} -> f_{2i+2}, summed into f_{2i+3}.
    let steps: String = [16, 8, 4, 2, 1]
        .iter()
        .enumerate()
        .map(|(i, lane_mask)| {
            let (f, r) = (2 * i + 1, 2 * i + 2);
            format!(
                "\tmov.b32 \t%r{r}, %f{f};\n\tshfl.sync.bfly.b32 \t%r{}, %r{r}, {lane_mask}, 31, -1;\n\
                 \tmov.b32 \t%f{}, %r{};\n\tadd.f32 \t%f{}, %f{f}, %f{};\n",
                r + 1,
                f + 1,
                r + 1,
                f + 2,
                f + 1
            )
        })
        .collect();
    let k = Loaded::new(ptx(&in_out(
        "warp_sum",
        &[("b32", 16), ("f32", 12), ("b64", 8)],
        &format!(
            "\tadd.s64 \t%rd6, %rd3, %rd5;\n\tld.global.nc.f32 \t%f1, [%rd6];\n{steps}\
             \tadd.s64 \t%rd7, %rd4, %rd5;\n\tst.global.f32 \t[%rd7], %f11;\n\tret;\n"
        ),
    )));
    // Four warps with different (exactly summable) values.
    let input: Vec<f32> = (0..128).map(|i| ((i * 37) % 101) as f32 - 50.0).collect();
    let pin = upload_f32(&k.dev, &input);
    let out = k.output(128);
    expect_ok(k.launch(1, 128, &[Arg::U64(pin), Arg::U64(out)]));
    let got = k.download_f32(out, 128);
    for w in 0..4 {
        let sum: f32 = input[32 * w..32 * w + 32].iter().sum();
        for l in 0..32 {
            assert_eq!(got[32 * w + l], sum, "warp {w} lane {l}");
        }
    }
}

/// `shfl.sync.idx.b32 %r, %r, 0, 31, -1`: broadcast of lane 0 (how the chunked kernels
/// share a row maximum).
#[test]
fn idx_broadcast_of_lane_zero() {
    let got = simulate(Mode::Idx, &[0; 32], 0x1f);
    for (lane, &(d, p)) in got.iter().enumerate() {
        assert_eq!((d, p), (1000, true), "lane {lane}");
    }
}
