// causal_chunked_outputs.cuh — pass 2 of the chunked forward: O and den of each chunk from
// its entering state (cc_forward, cc_forward_train). Part of causal_chunked.cu's program (see
// its header for the math and the grid); not compiled alone.
#pragma once

// ---- pass 2: outputs ------------------------------------------------------------------------

// cc_tile_rows of a whole [N][w] row (col0 = 0) in two halves, so that every load of the
// tile is issued before the first is used (one DRAM latency per tile, not one per element
// pair): cc_rows_fetch reads 16 bytes per load into registers, cc_rows_put applies φ (tokens
// ≥ n and columns ≥ w stay 0) and stores them. Thread x, load s: token (x + s·CC_THREADS) /
// (COLS/8), elements 8·((x + s·CC_THREADS) mod (COLS/8)) .. +7; 8 lanes fill a 128-byte row
// segment (one wavefront per quarter warp). w: the row width (cc_width; < COLS only in the
// 64-wide program). A part: loads s0 .. s0 + LOADS − 1.
#define CC_ROWS_LOADS(COLS) (CC_L * (COLS) / 8 / CC_THREADS)
template <int COLS, int LOADS = CC_ROWS_LOADS(COLS)>
__device__ __forceinline__ void cc_rows_fetch(uint4 (&raw)[LOADS], const la_storage_t* __restrict__ src,
                                              la_index_t head_row0, int tok0, int n, int w, int s0 = 0) {
#pragma unroll
    for (int s = 0; s < LOADS; ++s) {
        const int idx = threadIdx.x + (s0 + s) * CC_THREADS, r = idx / (COLS / 8), c = (idx % (COLS / 8)) * 8;
        raw[s] = tok0 + r < n && (COLS != 64 || c < w) ? *(const uint4*)(src + (head_row0 + tok0 + r) * w + c)
                                                       : make_uint4(0u, 0u, 0u, 0u);
    }
}

__device__ __forceinline__ cc_u32 cc_phi_word(int phi, cc_u32 x) {
    return cc_pack(cc_phi(phi, cc_lo(x)), cc_phi(phi, cc_hi(x)));
}

template <int COLS, int LOADS = CC_ROWS_LOADS(COLS)>
__device__ __forceinline__ void cc_rows_put(cc_u16* dst, int ld, const uint4 (&raw)[LOADS], int tok0,
                                            int n, int w, int phi, int s0 = 0) {
#pragma unroll
    for (int s = 0; s < LOADS; ++s) {
        const int idx = threadIdx.x + (s0 + s) * CC_THREADS, r = idx / (COLS / 8), c = (idx % (COLS / 8)) * 8;
        uint4 x = raw[s];
        // zero past n and past w, not φ(0)
        if (phi != LA_MAP_IDENTITY && tok0 + r < n && (COLS != 64 || c < w)) {
            x.x = cc_phi_word(phi, x.x);
            x.y = cc_phi_word(phi, x.y);
            x.z = cc_phi_word(phi, x.z);
            x.w = cc_phi_word(phi, x.w);
        }
        *(uint4*)(dst + r * ld + c) = x;
    }
}

// cc_forward: q̃, k̃, the v slice, z⁰ and one 64×64 tile of the packed state (16 KB; at D ≥ 128
// it overlays k̃ once P is done). cc_forward_train: q̃, then one region holding the fp32 state slice for the inter product and,
// once every warp is done with it, k̃ and the v slice (as the gradient kernels' region), z⁰.
// CC_STATE_REGION(LD, T_TILES): the bytes of such a region, the larger of the fp32 state slice
// [64][LD] and the 16-bit [64][LD] tile plus T_TILES transposed [64][LDT] tiles that follow it.
#define CC_STATE_REGION(LD, T_TILES)                                                          \
    (CC_TILE * (LD) * 4 > CC_L * (LD) * 2 + (T_TILES) * CC_TILE * CC_LDT * 2                  \
         ? CC_TILE * (LD) * 4                                                                 \
         : CC_L * (LD) * 2 + (T_TILES) * CC_TILE * CC_LDT * 2)
#define CC_TRAIN_SMEM (CC_L * CC_LDD * 2 + CC_STATE_REGION(CC_LDD, 1) + CC_D * 4)
// Launch bounds: 4 CTAs per SM at D = 64 (≤ 128 registers: it took 128 unbounded until qz's
// vector loads took it to 140, 3 CTAs/SM); 3 at D = 128 (≤ 168 registers; shared memory would
// allow 4, but at 128 registers ptxas spilled 8–52 B); at D = 256 none beyond the block size
// (a minimum of 1 took ptxas to 255 registers and spills).
#if CC_D == 256
#define CC_TRAIN_BOUNDS __launch_bounds__(CC_THREADS)
#elif CC_D == 64
#define CC_TRAIN_BOUNDS __launch_bounds__(CC_THREADS, 4)
#else
#define CC_TRAIN_BOUNDS __launch_bounds__(CC_THREADS, 3)
#endif
// 4 CTAs per SM where shared memory allows it (D ≤ 128: ≤ 44.5 KB); 2 at D = 256 (77.8 KB).
#define CC_FWD_MIN_CTAS (CC_D == 256 ? 2 : 4)
#define CC_FWD_SMEM (2 * CC_L * CC_LDD * 2 + CC_TILE * CC_LDT * 2 + CC_D * 4 + (CC_D == 64 ? CC_TILE * CC_TILE * 4 : 0))

// q̃, k̃ (natural, [64][LDD]), the v slice (transposed, [64 e][LDT]) and z⁰ of one chunk into
// shared memory, every global load issued before the first store (one DRAM latency for the
// three tiles; they took one per element pair, a chain of ~100 at D = 128). At D = 256 q̃ and
// k̃ come in two halves (both whole would be 128 registers of loads: cc_forward has 128 at
// most at 4 CTAs per SM and ~255 at 2, with P and the output live beside them).
// dw, mw: the row widths of q, k and v (cc_width); m_cols: v's columns in the slice at e0.
// QZ, KV: which of the tiles (q̃ and z⁰; k̃ and v) this call loads (cc_forward_train takes q̃ and z⁰
// first, k̃ and v after its inter product; cc_forward all at once).
template <bool QZ = true, bool KV = true>
__device__ __forceinline__ void cc_forward_tiles(cc_u16* s_q, cc_u16* s_k, cc_u16* s_vt, float* s_z,
                                                 const la_storage_t* __restrict__ q,
                                                 const la_storage_t* __restrict__ k,
                                                 const la_storage_t* __restrict__ v,
                                                 const float* __restrict__ state,
                                                 la_index_t head_row0, int tok0, int n, int e0, int map,
                                                 int dw, int mw, int m_cols) {
    constexpr int VSTEPS = CC_L / 8;  // 4 warps: each holds a feature group's every token group
    constexpr int PARTS = CC_D == 256 ? 2 : 1, LOADS = CC_ROWS_LOADS(CC_D) / PARTS;
    constexpr int ZN = (CC_D + CC_THREADS - 1) / CC_THREADS;  // elements of z per thread
    uint4 raw_q[LOADS], raw_k[LOADS];
    cc_u32 raw_v[2 * VSTEPS];
    if constexpr (QZ) cc_rows_fetch<CC_D, LOADS>(raw_q, q, head_row0, tok0, n, dw);
    if constexpr (KV) {
        cc_rows_fetch<CC_D, LOADS>(raw_k, k, head_row0, tok0, n, dw);
        cc_walk_fetch<VSTEPS>(raw_v, v, head_row0, tok0, n, e0, mw, m_cols);
    }
    float z[ZN];
    if constexpr (QZ) {
#pragma unroll
        for (int j = 0; j < ZN; ++j) {
            const int f = threadIdx.x + j * CC_THREADS;
            z[j] = f < CC_D ? state[(la_index_t)CC_D * CC_M + f] : 0.0f;
        }
        cc_rows_put<CC_D, LOADS>(s_q, CC_LDD, raw_q, tok0, n, dw, map);
    }
    if constexpr (KV) {
        cc_rows_put<CC_D, LOADS>(s_k, CC_LDD, raw_k, tok0, n, dw, map);
        cc_walk_put<false, false, false, VSTEPS>(s_vt, nullptr, raw_v, tok0, n, m_cols, LA_MAP_IDENTITY,
                                                 nullptr, nullptr, nullptr);
    }
    if constexpr (QZ) {
#pragma unroll
        for (int j = 0; j < ZN; ++j) {
            const int f = threadIdx.x + j * CC_THREADS;
            if (f < CC_D) s_z[f] = z[j];
        }
    }
#pragma unroll
    for (int part = 1; part < PARTS; ++part) {
        if constexpr (QZ) cc_rows_fetch<CC_D, LOADS>(raw_q, q, head_row0, tok0, n, dw, part * LOADS);
        if constexpr (KV) cc_rows_fetch<CC_D, LOADS>(raw_k, k, head_row0, tok0, n, dw, part * LOADS);
        if constexpr (QZ) cc_rows_put<CC_D, LOADS>(s_q, CC_LDD, raw_q, tok0, n, dw, map, part * LOADS);
        if constexpr (KV) cc_rows_put<CC_D, LOADS>(s_k, CC_LDD, raw_k, tok0, n, dw, map, part * LOADS);
    }
}

// The fp32 state tile of cc_forward_train and the gradient kernels, dst[r][c] for r < 64, c < COLS (stride ld), from
// rows row0 .. row0+63 of a [.][COLS] matrix (natural: 16-byte loads, thread x, load s:
// row (x + 128s) / (COLS/4), columns 4·((x + 128s) mod (COLS/4)) .. +3, one warp a 512-byte
// row segment) or transposed, dst[r][c] = src[c · src_cols + row0 + r] (an 8×8 block per
// warp step; lane = (rp = lane & 3, c = lane >> 2) loads the float2 src[c][2rp, 2rp+1], 4
// lanes a 32-byte sector, and stores its two values into rows 2rp, 2rp+1; with ld ≡ 8 mod
// 32 rows r and r+4 share banks, so lanes rp ≥ 2 store row 2rp+1 first: 32 banks per store).
// Fetch and put are split so every load of a part is in flight before the first store (16 at
// a time; 4 at a time they were 8 DRAM latencies per tile at D = 128). Load k of a tile:
// the global index s0 + s of a part. Put returns this thread's max |x| (a block max follows).
template <bool TRANSPOSED> struct cc_state32_vec { typedef float4 type; };
template <> struct cc_state32_vec<true> { typedef float2 type; };
template <bool TRANSPOSED> using cc_state32_vec_t = typename cc_state32_vec<TRANSPOSED>::type;

template <int COLS, bool TRANSPOSED>
__device__ __host__ constexpr int cc_state32_loads() {
    return CC_TILE * COLS / (TRANSPOSED ? 2 : 4) / CC_THREADS;
}

// Index: the natural layout's index type. unsigned in the gradient kernels (r and c a shift
// and a mask; signed, a rounding fix-up each, which their slice loop hoisted into registers
// until ptxas spilled), int in cc_forward_train (unsigned, ptxas spilled at D = 256, M = 64).
template <int COLS, bool TRANSPOSED, int LOADS, typename Index = int>
__device__ __forceinline__ void cc_state32_fetch(cc_state32_vec_t<TRANSPOSED> (&x)[LOADS],
                                                    const float* __restrict__ src, int row0, int src_cols,
                                                    int s0) {
#pragma unroll
    for (int s = 0; s < LOADS; ++s) {
        const int k = s0 + s;
        if constexpr (TRANSPOSED) {
            const unsigned lane = threadIdx.x & 31, rp = lane & 3, cl = lane >> 2;
            const unsigned blk = k * (CC_THREADS / 32) + (threadIdx.x >> 5);
            const unsigned r = (blk % (CC_TILE / 8)) * 8 + 2 * rp, c = (blk / (CC_TILE / 8)) * 8 + cl;
            x[s] = *(const float2*)(src + (la_index_t)c * src_cols + row0 + r);
        } else {
            const Index idx = threadIdx.x + k * CC_THREADS, r = idx / (COLS / 4), c = (idx % (COLS / 4)) * 4;
            x[s] = *(const float4*)(src + (la_index_t)(row0 + (int)r) * COLS + c);
        }
    }
}

template <int COLS, bool TRANSPOSED, int LOADS, typename Index = int>
__device__ __forceinline__ float cc_state32_put(float* dst, int ld,
                                                   const cc_state32_vec_t<TRANSPOSED> (&x)[LOADS], int s0) {
    float max_abs = 0.0f;
#pragma unroll
    for (int s = 0; s < LOADS; ++s) {
        const int k = s0 + s;
        if constexpr (TRANSPOSED) {
            const unsigned lane = threadIdx.x & 31, rp = lane & 3, cl = lane >> 2, first = rp >> 1;
            const unsigned blk = k * (CC_THREADS / 32) + (threadIdx.x >> 5);
            const unsigned r = (blk % (CC_TILE / 8)) * 8 + 2 * rp, c = (blk / (CC_TILE / 8)) * 8 + cl;
            dst[(r + first) * ld + c] = first ? x[s].y : x[s].x;
            dst[(r + 1 - first) * ld + c] = first ? x[s].x : x[s].y;
            max_abs = fmaxf(max_abs, fmaxf(fabsf(x[s].x), fabsf(x[s].y)));
        } else {
            const Index idx = threadIdx.x + k * CC_THREADS, r = idx / (COLS / 4), c = (idx % (COLS / 4)) * 4;
            *(float4*)(dst + r * ld + c) = x[s];
            max_abs = fmaxf(max_abs, fmaxf(fmaxf(fabsf(x[s].x), fabsf(x[s].y)), fmaxf(fabsf(x[s].z), fabsf(x[s].w))));
        }
    }
    return max_abs;
}

// The fp32 slice Sᵀ[e0 .. e0+63][0 .. D) of a chunk state into dst[e][LDD] (cc_state32_*,
// natural), all loads of a part before its first store (16 per thread: D = 256 takes two
// parts; 32 loads at once spilled); returns this thread's max |x|.
__device__ __forceinline__ float cc_state_rows(float* dst, const float* __restrict__ state, int e0) {
    constexpr int ALL = cc_state32_loads<CC_D, false>(), LOADS = ALL > 16 ? 16 : ALL;
    float max_abs = 0.0f;
#pragma unroll
    for (int s0 = 0; s0 < ALL; s0 += LOADS) {
        float4 x[LOADS];
        cc_state32_fetch<CC_D, false>(x, state, e0, CC_D, s0);
        max_abs = fmaxf(max_abs, cc_state32_put<CC_D, false>(dst, CC_LDD, x, s0));
    }
    return max_abs;
}

// One 64×64 tile (d-tile h) of the packed state's rows e0 .. e0+63 (CC_STATE_STRIDE's
// comment), 8 16-byte records per thread, all loaded before any is stored (cc_state_put).
// Thread x, load s: row (x + 128s) / 16, record (x + 128s) mod 16: 16 lanes read a row's
// 256 contiguous bytes.
// A part: loads s0 .. s0 + LOADS − 1 of the 8.
#define CC_PACKED_LOADS (CC_TILE * CC_TILE / 4 / CC_THREADS)
template <int LOADS>
__device__ __forceinline__ void cc_state_fetch(uint4 (&x)[LOADS], const float* __restrict__ state, int e0,
                                               int h, int s0 = 0) {
#pragma unroll
    for (int s = 0; s < LOADS; ++s) {
        const int idx = threadIdx.x + (s0 + s) * CC_THREADS, r = idx >> 4, c = idx & 15;
        x[s] = *(const uint4*)(state + (la_index_t)(e0 + r) * CC_D + CC_TILE * h + 4 * c);
    }
}

// Stores the fetched tile as dst[row][16 records], record c of row r at c ^ 4(r & 1): the 8
// lanes of a quarter warp reading records 4ks + t of rows g, g + 1 (cc_mma_packed) then hit
// 8 different 16-byte bank groups, as do the 8 storing one row here, with no padding (16 KB).
template <int LOADS>
__device__ __forceinline__ void cc_state_put(uint4* dst, const uint4 (&x)[LOADS], int s0 = 0) {
#pragma unroll
    for (int s = 0; s < LOADS; ++s) {
        const int idx = threadIdx.x + (s0 + s) * CC_THREADS, r = idx >> 4, c = idx & 15;
        dst[r * 16 + (c ^ ((r & 1) << 2))] = x[s];
    }
}

// acc[nt] += A·(hi + lo) over d-tile h of the staged packed tile: k-steps 4h .. 4h+3 of A (the
// warp's 16 rows of q̃, [m][k], stride CC_LDD), one 16-byte record per (k-step, n-tile) and
// two mma's, in cc_mma_split's order (the same sums as it made of the fp32 tile).
__device__ __forceinline__ void cc_mma_packed(float (&acc)[CC_TILE / 8][4], const cc_u16* A,
                                              const uint4* st, int h) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll 1  // unrolled, ptxas held every k-step's records at once and spilled (D = 128)
    for (int kk = 0; kk < CC_TILE / 16; ++kk) {
        cc_u32 a[4];
        cc_load_a(a, A, CC_LDD, 4 * h + kk);
#pragma unroll
        for (int nt = 0; nt < CC_TILE / 8; ++nt) {
            const int e = nt * 8 + g, c = 4 * kk + t;
            const uint4 b = st[e * 16 + (c ^ ((e & 1) << 2))];
            cc_mma(acc[nt], a, b.x, b.y);
            cc_mma(acc[nt], a, b.z, b.w);
        }
    }
}

// O[:, e0:e0+64] and den for one chunk. TRAIN = false (cc_forward, inference): the packed
// state (16-byte records staged one 64×64 tile at a time). TRAIN = true (cc_forward_train,
// a forward the backward follows): the fp32 state of the split walk, staged whole, block
// max, split per fragment, the state the backward keeps; also O's rounding residue
// out_lo = O − O_stored (normalised maps), so the backward's G·O has the fp32 O without
// recomputing it. grid (NC, B·H, M/64); dynamic shared CC_FWD_SMEM or CC_TRAIN_SMEM.
template <bool TRAIN>
__device__ __forceinline__ void
cc_forward_body(const la_storage_t* __restrict__ q, const la_storage_t* __restrict__ k,
                const la_storage_t* __restrict__ v, const float* __restrict__ states,
                la_storage_t* __restrict__ out, la_storage_t* __restrict__ out_lo,
                float* __restrict__ den_out, int n, int num_chunks, float log2_decay, float eps,
                int map, int d, int m) {
    extern __shared__ __align__(16) unsigned char cc_smem[];
    cc_u16* s_q = (cc_u16*)cc_smem;                  // [64 i][LDD]  q̃
    cc_u16* s_k = s_q + CC_L * CC_LDD;               // [64 j][LDD]  k̃
    cc_u16* s_vt = s_k + CC_L * CC_LDD;              // [64 e][LDT]  v slice, transposed
    // TRAIN: [64 e][LDD] the fp32 S⁰ᵀ slice, over k̃ and v until the inter product is done
    float* s_s = (float*)s_k;
    float* s_z = TRAIN ? (float*)((unsigned char*)s_k + CC_STATE_REGION(CC_LDD, 1))  // [D] z⁰
                       : (float*)(s_vt + CC_TILE * CC_LDT);
    // cc_forward: one packed 64×64 tile, [64 e][16 records] (over k̃ at D ≥ 128, after P).
    uint4* s_st = CC_D > 64 ? (uint4*)s_k : (uint4*)(s_z + CC_D);
    __shared__ float s_warp_max[CC_THREADS / 32];  // TRAIN: the state's block max

    const int chunk = blockIdx.x, bh = blockIdx.y, e0 = blockIdx.z * CC_TILE;
    const int tok0 = chunk * CC_L;
    const int dw = cc_width<CC_D>(d), mw = cc_width<CC_M>(m);  // row widths: q, k; v, O, G
    const int m_cols = cc_slice_cols<CC_M>(mw, e0);
    const la_index_t head_row0 = (la_index_t)bh * n;
    const float* state = states + ((la_index_t)bh * num_chunks + chunk) * CC_STATE_STRIDE;
    // cc_forward: the tiles' exponents (cc_state_exp; issued with the tile loads, so the
    // choice of the order below waits for nothing more). At D ≥ 128 the tiles go in
    // descending order of exponent (the smaller values first; ties in index order): the
    // accumulator then only ever scales down between two (cc_forward's inter term below).
    int ex[CC_DT], order[CC_DT];
    if (!TRAIN) {
        const int* exp_words = cc_state_exp(state) + blockIdx.z * CC_DT;
#pragma unroll
        for (int h = 0; h < CC_DT; ++h) {
            ex[h] = exp_words[h];
            order[h] = h;
        }
        // A stable bubble sort, unrolled whole (constant indices: selects in registers).
#pragma unroll
        for (int a = 0; a + 1 < CC_DT; ++a)
#pragma unroll
            for (int b = 0; b + 1 < CC_DT - a; ++b)
                if (ex[b + 1] > ex[b]) {
                    const int e = ex[b], o = order[b];
                    ex[b] = ex[b + 1], order[b] = order[b + 1];
                    ex[b + 1] = e, order[b + 1] = o;
                }
    }
    float scale = 1.0f;
    uint4 st[CC_PACKED_LOADS];
    float o[CC_TILE / 8][4];  // the numerator: inter-chunk, then intra-chunk (zeroed where it
                              // starts: early in cc_forward, ptxas spilled at 128 registers)
    if (TRAIN) {
        // q̃, z⁰ and the fp32 state slice; the inter-chunk product λ^{i+1} q̃_i S⁰ first (split
        // fp32 state; weighted below), so the state's region then takes k̃ and v: 52.7 KB of
        // shared memory at D = 128 where the three beside each other took 79 KB.
        cc_forward_tiles<true, false>(s_q, s_k, s_vt, s_z, q, k, v, state, head_row0, tok0, n, e0, map, dw,
                                      mw, m_cols);
        cc_block_max_put(cc_state_rows(s_s, state, e0), s_warp_max);
        __syncthreads();  // q̃, z⁰, the state slice and the warp maxima
        scale = cc_split_scale(cc_block_max_get(s_warp_max));
        cc_zero(o);
        cc_mma_split<CC_TILE / 8, CC_D / 16>(o, s_q + (threadIdx.x >> 5) * 16 * CC_LDD, CC_LDD, s_s, CC_LDD,
                                             scale);
        __syncthreads();  // every warp's reads of the state are done
        cc_forward_tiles<false, true>(s_q, s_k, s_vt, s_z, q, k, v, state, head_row0, tok0, n, e0, map, dw,
                                      mw, m_cols);
        __syncthreads();
    } else {
        cc_forward_tiles(s_q, s_k, s_vt, s_z, q, k, v, state, head_row0, tok0, n, e0, map, dw, mw, m_cols);
        cc_state_fetch(st, state, e0, order[0]);  // in flight during P at D ≥ 128
        if (CC_D == 64) cc_state_put(s_st, st);
        __syncthreads();
    }

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int row0 = warp * 16;  // this warp's first row within the chunk
    const cc_u16* a_q = s_q + row0 * CC_LDD;

    // P = q̃ k̃ᵀ (only n-tiles with j ≤ row0 + 15 can be unmasked), masked and decayed in fp32.
    float p[CC_L / 8][4];
    cc_zero(p);
    // Key tiles past this warp's last row (j > row0 + 15) are fully masked: skipped.
    cc_mma_ss<CC_L / 8, CC_D / 16, TRAIN ? CC_KS_UNROLL(CC_D / 16) : 1>(p, a_q, CC_LDD, s_k, CC_LDD, 0,
                                                                      2 * (warp + 1));
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

    // Inter-chunk: λ^{i+1} q̃_i S⁰ (TRAIN: above) and λ^{i+1} q̃_i·z⁰.
    if (!TRAIN) {
        cc_zero(o);
        // The packed state, hi + lo already split by the walk with each tile's power of two:
        // no fp32 staging, block max or split here. D ≥ 128: the tiles through one buffer,
        // o ← o·2^(ex[h] − ex[h−1]) between two (≤ 1, exact but for underflow; in two
        // factors when below 2^−120), so o carries the last tile's scale at the end.
        if (CC_D > 64) {
            __syncthreads();  // every warp's reads of k̃ (P) are done
            cc_state_put(s_st, st);
            __syncthreads();
        }
        cc_mma_packed(o, a_q, s_st, order[0]);
#pragma unroll
        for (int h = 1; h < CC_DT; ++h) {
            // Fetched only now and in two halves (o and P are live: a whole tile in flight
            // spilled at ptxas' 168 registers), for two DRAM latencies per tile.
            uint4 part[CC_PACKED_LOADS / 2];
            cc_state_fetch(part, state, e0, order[h]);
            __syncthreads();  // every warp's reads of the previous tile are done
            cc_state_put(s_st, part);
            cc_state_fetch(part, state, e0, order[h], CC_PACKED_LOADS / 2);
            cc_state_put(s_st, part, CC_PACKED_LOADS / 2);
            __syncthreads();
            const int diff = ex[h] - ex[h - 1], d1 = max(diff, -120);
            if (diff != 0) {
                const float f1 = cc_pow2(d1), f2 = cc_pow2(diff - d1);
#pragma unroll
                for (int nt = 0; nt < CC_TILE / 8; ++nt)
#pragma unroll
                    for (int c = 0; c < 4; ++c) o[nt][c] = o[nt][c] * f1 * f2;
            }
            cc_mma_packed(o, a_q, s_st, order[h]);
        }
        scale = cc_pow2(ex[CC_DT - 1]);
    }
    float qz;
    {
        // lane handles row rl = lane >> 1, half (lane & 1) of D (K feature pairs, NB 16-byte
        // blocks of q̃); the halves are reduced by one shuffle. Half 1 starts 4 blocks on (or K
        // words on, at D = 64): the 8 lanes of a quarter warp (4 rows, row stride ≡ 4 mod 32
        // words) then read 32 distinct banks of s_q, and z⁰'s two blocks are broadcasts (one
        // address per half; at D = 128 the halves' addresses share banks: 2-way, +4 shared
        // wavefronts per token). Four accumulators, chains of K/2 fma. One scalar load per pair
        // and a chain of 2K fma cost cc_forward_train 70 of its 554 µs in the model at
        // (2, 16384, 16, 128).
        const int rl = lane >> 1, half = lane & 1, K = CC_D / 4, NB = K / 4;
        const uint4* qp = (const uint4*)(s_q + (row0 + rl) * CC_LDD) + half * NB;
        const float4* zp = (const float4*)s_z + half * 2 * NB;
        float acc4[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int b = 0; b < NB; ++b) {
            const int blk = (b + 4 * half) & (NB - 1);
            const uint4 x = qp[blk];
            const float4 z0 = zp[2 * blk], z1 = zp[2 * blk + 1];
            acc4[0] += cc_lo(x.x) * z0.x;
            acc4[0] += cc_hi(x.x) * z0.y;
            acc4[1] += cc_lo(x.y) * z0.z;
            acc4[1] += cc_hi(x.y) * z0.w;
            acc4[2] += cc_lo(x.z) * z1.x;
            acc4[2] += cc_hi(x.z) * z1.y;
            acc4[3] += cc_lo(x.w) * z1.z;
            acc4[3] += cc_hi(x.w) * z1.w;
        }
        const float s = (acc4[0] + acc4[1]) + (acc4[2] + acc4[3]);
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
    for (int p = 0; p < CC_TILE / 16; ++p) {  // 4 columns (8 bytes) per lane, cc_quad_swap
        const int e = e0 + p * 16 + cc_quad_col(t);
        cc_store_o_pair<TRAIN>(out, out_lo, normalised, o[2 * p], o[2 * p + 1], inv_lo, inv_hi, p * 16 < m_cols,
                               head_row0, i_lo, n, mw, e);
    }
    if (blockIdx.z == 0 && t == 0) {
        if (i_lo < n) den_out[head_row0 + i_lo] = den_lo;
        if (i_hi < n) den_out[head_row0 + i_hi] = den_hi;
    }
}

// The two forward entry points: one parameter list (cc_forward does not use out_lo), so the
// host has one argument struct.
#define CC_FORWARD_ENTRY(name, BOUNDS, TRAIN)                                                        \
    extern "C" __global__ void BOUNDS                                                                \
    name(const la_storage_t* __restrict__ q, const la_storage_t* __restrict__ k,                     \
         const la_storage_t* __restrict__ v, const float* __restrict__ states,                       \
         la_storage_t* __restrict__ out, la_storage_t* __restrict__ out_lo,                          \
         float* __restrict__ den_out, int n, int num_chunks, float log2_decay, float eps, int map,   \
         int d, int m) {                                                                              \
        cc_forward_body<TRAIN>(q, k, v, states, out, TRAIN ? out_lo : nullptr, den_out, n,           \
                               num_chunks, log2_decay, eps, map, d, m);                              \
    }

// O[:, e0:e0+64] = num/den for one chunk and den (slice 0 writes it), num_i = λ^{i+1} q̃_iᵀS⁰
// + Σ_{j≤i} λ^{i−j}(q̃_i·k̃_j) v_j, den_i = λ^{i+1} q̃_iᵀz⁰ + Σ_{j≤i} λ^{i−j}(q̃_i·k̃_j) + ε
// (identity map: den ≡ 1, not written); `states` holds S⁰ (cc_forward_h, packed). grid (NC,
// B·H, M/64), warp w rows (queries) 16w .. 16w+15; dynamic shared CC_FWD_SMEM (≤ 44.5 KB at
// D ≤ 128, 77.8 KB at 256). 4 CTAs per SM (2 at D = 256, CC_FWD_MIN_CTAS): ≤ 128 registers,
// which ptxas meets by not holding every batched load at once (unbounded it took 178 at
// D = 128). Limits: the file's.
CC_FORWARD_ENTRY(cc_forward, __launch_bounds__(CC_THREADS, CC_FWD_MIN_CTAS), false)

// The forward of a staging the backward follows: O and den as cc_forward, on the fp32 S⁰, z⁰
// of the split walk (cc_forward_h split = 1), which the backward keeps instead of recomputing
// them, and out_lo = O − O_stored, O's rounding residue in storage precision (normalised maps
// only; not written for identity), for the backward's G·O (cc_backward_go). cc_forward's grid;
// dynamic shared CC_TRAIN_SMEM (the fp32 state slice is staged and split here). Limits: the
// file's.
CC_FORWARD_ENTRY(cc_forward_train, CC_TRAIN_BOUNDS, true)
