//! `kernels/softmax.cu`: its source, the argument structs of its entry points and its
//! variants (one per storage precision).

use linattn_core::{Precision, Unsupported};
use linattn_cuda::runtime::{storage_define, KernelVariant};

/// The kernel source, embedded at build time.
pub const SOURCE: &str = include_str!("../../../../kernels/softmax.cu");
const SOURCE_NAME: &str = "softmax.cu";

linattn_cuda::kernel_params! {
    /// The argument structs of softmax.cu's entry points.
    pub mod params;
    /// `sm_forward_rows`: scores → probabilities in place, one block per row.
    pub struct ForwardRows => "sm_forward_rows" {
        scores: Ptr, n: i32, causal: bool, scale: f32,
    }
    /// `sm_backward_rows`: dP → dS in place, one block per row.
    pub struct BackwardRows => "sm_backward_rows" {
        probs: Ptr, grad: Ptr, n: i32, causal: bool, scale: f32,
    }
    /// `sm_gemm`: C_z = op(A_z)·op(B_z), row-major, 64×64 tiles.
    pub struct Gemm => "sm_gemm" {
        a: Ptr, b: Ptr, c: Ptr, m: i32, n: i32, k: i32, a_transposed: bool,
        b_transposed: bool, stride_a: i64, stride_b: i64, stride_c: i64, batches: i32,
    }
}

pub use params::SPECS as KERNEL_PARAMS;

/// The softmax kernels (rows and GEMM) for one storage precision.
pub fn kernel_variant(precision: Precision) -> Result<KernelVariant, Unsupported> {
    let (name, value) = storage_define(precision)?;
    if precision == Precision::BF16 {
        return Err(Unsupported::Problem(
            "the softmax baseline has f32 and f16 backends only".into(),
        ));
    }
    Ok(KernelVariant::new(SOURCE_NAME, SOURCE)
        .define(name, value)
        .entries(&params::ENTRIES)
        .hot())
}

/// Every variant of `kernels/softmax.cu` the backends use (f32 and f16 storage), for the
/// compile-all tests.
pub fn kernel_variants() -> Vec<KernelVariant> {
    [Precision::F32, Precision::F16]
        .into_iter()
        .filter_map(|p| kernel_variant(p).ok())
        .collect()
}
