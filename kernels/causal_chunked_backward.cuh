// causal_chunked_backward.cuh — the memory-efficient backward of the chunked form:
// cc_backward_go, cc_backward_h (the reverse walk), cc_backward_dq, _dk, _dv. Part of
// causal_chunked.cu's program (see its header for the math and the grid); not compiled alone.
#pragma once

// Backward pre-pass (normalised maps): go[token · CC_MT + slice] = G·O over the token's 64-wide
// slice of M, from the forward's O and its residue (cc_forward_train: O + out_lo carries ~16
// bits in bf16, ~22 in fp16, where O alone carries 8 or 11), for gd = −G·O/den
// (cc_row_grad_terms). Summed in fp32 in column order within 8-column groups, then the groups
// by a butterfly. grid (⌈N/32⌉, B·H, M/64), CC_GO_THREADS threads: 8 lanes per token, each
// one 16-byte load of G, O and out_lo (columns past m read nothing). Limits: the file's.
#define CC_GO_THREADS 256
#define CC_GO_TOKENS (CC_GO_THREADS / 8)
extern "C" __global__ void __launch_bounds__(CC_GO_THREADS)
cc_backward_go(const la_storage_t* __restrict__ grad, const la_storage_t* __restrict__ out,
               const la_storage_t* __restrict__ out_lo, float* __restrict__ go, int n, int d, int m) {
    const int tok = blockIdx.x * CC_GO_TOKENS + threadIdx.x / 8, part = threadIdx.x % 8;
    const int mw = cc_width<CC_M>(m), col = blockIdx.z * CC_TILE + 8 * part;
    const la_index_t row = (la_index_t)blockIdx.y * n + tok;
    float s = 0.0f;
    if (tok < n && col < mw) {
        const la_index_t at = row * mw + col;
        const uint4 g = *(const uint4*)(grad + at), o = *(const uint4*)(out + at);
        const uint4 r = *(const uint4*)(out_lo + at);
        const cc_u32 gw[4] = {g.x, g.y, g.z, g.w}, ow[4] = {o.x, o.y, o.z, o.w}, rw[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
        for (int w = 0; w < 4; ++w) {
            s += cc_lo(gw[w]) * (cc_lo(ow[w]) + cc_lo(rw[w]));
            s += cc_hi(gw[w]) * (cc_hi(ow[w]) + cc_hi(rw[w]));
        }
    }
#pragma unroll
    for (int x = 1; x < 8; x <<= 1) s += __shfl_xor_sync(LA_FULL_MASK, s, x);
    if (part == 0 && tok < n) go[row * CC_MT + blockIdx.z] = s;
}

// ---- backward: gradients ----------------------------------------------------------------------

// Stores acc ⊙ φ'(x) (map `chain_map`; identity: acc) for the warp's 16 rows × 64 columns [c0, c0+64) of a [N][cols] head;
// only the first `valid_cols` of those columns exist (cc_slice_cols).
// wide: 8-byte accesses through cc_quad_swap (full sectors); otherwise 4-byte, fragment layout.
__device__ __forceinline__ void cc_store_grad(la_storage_t* __restrict__ dst, const la_storage_t* __restrict__ x,
                                              const float (&acc)[CC_TILE / 8][4], la_index_t head_row0,
                                              int i_lo, int n, int c0, int cols, int valid_cols, int chain_map,
                                              bool wide = true) {
    // 4 columns (8 bytes) per lane in global memory, the fragment layout in registers
    // (cc_quad_swap, both ways); the shuffles run on every lane, the accesses on rows < n.
    const int t = threadIdx.x & 3;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int p = 0; p < CC_TILE / 16; ++p) {
            if (p * 16 >= valid_cols) continue;  // columns past the row's width (warp-uniform)
            const int i = i_lo + 8 * h;
            const bool valid = i < n;
            const int c = c0 + p * 16 + cc_quad_col(t);
            float a[4] = {acc[2 * p][2 * h], acc[2 * p][2 * h + 1], acc[2 * p + 1][2 * h],
                          acc[2 * p + 1][2 * h + 1]};
            if (chain_map != LA_MAP_IDENTITY) {
                uint2 xv = make_uint2(0u, 0u);
                if (valid) xv = *(const uint2*)(x + (head_row0 + i) * cols + c);
                cc_quad_swap(xv.x, xv.y);
                a[0] *= cc_phi_grad(chain_map, cc_lo(xv.x));
                a[1] *= cc_phi_grad(chain_map, cc_hi(xv.x));
                a[2] *= cc_phi_grad(chain_map, cc_lo(xv.y));
                a[3] *= cc_phi_grad(chain_map, cc_hi(xv.y));
            }
            cc_u32 u = cc_pack(a[0], a[1]), v = cc_pack(a[2], a[3]);
            if (!wide) {  // fragment layout: 4-byte stores, half of each sector
                if (valid) {
                    *(cc_u32*)(dst + (head_row0 + i) * cols + c0 + p * 16 + 2 * t) = u;
                    *(cc_u32*)(dst + (head_row0 + i) * cols + c0 + p * 16 + 8 + 2 * t) = v;
                }
                continue;
            }
            cc_quad_swap(u, v);
            if (valid) *(uint2*)(dst + (head_row0 + i) * cols + c) = make_uint2(u, v);
        }
    }
}

// The warp's split score fragments (cc_acc_to_a_split of each k-step the causal mask leaves)
// parked in shared memory while the CTA walks its output slices: `park` holds 8 16-byte
// records per thread, record (2·ks + part)·CC_THREADS + thread, so a warp's 32 records of one
// store or load are 512 contiguous bytes (4 wavefronts, no conflict). Only the thread that
// parks a fragment reads it back: no barrier.
template <bool KEYS>
__device__ __forceinline__ void cc_scores_park(uint4* park, const float (&sc)[CC_L / 8][4]) {
    const int warp = threadIdx.x >> 5;
#pragma unroll
    for (int ks = 0; ks < CC_L / 16; ++ks) {
        if (KEYS ? ks < warp : ks > warp) continue;
        cc_u32 hi[4], lo[4];
        cc_acc_to_a_split(hi, lo, sc, ks);
        park[(2 * ks) * CC_THREADS + threadIdx.x] = make_uint4(hi[0], hi[1], hi[2], hi[3]);
        park[(2 * ks + 1) * CC_THREADS + threadIdx.x] = make_uint4(lo[0], lo[1], lo[2], lo[3]);
    }
}

// acc += A·B over the k-steps a causal mask leaves (k-step ks of tokens ≤ the warp's rows for
// queries, ≥ for keys), A the warp's 16 rows of the score tile `sc`, split hi + lo (or, with
// PARKED, those fragments as cc_scores_park left them in `park`), B a 16-bit [n][k] tile (stride
// CC_LDT). Terms: hi·B always, lo·B when A_LO, and hi·B_lo when B_LO (dQ: both operands
// split, 3 mma's). With B_LO both tiles are addressed through one offset, without through
// pointer steps: the code each gradient compiled to before they shared this.
template <bool KEYS, bool A_LO, bool B_LO, bool PARKED>
__device__ __forceinline__ void cc_intra_mma(float (&acc)[CC_TILE / 8][4], const float (&sc)[CC_L / 8][4],
                                             const uint4* park, const cc_u16* b, const cc_u16* b_lo) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int ks = 0; ks < CC_L / 16; ++ks) {
        if (KEYS ? ks < warp : ks > warp) continue;
        cc_u32 a_hi[4], a_lo[4];
        if constexpr (PARKED) {
            const uint4 h = park[(2 * ks) * CC_THREADS + threadIdx.x];
            a_hi[0] = h.x, a_hi[1] = h.y, a_hi[2] = h.z, a_hi[3] = h.w;
            if constexpr (A_LO) {
                const uint4 l = park[(2 * ks + 1) * CC_THREADS + threadIdx.x];
                a_lo[0] = l.x, a_lo[1] = l.y, a_lo[2] = l.z, a_lo[3] = l.w;
            }
        } else {
            cc_acc_to_a_split(a_hi, a_lo, sc, ks);
        }
#pragma unroll
        for (int nt = 0; nt < CC_TILE / 8; ++nt) {
            const cc_u16 *bp, *bp_lo = nullptr;
            if constexpr (B_LO) {
                const int off = (nt * 8 + g) * CC_LDT + ks * 16 + 2 * t;
                bp = b + off;
                bp_lo = b_lo + off;
            } else {
                bp = b + (nt * 8 + g) * CC_LDT + ks * 16 + 2 * t;
            }
            const cc_u32 b0 = *(const cc_u32*)bp, b1 = *(const cc_u32*)(bp + 8);
            cc_mma(acc[nt], a_hi, b0, b1);
            if constexpr (A_LO) cc_mma(acc[nt], a_lo, b0, b1);
            if constexpr (B_LO) cc_mma(acc[nt], a_hi, *(const cc_u32*)bp_lo, *(const cc_u32*)(bp_lo + 8));
        }
    }
}

// The three gradient kernels share one skeleton: per chunk, a 64×64 score tile (intra-chunk,
// masked, decayed, per-row scaled for its hi + lo split), kept (dV: registers; dQ, dK: parked
// in shared memory) while the CTA walks the 64-wide slices of its output; per slice an inter
// term (the warp's rows times the slice of the chunk's fp32 state, split), the intra term
// (the score tile times a transposed 16-bit tile), then the chain rule and the store. Per
// gradient:
//   what  rows (A)  scores      state  intra B  weight of row r (inter)  output slice
//   dQ    G_i       A = G vᵀ    S⁰ᵀ    k̃ (split)  λ^{i+1}/den_i           D
//   dK    v_j       Aᵀ = v Gᵀ   R⁰ᵀ    q̃ (split)  λ^{L−j}                 D
//   dV    k̃_j       Pᵀ = k̃ q̃ᵀ   R⁰     G          λ^{L−j}                 M
// The header of each kernel gives its math and precision. Queries own rows i (causal: keys
// j ≤ i), keys own rows j (queries i ≥ j).
// Shared memory: the rows tile, then one region that holds the score columns (until the
// scores are done), then per slice the fp32 state slice for the inter product and, once every
// warp is done with it, the transposed tile(s) (their loads in flight during the inter
// product): at D = M = 128 52 KB (dV) and, with the parked scores, 68 KB (dQ, dK), where the
// state beside the others took 78–89 KB: 3 CTAs fit an SM, not 2 (CC_GRAD_MIN_CTAS).
#define CC_GRAD_Q 0
#define CC_GRAD_K 1
#define CC_GRAD_V 2
// dQ and dK also park their split scores (cc_scores_park: 16 KB) after the vector slice.
#define CC_SCORES_PARK (CC_L * CC_L * 2 * 2)
// dQ and dK take one layout: the rows, the region with two transposed tiles, the vector slice
// and the parked scores.
#define CC_QK_SMEM (CC_L * CC_LDM * 2 + CC_STATE_REGION(CC_LDM, 2) + CC_TILE * 4 + CC_SCORES_PARK)
#define CC_DV_SMEM (CC_L * CC_LDD * 2 + CC_STATE_REGION(CC_LDD, 1))
// Minimum CTAs per SM in the launch bounds (registers ≤ 65536 / (128 · CTAS)): 3 (168
// registers) for dQ and dK at k dims ≤ 128 (at 128 ptxas spilled 20–240 B: their scores
// take G·O terms and a second tile; dV: CC_DV_MIN_CTAS);
// 1 at a 256-wide k dim (~101 KB: 2 fit; without a minimum ptxas (sm_80) spilled in dV).
#define CC_GRAD_MIN_CTAS(WIDTH) ((WIDTH) == 256 ? 1 : 3)

template <int WHAT>
__device__ __forceinline__ void
cc_backward_body(const la_storage_t* __restrict__ q, const la_storage_t* __restrict__ k,
                 const la_storage_t* __restrict__ v, const la_storage_t* __restrict__ grad,
                 const float* __restrict__ go_parts, const float* __restrict__ den,
                 const float* __restrict__ states, la_storage_t* __restrict__ out, int n,
                 int num_chunks, float log2_decay, int map, int d, int m) {
    constexpr bool DQ = WHAT == CC_GRAD_Q, DK = WHAT == CC_GRAD_K, DV = WHAT == CC_GRAD_V;
    constexpr int WIDTH = DV ? CC_D : CC_M;  // k dim of the scores and of the inter product
    constexpr int LD = DV ? CC_LDD : CC_LDM;
    constexpr int OUT = DV ? CC_M : CC_D;    // the output's tile width, 64 columns per slice
    // Row widths (cc_width): q, k and dQ, dK; v, G and dV. `width`: the score operands'.
    const int dw = cc_width<CC_D>(d), mw = cc_width<CC_M>(m), width = DV ? dw : mw;
    extern __shared__ __align__(16) unsigned char cc_smem[];
    cc_u16* s_rows = (cc_u16*)cc_smem;                 // [64][LD]   rows: G (dQ), v (dK), k̃ (dV)
    unsigned char* region = cc_smem + CC_L * LD * 2;
    cc_u16* s_cols = (cc_u16*)region;                  // [64][LD]   score columns: v, G, q̃; then
    float* s_state = (float*)region;                   // [64][LD] fp32, per slice: S⁰ (S[d][e]), R⁰, R⁰ᵀ; then
    cc_u16* s_t = s_cols + CC_L * LD;                  // [64][LDT]  intra B, transposed: k̃, q̃, G slice
    cc_u16* s_t_lo = s_t + CC_TILE * CC_LDT;           // [64][LDT]  dQ, dK: k̃'s, q̃'s rounding residue (lo)
    float* s_vec = (float*)(region + CC_STATE_REGION(LD, DV ? 1 : 2));  // [64] z⁰ (dQ), r⁰ (dK) slice
    // dQ, dK: the split scores between slices (in registers beside a slice's state loads and
    // the inter product, ptxas spilled 52–200 B at their 168 registers); dV keeps them in
    // registers, spill-free at its launch bounds (CC_DV_MIN_CTAS), without 16 KB more.
    constexpr bool PARK = !DV;
    uint4* s_park = PARK ? (uint4*)(s_vec + CC_TILE) : nullptr;  // CC_SCORES_PARK bytes
    __shared__ float s_den_inv[CC_L], s_neg_go[CC_L];  // dV: no s_neg_go
    __shared__ float s_warp_max[CC_THREADS / 32];

    const int chunk = blockIdx.x, bh = blockIdx.y;
    const int tok0 = chunk * CC_L;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int row0 = warp * 16;  // this warp's first row: queries i (dQ), keys j (dK, dV)
    const la_index_t head_row0 = (la_index_t)bh * n;
    const float* state = states + ((la_index_t)bh * num_chunks + chunk) * CC_STATE_STRIDE;
    const la_storage_t* rows_src = DQ ? grad : (DK ? v : k);
    const la_storage_t* cols_src = DQ ? v : (DK ? grad : q);
    const la_storage_t* t_src = DQ ? k : (DK ? q : grad);
    const int rows_map = DV ? map : LA_MAP_IDENTITY, t_map = DV ? LA_MAP_IDENTITY : map;
    // At a 256-wide k dim the row tiles come in two halves (whole: 128 registers of loads).
    constexpr int TILE_PARTS = WIDTH == 256 ? 2 : 1, TILE_LOADS = CC_ROWS_LOADS(WIDTH) / TILE_PARTS;
    // Global Sᵀ[e][d] → s_state[d][e] (dQ), R[d][e] as it is (dK), R[d][e] → s_state[e][d] (dV).
    // Loads of the state in flight at a time: 16 (dV 8: with its scores live across the
    // slices, 16 spilled 4 B at a 4-CTA bound, where 8 did not); at a 256-wide k dim what
    // leaves ptxas without spills at 255 registers (dV 8; dQ 32; 16 spilled 4–12 B on sm_80
    // or sm_90).
    constexpr int STATE_ALL = cc_state32_loads<WIDTH, !DK>();
    constexpr int STATE_MAX = WIDTH == 256 ? (DQ ? 32 : 8) : (DV ? 8 : 16);
    constexpr int STATE_LOADS = STATE_ALL > STATE_MAX ? STATE_MAX : STATE_ALL;

    // The rows and the score columns, both loads in flight at once (one DRAM latency), with
    // the per-row terms; the columns into the region the state slices take after the scores.
    {
        uint4 raw_rows[TILE_LOADS], raw_cols[TILE_LOADS];
#pragma unroll
        for (int part = 0; part < TILE_PARTS; ++part) {
            cc_rows_fetch<WIDTH, TILE_LOADS>(raw_rows, rows_src, head_row0, tok0, n, width, part * TILE_LOADS);
            cc_rows_fetch<WIDTH, TILE_LOADS>(raw_cols, cols_src, head_row0, tok0, n, width, part * TILE_LOADS);
            if (part == 0) {
                if constexpr (DV) {
                    for (int r = threadIdx.x; r < CC_L; r += CC_THREADS) {
                        const bool valid = tok0 + r < n;
                        s_den_inv[r] =
                            !valid ? 0.0f : (cc_normalised(map) ? 1.0f / den[head_row0 + tok0 + r] : 1.0f);
                    }
                } else {
                    cc_row_grad_terms(s_den_inv, s_neg_go, go_parts, den, head_row0, tok0, n, map);
                }
            }
            cc_rows_put<WIDTH, TILE_LOADS>(s_rows, LD, raw_rows, tok0, n, width, rows_map, part * TILE_LOADS);
            cc_rows_put<WIDTH, TILE_LOADS>(s_cols, LD, raw_cols, tok0, n, width, rows_map, part * TILE_LOADS);
        }
    }
    __syncthreads();  // rows, columns and the row terms

    float go_lo = 0.0f, go_hi = 0.0f, inv_lo = 0.0f, inv_hi = 0.0f;  // dQ: of the warp's rows
    if constexpr (DQ) {
        go_lo = s_neg_go[row0 + g], go_hi = s_neg_go[row0 + g + 8];
        inv_lo = s_den_inv[row0 + g], inv_hi = s_den_inv[row0 + g + 8];
    }

    // Scores of the rows against the chunk's other tokens, once for every output slice: only
    // n-tiles on the causal side of the warp's rows can be unmasked; masked, decayed λ^{i−j},
    // weighted 1/den_i in fp32.
    const cc_u16* a_rows = s_rows + row0 * LD;
    float sc[CC_L / 8][4];
    cc_zero(sc);
    cc_mma_ss<CC_L / 8, WIDTH / 16, CC_KS_UNROLL(WIDTH / 16)>(sc, a_rows, LD, s_cols, LD, DQ ? 0 : 2 * warp,
                                                              DQ ? 2 * (warp + 1) : CC_L / 8);
#pragma unroll
    for (int nt = 0; nt < CC_L / 8; ++nt)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
            const int own = row0 + g + (c >> 1) * 8, other = nt * 8 + 2 * t + (c & 1);
            const int i = DQ ? own : other, j = DQ ? other : own;  // query i, key j
            if constexpr (DQ) {  // A = (G vᵀ − G·O)/den
                const float go = (c >> 1) ? go_hi : go_lo, inv = (c >> 1) ? inv_hi : inv_lo;
                sc[nt][c] = (j <= i && tok0 + j < n)
                                ? (sc[nt][c] + go) * inv * cc_pow(log2_decay, (float)(i - j)) : 0.0f;
            } else if constexpr (DK) {  // Aᵀ[j][i] = (v_j·G_i − G_i·O_i)/den_i
                sc[nt][c] = (i >= j && tok0 + i < n)
                                ? (sc[nt][c] + s_neg_go[i]) * s_den_inv[i] * cc_pow(log2_decay, (float)(i - j))
                                : 0.0f;
            } else {  // Pᵀ[j][i] = k̃_j·q̃_i / den_i (den_inv is 0 past n)
                sc[nt][c] = i >= j ? sc[nt][c] * s_den_inv[i] * cc_pow(log2_decay, (float)(i - j)) : 0.0f;
            }
        }
    float s_lo, s_hi, u_lo, u_hi;  // rows scaled by s (powers of two) for the split; u = 1/s
    cc_row_scale(sc, s_lo, s_hi, u_lo, u_hi);
    if constexpr (PARK) cc_scores_park<!DQ>(s_park, sc);

    // The CTA's 64-wide output slices in turn (every slice with grid z = 1; slice z of z =
    // OUT/64 at shapes with too few chunks to fill the GPU, the host's choice), the scores
    // kept (dV: registers; dQ, dK: parked): the inter term (the rows times the slice's fp32
    // state, split), weighted per row, plus the intra term (the scores times the slice's
    // transposed tile). Not unrolled: one copy of the slice's code.
    // One slice (OUT = 64): a loop of one trip at compile time.
    const int z0 = OUT == CC_TILE ? 0 : blockIdx.z, zn = OUT == CC_TILE ? 1 : gridDim.z;
#pragma unroll 1
    for (int c0 = z0 * CC_TILE; c0 < OUT; c0 += zn * CC_TILE) {
        // The output slice's columns that exist: of D (dQ, dK) or M (dV).
        const int out_cols = DV ? cc_slice_cols<CC_M>(mw, c0) : cc_slice_cols<CC_D>(dw, c0);
        __syncthreads();  // every read of the region (the score columns or the last slice's
                          // transposed tile), of s_vec and of s_warp_max is done
        float max_abs;
        {
            cc_state32_vec_t<!DK> raw_s[STATE_LOADS];
            cc_state32_fetch<WIDTH, !DK, STATE_LOADS, unsigned>(raw_s, state, c0, DQ ? CC_D : CC_M, 0);
            if (!DV && threadIdx.x < CC_TILE) s_vec[threadIdx.x] = state[(la_index_t)CC_D * CC_M + c0 + threadIdx.x];
            max_abs = cc_state32_put<WIDTH, !DK, STATE_LOADS, unsigned>(s_state, LD, raw_s, 0);
#pragma unroll
            for (int s0 = STATE_LOADS; s0 < STATE_ALL; s0 += STATE_LOADS) {
                cc_state32_fetch<WIDTH, !DK, STATE_LOADS, unsigned>(raw_s, state, c0, DQ ? CC_D : CC_M, s0);
                max_abs = fmaxf(max_abs, cc_state32_put<WIDTH, !DK, STATE_LOADS, unsigned>(s_state, LD, raw_s, s0));
            }
        }
        cc_block_max_put(max_abs, s_warp_max);
        __syncthreads();  // the state slice, its vector and the warp maxima
        const float scale = cc_split_scale(cc_block_max_get(s_warp_max));

        // The transposed tile, in flight during the inter product; after it (T_LATE) at a
        // 256-wide k dim (in flight during it, ptxas spilled at 255 registers).
        constexpr bool T_LATE = WIDTH == 256;
        cc_u32 raw_t[2 * (CC_L / 8)];
        if (!T_LATE) cc_walk_fetch<CC_L / 8>(raw_t, t_src, head_row0, tok0, n, c0, DV ? mw : dw, out_cols);
        float acc[CC_TILE / 8][4];
        cc_zero(acc);
        // k-steps not unrolled: unrolled, ptxas hoisted their state loads and spilled at the
        // launch bounds' register cap.
        cc_mma_split<CC_TILE / 8, WIDTH / 16, 1>(acc, a_rows, LD, s_state, LD, scale);
        if (T_LATE) cc_walk_fetch<CC_L / 8>(raw_t, t_src, head_row0, tok0, n, c0, DV ? mw : dw, out_cols);
        __syncthreads();  // every warp's reads of the state are done: the region takes the tile
        cc_walk_put<!DV, false, false, CC_L / 8>(s_t, DV ? nullptr : s_t_lo, raw_t, tok0, n, out_cols, t_map,
                                                 nullptr, nullptr, nullptr);
        __syncthreads();

        // The inter term weighted per row (with the row's split scale), plus the vector term.
        const float inv_scale = 1.0f / scale;
        float w_lo, w_hi;
        if constexpr (DQ) {  // λ^{i+1}(G_i S⁰ᵀ − (G_i·O_i) z⁰)/den_i
            w_lo = cc_pow(log2_decay, (float)(row0 + g + 1)) * inv_lo * s_lo;
            w_hi = cc_pow(log2_decay, (float)(row0 + g + 9)) * inv_hi * s_hi;
        } else if constexpr (DK) {  // λ^{L−j}(v_j R⁰ᵀ + r⁰)
            w_lo = cc_pow(log2_decay, (float)(CC_L - (row0 + g))) * s_lo;
            w_hi = cc_pow(log2_decay, (float)(CC_L - (row0 + g + 8))) * s_hi;
        } else {  // λ^{L−j} k̃_j R⁰
            w_lo = cc_pow(log2_decay, (float)(CC_L - (row0 + g))) * inv_scale * s_lo;
            w_hi = cc_pow(log2_decay, (float)(CC_L - (row0 + g + 8))) * inv_scale * s_hi;
        }
#pragma unroll
        for (int nt = 0; nt < CC_TILE / 8; ++nt)
#pragma unroll
            for (int c = 0; c < 4; ++c) {
                const int dd = nt * 8 + 2 * t + (c & 1);
                const float w = (c >> 1) ? w_hi : w_lo;
                if constexpr (DQ) {
                    const float go = (c >> 1) ? go_hi : go_lo;
                    acc[nt][c] = (acc[nt][c] * inv_scale + go * s_vec[dd]) * w;
                } else if constexpr (DK) {
                    acc[nt][c] = (acc[nt][c] * inv_scale + s_vec[dd]) * w;
                } else {
                    acc[nt][c] *= w;
                }
            }

        // Intra: acc += scores · the transposed tile, over the causal k-steps (dK: then
        // Aᵀ_hi q̃_lo, a second pass in the order the reload of q̃'s residue into the same tile
        // once took).
        cc_intra_mma<!DQ, true, DQ, PARK>(acc, sc, s_park, s_t, s_t_lo);
        if constexpr (DK) cc_intra_mma<true, false, false, PARK>(acc, sc, s_park, s_t_lo, nullptr);
        cc_row_unscale(acc, u_lo, u_hi);
        // dV: narrow stores (the quad shuffles made ptxas spill it: fp16, D = 128, sm_80).
        cc_store_grad(out, DQ ? q : k, acc, head_row0, tok0 + row0 + g, n, c0, DV ? mw : dw, out_cols,
                      DV ? LA_MAP_IDENTITY : map, !DV);
    }
}

// cc_backward_dq and cc_backward_dk take one parameter list (the host launches both alike);
// `out` is dQ or dK.
#define CC_BACKWARD_QK_ENTRY(name, WHAT)                                                            \
    extern "C" __global__ void __launch_bounds__(CC_THREADS, CC_GRAD_MIN_CTAS(CC_M))                \
    name(const la_storage_t* __restrict__ q, const la_storage_t* __restrict__ k,                    \
         const la_storage_t* __restrict__ v, const la_storage_t* __restrict__ grad,                 \
         const float* __restrict__ go_parts, const float* __restrict__ den,                         \
         const float* __restrict__ states, la_storage_t* __restrict__ out, int n, int num_chunks,   \
         float log2_decay, int map, int d, int m) {                                                 \
        cc_backward_body<WHAT>(q, k, v, grad, go_parts, den, states, out, n, num_chunks, log2_decay, \
                               map, d, m);                                                          \
    }

// dQ for one chunk, slice by slice: (A k̃ + λ^{i+1}(gn S⁰ᵀ + gd z⁰)) ⊙ φ'(q), with
// A_ij = (G_i·v_j − G_i·O_i)/den_i and gn S⁰ᵀ + gd z⁰ = (G S⁰ᵀ − (G·O) z⁰)/den; G·O from
// go_parts (cc_backward_go, O + residue).
// Precision: A k̃ cancels against the inter term (Σ_j A_ij ≈ 0 where k̃ ≈ 1 + elu(k)), so
// 16-bit rounding of A and k̃ would dominate dQ's error in bf16: both are split hi + lo
// (3 mma's: hi·hi + hi·lo + lo·hi), an emulated-fp32 product for this term only. Row i of A
// carries 1/den_i: each row is scaled by a power of two before the split (cc_row_scale), the
// inter term by the same factor, and the sum scaled back, so neither den ~ N nor den = ε
// leaves the 16-bit range.
// grid (NC, B·H, 1 or D/64): a CTA over every 64-wide slice or one; warp w rows (queries)
// 16w .. 16w+15; dynamic shared CC_QK_SMEM.
// `states` holds S⁰ (the backward's split cc_forward_h). Limits: the file's.
CC_BACKWARD_QK_ENTRY(cc_backward_dq, CC_GRAD_Q)

// dK for one chunk, slice by slice: (Aᵀ q̃ + λ^{L−j}(v_j R⁰ᵀ + r⁰)) ⊙ φ'(k), with
// Aᵀ[j][i] = (v_j·G_i − G_i·O_i)/den_i (G·O from go_parts, fp32 O).
// Precision as cc_backward_dq: Aᵀ q̃ cancels against the inter term, so Aᵀ is split hi + lo
// after a power-of-two scale per row j (its 1/den_i runs along the row: den = ε rows give
// dK̃ ~ 1/ε, finite in fp32, zeroed by φ'(k) = 0), and q̃ too: the hi tile first, then its
// residue in a second shared tile (3 mma's; hi·hi + lo·hi over the k-steps, then hi·lo).
// grid (NC, B·H, 1 or D/64): a CTA over every 64-wide slice or one; warp w rows (keys)
// 16w .. 16w+15; dynamic shared CC_QK_SMEM.
// `states` holds R⁰ (cc_backward_h), R[d][e]. Limits: the file's.
CC_BACKWARD_QK_ENTRY(cc_backward_dk, CC_GRAD_K)

// dV for one chunk, slice by slice: Pᵀ gn + λ^{L−j} k̃_j R⁰, as (Pᵀ diag(1/den)) G + ...
// Pᵀ/den (in [0, 1] for the normalised maps) is ~1/N at long sequences: its rows get a
// power-of-two scale before the hi + lo split (cc_row_scale), so they stay out of fp16
// subnormals.
// grid (NC, B·H, 1 or M/64): a CTA over every 64-wide slice or one; warp w rows (keys)
// 16w .. 16w+15; dynamic shared CC_DV_SMEM.
// `states` holds R⁰ (cc_backward_h), R[d][e]. Limits: the file's.
// Launch bounds: 1 CTA per SM at D = 256 (CC_GRAD_MIN_CTAS); else 4 where M is one slice
// (as before the slice loop) and 3 where the scores stay in registers across slices (at 4,
// 128 registers, ptxas spilled 4–20 B).
#define CC_DV_MIN_CTAS (CC_D == 256 ? 1 : CC_M == 64 ? 4 : 3)
extern "C" __global__ void __launch_bounds__(CC_THREADS, CC_DV_MIN_CTAS)
cc_backward_dv(const la_storage_t* __restrict__ q, const la_storage_t* __restrict__ k,
               const la_storage_t* __restrict__ grad, const float* __restrict__ den,
               const float* __restrict__ states, la_storage_t* __restrict__ dv, int n, int num_chunks,
               float log2_decay, int map, int d, int m) {
    cc_backward_body<CC_GRAD_V>(q, k, nullptr, grad, nullptr, den, states, dv, n, num_chunks, log2_decay,
                                map, d, m);
}
