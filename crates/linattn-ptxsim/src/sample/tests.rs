//! Which sampled rows may be scaled: the same work differing by data-dependent arithmetic is
//! scaled as its mean, another trip count, other memory traffic or arithmetic past the
//! spread runs whole. One hand-written kernel whose CTAs read a word of flags (data) each.

use super::{sample_rows, ARITHMETIC_SPREAD};
use crate::{Arg, Device, LaunchConfig, LaunchStats, SimArch};

#[test]
fn rows_are_spread_and_keep_both_ends() {
    assert_eq!(sample_rows(64, 2), vec![0, 63]);
    assert_eq!(sample_rows(64, 3), vec![0, 32, 63]);
    assert_eq!(sample_rows(5, 4), vec![0, 1, 3, 4]);
    assert_eq!(sample_rows(3, 1), vec![0, 2]);
}

/// One warp per CTA; CTA (x, y) reads flags[y·gx + x]: bit 0 set, two fp32 multiplies behind
/// a warp-uniform branch (straight-line); bits 8..15, a loop of that many trips; bit 16, one
/// more global load. Writes one float per thread.
const ROWWORK: &str = r#".version 9.0
.target sm_90
.address_size 64

.visible .entry rowwork(
	.param .u64 rowwork_param_0,
	.param .u64 rowwork_param_1
)
{
	.reg .pred 	%p<5>;
	.reg .b32 	%r<12>;
	.reg .f32 	%f<4>;
	.reg .b64 	%rd<10>;

	ld.param.u64 	%rd1, [rowwork_param_0];
	ld.param.u64 	%rd2, [rowwork_param_1];
	cvta.to.global.u64 	%rd3, %rd1;
	cvta.to.global.u64 	%rd4, %rd2;
	mov.u32 	%r1, %ctaid.y;
	mov.u32 	%r2, %nctaid.x;
	mov.u32 	%r3, %ctaid.x;
	mad.lo.s32 	%r4, %r1, %r2, %r3;
	mul.wide.u32 	%rd5, %r4, 4;
	add.s64 	%rd6, %rd3, %rd5;
	ld.global.u32 	%r5, [%rd6];
	mov.f32 	%f1, 0f3F800000;
	and.b32 	%r6, %r5, 1;
	setp.eq.s32 	%p1, %r6, 0;
	@%p1 bra 	$L__BB0_2;
	mul.f32 	%f1, %f1, 0f40000000;
	mul.f32 	%f1, %f1, 0f40000000;
$L__BB0_2:
	bfe.u32 	%r7, %r5, 8, 8;
	mov.u32 	%r8, 0;
	setp.eq.s32 	%p2, %r7, 0;
	@%p2 bra 	$L__BB0_4;
$L__BB0_3:
	add.f32 	%f1, %f1, 0f3F800000;
	add.s32 	%r8, %r8, 1;
	setp.lt.u32 	%p3, %r8, %r7;
	@%p3 bra 	$L__BB0_3;
$L__BB0_4:
	and.b32 	%r9, %r5, 65536;
	setp.eq.s32 	%p4, %r9, 0;
	@%p4 bra 	$L__BB0_6;
	ld.global.f32 	%f2, [%rd6];
	add.f32 	%f1, %f1, %f2;
$L__BB0_6:
	mov.u32 	%r10, %tid.x;
	mad.lo.s32 	%r11, %r4, 32, %r10;
	mul.wide.u32 	%rd7, %r11, 4;
	add.s64 	%rd8, %rd4, %rd7;
	st.global.f32 	[%rd8], %f1;
	ret;
}
"#;

/// The kernel on a grid of `gx` × `flags.len() / gx` CTAs, whole or with 2 sampled rows.
fn run(gx: u32, flags: &[u32], sample: Option<u32>) -> LaunchStats {
    let dev = Device::new(SimArch::SM90, 64 << 20);
    dev.count_memory(true);
    let module = dev.load(ROWWORK).expect("the test kernel parses");
    let bytes: Vec<u8> = flags.iter().flat_map(|f| f.to_le_bytes()).collect();
    let input = dev.alloc(bytes.len() as u64).expect("alloc");
    dev.write(input, &bytes).expect("write");
    let out = dev.alloc(32 * 4 * flags.len() as u64).expect("alloc");
    let config = LaunchConfig {
        grid: [gx, flags.len() as u32 / gx, 1],
        block: [32, 1, 1],
        dynamic_shared_bytes: 0,
    };
    let args = [Arg::U64(input), Arg::U64(out)];
    dev.launch_sampled(&module, "rowwork", &config, &args, sample)
        .expect("the launch runs")
}

/// Trips of the loop every CTA runs: a critical path of some 1000 cycles, so that two
/// multiplies more are within ARITHMETIC_SPREAD of it.
const BASE: u32 = 50 << 8;

/// 4 rows of `gx` CTAs with flags `base`; the first CTA of row 0 adds `row0` to its flags,
/// that of row 1 `row1` (rows 0 and 3 are the sampled ones). (Whole, sampled.)
fn whole_and_sampled(gx: u32, base: u32, row0: u32, row1: u32) -> (LaunchStats, LaunchStats) {
    let mut flags = vec![base; 4 * gx as usize];
    flags[0] += row0;
    flags[gx as usize] += row1;
    (run(gx, &flags, None), run(gx, &flags, Some(2)))
}

#[test]
fn data_dependent_arithmetic_is_scaled_as_its_mean() {
    // One CTA of rows 0 and 1 multiplies: 2 of 4 rows, so the sampled mean (1 of 2) is exact.
    let (whole, sampled) = whole_and_sampled(64, BASE, 1, 1);
    let s = sampled.sampled.expect("sampled");
    assert!(s.scaled, "{}", s.describe());
    assert!(
        s.differed.iter().any(|d| d.starts_with("warp fp32")),
        "{:?}",
        s.differed
    );
    assert!(s.describe().contains("data-dependent arithmetic differed"));
    assert_eq!(whole.counters, sampled.counters);
}

#[test]
fn another_trip_count_runs_every_row() {
    // Row 0's first CTA loops once more: one more branch and add per trip.
    let (whole, sampled) = whole_and_sampled(64, BASE, 1 << 8, 0);
    let s = sampled.sampled.expect("sampled");
    assert!(!s.scaled, "{}", s.describe());
    assert!(
        s.differed.iter().any(|d| d.starts_with("warp control")),
        "{:?}",
        s.differed
    );
    assert_eq!(whole.counters, sampled.counters);
}

#[test]
fn other_memory_traffic_runs_every_row() {
    // Row 0's first CTA loads once more, behind a branch every CTA executes.
    let (whole, sampled) = whole_and_sampled(64, BASE, 1 << 16, 0);
    let s = sampled.sampled.expect("sampled");
    assert!(!s.scaled, "{}", s.describe());
    assert!(
        s.differed
            .iter()
            .any(|d| d.starts_with("global load requests")),
        "{:?}",
        s.differed
    );
    assert_eq!(whole.counters, sampled.counters);
}

#[test]
fn arithmetic_past_the_spread_runs_every_row() {
    // One CTA per row and no loop: two multiplies are more than ARITHMETIC_SPREAD of a
    // row's work.
    let (whole, sampled) = whole_and_sampled(1, 0, 1, 0);
    let w = whole.counters.warp_instructions as f64 / 4.0;
    assert!(2.0 / w > ARITHMETIC_SPREAD);
    let s = sampled.sampled.expect("sampled");
    assert!(!s.scaled, "{}", s.describe());
    assert!(
        s.differed[0].starts_with("warp instructions"),
        "{:?}",
        s.differed
    );
    assert_eq!(whole.counters, sampled.counters);
}
