// causal_chunked_seg_sums.cuh — pass 1 of the segmented forward: cc_seg_sums (and its split
// form cc_seg_sums_train), each segment's sum from zero, and cc_seg_scan, the sums into each
// segment's S⁰. Part of causal_chunked.cu's program, after causal_chunked_segments.cuh (whose
// state step the sums share; see its header for the plan); not compiled alone.
#pragma once

// In place over the slots cc_seg_sums wrote: slot s + 1 holds segment s's
// sum; slot s ← λ^{L·BS} slot s−1 + slot s (an inclusive scan from slot 1, slot 0 taken as
// zero and never touched: cc_forward_seg starts segment 0 from zero), so slot s ≥ 1 is S⁰,
// z⁰ entering segment s, fp32 in the layout of CC_STATE_STRIDE. Thread x of
// block (bx, b·h) runs element bx·256 + x of the D·M + D words; its loads are issued 4 at a
// time ahead of the chain (in PTX order each was a DRAM latency on it). grid (⌈(D·M + D) /
// 256⌉, B·H), 256 threads. Limits: the file's.
#define CC_SCAN_THREADS 256
extern "C" __global__ void __launch_bounds__(CC_SCAN_THREADS)
cc_seg_scan(float* __restrict__ states, int num_segments, float seg_decay) {
    const int idx = blockIdx.x * CC_SCAN_THREADS + threadIdx.x;
    if (idx >= CC_D * CC_M + CC_D) return;
    float* p = states + (la_index_t)blockIdx.y * num_segments * CC_STATE_STRIDE + idx;
    float run = 0.0f;
    for (int s = 1; s < num_segments; s += 4) {
        float x[4];
#pragma unroll
        for (int j = 0; j < 4; ++j)
            x[j] = s + j < num_segments ? p[(la_index_t)(s + j) * CC_STATE_STRIDE] : 0.0f;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            if (s + j >= num_segments) break;
            run = __fmaf_rn(run, seg_decay, x[j]);
            p[(la_index_t)(s + j) * CC_STATE_STRIDE] = run;
        }
    }
}

#if CC_D <= 128
// Pass 1 of the segmented forward: the sum of each segment s < NC/BS − 1 (the last one's is
// never read), ΔS_s = Σ_{c∈s} λ^{L(BS−1−c')} ΔS_c and z likewise, from zero, into slot s + 1
// of the segment states (fp32, CC_STATE_STRIDE's layout) for cc_seg_scan. cc_forward_seg's
// warp mapping and state step (cc_seg_state_step), without its outputs: per chunk k̃ (φ,
// weighted, transposed) and the v slice staged between two barriers, the step. All segments at once
// (one CTA per (segment, b·h, M/64 slice), each a chain of BS chunks), where cc_forward_h's
// walk is a chain over every chunk. grid (NC/BS − 1, B·H, M/64 / CC_SEG_SLICES), block
// (CC_SEG_THREADS, CC_SEG_SLICES): as cc_forward_seg, two slices per CTA at D = M = 128 on
// sm_90 share the weighted k̃ᵀ, each staging one feature tile of it (threadIdx.y the slice;
// per slice its v slice and z). Dynamic shared CC_SEG_SUMS_SMEM (28.7 KB at D = 128 with one
// slice, 39.4 KB with two). TRAIN (cc_seg_sums_train, for cc_forward_seg_train): k̃ split
// hi + lo as the training forward's state step (cc_seg_state_step SPLIT; the lo tile,
// CC_SEG_SUMS_TRAIN_SMEM, shared). Limits: D ≤ 128; the file's.
#define CC_SEG_SUMS_SLICE_SMEM (CC_TILE * CC_LDT * 2 + 2 * CC_D * 4)  // vᵀ, z
#define CC_SEG_SUMS_SMEM (CC_D * CC_LDT * 2 + CC_SEG_SLICES * CC_SEG_SUMS_SLICE_SMEM)
#define CC_SEG_SUMS_TRAIN_SMEM (CC_SEG_SUMS_SMEM + CC_D * CC_L * 2)
template <bool TRAIN>
__device__ __forceinline__ void cc_seg_sums_body(const la_storage_t* __restrict__ k, const la_storage_t* __restrict__ v,
                                                 float* __restrict__ states, int seg_chunks, int n, int num_chunks,
                                                 float log2_decay, float chunk_decay, int map, int d, int m) {
    extern __shared__ __align__(16) unsigned char cc_smem[];
    cc_u16* s_kt = (cc_u16*)cc_smem;                  // [D][LDT]     λ^{L−1−j} k̃_j, transposed
    const int slice = CC_SEG_SLICES > 1 ? (int)threadIdx.y : 0;
    unsigned char* const slices = (unsigned char*)(s_kt + CC_D * CC_LDT);
    cc_u16* s_vt = (cc_u16*)(slices + slice * CC_SEG_SUMS_SLICE_SMEM);  // [64 e][LDT]  v slice, transposed
    float* s_z = (float*)(s_vt + CC_TILE * CC_LDT);   // [2][D] z, by chunk parity
    // TRAIN: [D][32 words] k̃w's residue, shared (after every slice's region).
    cc_u32* s_kt_lo = (cc_u32*)(slices + CC_SEG_SLICES * CC_SEG_SUMS_SLICE_SMEM);
    __shared__ float s_w[CC_L], s_zmax_all[CC_SEG_SLICES][CC_SEG_THREADS / 32];
    float* const s_zmax = s_zmax_all[slice];

    const int seg = blockIdx.x, bh = blockIdx.y, e0 = (blockIdx.z * CC_SEG_SLICES + slice) * CC_TILE;
    const int num_segments = (num_chunks + seg_chunks - 1) / seg_chunks;
    const int first = seg * seg_chunks, end = first + seg_chunks;  // whole: seg < segments − 1
    const int dw = cc_width<CC_D>(d), mw = cc_width<CC_M>(m);
    const int m_cols = cc_slice_cols<CC_M>(mw, e0);
    const la_index_t head_row0 = (la_index_t)bh * n;
    const int warp = threadIdx.x >> 5, row0 = 16 * (warp & 3), dc0 = (warp >> 2) * (CC_D / 2);
    if (slice == 0)  // shared, once
        for (int j = threadIdx.x; j < CC_L; j += CC_SEG_THREADS) s_w[j] = cc_pow(log2_decay, (float)(CC_L - 1 - j));
    for (int f = threadIdx.x; f < CC_D; f += CC_SEG_THREADS) s_z[f] = 0.0f;
    float run[CC_SEG_NT][4];
#pragma unroll
    for (int nt = 0; nt < CC_SEG_NT; ++nt) run[nt][0] = run[nt][1] = run[nt][2] = run[nt][3] = 0.0f;
    for (int chunk = first; chunk < end; ++chunk) {
        const int tok0 = chunk * CC_L;
        cc_seg_raw<CC_SEG_DT> raw;  // this slice's feature tiles of k
        cc_seg_fetch<false, true>(raw, nullptr, k, v, head_row0, tok0, n, e0, dw, mw, m_cols, slice * CC_SEG_DT);
        __syncthreads();  // the previous chunk's reads of the tiles and of z are done; s_w, s_z
        // v first: its registers are then free during k's (held through them, ptxas spilled).
        cc_walk_put<false, false, false>(s_vt, nullptr, raw.v, tok0, n, m_cols, LA_MAP_IDENTITY, nullptr,
                                         nullptr, nullptr);
#pragma unroll
        for (int i = 0; i < CC_SEG_DT; ++i) {
            const int h = slice * CC_SEG_DT + i, cols = cc_slice_cols<CC_D>(dw, h * CC_TILE);
            // (cc_seg_put, the training split's, always weighs: a null test of its weights
            // spilled cc_forward_seg at D = 128, M = 64.)
            if (TRAIN)
                cc_seg_put<false, true>(nullptr, s_kt, s_kt_lo, raw.k[i], h * CC_TILE, tok0, n, cols, map, s_w);
            else
                cc_walk_put_keys(s_kt + h * CC_TILE * CC_LDT, raw.k[i], tok0, n, cols, map, s_w, log2_decay);
        }
        __syncthreads();  // the tiles
        cc_seg_state_step<true, TRAIN>(run, s_z + ((chunk - first + 1) & 1) * CC_D,
                                       s_z + ((chunk - first) & 1) * CC_D, s_zmax, s_vt, s_kt, s_kt_lo,
                                       chunk_decay);
    }
    float* dst = states + ((la_index_t)bh * num_segments + seg + 1) * CC_STATE_STRIDE;
    cc_walk_store<CC_SEG_NT>(dst, run, e0 + row0, dc0, CC_D);
    __syncthreads();  // the last chunk's z
    if (blockIdx.z == 0 && slice == 0) {  // z is the same in every slice: slice 0 writes it
        const float* z = s_z + ((end - first) & 1) * CC_D;
        for (int f = threadIdx.x; f < CC_D; f += CC_SEG_THREADS) dst[(la_index_t)CC_D * CC_M + f] = z[f];
    }
}
// The two entry points of pass 1, one parameter list.
#define CC_SEG_SUMS_ENTRY(name, TRAIN)                                                             \
    extern "C" __global__ void __launch_bounds__(CC_SEG_THREADS * CC_SEG_SLICES, 2 / CC_SEG_SLICES)  \
        name(const la_storage_t* __restrict__ k, const la_storage_t* __restrict__ v,                \
             float* __restrict__ states, int seg_chunks, int n, int num_chunks, float log2_decay,   \
             float chunk_decay, int map, int d, int m) {                                            \
        cc_seg_sums_body<TRAIN>(k, v, states, seg_chunks, n, num_chunks, log2_decay, chunk_decay, \
                                map, d, m);                                                         \
    }
CC_SEG_SUMS_ENTRY(cc_seg_sums, false)
#if CC_SEG_TRAINS
CC_SEG_SUMS_ENTRY(cc_seg_sums_train, true)
#endif
#endif  // CC_D <= 128
