//! The typed argument lists of `causal_chunked.cu`'s entry points (one struct per kernel, in
//! the kernels' parameter order; `tests/kernel_params.rs` checks them against the PTX).
//! Every kernel ends with `d`, `m`: the real head dims D, M, the row widths of q, k and of v,
//! O, G (below the program's tile width only for D, M = 16, 32 on the 64-wide program).

crate::kernel_params! {
    /// The argument structs of causal_chunked.cu's entry points.
    pub mod params;
    /// `cc_forward_h`: pass 1, the walk over chunks writing S⁰, z⁰ of each (`packed`: S⁰
    /// as 16-bit hi + lo with a power-of-two exponent per tile, for `cc_forward`).
    pub struct ForwardH => "cc_forward_h" {
        k: Ptr, v: Ptr, states: Ptr, split: bool, packed: bool, n: i32, num_chunks: i32,
        log2_decay: f32, chunk_decay: f32, map: i32, d: i32, m: i32,
    }
    /// `cc_seg_sums`: the segmented forward's pass 1, each segment's sum (fp32) into slot
    /// segment + 1 for `cc_seg_scan` (tile width of D ≤ 128 only).
    pub struct SegSums => "cc_seg_sums" {
        k: Ptr, v: Ptr, states: Ptr, seg_chunks: i32, n: i32, num_chunks: i32, log2_decay: f32,
        chunk_decay: f32, map: i32, d: i32, m: i32,
    }
    /// `cc_seg_sums_train`: `cc_seg_sums` with k̃ split hi + lo, for `cc_forward_seg_train`.
    pub struct SegSumsTrain => "cc_seg_sums_train" = SegSums;
    /// `cc_seg_scan`: the segments' sums into S⁰, z⁰ of each segment, in place.
    pub struct SegScan => "cc_seg_scan" {
        states: Ptr, num_segments: i32, seg_decay: f32,
    }
    /// `cc_forward_seg`: the segmented inference forward, O and den of a segment's chunks
    /// with the state carried in registers (tile width of D ≤ 128 only; `chunk_states` and
    /// `out_lo` unused: the parameter list is `cc_forward_seg_train`'s).
    pub struct ForwardSeg => "cc_forward_seg" {
        q: Ptr, k: Ptr, v: Ptr, states: Ptr, chunk_states: Ptr, out: Ptr, out_lo: Ptr,
        den_out: Ptr, seg_chunks: i32, n: i32, num_chunks: i32, log2_decay: f32,
        chunk_decay: f32, eps: f32, map: i32, d: i32, m: i32,
    }
    /// `cc_forward_seg_train`: the segmented forward a backward follows, k̃ split hi + lo in
    /// the state; also every chunk's S⁰, z⁰ (fp32, `chunk_states`) and O's rounding residue
    /// `out_lo`, which the backward keeps ([`cc_forward_h`](ForwardH) split +
    /// `cc_forward_train` in one pass).
    pub struct ForwardSegTrain => "cc_forward_seg_train" = ForwardSeg;
    /// `cc_backward_h`: the reverse walk writing R⁰, r⁰ of each chunk.
    pub struct BackwardH => "cc_backward_h" {
        q: Ptr, grad: Ptr, go_parts: Ptr, den: Ptr, states: Ptr, n: i32, num_chunks: i32,
        log2_decay: f32, chunk_decay: f32, map: i32, d: i32, m: i32,
    }
    /// `cc_forward`: pass 2, O and den per chunk (`out_lo` unused: the parameter list is
    /// `cc_forward_train`'s).
    pub struct Forward => "cc_forward" {
        q: Ptr, k: Ptr, v: Ptr, states: Ptr, out: Ptr, out_lo: Ptr, den_out: Ptr, n: i32,
        num_chunks: i32, log2_decay: f32, eps: f32, map: i32, d: i32, m: i32,
    }
    /// `cc_forward_train`: pass 2 of a forward the backward follows, on the fp32 states of the
    /// split walk (kept for the backward); also O's rounding residue `out_lo`.
    pub struct ForwardTrain => "cc_forward_train" = Forward;
    /// `cc_backward_go`: G·O partials per token and 64-wide slice of M, from O + `out_lo`.
    pub struct BackwardGo => "cc_backward_go" {
        grad: Ptr, out: Ptr, out_lo: Ptr, go: Ptr, n: i32, d: i32, m: i32,
    }
    /// `cc_backward_dq`: ∂Q per chunk.
    pub struct BackwardDq => "cc_backward_dq" {
        q: Ptr, k: Ptr, v: Ptr, grad: Ptr, go_parts: Ptr, den: Ptr, states: Ptr, out: Ptr,
        n: i32, num_chunks: i32, log2_decay: f32, map: i32, d: i32, m: i32,
    }
    /// `cc_backward_dk`: ∂K per chunk.
    pub struct BackwardDk => "cc_backward_dk" = BackwardDq;
    /// `cc_backward_dv`: ∂V per chunk.
    pub struct BackwardDv => "cc_backward_dv" {
        q: Ptr, k: Ptr, grad: Ptr, den: Ptr, states: Ptr, dv: Ptr, n: i32, num_chunks: i32,
        log2_decay: f32, map: i32, d: i32, m: i32,
    }
}
