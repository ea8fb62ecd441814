//! The GPU executor: cudarc over the driver API, one context and one stream for everything
//! (so ordering is implicit), modules loaded from the cubins NVRTC built for the device's own
//! architecture. Only reached after [`gpu_available`] says a device exists.
//!
//! Run on an H100 (2026-11-25, `../shared/reference/h100-2026-11-25/`): every `cuda/*`
//! backend passed `check --long` through this executor.

use std::collections::HashMap;
use std::ffi::c_int;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use cudarc::driver::sys as cu;
use cudarc::driver::{
    result, CudaContext, CudaFunction, CudaModule, CudaStream, DriverError, LaunchConfig,
    PushKernelArg,
};
use linattn_core::{AttnError, Unsupported};

use super::cublas::{cublas_available, Cublas};
use super::gemm::GemmCall;
use super::seam::{
    check_launch, check_shared_opt_in, load_module, report_for, DeviceInfo, Executor, Kernel,
    KernelArg, Launch, Platform,
};
use crate::runtime::nvrtc::CompileKey;
use crate::runtime::{gpu_available, lock, nvrtc_version, Arch, KernelVariant};

/// The process-wide GPU executor (device 0), or why there is none.
pub fn executor() -> Result<Arc<dyn Executor>, Unsupported> {
    static EXECUTOR: OnceLock<Result<Arc<CudaExecutor>, Unsupported>> = OnceLock::new();
    gpu_available()?;
    EXECUTOR
        .get_or_init(|| {
            CudaExecutor::open()
                .map(Arc::new)
                .map_err(|e| Unsupported::Unavailable(format!("CUDA device unusable: {e}")))
        })
        .clone()
        .map(|e| e as Arc<dyn Executor>)
}

/// `CUDA_ERROR_OUT_OF_MEMORY` → `AttnError::OutOfMemory`, anything else → `AttnError::Cuda`.
pub fn cuda_error(call: &str, error: DriverError) -> AttnError {
    if error.0 == cu::cudaError_enum::CUDA_ERROR_OUT_OF_MEMORY {
        AttnError::OutOfMemory {
            device: "cuda:0".into(),
            requested_bytes: 0,
            detail: format!("{call} returned CUDA_ERROR_OUT_OF_MEMORY"),
        }
    } else {
        AttnError::Cuda(format!("{call}: {error}"))
    }
}

trait CudaResultExt<T> {
    fn cuda(self, call: &str) -> Result<T, AttnError>;
}

impl<T> CudaResultExt<T> for Result<T, DriverError> {
    fn cuda(self, call: &str) -> Result<T, AttnError> {
        self.map_err(|e| cuda_error(call, e))
    }
}

pub struct CudaExecutor {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    info: DeviceInfo,
    arch: Arch,
    modules: Mutex<HashMap<CompileKey, Arc<CudaModule>>>,
    l2_flush: Mutex<Option<u64>>,
    /// cuBLAS on `stream`, opened at the first GEMM.
    blas: Mutex<Option<Cublas>>,
}

impl CudaExecutor {
    fn open() -> Result<CudaExecutor, AttnError> {
        let ctx = CudaContext::new(0).cuda("cuCtxCreate (device 0)")?;
        // One stream for everything: cudarc's per-buffer event tracking (meant for
        // multi-stream use) would add event records to every launch and copy.
        // SAFETY: no buffer is ever used on another stream.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.default_stream();
        let attr = |a: cu::CUdevice_attribute, name: &str| {
            ctx.attribute(a)
                .cuda(&format!("cuDeviceGetAttribute({name})"))
        };
        use cu::CUdevice_attribute as A;
        let major = attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, "cc major")?;
        let minor = attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, "cc minor")?;
        let sm_count = attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, "SM count")?;
        let l2 = attr(A::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, "L2 size")?;
        let smem_optin = attr(
            A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
            "shared optin",
        )?;
        let mut driver: c_int = 0;
        // SAFETY: libcuda is loaded (gpu_available).
        unsafe { cu::cuDriverGetVersion(&mut driver) }
            .result()
            .cuda("cuDriverGetVersion")?;
        let info = DeviceInfo {
            name: ctx.name().cuda("cuDeviceGetName")?,
            compute_capability: (major as u32, minor as u32),
            sm_count: sm_count as u32,
            l2_bytes: l2 as u64,
            total_memory_bytes: ctx.total_mem().cuda("cuDeviceTotalMem")? as u64,
            max_shared_per_block_optin: smem_optin as u64,
            driver_version: format!("{}.{}", driver / 1000, (driver % 1000) / 10),
            nvrtc_version: match nvrtc_version() {
                Ok((a, b)) => format!("{a}.{b}"),
                Err(e) => e.to_string(),
            },
        };
        Ok(CudaExecutor {
            arch: Arch {
                major: major as u32,
                minor: minor as u32,
            },
            ctx,
            stream,
            info,
            modules: Mutex::new(HashMap::new()),
            l2_flush: Mutex::new(None),
            blas: Mutex::new(None),
        })
    }

    fn bind(&self) -> Result<(), AttnError> {
        self.ctx.bind_to_thread().cuda("cuCtxSetCurrent")
    }

    fn function(kernel: &Kernel) -> Result<&CudaFunction, AttnError> {
        kernel.inner.downcast_ref::<CudaFunction>().ok_or_else(|| {
            AttnError::State(format!("{kernel:?} was not loaded by the CUDA executor"))
        })
    }
}

impl Executor for CudaExecutor {
    fn platform(&self) -> Platform {
        Platform::Cuda
    }

    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn arch(&self) -> Arch {
        self.arch
    }

    fn alloc(&self, bytes: u64, zeroed: bool) -> Result<u64, AttnError> {
        self.bind()?;
        let stream = self.stream.cu_stream();
        let bytes = bytes.max(1) as usize;
        // SAFETY: the stream is live; the memory is only used on it.
        let address = unsafe { result::malloc_async(stream, bytes) }.cuda("cuMemAllocAsync")?;
        if zeroed {
            // SAFETY: `address` holds `bytes` bytes.
            unsafe { result::memset_d8_async(address, 0, bytes, stream) }
                .cuda("cuMemsetD8Async")?;
        }
        Ok(address)
    }

    fn free(&self, address: u64) {
        if self.bind().is_ok() {
            // SAFETY: `address` came from alloc and is freed once (DeviceBuffer's drop).
            let _ = unsafe { result::free_async(address, self.stream.cu_stream()) };
        }
    }

    fn upload(&self, address: u64, data: &[u8]) -> Result<(), AttnError> {
        self.bind()?;
        // SAFETY: the caller's buffer holds data.len() bytes at `address`; the stream is
        // synchronised before `data` can go away.
        unsafe { result::memcpy_htod_async(address, data, self.stream.cu_stream()) }
            .cuda("cuMemcpyHtoDAsync")?;
        self.synchronize()
    }

    fn download(&self, address: u64, out: &mut [u8]) -> Result<(), AttnError> {
        self.bind()?;
        // SAFETY: as upload.
        unsafe { result::memcpy_dtoh_async(out, address, self.stream.cu_stream()) }
            .cuda("cuMemcpyDtoHAsync")?;
        self.synchronize()
    }

    fn memset_zero(&self, address: u64, bytes: u64) -> Result<(), AttnError> {
        self.bind()?;
        // SAFETY: the caller's buffer holds `bytes` bytes at `address`.
        unsafe { result::memset_d8_async(address, 0, bytes as usize, self.stream.cu_stream()) }
            .cuda("cuMemsetD8Async")
    }

    fn copy(&self, dst: u64, src: u64, bytes: u64) -> Result<(), AttnError> {
        self.bind()?;
        // SAFETY: both buffers hold `bytes` bytes.
        unsafe { result::memcpy_dtod_async(dst, src, bytes as usize, self.stream.cu_stream()) }
            .cuda("cuMemcpyDtoDAsync")
    }

    fn memory_info(&self) -> Result<(u64, u64), AttnError> {
        let (free, total) = self.ctx.mem_get_info().cuda("cuMemGetInfo")?;
        Ok((free as u64, total as u64))
    }

    fn kernel(&self, variant: &KernelVariant, entry: &str) -> Result<Kernel, AttnError> {
        let (compiled, module) = load_module(&self.modules, variant, entry, self.arch, |c| {
            self.ctx
                .load_module(cudarc::nvrtc::Ptx::from_binary(c.cubin.clone()))
                .cuda(&format!("cuModuleLoadData({})", c.label))
        })?;
        let function = module
            .load_function(entry)
            .cuda(&format!("cuModuleGetFunction({entry})"))?;
        Ok(Kernel {
            entry: entry.to_string(),
            label: compiled.label.clone(),
            ptxas: report_for(&compiled.report, entry),
            inner: Arc::new(function),
        })
    }

    fn allow_dynamic_shared(&self, kernel: &Kernel, bytes: u32) -> Result<(), AttnError> {
        check_shared_opt_in(&self.info, bytes)?;
        Self::function(kernel)?
            .set_attribute(
                cu::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                bytes as i32,
            )
            .cuda("cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)")
    }

    fn launch(
        &self,
        kernel: &Kernel,
        launch: &Launch,
        args: &[KernelArg],
    ) -> Result<(), AttnError> {
        check_launch(&self.info, kernel, launch)?;
        let function = Self::function(kernel)?;
        // The values live until the launch call returns; cuLaunchKernel copies them.
        let values: Vec<KernelArg> = args.to_vec();
        let mut builder = self.stream.launch_builder(function);
        for value in &values {
            match value {
                KernelArg::Ptr(p) => builder.arg(p),
                KernelArg::I32(v) => builder.arg(v),
                KernelArg::U32(v) => builder.arg(v),
                KernelArg::I64(v) => builder.arg(v),
                KernelArg::F32(v) => builder.arg(v),
            };
        }
        let config = LaunchConfig {
            grid_dim: launch.grid,
            block_dim: launch.block,
            shared_mem_bytes: launch.shared_bytes,
        };
        // SAFETY: the argument list is what the kernel's PTX declares (the simulator
        // executor checks every launch of the same host code against the PTX signature), and
        // the buffers the pointers name are live device allocations.
        unsafe { builder.launch(config) }
            .map(|_| ())
            .cuda(&format!("cuLaunchKernel({})", kernel.entry))
    }

    fn blas_available(&self) -> Result<(), Unsupported> {
        cublas_available()
    }

    fn gemm(&self, call: &GemmCall<'_>) -> Result<(), AttnError> {
        self.bind()?;
        let mut blas = lock(&self.blas)?;
        if blas.is_none() {
            *blas = Some(Cublas::new(self.stream.clone())?);
        }
        let blas = blas
            .as_ref()
            .ok_or_else(|| AttnError::State("cuBLAS handle lost".into()))?;
        // SAFETY: the caller passes allocations of this executor holding `batch` matrices at
        // the plan's strides (the trait's contract; `linattn-softmax` checks lengths).
        unsafe { blas.gemm_strided_batched(call) }
    }

    fn time(&self, work: &mut dyn FnMut() -> Result<(), AttnError>) -> Result<Duration, AttnError> {
        let flags = Some(cu::CUevent_flags::CU_EVENT_DEFAULT);
        let start = self
            .stream
            .record_event(flags)
            .cuda("cuEventRecord(start)")?;
        work()?;
        let end = self.stream.record_event(flags).cuda("cuEventRecord(end)")?;
        let ms = start.elapsed_ms(&end).cuda("cuEventElapsedTime")?;
        Ok(Duration::from_secs_f64(f64::from(ms.max(0.0)) / 1e3))
    }

    fn synchronize(&self) -> Result<(), AttnError> {
        self.stream.synchronize().cuda("cuStreamSynchronize")
    }

    fn flush_l2(&self) -> Result<(), AttnError> {
        let bytes = (2 * self.info.l2_bytes).max(1 << 20);
        let mut guard = lock(&self.l2_flush)?;
        let address = match *guard {
            Some(address) => address,
            None => {
                let address = self.alloc(bytes, false)?;
                *guard = Some(address);
                address
            }
        };
        self.memset_zero(address, bytes)
    }
}
