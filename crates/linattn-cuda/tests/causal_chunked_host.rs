//! Host-side logic of `cuda/causal_chunked/*`: launch plans (grids, tails, shared memory,
//! workspace), head-dim and map dispatch, variants, and typed errors without a GPU. Runs
//! anywhere; no device needed.

use linattn_core::{
    AttnError, Backend, BackwardKind, Causality, FeatureMap, Form, Inputs, Precision, Problem,
    Shape, Unsupported,
};
use linattn_cuda::causal_chunked::{
    backends, kernel_variants, map_code, tile_width, variant, CausalChunked, LaunchPlan, CHUNK,
    ENTRY_POINTS, GO_TOKENS, HEAD_DIMS, STATIC_SHARED_MAX,
};
use linattn_cuda::{DeviceBackend, Platform};

fn shape(bh: usize, n: usize, d: usize, m: usize) -> Shape {
    Shape::new(1, bh, n, d, m)
}

#[test]
fn chunk_count_covers_ragged_tails() {
    for (n, chunks) in [
        (1, 1),
        (63, 1),
        (64, 1),
        (65, 2),
        (1000, 16),
        (262_144, 4096),
    ] {
        let plan = LaunchPlan::new(&shape(16, n, 64, 64)).unwrap();
        assert_eq!(plan.num_chunks, chunks, "N = {n}");
        assert!(plan.num_chunks * CHUNK >= n && (plan.num_chunks - 1) * CHUNK < n);
        assert_eq!(plan.grid_value_tiles, (chunks as u32, 16, 1));
        assert_eq!(plan.grid_grad_keys, (chunks as u32, 16, 1));
        assert_eq!(plan.grid_grad_values, (chunks as u32, 16, 1));
        // cc_backward_go: 32 tokens per block (8 lanes each), every token covered once.
        let groups = plan.grid_go.0 as usize;
        assert!(
            groups * GO_TOKENS >= n && (groups - 1) * GO_TOKENS < n,
            "N = {n}"
        );
        assert_eq!((plan.grid_go.1, plan.grid_go.2), (16, 1));
        // The state walks: one CTA per (b·h, 64×64 tile of the state), whatever N.
        assert_eq!(plan.grid_walk, (1, 16, 1));
    }
}

#[test]
fn grids_tile_value_and_key_dims_by_64() {
    let plan = LaunchPlan::new(&Shape::new(2, 3, 130, 128, 64)).unwrap();
    assert_eq!(plan.num_chunks, 3);
    assert_eq!(plan.heads, 6);
    assert_eq!(plan.grid_value_tiles, (3, 6, 1)); // M/64 = 1
                                                  // 18 chunk-CTAs: each gradient CTA takes one 64-wide slice (grid z = D/64 = 2 for dQ, dK).
    assert_eq!(plan.grid_grad_keys, (3, 6, 2));
    assert_eq!(plan.grid_grad_values, (3, 6, 1));
    assert_eq!(plan.grid_go, (5, 6, 1)); // ⌈130/32⌉ token groups, M/64 = 1

    // One state per chunk: D·M matrix + D vector + 8 words (the packed form's exponents).
    assert_eq!(plan.state_stride, 128 * 64 + 128 + 8);
    assert_eq!(plan.state_len, 6 * 3 * (128 * 64 + 128 + 8));
    assert_eq!(plan.state_bytes(), 4 * plan.state_len as u64);
    // walks: (D/64, B·H, M/64)
    assert_eq!(plan.grid_walk, (2, 6, 1));
}

#[test]
fn shared_memory_matches_the_kernel_layouts() {
    // Padded strides: tokens 64+8, features D+8 / M+8; 16-bit tiles, fp32 states.
    let small = LaunchPlan::new(&shape(1, 100, 64, 64)).unwrap();
    // cc_forward: q̃, k̃, v slice, z⁰, and at D = 64 a packed 64×64 state tile (16 KB; at
    // D = 128 it overlays k̃).
    assert_eq!(
        small.smem_forward,
        2 * 64 * 72 * 2 + 64 * 72 * 2 + 64 * 4 + 64 * 64 * 4
    );
    // cc_forward_train: q̃, then the fp32 state slice or (after the inter product) k̃ and v
    // (at D = 64 both 18,432 B), then z⁰.
    assert_eq!(small.smem_train, 64 * 72 * 2 + 64 * 72 * 4 + 64 * 4);
    assert!(
        small.smem_forward <= 48 * 1024 && small.smem_train <= 48 * 1024,
        "D = M = 64 forward fits without opt-in"
    );
    let large = LaunchPlan::new(&shape(1, 100, 128, 128)).unwrap();
    // 4 CTAs per H100 SM (228 KB, 1 KB reserved per CTA) at D = 128.
    assert_eq!(large.smem_forward, 44_544);
    assert!(4 * (large.smem_forward + 1024) <= 228 * 1024);
    assert_eq!(large.smem_train, 64 * 136 * 2 + 64 * 136 * 4 + 128 * 4);
    assert_eq!(large.smem_train, 52_736);
    // The gradient kernels: the rows tile, then one region for the score columns, then per
    // output slice the fp32 state slice or, after the inter product, the transposed tile(s);
    // dQ, dK the vector and the parked split scores (64×64, hi and lo).
    let (rows, state, park) = (64 * 136 * 2, 64 * 136 * 4, 64 * 64 * 2 * 2);
    assert_eq!(
        large.smem_dk,
        rows + (rows + 2 * 64 * 72 * 2) + 64 * 4 + park
    );
    assert_eq!(large.smem_dk, 69_888);
    assert_eq!(large.smem_dq, large.smem_dk);
    assert_eq!(large.smem_dv, rows + state);
    // 4 CTAs of cc_forward_train and dV, 3 of dQ and dK fit an H100 SM by shared memory (with
    // ≤ 528 B static): their launch bounds' 3 (registers) for all three gradients.
    for (bytes, ctas) in [
        (large.smem_train, 4),
        (large.smem_dq, 3),
        (large.smem_dk, 3),
        (large.smem_dv, 4),
    ] {
        assert!(ctas * (bytes + 528 + 1024) <= 228 * 1024, "{bytes}");
    }
    // Walks: v or G tile, k̃ or q̃ tile and its residue, whatever D and M.
    assert_eq!(large.smem_walk, 3 * 64 * 72 * 2);
    assert_eq!(small.smem_walk, large.smem_walk);
    // Every sm_80+ part opts in to ≥ 99 KB per block (sm_86/89) at D, M ≤ 128; static shared
    // ≤ 1 KB here.
    for p in [small, large] {
        for bytes in [
            p.smem_forward,
            p.smem_train,
            p.smem_dq,
            p.smem_dk,
            p.smem_dv,
            p.smem_walk,
        ] {
            assert!(bytes + 1024 <= 99 * 1024, "{bytes} B of shared memory");
        }
    }
}

#[test]
fn head_dims_16_and_32_run_on_the_64_wide_program() {
    let d64 = LaunchPlan::new(&shape(3, 70, 64, 64)).unwrap();
    for (d, m) in [(16, 32), (32, 16), (16, 64), (64, 32)] {
        let p = LaunchPlan::new(&shape(3, 70, d, m)).unwrap();
        assert_eq!((p.tile_d, p.tile_m), (64, 64), "D={d}, M={m}");
        // One 64-wide tile each way, the padded state and the 64-wide program's shared memory.
        assert_eq!(p.grid_walk, (1, 3, 1));
        assert_eq!(p.grid_value_tiles, (2, 3, 1));
        assert_eq!(p.grid_grad_keys, (2, 3, 1));
        assert_eq!(p.grid_grad_values, (2, 3, 1));
        assert_eq!(p.state_stride, 64 * 64 + 64 + 8);
        assert_eq!(p, d64, "D={d}, M={m}: the D = M = 64 plan");
        assert_eq!(
            variant(Precision::BF16, d, m).unwrap().label(),
            variant(Precision::BF16, 64, 64).unwrap().label()
        );
    }
    let p = LaunchPlan::new(&shape(1, 65, 16, 128)).unwrap();
    assert_eq!((p.tile_d, p.tile_m), (64, 128));
    assert_eq!(p.grid_value_tiles, (2, 1, 2));
    assert_eq!(p.grid_grad_keys, (2, 1, 1));
    assert_eq!(p.grid_grad_values, (2, 1, 2));
    assert_eq!(p.grid_walk, (1, 1, 2));
}

#[test]
fn head_dims_256_take_four_tiles_and_more_shared_memory() {
    let p = LaunchPlan::new(&Shape::new(2, 3, 130, 256, 256)).unwrap();
    assert_eq!((p.tile_d, p.tile_m), (256, 256));
    assert_eq!(p.grid_walk, (4, 6, 4));
    assert_eq!(p.grid_value_tiles, (3, 6, 4));
    assert_eq!(p.grid_grad_keys, (3, 6, 4));
    assert_eq!(p.grid_grad_values, (3, 6, 4));
    // 16 tile exponents: two sectors of words after the vector.
    assert_eq!(p.state_stride, 256 * 256 + 256 + 16);
    assert_eq!(p.state_len, 6 * 3 * (256 * 256 + 256 + 16));
    // Strides 264 (features), 72 (tokens); cc_forward's packed tile overlays k̃ (D > 64).
    assert_eq!(p.smem_forward, 2 * 64 * 264 * 2 + 64 * 72 * 2 + 256 * 4);
    assert_eq!(p.smem_forward, 77_824);
    assert_eq!(p.smem_train, 64 * 264 * 2 + 64 * 264 * 4 + 256 * 4);
    // The gradient kernels' region is the fp32 state slice at 256 (larger than the score
    // columns and transposed tiles it also holds); dQ and dK park their split scores.
    assert_eq!(
        p.smem_dk,
        64 * 264 * 2 + 64 * 264 * 4 + 64 * 4 + 64 * 64 * 2 * 2
    );
    assert_eq!(p.smem_dq, p.smem_dk);
    assert_eq!(p.smem_dv, 64 * 264 * 2 + 64 * 264 * 4);
    assert_eq!(p.smem_train, 102_400);
    assert_eq!(p.smem_dk, 118_016);
    assert_eq!(p.max_shared(), p.smem_dk);
    // sm_80 (163 KB) and sm_90 (227 KB) opt in to it with the static part; sm_86/89 (99 KB)
    // cannot, and are refused naming the need and the device.
    p.check_shared("sm_80", 163 << 10).unwrap();
    p.check_shared("sm_90", 227 << 10).unwrap();
    let need = u64::from(p.max_shared()) + STATIC_SHARED_MAX;
    p.check_shared("A", need).unwrap();
    match p.check_shared("RTX A6000", 99 << 10) {
        Err(Unsupported::Problem(m)) => {
            assert!(
                m.contains("RTX A6000") && m.contains(&need.to_string()),
                "{m}"
            )
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert!(p.check_shared("A", need - 1).is_err());
    // Mixed: the walks and the per-chunk grids follow each dim's own tile count.
    let p = LaunchPlan::new(&shape(1, 65, 256, 32)).unwrap();
    assert_eq!((p.tile_d, p.tile_m), (256, 64));
    assert_eq!(p.grid_walk, (4, 1, 1));
    assert_eq!(p.grid_value_tiles, (2, 1, 1));
    assert_eq!(p.grid_grad_keys, (2, 1, 4));
    assert_eq!(p.grid_grad_values, (2, 1, 1));
    assert_eq!(p.grid_go, (3, 1, 1));
    assert_eq!(p.state_stride, 256 * 64 + 256 + 8);
    // D, M ≤ 128 fit sm_86/89's 99 KB opt-in.
    for (d, m) in [(128, 128), (16, 128), (128, 32)] {
        LaunchPlan::new(&shape(1, 65, d, m))
            .unwrap()
            .check_shared("sm_86", 99 << 10)
            .unwrap();
    }
}

#[test]
fn tile_widths_cover_every_head_dim_and_nothing_else() {
    assert_eq!(HEAD_DIMS, [16, 32, 64, 128, 256]);
    let widths: Vec<_> = HEAD_DIMS.iter().map(|&d| tile_width(d)).collect();
    assert_eq!(widths, [Some(64), Some(64), Some(64), Some(128), Some(256)]);
    for d in [0, 8, 48, 96, 192, 512] {
        assert_eq!(tile_width(d), None, "D = {d}");
    }
}

#[test]
fn plans_refuse_other_head_dims_and_too_many_heads() {
    for (d, m) in [(48, 64), (64, 96), (512, 128), (64, 8)] {
        let e = LaunchPlan::new(&shape(1, 10, d, m)).unwrap_err();
        assert!(
            matches!(e, AttnError::Unsupported(Unsupported::Problem(ref m)) if m.contains("{16, 32, 64, 128, 256}")),
            "{e}"
        );
    }
    let e = LaunchPlan::new(&Shape::new(256, 257, 8, 64, 64)).unwrap_err();
    assert!(e.to_string().contains("65535"), "{e}");
    assert!(matches!(
        LaunchPlan::new(&shape(1, 0, 64, 64)),
        Err(AttnError::EmptyDim(_))
    ));
}

#[test]
fn backends_are_named_chunked_with_efficient_backward() {
    let all = backends(Platform::Sim);
    let names: Vec<&str> = all.iter().map(|b| b.name()).collect();
    assert_eq!(names, ["sim/causal_chunked/f16", "sim/causal_chunked/bf16"]);
    let gpu: Vec<String> = backends(Platform::Cuda)
        .iter()
        .map(|b| b.name().into())
        .collect();
    assert_eq!(gpu, ["cuda/causal_chunked/f16", "cuda/causal_chunked/bf16"]);
    for (b, p) in all.iter().zip([Precision::F16, Precision::BF16]) {
        let info = b.info();
        assert_eq!(info.precision, p);
        assert_eq!(
            info.algorithm,
            linattn_core::Algorithm::Linear(Form::Chunked)
        );
        assert_eq!(info.backward, Some(BackwardKind::Efficient));
    }
}

#[test]
fn supports_names_the_backend_to_use_for_other_head_dims_and_maps() {
    for backend in backends(Platform::Cuda) {
        let prec = backend.info().precision;
        // D = 48, D = 512, M = 8: each refused, naming the supported set and the shape.
        for (d, m) in [(48, 64), (512, 64), (64, 8)] {
            let p = Problem::new(
                Shape::new(1, 2, 100, d, m),
                Causality::Causal,
                FeatureMap::EluPlusOne,
            );
            match backend.supports(&p) {
                Err(Unsupported::Problem(msg)) => {
                    assert!(msg.contains("D, M in {16, 32, 64, 128, 256}"), "{msg}");
                    assert!(
                        msg.contains(&format!("cuda/causal_recurrent/{prec}")),
                        "{msg}"
                    );
                    assert!(msg.contains(&format!("D={d}, M={m}")), "{msg}");
                }
                other => panic!("expected Problem for D={d}, M={m}, got {other:?}"),
            }
        }
        for map in [FeatureMap::Softmax, FeatureMap::OnePlusCos] {
            let p = Problem::new(Shape::new(1, 1, 10, 64, 64), Causality::Causal, map);
            assert!(
                matches!(backend.supports(&p), Err(Unsupported::Problem(ref m)) if m.contains("causal_recurrent")),
                "{map}"
            );
        }
        let p = Problem::new(
            Shape::new(1, 1, 10, 64, 64),
            Causality::NonCausal,
            FeatureMap::Relu,
        );
        assert!(matches!(backend.supports(&p), Err(Unsupported::Problem(_))));
        // Supported problems: Ok with a usable GPU, Unavailable without one; never Problem.
        for (d, m) in [
            (64, 64),
            (64, 128),
            (128, 64),
            (128, 128),
            (16, 32),
            (32, 256),
            (256, 16),
            (256, 256),
        ] {
            for map in [
                FeatureMap::EluPlusOne,
                FeatureMap::Relu,
                FeatureMap::Identity,
            ] {
                let p = Problem::new(Shape::new(2, 2, 65, d, m), Causality::Causal, map)
                    .with_decay(0.9);
                let r = backend.supports(&p);
                assert!(
                    matches!(r, Ok(()) | Err(Unsupported::Unavailable(_))),
                    "{r:?}"
                );
            }
        }
    }
}

#[test]
fn one_program_per_precision_and_tile_widths() {
    // 2 precisions × {64, 128, 256}²: D, M = 16, 32 share the 64-wide programs.
    let all = kernel_variants();
    assert_eq!(all.len(), 18);
    for v in &all {
        assert!(v.hot);
        // The segmented forward's sums and forwards hold a 64 × D state slice in registers:
        // the programs with D's tile width 256 leave them out (the per-chunk forward runs there).
        // Their training forms, not at D = 128, M = 64 either (they spilled there).
        let wide_d = v.label().contains("CC_D=256");
        let no_training = wide_d || v.label().contains("CC_D=128,CC_M=64");
        let expected: Vec<String> = ENTRY_POINTS
            .iter()
            .filter(|e| !wide_d || !["cc_seg_sums", "cc_forward_seg"].contains(e))
            .filter(|e| !no_training || !["cc_seg_sums_train", "cc_forward_seg_train"].contains(e))
            .map(|e| e.to_string())
            .collect();
        assert_eq!(v.entry_points, expected, "{}", v.label());
    }
    let labels: std::collections::HashSet<String> = all.iter().map(|v| v.label()).collect();
    assert_eq!(labels.len(), 18, "variants are distinct");
    assert!(labels.contains("causal_chunked.cu[LA_STORAGE=2,CC_D=128,CC_M=64]"));
    assert!(labels.contains("causal_chunked.cu[LA_STORAGE=1,CC_D=256,CC_M=64]"));
    for d in HEAD_DIMS {
        for m in HEAD_DIMS {
            let v = variant(Precision::F16, d, m).unwrap();
            assert!(labels.contains(&v.label()), "D={d}, M={m}: {}", v.label());
        }
    }
    assert!(variant(Precision::F32, 64, 64).is_err());
    assert!(variant(Precision::F16, 64, 80).is_err());
}

#[test]
fn map_codes_follow_the_prelude() {
    assert_eq!(map_code(&FeatureMap::Identity, Precision::F16), Ok(0));
    assert_eq!(map_code(&FeatureMap::EluPlusOne, Precision::F16), Ok(1));
    assert_eq!(map_code(&FeatureMap::Relu, Precision::BF16), Ok(2));
    assert!(map_code(&FeatureMap::Softmax, Precision::F16).is_err());
}

#[test]
fn runs_before_staging_are_typed_errors() {
    let mut b = DeviceBackend::<_, half::f16>::new(Platform::Cuda, CausalChunked::default());
    // Nothing staged: the platform's reason where it is absent, else a state error.
    let expected = |result: Result<(), AttnError>| match Platform::Cuda.available() {
        Err(reason) => result == Err(AttnError::Unsupported(reason)),
        Ok(()) => matches!(result, Err(AttnError::State(_))),
    };
    assert!(expected(b.run_forward().map(|_| ())));
    assert!(expected(b.run_backward().map(|_| ())));
    assert!(expected(b.output().map(|_| ())));
    assert!(expected(b.grads().map(|_| ())));
    // Bad inputs never panic: a mismatched tensor is refused at staging (or the machine has
    // no GPU, which is refused first).
    let s = Shape::new(1, 1, 10, 64, 64);
    let p = Problem::new(s, Causality::Causal, FeatureMap::EluPlusOne);
    let mut x = Inputs::random(s, 3, true).unwrap();
    x.v = linattn_core::Tensor::zeros([1, 1, 10, 32]).unwrap();
    let e = b.stage(&p, &x).unwrap_err();
    assert!(
        matches!(
            e,
            AttnError::ShapeMismatch(_) | AttnError::Unsupported(Unsupported::Unavailable(_))
        ),
        "{e}"
    );
}

#[test]
fn gradient_ctas_loop_over_slices_from_1024_chunk_ctas() {
    use linattn_cuda::causal_chunked::{grad_slices_looped, GradSlices, GRAD_LOOP_MIN_CTAS};
    // fla's (2, 16384, 16, 128): 256 chunks × 32 heads, every CTA over both slices.
    let p = LaunchPlan::new(&Shape::new(2, 16, 16384, 128, 128)).unwrap();
    assert_eq!(p.grid_grad_keys, (256, 32, 1));
    assert_eq!(p.grid_grad_values, (256, 32, 1));
    // Just below the threshold (1023 chunk-CTAs) one slice each; at it, looped.
    let below = Shape::new(1, 1, (GRAD_LOOP_MIN_CTAS - 1) * CHUNK, 128, 256);
    assert!(!grad_slices_looped(&below));
    let p = LaunchPlan::new(&below).unwrap();
    assert_eq!(p.grid_grad_keys, (1023, 1, 2));
    assert_eq!(p.grid_grad_values, (1023, 1, 4));
    let at = Shape::new(1, 1, (GRAD_LOOP_MIN_CTAS - 1) * CHUNK + 1, 128, 256);
    assert!(grad_slices_looped(&at));
    let p = LaunchPlan::new(&at).unwrap();
    assert_eq!(p.grid_grad_keys, (1024, 1, 1));
    assert_eq!(p.grid_grad_values, (1024, 1, 1));
    // The forward's grids tile M whatever the gradients do.
    assert_eq!(p.grid_value_tiles, (1024, 1, 4));
    // Forced either way (LINATTN_CC_GRAD_SLICES), whatever the shape.
    let p = LaunchPlan::with_grad_slices(&below, GradSlices::Loop).unwrap();
    assert_eq!(
        (p.grid_grad_keys, p.grid_grad_values),
        ((1023, 1, 1), (1023, 1, 1))
    );
    let p = LaunchPlan::with_grad_slices(&at, GradSlices::Split).unwrap();
    assert_eq!(
        (p.grid_grad_keys, p.grid_grad_values),
        ((1024, 1, 2), (1024, 1, 4))
    );
}

#[test]
fn the_inference_forward_runs_in_segments_of_the_length_with_the_fewest_chunk_waves() {
    use linattn_cuda::causal_chunked::{
        auto_seg_chunks, trains_in_segments, GradSlices, Segments, DEFAULT_SM_COUNT,
    };
    let plan = |b, n, h, d, m, s| {
        LaunchPlan::with(&Shape::new(b, h, n, d, m), GradSlices::Auto, s).expect("plan")
    };
    // The lengths that were fastest in the sm_90 model (`linattn profile --mode forward`
    // with LINATTN_CC_SEGMENTS=BS, 2026-11-27; 4 to 64 tried at fla's D = 128 shapes, 1 to
    // 64 at the others): fla's five shapes (B, N, H, D = M), then four with few heads.
    for ((b, n, h, d), best) in [
        ((2, 16384, 16, 128), 64),
        ((1, 8192, 96, 128), 32),
        ((4, 4096, 64, 128), 64),
        ((4, 2048, 16, 128), 16),
        ((8, 1024, 8, 64), 4),
        ((1, 4096, 1, 64), 1),
        ((1, 1024, 1, 128), 1),
        ((2, 256, 4, 64), 1),
        ((1, 65536, 2, 64), 8),
    ] {
        let shape = Shape::new(b, h, n, d, d);
        assert_eq!(
            auto_seg_chunks(&shape, DEFAULT_SM_COUNT),
            best,
            "({b}, {n}, {h}, {d})"
        );
        let seg = plan(b, n, h, d, d, Segments::Auto)
            .segments
            .expect("segments");
        assert_eq!(seg.seg_chunks, best);
    }
    // On fewer SMs the same shape takes shorter segments only where waves allow: 1 SM,
    // 2 slots, (8, 1024, 8, 64): 16 chunks × 64 heads → whole waves at any length; the
    // longest of the ties, one segment.
    assert_eq!(auto_seg_chunks(&Shape::new(8, 8, 1024, 64, 64), 1), 16);
    // fla's (2, 16384, 16, 128) forced to 16: 16 segments × 32 heads × 2 value slices.
    let seg = plan(2, 16384, 16, 128, 128, Segments::Chunks(16))
        .segments
        .expect("segments");
    assert_eq!((seg.seg_chunks, seg.num_segments), (16, 16));
    assert_eq!(seg.grid_sums, (15, 32, 2));
    assert_eq!(seg.grid_forward, (16, 32, 2));
    assert_eq!(seg.grid_scan, ((128 * 128 + 128u32).div_ceil(256), 32, 1));
    assert_eq!(seg.state_len, 32 * 16 * (128 * 128 + 128 + 8));
    // q̃, k̃ [64][136] + k̃wᵀ [128][72] + vᵀ [64][72] (16-bit) + packed Sᵀ 64 × 128 × 4 B +
    // z in two parities + z's records (2 tiles × 2 rows × 16 × 16 B): with the static
    // allowance, inside the 99 KB of sm_86/89.
    assert_eq!(
        seg.smem_forward,
        2 * 64 * 136 * 2 + 128 * 72 * 2 + 64 * 72 * 2 + 64 * 128 * 4 + 2 * 128 * 4 + 2 * 512
    );
    assert!(u64::from(seg.smem_forward) + STATIC_SHARED_MAX <= 99 * 1024);
    assert_eq!(seg.smem_sums, 128 * 72 * 2 + 64 * 72 * 2 + 2 * 128 * 4);
    // The training forms add the split k̃ᵀ's lo tile, 128 × 64 16-bit (unpadded).
    assert_eq!(seg.smem_sums_train, seg.smem_sums + 128 * 64 * 2);
    assert_eq!(seg.smem_forward_train, seg.smem_forward + 128 * 64 * 2);
    // They run on sm_90 (opt-in 227 KB), not on sm_80 (the model: no gain there) nor on
    // sm_86/89 (99 KB); the program has them but at D = 128, M = 64 and D = 256.
    let on = |cc: (u32, u32), optin: u64| seg.trains_on(cc, optin, seg.slices_per_cta(cc));
    assert!(on((9, 0), 227 * 1024));
    assert!(!on((8, 0), 163 * 1024));
    assert!(!on((9, 0), 99 * 1024));
    // With LINATTN_CC_SEG_SLICES=1 on sm_90: the one-slice shared memory, which fits too.
    assert!(seg.trains_on((9, 0), 227 * 1024, 1));
    assert!(trains_in_segments(128, 128) && trains_in_segments(64, 64));
    assert!(!trains_in_segments(128, 64) && !trains_in_segments(256, 64));
    // At D = M = 128, kernels built for sm_90 take both value slices in one CTA of (256, 2)
    // threads (CC_SEG_SLICES): grid z halves, each slice adds its vᵀ, packed Sᵀ, z and z's
    // records (141,312 B with the shared q̃, k̃, k̃wᵀ), and the training form still fits
    // sm_90's opt-in; sm_80 keeps one slice per CTA.
    assert!(seg.pairs_slices);
    assert_eq!(seg.slices_per_cta((9, 0)), 2);
    assert_eq!(seg.slices_per_cta((8, 0)), 1);
    assert_eq!(
        seg.smem_forward_slice,
        64 * 72 * 2 + 64 * 128 * 4 + 2 * 128 * 4 + 2 * 512
    );
    let paired = seg.forward_launch(2, false);
    assert_eq!((paired.grid, paired.block), ((16, 32, 1), (256, 2, 1)));
    assert_eq!(paired.shared_bytes, 141_312);
    assert_eq!(
        seg.forward_launch(2, true).shared_bytes,
        141_312 + 128 * 64 * 2
    );
    // The sums pair the same way: the weighted k̃ᵀ shared, a vᵀ and z per slice.
    assert_eq!(seg.smem_sums_slice, 64 * 72 * 2 + 2 * 128 * 4);
    let sums = seg.sums_launch(2, false);
    assert_eq!(
        (sums.grid, sums.block, sums.shared_bytes),
        (
            (15, 32, 1),
            (256, 2, 1),
            128 * 72 * 2 + 2 * (64 * 72 * 2 + 2 * 128 * 4)
        )
    );
    assert_eq!(
        seg.sums_launch(2, true).shared_bytes,
        sums.shared_bytes + 128 * 64 * 2
    );
    assert_eq!(seg.sums_launch(1, false).grid, (15, 32, 2));
    let single = seg.forward_launch(1, false);
    assert_eq!(
        (single.grid, single.block, single.shared_bytes),
        ((16, 32, 2), (256, 1, 1), seg.smem_forward)
    );
    // M = 64 (one slice) and D = 64 (one feature tile to share) never pair.
    for (d, m) in [(128, 64), (64, 128), (64, 64)] {
        let s = plan(2, 16384, 16, d, m, Segments::Chunks(16))
            .segments
            .expect("segments");
        assert!(
            !s.pairs_slices && s.slices_per_cta((9, 0)) == 1,
            "D = {d}, M = {m}"
        );
    }
    // D = 256 never (the state slice would not fit), by default or forced.
    assert_eq!(plan(2, 16384, 16, 256, 64, Segments::Auto).segments, None);
    assert_eq!(plan(1, 300, 1, 256, 64, Segments::Chunks(2)).segments, None);
    // Forced: any length, one segment included (no sums, no scan launched).
    let one = plan(1, 300, 1, 64, 64, Segments::Chunks(16))
        .segments
        .expect("forced");
    assert_eq!(
        (
            one.num_segments,
            one.grid_sums,
            one.grid_scan,
            one.state_len
        ),
        (1, (0, 0, 0), (0, 0, 0), 0)
    );
    let three = plan(1, 300, 2, 32, 256, Segments::Chunks(2))
        .segments
        .expect("forced");
    assert_eq!(
        (three.num_segments, three.grid_sums, three.grid_forward),
        (3, (2, 2, 4), (3, 2, 4))
    );
    assert_eq!(plan(1, 300, 1, 64, 64, Segments::Off).segments, None);
}
