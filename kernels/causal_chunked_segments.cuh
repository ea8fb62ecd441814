// causal_chunked_segments.cuh — the segmented forward: cc_forward_seg (inference: no state
// per chunk in memory) and cc_forward_seg_train (a backward follows: it also keeps every
// chunk's state), and the pieces they share with pass 1 (causal_chunked_seg_sums.cuh). Part of
// causal_chunked.cu's program (see its header for the math and the grid); not compiled alone.
#pragma once

// ---- the segmented forward ------------------------------------------------------------------
//
// Segments of seg_chunks (BS) chunks (the host picks BS per shape; with one segment it
// launches 3 alone).
//   1. cc_seg_sums: one CTA per (segment, b·h, M/64 slice) sums its segment's chunks from a
//      zero state, ΔS_s = Σ_{c∈s} λ^{L(BS−1−c')} ΔS_c, z likewise (fp32; all segments at
//      once, not a chain over NC as cc_forward_h's walk).
//   2. cc_seg_scan turns the per-segment sums into S⁰, z⁰ of every segment:
//      S⁰_0 = 0, S⁰_{s+1} = λ^{L·BS} S⁰_s + ΔS_s (a chain over NC/BS, one thread per element).
//   3. cc_forward_seg: one CTA per (segment, b·h, 64-wide slice of M) carries S⁰ through
//      its segment's chunks in registers, computing O and den of each chunk as cc_forward
//      does, then S ← λ^L S + ΔS_c on the tensor cores.
// Training: cc_seg_sums_train, the scan, cc_forward_seg_train, with k̃ split hi + lo in every
// state step, also writing each chunk's S⁰, z⁰ and O's residue (what cc_forward_h split +
// cc_forward_train keep for the backward, in one pass over q, k, v).
// DRAM per token (D = M = 128, bf16, BS = 16): k, v 512 + sums 65 (1), 129 (2), q, k, v 768,
// S⁰ 65, O 256, den 4 (3): ~1800 B where the per-chunk states cost 3602 (1024 is the minimum).
// Training adds the kept states (1032) and O's residue (256) in 3.

// cc_forward_seg holds a 64 × D fp32 state slice in registers: programs with CC_D ≤ 128 only
// (the host takes cc_forward_h + cc_forward at D = 256).
#if CC_D <= 128
#define CC_SEG_THREADS 256
#define CC_SEG_NT (CC_D / 16)  // n-tiles of a warp's half of the state's D columns
// Value slices per cc_forward_seg CTA. At D = M = 128 on sm_90 one CTA of blockDim (256, 2)
// takes both 64-wide slices of M, threadIdx.y the slice: the 8 warps of a slice do what a
// one-slice CTA does, but q̃, k̃ and the weighted k̃ᵀ are staged once for both, each slice
// fetching and mapping one of the two 64-wide feature tiles (with a CTA per slice, every CTA
// fetched, mapped and stored all of q and k: ~40% of cc_forward_seg's SASS at
// (2, 16384, 16, 128), done twice per token). Same warps per SM (512 threads at 128
// registers: one CTA), 141 KB of shared memory. Elsewhere one slice per CTA: sm_80 spilled at
// 128 registers at D = 128 (CC_SEG_MIN_CTAS), sm_86/89 have 99 KB. The host mirrors this
// rule (SegmentPlan::slices_per_cta); LINATTN_CC_SEG_SLICES=1 compiles the program with
// CC_SEG_SLICES 1 (one slice per CTA everywhere, as measured on the H100 on 2026-11-27).
#ifndef CC_SEG_SLICES
#if CC_D == 128 && CC_M == 128 && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define CC_SEG_SLICES 2
#else
#define CC_SEG_SLICES 1
#endif
#endif
static_assert(CC_SEG_SLICES == 1 || (CC_SEG_SLICES == 2 && CC_DT == 2 && CC_M == 128),
              "two slices share D's two feature tiles and cover M = 128");
#define CC_SEG_DT (CC_DT / CC_SEG_SLICES)  // feature tiles of q, k a slice fetches and stages
// q̃, k̃ (natural) and the weighted k̃ᵀ, shared by the slices; per slice the v slice ᵀ, the
// packed Sᵀ slice (D/64 tiles of 64 × 16 records, cc_state_put's layout), z, z's records.
#define CC_SEG_SHARED_TILES (2 * CC_L * CC_LDD * 2 + CC_D * CC_LDT * 2)
#define CC_SEG_SLICE_SMEM (CC_TILE * CC_LDT * 2 + CC_TILE * CC_D * 4 + 2 * CC_D * 4 + CC_DT * 2 * 16 * 16)
#define CC_SEG_SMEM (CC_SEG_SHARED_TILES + CC_SEG_SLICES * CC_SEG_SLICE_SMEM)

// The training split's residue tile of the weighted k̃ᵀ (cc_seg_sums_train, cc_forward_seg_train):
// [D][64 tokens] 16-bit as 32-bit words of token pairs, rows unpadded (cc_forward_seg_train's
// shared memory holds two CTAs per SM on sm_90 with 16 KB more at D = 128, not with the
// padded 18 KB), word w of row f at w ^ 4(f & 7): the state step's fragment loads (rows g,
// words 8ks + t (+4)) and cc_seg_put's stores (feature rows 2fp (+1, odd first for fp ≥ 4),
// words tw + 4s) each hit 32 banks.
__device__ __forceinline__ int cc_seg_lo_word(int f, int w) { return f * (CC_L / 2) + (w ^ ((f & 7) << 2)); }

// A fetched tile (cc_walk_fetch, 8 warps) after φ as natural rows [token][feature] (NAT:
// stride CC_LDD: q̃, k̃ for P = q̃k̃ᵀ) and, unless tr is null (q̃), transposed and weighted by
// w[token], k̃wᵀ[feature][token] (stride CC_LDT, for ΔSᵀ = vᵀ·k̃w), with LO also its rounding
// residue into tr_lo (cc_seg_lo_word's layout: the training forward's split k̃); φ once.
// f0: the tile's first feature. (A template flag in place of the null test of tr spilled 48 B
// at D = 128, M = 64 on sm_90.) Natural stores: a lane's two feature values of a token as one
// 32-bit word; the 32 lanes of a store hit rows 2tw (+ 8s) at stride CC_LDD/2 ≡ 4 mod 32
// words, plus fp: 32 banks.
template <bool NAT = true, bool LO = false>
__device__ __forceinline__ void cc_seg_put(cc_u16* nat, cc_u16* tr, cc_u32* tr_lo,
                                           const cc_u32 (&raw)[2 * CC_WALK_STEPS], int f0, int tok0, int n,
                                           int cols, int phi, const float* w) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, fp = lane & 7, tw = lane >> 3;
    const int f = (warp & 3) * 16 + 2 * fp, tok = (warp >> 2) * CC_WALK_STEPS * 8 + 2 * tw;
    float2 x[2 * CC_WALK_STEPS];
    cc_walk_unpack<CC_WALK_STEPS>(x, raw, tok0, n, cols, phi);
    if (NAT) {
#pragma unroll
        for (int s = 0; s < 2 * CC_WALK_STEPS; ++s) {
            const int r = tok + (s >> 1) * 8 + (s & 1);
            *(cc_u32*)(nat + r * CC_LDD + f0 + f) = cc_pack(x[s].x, x[s].y);
        }
    }
    if (!tr) return;
#pragma unroll
    for (int s = 0; s < 2 * CC_WALK_STEPS; ++s) {
        const float ws = w[tok + (s >> 1) * 8 + (s & 1)];
        x[s].x *= ws;
        x[s].y *= ws;
    }
#pragma unroll
    for (int s = 0; s < CC_WALK_STEPS; ++s)
        cc_tile_cols_block<false>(tr + f0 * CC_LDT, nullptr, f, tok + 8 * s, x[2 * s], x[2 * s + 1], fp >= 4);
    if (!LO) return;
    const bool odd = fp >= 4;  // as cc_tile_cols_block: the odd feature row first
#pragma unroll
    for (int s = 0; s < CC_WALK_STEPS; ++s) {
        const float2 r0 = x[2 * s], r1 = x[2 * s + 1];  // tokens tok + 8s and + 1
        const int w = (tok + 8 * s) >> 1;
        const float a0 = odd ? r0.y : r0.x, a1 = odd ? r1.y : r1.x;
        const float b0 = odd ? r0.x : r0.y, b1 = odd ? r1.x : r1.y;
        tr_lo[cc_seg_lo_word(f0 + f + odd, w)] = cc_residue(a0, a1, cc_pack(a0, a1));
        tr_lo[cc_seg_lo_word(f0 + f + !odd, w)] = cc_residue(b0, b1, cc_pack(b0, b1));
    }
}

// The tiles of chunk tok0 / 64 into registers: q, k (DT feature tiles each, from tile h0)
// and the v slice at e0, as cc_walk_fetch lays them out for 8 warps. cc_seg_sums: every
// feature tile of k; cc_forward_seg: a slice's CC_SEG_DT tiles of q and k.
template <int DT>
struct cc_seg_raw {
    cc_u32 q[DT][2 * CC_WALK_STEPS], k[DT][2 * CC_WALK_STEPS], v[2 * CC_WALK_STEPS];
};

// QZ: q; KV: k and v (cc_forward_seg issues k, v before the state update and q after it, so
// that q's registers are not live beside the update's).
template <bool Q, bool KV, int DT>
__device__ __forceinline__ void cc_seg_fetch(cc_seg_raw<DT>& r, const la_storage_t* __restrict__ q,
                                             const la_storage_t* __restrict__ k,
                                             const la_storage_t* __restrict__ v, la_index_t head_row0,
                                             int tok0, int n, int e0, int dw, int mw, int m_cols, int h0) {
#pragma unroll
    for (int i = 0; i < DT; ++i) {
        const int h = h0 + i, cols = cc_slice_cols<CC_D>(dw, h * CC_TILE);
        if (Q) cc_walk_fetch(r.q[i], q, head_row0, tok0, n, h * CC_TILE, dw, cols);
        if (KV) cc_walk_fetch(r.k[i], k, head_row0, tok0, n, h * CC_TILE, dw, cols);
    }
    if (KV) cc_walk_fetch(r.v, v, head_row0, tok0, n, e0, mw, m_cols);
}

// acc[n] += A·B over D for n-tiles n < NT: A the warp's 16 rows of q̃ ([m][k], stride CC_LDD)
// and B rows of k̃ ([n][k], stride CC_LDD), both given as the lane's base (row g, column 2t),
// so each fragment is a constant offset from one of two registers; the k-steps two at a time
// (unrolled whole beside the state, ptxas spilled; one at a time, each step recomputed its
// addresses from the thread index).
template <int NT>
__device__ __forceinline__ void cc_seg_product(float (&acc)[4][4], const cc_u16* a_lane, const cc_u16* b_lane) {
#pragma unroll 2
    for (int ks = 0; ks < CC_D / 16; ++ks) {
        const cc_u16* a = a_lane + ks * 16;
        const cc_u16* b = b_lane + ks * 16;
        const cc_u32 af[4] = {*(const cc_u32*)a, *(const cc_u32*)(a + 8 * CC_LDD), *(const cc_u32*)(a + 8),
                              *(const cc_u32*)(a + 8 * CC_LDD + 8)};
        cc_u32 bf[NT][2];
#pragma unroll
        for (int n = 0; n < NT; ++n) {
            bf[n][0] = *(const cc_u32*)(b + n * 8 * CC_LDD);
            bf[n][1] = *(const cc_u32*)(b + n * 8 * CC_LDD + 8);
        }
#pragma unroll
        for (int n = 0; n < NT; ++n) cc_mma(acc[n], af, bf[n][0], bf[n][1]);
    }
}

// One chunk of the carried state, in cc_forward_seg's warp mapping (warp (rg, hh): state rows
// e = 16rg + g (+8) × features hh·D/2 + 8nt + 2t, +1): S ← λ^L S + ΔS with ΔSᵀ[e][d] =
// Σ_j vᵀ[e][j] · k̃wᵀ[d][j] from the staged tiles, the mma's accumulating into the scaled state
// itself (ΔS from zero beside the next chunk's tiles in registers spilled); and in the
// z_next ← λ^L z_cur + Σ_j k̃wᵀ[d][j] (the row sums of the same k̃wᵀ rows by an all-ones A,
// from zero) and the max |z_next| of the features a warp ran into zmax[warp] (SPREAD: warp
// (rg, hh) a quarter of half hh's) or zmax[hh] (the row-group-0 warps, half hh each).
// SPLIT (training): k̃w as hi (s_kt) + lo (s_kt_lo, cc_seg_lo_word's layout), two mma's per
// product, as cc_forward_h's split walk: the backward's S⁰, z⁰ and the O it takes G·O of.
template <bool SPREAD, bool SPLIT = false>
__device__ __forceinline__ void cc_seg_state_step(float (&run)[CC_SEG_NT][4], float* z_next, const float* z_cur,
                                                  float* zmax, const cc_u16* s_vt, const cc_u16* s_kt,
                                                  const cc_u32* s_kt_lo, float chunk_decay) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int rg = warp & 3, hh = warp >> 2, row0 = 16 * rg, dc0 = hh * (CC_D / 2);
    if (chunk_decay != 1.0f) {
#pragma unroll
        for (int nt = 0; nt < CC_SEG_NT; ++nt)
#pragma unroll
            for (int c = 0; c < 4; ++c) run[nt][c] *= chunk_decay;
    }
    // The lo tile's words of feature row dc0 + 8n + g at k-step ks: (8ks + t (+4)) ^ 4g,
    // cc_seg_lo_word's with f & 7 = g, from one lane base (cc_seg_lo_word per load cost
    // cc_forward_seg_train +0.4% warp instructions and cc_seg_sums_train 5 registers).
    const cc_u32* lo_lane = s_kt_lo + (dc0 + g) * (CC_L / 2);
#pragma unroll
    for (int ks = 0; ks < CC_L / 16; ++ks) {
        cc_u32 a[4];
        cc_load_a(a, s_vt + row0 * CC_LDT, CC_LDT, ks);
        const int w0 = (8 * ks + t) ^ (4 * g), w1 = (8 * ks + 4 + t) ^ (4 * g);
        // B fragments a group of 4 n-tiles at a time, loaded before their mma's.
#pragma unroll
        for (int n0 = 0; n0 < CC_SEG_NT; n0 += 4) {
            cc_u32 b[4][2], bl[4][2];
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const cc_u16* bp = s_kt + (dc0 + 8 * (n0 + j) + g) * CC_LDT + ks * 16 + 2 * t;
                b[j][0] = *(const cc_u32*)bp;
                b[j][1] = *(const cc_u32*)(bp + 8);
                if (SPLIT) {
                    const cc_u32* lp = lo_lane + 8 * (n0 + j) * (CC_L / 2);
                    bl[j][0] = lp[w0];
                    bl[j][1] = lp[w1];
                }
            }
#pragma unroll
            for (int j = 0; j < 4; ++j) cc_mma(run[n0 + j], a, b[j][0], b[j][1]);
            if (SPLIT) {
#pragma unroll
                for (int j = 0; j < 4; ++j) cc_mma(run[n0 + j], a, bl[j][0], bl[j][1]);
            }
        }
    }
    // z: SPREAD, each warp a quarter of its half's n-tiles (cc_seg_sums: in the row-group-0
    // warps alone it held the chunk's barrier for them, 160 → 128 µs in the model at
    // (2, 16384, 16, 128)); else the row-group-0 warps the whole half (cc_forward_seg: spread,
    // its registers spilled).
    constexpr int ZNT = SPREAD ? CC_SEG_NT / 4 : CC_SEG_NT;
    if (!SPREAD && rg != 0) return;
    const int nt0 = SPREAD ? rg * ZNT : 0;
    const cc_u32 one = cc_pack(1.0f, 1.0f);
    const cc_u32 ones[4] = {one, one, one, one};
    float mz = 0.0f;
#pragma unroll
    for (int part = 0; part < ZNT; part += 2) {
        float acc[2][4];
        cc_zero(acc);
#pragma unroll
        for (int ks = 0; ks < CC_L / 16; ++ks)
#pragma unroll
            for (int nt = 0; nt < 2 && part + nt < ZNT; ++nt) {
                const int row = dc0 + 8 * (nt0 + part + nt) + g;
                const cc_u16* bp = s_kt + row * CC_LDT + ks * 16 + 2 * t;
                cc_mma(acc[nt], ones, *(const cc_u32*)bp, *(const cc_u32*)(bp + 8));
                if (SPLIT) {
                    const cc_u32* lp = s_kt_lo + row * (CC_L / 2);
                    cc_mma(acc[nt], ones, lp[(8 * ks + t) ^ (4 * g)], lp[(8 * ks + 4 + t) ^ (4 * g)]);
                }
            }
#pragma unroll
        for (int nt = 0; nt < 2 && part + nt < ZNT; ++nt) {
            const int f = dc0 + 8 * (nt0 + part + nt) + 2 * t;
            const float2 z = *(const float2*)(z_cur + f);
            const float2 zn = make_float2(__fmaf_rn(z.x, chunk_decay, acc[nt][0]),
                                          __fmaf_rn(z.y, chunk_decay, acc[nt][1]));
            if (g == 0) *(float2*)(z_next + f) = zn;
            mz = fmaxf(mz, fmaxf(fabsf(zn.x), fabsf(zn.y)));
        }
    }
    mz = fmaxf(mz, __shfl_xor_sync(LA_FULL_MASK, mz, 1));
    mz = fmaxf(mz, __shfl_xor_sync(LA_FULL_MASK, mz, 2));
    if (lane == 0) zmax[SPREAD ? warp : hh] = mz;
}

// O[:, e0:e0+64] and den of the chunks of one segment (cc_forward's values: same formulas,
// another rounding of the state operand), the state carried in registers. S⁰, z⁰ of the
// segment come from cc_seg_scan (fp32). Per chunk: the state slice Sᵀ[e][d] split hi + lo
// into shared memory as packed records with one power of two per row e (its max over D below
// 2^14; the inter product's column e is multiplied back in fp32) and z likewise with one of
// its own; then the inter term q̃·S and den's q̃·z (an extra n-tile whose B column 0 is z) in
// one k-step loop, P = q̃k̃ᵀ masked and decayed and P·v in two halves of the keys, O and den
// stored; then cc_seg_state_step (S ← λ^L S + ΔS, z likewise). grid (NC/BS, B·H,
// M/64 / CC_SEG_SLICES), block (CC_SEG_THREADS, CC_SEG_SLICES): threadIdx.y the value slice
// (e0 = 64 × (blockIdx.z · slices + y)); within a slice warp w = (row group rg = w mod 4, half
// hh = w / 4): the chunk's rows 16rg .. +15 (queries) × value columns 32hh .. +31 of the slice
// for O (P is computed by both halves, and by both slices), and the state's rows (values e)
// 16rg .. +15 × features hh·D/2 .. + D/2 − 1. q̃, k̃ and the weighted k̃ᵀ are shared: slice y
// stages feature tiles y·CC_SEG_DT .. (all of them with one slice). Two barriers per chunk,
// over the whole CTA. Dynamic shared CC_SEG_SMEM (97,280 B at D = 128 with one slice: with
// the 2,560 B of static memory the host allows for, inside sm_86/89's 99 KB; 141,312 B with
// two, sm_90; 54,272 B at 64).
// TRAIN (cc_forward_seg_train, a forward the backward follows; its segments' S⁰ from
// cc_seg_sums_train): k̃ split hi + lo in the state step (cc_seg_state_step SPLIT: the lo
// tile, CC_SEG_TRAIN_SMEM, 113,664 B at D = 128), and what cc_forward_h (split) +
// cc_forward_train keep for the backward: every chunk's S⁰, z⁰ in fp32 into chunk_states
// (CC_STATE_STRIDE per chunk, cc_walk_store's layout; z by slice 0) and O's rounding residue
// into out_lo (normalised maps). The one pass replaces the walk over every chunk (a chain of
// NC) and a second read of each state.
// Limits: D ≤ 128 (the state slice is D/16 × 4 fp32 registers per thread; D = 256 runs
// cc_forward_h + cc_forward); TRAIN is not compiled at D = 128, M = 64 (CC_SEG_TRAINS)
// and the host runs it on sm_90 only (sm_80: no gain in the model; sm_86/89: 116 KB of
// shared memory at D = 128), walking per chunk elsewhere; the others the file's.
// 2 CTAs per SM (≤ 128 registers) where shared memory holds two: sm_90 (227 KB) at D ≤ 128,
// sm_80 (164 KB) at D = 64; one on sm_80 at D = 128 (95 KB), where 128 registers spilled.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900 && CC_D == 128
#define CC_SEG_MIN_CTAS 1
#else
#define CC_SEG_MIN_CTAS 2
#endif
#define CC_SEG_TRAIN_SMEM (CC_SEG_SMEM + CC_D * CC_L * 2)
#define CC_SEG_TRAINS (!(CC_D == 128 && CC_M == 64))  // the program has the training forms
template <bool TRAIN>
__device__ __forceinline__ void
cc_forward_seg_body(const la_storage_t* __restrict__ q, const la_storage_t* __restrict__ k,
                    const la_storage_t* __restrict__ v, const float* __restrict__ states,
                    float* __restrict__ chunk_states, la_storage_t* __restrict__ out,
                    la_storage_t* __restrict__ out_lo, float* __restrict__ den_out, int seg_chunks, int n,
                    int num_chunks, float log2_decay, float chunk_decay, float eps, int map, int d, int m) {
    extern __shared__ __align__(16) unsigned char cc_smem[];
    cc_u16* s_q = (cc_u16*)cc_smem;                  // [64 i][LDD]  q̃
    cc_u16* s_k = s_q + CC_L * CC_LDD;               // [64 j][LDD]  k̃
    cc_u16* s_kt = s_k + CC_L * CC_LDD;              // [D][LDT]     λ^{L−1−j} k̃_j, transposed
    // This slice's region (CC_SEG_SLICE_SMEM bytes each, after the shared tiles).
    const int slice = CC_SEG_SLICES > 1 ? (int)threadIdx.y : 0;
    unsigned char* const slices = cc_smem + CC_SEG_SHARED_TILES;
    cc_u16* s_vt = (cc_u16*)(slices + slice * CC_SEG_SLICE_SMEM);  // [64 e][LDT]  v slice, transposed
    uint4* s_st = (uint4*)(s_vt + CC_TILE * CC_LDT);  // D/64 × [64 e][16 records]  packed Sᵀ
    float* s_z = (float*)(s_st + CC_DT * CC_TILE * 16);  // [2][D] z, by chunk parity
    // z packed as the B operand of an extra n-tile of the inter product: per d-tile 2 rows of
    // 16 records, row 0 z (hi + lo, one power of two) read by the lanes g = 0 (column n = 0),
    // row 1 zeros read by the others, so den's q̃·z comes from the tensor cores with q̃'s
    // fragments already loaded.
    uint4* s_zrec = (uint4*)(s_z + 2 * CC_D);  // D/64 × [2][16 records]
    // TRAIN: [D][32 words] k̃w's residue, shared (after every slice's region).
    cc_u32* s_kt_lo = (cc_u32*)(slices + CC_SEG_SLICES * CC_SEG_SLICE_SMEM);
    __shared__ __align__(16) float s_w[CC_L], s_rowmax_all[CC_SEG_SLICES][2][CC_TILE],
        s_unscale_all[CC_SEG_SLICES][CC_TILE];
    __shared__ float s_zmax_all[CC_SEG_SLICES][2];  // max |z| over each half of D
    __shared__ float s_log2_decay;  // log2 λ (see `zero` in the loop)
    float(*const s_rowmax)[CC_TILE] = s_rowmax_all[slice];
    float* const s_unscale = s_unscale_all[slice];
    float* const s_zmax = s_zmax_all[slice];

    const int seg = blockIdx.x, bh = blockIdx.y, e0 = (blockIdx.z * CC_SEG_SLICES + slice) * CC_TILE;
    const int num_segments = (num_chunks + seg_chunks - 1) / seg_chunks;
    const int first = seg * seg_chunks, end = min(first + seg_chunks, num_chunks);
    const int dw = cc_width<CC_D>(d), mw = cc_width<CC_M>(m);
    const int m_cols = cc_slice_cols<CC_M>(mw, e0);
    const la_index_t head_row0 = (la_index_t)bh * n;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int rg = warp & 3, hh = warp >> 2;
    const int row0 = rg * 16;              // queries (O) and values e (the state)
    const int dc0 = hh * (CC_D / 2);       // the state's first feature column of this warp
    const bool normalised = cc_normalised(map);
    if (slice == 0) {  // the shared values, once
        for (int j = threadIdx.x; j < CC_L; j += CC_SEG_THREADS) s_w[j] = cc_pow(log2_decay, (float)(CC_L - 1 - j));
        if (threadIdx.x == 0) s_log2_decay = log2_decay;
    }

    // S⁰ of the segment (fragment layout: rows e = row0 + g (+8), columns dc0 + 8nt + 2t, +1);
    // z⁰ into shared memory (z lives there: its update reads one parity, writes the other).
    // Segment 0 starts from zero and reads nothing (with one segment the host launches no
    // scan and the buffer is never written).
    const float* state = states + ((la_index_t)bh * num_segments + seg) * CC_STATE_STRIDE;
    float run[CC_SEG_NT][4];
#pragma unroll
    for (int nt = 0; nt < CC_SEG_NT; ++nt) {
        const float* p = state + (la_index_t)(e0 + row0 + g) * CC_D + dc0 + 8 * nt + 2 * t;
        const float2 zero2 = make_float2(0.0f, 0.0f);
        const float2 lo = seg ? *(const float2*)p : zero2, hi = seg ? *(const float2*)(p + 8 * CC_D) : zero2;
        run[nt][0] = lo.x, run[nt][1] = lo.y, run[nt][2] = hi.x, run[nt][3] = hi.y;
    }
    for (int r = threadIdx.x; r < CC_DT * 2 * 16; r += CC_SEG_THREADS)
        if (r % (2 * 16) >= 16) s_zrec[r] = make_uint4(0u, 0u, 0u, 0u);  // row 1, never written again
    if (rg == 0) {  // z⁰ of this half's features into s_z[0], and its max (as the state step)
        float mz = 0.0f;
#pragma unroll
        for (int nt = 0; nt < CC_SEG_NT; ++nt) {
            const int f = dc0 + 8 * nt + 2 * t;
            const float2 z = seg ? *(const float2*)(state + (la_index_t)CC_D * CC_M + f) : make_float2(0.0f, 0.0f);
            if (g == 0) *(float2*)(s_z + f) = z;
            mz = fmaxf(mz, fmaxf(fabsf(z.x), fabsf(z.y)));
        }
        mz = fmaxf(mz, __shfl_xor_sync(LA_FULL_MASK, mz, 1));
        mz = fmaxf(mz, __shfl_xor_sync(LA_FULL_MASK, mz, 2));
        if (lane == 0) s_zmax[hh] = mz;
    }
    cc_seg_raw<CC_SEG_DT> raw;  // this slice's feature tiles of q, k: h0 .. h0 + CC_SEG_DT − 1
    const int h0 = slice * CC_SEG_DT;
    cc_seg_fetch<true, true>(raw, q, k, v, head_row0, first * CC_L, n, e0, dw, mw, m_cols, h0);

    for (int chunk = first; chunk < end; ++chunk) {
        const int tok0 = chunk * CC_L;
        const float* z_cur = s_z + ((chunk - first) & 1) * CC_D;
        float* kept = TRAIN ? chunk_states + ((la_index_t)bh * num_chunks + chunk) * CC_STATE_STRIDE : nullptr;
        if (TRAIN) cc_walk_store<CC_SEG_NT>(kept, run, e0 + row0, dc0, CC_D);  // S⁰ of this chunk
        // The state's row maxima over this warp's half of D (both halves meet in s_rowmax).
        {
            float m_lo, m_hi;
            cc_quad_row_max(run, m_lo, m_hi);
            if (t == 0) {
                s_rowmax[hh][row0 + g] = m_lo;
                s_rowmax[hh][row0 + g + 8] = m_hi;
            }
        }
        // The previous chunk's reads of every tile, of s_st and s_z are done; the maxima.
        __syncthreads();
        // z's power of two, read here: the row-group-0 warps write the next chunk's max
        // during this one.
        const int z_exp = cc_split_exp(fmaxf(s_zmax[0], s_zmax[1]));
        if (TRAIN && blockIdx.z == 0 && slice == 0 && rg == 0 && g == 0) {  // z⁰ of this chunk, slice 0's
#pragma unroll
            for (int nt = 0; nt < CC_SEG_NT; ++nt) {
                const int f = dc0 + 8 * nt + 2 * t;
                const float2 z = *(const float2*)(z_cur + f);
                asm volatile("st.global.v2.f32 [%0], {%1, %2};" ::"l"(kept + (la_index_t)CC_D * CC_M + f),
                             "f"(z.x), "f"(z.y)
                             : "memory");
            }
        }
        {
            const int ex_lo = cc_split_exp(fmaxf(s_rowmax[0][row0 + g], s_rowmax[1][row0 + g]));
            const int ex_hi = cc_split_exp(fmaxf(s_rowmax[0][row0 + g + 8], s_rowmax[1][row0 + g + 8]));
            const float sc_lo = cc_pow2(ex_lo), sc_hi = cc_pow2(ex_hi);
            if (hh == 0 && t == 0) {
                s_unscale[row0 + g] = cc_pow2(-ex_lo);
                s_unscale[row0 + g + 8] = cc_pow2(-ex_hi);
            }
            // Records as cc_walk_store_packed writes them (n-tiles 2kk, 2kk+1 of the half are
            // one k-step's record, lane t's), in cc_state_put's swizzled tile layout.
#pragma unroll
            for (int kk = 0; kk < CC_SEG_NT / 2; ++kk) {
                const int dd = dc0 + 16 * kk, tile = dd / CC_TILE, c = 4 * ((dd % CC_TILE) / 16) + t;
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const float sc = h ? sc_hi : sc_lo;
                    const float a0 = run[2 * kk][2 * h] * sc, a1 = run[2 * kk][2 * h + 1] * sc;
                    const float b0 = run[2 * kk + 1][2 * h] * sc, b1 = run[2 * kk + 1][2 * h + 1] * sc;
                    const int e = row0 + g + 8 * h;
                    s_st[tile * CC_TILE * 16 + e * 16 + (c ^ ((e & 1) << 2))] = cc_pack_record(a0, a1, b0, b1);
                }
            }
            if (rg == 0 && g == 0) {  // z's records (row 0 of s_zrec), as the state's
                const float sz = cc_pow2(z_exp);
#pragma unroll
                for (int kk = 0; kk < CC_SEG_NT / 2; ++kk) {
                    const int dd = dc0 + 16 * kk, tile = dd / CC_TILE, c = 4 * ((dd % CC_TILE) / 16) + t;
                    const float2 za = *(const float2*)(z_cur + dd + 2 * t);
                    const float2 zb = *(const float2*)(z_cur + dd + 8 + 2 * t);
                    s_zrec[tile * 2 * 16 + c] = cc_pack_record(za.x * sz, za.y * sz, zb.x * sz, zb.y * sz);
                }
            }
        }
#pragma unroll
        for (int i = 0; i < CC_SEG_DT; ++i) {  // this slice's feature tiles (all with one slice)
            const int h = h0 + i, cols = cc_slice_cols<CC_D>(dw, h * CC_TILE);
            cc_seg_put(s_q, nullptr, nullptr, raw.q[i], h * CC_TILE, tok0, n, cols, map, nullptr);
            cc_seg_put<true, TRAIN>(s_k, s_kt, s_kt_lo, raw.k[i], h * CC_TILE, tok0, n, cols, map, s_w);
        }
        cc_walk_put<false, false, false>(s_vt, nullptr, raw.v, tok0, n, m_cols, LA_MAP_IDENTITY, nullptr,
                                         nullptr, nullptr);
        __syncthreads();  // the tiles, the packed state, z and the row scales
        const cc_u16* a_q = s_q + row0 * CC_LDD;
        const cc_u16* q_lane = a_q + g * CC_LDD + 2 * t;  // the lane's A-fragment base in q̃

        // Inter-chunk: q̃ · Sᵀ[e][.] for this half's 32 value columns, hi + lo, then column e
        // times 2^−s_e and row i times λ^{i+1}; q̃·z (the z n-tile) in the same k-step loop.
        float o[4][4], qacc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        cc_zero(o);
        {
            // Record 4kk + t of row e sits at 4(kk ^ (e & 1)) + t (cc_state_put), and e & 1 =
            // g & 1 here: two lane bases, even and odd kk, and every load a constant offset
            // from one of them (unrolled; one 16-byte load per (k-step, n-tile)).
            const uint4* st_even = s_st + (32 * hh + g) * 16 + t + 4 * (g & 1);
            const uint4* st_odd = s_st + (32 * hh + g) * 16 + t - 4 * (g & 1);
#pragma unroll
            for (int ks = 0; ks < CC_D / 16; ++ks) {
                cc_u32 a[4];
                cc_load_a(a, a_q, CC_LDD, ks);
                const uint4* st = (ks & 1 ? st_odd : st_even) + (ks >> 2) * CC_TILE * 16 + 4 * (ks & 3);
                uint4 b[5];
#pragma unroll
                for (int nt = 0; nt < 4; ++nt) b[nt] = st[nt * 8 * 16];
                b[4] = s_zrec[(ks >> 2) * 2 * 16 + (g ? 16 : 0) + 4 * (ks & 3) + t];
#pragma unroll
                for (int nt = 0; nt < 4; ++nt) cc_mma(o[nt], a, b[nt].x, b[nt].y);
                cc_mma(qacc, a, b[4].x, b[4].y);
#pragma unroll
                for (int nt = 0; nt < 4; ++nt) cc_mma(o[nt], a, b[nt].z, b[nt].w);
                cc_mma(qacc, a, b[4].z, b[4].w);
            }
        }
        // A zero the compiler cannot see through: each chunk recomputes the decay factors'
        // exponents (hoisted out of the loop, the 34 (float) conversions of i − j and i + 1 held
        // 34 registers across it: spills); log2 λ from shared memory for the same reason.
        int zero = 0;
        asm volatile("" : "+r"(zero));
        const float l2d = s_log2_decay;
        const float w_lo = cc_pow(l2d, (float)(row0 + g + 1 + zero));
        const float w_hi = cc_pow(l2d, (float)(row0 + g + 9 + zero));
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
            const float2 u = *(const float2*)(s_unscale + 32 * hh + 8 * nt + 2 * t);
            o[nt][0] *= u.x * w_lo; o[nt][1] *= u.y * w_lo;
            o[nt][2] *= u.x * w_hi; o[nt][3] *= u.y * w_hi;
        }
        // q̃_i·z: column 0 of the z n-tile, held by lane t = 0 of each quad; times 2^−s_z.
        const float zu = cc_pow2(-z_exp);
        const float qz_lo = __shfl_sync(LA_FULL_MASK, qacc[0], lane & ~3) * zu;
        const float qz_hi = __shfl_sync(LA_FULL_MASK, qacc[2], lane & ~3) * zu;

        // P = q̃ k̃ᵀ, masked and decayed in fp32, and o += P v, in two halves of the keys (32
        // each: P whole beside the state held ptxas above 128 registers); key tiles past the
        // warp's last row are skipped. P is split hi + lo for the product (cc_forward's reasons).
        float row_sum[2] = {0.0f, 0.0f};
#pragma unroll
        for (int jh = 0; jh < 2; ++jh) {
            if (jh == 1 && rg < 2) continue;  // keys 32 .. 63 are all masked for rows < 32
            float p[4][4];
            cc_zero(p);
            // 4 key tiles, or 2 where the warp's rows end mid-half (warp-uniform).
            if (2 * (rg + 1) - 4 * jh >= 4)
                cc_seg_product<4>(p, q_lane, s_k + 32 * jh * CC_LDD + g * CC_LDD + 2 * t);
            else
                cc_seg_product<2>(p, q_lane, s_k + 32 * jh * CC_LDD + g * CC_LDD + 2 * t);
            // Only the two key tiles on the diagonal (8·J ≥ row0) compare j ≤ i; past them P is 0;
            // without decay (λ = 1, a uniform branch) no factor is computed.
#pragma unroll
            for (int nt = 0; nt < 4; ++nt) {
                const int J = 4 * jh + nt;
                if (J > 2 * rg + 1) continue;
                const bool diag = J >= 2 * rg;
                if (diag) {
#pragma unroll
                    for (int c = 0; c < 4; ++c) {
                        const int i = row0 + g + (c >> 1) * 8 + zero, j = 8 * J + 2 * t + (c & 1);
                        if (j > i) p[nt][c] = 0.0f;
                    }
                }
                if (l2d != 0.0f) {
#pragma unroll
                    for (int c = 0; c < 4; ++c) {
                        const int i = row0 + g + (c >> 1) * 8 + zero, j = 8 * J + 2 * t + (c & 1);
                        p[nt][c] *= cc_ex2(l2d * (float)(i - j));
                    }
                }
#pragma unroll
                for (int c = 0; c < 4; ++c) row_sum[c >> 1] += p[nt][c];
            }
#pragma unroll
            for (int kh = 0; kh < 2; ++kh) {
                const int ks = 2 * jh + kh;
                if (ks > rg) continue;
                cc_u32 a_hi[4], a_lo[4];
                cc_acc_to_a_split(a_hi, a_lo, p, kh);
                cc_u32 bv[4][2];
#pragma unroll
                for (int nt = 0; nt < 4; ++nt) {
                    const cc_u16* bp = s_vt + (32 * hh + nt * 8 + g) * CC_LDT + ks * 16 + 2 * t;
                    bv[nt][0] = *(const cc_u32*)bp;
                    bv[nt][1] = *(const cc_u32*)(bp + 8);
                }
#pragma unroll
                for (int nt = 0; nt < 4; ++nt) cc_mma(o[nt], a_hi, bv[nt][0], bv[nt][1]);
#pragma unroll
                for (int nt = 0; nt < 4; ++nt) cc_mma(o[nt], a_lo, bv[nt][0], bv[nt][1]);
            }
        }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            row_sum[h] += __shfl_xor_sync(LA_FULL_MASK, row_sum[h], 1);
            row_sum[h] += __shfl_xor_sync(LA_FULL_MASK, row_sum[h], 2);
        }
        // The next chunk's tiles, in flight during the stores and the state update (fetched
        // after P and the products: with P live they would spill).
        if (chunk + 1 < end)
            cc_seg_fetch<false, true>(raw, q, k, v, head_row0, tok0 + CC_L, n, e0, dw, mw, m_cols, h0);

        const int i_lo = tok0 + row0 + g, i_hi = i_lo + 8;
        const float den_lo = normalised ? w_lo * qz_lo + row_sum[0] + eps : 1.0f;
        const float den_hi = normalised ? w_hi * qz_hi + row_sum[1] + eps : 1.0f;
        const float inv_lo = 1.0f / den_lo, inv_hi = 1.0f / den_hi;
#pragma unroll
        for (int pp = 0; pp < 2; ++pp) {  // 4 columns (8 bytes) per lane, cc_quad_swap
            const int e = e0 + 32 * hh + pp * 16 + cc_quad_col(t);
            cc_store_o_pair<TRAIN>(out, out_lo, normalised, o[2 * pp], o[2 * pp + 1], inv_lo, inv_hi,
                                   32 * hh + pp * 16 < m_cols, head_row0, i_lo, n, mw, e);
        }
        if (blockIdx.z == 0 && slice == 0 && hh == 0 && t == 0) {
            if (i_lo < n) den_out[head_row0 + i_lo] = den_lo;
            if (i_hi < n) den_out[head_row0 + i_hi] = den_hi;
        }
        if (chunk + 1 == end) break;  // the segment's last state is not needed

        cc_seg_state_step<false, TRAIN>(run, s_z + ((chunk - first + 1) & 1) * CC_D, z_cur, s_zmax, s_vt,
                                        s_kt, s_kt_lo, chunk_decay);
        cc_seg_fetch<true, false>(raw, q, k, v, head_row0, tok0 + CC_L, n, e0, dw, mw, m_cols, h0);
    }
}

// The two entry points, one parameter list (cc_forward_seg does not use chunk_states, out_lo).
#define CC_FORWARD_SEG_ENTRY(name, TRAIN)                                                          \
    extern "C" __global__ void __launch_bounds__(CC_SEG_THREADS * CC_SEG_SLICES, CC_SEG_MIN_CTAS / CC_SEG_SLICES) name( \
        const la_storage_t* __restrict__ q, const la_storage_t* __restrict__ k,                     \
        const la_storage_t* __restrict__ v, const float* __restrict__ states,                       \
        float* __restrict__ chunk_states, la_storage_t* __restrict__ out,                           \
        la_storage_t* __restrict__ out_lo, float* __restrict__ den_out, int seg_chunks, int n,      \
        int num_chunks, float log2_decay, float chunk_decay, float eps, int map, int d, int m) {    \
        cc_forward_seg_body<TRAIN>(q, k, v, states, chunk_states, out, out_lo, den_out, seg_chunks, \
                                   n, num_chunks, log2_decay, chunk_decay, eps, map, d, m);         \
    }
// The segmented inference forward (no state per chunk in memory).
CC_FORWARD_SEG_ENTRY(cc_forward_seg, false)
// The segmented training forward: also every chunk's S⁰, z⁰ (fp32) and O's residue. Not in
// the D = 128, M = 64 programs (CC_SEG_TRAINS): at 2 CTAs per SM ptxas spilled 52 B there
// on sm_90 (M = 64's runtime column widths; every reordering tried spilled), and the host
// walks per chunk instead.
#if CC_SEG_TRAINS
CC_FORWARD_SEG_ENTRY(cc_forward_seg_train, true)
#endif

#endif  // CC_D <= 128
