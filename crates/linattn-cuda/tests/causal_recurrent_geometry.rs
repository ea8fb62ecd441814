//! Launch geometry, variant and problem-support logic of the recurrent and cumsum modules:
//! pure host code, runs without a GPU.

use linattn_core::{BackwardKind, Causality, FeatureMap, Precision, Problem, Shape, Unsupported};
use linattn_cuda::causal_cumsum;
use linattn_cuda::causal_recurrent::{
    self, check_problem, scan_launch, MapClass, ScanRole, MAIN_THREADS, Z_WARP_THREADS,
};
use linattn_cuda::Platform;

fn problem(b: usize, h: usize, n: usize, d: usize, m: usize, map: FeatureMap) -> Problem {
    Problem::new(Shape::new(b, h, n, d, m), Causality::Causal, map)
}

#[test]
fn backend_names_and_kinds_are_exact() {
    for platform in Platform::ALL {
        let names: Vec<(String, Option<BackwardKind>)> = causal_recurrent::backends(platform)
            .iter()
            .chain(causal_cumsum::backends(platform).iter())
            .map(|b| {
                (
                    b.name().replacen(platform.family(), "cuda", 1),
                    b.info().backward,
                )
            })
            .collect();
        assert!(causal_recurrent::backends(platform)
            .iter()
            .all(|b| b.name().starts_with(&format!("{platform}/"))
                && b.info().device == platform.device_kind()));
        check_names(&names);
    }
}

fn check_names(names: &[(String, Option<BackwardKind>)]) {
    let want = [
        ("cuda/causal_recurrent/f32", BackwardKind::Efficient),
        ("cuda/causal_recurrent/f16", BackwardKind::Efficient),
        ("cuda/causal_recurrent/bf16", BackwardKind::Efficient),
        (
            "cuda/causal_recurrent+storedbwd/f32",
            BackwardKind::StoredStates,
        ),
        (
            "cuda/causal_recurrent+storedbwd/f16",
            BackwardKind::StoredStates,
        ),
        ("cuda/causal_cumsum/f32", BackwardKind::Efficient),
        ("cuda/causal_cumsum/f16", BackwardKind::Efficient),
    ];
    assert_eq!(names.len(), want.len());
    for ((got, kind), (name, want_kind)) in names.iter().zip(want) {
        assert_eq!(got, name);
        assert_eq!(*kind, Some(want_kind));
    }
}

#[test]
fn scans_split_the_column_dim_across_blocks() {
    // Forward: columns are M (48 → 2 slices), rows C; normalised adds the z warp.
    let fwd = scan_launch(ScanRole::Forward, 64, 48, 6, true).unwrap();
    assert_eq!(fwd.grid, (2, 6, 1));
    assert_eq!(fwd.block, (MAIN_THREADS + Z_WARP_THREADS, 1, 1));
    let plain = scan_launch(ScanRole::Forward, 64, 48, 6, false).unwrap();
    assert_eq!(plain.block, (MAIN_THREADS, 1, 1));
    // ∂Q and ∂K: columns are C (96 → 3 slices), no z warp.
    let dq = scan_launch(ScanRole::Dq, 96, 16, 1, true).unwrap();
    assert_eq!(dq.grid, (3, 1, 1));
    assert_eq!(dq.block, (MAIN_THREADS, 1, 1));
    let dv = scan_launch(ScanRole::Dv, 96, 256, 2, true).unwrap();
    assert_eq!(dv.grid, (8, 2, 1));
    assert!(scan_launch(ScanRole::Dk, 64, 64, 65_536, true).is_err());
}

#[test]
fn each_scan_compiles_for_the_class_of_its_rows() {
    assert_eq!(ScanRole::Forward.class(48, 256).unwrap(), 64);
    assert_eq!(ScanRole::Dv.class(48, 256).unwrap(), 64);
    assert_eq!(ScanRole::Dq.class(48, 256).unwrap(), 256);
    assert_eq!(ScanRole::Dk.class(80, 16).unwrap(), 32);
    assert_eq!(ScanRole::Forward.class(256, 16).unwrap(), 256);
    assert!(ScanRole::Forward.class(257, 16).is_err());
}

#[test]
fn variants_cover_every_precision_map_and_class() {
    let variants = causal_recurrent::kernel_variants();
    assert_eq!(variants.len(), 3 * 4 * 4);
    for v in &variants {
        assert!(v.hot);
        assert_eq!(v.entry_points.len(), causal_recurrent::ENTRY_POINTS.len());
    }
    let mut labels: Vec<String> = variants.iter().map(|v| v.label()).collect();
    labels.sort();
    labels.dedup();
    assert_eq!(labels.len(), variants.len(), "variants must differ");
    let staged = causal_recurrent::variant(Precision::F16, MapClass::Staged, 128).unwrap();
    let defines: Vec<(&str, &str)> = staged
        .defines
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(
        defines,
        [
            ("LA_STORAGE", "1"),
            ("LA_MAP", "0"),
            ("LA_NORMALISED", "1"),
            ("CR_QK_F32", "1"),
            ("CR_A_MAX", "128")
        ]
    );
    assert!(causal_recurrent::variant(Precision::F64, MapClass::Relu, 64).is_err());
    assert!(causal_recurrent::variant(Precision::F32, MapClass::Relu, 48).is_err());
    assert_eq!(causal_cumsum::kernel_variants().len(), 2 * 4);
}

#[test]
fn map_classes_follow_the_feature_map() {
    assert_eq!(MapClass::of(&FeatureMap::Identity), MapClass::Identity);
    assert!(!MapClass::Identity.normalised());
    assert_eq!(MapClass::of(&FeatureMap::EluPlusOne).la_map(), 1);
    assert_eq!(MapClass::of(&FeatureMap::Relu).la_map(), 2);
    assert_eq!(MapClass::of(&FeatureMap::Softmax), MapClass::Staged);
    assert!(MapClass::Staged.normalised() && MapClass::Staged.qk_f32());
}

#[test]
fn unsupported_problems_name_the_dim() {
    let info = causal_recurrent::backends(Platform::Cuda)[0].info().clone();
    let ok = |p: &Problem| check_problem(&info, p);
    for (d, m) in [(16, 16), (48, 80), (96, 256), (256, 16)] {
        assert_eq!(
            ok(&problem(1, 1, 5, d, m, FeatureMap::EluPlusOne)),
            Ok(()),
            "D={d} M={m}"
        );
    }
    let reason = |p: &Problem| match ok(p) {
        Err(Unsupported::Problem(m)) => m,
        other => panic!("expected Unsupported::Problem, got {other:?}"),
    };
    assert!(reason(&problem(1, 1, 5, 24, 16, FeatureMap::Relu)).contains("D = 24"));
    assert!(reason(&problem(1, 1, 5, 16, 8, FeatureMap::Relu)).contains("M = 8"));
    assert!(reason(&problem(1, 1, 5, 272, 16, FeatureMap::Relu)).contains("D = 272"));
    assert!(reason(&problem(1, 1, 5, 256, 16, FeatureMap::OnePlusCos)).contains("C = 257"));
    assert!(reason(&problem(300, 300, 5, 16, 16, FeatureMap::Relu)).contains("B·H"));
    let non_causal = Problem::new(
        Shape::new(1, 1, 5, 16, 16),
        Causality::NonCausal,
        FeatureMap::Relu,
    );
    assert!(ok(&non_causal).is_err());
}

#[test]
fn cuda_backends_say_unavailable_exactly_when_there_is_no_driver() {
    let gpu_present = linattn_cuda::gpu_available().is_ok();
    let p = problem(1, 1, 5, 16, 16, FeatureMap::EluPlusOne);
    for mut b in causal_recurrent::backends(Platform::Cuda)
        .into_iter()
        .chain(causal_cumsum::backends(Platform::Cuda))
    {
        if gpu_present {
            // With a GPU the same calls must not claim absence (both paths are tested
            // wherever this runs; neither is skipped).
            assert_eq!(b.supports(&p), Ok(()), "{}", b.name());
            continue;
        }
        assert!(
            matches!(b.supports(&p), Err(Unsupported::Unavailable(_))),
            "{}",
            b.name()
        );
        assert!(b.run_forward().is_err());
        assert!(b.output().is_err());
    }
}
