//! The one seam between the CUDA backends and a device: [`Executor`].
//!
//! Every allocation, copy, kernel load, launch, timing and memory query of a backend goes
//! through it. Two implementations:
//! * [`cuda`] — a real GPU through cudarc (the driver API, one context, one stream);
//! * [`sim`] — `linattn-ptxsim`, which runs the PTX NVRTC produced for the same kernels on
//!   the CPU with memcheck, racecheck, initcheck and synccheck.
//!
//! Backends are written once against the trait and exist as `cuda/<form>/<precision>` and
//! `sim/<form>/<precision>`: a [`Platform`] names which executor a backend drives, and
//! [`Platform::executor`] gives the process-wide instance (or why it is unavailable).
//! Arguments are typed values ([`KernelArg`]), kernels opaque handles ([`Kernel`]): no driver
//! type crosses the seam.

mod cublas;
pub mod cuda;
pub mod gemm;
mod seam;
pub mod sim;
mod sim_launch;
pub mod trace;

use std::sync::Arc;

use linattn_core::{AttnError, Unsupported};

pub use gemm::{GemmCall, RowMajorGemm};
pub use seam::{check_launch, DeviceInfo, Executor, Kernel, KernelArg, Launch, Platform};

// Here rather than in seam.rs with the rest of Platform: picking an executor names both
// implementations, which themselves build on the seam.
impl Platform {
    /// The process-wide executor, or why it cannot be used here.
    pub fn executor(self) -> Result<Arc<dyn Executor>, Unsupported> {
        match self {
            Platform::Cuda => cuda::executor(),
            Platform::Sim => sim::executor(),
        }
    }
}

/// Device-to-device copy bandwidth samples in GB/s (10⁹ bytes/s), counting read + write
/// bytes (2 × `bytes` per copy). One warm-up copy is not sampled.
pub fn measure_copy_bandwidth(
    exec: &dyn Executor,
    bytes: usize,
    repeats: usize,
) -> Result<Vec<f64>, AttnError> {
    if bytes == 0 || repeats == 0 {
        return Err(AttnError::InvalidArgument(
            "copy bandwidth needs bytes > 0 and repeats > 0".into(),
        ));
    }
    let bytes64 = bytes as u64;
    let source = exec.alloc(bytes64, true)?;
    let target = match exec.alloc(bytes64, true) {
        Ok(t) => t,
        Err(e) => {
            exec.free(source);
            return Err(e);
        }
    };
    let result = (|| {
        let mut copy = || exec.copy(target, source, bytes64);
        copy()?;
        let mut samples = Vec::with_capacity(repeats);
        for _ in 0..repeats {
            let elapsed = exec.time(&mut copy)?;
            let seconds = elapsed.as_secs_f64().max(1e-9);
            samples.push(2.0 * bytes as f64 / seconds / 1e9);
        }
        Ok(samples)
    })();
    exec.free(source);
    exec.free(target);
    result
}
