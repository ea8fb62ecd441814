//! Counters whose values are known from first principles: coalescing (sectors per request,
//! unique sectors), bank conflicts (wavefronts per request), lane utilisation, mma FLOPs,
//! instruction classes.

mod common;

use common::*;
use linattn_ptxsim::{Arg, Counters, InstrClass};

/// `out[tid] = in[tid * stride]` for one CTA of `threads` threads: one global load and one
/// global store per warp. Loaded on a device that counts memory when `count_memory`.
fn strided_copy(count_memory: bool) -> Loaded {
    let text = Entry {
        name: "strided",
        params: &[("u64", "%rd1"), ("u64", "%rd2"), ("u32", "%r1")],
        regs: &[("b32", 5), ("f32", 2), ("b64", 9)],
        body: r#"	cvta.to.global.u64 	%rd3, %rd1;
	cvta.to.global.u64 	%rd4, %rd2;
	mov.u32 	%r2, %tid.x;
	mul.lo.s32 	%r3, %r2, %r1;
	mul.wide.s32 	%rd5, %r3, 4;
	add.s64 	%rd6, %rd3, %rd5;
	ld.global.f32 	%f1, [%rd6];
	mul.wide.s32 	%rd7, %r2, 4;
	add.s64 	%rd8, %rd4, %rd7;
	st.global.f32 	[%rd8], %f1;
	ret;
"#,
        ..Entry::default()
    }
    .ptx();
    let k = Loaded::new(text);
    if count_memory {
        k.dev.count_memory(true);
    }
    k
}

/// The arguments of the strided copy.
fn strided_args(input: u64, out: u64, stride: u32) -> [Arg; 3] {
    [Arg::U64(input), Arg::U64(out), Arg::I32(stride as i32)]
}

fn run_strided(stride: u32, threads: u32) -> Counters {
    let k = strided_copy(true);
    let input = upload_f32(&k.dev, &vec![1.0; (threads * stride) as usize]);
    let out = k.output(threads as usize);
    expect_ok(k.launch(1, threads, &strided_args(input, out, stride))).counters
}

#[test]
fn a_stride_one_warp_load_touches_4_sectors_and_stride_32_touches_32() {
    let unit = run_strided(1, 32);
    assert_eq!(unit.global_load_requests, 1);
    assert_eq!(unit.global_load_sectors, 4);
    assert_eq!(unit.global_store_sectors, 4);
    assert_eq!(unit.unique_load_sectors, 4);
    assert_eq!(unit.unique_store_sectors, 4);
    assert!((unit.global_sector_efficiency() - 1.0).abs() < 1e-12);
    let strided = run_strided(32, 32);
    assert_eq!(strided.global_load_sectors, 32);
    assert_eq!(strided.unique_load_sectors, 32);
    // Loads use 4 of every 32 bytes; the stores stay coalesced.
    let used = (32 * 4 + 32 * 4) as f64;
    let touched = (32 * 32 + 4 * 32) as f64;
    assert!((strided.global_sector_efficiency() - used / touched).abs() < 1e-12);
}

#[test]
fn a_half_empty_warp_reports_half_its_lanes() {
    let c = run_strided(1, 16);
    assert!(
        (c.lane_utilisation() - 0.5).abs() < 1e-12,
        "{}",
        c.lane_utilisation()
    );
    assert_eq!(c.global_load_sectors, 2);
    assert_eq!(c.warp_instructions * 16, c.thread_instructions);
}

#[test]
fn instruction_classes_add_up() {
    let c = run_strided(1, 64);
    let by_class: u64 = c.warp_by_class.iter().sum();
    assert_eq!(by_class, c.warp_instructions);
    assert_eq!(c.warp(InstrClass::GlobalLoad), 2);
    assert_eq!(c.warp(InstrClass::GlobalStore), 2);
    assert_eq!(c.warp(InstrClass::Control), 2);
    assert_eq!(c.warp(InstrClass::Conversion), 4);
}

/// Each thread stores then loads the shared word `tid * stride` (stride in words); the
/// counters of one warp doing so.
fn run_banks(stride: u32) -> Counters {
    let text = Entry {
        name: "banks",
        params: &[("u64", "%rd1"), ("u32", "%r1")],
        regs: &[("b32", 6), ("b64", 6)],
        decls: ".shared .align 4 .b8 tile[4096];",
        body: r#"	cvta.to.global.u64 	%rd2, %rd1;
	mov.u32 	%r2, %tid.x;
	mul.lo.s32 	%r3, %r2, %r1;
	mul.wide.u32 	%rd3, %r3, 4;
	mov.u64 	%rd4, tile;
	add.s64 	%rd5, %rd4, %rd3;
	st.shared.u32 	[%rd5], %r2;
	ld.shared.u32 	%r4, [%rd5];
	mul.wide.u32 	%rd3, %r2, 4;
	add.s64 	%rd5, %rd2, %rd3;
	st.global.u32 	[%rd5], %r4;
	ret;
"#,
        ..Entry::default()
    }
    .ptx();
    let k = Loaded::new(text);
    k.dev.count_memory(true);
    let out = k.output(32);
    let stats = expect_ok(k.launch(1, 32, &[Arg::U64(out), Arg::U32(stride)]));
    assert_eq!(k.download_u32(out, 32), (0..32).collect::<Vec<u32>>());
    stats.counters
}

#[test]
fn a_32_way_bank_conflict_takes_32_wavefronts() {
    let free = run_banks(1);
    assert_eq!(free.shared_load_requests, 1);
    assert_eq!(free.shared_load_wavefronts, 1);
    assert_eq!(free.shared_store_wavefronts, 1);
    assert!((free.shared_conflict_factor() - 1.0).abs() < 1e-12);
    let two_way = run_banks(2);
    assert_eq!(two_way.shared_load_wavefronts, 2);
    let worst = run_banks(32);
    assert_eq!(worst.shared_load_wavefronts, 32);
    assert_eq!(worst.shared_store_wavefronts, 32);
    assert!((worst.shared_conflict_factor() - 32.0).abs() < 1e-12);
}

#[test]
fn memory_counters_stay_off_unless_asked() {
    let k = strided_copy(false);
    let input = upload_f32(&k.dev, &[1.0; 32]);
    let out = k.output(32);
    let c = expect_ok(k.launch(1, 32, &strided_args(input, out, 1))).counters;
    assert_eq!(c.global_load_sectors, 0);
    assert_eq!(c.unique_load_sectors, 0);
    assert!(c.warp_instructions > 0);
}

/// `reps` mma per warp on whatever the registers hold (zeros), for `warps` warps.
fn mma_kernel(reps: usize) -> String {
    let body: String = (0..reps)
        .map(|_| {
            "\tmma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%f1,%f2,%f3,%f4}, \
             {%r1,%r2,%r3,%r4}, {%r5,%r6}, {%f1,%f2,%f3,%f4};\n"
                .to_string()
        })
        .collect();
    ptx(&format!(
        ".visible .entry mmas()\n{{\n\t.reg .b32 \t%r<8>;\n\t.reg .f32 \t%f<6>;\n\tmov.b32 \
         \t%r1, 0;\n\tmov.b32 \t%r2, 0;\n\tmov.b32 \t%r3, 0;\n\tmov.b32 \t%r4, 0;\n\tmov.b32 \
         \t%r5, 0;\n\tmov.b32 \t%r6, 0;\n\tmov.f32 \t%f1, 0f00000000;\n\tmov.f32 \t%f2, \
         0f00000000;\n\tmov.f32 \t%f3, 0f00000000;\n\tmov.f32 \t%f4, 0f00000000;\n{body}\tret;\n}}\n"
    ))
}

#[test]
fn mma_count_matches_the_flop_formula() {
    let dev = device();
    let module = load(&dev, &mma_kernel(5));
    let c = expect_ok(dev.launch(&module, "mmas", &config(3, 64), &[])).counters;
    // 3 CTAs × 2 warps × 5 mma, each 2·16·8·16 FLOPs.
    assert_eq!(c.mma, 30);
    assert_eq!(c.warp(InstrClass::Mma), 30);
    assert_eq!(c.mma * linattn_ptxsim::counters::MMA_FLOPS, 30 * 4096);
}

/// Launches on different host threads at once, on one device, each count the unique sectors
/// of their own buffers only (the touched-sector sets belong to the launch).
#[test]
fn concurrent_launches_count_their_own_unique_sectors() {
    let k = strided_copy(true);
    let threads = 256u32;
    let buffers: Vec<(u64, u64, u32)> = [1u32, 2, 4, 8, 16, 32]
        .iter()
        .map(|&stride| {
            let input = upload_f32(&k.dev, &vec![1.0; (threads * stride) as usize]);
            (input, k.output(threads as usize), stride)
        })
        .collect();
    let counts: Vec<(u32, u64, u64)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..8)
            .flat_map(|_| buffers.iter())
            .map(|&(input, out, stride)| {
                let k = &k;
                scope.spawn(move || {
                    let c =
                        expect_ok(k.launch(1, threads, &strided_args(input, out, stride))).counters;
                    (stride, c.unique_load_sectors, c.unique_store_sectors)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (stride, loaded, stored) in counts {
        // 256 floats a stride apart: one sector each once a stride reaches 8 floats.
        let expected = if stride >= 8 {
            256
        } else {
            256 * 4 * stride as u64 / 32
        };
        assert_eq!(loaded, expected, "stride {stride}");
        assert_eq!(stored, 32, "stride {stride}");
    }
}
