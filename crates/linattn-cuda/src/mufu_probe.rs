//! The MUFU probe (`kernels/mufu_probe.cu`): one approximate PTX function over an array of
//! inputs, the device's result bits back. `linattn mufu` builds the simulator's tables from
//! it on a GPU (`linattn_ptxsim::exec::mufu_table`) and checks their predictions against it.

use std::sync::Arc;

use linattn_core::AttnError;
/// The tables this probe captures and their files, for the lab (which has no direct
/// simulator dependency).
pub use linattn_ptxsim::exec::{mufu_file as file, mufu_table as table};
use linattn_ptxsim::MufuForm;

use crate::executor::{Executor, Launch};
use crate::memory::{DeviceBuffer, MemoryMeter};
use crate::params::{launch, ptr};
use crate::runtime::KernelVariant;

/// `kernels/mufu_probe.cu`.
pub const SOURCE: &str = include_str!("../../../kernels/mufu_probe.cu");

crate::kernel_params! {
    /// The argument struct of mufu_probe.cu.
    pub mod params;
    /// `mp_eval_all`: `out[i]` = bits of the form `op` at `input[i]`.
    pub struct EvalAll => "mp_eval_all" { input: Ptr, out: Ptr, n: i32, op: i32 }
}

pub use params::SPECS as KERNEL_PARAMS;

/// The one variant (no `-D` specialisation).
pub fn kernel_variants() -> Vec<KernelVariant> {
    vec![KernelVariant::new("mufu_probe.cu", SOURCE).entries(&params::ENTRIES)]
}

/// Inputs per launch: 2^24 (64 MiB each way), a full table in one go on a GPU.
const BATCH: usize = 1 << 24;
/// CTAs of 256 threads; the kernel loops over what one pass leaves.
const MAX_CTAS: usize = 4096;

/// `form` at every input (f32 bits), as `exec` computes it: result bits in input order.
pub fn evaluate(
    exec: &Arc<dyn Executor>,
    form: MufuForm,
    inputs: &[u32],
) -> Result<Vec<u32>, AttnError> {
    let variant = kernel_variants().remove(0);
    let meter = MemoryMeter::new();
    let mut results = Vec::with_capacity(inputs.len());
    for chunk in inputs.chunks(BATCH) {
        let input = DeviceBuffer::upload(exec, &meter, chunk)?;
        let out = DeviceBuffer::<u32>::uninit(exec, &meter, chunk.len())?;
        let ctas = chunk.len().div_ceil(256).clamp(1, MAX_CTAS) as u32;
        let args = params::EvalAll {
            input: ptr(&input),
            out: ptr(&out),
            n: chunk.len() as i32, // ≤ BATCH
            op: form.probe_code(),
        };
        launch(
            exec.as_ref(),
            &variant,
            &Launch::new((ctas, 1, 1), 256),
            &args,
        )?;
        exec.synchronize()?;
        results.extend(out.download()?);
    }
    Ok(results)
}
