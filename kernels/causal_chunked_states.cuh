// causal_chunked_states.cuh — pass 1 of the chunked forward: the walks that write each
// chunk's entering state (cc_forward_h, the packed and the split forms). Part of
// causal_chunked.cu's program (see its header for the math and the grid); not compiled alone.
#pragma once

// ---- pass 1: chunk states, one CTA walking the chunks of a head in order -------------------

// The walks run 8 warps per CTA: one CTA per (b·h, 64×64 state tile) is about one CTA per
// SM, and a walk is a chain over every chunk, so its time is one CTA's critical path; 8
// warps (2 per scheduler) halve each warp's share of a chunk against 4.
#define CC_WALK_THREADS 256
#define CC_WALK_WARPS (CC_WALK_THREADS / 32)
// Tile loads: warp w holds feature group w mod 4 (16 features) of the 64-wide tile and
// token groups 8·(4·(w / 4) + s), s < CC_WALK_STEPS (half the chunk).
#define CC_WALK_STEPS (CC_L / 8 / (CC_WALK_WARPS / 4))
static_assert(CC_TILE == 64 && CC_WALK_WARPS == 8, "4 feature groups × 2 token halves");

// e^x for x ≤ 0 (larger x read as 0) as ex2(x·log2 e): cc_ex2's one MUFU.EX2 and an FMUL
// (__expf, 5 SASS instructions, where CC_EX2_FTZ is off; expf takes ~8). In the model φ was
// a third of the walks' time and a fifth of cc_forward's at fla's shapes (elu+1 against
// identity). Error: ≤ 2 ulp of ex2 plus the rounding of x·log2 e (|x|·2^-24 relative): ~6e-7
// at x = −4, where e^x < 0.02, so ≤ 1e-8 absolute on a φ(k) that is stored in 16 bits (or
// hi + lo: ~2^-16 bf16, ~2^-22 fp16); e^x below 2^-126 (x < −87.3) is 0. Against expf the
// check's 136 error figures were 127 unchanged, 9 moved by ≤ 2.2e-5 relative. The other
// forms keep the prelude's expf.
__device__ __forceinline__ float cc_exp_nonpositive(float x) {
#if CC_EX2_FTZ
    return cc_ex2((x > 0.0f ? 0.0f : x) * 1.44269504088896341f);
#else
    return __expf(x > 0.0f ? 0.0f : x);
#endif
}

// φ and φ' without a branch: both sides computed, one selected, so the exp chains of a
// tile's elements can overlap (a branch per element serialised them). la_phi_of_map's and
// la_phi_grad_of_map's values but for the exp (NaN included: exp(NaN) is selected for
// x = NaN).
__device__ __forceinline__ float cc_phi(int map, float x) {
    if (map == LA_MAP_ELU_PLUS_ONE) {
        const float e = cc_exp_nonpositive(x);
        return x > 0.0f ? x + 1.0f : e;
    }
    return la_phi_of_map(map, x);
}

__device__ __forceinline__ float cc_phi_grad(int map, float x) {
    if (map == LA_MAP_ELU_PLUS_ONE) {
        const float e = cc_exp_nonpositive(x);
        return x > 0.0f ? 1.0f : e;
    }
    return la_phi_grad_of_map(map, x);
}

// Raw 16-bit pairs of one 64-token × 64-feature tile, held in registers between the global
// load and the shared store, so the load of chunk c±1 is issued before the work on chunk c
// and its DRAM latency hides behind it. Lane = (fp = lane & 7: features 2fp, 2fp+1 of the
// warp's group, tw = lane >> 3), step s: tokens tg·8 + 2tw and +1 of the warp's token group
// tg (raw[2s], raw[2s+1]); 8 lanes read one 32-byte sector of a token row.
// STEPS = 8 / (warps / 4): 4 in the walks (8 warps), 8 in cc_forward (4 warps: warp w >> 2 = 0
// holds every token group of feature group w).
// `cols`: the columns from col0 that exist (cc_slice_cols); a warp whose feature group lies
// past them loads nothing and holds zeros.
template <int STEPS = CC_WALK_STEPS>
__device__ __forceinline__ void cc_walk_fetch(cc_u32 (&raw)[2 * STEPS],
                                              const la_storage_t* __restrict__ src,
                                              la_index_t head_row0, int tok0, int n, int col0,
                                              int src_cols, int cols) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, fp = lane & 7, tw = lane >> 3;
    const int tok = (warp >> 2) * STEPS * 8 + 2 * tw;  // the lane's first token
    const cc_u32* p = (const cc_u32*)(src + (head_row0 + tok0 + tok) * src_cols + col0 +
                                      (warp & 3) * 16 + 2 * fp);
    const la_index_t row = (la_index_t)src_cols / 2;  // one token row, in pairs
    if ((warp & 3) * 16 >= cols) {  // warp-uniform: a feature group past the row's width
#pragma unroll
        for (int s = 0; s < 2 * STEPS; ++s) raw[s] = 0u;
        return;
    }
    if (tok0 + CC_L <= n) {  // whole chunk (every one but a ragged tail): no bounds
#pragma unroll
        for (int s = 0; s < 2 * STEPS; ++s) raw[s] = p[((s >> 1) * 8 + (s & 1)) * row];
        return;
    }
#pragma unroll
    for (int s = 0; s < 2 * STEPS; ++s) {  // every load issued before any use
        const int r = (s >> 1) * 8 + (s & 1);
        raw[s] = tok0 + tok + r < n ? p[r * row] : 0u;
    }
}

// A lane's fetched pairs (cc_walk_fetch's layout) as fp32, φ = map `phi` applied to the
// tokens < n of the feature groups below `cols` (the rest stay 0, not φ(0)).
template <int STEPS>
__device__ __forceinline__ void cc_walk_unpack(float2 (&x)[2 * STEPS], const cc_u32 (&raw)[2 * STEPS], int tok0,
                                               int n, int cols, int phi) {
    const int warp = threadIdx.x >> 5, tw = (threadIdx.x & 31) >> 3;
    const int tok = (warp >> 2) * STEPS * 8 + 2 * tw;
#pragma unroll
    for (int s = 0; s < 2 * STEPS; ++s) x[s] = make_float2(cc_lo(raw[s]), cc_hi(raw[s]));
    if (phi != LA_MAP_IDENTITY && (warp & 3) * 16 < cols) {
        const bool full = tok0 + CC_L <= n;
#pragma unroll
        for (int s = 0; s < 2 * STEPS; ++s) {
            if (full || tok0 + tok + (s >> 1) * 8 + (s & 1) < n) {  // zero past n, not φ(0)
                x[s].x = cc_phi(phi, x[s].x);
                x[s].y = cc_phi(phi, x[s].y);
            }
        }
    }
}

// The fetched tile transposed into dst[feature][token] (stride CC_LDT) as cc_tile_cols
// stores it: φ = map `phi` (tokens ≥ n stay 0, not φ(0)), times w[token] (W); with LO also
// the rounding residue into dst_lo (hi + lo split). SCALE: each feature row is first scaled
// by its power of two (max over the 64 tokens below 2^14, cc_split_exp: the lanes tw of a
// warp and, through col_max, the warp w ^ 4 hold the rest of its tokens) and 2^−s goes to
// col_unscale[feature]; SCALE has a barrier (every thread calls it). Same values and the
// same bank pattern per store as cc_tile_cols. Every element is converted, mapped and
// weighted before any is stored: independent chains, one after the other in the code.
// `cols` as cc_walk_fetch's: the feature groups past it stay zero (φ(0) = 1 for elu+1).
template <bool LO, bool W, bool SCALE, int STEPS = CC_WALK_STEPS>
__device__ __forceinline__ void cc_walk_put(cc_u16* dst, cc_u16* dst_lo,
                                            const cc_u32 (&raw)[2 * STEPS], int tok0, int n,
                                            int cols, int phi, const float* w, float* col_unscale,
                                            float* col_max) {
    static_assert(!SCALE || STEPS == CC_WALK_STEPS, "SCALE pairs the two token halves of 8 warps");
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, fp = lane & 7, tw = lane >> 3;
    const int f = (warp & 3) * 16 + 2 * fp, tok = (warp >> 2) * STEPS * 8 + 2 * tw;
    float2 x[2 * STEPS];
    cc_walk_unpack<STEPS>(x, raw, tok0, n, cols, phi);
    if (W) {
#pragma unroll
        for (int s = 0; s < 2 * STEPS; ++s) {
            const float ws = w[tok + (s >> 1) * 8 + (s & 1)];
            x[s].x *= ws;
            x[s].y *= ws;
        }
    }
    if (SCALE) {
        float mx = 0.0f, my = 0.0f;
#pragma unroll
        for (int s = 0; s < 2 * STEPS; ++s) {
            mx = fmaxf(mx, fabsf(x[s].x));
            my = fmaxf(my, fabsf(x[s].y));
        }
#pragma unroll
        for (int o = 8; o < 32; o <<= 1) {
            mx = fmaxf(mx, __shfl_xor_sync(LA_FULL_MASK, mx, o));
            my = fmaxf(my, __shfl_xor_sync(LA_FULL_MASK, my, o));
        }
        if (tw == 0) {  // this warp's half of the tokens
            col_max[(warp >> 2) * CC_TILE + f] = mx;
            col_max[(warp >> 2) * CC_TILE + f + 1] = my;
        }
        __syncthreads();
        const int other = (1 - (warp >> 2)) * CC_TILE;
        mx = fmaxf(mx, col_max[other + f]);
        my = fmaxf(my, col_max[other + f + 1]);
        const int ex = cc_split_exp(mx), ey = cc_split_exp(my);
        const float sx = cc_pow2(ex), sy = cc_pow2(ey);
        if (tw == 0 && warp < 4) {
            col_unscale[f] = cc_pow2(-ex);
            col_unscale[f + 1] = cc_pow2(-ey);
        }
#pragma unroll
        for (int s = 0; s < 2 * STEPS; ++s) {
            x[s].x *= sx;
            x[s].y *= sy;
        }
    }
#pragma unroll
    for (int s = 0; s < STEPS; ++s)
        cc_tile_cols_block<LO>(dst, dst_lo, f, tok + 8 * s, x[2 * s], x[2 * s + 1], fp >= 4);
}

// k̃ᵀ weighted by w[j] = λ^{L−1−j} as cc_walk_put<false, true, false> stores it, λ given as
// log2_decay: at λ = 1 every weight is 1, and the unweighted put stores the same bits without
// loading them (cc_seg_sums, cc_forward_h's unsplit walk; a null test of w inside
// cc_walk_put made cc_backward_h, which shares it, 5–9% longer).
__device__ __forceinline__ void cc_walk_put_keys(cc_u16* dst, const cc_u32 (&raw)[2 * CC_WALK_STEPS], int tok0,
                                                 int n, int cols, int phi, const float* w, float log2_decay) {
    if (log2_decay != 0.0f)
        cc_walk_put<false, true, false>(dst, nullptr, raw, tok0, n, cols, phi, w, nullptr, nullptr);
    else
        cc_walk_put<false, false, false>(dst, nullptr, raw, tok0, n, cols, phi, nullptr, nullptr, nullptr);
}

// acc[n] += A·B for this warp's 16 rows of A (16-bit [m][k], stride CC_LDT) and the 4
// n-tiles of B (16-bit [n][k]) at `b`, over the chunk's 4 k-steps: each k-step's fragments
// are all loaded before its 4 mma's (cc_mma_ss loads B per mma; the walk has no other warps
// to cover the wait). The same sums in the same order as cc_mma_ss. ONES and `ones_on`
// (warp-uniform): also ones[n] += 1·B with an all-ones A: every row of it is Σ_k B[n][k],
// the row sums of B (z of the forward walk) from the fragments already loaded.
template <bool ONES>
__device__ __forceinline__ void cc_walk_mma(float (&acc)[4][4], float (&ones)[4][4], bool ones_on,
                                            const cc_u16* a, const cc_u16* b) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const cc_u32 one = cc_pack(1.0f, 1.0f);
    const cc_u32 one_a[4] = {one, one, one, one};
#pragma unroll
    for (int ks = 0; ks < CC_L / 16; ++ks) {
        cc_u32 af[4], bf[4][2];
        cc_load_a(af, a, CC_LDT, ks);
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
            const cc_u16* p = b + (nt * 8 + g) * CC_LDT + ks * 16 + 2 * t;
            bf[nt][0] = *(const cc_u32*)p;
            bf[nt][1] = *(const cc_u32*)(p + 8);
        }
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) cc_mma(acc[nt], af, bf[nt][0], bf[nt][1]);
        if (ONES && ones_on) {
#pragma unroll
            for (int nt = 0; nt < 4; ++nt) cc_mma(ones[nt], one_a, bf[nt][0], bf[nt][1]);
        }
    }
}

__device__ __forceinline__ void cc_walk_mma(float (&acc)[4][4], const cc_u16* a, const cc_u16* b) {
    cc_walk_mma<false>(acc, acc, false, a, b);
}

// Stores a warp's 16 rows × 8·NT columns of fp32 accumulators at rows row0 + g (+8), columns
// col0 + 8nt + 2t of a [.][cols] fp32 matrix: one 8-byte store per fragment pair, the 4 lanes
// t of a quad filling one 32-byte sector.
template <int NT = 4>
__device__ __forceinline__ void cc_walk_store(float* __restrict__ dst, const float (&x)[NT][4], int row0,
                                              int col0, int cols) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    float* p = dst + (la_index_t)(row0 + g) * cols + col0 + 2 * t;
    // st.global.v2 in the PTX: NVVM split the float2 stores of this loop into scalar pairs
    // that ptxas cannot prove 8-aligned (half of each sector per request).
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        asm volatile("st.global.v2.f32 [%0], {%1, %2};" ::"l"(p + nt * 8), "f"(x[nt][0]), "f"(x[nt][1])
                     : "memory");
        asm volatile("st.global.v2.f32 [%0], {%1, %2};" ::"l"(p + (la_index_t)8 * cols + nt * 8),
                     "f"(x[nt][2]), "f"(x[nt][3])
                     : "memory");
    }
}

// cc_walk_store in the packed form: x·2^ex split hi + lo into the 16-byte records of
// CC_STATE_STRIDE's comment (a warp's 32 columns are k-steps 2 of them; the lanes t of a
// quad write one row's 64 contiguous bytes of a k-step pair).
__device__ __forceinline__ void cc_walk_store_packed(float* __restrict__ dst, const float (&x)[4][4],
                                                     int row0, int col0, int ex) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const float sc = cc_pow2(ex);
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int k = 0; k < 2; ++k) {
            const float a0 = x[2 * k][2 * h] * sc, a1 = x[2 * k][2 * h + 1] * sc;
            const float b0 = x[2 * k + 1][2 * h] * sc, b1 = x[2 * k + 1][2 * h + 1] * sc;
            const uint4 r = cc_pack_record(a0, a1, b0, b1);
            float* p = dst + (la_index_t)(row0 + g + 8 * h) * CC_D + col0 + 16 * k + 4 * t;
            asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(r.x), "r"(r.y), "r"(r.z),
                         "r"(r.w)
                         : "memory");
        }
}

// Max |x| over a lane's 16 accumulators, as a tree (4 dependent steps, not 16).
__device__ __forceinline__ float cc_walk_max(const float (&x)[4][4]) {
    float m[4];
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
        m[nt] = fmaxf(fmaxf(fabsf(x[nt][0]), fabsf(x[nt][1])), fmaxf(fabsf(x[nt][2]), fabsf(x[nt][3])));
    return fmaxf(fmaxf(m[0], m[1]), fmaxf(m[2], m[3]));
}

// run ← run · λ^L + Δ, element by element: the recurrence over chunks, fp32, as one fma
// (the form the separate scan had, so the states are the same bits).
__device__ __forceinline__ void cc_walk_step(float (&run)[4][4], const float (&delta)[4][4], float chunk_decay) {
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int c = 0; c < 4; ++c) run[nt][c] = __fmaf_rn(run[nt][c], chunk_decay, delta[nt][c]);
}

#define CC_WALK_SMEM (3 * CC_TILE * CC_LDT * 2)

// cc_row_grad_terms split for the reverse walk: thread r < 64 fetches token tok0 + r's den
// and G·O partials a chunk ahead (cc_walk_fetch_terms), then writes −G·O and the weight
// λ^r/den of its token (cc_walk_put_terms): the same values as cc_row_grad_terms and a
// weight loop after it, without a DRAM wait per chunk.
struct cc_walk_terms {
    cc_go_t go;
    float den;
};

__device__ __forceinline__ cc_walk_terms cc_walk_fetch_terms(const float* __restrict__ go_parts,
                                                            const float* __restrict__ den,
                                                            la_index_t head_row0, int tok0, int n,
                                                            int map) {
    cc_walk_terms x = {};
    const int i = tok0 + threadIdx.x;
    if (threadIdx.x < CC_L && i < n && cc_normalised(map)) {
        const la_index_t tok = head_row0 + i;
        x.go = *(const cc_go_t*)(go_parts + tok * CC_MT);  // every partial, one load
        x.den = den[tok];
    }
    return x;
}

__device__ __forceinline__ void cc_walk_put_terms(float* neg_go, float* w, cc_walk_terms x,
                                                  int tok0, int n, int map, float log2_decay) {
    const int r = threadIdx.x;
    if (r >= CC_L) return;
    float inv = 0.0f, ngo = 0.0f;
    if (tok0 + r < n && !cc_normalised(map)) {
        inv = 1.0f;
    } else if (tok0 + r < n) {
        const float dot = cc_go_sum(x.go);
        inv = 1.0f / x.den;
        ngo = -dot;
    }
    neg_go[r] = ngo;
    w[r] = cc_pow(log2_decay, (float)r) * inv;
}

// states[bh][c] ← S⁰_c, z⁰_c for every chunk c: Sᵀ[e][d] = Σ_{c'<c} λ^{L(c−1−c')} ΔSᵀ_{c'},
// ΔSᵀ_c[e][d] = Σ_j λ^{L−1−j} v_j[e] k̃_j[d], z likewise (SPEC §3; fla's chunk_h without
// its bf16 state). One CTA per (d-tile, b·h, e-tile) walks the chunks in order, the running
// 64×64 fp32 state slice in registers (mma fragment layout, 16 per thread), and writes each
// chunk's entering state once: the state buffer is written once and never re-read here (the
// per-chunk pass + exclusive scan wrote it, read it and wrote it again). Chunk c's k, v are
// fetched into registers during chunk c−1 (cc_walk_fetch); the last chunk is only written.
// ΔS_c is accumulated from zero and added as run·λ^L + ΔS in fp32 (not accumulated into the
// running state by the mma): the same S⁰ bits as the per-chunk pass and the scan gave. Δz
// is the row sums of the same k̃ operand(s), by the tensor cores (an all-ones A) where a
// CUDA-core dot product summed them before: another summation order, fp32 either way.
// split ≠ 0 (the training forward's S⁰, z⁰, kept for the backward): the weighted k̃ operand is split hi + lo, both 16-bit,
// two mma's per product, so S⁰ and z⁰ carry ~16 (bf16) / ~22 (fp16) bits of k̃ instead of 8 /
// 11: in dQ, λ^{i+1}(gn S⁰ᵀ + gd z⁰) cancels against the intra term, and the rounding of k̃
// in S⁰ was (after gd from the fp32 O) the largest error of bf16 dQ: 2.8e-3 → 1.75e-3 at
// N = 1000, against 1.66e-3 for rounding the exact dQ to bf16. split = 0 (the inference forward): hi
// only; O's error there is its bf16 storage either way.
// packed ≠ 0 (the forward, for cc_forward): S⁰ in the packed form of CC_STATE_STRIDE's
// comment, split with the tile's power of two (its max from every warp through shared memory,
// at the barrier the chunk had anyway), so cc_forward needs neither the fp32 tile in shared
// memory nor a block max; packed = 0: fp32 (cc_forward_train and cc_backward_dq read it).
// grid (D/64, B·H, M/64), CC_WALK_THREADS; warp w rows (values e) 16(w mod 4) .. +15 of the
// e-tile, columns (features d) 32(w / 4) .. +31 of the d-tile; warps 0 and 4 of e-tile 0
// also run z of their columns (an all-ones mma); dynamic shared CC_WALK_SMEM. Limits: the
// file's; the walk is sequential in NC = ⌈N/64⌉ (B·H·D·M/4096 CTAs).
extern "C" __global__ void __launch_bounds__(CC_WALK_THREADS)
cc_forward_h(const la_storage_t* __restrict__ k, const la_storage_t* __restrict__ v,
             float* __restrict__ states, int split, int packed, int n, int num_chunks,
             float log2_decay, float chunk_decay, int map, int d, int m) {
    extern __shared__ __align__(16) unsigned char cc_smem[];
    cc_u16* s_vt = (cc_u16*)cc_smem;              // [64 e][LDT]
    cc_u16* s_kt = s_vt + CC_TILE * CC_LDT;       // [64 d][LDT], weighted k̃ (hi)
    cc_u16* s_kt_lo = s_kt + CC_TILE * CC_LDT;    // [64 d][LDT], its residue (split)
    __shared__ float s_w[CC_L];
    // The packed form's tile max, as the int bits of a non-negative float (ordered alike): a
    // shared atomicMax per lane into slot chunk & 1, read after the next chunk's first barrier
    // (a warp shuffle tree put 5 shuffle latencies on the walk's critical path per chunk).
    __shared__ int s_tile_max[2];

    const int d0 = blockIdx.x * CC_TILE, bh = blockIdx.y, e0 = blockIdx.z * CC_TILE;
    const int dw = cc_width<CC_D>(d), mw = cc_width<CC_M>(m);  // row widths of k, v
    const int d_cols = cc_slice_cols<CC_D>(dw, d0), m_cols = cc_slice_cols<CC_M>(mw, e0);
    const la_index_t head_row0 = (la_index_t)bh * n;
    const int warp = threadIdx.x >> 5, rows = (warp & 3) * 16, cols = (warp >> 2) * 32;
    for (int j = threadIdx.x; j < CC_L; j += CC_WALK_THREADS)
        s_w[j] = cc_pow(log2_decay, (float)(CC_L - 1 - j));  // read after the loop's first barrier

    // z by the tensor cores: warps 0 and 4 of e-tile 0 (d columns 0..31, 32..63) multiply an
    // all-ones A into the k̃ fragments they load anyway; lanes t of row g = 0 keep z for
    // columns 8nt + 2t, +1 (a 64-step dot product per thread cost the walk a fifth of its
    // time in the model).
    const int lane_g = (threadIdx.x & 31) >> 2, lane_t = threadIdx.x & 3;
    const bool z_warp = blockIdx.z == 0 && (warp & 3) == 0;
    float run[4][4], z_run[4][2];
    cc_zero(run);
    if (threadIdx.x < 2) s_tile_max[threadIdx.x] = 0;  // S⁰_0 = 0; read after a barrier
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) z_run[nt][0] = z_run[nt][1] = 0.0f;
    cc_u32 raw_v[2 * CC_WALK_STEPS], raw_k[2 * CC_WALK_STEPS];
    if (num_chunks > 1) {
        cc_walk_fetch(raw_v, v, head_row0, 0, n, e0, mw, m_cols);
        cc_walk_fetch(raw_k, k, head_row0, 0, n, d0, dw, d_cols);
    }
    for (int chunk = 0;; ++chunk) {
        float* dst = states + ((la_index_t)bh * num_chunks + chunk) * CC_STATE_STRIDE;
        if (packed) {
            // S⁰_c's tile max: every lane's atomicMax after chunk c−1's step, into slot
            // (c−1) & 1 = (c+1) & 1. This barrier also ends the last chunk's reads of the tiles
            // and of slot c & 1, which is cleared for this chunk's maxima (their atomics follow
            // the next barrier). The split and its stores here cost the walk 22% in the model
            // at (8, 1024, 8, 64); issued after the chunk's mma's they held ptxas to 1 CTA/SM.
            __syncthreads();
            const int ex = cc_split_exp(__int_as_float(s_tile_max[(chunk + 1) & 1]));
            if (threadIdx.x == 0) s_tile_max[chunk & 1] = 0;
            cc_walk_store_packed(dst, run, e0 + rows, d0 + cols, ex);
            if (threadIdx.x == 0) cc_state_exp(dst)[blockIdx.z * CC_DT + blockIdx.x] = ex;
        } else {
            cc_walk_store(dst, run, e0 + rows, d0 + cols, CC_D);
        }
        if (z_warp && lane_g == 0) {
            float* zp = dst + (la_index_t)CC_D * CC_M + d0 + cols + 2 * lane_t;
#pragma unroll
            for (int nt = 0; nt < 4; ++nt)
                asm volatile("st.global.v2.f32 [%0], {%1, %2};" ::"l"(zp + nt * 8), "f"(z_run[nt][0]),
                             "f"(z_run[nt][1])
                             : "memory");
        }
        if (chunk + 1 == num_chunks) break;

        if (!packed) __syncthreads();  // the previous chunk's reads of the tiles are done
        cc_walk_put<false, false, false>(s_vt, nullptr, raw_v, chunk * CC_L, n, m_cols, LA_MAP_IDENTITY,
                                         nullptr, nullptr, nullptr);
        if (split)
            cc_walk_put<true, true, false>(s_kt, s_kt_lo, raw_k, chunk * CC_L, n, d_cols, map, s_w, nullptr,
                                           nullptr);
        else
            cc_walk_put_keys(s_kt, raw_k, chunk * CC_L, n, d_cols, map, s_w, log2_decay);
        __syncthreads();
        if (chunk + 2 < num_chunks) {  // the next chunk's k, v, in flight during this one
            cc_walk_fetch(raw_v, v, head_row0, (chunk + 1) * CC_L, n, e0, mw, m_cols);
            cc_walk_fetch(raw_k, k, head_row0, (chunk + 1) * CC_L, n, d0, dw, d_cols);
        }
        float acc[4][4], z[4][4];
        cc_zero(acc);
        cc_zero(z);
        cc_walk_mma<true>(acc, z, z_warp, s_vt + rows * CC_LDT, s_kt + cols * CC_LDT);
        if (split) cc_walk_mma<true>(acc, z, z_warp, s_vt + rows * CC_LDT, s_kt_lo + cols * CC_LDT);
        cc_walk_step(run, acc, chunk_decay);
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
            z_run[nt][0] = __fmaf_rn(z_run[nt][0], chunk_decay, z[nt][0]);
            z_run[nt][1] = __fmaf_rn(z_run[nt][1], chunk_decay, z[nt][1]);
        }
        if (packed) atomicMax(&s_tile_max[chunk & 1], __float_as_int(cc_walk_max(run)));
    }
}

// Δr's partial sums for the reverse walk: Σ_i w_i (hi + lo)[d][i] over a quarter of the chunk,
// thread x = (d = x mod 64, part = x / 64: tokens 16·part .. +15), the hi and lo tiles in two
// accumulators (chains of 16 fma where one thread per d ran 128). A thread's 16 tokens are
// 32 contiguous bytes of its row in each tile: two 16-byte loads per tile, and its 16
// weights four (the same for the 64 lanes of a part: a broadcast). The 8 lanes of a quarter
// warp read rows d .. d+7 at 36d words (CC_LDT/2 ≡ 4 mod 32): banks 4d .. 4d+3, all 32
// distinct. Scalar loads rotated by d >> 3 against the same conflict took 24 loads and their
// address arithmetic per thread; in the model Δr then cost the reverse walk ~120 of its
// ~500 µs at (2, 16384, 16, 128), in e-tile 0, its slowest CTAs.
static_assert(CC_WALK_THREADS == 4 * CC_TILE, "four token quarters per feature row");
static_assert(CC_LDT * 2 % 16 == 0, "16-byte aligned rows");
__device__ __forceinline__ float cc_walk_r_part(const cc_u16* hi, const cc_u16* lo, const float* w) {
    const int d = threadIdx.x & (CC_TILE - 1), part = threadIdx.x / CC_TILE;
    const uint4* ph = (const uint4*)(hi + d * CC_LDT + 16 * part);
    const uint4* pl = (const uint4*)(lo + d * CC_LDT + 16 * part);
    const float4* pw = (const float4*)(w + 16 * part);
    const uint4 h0 = ph[0], h1 = ph[1], l0 = pl[0], l1 = pl[1];
    const float4 w0 = pw[0], w1 = pw[1], w2 = pw[2], w3 = pw[3];
    const cc_u32 xh[8] = {h0.x, h0.y, h0.z, h0.w, h1.x, h1.y, h1.z, h1.w};
    const cc_u32 xl[8] = {l0.x, l0.y, l0.z, l0.w, l1.x, l1.y, l1.z, l1.w};
    const float wt[16] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w,
                          w2.x, w2.y, w2.z, w2.w, w3.x, w3.y, w3.z, w3.w};
    float s_hi = 0.0f, s_lo = 0.0f;
#pragma unroll
    for (int m = 0; m < 8; ++m) {
        s_hi += cc_lo(xh[m]) * wt[2 * m];
        s_hi += cc_hi(xh[m]) * wt[2 * m + 1];
        s_lo += cc_lo(xl[m]) * wt[2 * m];
        s_lo += cc_hi(xl[m]) * wt[2 * m + 1];
    }
    return s_hi + s_lo;
}

// Backward: states[bh][c] ← R⁰_c, r⁰_c, the state entering chunk c from the right:
// R⁰_c = Σ_{c'>c} λ^{L(c'−c−1)} ΔR_{c'}, ΔR_c[d][e] = Σ_i λ^i q̃_i[d] gn_i[e] and
// Δr_c[d] = Σ_i λ^i q̃_i[d] gd_i, computed as Σ_i (λ^i/den_i) q̃_i[d] · (G_i[e] | −G_i·O_i)
// (fla's chunk_bwd_dh). The weight λ^i/den_i runs along the mma's k dim (tokens), so it is
// folded into the q̃ operand, and every feature row d of that operand is scaled by its own
// power of two before the 16-bit rounding (cc_walk_put SCALE): den grows ~N, and unscaled
// the weighted q̃ sank into fp16 subnormals (dK, dV lost precision as N grew). The operand
// is split hi + lo (two mma's). Row d of ΔR and Δr[d] are multiplied back in fp32, then
// added to the running state: run ← run·λ^L + ΔR (the bits of the former pass + scan).
// One CTA per (d-tile, b·h, e-tile) walks the chunks from the last to the first, the running
// 64×64 fp32 state slice in registers, and writes each chunk's R⁰ once; chunk c's q, G are
// fetched during chunk c+1. grid (D/64, B·H, M/64), CC_WALK_THREADS; warp w rows (features
// d) 16(w mod 4) .. +15, columns (values e) 32(w / 4) .. +31; in e-tile 0 every thread also
// sums a quarter of Δr[d] (cc_walk_r_part) and thread d < 64 runs r[d0 + d] from the four
// (one more barrier per chunk there); dynamic shared CC_WALK_SMEM. Limits: the file's.
// Launch bounds with a minimum of 1 CTA: without it ptxas held the walk to 128 registers and
// spilled 4–12 B (there is about one walk CTA per SM: occupancy does not bound it).
extern "C" __global__ void __launch_bounds__(CC_WALK_THREADS, 1)
cc_backward_h(const la_storage_t* __restrict__ q, const la_storage_t* __restrict__ grad,
              const float* __restrict__ go_parts, const float* __restrict__ den,
              float* __restrict__ states, int n, int num_chunks, float log2_decay,
              float chunk_decay, int map, int d, int m) {
    extern __shared__ __align__(16) unsigned char cc_smem[];
    cc_u16* s_qt = (cc_u16*)cc_smem;              // [64 d][LDT], weighted λ^i/den_i, row-scaled (hi)
    cc_u16* s_qt_lo = s_qt + CC_TILE * CC_LDT;    // [64 d][LDT], its residue
    cc_u16* s_gt = s_qt_lo + CC_TILE * CC_LDT;    // [64 e][LDT], G
    __shared__ float s_w[CC_L], s_unscale[CC_TILE], s_col_max[2 * CC_TILE];
    // −G·O per token, read as float4 (cc_walk_r_part), one buffer per chunk parity: chunk c's
    // Δr partials are summed after the next chunk's first barrier, so its weights are written
    // while slower warps may still read these.
    __shared__ __align__(16) float s_neg_go[2][CC_L];
    __shared__ float s_r_part[CC_WALK_THREADS];     // Δr's partial sums (e-tile 0)

    const int d0 = blockIdx.x * CC_TILE, bh = blockIdx.y, e0 = blockIdx.z * CC_TILE;
    const int dw = cc_width<CC_D>(d), mw = cc_width<CC_M>(m);  // row widths of q, G
    const int d_cols = cc_slice_cols<CC_D>(dw, d0), m_cols = cc_slice_cols<CC_M>(mw, e0);
    const la_index_t head_row0 = (la_index_t)bh * n;
    const int warp = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2;
    const int rows = (warp & 3) * 16, cols = (warp >> 2) * 32;
    const bool r_thread = blockIdx.z == 0 && threadIdx.x < CC_TILE;
    float run[4][4], r_run = 0.0f;
    cc_zero(run);
    cc_u32 raw_q[2 * CC_WALK_STEPS], raw_g[2 * CC_WALK_STEPS];
    cc_walk_terms terms = {};
    if (num_chunks > 1) {
        cc_walk_fetch(raw_q, q, head_row0, (num_chunks - 1) * CC_L, n, d0, dw, d_cols);
        cc_walk_fetch(raw_g, grad, head_row0, (num_chunks - 1) * CC_L, n, e0, mw, m_cols);
        terms = cc_walk_fetch_terms(go_parts, den, head_row0, (num_chunks - 1) * CC_L, n, map);
    }
    for (int chunk = num_chunks - 1;; --chunk) {
        float* dst = states + ((la_index_t)bh * num_chunks + chunk) * CC_STATE_STRIDE;
        cc_walk_store(dst, run, d0 + rows, e0 + cols, CC_M);
        const int tok0 = chunk * CC_L;
        float* neg_go = s_neg_go[chunk & 1];
        // No barrier before the weights: the previous chunk read s_w before its last barrier
        // below, and the other buffer of s_neg_go is the one its Δr partials read.
        if (chunk > 0) cc_walk_put_terms(neg_go, s_w, terms, tok0, n, map, log2_decay);
        // The weights; the previous chunk's reads of the tiles are done; its Δr partials (and
        // its s_unscale, rewritten only in cc_walk_put below) are visible.
        __syncthreads();
        if (r_thread) {  // r⁰_c = λ^L r⁰_{c+1} + Δr_{c+1}: the previous chunk's partials
            const int d = threadIdx.x;
            if (chunk + 1 < num_chunks) {
                const float r = ((s_r_part[d] + s_r_part[d + CC_TILE]) + s_r_part[d + 2 * CC_TILE]) +
                                s_r_part[d + 3 * CC_TILE];
                r_run = __fmaf_rn(r_run, chunk_decay, r * s_unscale[d]);
            }
            dst[(la_index_t)CC_D * CC_M + d0 + d] = r_run;
        }
        if (chunk == 0) break;

        cc_walk_put<true, true, true>(s_qt, s_qt_lo, raw_q, tok0, n, d_cols, map, s_w, s_unscale,
                                      s_col_max);
        cc_walk_put<false, false, false>(s_gt, nullptr, raw_g, tok0, n, m_cols, LA_MAP_IDENTITY, nullptr,
                                         nullptr, nullptr);
        __syncthreads();
        if (chunk > 1) {  // the previous chunk's q, G, in flight during this one
            cc_walk_fetch(raw_q, q, head_row0, tok0 - CC_L, n, d0, dw, d_cols);
            cc_walk_fetch(raw_g, grad, head_row0, tok0 - CC_L, n, e0, mw, m_cols);
            terms = cc_walk_fetch_terms(go_parts, den, head_row0, tok0 - CC_L, n, map);
        }
        float acc[4][4];
        cc_zero(acc);
        cc_walk_mma(acc, s_qt + rows * CC_LDT, s_gt + cols * CC_LDT);
        cc_walk_mma(acc, s_qt_lo + rows * CC_LDT, s_gt + cols * CC_LDT);
        // Δr's partials in the shadow of the mma's (e-tile 0), summed after the next chunk's
        // first barrier: ahead of the mma's and behind a barrier of their own they held the
        // walk's slowest CTAs ~30 µs longer in the model at (2, 16384, 16, 128).
        if (blockIdx.z == 0) s_r_part[threadIdx.x] = cc_walk_r_part(s_qt, s_qt_lo, neg_go);
        const float u_lo = s_unscale[rows + g], u_hi = s_unscale[rows + g + 8];
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
            acc[nt][0] *= u_lo; acc[nt][1] *= u_lo;
            acc[nt][2] *= u_hi; acc[nt][3] *= u_hi;
        }
        cc_walk_step(run, acc, chunk_decay);
    }
}
