// causal_chunked.cu — causal linear attention, chunkwise form on tensor cores (SPEC §3, §4, §6).
//
// COMPILE-CHECKED ONLY (NVRTC + ptxas for sm_80 / sm_90); not yet run on a GPU.
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
// ---- parallelisation: three passes, every pass fully parallel over (chunk, b·h, tile) ----
//   1. cc_state_fwd  per chunk: ΔS_c = Σ_j λ^{L−1−j} v_j k̃_jᵀ (stored transposed, Sᵀ[e][d]),
//                    Δz_c.                                      grid (NC, B·H, M/64)
//   2. cc_scan       exclusive scan over chunks, in place: buf[c] ← S⁰_c. One thread per
//                    state element, sequential over NC.         grid (⌈C(M+1)/256⌉, B·H)
//   3. cc_forward    per chunk and 64-wide slice of M: O, den.  grid (NC, B·H, M/64)
//   One CTA per (b, h) walking chunks would give only B·H·M/64 CTAs (32 for B·H = 16): an
//   H100 has 132 SMs. Here every pass has NC·B·H·(M/64) CTAs (N = 262144, B·H = 16: 65536),
//   at the price of the chunk-state buffer: N/L · C·(M+1) fp32 per (b, h) (O(N/L·C·M)),
//   e.g. 4096 chunks · 64·65·4 B = 68 MB per head at D = M = 64.
//   Backward: cc_state_fwd + forward scan again (states recomputed, never stored per token),
//   cc_state_bwd + reverse scan (R⁰, r⁰: another N/L·C·(M+1) fp32), then cc_dq, cc_dk
//   (grid (NC, B·H, C/64)) and cc_dv (grid (NC, B·H, M/64)). Per-token saved data: only den
//   (N fp32 per head, written by the forward) and O itself.
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
//
// ---- precision ----
//   Q, K, V, O, dO, gradients: fp16/bf16 in memory. φ, φ', decay weights, every accumulation,
//   the chunk states S, z, R, r, den: fp32. Tensor-core operands read from memory are 16-bit:
//   q̃ and k̃ are rounded once after φ (v, G are exact in storage precision). 1/den is never folded into a 16-bit operand
//   (G is exact in storage precision; 1/den scales fp32 results), so den = ε rows (relu with
//   q̃ = 0) cannot overflow fp16. The fp32 states are NOT rounded to 16 bits: for the mma each
//   state element x is scaled by a power of two 2^s (|x·2^s| < 2^14, fp16 range) and split
//   x·2^s = hi + lo (both 16-bit), two mma's, product rescaled by 2^−s: the inter-chunk term
//   keeps ~22 (fp16) / ~16 (bf16) mantissa bits, so state magnitude (which grows with N; z
//   overflows fp16 past 65504) costs neither range nor accuracy. The intra-chunk matrices
//   built in registers (P in the forward, A in dQ and dK, Pᵀ/den in dV) are split hi + lo as
//   well (2 mma's each; 3 in dQ, whose k̃ is split too): those terms cancel against the
//   inter-chunk ones (Σ_j A_ij ≈ 0 since k̃ ≈ 1 + elu(k), and v_j − O_i ≈ 0 for the first
//   tokens), so their 16-bit rounding, not storage, dominated bf16 dQ.
//   z, r and the denominators' inter term go through CUDA-core fp32 dot products.
//   Emulated in f64 with 16-bit rounding at exactly these points (a lane-level Python model
//   of these kernels, kept outside the repo;
//   N = 63..1000, D, M ∈ {64, 128}, elu+1/relu/identity, λ ∈ {1, 0.97, 0.9}), RMS error
//   ratios against an f64 recurrence: fp16 ≤ 4.2e-4, bf16 ≤ 3.9e-3 (dQ the largest),
//   versus 2e-3 / 5e-3 bars; rounding inputs and outputs alone costs bf16 dQ ~3e-3 to 4e-3.
//   fp16 limit: intra-chunk scores q̃·k̃ and the products in A must stay below 65504.

// ---- limits ----
//   D = C and M ∈ {64, 128}, compile-time (CC_D, CC_M). Any N ≥ 1: the tail chunk is
//   zero-padded on load and masked on store. B·H ≤ 65535 (grid.y). Chunk L = 64.
//   Dynamic shared memory ≤ 88,320 B per CTA (cc_dq at M = 128; ≤ 79,360 B elsewhere) plus
//   ≤ 768 B static: the host opts in above 48 KB (fits every sm_80+ part, 99 KB+ opt-in).
//   Storage (LA_STORAGE) and CC_D, CC_M are defines; the map (codes of LA_MAP) and decay
//   (log2 λ; 0 = no decay) are kernel arguments, so one program per (precision, D, M).

#ifndef CC_D
#define CC_D 64
#endif
#ifndef CC_M
#define CC_M 64
#endif

#if LA_STORAGE != LA_STORAGE_F16 && LA_STORAGE != LA_STORAGE_BF16
#error "causal_chunked needs 16-bit storage (LA_STORAGE 1 = fp16 or 2 = bf16)"
#endif
#if (CC_D != 64 && CC_D != 128) || (CC_M != 64 && CC_M != 128)
#error "causal_chunked is specialised for D, M in {64, 128}"
#endif

#define CC_L 64         // chunk length (tokens)
#define CC_TILE 64      // output slice width of M (forward, dV) or of C (dQ, dK, R state)
#define CC_THREADS 128  // 4 warps × 16 rows = one chunk
#define CC_PAD 8
#define CC_LDT (CC_L + CC_PAD)    // stride of token-contiguous (transposed) 16-bit tiles
#define CC_LDD (CC_D + CC_PAD)    // stride of D-contiguous rows
#define CC_LDM (CC_M + CC_PAD)    // stride of M-contiguous rows
#define CC_STATE_STRIDE ((la_index_t)CC_D * CC_M + CC_D)  // fp32 per chunk: matrix then vector

typedef unsigned int cc_u32;
typedef unsigned short cc_u16;

// ---- small helpers ---------------------------------------------------------------------------

// Two fp32 → one register of two 16-bit storage values, `lo` in the low half (the element with
// the smaller index). PTX cvt.rn.{f16x2,bf16x2}.f32 d, a, b puts a in the upper half.
__device__ __forceinline__ cc_u32 cc_pack(float lo, float hi) {
    cc_u32 r;
#if LA_STORAGE == LA_STORAGE_F16
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
#else
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
#endif
    return r;
}

__device__ __forceinline__ float cc_lo(cc_u32 r) { return la_to_float((cc_u16)(r & 0xffffu)); }
__device__ __forceinline__ float cc_hi(cc_u32 r) { return la_to_float((cc_u16)(r >> 16)); }

// Fused feature map, chosen at run time (codes as LA_MAP: 0 identity, 1 elu+1, 2 relu): the
// branch is uniform across the grid and costs nothing next to the loads, and one program then
// serves every map (a third of the NVRTC/ptxas work of compiling one per map).
#define CC_MAP_IDENTITY 0
#define CC_MAP_ELU_PLUS_ONE 1
#define CC_MAP_RELU 2

__device__ __forceinline__ float cc_phi(int map, float x) {
    if (map == CC_MAP_ELU_PLUS_ONE) return x > 0.0f ? x + 1.0f : expf(x);  // fp32 (SPEC §9)
    if (map == CC_MAP_RELU) return fmaxf(x, 0.0f);
    return x;
}

__device__ __forceinline__ float cc_phi_grad(int map, float x) {
    if (map == CC_MAP_ELU_PLUS_ONE) return x > 0.0f ? 1.0f : expf(x);
    if (map == CC_MAP_RELU) return x > 0.0f ? 1.0f : 0.0f;
    return 1.0f;
}

// Identity is un-normalised (SPEC §7): den ≡ 1, gd ≡ 0.
__device__ __forceinline__ bool cc_normalised(int map) { return map != CC_MAP_IDENTITY; }

// λ^n for a decay given as log2 λ (exactly 1 when log2 λ = 0).
__device__ __forceinline__ float cc_pow(float log2_decay, float n) {
    return log2_decay == 0.0f ? 1.0f : exp2f(log2_decay * n);
}

// D = A·B + D on one m16n8k16 tile; a[4], b[2] in the fragment layout of the header.
__device__ __forceinline__ void cc_mma(float (&d)[4], const cc_u32 (&a)[4], cc_u32 b0, cc_u32 b1) {
#if LA_STORAGE == LA_STORAGE_F16
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

template <int NT>
__device__ __forceinline__ void cc_zero(float (&acc)[NT][4]) {
#pragma unroll
    for (int n = 0; n < NT; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
}

// A fragment of k-step `ks` from a 16-bit [m][k] tile (row 0 = the warp's first row).
__device__ __forceinline__ void cc_load_a(cc_u32 (&a)[4], const cc_u16* A, int lda, int ks) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const cc_u16* p = A + g * lda + ks * 16 + 2 * t;
    a[0] = *(const cc_u32*)(p);
    a[1] = *(const cc_u32*)(p + 8 * lda);
    a[2] = *(const cc_u32*)(p + 8);
    a[3] = *(const cc_u32*)(p + 8 * lda + 8);
}

// A fragment of k-step `ks` from accumulators of n-tiles 2ks, 2ks+1, split x = hi + lo (both
// 16-bit): hi·B + lo·B carries ~2× the mantissa of one rounding.
template <int NT>
__device__ __forceinline__ void cc_acc_to_a_split(cc_u32 (&hi)[4], cc_u32 (&lo)[4],
                                                  const float (&c)[NT][4], int ks) {
#pragma unroll
    for (int r = 0; r < 4; ++r) {
        const int n = 2 * ks + (r >> 1), h = 2 * (r & 1);
        hi[r] = cc_pack(c[n][h], c[n][h + 1]);
        lo[r] = cc_pack(c[n][h] - cc_lo(hi[r]), c[n][h + 1] - cc_hi(hi[r]));
    }
}

// acc[n-tile] += A(16×16·KS, [m][k]) · B where B is a 16-bit [n][k] tile, for n-tiles in
// [nt_lo, nt_hi) only (causal masks make the others zero; bounds are warp-uniform).
template <int NT, int KS>
__device__ __forceinline__ void cc_mma_ss(float (&acc)[NT][4], const cc_u16* A, int lda,
                                          const cc_u16* B, int ldb, int nt_lo, int nt_hi) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int ks = 0; ks < KS; ++ks) {
        cc_u32 a[4];
        cc_load_a(a, A, lda, ks);
#pragma unroll
        for (int n = 0; n < NT; ++n) {
            if (n < nt_lo || n >= nt_hi) continue;
            const cc_u16* p = B + (n * 8 + g) * ldb + ks * 16 + 2 * t;
            cc_mma(acc[n], a, *(const cc_u32*)p, *(const cc_u32*)(p + 8));
        }
    }
}

// acc += A(16-bit [m][k]) · B where B is an fp32 [n][k] state tile, split hi + lo after
// scaling by `scale` (a power of two); the caller multiplies the result by 1/scale.
template <int NT, int KS>
__device__ __forceinline__ void cc_mma_split(float (&acc)[NT][4], const cc_u16* A, int lda,
                                             const float* B, int ldb, float scale) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int ks = 0; ks < KS; ++ks) {
        cc_u32 a[4];
        cc_load_a(a, A, lda, ks);
#pragma unroll
        for (int n = 0; n < NT; ++n) {
            const float* p = B + (n * 8 + g) * ldb + ks * 16 + 2 * t;
            const float2 x0 = *(const float2*)p;
            const float2 x1 = *(const float2*)(p + 8);
            const cc_u32 h0 = cc_pack(x0.x * scale, x0.y * scale);
            const cc_u32 h1 = cc_pack(x1.x * scale, x1.y * scale);
            const cc_u32 l0 = cc_pack(x0.x * scale - cc_lo(h0), x0.y * scale - cc_hi(h0));
            const cc_u32 l1 = cc_pack(x1.x * scale - cc_lo(h1), x1.y * scale - cc_hi(h1));
            cc_mma(acc[n], a, h0, h1);
            cc_mma(acc[n], a, l0, l1);
        }
    }
}

// Power-of-two scale putting max|x| below 2^14 (fp16 range with headroom for the sums of the
// split); exponent clamped so the scale and its inverse are finite normal floats.
__device__ __forceinline__ float cc_split_scale(float max_abs) {
    int e = max_abs > 0.0f ? ((__float_as_int(max_abs) >> 23) & 0xff) - 127 : 0;
    int s = 13 - e;
    s = s < -120 ? -120 : (s > 120 ? 120 : s);
    return __int_as_float((127 + s) << 23);
}

// Row r of [rows][cols] 16-bit global data, pair at column c (even): two floats, zero past N.
__device__ __forceinline__ float2 cc_load_pair(const la_storage_t* __restrict__ src,
                                               la_index_t row_base, int cols, int c, bool valid) {
    if (!valid) return make_float2(0.0f, 0.0f);
    const cc_u32 r = *(const cc_u32*)(src + row_base * cols + c);
    return make_float2(cc_lo(r), cc_hi(r));
}

// Tile of `ROWS`=64 tokens × COLS features, natural layout dst[token][feature] (stride ld),
// from rows [tok0, tok0+64) of a [N][cols] head; φ = map `phi` applied (identity: none), scaled by row_scale[r]
// when given; tokens ≥ n are zero (not φ(0)).
template <int COLS>
__device__ __forceinline__ void cc_tile_rows(cc_u16* dst, int ld, const la_storage_t* __restrict__ src,
                                             la_index_t head_row0, int tok0, int n, int col0,
                                             int src_cols, int phi, const float* row_scale) {
    const int pairs = COLS / 2;
    for (int idx = threadIdx.x; idx < CC_L * pairs; idx += CC_THREADS) {
        const int r = idx / pairs, cp = (idx % pairs) * 2;
        const bool valid = tok0 + r < n;
        float2 x = cc_load_pair(src, head_row0 + tok0 + r, src_cols, col0 + cp, valid);
        if (valid) {
            x.x = cc_phi(phi, x.x);
            x.y = cc_phi(phi, x.y);
        }
        if (row_scale) {
            x.x *= row_scale[r];
            x.y *= row_scale[r];
        }
        *(cc_u32*)(dst + r * ld + cp) = cc_pack(x.x, x.y);
    }
}

// Same data transposed: dst[feature][token] (stride CC_LDT), COLS features from col0. Each
// thread moves a 2×2 block so both the shared stores (32-bit, consecutive lanes → consecutive
// token pairs) and the φ are done once per element. With `dst_lo`, also the rounding residue
// x − hi(x) (a hi + lo split of the fp32 value, see cc_dq).
template <int COLS>
__device__ __forceinline__ void cc_tile_cols(cc_u16* dst, const la_storage_t* __restrict__ src,
                                             la_index_t head_row0, int tok0, int n, int col0,
                                             int src_cols, int phi, const float* row_scale,
                                             cc_u16* dst_lo = nullptr) {
    const int token_pairs = CC_L / 2;
    for (int idx = threadIdx.x; idx < token_pairs * (COLS / 2); idx += CC_THREADS) {
        const int tp = (idx % token_pairs) * 2, cp = (idx / token_pairs) * 2;
        const bool v0 = tok0 + tp < n, v1 = tok0 + tp + 1 < n;
        float2 r0 = cc_load_pair(src, head_row0 + tok0 + tp, src_cols, col0 + cp, v0);
        float2 r1 = cc_load_pair(src, head_row0 + tok0 + tp + 1, src_cols, col0 + cp, v1);
        if (v0) { r0.x = cc_phi(phi, r0.x); r0.y = cc_phi(phi, r0.y); }
        if (v1) { r1.x = cc_phi(phi, r1.x); r1.y = cc_phi(phi, r1.y); }
        if (row_scale) {
            r0.x *= row_scale[tp]; r0.y *= row_scale[tp];
            r1.x *= row_scale[tp + 1]; r1.y *= row_scale[tp + 1];
        }
        const cc_u32 h0 = cc_pack(r0.x, r1.x), h1 = cc_pack(r0.y, r1.y);
        *(cc_u32*)(dst + cp * CC_LDT + tp) = h0;
        *(cc_u32*)(dst + (cp + 1) * CC_LDT + tp) = h1;
        if (dst_lo) {
            *(cc_u32*)(dst_lo + cp * CC_LDT + tp) = cc_pack(r0.x - cc_lo(h0), r1.x - cc_hi(h0));
            *(cc_u32*)(dst_lo + (cp + 1) * CC_LDT + tp) = cc_pack(r0.y - cc_lo(h1), r1.y - cc_hi(h1));
        }
    }
}

// fp32 state tile: dst[r][c] = src[(row0 + r) * src_cols + c] for r < ROWS, c < COLS
// (natural), or dst[r][c] = src[c * src_cols + row0 + r] (transposed). Returns this thread's
// max |x|; the caller reduces it.
template <int ROWS, int COLS, bool TRANSPOSED>
__device__ __forceinline__ float cc_state_tile(float* dst, int ld, const float* __restrict__ src,
                                               int row0, int src_cols) {
    float max_abs = 0.0f;
    for (int idx = threadIdx.x; idx < ROWS * COLS; idx += CC_THREADS) {
        int r, c;
        float x;
        if (TRANSPOSED) {  // consecutive threads read consecutive source elements
            r = idx % ROWS;
            c = idx / ROWS;
            x = src[(la_index_t)c * src_cols + row0 + r];
        } else {
            r = idx / COLS;
            c = idx % COLS;
            x = src[(la_index_t)(row0 + r) * src_cols + c];
        }
        dst[r * ld + c] = x;
        max_abs = fmaxf(max_abs, fabsf(x));
    }
    return max_abs;
}

// Block-wide max of non-negative floats through one shared int (ordered like the floats).
__device__ __forceinline__ float cc_block_max_nonneg(float x, int* slot) {
    x = la_warp_max(x);
    if ((threadIdx.x & 31) == 0) atomicMax(slot, __float_as_int(x));
    __syncthreads();
    return __int_as_float(*slot);
}

// 1/den and −G·O for the 64 rows of a chunk (identity map: 1 and 0); rows ≥ n: 0 and 0.
// gn = G·(1/den) and gd = (−G·O)·(1/den) are never formed in 16 bits: G (exact in storage
// precision) is the mma operand and 1/den scales fp32 results, so a row with den = ε (relu,
// q̃ = 0) cannot overflow fp16 (SPEC §5: the ε matters). One warp per row.
__device__ __forceinline__ void cc_row_grad_terms(float* den_inv, float* neg_go, const la_storage_t* __restrict__ grad,
                                                  const la_storage_t* __restrict__ out,
                                                  const float* __restrict__ den, la_index_t head_row0,
                                                  int tok0, int n, int map) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int r = warp; r < CC_L; r += CC_THREADS / 32) {
        const int i = tok0 + r;
        if (i >= n) {
            if (lane == 0) { den_inv[r] = 0.0f; neg_go[r] = 0.0f; }
            continue;
        }
        if (!cc_normalised(map)) {
            if (lane == 0) { den_inv[r] = 1.0f; neg_go[r] = 0.0f; }
            continue;
        }
        float dot = 0.0f;
        for (int e = 2 * lane; e < CC_M; e += 64) {
            const float2 gv = cc_load_pair(grad, head_row0 + i, CC_M, e, true);
            const float2 ov = cc_load_pair(out, head_row0 + i, CC_M, e, true);
            dot += gv.x * ov.x + gv.y * ov.y;
        }
        dot = la_warp_sum(dot);
        if (lane == 0) {
            den_inv[r] = 1.0f / den[head_row0 + i];
            neg_go[r] = -dot;
        }
    }
}

// ---- pass 1: chunk states ------------------------------------------------------------------

// states[bh][c] ← (Sᵀ[e][d] = Σ_j λ^{L−1−j} v_j[e] k̃_j[d],  z[d] = Σ_j λ^{L−1−j} k̃_j[d]).
// grid (NC, B·H, M/64); dynamic shared (M-slice 64 × LDT + D × LDT) · 2 B.
extern "C" __global__ void __launch_bounds__(CC_THREADS)
cc_state_fwd(const la_storage_t* __restrict__ k, const la_storage_t* __restrict__ v,
             float* __restrict__ states, int n, int num_chunks, float log2_decay, int map) {
    extern __shared__ __align__(16) unsigned char cc_smem[];
    cc_u16* s_vt = (cc_u16*)cc_smem;                 // [64 e][LDT]
    cc_u16* s_kt = s_vt + CC_TILE * CC_LDT;          // [D][LDT], weighted
    __shared__ float s_w[CC_L];

    const int chunk = blockIdx.x, bh = blockIdx.y, e0 = blockIdx.z * CC_TILE;
    const int tok0 = chunk * CC_L;
    const la_index_t head_row0 = (la_index_t)bh * n;
    for (int j = threadIdx.x; j < CC_L; j += CC_THREADS)
        s_w[j] = cc_pow(log2_decay, (float)(CC_L - 1 - j));
    __syncthreads();
    cc_tile_cols<CC_TILE>(s_vt, v, head_row0, tok0, n, e0, CC_M, CC_MAP_IDENTITY, nullptr);
    cc_tile_cols<CC_D>(s_kt, k, head_row0, tok0, n, 0, CC_D, map, s_w);
    __syncthreads();

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    float acc[CC_D / 8][4];
    cc_zero(acc);
    cc_mma_ss<CC_D / 8, CC_L / 16>(acc, s_vt + warp * 16 * CC_LDT, CC_LDT, s_kt, CC_LDT, 0, CC_D / 8);

    float* dst = states + ((la_index_t)bh * num_chunks + chunk) * CC_STATE_STRIDE;
    const int e = e0 + warp * 16 + g;
#pragma unroll
    for (int nt = 0; nt < CC_D / 8; ++nt) {
        const int d = nt * 8 + 2 * t;
        *(float2*)(dst + (la_index_t)e * CC_D + d) = make_float2(acc[nt][0], acc[nt][1]);
        *(float2*)(dst + (la_index_t)(e + 8) * CC_D + d) = make_float2(acc[nt][2], acc[nt][3]);
    }
    if (blockIdx.z == 0) {
        for (int d = threadIdx.x; d < CC_D; d += CC_THREADS) {
            float z = 0.0f;
            for (int j = 0; j < CC_L; ++j) z += la_to_float(s_kt[d * CC_LDT + j]);
            dst[(la_index_t)CC_D * CC_M + d] = z;
        }
    }
}

// Backward: states[bh][c] ← (ΔR[d][e] = Σ_i λ^i q̃_i[d] gn_i[e],  Δr[d] = Σ_i λ^i q̃_i[d] gd_i),
// computed as Σ_i (λ^i/den_i) q̃_i[d] · (G_i[e] | −G_i·O_i).
// grid (NC, B·H, D/64); dynamic shared (64 × LDT + M × LDT) · 2 B.
extern "C" __global__ void __launch_bounds__(CC_THREADS)
cc_state_bwd(const la_storage_t* __restrict__ q, const la_storage_t* __restrict__ out,
             const la_storage_t* __restrict__ grad, const float* __restrict__ den,
             float* __restrict__ states, int n, int num_chunks, float log2_decay, int map) {
    extern __shared__ __align__(16) unsigned char cc_smem[];
    cc_u16* s_qt = (cc_u16*)cc_smem;                 // [64 d][LDT], weighted λ^i / den_i
    cc_u16* s_gt = s_qt + CC_TILE * CC_LDT;          // [M][LDT], G
    __shared__ float s_w[CC_L], s_den_inv[CC_L], s_neg_go[CC_L];

    const int chunk = blockIdx.x, bh = blockIdx.y, d0 = blockIdx.z * CC_TILE;
    const int tok0 = chunk * CC_L;
    const la_index_t head_row0 = (la_index_t)bh * n;
    cc_row_grad_terms(s_den_inv, s_neg_go, grad, out, den, head_row0, tok0, n, map);
    __syncthreads();
    for (int i = threadIdx.x; i < CC_L; i += CC_THREADS)
        s_w[i] = cc_pow(log2_decay, (float)i) * s_den_inv[i];
    __syncthreads();
    cc_tile_cols<CC_TILE>(s_qt, q, head_row0, tok0, n, d0, CC_D, map, s_w);
    cc_tile_cols<CC_M>(s_gt, grad, head_row0, tok0, n, 0, CC_M, CC_MAP_IDENTITY, nullptr);
    __syncthreads();

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    float acc[CC_M / 8][4];
    cc_zero(acc);
    cc_mma_ss<CC_M / 8, CC_L / 16>(acc, s_qt + warp * 16 * CC_LDT, CC_LDT, s_gt, CC_LDT, 0, CC_M / 8);

    float* dst = states + ((la_index_t)bh * num_chunks + chunk) * CC_STATE_STRIDE;
    const int d = d0 + warp * 16 + g;
#pragma unroll
    for (int nt = 0; nt < CC_M / 8; ++nt) {
        const int e = nt * 8 + 2 * t;
        *(float2*)(dst + (la_index_t)d * CC_M + e) = make_float2(acc[nt][0], acc[nt][1]);
        *(float2*)(dst + (la_index_t)(d + 8) * CC_M + e) = make_float2(acc[nt][2], acc[nt][3]);
    }
    for (int dl = threadIdx.x; dl < CC_TILE; dl += CC_THREADS) {
        float r = 0.0f;
        for (int i = 0; i < CC_L; ++i) r += la_to_float(s_qt[dl * CC_LDT + i]) * s_neg_go[i];
        dst[(la_index_t)CC_D * CC_M + d0 + dl] = r;
    }
}

// ---- pass 2: scan over chunks ---------------------------------------------------------------

// In place, per state element: forward (reverse = 0) buf[c] ← Σ_{c'<c} λ^{L(c−1−c')} buf[c'];
// reverse: buf[c] ← Σ_{c'>c} λ^{L(c'−c−1)} buf[c']. grid (⌈STRIDE/256⌉, B·H), block 256.
// Four chunks' loads are issued before their dependent updates to hide latency.
extern "C" __global__ void __launch_bounds__(256)
cc_scan(float* __restrict__ states, int num_chunks, float chunk_decay, int reverse) {
    const la_index_t elem = (la_index_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (elem >= CC_STATE_STRIDE) return;
    float* base = states + (la_index_t)blockIdx.y * num_chunks * CC_STATE_STRIDE + elem;
    float carry = 0.0f;
    int step = 0;
    for (; step + 4 <= num_chunks; step += 4) {
        float x[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            const int c = reverse ? num_chunks - 1 - (step + u) : step + u;
            x[u] = base[(la_index_t)c * CC_STATE_STRIDE];
        }
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            const int c = reverse ? num_chunks - 1 - (step + u) : step + u;
            base[(la_index_t)c * CC_STATE_STRIDE] = carry;
            carry = carry * chunk_decay + x[u];
        }
    }
    for (; step < num_chunks; ++step) {
        const int c = reverse ? num_chunks - 1 - step : step;
        const float x = base[(la_index_t)c * CC_STATE_STRIDE];
        base[(la_index_t)c * CC_STATE_STRIDE] = carry;
        carry = carry * chunk_decay + x;
    }
}

// ---- pass 3: outputs ------------------------------------------------------------------------

#define CC_FWD_SMEM (2 * CC_L * CC_LDD * 2 + CC_TILE * CC_LDT * 2 + CC_TILE * CC_LDD * 4 + CC_D * 4)

// O[:, e0:e0+64] and den for one chunk. grid (NC, B·H, M/64); dynamic shared CC_FWD_SMEM.
extern "C" __global__ void __launch_bounds__(CC_THREADS)
cc_forward(const la_storage_t* __restrict__ q, const la_storage_t* __restrict__ k,
           const la_storage_t* __restrict__ v, const float* __restrict__ states,
           la_storage_t* __restrict__ out, float* __restrict__ den_out, int n, int num_chunks,
           float log2_decay, float eps, int map) {
    extern __shared__ __align__(16) unsigned char cc_smem[];
    cc_u16* s_q = (cc_u16*)cc_smem;                  // [64 i][LDD]  q̃
    cc_u16* s_k = s_q + CC_L * CC_LDD;               // [64 j][LDD]  k̃
    cc_u16* s_vt = s_k + CC_L * CC_LDD;              // [64 e][LDT]  v slice, transposed
    float* s_s = (float*)(s_vt + CC_TILE * CC_LDT);  // [64 e][LDD]  S⁰ᵀ slice, fp32
    float* s_z = s_s + CC_TILE * CC_LDD;             // [D]          z⁰
    __shared__ int s_max;

    const int chunk = blockIdx.x, bh = blockIdx.y, e0 = blockIdx.z * CC_TILE;
    const int tok0 = chunk * CC_L;
    const la_index_t head_row0 = (la_index_t)bh * n;
    const float* state = states + ((la_index_t)bh * num_chunks + chunk) * CC_STATE_STRIDE;
    if (threadIdx.x == 0) s_max = 0;
    cc_tile_rows<CC_D>(s_q, CC_LDD, q, head_row0, tok0, n, 0, CC_D, map, nullptr);
    cc_tile_rows<CC_D>(s_k, CC_LDD, k, head_row0, tok0, n, 0, CC_D, map, nullptr);
    cc_tile_cols<CC_TILE>(s_vt, v, head_row0, tok0, n, e0, CC_M, CC_MAP_IDENTITY, nullptr);
    float max_abs = cc_state_tile<CC_TILE, CC_D, false>(s_s, CC_LDD, state, e0, CC_D);
    for (int d = threadIdx.x; d < CC_D; d += CC_THREADS) s_z[d] = state[(la_index_t)CC_D * CC_M + d];
    __syncthreads();  // s_max = 0 visible before the atomics
    const float scale = cc_split_scale(cc_block_max_nonneg(max_abs, &s_max));  // has a barrier

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int row0 = warp * 16;  // this warp's first row within the chunk
    const cc_u16* a_q = s_q + row0 * CC_LDD;

    // P = q̃ k̃ᵀ (only n-tiles with j ≤ row0 + 15 can be unmasked), masked and decayed in fp32.
    float p[CC_L / 8][4];
    cc_zero(p);
    // Key tiles past this warp's last row (j > row0 + 15) are fully masked: skipped.
    cc_mma_ss<CC_L / 8, CC_D / 16>(p, a_q, CC_LDD, s_k, CC_LDD, 0, 2 * (warp + 1));
    float row_sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int nt = 0; nt < CC_L / 8; ++nt)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
            const int i = row0 + g + (c >> 1) * 8, j = nt * 8 + 2 * t + (c & 1);
            const float x = j <= i ? p[nt][c] * cc_pow(log2_decay, (float)(i - j)) : 0.0f;
            p[nt][c] = x;
            row_sum[c >> 1] += x;
        }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        row_sum[h] += __shfl_xor_sync(LA_FULL_MASK, row_sum[h], 1);
        row_sum[h] += __shfl_xor_sync(LA_FULL_MASK, row_sum[h], 2);
    }

    // Inter-chunk: λ^{i+1} q̃_i S⁰ (split fp32 state) and λ^{i+1} q̃_i·z⁰.
    float o[CC_TILE / 8][4];
    cc_zero(o);
    cc_mma_split<CC_TILE / 8, CC_D / 16>(o, a_q, CC_LDD, s_s, CC_LDD, scale);
    float qz;
    {
        // lane handles row (lane >> 1), half (lane & 1) of D; pairs reduced by one shuffle.
        const int r = row0 + (lane >> 1), half = lane & 1;
        float s = 0.0f;
        for (int d = half * (CC_D / 2); d < (half + 1) * (CC_D / 2); ++d)
            s += la_to_float(s_q[r * CC_LDD + d]) * s_z[d];
        qz = s + __shfl_xor_sync(LA_FULL_MASK, s, 1);
    }
    const float qz_lo = __shfl_sync(LA_FULL_MASK, qz, 2 * g);
    const float qz_hi = __shfl_sync(LA_FULL_MASK, qz, 2 * (g + 8));
    const float inv_scale = 1.0f / scale;
    const float w_lo = cc_pow(log2_decay, (float)(row0 + g + 1));
    const float w_hi = cc_pow(log2_decay, (float)(row0 + g + 9));
#pragma unroll
    for (int nt = 0; nt < CC_TILE / 8; ++nt) {
        o[nt][0] *= inv_scale * w_lo; o[nt][1] *= inv_scale * w_lo;
        o[nt][2] *= inv_scale * w_hi; o[nt][3] *= inv_scale * w_hi;
    }

    // Intra-chunk: o += P v (k-steps past the diagonal block are all zero). v is exact in
    // storage precision; P is split hi + lo so the numerator matches the fp32 row sums of the
    // denominator (a rounded P against an exact den would bias O_i, and through gd the dQ of
    // the first tokens, where v_j − O_i nearly cancels).
#pragma unroll
    for (int ks = 0; ks < CC_L / 16; ++ks) {
        if (ks > warp) continue;
        cc_u32 a_hi[4], a_lo[4];
        cc_acc_to_a_split(a_hi, a_lo, p, ks);
#pragma unroll
        for (int nt = 0; nt < CC_TILE / 8; ++nt) {
            const cc_u16* bp = s_vt + (nt * 8 + g) * CC_LDT + ks * 16 + 2 * t;
            const cc_u32 b0 = *(const cc_u32*)bp, b1 = *(const cc_u32*)(bp + 8);
            cc_mma(o[nt], a_hi, b0, b1);
            cc_mma(o[nt], a_lo, b0, b1);
        }
    }

    const int i_lo = tok0 + row0 + g, i_hi = i_lo + 8;
    const bool normalised = cc_normalised(map);
    const float den_lo = normalised ? w_lo * qz_lo + row_sum[0] + eps : 1.0f;
    const float den_hi = normalised ? w_hi * qz_hi + row_sum[1] + eps : 1.0f;
    const float inv_lo = 1.0f / den_lo, inv_hi = 1.0f / den_hi;
#pragma unroll
    for (int nt = 0; nt < CC_TILE / 8; ++nt) {
        const int e = e0 + nt * 8 + 2 * t;
        if (i_lo < n)
            *(cc_u32*)(out + (head_row0 + i_lo) * CC_M + e) = cc_pack(o[nt][0] * inv_lo, o[nt][1] * inv_lo);
        if (i_hi < n)
            *(cc_u32*)(out + (head_row0 + i_hi) * CC_M + e) = cc_pack(o[nt][2] * inv_hi, o[nt][3] * inv_hi);
    }
    if (blockIdx.z == 0 && t == 0) {
        if (i_lo < n) den_out[head_row0 + i_lo] = den_lo;
        if (i_hi < n) den_out[head_row0 + i_hi] = den_hi;
    }
}

// ---- backward: gradients ----------------------------------------------------------------------

#define CC_DK_SMEM (2 * CC_L * CC_LDM * 2 + CC_TILE * CC_LDT * 2 + CC_TILE * CC_LDM * 4 + CC_TILE * 4)
#define CC_DQ_SMEM (CC_DK_SMEM + CC_TILE * CC_LDT * 2)

// Stores acc ⊙ φ'(x) (map `chain_map`; identity: acc) for the warp's 16 rows × 64 columns [c0, c0+64) of a [N][cols] head.
__device__ __forceinline__ void cc_store_grad(la_storage_t* __restrict__ dst, const la_storage_t* __restrict__ x,
                                              const float (&acc)[CC_TILE / 8][4], la_index_t head_row0,
                                              int i_lo, int n, int c0, int cols, int chain_map) {
    const int t = threadIdx.x & 3;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int i = i_lo + 8 * h;
        if (i >= n) continue;
#pragma unroll
        for (int nt = 0; nt < CC_TILE / 8; ++nt) {
            const int c = c0 + nt * 8 + 2 * t;
            float a = acc[nt][2 * h], b = acc[nt][2 * h + 1];
            if (chain_map != CC_MAP_IDENTITY) {
                const float2 xv = cc_load_pair(x, head_row0 + i, cols, c, true);
                a *= cc_phi_grad(chain_map, xv.x);
                b *= cc_phi_grad(chain_map, xv.y);
            }
            *(cc_u32*)(dst + (head_row0 + i) * cols + c) = cc_pack(a, b);
        }
    }
}

// dQ[:, d0:d0+64] for one chunk: (A k̃ + λ^{i+1}(gn S⁰ᵀ + gd z⁰)) ⊙ φ'(q), with
// A_ij = (G_i·v_j − G_i·O_i)/den_i and gn S⁰ᵀ + gd z⁰ = (G S⁰ᵀ − (G·O) z⁰)/den.
// Precision: A k̃ cancels against the inter term (Σ_j A_ij ≈ 0 where k̃ ≈ 1 + elu(k)), so
// 16-bit rounding of A and k̃ would dominate dQ's error in bf16: both are split hi + lo
// (3 mma's: hi·hi + hi·lo + lo·hi), an emulated-fp32 product for this term only.
// grid (NC, B·H, D/64); dynamic shared CC_DQ_SMEM. `states` holds S⁰ (forward scan).
extern "C" __global__ void __launch_bounds__(CC_THREADS)
cc_dq(const la_storage_t* __restrict__ q, const la_storage_t* __restrict__ k,
      const la_storage_t* __restrict__ v, const la_storage_t* __restrict__ out,
      const la_storage_t* __restrict__ grad, const float* __restrict__ den,
      const float* __restrict__ states, la_storage_t* __restrict__ dq, int n, int num_chunks,
      float log2_decay, int map) {
    extern __shared__ __align__(16) unsigned char cc_smem[];
    cc_u16* s_g = (cc_u16*)cc_smem;                  // [64 i][LDM]  G
    cc_u16* s_v = s_g + CC_L * CC_LDM;               // [64 j][LDM]  v
    cc_u16* s_kt = s_v + CC_L * CC_LDM;              // [64 d][LDT]  k̃ slice, transposed (hi)
    cc_u16* s_kt_lo = s_kt + CC_TILE * CC_LDT;       // [64 d][LDT]  its rounding residue (lo)
    float* s_s = (float*)(s_kt_lo + CC_TILE * CC_LDT); // [64 d][LDM] S⁰ slice (S[d][e]), fp32
    float* s_z = s_s + CC_TILE * CC_LDM;             // [64]         z⁰ slice
    __shared__ float s_den_inv[CC_L], s_neg_go[CC_L];
    __shared__ int s_max;

    const int chunk = blockIdx.x, bh = blockIdx.y, d0 = blockIdx.z * CC_TILE;
    const int tok0 = chunk * CC_L;
    const la_index_t head_row0 = (la_index_t)bh * n;
    const float* state = states + ((la_index_t)bh * num_chunks + chunk) * CC_STATE_STRIDE;
    if (threadIdx.x == 0) s_max = 0;
    cc_row_grad_terms(s_den_inv, s_neg_go, grad, out, den, head_row0, tok0, n, map);
    __syncthreads();
    cc_tile_rows<CC_M>(s_g, CC_LDM, grad, head_row0, tok0, n, 0, CC_M, CC_MAP_IDENTITY, nullptr);
    cc_tile_rows<CC_M>(s_v, CC_LDM, v, head_row0, tok0, n, 0, CC_M, CC_MAP_IDENTITY, nullptr);
    cc_tile_cols<CC_TILE>(s_kt, k, head_row0, tok0, n, d0, CC_D, map, nullptr, s_kt_lo);
    // global Sᵀ[e][d] → s_s[d][e] for d in the slice
    const float max_abs = cc_state_tile<CC_TILE, CC_M, true>(s_s, CC_LDM, state, d0, CC_D);
    for (int d = threadIdx.x; d < CC_TILE; d += CC_THREADS) s_z[d] = state[(la_index_t)CC_D * CC_M + d0 + d];
    const float scale = cc_split_scale(cc_block_max_nonneg(max_abs, &s_max));  // has a barrier

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int row0 = warp * 16;
    const cc_u16* a_g = s_g + row0 * CC_LDM;
    const float go_lo = s_neg_go[row0 + g], go_hi = s_neg_go[row0 + g + 8];
    const float inv_lo = s_den_inv[row0 + g], inv_hi = s_den_inv[row0 + g + 8];

    // A = (G vᵀ − G·O)/den, masked j ≤ i, decayed.
    float am[CC_L / 8][4];
    cc_zero(am);
    cc_mma_ss<CC_L / 8, CC_M / 16>(am, a_g, CC_LDM, s_v, CC_LDM, 0, 2 * (warp + 1));
#pragma unroll
    for (int nt = 0; nt < CC_L / 8; ++nt)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
            const int i = row0 + g + (c >> 1) * 8, j = nt * 8 + 2 * t + (c & 1);
            const float go = (c >> 1) ? go_hi : go_lo, inv = (c >> 1) ? inv_hi : inv_lo;
            am[nt][c] = (j <= i && tok0 + j < n)
                            ? (am[nt][c] + go) * inv * cc_pow(log2_decay, (float)(i - j)) : 0.0f;
        }

    // Inter: λ^{i+1}(G_i S⁰ᵀ − (G_i·O_i) z⁰)/den_i.
    float acc[CC_TILE / 8][4];
    cc_zero(acc);
    cc_mma_split<CC_TILE / 8, CC_M / 16>(acc, a_g, CC_LDM, s_s, CC_LDM, scale);
    const float inv_scale = 1.0f / scale;
    const float w_lo = cc_pow(log2_decay, (float)(row0 + g + 1)) * inv_lo;
    const float w_hi = cc_pow(log2_decay, (float)(row0 + g + 9)) * inv_hi;
#pragma unroll
    for (int nt = 0; nt < CC_TILE / 8; ++nt)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
            const int d = nt * 8 + 2 * t + (c & 1);
            const float go = (c >> 1) ? go_hi : go_lo, w = (c >> 1) ? w_hi : w_lo;
            acc[nt][c] = (acc[nt][c] * inv_scale + go * s_z[d]) * w;
        }

    // Intra: acc += A k̃ (k over j ≤ row0 + 15), split operands (see above).
#pragma unroll
    for (int ks = 0; ks < CC_L / 16; ++ks) {
        if (ks > warp) continue;
        cc_u32 a_hi[4], a_lo[4];
        cc_acc_to_a_split(a_hi, a_lo, am, ks);
#pragma unroll
        for (int nt = 0; nt < CC_TILE / 8; ++nt) {
            const int off = (nt * 8 + g) * CC_LDT + ks * 16 + 2 * t;
            const cc_u32 b0 = *(const cc_u32*)(s_kt + off), b1 = *(const cc_u32*)(s_kt + off + 8);
            cc_mma(acc[nt], a_hi, b0, b1);
            cc_mma(acc[nt], a_lo, b0, b1);
            cc_mma(acc[nt], a_hi, *(const cc_u32*)(s_kt_lo + off), *(const cc_u32*)(s_kt_lo + off + 8));
        }
    }
    cc_store_grad(dq, q, acc, head_row0, tok0 + row0 + g, n, d0, CC_D, map);
}

// dK[:, d0:d0+64] for one chunk: (Aᵀ q̃ + λ^{L−j}(v_j R⁰ᵀ + r⁰)) ⊙ φ'(k), with
// Aᵀ[j][i] = (v_j·G_i − G_i·O_i)/den_i.
// grid (NC, B·H, D/64); dynamic shared CC_DK_SMEM. `states` holds R⁰ (reverse scan), R[d][e].
extern "C" __global__ void __launch_bounds__(CC_THREADS)
cc_dk(const la_storage_t* __restrict__ q, const la_storage_t* __restrict__ k,
      const la_storage_t* __restrict__ v, const la_storage_t* __restrict__ out,
      const la_storage_t* __restrict__ grad, const float* __restrict__ den,
      const float* __restrict__ states, la_storage_t* __restrict__ dk, int n, int num_chunks,
      float log2_decay, int map) {
    extern __shared__ __align__(16) unsigned char cc_smem[];
    cc_u16* s_v = (cc_u16*)cc_smem;                  // [64 j][LDM]  v
    cc_u16* s_g = s_v + CC_L * CC_LDM;               // [64 i][LDM]  G
    cc_u16* s_qt = s_g + CC_L * CC_LDM;              // [64 d][LDT]  q̃ slice, transposed
    float* s_r = (float*)(s_qt + CC_TILE * CC_LDT);  // [64 d][LDM]  R⁰ slice, fp32
    float* s_rv = s_r + CC_TILE * CC_LDM;            // [64]         r⁰ slice
    __shared__ float s_den_inv[CC_L], s_neg_go[CC_L];
    __shared__ int s_max;

    const int chunk = blockIdx.x, bh = blockIdx.y, d0 = blockIdx.z * CC_TILE;
    const int tok0 = chunk * CC_L;
    const la_index_t head_row0 = (la_index_t)bh * n;
    const float* state = states + ((la_index_t)bh * num_chunks + chunk) * CC_STATE_STRIDE;
    if (threadIdx.x == 0) s_max = 0;
    cc_row_grad_terms(s_den_inv, s_neg_go, grad, out, den, head_row0, tok0, n, map);
    __syncthreads();
    cc_tile_rows<CC_M>(s_v, CC_LDM, v, head_row0, tok0, n, 0, CC_M, CC_MAP_IDENTITY, nullptr);
    cc_tile_rows<CC_M>(s_g, CC_LDM, grad, head_row0, tok0, n, 0, CC_M, CC_MAP_IDENTITY, nullptr);
    cc_tile_cols<CC_TILE>(s_qt, q, head_row0, tok0, n, d0, CC_D, map, nullptr);
    const float max_abs = cc_state_tile<CC_TILE, CC_M, false>(s_r, CC_LDM, state, d0, CC_M);
    for (int d = threadIdx.x; d < CC_TILE; d += CC_THREADS) s_rv[d] = state[(la_index_t)CC_D * CC_M + d0 + d];
    const float scale = cc_split_scale(cc_block_max_nonneg(max_abs, &s_max));  // has a barrier

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int row0 = warp * 16;  // rows are keys j
    const cc_u16* a_v = s_v + row0 * CC_LDM;

    // Aᵀ[j][i] = (v_j·G_i − G_i·O_i)/den_i for i ≥ j (n-tiles nt ≥ 2·warp), decayed λ^{i−j}.
    float at[CC_L / 8][4];
    cc_zero(at);
    cc_mma_ss<CC_L / 8, CC_M / 16>(at, a_v, CC_LDM, s_g, CC_LDM, 2 * warp, CC_L / 8);
#pragma unroll
    for (int nt = 0; nt < CC_L / 8; ++nt)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
            const int j = row0 + g + (c >> 1) * 8, i = nt * 8 + 2 * t + (c & 1);
            at[nt][c] = (i >= j && tok0 + i < n)
                            ? (at[nt][c] + s_neg_go[i]) * s_den_inv[i] * cc_pow(log2_decay, (float)(i - j))
                            : 0.0f;
        }

    // Inter: λ^{L−j}(v_j R⁰ᵀ + r⁰).
    float acc[CC_TILE / 8][4];
    cc_zero(acc);
    cc_mma_split<CC_TILE / 8, CC_M / 16>(acc, a_v, CC_LDM, s_r, CC_LDM, scale);
    const float inv_scale = 1.0f / scale;
    const float w_lo = cc_pow(log2_decay, (float)(CC_L - (row0 + g)));
    const float w_hi = cc_pow(log2_decay, (float)(CC_L - (row0 + g + 8)));
#pragma unroll
    for (int nt = 0; nt < CC_TILE / 8; ++nt)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
            const int d = nt * 8 + 2 * t + (c & 1);
            acc[nt][c] = (acc[nt][c] * inv_scale + s_rv[d]) * ((c >> 1) ? w_hi : w_lo);
        }

    // Intra: acc += Aᵀ q̃ (k over i ≥ row0); Aᵀ split hi + lo (it cancels against the inter
    // term as in dQ).
#pragma unroll
    for (int ks = 0; ks < CC_L / 16; ++ks) {
        if (ks < warp) continue;
        cc_u32 a_hi[4], a_lo[4];
        cc_acc_to_a_split(a_hi, a_lo, at, ks);
#pragma unroll
        for (int nt = 0; nt < CC_TILE / 8; ++nt) {
            const cc_u16* bp = s_qt + (nt * 8 + g) * CC_LDT + ks * 16 + 2 * t;
            const cc_u32 b0 = *(const cc_u32*)bp, b1 = *(const cc_u32*)(bp + 8);
            cc_mma(acc[nt], a_hi, b0, b1);
            cc_mma(acc[nt], a_lo, b0, b1);
        }
    }
    cc_store_grad(dk, k, acc, head_row0, tok0 + row0 + g, n, d0, CC_D, map);
}

#define CC_DV_SMEM (2 * CC_L * CC_LDD * 2 + CC_TILE * CC_LDT * 2 + CC_TILE * CC_LDD * 4)

// dV[:, e0:e0+64] for one chunk: Pᵀ gn + λ^{L−j} k̃_j R⁰, as (Pᵀ diag(1/den)) G + ...
// grid (NC, B·H, M/64); dynamic shared CC_DV_SMEM. `states` holds R⁰ (reverse scan), R[d][e].
extern "C" __global__ void __launch_bounds__(CC_THREADS)
cc_dv(const la_storage_t* __restrict__ q, const la_storage_t* __restrict__ k,
      const la_storage_t* __restrict__ grad, const float* __restrict__ den,
      const float* __restrict__ states, la_storage_t* __restrict__ dv, int n, int num_chunks,
      float log2_decay, int map) {
    extern __shared__ __align__(16) unsigned char cc_smem[];
    cc_u16* s_k = (cc_u16*)cc_smem;                  // [64 j][LDD]  k̃
    cc_u16* s_q = s_k + CC_L * CC_LDD;               // [64 i][LDD]  q̃
    cc_u16* s_gt = s_q + CC_L * CC_LDD;              // [64 e][LDT]  G slice, transposed
    float* s_rt = (float*)(s_gt + CC_TILE * CC_LDT); // [64 e][LDD]  R⁰ᵀ slice, fp32
    __shared__ float s_den_inv[CC_L];
    __shared__ int s_max;

    const int chunk = blockIdx.x, bh = blockIdx.y, e0 = blockIdx.z * CC_TILE;
    const int tok0 = chunk * CC_L;
    const la_index_t head_row0 = (la_index_t)bh * n;
    const float* state = states + ((la_index_t)bh * num_chunks + chunk) * CC_STATE_STRIDE;
    if (threadIdx.x == 0) s_max = 0;
    for (int r = threadIdx.x; r < CC_L; r += CC_THREADS) {
        const bool valid = tok0 + r < n;
        s_den_inv[r] = !valid ? 0.0f : (cc_normalised(map) ? 1.0f / den[head_row0 + tok0 + r] : 1.0f);
    }
    __syncthreads();
    cc_tile_rows<CC_D>(s_k, CC_LDD, k, head_row0, tok0, n, 0, CC_D, map, nullptr);
    cc_tile_rows<CC_D>(s_q, CC_LDD, q, head_row0, tok0, n, 0, CC_D, map, nullptr);
    cc_tile_cols<CC_TILE>(s_gt, grad, head_row0, tok0, n, e0, CC_M, CC_MAP_IDENTITY, nullptr);
    // global R[d][e] → s_rt[e][d] for e in the slice
    const float max_abs = cc_state_tile<CC_TILE, CC_D, true>(s_rt, CC_LDD, state, e0, CC_M);
    const float scale = cc_split_scale(cc_block_max_nonneg(max_abs, &s_max));  // has a barrier

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int row0 = warp * 16;  // rows are keys j
    const cc_u16* a_k = s_k + row0 * CC_LDD;

    // Pᵀ[j][i] = k̃_j·q̃_i / den_i for i ≥ j, decayed.
    float pt[CC_L / 8][4];
    cc_zero(pt);
    cc_mma_ss<CC_L / 8, CC_D / 16>(pt, a_k, CC_LDD, s_q, CC_LDD, 2 * warp, CC_L / 8);
#pragma unroll
    for (int nt = 0; nt < CC_L / 8; ++nt)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
            const int j = row0 + g + (c >> 1) * 8, i = nt * 8 + 2 * t + (c & 1);
            pt[nt][c] = i >= j ? pt[nt][c] * s_den_inv[i] * cc_pow(log2_decay, (float)(i - j)) : 0.0f;
        }

    // Inter: λ^{L−j} k̃_j R⁰.
    float acc[CC_TILE / 8][4];
    cc_zero(acc);
    cc_mma_split<CC_TILE / 8, CC_D / 16>(acc, a_k, CC_LDD, s_rt, CC_LDD, scale);
    const float inv_scale = 1.0f / scale;
    const float w_lo = cc_pow(log2_decay, (float)(CC_L - (row0 + g))) * inv_scale;
    const float w_hi = cc_pow(log2_decay, (float)(CC_L - (row0 + g + 8))) * inv_scale;
#pragma unroll
    for (int nt = 0; nt < CC_TILE / 8; ++nt) {
        acc[nt][0] *= w_lo; acc[nt][1] *= w_lo;
        acc[nt][2] *= w_hi; acc[nt][3] *= w_hi;
    }

    // Intra: acc += (Pᵀ/den) G (k over i ≥ row0); G is exact, Pᵀ/den split hi + lo.
#pragma unroll
    for (int ks = 0; ks < CC_L / 16; ++ks) {
        if (ks < warp) continue;
        cc_u32 a_hi[4], a_lo[4];
        cc_acc_to_a_split(a_hi, a_lo, pt, ks);
#pragma unroll
        for (int nt = 0; nt < CC_TILE / 8; ++nt) {
            const cc_u16* bp = s_gt + (nt * 8 + g) * CC_LDT + ks * 16 + 2 * t;
            const cc_u32 b0 = *(const cc_u32*)bp, b1 = *(const cc_u32*)(bp + 8);
            cc_mma(acc[nt], a_hi, b0, b1);
            cc_mma(acc[nt], a_lo, b0, b1);
        }
    }
    cc_store_grad(dv, k, acc, head_row0, tok0 + row0 + g, n, e0, CC_M, CC_MAP_IDENTITY);
}
