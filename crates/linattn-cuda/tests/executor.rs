//! The executor seam, stamped for every executor: buffers round-trip in every storage
//! precision, the meter counts exactly, impossible allocations and launches are typed errors,
//! timing and the cache flush run. On the simulator also: a kernel fault (memcheck,
//! initcheck) reaches the caller as `AttnError::KernelFault` naming kernel and PTX line.

use std::sync::Arc;

use linattn_core::{AttnError, Precision};
use linattn_cuda::executor::{Executor, KernelArg, Launch};
use linattn_cuda::memory::{DeviceBuffer, MemoryMeter, StorageElem};
use linattn_cuda::noncausal::params::Reduce;
use linattn_cuda::params::{ptr, KernelParams};
use linattn_cuda::{noncausal, Platform};
use linattn_testkit::stamp_executors;

type Check = fn(&Arc<dyn Executor>) -> Result<(), String>;

fn main() {
    let common_checks: Vec<(&str, Check)> = vec![
        ("buffers round-trip in every storage precision", round_trips),
        ("the meter counts live and peak bytes exactly", meter_counts),
        ("impossible allocations are OutOfMemory", out_of_memory),
        (
            "bad launch shapes are typed errors naming the kernel",
            bad_launches,
        ),
        (
            "timing, the L2 flush and the bandwidth probe run",
            timing_runs,
        ),
    ];
    let sim_only: Vec<(&str, Check)> = vec![
        (
            "static + dynamic shared memory over 48 KiB needs the opt-in attribute",
            shared_opt_in,
        ),
        (
            "an out-of-bounds read is a memcheck KernelFault",
            memcheck_fault,
        ),
        (
            "a read of never-written memory is an initcheck KernelFault",
            initcheck_fault,
        ),
    ];
    let checks_on = |platform: Platform| {
        let extra = if platform == Platform::Sim {
            &sim_only[..]
        } else {
            &[]
        };
        common_checks.iter().chain(extra).copied()
    };
    linattn_testkit::run(stamp_executors!(
        for platform in Platform::ALL, (name, check) in checks_on(platform) =>
            format!("{platform}: {name}"),
            platform.executor().map_err(|e| e.to_string()).and_then(|exec| check(&exec))
    ))
}

fn round_trip<T: StorageElem + PartialEq + std::fmt::Debug>(
    exec: &Arc<dyn Executor>,
) -> Result<(), String> {
    let meter = MemoryMeter::new();
    let host: Vec<f64> = (0..1000).map(|i| (i as f64 - 500.0) / 64.0).collect();
    let buffer = DeviceBuffer::<T>::upload_f64(exec, &meter, &host).map_err(|e| e.to_string())?;
    let back = buffer.download_f64().map_err(|e| e.to_string())?;
    let want: Vec<f64> = host.iter().map(|&x| T::from_f64(x).to_f64()).collect();
    if back != want {
        return Err(format!("{:?} round trip changed the values", T::PRECISION));
    }
    let empty = DeviceBuffer::<T>::zeros(exec, &meter, 0).map_err(|e| e.to_string())?;
    if !empty.download().map_err(|e| e.to_string())?.is_empty() {
        return Err("an empty buffer downloads elements".into());
    }
    Ok(())
}

fn round_trips(exec: &Arc<dyn Executor>) -> Result<(), String> {
    round_trip::<f32>(exec)?;
    round_trip::<half::f16>(exec)?;
    round_trip::<half::bf16>(exec)
}

fn meter_counts(exec: &Arc<dyn Executor>) -> Result<(), String> {
    let meter = MemoryMeter::new();
    let a = DeviceBuffer::<f32>::zeros(exec, &meter, 1000).map_err(|e| e.to_string())?;
    let b = DeviceBuffer::<half::f16>::uninit(exec, &meter, 300).map_err(|e| e.to_string())?;
    let expect = |what: &str, got: u64, want: u64| {
        (got == want)
            .then_some(())
            .ok_or(format!("{what}: {got} bytes, want {want}"))
    };
    expect("live", meter.live(), 4000 + 600)?;
    drop(a);
    expect("live after drop", meter.live(), 600)?;
    expect("peak", meter.peak(), 4600)?;
    meter.reset_peak();
    expect("peak after reset", meter.peak(), 600)?;
    drop(b);
    expect("live at the end", meter.live(), 0)
}

fn out_of_memory(exec: &Arc<dyn Executor>) -> Result<(), String> {
    let meter = MemoryMeter::new();
    let (_, total) = exec.memory_info().map_err(|e| e.to_string())?;
    let len = (total / 4 + 1024) as usize;
    match DeviceBuffer::<f32>::uninit(exec, &meter, len) {
        Err(AttnError::OutOfMemory {
            requested_bytes, ..
        }) if requested_bytes > total => Ok(()),
        Err(other) => Err(format!("expected OutOfMemory, got {other}")),
        Ok(_) => Err(format!("allocated {len} floats on a {total}-byte device")),
    }
}

/// `nc_reduce`'s arguments: one split of 64 floats per head, `heads` heads.
fn reduce_args(
    partial: &DeviceBuffer<f32>,
    state: &DeviceBuffer<f32>,
    heads: i64,
) -> Vec<KernelArg> {
    Reduce {
        partial: ptr(partial),
        state: ptr(state),
        splits: 1,
        state_len: 64,
        heads,
    }
    .args()
}

fn bad_launches(exec: &Arc<dyn Executor>) -> Result<(), String> {
    let variant = noncausal::variant(Precision::F32, 1).map_err(|e| e.to_string())?;
    let kernel = exec
        .kernel(&variant, Reduce::SPEC.entry)
        .map_err(|e| e.to_string())?;
    let meter = MemoryMeter::new();
    let state = DeviceBuffer::<f32>::zeros(exec, &meter, 64).map_err(|e| e.to_string())?;
    let arguments = reduce_args(&state, &state, 1);
    for (launch, expect) in [
        (Launch::new((1, 70_000, 1), 256), "65535"),
        (Launch::new((1, 1, 1), 2048), "threads per block"),
        (Launch::new((0, 1, 1), 256), "empty"),
        (
            Launch::new((1, 1, 1), 256).with_shared(1 << 30),
            "shared memory",
        ),
    ] {
        match exec.launch(&kernel, &launch, &arguments) {
            Err(AttnError::InvalidArgument(m))
                if m.contains(Reduce::SPEC.entry) && m.contains(expect) => {}
            other => {
                return Err(format!(
                    "{launch:?}: expected an error naming '{expect}', got {other:?}"
                ))
            }
        }
    }
    // Too few arguments: the simulator checks the PTX signature; a GPU would fault.
    if exec.platform() == Platform::Sim {
        match exec.launch(&kernel, &Launch::new((1, 1, 1), 256), &arguments[..4]) {
            Err(AttnError::InvalidArgument(m)) if m.contains("parameters") => {}
            other => return Err(format!("4 of 5 arguments: got {other:?}")),
        }
    }
    Ok(())
}

fn timing_runs(exec: &Arc<dyn Executor>) -> Result<(), String> {
    let meter = MemoryMeter::new();
    let mut a = DeviceBuffer::<f32>::zeros(exec, &meter, 1 << 16).map_err(|e| e.to_string())?;
    let elapsed = exec.time(&mut || a.zero()).map_err(|e| e.to_string())?;
    if elapsed.as_secs_f64() < 0.0 {
        return Err("negative time".into());
    }
    exec.flush_l2().map_err(|e| e.to_string())?;
    let samples = linattn_cuda::executor::measure_copy_bandwidth(exec.as_ref(), 1 << 20, 3)
        .map_err(|e| e.to_string())?;
    if samples.len() != 3 || samples.iter().any(|s| !s.is_finite() || *s <= 0.0) {
        return Err(format!("bandwidth samples {samples:?}"));
    }
    Ok(())
}

/// nc_reduce over a 64-float `partial` into a `state_len`-float `state` (zero-filled, or
/// never written when `zeroed` is false) for `heads` heads: the launch's own result.
fn launch_reduce(
    exec: &Arc<dyn Executor>,
    zeroed: bool,
    state_len: usize,
    heads: i64,
) -> Result<Result<(), AttnError>, String> {
    let variant = noncausal::variant(Precision::F32, 1).map_err(|e| e.to_string())?;
    let kernel = exec
        .kernel(&variant, Reduce::SPEC.entry)
        .map_err(|e| e.to_string())?;
    let meter = MemoryMeter::new();
    let buffer = |len| {
        let made = if zeroed {
            DeviceBuffer::<f32>::zeros(exec, &meter, len)
        } else {
            DeviceBuffer::<f32>::uninit(exec, &meter, len)
        };
        made.map_err(|e| e.to_string())
    };
    let (partial, state) = (buffer(64)?, buffer(state_len)?);
    let arguments = reduce_args(&partial, &state, heads);
    Ok(exec.launch(&kernel, &Launch::new((1, 1, 1), 256), &arguments))
}

/// nc_reduce sums `splits` partials of `state_len` floats per head: asking for more heads
/// than the buffers hold reads past the end of `partial`.
fn memcheck_fault(exec: &Arc<dyn Executor>) -> Result<(), String> {
    match launch_reduce(exec, true, 128, 2)? {
        Err(AttnError::KernelFault(m))
            if m.starts_with("memcheck")
                && m.contains(Reduce::SPEC.entry)
                && m.contains("PTX line") =>
        {
            Ok(())
        }
        other => Err(format!("expected a memcheck fault, got {other:?}")),
    }
}

/// nc_reduce reading partials no one wrote.
fn initcheck_fault(exec: &Arc<dyn Executor>) -> Result<(), String> {
    match launch_reduce(exec, false, 64, 1)? {
        Err(AttnError::KernelFault(m)) if m.starts_with("initcheck") => Ok(()),
        other => Err(format!("expected an initcheck fault, got {other:?}")),
    }
}

/// cc_forward has some static shared memory: dynamic shared memory just under 48 KiB stays
/// under the limit on its own, but not with the static part, so the launch needs the opt-in
/// attribute (the old check compared the dynamic bytes alone).
fn shared_opt_in(exec: &Arc<dyn Executor>) -> Result<(), String> {
    let variant =
        linattn_cuda::causal_chunked::variant(Precision::F16, 64, 64).map_err(|e| e.to_string())?;
    // cc_forward_train keeps static shared floats (its block max); cc_forward has none since
    // it reads the state packed.
    let entry = linattn_cuda::causal_chunked::params::ForwardTrain::SPEC.entry;
    let kernel = exec.kernel(&variant, entry).map_err(|e| e.to_string())?;
    let static_bytes = kernel.ptxas.as_ref().map_or(0, |r| r.shared_bytes);
    let dynamic = 48 * 1024 - static_bytes / 2;
    if static_bytes < 2 || static_bytes + dynamic <= 48 * 1024 {
        return Err(format!(
            "cc_forward_train has {static_bytes} static shared bytes: test premise"
        ));
    }
    let meter = MemoryMeter::new();
    let buffer = DeviceBuffer::<f32>::zeros(exec, &meter, 1).map_err(|e| e.to_string())?;
    let b = ptr(&buffer);
    let arguments = linattn_cuda::causal_chunked::params::ForwardTrain(
        linattn_cuda::causal_chunked::params::Forward {
            q: b,
            k: b,
            v: b,
            states: b,
            out: b,
            out_lo: b,
            den_out: b,
            n: 1,
            num_chunks: 1,
            log2_decay: 0.0,
            eps: 1e-6,
            map: 1,
            d: 64,
            m: 64,
        },
    )
    .args();
    match exec.launch(
        &kernel,
        &Launch::new((1, 1, 1), 128).with_shared(dynamic as u32),
        &arguments,
    ) {
        Err(AttnError::InvalidArgument(m)) if m.contains("MAX_DYNAMIC_SHARED_SIZE_BYTES") => Ok(()),
        other => Err(format!(
            "expected a refusal naming the opt-in attribute, got {other:?}"
        )),
    }
}
