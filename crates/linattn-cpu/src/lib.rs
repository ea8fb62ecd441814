//! CPU linear attention (to be filled in by its owner).
use linattn_core::Backend;

/// Every CPU linear-attention backend.
pub fn backends() -> Vec<Box<dyn Backend>> {
    Vec::new()
}
