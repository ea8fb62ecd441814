//! The device side of the runtime. Without a GPU: every entry point answers with a typed
//! error, never a panic. With one: buffers round-trip, the meter counts exactly, impossible
//! allocations are `OutOfMemory`, events time work, the L2 flush and bandwidth probe run.

mod common;

use common::gpu_or_skip;
use linattn_core::{AttnError, Precision};
use linattn_cuda::runtime::{
    gpu, gpu_available, DeviceBuffer, MemoryMeter, StorageElem, CHECKED_ALLOCATION_BYTES,
};
use linattn_cuda::{device_info, measure_copy_bandwidth, memory_info};

#[test]
fn without_a_gpu_everything_is_a_typed_error() {
    let Err(reason) = gpu_available() else {
        eprintln!("skipped: a GPU is present (this checks the no-GPU path)");
        return;
    };
    assert!(reason.is_unavailable(), "{reason}");
    assert!(device_info().is_err_and(|e| e.is_unavailable()));
    assert!(matches!(memory_info(), Err(AttnError::Unsupported(_))));
    assert!(matches!(
        measure_copy_bandwidth(1 << 20, 2),
        Err(AttnError::Unsupported(_))
    ));
    assert!(gpu().is_err());
}

#[test]
fn device_info_is_plausible() {
    if !gpu_or_skip() {
        return;
    }
    let info = device_info().expect("device info");
    eprintln!("{info:?}");
    assert!(info.compute_capability.0 >= 7, "{info:?}");
    assert!(info.sm_count > 0 && info.l2_bytes > 0 && info.total_memory_bytes > 0);
    let (free, total) = memory_info().expect("memory info");
    assert!(free <= total && total == info.total_memory_bytes);
}

fn round_trip<T: StorageElem>() {
    let gpu = gpu().expect("gpu");
    let meter = MemoryMeter::new();
    let host: Vec<f64> = (0..1000).map(|i| (i as f64 - 500.0) / 37.0).collect();
    let buffer = DeviceBuffer::<T>::upload_f64(gpu, &meter, &host).expect("upload");
    let back = buffer.download_f64().expect("download");
    let want: Vec<f64> = host.iter().map(|&x| T::from_f64(x).to_f64()).collect();
    assert_eq!(back, want, "{:?}", T::PRECISION);
}

#[test]
fn buffers_round_trip_in_every_storage_precision() {
    if !gpu_or_skip() {
        return;
    }
    round_trip::<f32>();
    round_trip::<half::f16>();
    round_trip::<half::bf16>();
    assert_eq!(<half::bf16 as StorageElem>::PRECISION, Precision::BF16);
}

#[test]
fn meter_counts_live_and_peak_bytes_exactly() {
    if !gpu_or_skip() {
        return;
    }
    let gpu = gpu().expect("gpu");
    let meter = MemoryMeter::new();
    let a = DeviceBuffer::<f32>::zeros(gpu, &meter, 1000).expect("a");
    {
        let _b = DeviceBuffer::<half::f16>::zeros(gpu, &meter, 500).expect("b");
        assert_eq!(meter.live(), 4000 + 1000);
    }
    assert_eq!(meter.live(), 4000);
    assert_eq!(meter.peak(), 5000);
    meter.reset_peak();
    assert_eq!(meter.peak(), 4000);
    drop(a);
    assert_eq!(meter.live(), 0);
}

#[test]
fn impossible_allocations_are_out_of_memory() {
    if !gpu_or_skip() {
        return;
    }
    let gpu = gpu().expect("gpu");
    let meter = MemoryMeter::new();
    let (_, total) = gpu.memory_info().expect("memory info");
    let elements = (total / 4 + (CHECKED_ALLOCATION_BYTES / 4)) as usize * 2;
    match DeviceBuffer::<f32>::zeros(gpu, &meter, elements) {
        Err(AttnError::OutOfMemory {
            requested_bytes, ..
        }) => assert_eq!(requested_bytes, elements as u64 * 4),
        Err(other) => panic!("expected OutOfMemory, got {other}"),
        Ok(_) => panic!("allocated more than the device holds"),
    }
    assert_eq!(meter.live(), 0);
    assert!(matches!(
        DeviceBuffer::<f32>::zeros(gpu, &meter, usize::MAX),
        Err(AttnError::SizeOverflow(_))
    ));
}

#[test]
fn events_time_work_and_the_l2_flush_and_bandwidth_probe_run() {
    if !gpu_or_skip() {
        return;
    }
    let gpu = gpu().expect("gpu");
    let elapsed = gpu.time(|| gpu.flush_l2()).expect("timed flush");
    assert!(elapsed.as_secs_f64() > 0.0);
    let samples = measure_copy_bandwidth(64 << 20, 3).expect("bandwidth");
    assert_eq!(samples.len(), 3);
    assert!(
        samples.iter().all(|&gbps| gbps.is_finite() && gbps > 0.0),
        "{samples:?}"
    );
}
