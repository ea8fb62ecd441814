// causal_chunked_common.cuh — the helpers the chunked passes share: 16-bit packing and the
// hi + lo split, the mma wrappers and fragment loads, power-of-two scales, the width guards,
// the transposed tile stores, block maxima, G·O sums and row scales. Part of
// causal_chunked.cu's program (included after its math, mapping, precision and limits, whose
// defines it uses); not compiled alone.
#pragma once

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

// The rounding residues (lo − stored lo, hi − stored hi) of two fp32 values whose 16-bit
// storage values are `stored` (cc_pack of the same lo, hi), packed like cc_pack.
__device__ __forceinline__ cc_u32 cc_residue(float lo, float hi, cc_u32 stored) {
    return cc_pack(lo - cc_lo(stored), hi - cc_hi(stored));
}

// Two fp32 split x = hi + lo, both packed like cc_pack: hi their 16-bit rounding, lo the
// rounding of the rest (cc_residue); hi·B + lo·B carries ~2× the mantissa of one rounding.
__device__ __forceinline__ void cc_split(float a, float b, cc_u32& hi, cc_u32& lo) {
    hi = cc_pack(a, b);
    lo = cc_residue(a, b, hi);
}

// One 16-byte record of the packed state (CC_STATE_STRIDE's comment) from the four fp32 of
// lane t's k-step (a0, a1: d = 2t, 2t+1; b0, b1: 2t+8, 2t+9), already scaled by 2^s:
// {hi(a0, a1), hi(b0, b1), lo(a0, a1), lo(b0, b1)}.
__device__ __forceinline__ uint4 cc_pack_record(float a0, float a1, float b0, float b1) {
    uint4 r;
    r.x = cc_pack(a0, a1);
    r.y = cc_pack(b0, b1);
    r.z = cc_residue(a0, a1, r.x);
    r.w = cc_residue(b0, b1, r.y);
    return r;
}

// The fused feature map is a kernel argument (codes as LA_MAP, through cc_phi and the prelude's
// la_phi_of_map): the branch is uniform across the grid and costs nothing next to the loads,
// and one program then serves every map (a third of the NVRTC/ptxas work of one per map).

// Identity is un-normalised (SPEC §7): den ≡ 1, gd ≡ 0.
__device__ __forceinline__ bool cc_normalised(int map) { return map != LA_MAP_IDENTITY; }

// 2^x as one MUFU.EX2: ex2.approx.ftz.f32 (≤ 2 ulp, as ex2.approx.f32; results below
// 2^-126 are 0, inputs below it read as 0). exp2f and __expf compile to ex2.approx.f32, which
// ptxas wraps in a range test and two predicated scalings to return subnormal results: four
// SASS instructions where this is one (the PTX is one either way: the model cannot see it).
// The chunked kernels' exps are decay weights and φ values that only add to sums of O(1)
// terms, where a result below 2^-126 is 0 to any precision they keep. Not in the programs
// where ptxas then spilled a hot kernel at its launch bounds on sm_90 (cc_forward_train at
// D = 256, 24 B; cc_forward_seg_train in fp16 at D = 128, 16–32 B; asm volatile spilled in
// 10): there exp2f and __expf, as before.
#if CC_D == 256 || (LA_STORAGE == LA_STORAGE_F16 && CC_D == 128)
#define CC_EX2_FTZ 0
#else
#define CC_EX2_FTZ 1
#endif
__device__ __forceinline__ float cc_ex2(float x) {
#if CC_EX2_FTZ
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
#else
    return exp2f(x);
#endif
}

// λ^n for a decay given as log2 λ (exactly 1 when log2 λ = 0: without decay the exps are
// skipped, a uniform branch with cc_ex2's asm, a select with exp2f).
__device__ __forceinline__ float cc_pow(float log2_decay, float n) {
    return log2_decay == 0.0f ? 1.0f : cc_ex2(log2_decay * n);
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
        cc_split(c[n][h], c[n][h + 1], hi[r], lo[r]);
    }
}

// The loop of a product A·B with A the warp's 16-bit [m][k] tile (KS k-steps of 16): for
// each k-step ks, A's fragment a, then f(n, ks, a) for each n-tile n < NT of the output.
// KS_UNROLL = 1: the k-step loop is not unrolled (cc_forward's P, for registers).
template <int NT, int KS, int KS_UNROLL = KS, typename F>
__device__ __forceinline__ void cc_each_fragment(const cc_u16* A, int lda, F f) {
    static_assert(KS_UNROLL == KS || KS_UNROLL == 1, "all k-steps unrolled or none");
    if constexpr (KS_UNROLL == KS) {
#pragma unroll
        for (int ks = 0; ks < KS; ++ks) {
            cc_u32 a[4];
            cc_load_a(a, A, lda, ks);
#pragma unroll
            for (int n = 0; n < NT; ++n) f(n, ks, a);
        }
    } else {
#pragma unroll 1
        for (int ks = 0; ks < KS; ++ks) {
            cc_u32 a[4];
            cc_load_a(a, A, lda, ks);
#pragma unroll
            for (int n = 0; n < NT; ++n) f(n, ks, a);
        }
    }
}

// acc[n-tile] += A(16×16·KS, [m][k]) · B where B is a 16-bit [n][k] tile, for n-tiles in
// [nt_lo, nt_hi) only (causal masks make the others zero; bounds are warp-uniform).
// KS_UNROLL: cc_each_fragment's.
template <int NT, int KS, int KS_UNROLL = KS>
__device__ __forceinline__ void cc_mma_ss(float (&acc)[NT][4], const cc_u16* A, int lda,
                                          const cc_u16* B, int ldb, int nt_lo, int nt_hi) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    cc_each_fragment<NT, KS, KS_UNROLL>(A, lda, [&](int n, int ks, const cc_u32(&a)[4]) {
        if (n < nt_lo || n >= nt_hi) return;
        const cc_u16* p = B + (n * 8 + g) * ldb + ks * 16 + 2 * t;
        cc_mma(acc[n], a, *(const cc_u32*)p, *(const cc_u32*)(p + 8));
    });
}

// The k-step unrolling of a product over a 256-wide dim: none (16 k-steps unrolled with
// their fragments in flight spilled on sm_80: cc_forward_train, cc_backward_dk); whole below.
#define CC_KS_UNROLL(KS) ((KS) <= 8 ? (KS) : 1)

// acc += A(16-bit [m][k]) · B where B is an fp32 [n][k] state tile, split hi + lo after
// scaling by `scale` (a power of two); the caller multiplies the result by 1/scale.
// KS_UNROLL: cc_each_fragment's.
template <int NT, int KS, int KS_UNROLL = CC_KS_UNROLL(KS)>
__device__ __forceinline__ void cc_mma_split(float (&acc)[NT][4], const cc_u16* A, int lda,
                                             const float* B, int ldb, float scale) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    cc_each_fragment<NT, KS, KS_UNROLL>(A, lda, [&](int n, int ks, const cc_u32(&a)[4]) {
        const float* p = B + (n * 8 + g) * ldb + ks * 16 + 2 * t;
        const float2 x0 = *(const float2*)p;
        const float2 x1 = *(const float2*)(p + 8);
        const uint4 r = cc_pack_record(x0.x * scale, x0.y * scale, x1.x * scale, x1.y * scale);
        cc_mma(acc[n], a, r.x, r.y);
        cc_mma(acc[n], a, r.z, r.w);
    });
}

// Power-of-two scale 2^s putting max|x| below 2^14 (fp16 range with headroom for the sums of
// the split): the exponent s, clamped so 2^s and 2^−s are finite normal floats.
__device__ __forceinline__ int cc_split_exp(float max_abs) {
    int e = max_abs > 0.0f ? ((__float_as_int(max_abs) >> 23) & 0xff) - 127 : 0;
    int s = 13 - e;
    return s < -120 ? -120 : (s > 120 ? 120 : s);
}

// 2^s for |s| ≤ 126, exact (no division: its slow path is a call, and a call spills).
__device__ __forceinline__ float cc_pow2(int s) { return __int_as_float((127 + s) << 23); }

__device__ __forceinline__ float cc_split_scale(float max_abs) { return cc_pow2(cc_split_exp(max_abs)); }

// A tensor's row width (the row stride) in a program of tile width CC: the kernel argument
// `w` in the 64-wide program (D, M = 16, 32, 64), CC itself in the 128 and 256 programs
// (the host passes w = CC there), so their strides and column guards fold at compile time.
template <int CC>
__device__ __forceinline__ int cc_width(int w) { return CC == 64 ? w : CC; }

// Columns of the 64-wide slice at c0 that exist in a row of width w (64 when all do; only the
// 64-wide program, c0 = 0, has fewer). Widths are multiples of 16, so every 16-column group
// a warp or quad touches is wholly inside or wholly outside.
template <int CC>
__device__ __forceinline__ int cc_slice_cols(int w, int c0) { return CC == 64 ? w - c0 : CC_TILE; }

// 2×2 transpose between lanes t and t ^ 1 of a quad: the odd lane trades its x for the even
// lane's y. On a C-fragment row (x: columns 2t, 2t+1 of n-tile 2p, y: of n-tile 2p+1, as
// 16-bit pairs) it leaves columns cc_quad_col(t) .. + 3 of those 16 in (x, y): an 8-byte
// global access per lane, a quad filling a 32-byte sector (the fragment layout used half of
// each sector it touched). Its own inverse.
__device__ __forceinline__ void cc_quad_swap(cc_u32& x, cc_u32& y) {
    const bool odd = threadIdx.x & 1;
    const cc_u32 recv = __shfl_xor_sync(LA_FULL_MASK, odd ? x : y, 1);
    if (odd) x = recv; else y = recv;
}

// First of the 4 columns lane t holds after cc_quad_swap: columns 4(t >> 1) .. + 3 of n-tile
// 2p (even t) or 2p+1 (odd t).
__device__ __forceinline__ int cc_quad_col(int t) { return 8 * (t & 1) + 4 * (t >> 1); }

// Transposed 16-bit tiles, dst[feature][token] (stride CC_LDT), as cc_walk_put stores them.
// One 32-bit store of a token pair: the hi part into dst and, with LO, the rounding residue
// x − hi(x) into dst_lo (a hi + lo split of the fp32 value, see cc_backward_dq). LO is a
// template parameter, not a null test: a shared address may be 0, so `if (dst_lo)` stayed a
// branch around every store, and each branch recomputed the store's address (~16 integer
// instructions per store in the PTX the simulator runs). Mapping (cc_walk_fetch): a warp
// step moves 8 tokens × 16 features; lane = (fp = lane & 7: features 2fp, 2fp+1, tw = lane
// >> 3: tokens 2tw, 2tw+1), each lane a 2×2 block. Global: 8 lanes read 32 contiguous bytes
// of a token row, one full sector. Shared: feature rows 2fp and 2fp+8 share banks (stride
// CC_LDT/2 ≡ 4 mod 32 words), so lanes fp ≥ 4 store their odd feature first: the 32 lanes
// of each store hit 32 banks.
template <bool LO>
__device__ __forceinline__ void cc_tile_cols_store(cc_u16* dst, cc_u16* dst_lo, int off, float a, float b) {
    const cc_u32 h = cc_pack(a, b);
    *(cc_u32*)(dst + off) = h;
    if (LO) *(cc_u32*)(dst_lo + off) = cc_residue(a, b, h);
}

// Stores a lane's 2×2 block (r0, r1: tokens 2tw, 2tw+1; .x, .y: features 2fp, 2fp+1) at
// feature row f (= 2fp of its group), token `tok` (even), odd feature first when `odd_first`.
template <bool LO>
__device__ __forceinline__ void cc_tile_cols_block(cc_u16* dst, cc_u16* dst_lo, int f, int tok,
                                                   float2 r0, float2 r1, bool odd_first) {
    cc_tile_cols_store<LO>(dst, dst_lo, (f + odd_first) * CC_LDT + tok, odd_first ? r0.y : r0.x,
                           odd_first ? r1.y : r1.x);
    cc_tile_cols_store<LO>(dst, dst_lo, (f + !odd_first) * CC_LDT + tok, odd_first ? r0.x : r0.y,
                           odd_first ? r1.x : r1.y);
}

// A lane's 4 output columns of rows i_lo and i_lo + 8 from the C fragments of n-tiles x, y
// (2p, 2p+1) times 1/den, rounded to storage and through one quad shuffle (cc_quad_swap) as
// 8-byte stores at column e; RESIDUE (a forward the backward follows) with a normalised map
// also O's rounding residue into out_lo, the same products rounded the same way. `cols_exist`
// (warp-uniform) is tested after the shuffles; rows ≥ n are not stored.
template <bool RESIDUE>
__device__ __forceinline__ void cc_store_o_pair(la_storage_t* __restrict__ out, la_storage_t* __restrict__ out_lo,
                                                bool normalised, const float (&x)[4], const float (&y)[4],
                                                float inv_lo, float inv_hi, bool cols_exist, la_index_t head_row0,
                                                int i_lo, int n, int mw, int e) {
    const int i_hi = i_lo + 8;
    cc_u32 x_lo = cc_pack(x[0] * inv_lo, x[1] * inv_lo);
    cc_u32 y_lo = cc_pack(y[0] * inv_lo, y[1] * inv_lo);
    cc_u32 x_hi = cc_pack(x[2] * inv_hi, x[3] * inv_hi);
    cc_u32 y_hi = cc_pack(y[2] * inv_hi, y[3] * inv_hi);
    // The residues first, then both swap.
    cc_u32 rx_lo = 0, ry_lo = 0, rx_hi = 0, ry_hi = 0;
    if (RESIDUE && normalised) {
        rx_lo = cc_residue(x[0] * inv_lo, x[1] * inv_lo, x_lo);
        ry_lo = cc_residue(y[0] * inv_lo, y[1] * inv_lo, y_lo);
        rx_hi = cc_residue(x[2] * inv_hi, x[3] * inv_hi, x_hi);
        ry_hi = cc_residue(y[2] * inv_hi, y[3] * inv_hi, y_hi);
        cc_quad_swap(rx_lo, ry_lo);
        cc_quad_swap(rx_hi, ry_hi);
    }
    cc_quad_swap(x_lo, y_lo);
    cc_quad_swap(x_hi, y_hi);
    if (!cols_exist) return;  // columns past m
    if (i_lo < n) *(uint2*)(out + (head_row0 + i_lo) * mw + e) = make_uint2(x_lo, y_lo);
    if (i_hi < n) *(uint2*)(out + (head_row0 + i_hi) * mw + e) = make_uint2(x_hi, y_hi);
    if (RESIDUE && normalised) {
        if (i_lo < n) *(uint2*)(out_lo + (head_row0 + i_lo) * mw + e) = make_uint2(rx_lo, ry_lo);
        if (i_hi < n) *(uint2*)(out_lo + (head_row0 + i_hi) * mw + e) = make_uint2(rx_hi, ry_hi);
    }
}

// Block-wide max of non-negative floats without an atomic (so no slot to clear first): each
// warp's max into slots[warp] (cc_block_max_put), the caller's barrier, then every thread
// reads the CC_THREADS/32 slots (cc_block_max_get).
__device__ __forceinline__ void cc_block_max_put(float x, float* slots) {
    x = la_warp_max(x);
    if ((threadIdx.x & 31) == 0) slots[threadIdx.x >> 5] = x;
}

__device__ __forceinline__ float cc_block_max_get(const float* slots) {
    float x = 0.0f;
#pragma unroll
    for (int w = 0; w < CC_THREADS / 32; ++w) x = fmaxf(x, slots[w]);
    return x;
}

// Partials of G_i·O_i per token: one per 64-wide slice of M, go[token · CC_MT + slice].
// cc_go_t holds a token's CC_MT partials, read in one load; cc_go_sum adds them in order.
#if CC_MT == 4
typedef float4 cc_go_t;
__device__ __forceinline__ float cc_go_sum(cc_go_t x) { return x.x + x.y + x.z + x.w; }
#elif CC_MT == 2
typedef float2 cc_go_t;
__device__ __forceinline__ float cc_go_sum(cc_go_t x) { return x.x + x.y; }
#else
typedef float cc_go_t;
__device__ __forceinline__ float cc_go_sum(cc_go_t x) { return x; }
#endif

// 1/den and −G·O for the 64 rows of a chunk (identity map: 1 and 0); rows ≥ n: 0 and 0.
// G·O is the sum of the CC_MT partials cc_backward_go wrote from O + its residue (not from the
// 16-bit stored O: gd = −G·O/den feeds z⁰gd and r, which cancel against the S gn terms, so
// O's storage rounding was the largest error of bf16 dQ). gn = G·(1/den) and gd are never
// formed in 16 bits: G (exact in storage precision) is the mma operand and 1/den scales fp32
// results or rows of per-row scaled operands (cc_row_scale), so den = ε rows (relu,
// q̃ = 0 or k̃ = 0 so far) cannot overflow fp16 (SPEC §5: the ε matters).
__device__ __forceinline__ void cc_row_grad_terms(float* den_inv, float* neg_go,
                                                  const float* __restrict__ go_parts,
                                                  const float* __restrict__ den, la_index_t head_row0,
                                                  int tok0, int n, int map) {
    for (int r = threadIdx.x; r < CC_L; r += CC_THREADS) {
        const int i = tok0 + r;
        float inv = 0.0f, ngo = 0.0f;
        if (i < n && !cc_normalised(map)) {
            inv = 1.0f;
        } else if (i < n) {
            const la_index_t tok = head_row0 + i;
            const float dot = cc_go_sum(*(const cc_go_t*)(go_parts + tok * CC_MT));  // one load
            inv = 1.0f / den[tok];
            ngo = -dot;
        }
        den_inv[r] = inv;
        neg_go[r] = ngo;
    }
}

// Scales rows g and g+8 of a warp's 16-row accumulator tile (n-tiles 0..NT−1, zeros where
// masked) by powers of two putting each row's max |x| below 2^14 (cc_split_exp), and
// returns the factors (s_*) and their inverses (u_*). Row scales commute with a product
// whose k dim runs along the row (A·B with A the tile): the caller multiplies row r of the
// result by the inverse. So the 16-bit hi + lo split of A keeps ~22 (fp16) bits whatever the
// row's magnitude: 1/den ~ 1/N at long N (fp16 subnormals) or 1/ε at den = ε (fp16
// overflow) alike. The callers fold s into the fp32 inter-chunk term already in the
// accumulator (exact: a power of two), so s is capped at 2^CC_ROW_EXP_MAX, keeping that
// term finite up to 2^64; only rows with max |x| < 2^−50 then lose fp16 bits, and their
// products are far below what a 16-bit gradient holds.
#define CC_ROW_EXP_MAX 64
// max |x| over rows g (m_lo) and g + 8 (m_hi) of a warp's accumulator tile, n-tiles 0..NT−1:
// the 4 lanes t of a quad hold the rest of each row.
template <int NT>
__device__ __forceinline__ void cc_quad_row_max(const float (&c)[NT][4], float& m_lo, float& m_hi) {
    m_lo = 0.0f, m_hi = 0.0f;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        m_lo = fmaxf(m_lo, fmaxf(fabsf(c[nt][0]), fabsf(c[nt][1])));
        m_hi = fmaxf(m_hi, fmaxf(fabsf(c[nt][2]), fabsf(c[nt][3])));
    }
#pragma unroll
    for (int x = 1; x <= 2; x <<= 1) {
        m_lo = fmaxf(m_lo, __shfl_xor_sync(LA_FULL_MASK, m_lo, x));
        m_hi = fmaxf(m_hi, __shfl_xor_sync(LA_FULL_MASK, m_hi, x));
    }
}

template <int NT>
__device__ __forceinline__ void cc_row_scale(float (&c)[NT][4], float& s_lo, float& s_hi, float& u_lo,
                                             float& u_hi) {
    float m_lo, m_hi;
    cc_quad_row_max(c, m_lo, m_hi);
    const int e_lo = min(cc_split_exp(m_lo), CC_ROW_EXP_MAX);
    const int e_hi = min(cc_split_exp(m_hi), CC_ROW_EXP_MAX);
    s_lo = cc_pow2(e_lo);
    s_hi = cc_pow2(e_hi);
    u_lo = cc_pow2(-e_lo);
    u_hi = cc_pow2(-e_hi);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        c[nt][0] *= s_lo; c[nt][1] *= s_lo;
        c[nt][2] *= s_hi; c[nt][3] *= s_hi;
    }
}

// Rows g and g+8 of a warp's accumulator tile times u_lo, u_hi (undoes cc_row_scale).
template <int NT>
__device__ __forceinline__ void cc_row_unscale(float (&c)[NT][4], float u_lo, float u_hi) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        c[nt][0] *= u_lo; c[nt][1] *= u_lo;
        c[nt][2] *= u_hi; c[nt][3] *= u_hi;
    }
}
