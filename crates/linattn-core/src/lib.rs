//! Vocabulary shared by every linattn crate.
//!
//! * [`Shape`], [`Problem`]: what is computed (B, H, N, D, M; causality; feature map; ε; decay).
//! * [`Tensor`], [`Inputs`], [`Grads`]: host tensors `[B, H, N, D]`, row-major, f64.
//! * [`AttnError`], [`Unsupported`]: typed errors; nothing in linattn panics on bad input.
//! * [`Inputs::random`], [`SeededInputs`]: seeded inputs, identical on every run and for every
//!   backend; a backend can make them head by head in its own precision.
//! * [`ErrorMetrics`]: max-abs, max-rel and RMS-ratio error against a reference; [`Judge`]: the
//!   one verdict rule of the tests and `linattn check` (RMS ratio within the precision's
//!   tolerance, cancelled gradients judged against the case's largest).
//! * [`Backend`]: the one trait every implementation (CPU, softmax, CUDA) provides; the
//!   harness knows nothing else.
//! * [`Decoder`], [`DecodeState`]: streaming decode with a carried (S, z) state, saved to a file.
//! * [`CountingAllocator`]: the host-memory meter the harness installs as global allocator.

mod alloc;
mod atomic;
mod backend;
mod decode;
mod error;
mod metrics;
mod problem;
mod rng;
mod seeded;
mod tensor;

pub use alloc::{CountingAllocator, HostMemory};
pub use atomic::write_bytes_atomic;
pub use backend::{check_linear_form, Backend, BackendInfo, BackwardKind, DeviceKind, RunStats};
pub use decode::{
    check_stream_range, decode_sequence, no_decode_state, no_staged_stream, DecodeSpec,
    DecodeState, DecodeTiming, Decoder, HostStream,
};
pub use error::{AttnError, Unsupported};
pub use metrics::{rms, Basis, ErrorMetrics, Judge, TensorVerdict, Verdict, CANCELLED};
pub use problem::{
    Algorithm, Causality, FeatureMap, Form, Pass, Precision, Problem, Shape, DEFAULT_EPS,
    DEFAULT_FAVOR_SEED,
};
pub use rng::{favor_projection, SeededRng};
pub use seeded::SeededInputs;
pub use tensor::{Grads, Inputs, Tensor, TensorRole};
