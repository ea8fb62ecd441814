//! Streaming decoders of causal linear attention on the CPU (SPEC §2 RNN view, §6 decay):
//! the f64 reference ([`mod@reference`]) and the f32 path ([`fast`]) share one driver,
//! [`CpuDecoder`], and differ only in the per-token update of a head ([`StateReal`]).
//!
//! Prefill and step are the same pass: for each (batch, head) — in parallel with rayon when
//! the work is large enough to pay for it — every token does `S ← λS + φ(k)vᵀ`,
//! `z ← λz + φ(k)`, `o = φ(q)ᵀS / (φ(q)ᵀz + ε)`, starting from the carried state. So prefill
//! of P tokens costs O(P·C·M) and leaves exactly the state after P tokens, z included
//! (SPEC §9), and a step costs O(C·M) per head whatever the context length.
//!
//! A staged stream (`Decoder::stage_stream`) goes through the trait's host defaults: the
//! tokens are sliced once and stepped one by one, the same arithmetic as `step`.
//!
//! φ is applied per token without FAVOR+'s key max-subtraction: a stream has no "max over
//! all keys" to subtract, and a shared shift would have to be known before the first token.

mod driver;
pub mod fast;
pub mod reference;

pub use driver::{CpuDecoder, HeadState, StateReal, Token};

use linattn_core::Decoder;

/// Every CPU decoder: the f64 reference and the f32 path.
pub fn decoders() -> Vec<Box<dyn Decoder>> {
    vec![Box::new(reference::decoder()), Box::new(fast::decoder())]
}
