//! `noncausal.cu` itself: its source, the argument struct of every entry point and the
//! constants both sides agree on (what `launch.rs` passes and `geometry.rs` sizes).

/// kernels/noncausal.cu.
pub const SOURCE: &str = include_str!("../../../../kernels/noncausal.cu");

crate::kernel_params! {
    /// The argument structs of noncausal.cu's entry points.
    pub mod params;
    /// `nc_accumulate`: Σ_j bw_j A_jᵀ⊗B_j and Σ_j vw_j A_j over a split of N.
    pub struct Accumulate => "nc_accumulate" {
        a: Ptr, a_kind: i32, b: Ptr, b_row_scale: Ptr, v_row_scale: Ptr, partial: Ptr,
        n: i32, c: i32, m: i32, rows_per_split: i32, log2_decay: f32,
    }
    /// `nc_reduce`: the splits' partial states summed.
    pub struct Reduce => "nc_reduce" {
        partial: Ptr, state: Ptr, splits: i32, state_len: i64, heads: i64,
    }
    /// `nc_backward_row_terms`: 1/den and gd per row.
    pub struct BackwardRowTerms => "nc_backward_row_terms" {
        q: Ptr, q_kind: i32, state: Ptr, g: Ptr, o: Ptr, o_f32: bool, q_log_scale: Ptr,
        k_log_scale: Ptr, eps: f32, inv_den: Ptr, gd: Ptr, rows: i64, n: i32, c: i32, m: i32,
    }
    /// `nc_rowgemm`: O, ∂Q̃, ∂K̃ or ∂V as row products with a state.
    pub struct Rowgemm => "nc_rowgemm" {
        mode: i32, x: Ptr, x_kind: i32, state: Ptr, c: i32, m: i32, out: Ptr, out_f32: bool,
        pre: Ptr, inv_den: Ptr, gd: Ptr, q_log_scale: Ptr, k_log_scale: Ptr, eps: f32,
        normalised: bool, n: i32, log2_decay: f32,
    }
}

pub use params::SPECS as KERNEL_PARAMS;

pub use params::ENTRIES as ENTRY_POINTS;

/// Output tile edge and threads per block of `nc_accumulate` / `nc_rowgemm`.
pub const TILE: usize = 64;
pub const THREADS: u32 = 256;
/// Operand kinds and product modes of noncausal.cu.
pub const KIND_STORAGE: i32 = 0;
pub const KIND_MAPPED: i32 = 1;
pub const KIND_F32: i32 = 2;
pub const MODE_OUTPUT: i32 = 0;
pub const MODE_GRAD_Q: i32 = 1;
pub const MODE_GRAD_K: i32 = 2;
pub const MODE_GRAD_V: i32 = 3;
/// Rows of `nc_backward_row_terms` per block: a warp per row.
pub const ROW_TERMS_ROWS_PER_BLOCK: usize = THREADS as usize / 32;
