// causal_chunked.cu — causal linear attention, chunkwise form on tensor cores (SPEC §3, §4, §6).
//
// Compile-checked with NVRTC + ptxas for sm_80 / sm_90 and run on the PTX simulator
// (linattn-ptxsim, with its memory, race, init and sync checkers) in the tests. The kernels of
// ae9b497 ran on an H100 on 2026-11-26 (bench-results/h100/2026-11-26); the gradient
// kernels' slice loop (one CTA per chunk over every output slice) has not yet.
//
// ---- math (per (b, h); q̃ = φ(q), k̃ = φ(k); λ = decay; chunk c holds tokens cL .. cL+L−1) ----
//   S_i = λ S_{i−1} + k̃_i v_iᵀ (C×M),  z_i = λ z_{i−1} + k̃_i,   O_i = q̃_iᵀS_i / (q̃_iᵀz_i + ε).
//   With S⁰_c the state after chunk c−1 and local indices i, j ∈ [0, L):
//     num_i = λ^{i+1} q̃_iᵀS⁰_c + Σ_{j≤i} λ^{i−j}(q̃_i·k̃_j) v_j        (inter + intra)
//     den_i = λ^{i+1} q̃_iᵀz⁰_c + Σ_{j≤i} λ^{i−j}(q̃_i·k̃_j) + ε
//     S⁰_{c+1} = λ^L S⁰_c + Σ_j λ^{L−1−j} k̃_j v_jᵀ     (z likewise)
//   Backward (SPEC §4), G = dL/dO, gn_i = G_i/den_i, gd_i = −(G_i·O_i)/den_i, with
//   A_ij = λ^{i−j}[j≤i](gn_i·v_j + gd_i) and P_ij = λ^{i−j}[j≤i](q̃_i·k̃_j):
//     dQ̃_c = A K̃_c + diag(λ^{i+1}) (gn S⁰ᵀ + gd z⁰ᵀ)
//     R⁰_c = state entering chunk c from the right: R⁰_c = Σ_{i ≥ (c+1)L} λ^{i−(c+1)L} q̃_i gn_iᵀ,
//            r⁰_c likewise with gd_i;  R⁰_{c−1} = λ^L R⁰_c + Σ_{i∈c} λ^{i} q̃_i gn_iᵀ
//     dK̃_c = Aᵀ Q̃_c + diag(λ^{L−j}) (V R⁰ᵀ + 1 r⁰ᵀ)
//     dV_c  = Pᵀ Gn_c + diag(λ^{L−j}) K̃ R⁰
//   then dQ = dQ̃ ⊙ φ'(Q), dK = dK̃ ⊙ φ'(K). Identity map: no normaliser (den ≡ 1, gd ≡ 0).
//
// ---- parallelisation: two passes (fla's chunk_h, then chunk_o; kernels/CHUNKED-DESIGN.md) ----
//   1. cc_forward_h  one CTA per (D/64 tile d, b·h, M/64 tile e) walks the chunks in order,
//                    the running 64×64 fp32 state slice S⁰ᵀ[e][d] in registers, and writes
//                    each chunk's entering state S⁰_c, z⁰_c once (Sᵀ[e][d], then z[d]); for
//                    cc_forward packed (16-bit hi + lo with a power of two per tile: the
//                    split cc_forward made itself, at the fp32 state's bytes).
//                                                               grid (D/64, B·H, M/64)
//   2. cc_forward    per chunk and 64-wide slice of M: O, den.  grid (NC, B·H, M/64)
//   Inference (D ≤ 128; the host's Segments, BS chunks per segment by the device's SMs)
//   runs segments instead, no state per chunk in memory (causal_chunked_segments.cuh):
//   cc_seg_sums (each segment's sum, all at once), cc_seg_scan (the sums into each
//   segment's S⁰; neither with one segment), cc_forward_seg (O, den of a segment's chunks,
//   the state carried in registers; at D = M = 128 on sm_90 one CTA of 2 × 8 warps per
//   segment takes both value slices, staging q̃, k̃ once: CC_SEG_SLICES).
//                                              grid (NC/BS − 1 | ⌈(D·M+D)/256⌉ | NC/BS, B·H, ·)
//   Training (a backward follows) at D ≤ 128 on sm_90 (the host's SegmentPlan::trains_on):
//   the segments' split forms, cc_seg_sums_train, cc_seg_scan, cc_forward_seg_train (k̃ hi +
//   lo in the state, see precision), which also writes every chunk's S⁰, z⁰ (fp32) and O's
//   rounding residue out_lo; else (D = 256, D = 128 with M ≤ 64, before sm_90,
//   LINATTN_CC_SEGMENTS=off)
//   pass 1 split writing fp32, then cc_forward_train, O and den on those states plus
//   out_lo. Either way the states and out_lo are kept for the backward (the states once,
//   never per token).
//   D, M here are the program's tile widths (CC_D, CC_M: 16 and 32 pad to 64, see limits).
//   The walk is sequential in NC = N/64 over B·H·D·M/4096 CTAs (128 at B·H = 32, D = M =
//   128: about one per H100 SM); each chunk's k, v are fetched a chunk ahead, so the walk
//   runs at the rate it can write states. The outputs pass stays parallel over every chunk.
//   The chunk-state buffer: N/L · C·(M+1) fp32 per (b, h) (O(N/L·C·M)), e.g. 4096 chunks ·
//   64·65·4 B = 68 MB per head at D = M = 64, written once and read once by cc_forward (the
//   three-pass design before it, per-chunk ΔS + an exclusive scan, wrote it twice and read
//   it twice).
//   Backward, on the training forward's kept S⁰, z⁰: for normalised maps cc_backward_go,
//   G_i·O_i from O + out_lo (M/64 partials per token, one per slice: N·M/64 fp32 per head);
//   cc_backward_h, the walk from the last chunk to the first (R⁰, r⁰: another N/L·C·(M+1)
//   fp32), then cc_backward_dq, cc_backward_dk and cc_backward_dv (grid (NC, B·H, 1): one
//   CTA per chunk loops over the 64-wide slices of its output, the score tile computed and
//   q, k, v, G read once per chunk; at shapes with fewer than 1024 chunk-CTAs grid z = the
//   output's slices, one each, for parallelism). Per-token saved data: den (N fp32 per head), O and out_lo
//   (N·M 16-bit each per head); per chunk the states. Until 2026-11-26 the backward
//   recomputed S⁰ (the walk again) and O (the forward again, for G·O): 1.1 ms of the model's
//   3.5 ms at (2, 16384, 16, 128), for N·M·2 + N/L·C·(M+1)·4 bytes per head kept instead.
//
// ---- warp / fragment mapping ----
//   Block = 128 threads = 4 warps; warp w owns rows 16w .. 16w+15 of the 64-row chunk (rows =
//   tokens i for O and dQ, tokens j for dK and dV, feature/value index for the state passes).
//   mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}: with g = lane>>2, t = lane&3 (PTX ISA
//   "Matrix Fragments for mma.m16n8k16 with floating point type"):
//     A (16×16): a0 = (g, 2t..2t+1), a1 = (g+8, 2t..), a2 = (g, 2t+8..), a3 = (g+8, 2t+8..)
//     B (16×8):  b0 = (k 2t..2t+1, n g), b1 = (k 2t+8..2t+9, n g)
//     C (16×8):  c0,c1 = (g, 2t..2t+1), c2,c3 = (g+8, 2t..2t+1)
//   so every operand lives in shared memory "k-contiguous": A as [m][k], B as [n][k], and a
//   pair of k is one 32-bit load. Row strides are padded by 8 elements (16-bit: stride/2 ≡ 4
//   mod 32 words; fp32: stride ≡ 8 mod 32) so the 32 lanes of a fragment load hit 32 banks.
//   A C fragment pair of n-tiles (2s, 2s+1) is exactly the A fragment of k-step s, so P and A
//   go from accumulators to the next mma without shared memory.
//   Loads into transposed (token-contiguous) tiles read global memory along its contiguous
//   dim, 8 lanes per 32-byte sector, and transpose while storing to shared memory; since the
//   same padding puts rows f and f+8 (16-bit) or r and r+4 (fp32) on the same banks, half the
//   lanes store their two rows in the opposite order (cc_tile_cols_block, cc_state32_put): one
//   padding serves the fragment loads and conflict-free stores. Outputs leave the C fragment
//   through one quad shuffle (cc_quad_swap) as 8-byte accesses filling whole sectors; they and
//   cc_walk_fetch assume 8-byte aligned tensors (allocations are 256-byte aligned).
//
// ---- precision ----
//   Q, K, V, O, dO, gradients: fp16/bf16 in memory. φ, φ', decay weights, every accumulation,
//   the chunk states S, z, R, r, den, and G·O: fp32 (elu+1's exp as ex2.approx.ftz:
//   cc_exp_nonpositive). Tensor-core operands read from memory are 16-bit; v and G are exact
//   in storage precision, q̃ = φ(q) and k̃ = φ(k) are not, and where they feed a term that
//   cancels they are split x = hi + lo (both 16-bit, ~16 bits of mantissa in bf16, ~22 in
//   fp16, one mma per part): k̃ in the backward's S⁰, z⁰
//   (cc_forward_h split = 1) and in dQ's intra term, q̃ in R⁰, r⁰ (cc_backward_h) and in dK's
//   intra term. In the forward q̃, k̃ are rounded once after φ (O's error is its storage).
//   Range: no operand holds an unscaled 1/den or λ^i/den. Products whose per-token weight
//   runs along a row of the A operand (A, Aᵀ, Pᵀ/den in dQ, dK, dV) get one power-of-two scale
//   per row before their hi + lo split (cc_row_scale, row max below 2^14), undone on the fp32
//   result; the weighted q̃ of cc_backward_h, whose weight λ^i/den_i runs along the k dim, gets
//   one per feature row (cc_walk_put col_unscale). So den ~ N at long sequences (λ^i/den_i
//   was an fp16 subnormal by N ~ 10^4: dK 3.9e-3 at N = 16384) and den = ε (relu with q̃ = 0
//   or no positive key yet: 1/ε overflowed fp16 to inf, NaN dQ and dK) both keep the full
//   16-bit mantissa; dK̃ ~ 1/ε there is finite in fp32 and φ'(k) = 0 zeroes it.
//   The segmented forward carries S in fp32 registers (the mma's accumulate ΔS into λ^L·S)
//   and splits it per chunk with one power of two per row e of Sᵀ (per output column), z
//   with one of its own (den's q̃·z through the tensor cores as an extra n-tile).
//   The fp32 states are NOT rounded to 16 bits: for the mma each state tile is scaled by a
//   power of two 2^s (max |x·2^s| < 2^14) and split x·2^s = hi + lo, two mma's, product
//   rescaled by 2^−s: state magnitude (which grows with N; z overflows fp16 past 65504) costs
//   neither range nor accuracy. cc_forward reads that split as the walk wrote it (one 2^s
//   per 64×64 tile, where it took one per 64 × D slice), the gradient kernels split the fp32
//   state themselves. The intra-chunk matrices built in registers (P in the
//   forward, A in dQ and dK, Pᵀ/den in dV) are split hi + lo as well: those terms cancel
//   against the inter-chunk ones (Σ_j A_ij ≈ 0 since k̃ ≈ 1 + elu(k), and v_j − O_i ≈ 0 for
//   the first tokens), so their 16-bit rounding, not storage, would dominate bf16 dQ.
//   gd_i = −G_i·O_i/den_i takes O as stored + residue (cc_forward_train's out_lo: ~16 bits
//   bf16, ~22 fp16, cc_backward_go), never the stored 16-bit O alone: z⁰ gd and r carry it
//   into dQ and dK, where they cancel against the S gn terms.
//   r and the denominators' inter term go through CUDA-core fp32 dot products, z through an
//   all-ones mma on the k̃ operand of S (fp32 accumulation).
//   Measured on the simulator against the f64 oracle (B = H = 1, D = M = 64, elu+1, RMS
//   error / RMS of each tensor): bf16 N = 1000 O 1.58e-3, dQ 1.75e-3, dK 1.67e-3, dV 1.68e-3,
//   where storing the exact result in bf16 alone costs ~1.65e-3 (before: dQ 3.9e-3, dK
//   2.4e-3); fp16 N = 16384 O, dQ, dK, dV 2.1e-4 .. 2.3e-4 (before: dK 3.9e-3, dV 7.6e-4).
//   fp16 limit: intra-chunk scores q̃·k̃ must stay below 65504.

// ---- limits ----
//   Head dims D = C and M ∈ {16, 32, 64, 128, 256}, any combination. Programs are compiled
//   for tile widths CC_D, CC_M ∈ {64, 128, 256} (multiples of the 64-wide tile); the real
//   row widths d, m are kernel arguments (the global row strides). D, M = 16, 32 run on the
//   64-wide program: features ≥ d are zero after φ (φ(0) = 1 for elu+1), value columns ≥ m
//   zero, and every store of O, dQ, dK, dV stops at the row's width. The 128 and 256
//   programs need d = CC_D, m = CC_M and fold the width in at compile time (cc_width), so
//   only the 64-wide program pays the column guards. The chunk states stay in the padded
//   layout (CC_STATE_STRIDE). Any N ≥ 1: the tail chunk is zero-padded on load and masked
//   on store. B·H ≤ 65535 (grid.y). Chunk L = 64.
//   Dynamic shared memory ≤ 118,016 B per CTA (cc_backward_dq, _dk at D = M = 256; ≤ 69,888 B
//   at D, M ≤ 128: 44,544 B in cc_forward, 52,736 B in cc_forward_train, ≤ 52,224 B in
//   cc_backward_dv, ≤ 69,888 B in dQ and dK (their parked scores), 3–4 CTAs per SM; 27,648 B
//   in the state walks) plus ≤ 2,560 B static:
//   the host opts in above 48 KB and refuses a device whose
//   opt-in maximum is below a launch's need (sm_80: 163 KB, sm_90: 227 KB fit every
//   program; sm_86/89's 99 KB fit D, M ≤ 128 only).
//   Storage (LA_STORAGE) and CC_D, CC_M are defines; the map (codes of LA_MAP), decay
//   (log2 λ, 0 = no decay; the walks also take λ^L) and the widths are kernel arguments, so
//   one program per (precision, CC_D, CC_M).

#ifndef CC_D
#define CC_D 64
#endif
#ifndef CC_M
#define CC_M 64
#endif

#if LA_STORAGE != LA_STORAGE_F16 && LA_STORAGE != LA_STORAGE_BF16
#error "causal_chunked needs 16-bit storage (LA_STORAGE 1 = fp16 or 2 = bf16)"
#endif
#if (CC_D != 64 && CC_D != 128 && CC_D != 256) || (CC_M != 64 && CC_M != 128 && CC_M != 256)
#error "causal_chunked is compiled for tile widths CC_D, CC_M in {64, 128, 256}"
#endif

#define CC_L 64         // chunk length (tokens)
#define CC_TILE 64      // output slice width of M (forward, dV) or of C (dQ, dK, R state)
#define CC_THREADS 128  // 4 warps × 16 rows = one chunk
#define CC_PAD 8
#define CC_LDT (CC_L + CC_PAD)    // stride of token-contiguous (transposed) 16-bit tiles
#define CC_LDD (CC_D + CC_PAD)    // stride of D-contiguous rows
#define CC_LDM (CC_M + CC_PAD)    // stride of M-contiguous rows
#define CC_DT (CC_D / 64)  // 64-wide tiles of D (of C): 1, 2 or 4
#define CC_MT (CC_M / 64)  // of M
// Words per chunk state: the D×M matrix, the D vector z (fp32), then CC_EXP_WORDS: in the
// packed form (cc_forward_h packed ≠ 0, read by cc_forward) the power-of-two exponent of each
// 64×64 tile (cc_state_exp, CC_DT·CC_MT ≤ 16), unused in the fp32 form. A multiple of 8 keeps
// every chunk's base on a 32-byte sector (with 4, every other chunk's rows straddled
// sectors: +25% sectors in the walks).
#define CC_EXP_WORDS ((CC_DT * CC_MT + 7) / 8 * 8)
#define CC_STATE_STRIDE ((la_index_t)CC_D * CC_M + CC_D + CC_EXP_WORDS)
// The packed form: matrix element (e, d) of tile (e / 64, d / 64) is x·2^s = hi + lo, both
// 16-bit, s = cc_split_exp(max |x| over the tile) (the split cc_mma_split makes of an fp32
// tile). Row e holds D/4 16-byte records; record 4ks + t of a row is the B fragment pair
// lane t of an m16n8k16 mma reads at k-step ks (d = 16ks + 2t, +1 and 16ks + 2t + 8, +9):
// {hi(d 2t, 2t+1), hi(2t+8, 2t+9), lo(2t, 2t+1), lo(2t+8, 2t+9)}.
__device__ __forceinline__ int* cc_state_exp(float* state) { return (int*)(state + CC_D * CC_M + CC_D); }
__device__ __forceinline__ const int* cc_state_exp(const float* state) {
    return (const int*)(state + CC_D * CC_M + CC_D);
}

typedef unsigned int cc_u32;
typedef unsigned short cc_u16;

// ---- the program's parts (NVRTC headers; the host passes them with the source) ----
#include "causal_chunked_common.cuh"    // shared helpers: packing, split, mma, stores
#include "causal_chunked_states.cuh"    // pass 1: the state walks
#include "causal_chunked_outputs.cuh"   // pass 2: O and den per chunk
#include "causal_chunked_segments.cuh"  // the segmented forward
#include "causal_chunked_seg_sums.cuh"  // its pass 1: the segments' sums and their scan
#include "causal_chunked_backward.cuh"  // the backward
