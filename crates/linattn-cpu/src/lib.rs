//! CPU linear attention.
//!
//! * [`oracle`]: the f64 reference. Plain loops, one file per form (parallel, recurrent,
//!   cumsum, quadratic) and per backward (memory-efficient, stored states).
//! * [`fast`]: the f32 path users run at long N: rayon over B·H, a C×M state kept in L1,
//!   elementwise maps fused, the others through a φ stage; memory-efficient backward.
//! * [`chunked`]: the chunkwise causal form in f32, every product a GEMM ([`gemm`]),
//!   parallel over heads and, when heads are few, over groups of chunks; its backward.
//! * [`maps`]: every feature map of SPEC §5 and its vector-Jacobian product, in f64 and f32.
//! * [`decode`]: streaming decoders (prefill, then one token at a time), f64 and f32.
//! * [`sparsity`]: S(a) of attention rows (SPEC §7): closed forms and a streamed estimator.
//! * [`backends`]: all of the above behind [`linattn_core::Backend`].

mod backend;
pub mod chunked;
pub mod decode;
mod entry;
pub mod fast;
pub mod gemm;
pub mod maps;
pub mod oracle;
pub mod sparsity;

pub use backend::{FastBackend, OracleBackend};
pub use decode::decoders;

use linattn_core::Backend;

/// Every CPU linear-attention backend: the f64 reference forms and the fast f32 path.
pub fn backends() -> Vec<Box<dyn Backend>> {
    backend::all()
}
