//! The host-memory estimate of `cpu/softmax/f32` against what candle really allocates,
//! measured with the counting allocator (installed for this test binary only).

use linattn_core::{Backend, Causality, CountingAllocator, FeatureMap, HostMemory, Inputs};
use linattn_core::{Problem, Shape};
use linattn_softmax::cpu::{
    estimated_host_bytes, gemm_workspace_allowance, CandleCpuBackend, Pass,
};

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

/// One test function, so no other test allocates while the meter runs.
#[test]
fn estimates_bound_the_measured_peak() {
    // N large enough that the N×N matrices (8 MiB each) dwarf everything else.
    let shape = Shape::new(1, 2, 1024, 16, 16);
    // The gemm slabs allowance is a bound, mostly unused once warm: the "not too loose"
    // checks leave it out.
    let slabs = gemm_workspace_allowance();
    let matrix = (shape.bh() * shape.seq * shape.seq * 4) as f64;
    let in_matrices = |bytes: u64| bytes as f64 / matrix;
    // The estimate bounds the peak, and is less than twice it (slabs aside).
    let assert_bounds = |label: &str, peak: u64, estimate: u64| {
        println!(
            "{label}: peak {:.2} N² matrices, estimate {:.2} (slabs {:.2})",
            in_matrices(peak),
            in_matrices(estimate),
            in_matrices(slabs)
        );
        assert!(peak <= estimate, "{label}: {peak} > {estimate}");
        assert!(
            2 * peak >= estimate - slabs,
            "{label}: estimate far too loose"
        );
    };
    for causality in [Causality::Causal, Causality::NonCausal] {
        let causal = causality.is_causal();
        let p = Problem::new(shape, causality, FeatureMap::EluPlusOne);
        for with_grad in [false, true] {
            let x = Inputs::random(shape, 5, with_grad).unwrap();
            let mut backend = CandleCpuBackend::new();
            backend.stage(&p, &x).unwrap();

            let base = HostMemory::start();
            backend.run_forward().unwrap();
            let forward_peak = HostMemory::peak_above(base) as u64;
            let pass = if with_grad {
                Pass::ForwardTracked
            } else {
                Pass::Forward
            };
            let estimate = estimated_host_bytes(&shape, causal, pass).unwrap();
            assert_bounds(&format!("{causality} {pass:?}"), forward_peak, estimate);

            if with_grad {
                let base = HostMemory::start();
                backend.run_backward().unwrap();
                // The estimate counts the graph the forward left alive too.
                let total_peak = forward_peak + HostMemory::peak_above(base) as u64;
                let estimate = estimated_host_bytes(&shape, causal, Pass::Backward).unwrap();
                let label = format!("{causality} Backward (graph included)");
                assert_bounds(&label, total_peak, estimate);
            }
        }
    }

    // A refused run allocates nothing: the check comes before the first matrix.
    let huge = Shape::new(1, 1, 1 << 20, 1, 1);
    let x = Inputs::random(huge, 3, true).unwrap();
    let mut backend = CandleCpuBackend::new();
    backend
        .stage(
            &Problem::new(huge, Causality::Causal, FeatureMap::EluPlusOne),
            &x,
        )
        .unwrap();
    let base = HostMemory::start();
    let refused = backend.run_forward();
    let allocated = HostMemory::peak_above(base);
    assert!(
        matches!(refused, Err(linattn_core::AttnError::OutOfMemory { .. })),
        "{refused:?}"
    );
    assert!(
        allocated < 64 << 10,
        "{allocated} bytes allocated before refusing"
    );
}
