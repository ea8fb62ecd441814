//! The batched GEMMs of the softmax baseline ([`BatchedGemm`]) and the engines that carry
//! them out ([`GemmEngine`]): cuBLAS or the `sm_gemm` kernel.

use super::kernels::{kernel_variant, params};
use linattn_core::{AttnError, Unsupported};
use linattn_cuda::executor::gemm::{GemmCall, RowMajorGemm};
use linattn_cuda::executor::{Executor, Kernel, Launch, Platform};
use linattn_cuda::memory::{DeviceBuffer, StorageElem};
use linattn_cuda::params::{launch_kernel, ptr, KernelParams};
use linattn_cuda::runtime::as_i32;
use std::marker::PhantomData;
use std::sync::Arc;

/// `sm_gemm`: output tile edge and threads per block (LA_GEMM_TILE, LA_GEMM_THREADS).
const GEMM_TILE: usize = 64;
const GEMM_THREADS: u32 = 256;
/// grid.y limit; `sm_gemm` loops over batches beyond it.
const MAX_GRID_Y: usize = 65_535;

/// Which implementation carries out the batched GEMMs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GemmEngine {
    /// cuBLAS strided-batched GEMMs: `cuda` only, its default.
    Cublas,
    /// `sm_gemm` of `kernels/softmax.cu`, launched through the executor: any
    /// platform, the simulator's only engine.
    Kernel,
}

impl GemmEngine {
    /// cuBLAS on a GPU, the GEMM kernel on the simulator.
    pub fn default_for(platform: Platform) -> GemmEngine {
        match platform {
            Platform::Cuda => GemmEngine::Cublas,
            Platform::Sim => GemmEngine::Kernel,
        }
    }

    /// `cublas` or `gemmkernel` (the backend-name suffix when not the platform's default).
    pub fn label(self) -> &'static str {
        match self {
            GemmEngine::Cublas => "cublas",
            GemmEngine::Kernel => "gemmkernel",
        }
    }

    /// Whether the engine can exist on `platform` at all (independent of the machine).
    pub fn check_platform(self, platform: Platform) -> Result<(), Unsupported> {
        match (self, platform) {
            (GemmEngine::Cublas, Platform::Sim) => Err(Unsupported::Problem(
                "cuBLAS runs on the cuda platform only; the simulator uses the GEMM kernel".into(),
            )),
            _ => Ok(()),
        }
    }

    /// Whether `exec` can run the engine (cuBLAS needs its library).
    pub(super) fn available_on(self, exec: &dyn Executor) -> Result<(), Unsupported> {
        self.check_platform(exec.platform())?;
        match self {
            GemmEngine::Cublas => exec.blas_available(),
            GemmEngine::Kernel => Ok(()),
        }
    }
}

/// What a [`BatchedGemm`] holds for its engine.
enum Engine {
    /// The executor's BLAS (cuBLAS).
    Blas,
    Kernel(Kernel),
}

/// Strided-batched row-major GEMMs of storage type `T` on one executor: `C_z = op(A_z)·op(B_z)`
/// as a [`RowMajorGemm`] plan states, on the engine chosen at construction.
pub struct BatchedGemm<T> {
    exec: Arc<dyn Executor>,
    engine: Engine,
    /// Most blocks along grid.y (`sm_gemm` loops over the batches beyond).
    max_grid_y: usize,
    _storage: PhantomData<T>,
}

impl<T: StorageElem> BatchedGemm<T> {
    /// Loads `sm_gemm` or opens the cuBLAS handle (cuBLAS only on `cuda`).
    pub fn new(exec: &Arc<dyn Executor>, engine: GemmEngine) -> Result<Self, AttnError> {
        engine.available_on(exec.as_ref())?;
        let engine = match engine {
            GemmEngine::Cublas => Engine::Blas,
            GemmEngine::Kernel => Engine::Kernel(
                exec.kernel(&kernel_variant(T::PRECISION)?, params::Gemm::SPEC.entry)?,
            ),
        };
        Ok(BatchedGemm {
            exec: exec.clone(),
            engine,
            max_grid_y: MAX_GRID_Y,
            _storage: PhantomData,
        })
    }

    /// Caps grid.y of `sm_gemm` below the device's 65535, so each block loops over
    /// more batches: lets a test cover that loop without launching 65536 batches.
    pub fn with_max_grid_y(mut self, blocks: usize) -> Self {
        self.max_grid_y = blocks.clamp(1, MAX_GRID_Y);
        self
    }

    pub fn engine(&self) -> GemmEngine {
        match self.engine {
            Engine::Blas => GemmEngine::Cublas,
            Engine::Kernel(_) => GemmEngine::Kernel,
        }
    }

    /// `C_z = op(A_z)·op(B_z)` for `z < batch`; `what` names the product in errors. The
    /// buffers must hold `batch` matrices of the plan's strides (checked) and be allocated on
    /// this GEMM's executor (not checkable: see the SAFETY note inside).
    pub fn run(
        &self,
        plan: RowMajorGemm,
        batch: usize,
        a: &DeviceBuffer<T>,
        b: &DeviceBuffer<T>,
        c: &mut DeviceBuffer<T>,
        what: &str,
    ) -> Result<(), AttnError> {
        if plan.m < 1 || plan.n < 1 || plan.k < 1 || batch == 0 {
            return Err(AttnError::InvalidArgument(format!(
                "{what}: empty GEMM {plan:?} × {batch}"
            )));
        }
        for (name, buffer, stride) in [
            ("A", a, plan.stride_a()),
            ("B", b, plan.stride_b()),
            ("C", &*c, plan.stride_c()),
        ] {
            let needed = (stride as u128) * (batch as u128);
            if (buffer.len() as u128) < needed {
                return Err(AttnError::InvalidArgument(format!(
                    "{what}: {name} holds {} elements, {batch} matrices of {stride} need {needed}",
                    buffer.len()
                )));
            }
        }
        let batch_i32 = as_i32("GEMM batch B·H", batch)?;
        match &self.engine {
            // The buffers are live (borrowed) and hold `batch` matrices of the plan's strides
            // (checked above); the backend allocates every one on this GEMM's executor.
            Engine::Blas => self.exec.gemm(&GemmCall {
                plan,
                batch: batch_i32,
                precision: T::PRECISION,
                a: a.address(),
                b: b.address(),
                c: c.address(),
                what,
            }),
            Engine::Kernel(kernel) => {
                let tiles =
                    (plan.m as usize).div_ceil(GEMM_TILE) * (plan.n as usize).div_ceil(GEMM_TILE);
                let tiles = u32::try_from(tiles)
                    .ok()
                    .filter(|&t| t <= i32::MAX as u32)
                    .ok_or_else(|| {
                        AttnError::SizeOverflow(format!("{what}: {tiles} output tiles of 64×64"))
                    })?;
                let grid = (tiles, batch.min(self.max_grid_y) as u32, 1);
                launch_kernel(
                    self.exec.as_ref(),
                    kernel,
                    &Launch::new(grid, GEMM_THREADS),
                    &params::Gemm {
                        a: ptr(a),
                        b: ptr(b),
                        c: ptr(&*c),
                        m: plan.m,
                        n: plan.n,
                        k: plan.k,
                        a_transposed: plan.a_transposed,
                        b_transposed: plan.b_transposed,
                        stride_a: plan.stride_a(),
                        stride_b: plan.stride_b(),
                        stride_c: plan.stride_c(),
                        batches: batch_i32,
                    },
                )
            }
        }
    }
}
