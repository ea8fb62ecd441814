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
//   Inference at large shapes (D ≤ 128, ≥ 2 segments of 16 chunks, ≥ 528 CTAs: the host's
//   Segments) runs segments instead, no state per chunk in memory (section "the segmented
//   inference forward" below): cc_seg_sums (each segment's sum, all at once), cc_seg_scan
//   (the sums into each segment's S⁰), cc_forward_seg (O, den of a segment's chunks, the
//   state carried in registers).                grid (NC/16 − 1 | ⌈(D·M+D)/256⌉ | NC/16, B·H, ·)
//   Training (a backward follows): pass 1 split (k̃ hi + lo, see precision) writing fp32,
//   then cc_forward_train, O and den on those states plus O's rounding residue out_lo; the
//   states and out_lo are kept for the backward (the states once, never per token).
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
//   the chunk states S, z, R, r, den, and G·O: fp32 (elu+1's exp as __expf:
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

// The fused feature map is a kernel argument (codes as LA_MAP, through cc_phi and the prelude's
// la_phi_of_map): the branch is uniform across the grid and costs nothing next to the loads,
// and one program then serves every map (a third of the NVRTC/ptxas work of one per map).

// Identity is un-normalised (SPEC §7): den ≡ 1, gd ≡ 0.
__device__ __forceinline__ bool cc_normalised(int map) { return map != LA_MAP_IDENTITY; }

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
        const cc_u32 h0 = cc_pack(x0.x * scale, x0.y * scale);
        const cc_u32 h1 = cc_pack(x1.x * scale, x1.y * scale);
        const cc_u32 l0 = cc_pack(x0.x * scale - cc_lo(h0), x0.y * scale - cc_hi(h0));
        const cc_u32 l1 = cc_pack(x1.x * scale - cc_lo(h1), x1.y * scale - cc_hi(h1));
        cc_mma(acc[n], a, h0, h1);
        cc_mma(acc[n], a, l0, l1);
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
    if (LO) *(cc_u32*)(dst_lo + off) = cc_pack(a - cc_lo(h), b - cc_hi(h));
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

// e^x for x ≤ 0 (larger x read as 0) as __expf: ex2.approx.ftz(x·log2 e), 2 instructions
// where expf takes ~8. In the model φ was a third of the walks' time and a fifth of
// cc_forward's at fla's shapes (elu+1 against identity). Error: ≤ 2 ulp of ex2 plus the
// rounding of x·log2 e (|x|·2^-24 relative): ~6e-7 at x = −4, where e^x < 0.02, so ≤ 1e-8
// absolute on a φ(k) that is stored in 16 bits (or hi + lo: ~2^-16 bf16, ~2^-22 fp16);
// results below 2^-126 flush to 0. The check's 136 error figures: 127 unchanged, 9 moved by
// ≤ 2.2e-5 relative (against expf). The other forms keep the prelude's expf.
__device__ __forceinline__ float cc_exp_nonpositive(float x) { return __expf(x > 0.0f ? 0.0f : x); }

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

// Stores a warp's 16 rows × 32 columns of fp32 accumulators at rows row0 + g (+8), columns
// col0 + 8nt + 2t of a [.][cols] fp32 matrix: one 8-byte store per fragment pair, the 4 lanes
// t of a quad filling one 32-byte sector.
__device__ __forceinline__ void cc_walk_store(float* __restrict__ dst, const float (&x)[4][4], int row0,
                                              int col0, int cols) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    float* p = dst + (la_index_t)(row0 + g) * cols + col0 + 2 * t;
    // st.global.v2 in the PTX: NVVM split the float2 stores of this loop into scalar pairs
    // that ptxas cannot prove 8-aligned (half of each sector per request).
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
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
            const cc_u32 ha = cc_pack(a0, a1), hb = cc_pack(b0, b1);
            const cc_u32 la = cc_pack(a0 - cc_lo(ha), a1 - cc_hi(ha));
            const cc_u32 lb = cc_pack(b0 - cc_lo(hb), b1 - cc_hi(hb));
            float* p = dst + (la_index_t)(row0 + g + 8 * h) * CC_D + col0 + 16 * k + 4 * t;
            asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(ha), "r"(hb), "r"(la),
                         "r"(lb)
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
            cc_walk_put<false, true, false>(s_kt, nullptr, raw_k, chunk * CC_L, n, d_cols, map, s_w, nullptr,
                                            nullptr);
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
        cc_u32 x_lo = cc_pack(o[2 * p][0] * inv_lo, o[2 * p][1] * inv_lo);
        cc_u32 y_lo = cc_pack(o[2 * p + 1][0] * inv_lo, o[2 * p + 1][1] * inv_lo);
        cc_u32 x_hi = cc_pack(o[2 * p][2] * inv_hi, o[2 * p][3] * inv_hi);
        cc_u32 y_hi = cc_pack(o[2 * p + 1][2] * inv_hi, o[2 * p + 1][3] * inv_hi);
        // TRAIN: the residues first (the same products, rounded the same way), then both swap.
        cc_u32 rx_lo = 0, ry_lo = 0, rx_hi = 0, ry_hi = 0;
        if (TRAIN && normalised) {
            rx_lo = cc_residue(o[2 * p][0] * inv_lo, o[2 * p][1] * inv_lo, x_lo);
            ry_lo = cc_residue(o[2 * p + 1][0] * inv_lo, o[2 * p + 1][1] * inv_lo, y_lo);
            rx_hi = cc_residue(o[2 * p][2] * inv_hi, o[2 * p][3] * inv_hi, x_hi);
            ry_hi = cc_residue(o[2 * p + 1][2] * inv_hi, o[2 * p + 1][3] * inv_hi, y_hi);
            cc_quad_swap(rx_lo, ry_lo);
            cc_quad_swap(rx_hi, ry_hi);
        }
        cc_quad_swap(x_lo, y_lo);
        cc_quad_swap(x_hi, y_hi);
        if (p * 16 >= m_cols) continue;  // columns past m (warp-uniform), after the shuffles
        if (i_lo < n) *(uint2*)(out + (head_row0 + i_lo) * mw + e) = make_uint2(x_lo, y_lo);
        if (i_hi < n) *(uint2*)(out + (head_row0 + i_hi) * mw + e) = make_uint2(x_hi, y_hi);
        if (TRAIN && normalised) {
            if (i_lo < n) *(uint2*)(out_lo + (head_row0 + i_lo) * mw + e) = make_uint2(rx_lo, ry_lo);
            if (i_hi < n) *(uint2*)(out_lo + (head_row0 + i_hi) * mw + e) = make_uint2(rx_hi, ry_hi);
        }
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

// ---- the segmented inference forward (plan step 2) ----------------------------------------
//
// The forward without a state per chunk in memory: segments of seg_chunks (BS) chunks.
//   1. cc_seg_sums: one CTA per (segment, b·h, M/64 slice) sums its segment's chunks from a
//      zero state, ΔS_s = Σ_{c∈s} λ^{L(BS−1−c')} ΔS_c, z likewise (fp32; all segments at
//      once, not a chain over NC as cc_forward_h's walk).
//   2. cc_seg_scan turns the per-segment sums into S⁰, z⁰ of every segment:
//      S⁰_0 = 0, S⁰_{s+1} = λ^{L·BS} S⁰_s + ΔS_s (a chain over NC/BS, one thread per element).
//   3. cc_forward_seg: one CTA per (segment, b·h, 64-wide slice of M) carries S⁰ through
//      its segment's chunks in registers, computing O and den of each chunk as cc_forward
//      does, then S ← λ^L S + ΔS_c on the tensor cores.
// DRAM per token (D = M = 128, bf16, BS = 16): k, v 512 + sums 65 (1), 129 (2), q, k, v 768,
// S⁰ 65, O 256, den 4 (3): ~1800 B where the per-chunk states cost 3602 (1024 is the minimum).

// In place over the slots cc_seg_sums wrote: slot s + 1 holds segment s's
// sum; slot 0 ← 0 and slot s ← λ^{L·BS} slot s−1 + slot s (an inclusive scan from slot 1),
// so slot s is S⁰, z⁰ entering segment s, fp32 in the layout of CC_STATE_STRIDE. Thread x of
// block (bx, b·h) runs element bx·256 + x of the D·M + D words; its loads are issued 4 at a
// time ahead of the chain (in PTX order each was a DRAM latency on it). grid (⌈(D·M + D) /
// 256⌉, B·H), 256 threads. Limits: the file's.
#define CC_SCAN_THREADS 256
extern "C" __global__ void __launch_bounds__(CC_SCAN_THREADS)
cc_seg_scan(float* __restrict__ states, int num_segments, float seg_decay) {
    const int idx = blockIdx.x * CC_SCAN_THREADS + threadIdx.x;
    if (idx >= CC_D * CC_M + CC_D) return;
    float* p = states + (la_index_t)blockIdx.y * num_segments * CC_STATE_STRIDE + idx;
    p[0] = 0.0f;
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

// cc_forward_seg holds a 64 × D fp32 state slice in registers: programs with CC_D ≤ 128 only
// (the host takes cc_forward_h + cc_forward at D = 256).
#if CC_D <= 128
#define CC_SEG_THREADS 256
#define CC_SEG_NT (CC_D / 16)  // n-tiles of a warp's half of the state's D columns
// q̃, k̃ (natural), the weighted k̃ᵀ, the v slice ᵀ, the packed Sᵀ slice (D/64 tiles of
// 64 × 16 records, cc_state_put's layout), z.
#define CC_SEG_SMEM                                                                           \
    (2 * CC_L * CC_LDD * 2 + CC_D * CC_LDT * 2 + CC_TILE * CC_LDT * 2 + CC_TILE * CC_D * 4 + \
     2 * CC_D * 4 + CC_DT * 2 * 16 * 16)

// A fetched tile (cc_walk_fetch, 8 warps) after φ as natural rows [token][feature] (stride
// CC_LDD: q̃, k̃ for P = q̃k̃ᵀ) and, unless tr is null (q̃), transposed and weighted by
// w[token], k̃wᵀ[feature][token] (stride CC_LDT, for ΔSᵀ = vᵀ·k̃w); φ once. f0: the tile's
// first feature. (A template flag in place of the null test spilled 48 B at D = 128,
// M = 64 on sm_90.) Natural stores: a lane's two feature values of a token as one 32-bit word; the
// 32 lanes of a store hit rows 2tw (+ 8s) at stride CC_LDD/2 ≡ 4 mod 32 words, plus fp: 32
// banks.
__device__ __forceinline__ void cc_seg_put(cc_u16* nat, cc_u16* tr, const cc_u32 (&raw)[2 * CC_WALK_STEPS],
                                           int f0, int tok0, int n, int cols, int phi, const float* w) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, fp = lane & 7, tw = lane >> 3;
    const int f = (warp & 3) * 16 + 2 * fp, tok = (warp >> 2) * CC_WALK_STEPS * 8 + 2 * tw;
    float2 x[2 * CC_WALK_STEPS];
    cc_walk_unpack<CC_WALK_STEPS>(x, raw, tok0, n, cols, phi);
#pragma unroll
    for (int s = 0; s < 2 * CC_WALK_STEPS; ++s) {
        const int r = tok + (s >> 1) * 8 + (s & 1);
        *(cc_u32*)(nat + r * CC_LDD + f0 + f) = cc_pack(x[s].x, x[s].y);
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
}

// The three tiles of chunk tok0 / 64 into registers: q, k (D/64 feature tiles each) and the
// v slice at e0, as cc_walk_fetch lays them out for 8 warps.
struct cc_seg_raw {
    cc_u32 q[CC_DT][2 * CC_WALK_STEPS], k[CC_DT][2 * CC_WALK_STEPS], v[2 * CC_WALK_STEPS];
};

// QZ: q; KV: k and v (cc_forward_seg issues k, v before the state update and q after it, so
// that q's registers are not live beside the update's).
template <bool Q, bool KV>
__device__ __forceinline__ void cc_seg_fetch(cc_seg_raw& r, const la_storage_t* __restrict__ q,
                                             const la_storage_t* __restrict__ k,
                                             const la_storage_t* __restrict__ v, la_index_t head_row0,
                                             int tok0, int n, int e0, int dw, int mw, int m_cols) {
#pragma unroll
    for (int h = 0; h < CC_DT; ++h) {
        const int cols = cc_slice_cols<CC_D>(dw, h * CC_TILE);
        if (Q) cc_walk_fetch(r.q[h], q, head_row0, tok0, n, h * CC_TILE, dw, cols);
        if (KV) cc_walk_fetch(r.k[h], k, head_row0, tok0, n, h * CC_TILE, dw, cols);
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
#pragma unroll
        for (int n = 0; n < NT; ++n)
            cc_mma(acc[n], af, *(const cc_u32*)(b + n * 8 * CC_LDD), *(const cc_u32*)(b + n * 8 * CC_LDD + 8));
    }
}

// One chunk of the carried state, in cc_forward_seg's warp mapping (warp (rg, hh): state rows
// e = 16rg + g (+8) × features hh·D/2 + 8nt + 2t, +1): S ← λ^L S + ΔS with ΔSᵀ[e][d] =
// Σ_j vᵀ[e][j] · k̃wᵀ[d][j] from the staged tiles, the mma's accumulating into the scaled state
// itself (ΔS from zero beside the next chunk's tiles in registers spilled); and in the
// z_next ← λ^L z_cur + Σ_j k̃wᵀ[d][j] (the row sums of the same k̃wᵀ rows by an all-ones A,
// from zero) and the max |z_next| of the features a warp ran into zmax[warp] (SPREAD: warp
// (rg, hh) a quarter of half hh's) or zmax[hh] (the row-group-0 warps, half hh each).
template <bool SPREAD>
__device__ __forceinline__ void cc_seg_state_step(float (&run)[CC_SEG_NT][4], float* z_next, const float* z_cur,
                                                  float* zmax, const cc_u16* s_vt, const cc_u16* s_kt,
                                                  float chunk_decay) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int rg = warp & 3, hh = warp >> 2, row0 = 16 * rg, dc0 = hh * (CC_D / 2);
    if (chunk_decay != 1.0f) {
#pragma unroll
        for (int nt = 0; nt < CC_SEG_NT; ++nt)
#pragma unroll
            for (int c = 0; c < 4; ++c) run[nt][c] *= chunk_decay;
    }
#pragma unroll
    for (int ks = 0; ks < CC_L / 16; ++ks) {
        cc_u32 a[4];
        cc_load_a(a, s_vt + row0 * CC_LDT, CC_LDT, ks);
#pragma unroll
        for (int nt = 0; nt < CC_SEG_NT; ++nt) {
            const cc_u16* bp = s_kt + (dc0 + 8 * nt + g) * CC_LDT + ks * 16 + 2 * t;
            cc_mma(run[nt], a, *(const cc_u32*)bp, *(const cc_u32*)(bp + 8));
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
                const cc_u16* bp = s_kt + (dc0 + 8 * (nt0 + part + nt) + g) * CC_LDT + ks * 16 + 2 * t;
                cc_mma(acc[nt], ones, *(const cc_u32*)bp, *(const cc_u32*)(bp + 8));
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
// stored; then cc_seg_state_step (S ← λ^L S + ΔS, z likewise). grid (NC/BS, B·H, M/64),
// CC_SEG_THREADS: warp w = (row group rg = w mod 4, half hh = w / 4): the chunk's rows 16rg ..
// +15 (queries) × value columns 32hh .. +31 of the slice for O (P is computed by both
// halves), and the state's rows (values e) 16rg .. +15 × features hh·D/2 .. + D/2 − 1. Two
// barriers per chunk. Dynamic shared CC_SEG_SMEM (97,280 B at D = 128: with the 2,560 B of
// static memory the host allows for, inside sm_86/89's 99 KB; 54,272 B at 64).
// Limits: D ≤ 128 (the state slice is D/16 × 4 fp32 registers per thread; D = 256 runs
// cc_forward_h + cc_forward); the others the file's.
// 2 CTAs per SM (≤ 128 registers) where shared memory holds two: sm_90 (227 KB) at D ≤ 128,
// sm_80 (164 KB) at D = 64; one on sm_80 at D = 128 (95 KB), where 128 registers spilled.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900 && CC_D == 128
#define CC_SEG_MIN_CTAS 1
#else
#define CC_SEG_MIN_CTAS 2
#endif
extern "C" __global__ void __launch_bounds__(CC_SEG_THREADS, CC_SEG_MIN_CTAS)
cc_forward_seg(const la_storage_t* __restrict__ q, const la_storage_t* __restrict__ k,
               const la_storage_t* __restrict__ v, const float* __restrict__ states,
               la_storage_t* __restrict__ out, float* __restrict__ den_out, int seg_chunks, int n,
               int num_chunks, float log2_decay, float chunk_decay, float eps, int map, int d, int m) {
    extern __shared__ __align__(16) unsigned char cc_smem[];
    cc_u16* s_q = (cc_u16*)cc_smem;                  // [64 i][LDD]  q̃
    cc_u16* s_k = s_q + CC_L * CC_LDD;               // [64 j][LDD]  k̃
    cc_u16* s_kt = s_k + CC_L * CC_LDD;              // [D][LDT]     λ^{L−1−j} k̃_j, transposed
    cc_u16* s_vt = s_kt + CC_D * CC_LDT;             // [64 e][LDT]  v slice, transposed
    uint4* s_st = (uint4*)(s_vt + CC_TILE * CC_LDT);  // D/64 × [64 e][16 records]  packed Sᵀ
    float* s_z = (float*)(s_st + CC_DT * CC_TILE * 16);  // [2][D] z, by chunk parity
    // z packed as the B operand of an extra n-tile of the inter product: per d-tile 2 rows of
    // 16 records, row 0 z (hi + lo, one power of two) read by the lanes g = 0 (column n = 0),
    // row 1 zeros read by the others, so den's q̃·z comes from the tensor cores with q̃'s
    // fragments already loaded.
    uint4* s_zrec = (uint4*)(s_z + 2 * CC_D);  // D/64 × [2][16 records]
    __shared__ __align__(16) float s_w[CC_L], s_rowmax[2][CC_TILE], s_unscale[CC_TILE];
    __shared__ float s_zmax[2];  // max |z| over each half of D
    __shared__ float s_log2_decay;  // log2 λ (see `zero` in the loop)

    const int seg = blockIdx.x, bh = blockIdx.y, e0 = blockIdx.z * CC_TILE;
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
    for (int j = threadIdx.x; j < CC_L; j += CC_SEG_THREADS) s_w[j] = cc_pow(log2_decay, (float)(CC_L - 1 - j));
    if (threadIdx.x == 0) s_log2_decay = log2_decay;

    // S⁰ of the segment (fragment layout: rows e = row0 + g (+8), columns dc0 + 8nt + 2t, +1);
    // z⁰ into shared memory (z lives there: its update reads one parity, writes the other).
    const float* state = states + ((la_index_t)bh * num_segments + seg) * CC_STATE_STRIDE;
    float run[CC_SEG_NT][4];
#pragma unroll
    for (int nt = 0; nt < CC_SEG_NT; ++nt) {
        const float* p = state + (la_index_t)(e0 + row0 + g) * CC_D + dc0 + 8 * nt + 2 * t;
        const float2 lo = *(const float2*)p, hi = *(const float2*)(p + 8 * CC_D);
        run[nt][0] = lo.x, run[nt][1] = lo.y, run[nt][2] = hi.x, run[nt][3] = hi.y;
    }
    for (int r = threadIdx.x; r < CC_DT * 2 * 16; r += CC_SEG_THREADS)
        if (r % (2 * 16) >= 16) s_zrec[r] = make_uint4(0u, 0u, 0u, 0u);  // row 1, never written again
    if (rg == 0) {  // z⁰ of this half's features into s_z[0], and its max (as the state step)
        float mz = 0.0f;
#pragma unroll
        for (int nt = 0; nt < CC_SEG_NT; ++nt) {
            const int f = dc0 + 8 * nt + 2 * t;
            const float2 z = *(const float2*)(state + (la_index_t)CC_D * CC_M + f);
            if (g == 0) *(float2*)(s_z + f) = z;
            mz = fmaxf(mz, fmaxf(fabsf(z.x), fabsf(z.y)));
        }
        mz = fmaxf(mz, __shfl_xor_sync(LA_FULL_MASK, mz, 1));
        mz = fmaxf(mz, __shfl_xor_sync(LA_FULL_MASK, mz, 2));
        if (lane == 0) s_zmax[hh] = mz;
    }
    cc_seg_raw raw;
    cc_seg_fetch<true, true>(raw, q, k, v, head_row0, first * CC_L, n, e0, dw, mw, m_cols);

    for (int chunk = first; chunk < end; ++chunk) {
        const int tok0 = chunk * CC_L;
        const float* z_cur = s_z + ((chunk - first) & 1) * CC_D;
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
                    const cc_u32 ha = cc_pack(a0, a1), hb = cc_pack(b0, b1);
                    const cc_u32 la = cc_pack(a0 - cc_lo(ha), a1 - cc_hi(ha));
                    const cc_u32 lb = cc_pack(b0 - cc_lo(hb), b1 - cc_hi(hb));
                    const int e = row0 + g + 8 * h;
                    s_st[tile * CC_TILE * 16 + e * 16 + (c ^ ((e & 1) << 2))] = make_uint4(ha, hb, la, lb);
                }
            }
            if (rg == 0 && g == 0) {  // z's records (row 0 of s_zrec), as the state's
                const float sz = cc_pow2(z_exp);
#pragma unroll
                for (int kk = 0; kk < CC_SEG_NT / 2; ++kk) {
                    const int dd = dc0 + 16 * kk, tile = dd / CC_TILE, c = 4 * ((dd % CC_TILE) / 16) + t;
                    const float2 za = *(const float2*)(z_cur + dd + 2 * t);
                    const float2 zb = *(const float2*)(z_cur + dd + 8 + 2 * t);
                    const float a0 = za.x * sz, a1 = za.y * sz, b0 = zb.x * sz, b1 = zb.y * sz;
                    const cc_u32 ha = cc_pack(a0, a1), hb = cc_pack(b0, b1);
                    const cc_u32 la = cc_pack(a0 - cc_lo(ha), a1 - cc_hi(ha));
                    const cc_u32 lb = cc_pack(b0 - cc_lo(hb), b1 - cc_hi(hb));
                    s_zrec[tile * 2 * 16 + c] = make_uint4(ha, hb, la, lb);
                }
            }
        }
#pragma unroll
        for (int h = 0; h < CC_DT; ++h) {
            const int cols = cc_slice_cols<CC_D>(dw, h * CC_TILE);
            cc_seg_put(s_q, nullptr, raw.q[h], h * CC_TILE, tok0, n, cols, map, nullptr);
            cc_seg_put(s_k, s_kt, raw.k[h], h * CC_TILE, tok0, n, cols, map, s_w);
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
#pragma unroll
                for (int nt = 0; nt < 4; ++nt) {
                    const uint4 b = st[nt * 8 * 16];
                    cc_mma(o[nt], a, b.x, b.y);
                    cc_mma(o[nt], a, b.z, b.w);
                }
                const uint4 zb = s_zrec[(ks >> 2) * 2 * 16 + (g ? 16 : 0) + 4 * (ks & 3) + t];
                cc_mma(qacc, a, zb.x, zb.y);
                cc_mma(qacc, a, zb.z, zb.w);
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
                        p[nt][c] *= exp2f(l2d * (float)(i - j));
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
#pragma unroll
                for (int nt = 0; nt < 4; ++nt) {
                    const cc_u16* bp = s_vt + (32 * hh + nt * 8 + g) * CC_LDT + ks * 16 + 2 * t;
                    const cc_u32 b0 = *(const cc_u32*)bp, b1 = *(const cc_u32*)(bp + 8);
                    cc_mma(o[nt], a_hi, b0, b1);
                    cc_mma(o[nt], a_lo, b0, b1);
                }
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
            cc_seg_fetch<false, true>(raw, q, k, v, head_row0, tok0 + CC_L, n, e0, dw, mw, m_cols);

        const int i_lo = tok0 + row0 + g, i_hi = i_lo + 8;
        const float den_lo = normalised ? w_lo * qz_lo + row_sum[0] + eps : 1.0f;
        const float den_hi = normalised ? w_hi * qz_hi + row_sum[1] + eps : 1.0f;
        const float inv_lo = 1.0f / den_lo, inv_hi = 1.0f / den_hi;
#pragma unroll
        for (int pp = 0; pp < 2; ++pp) {  // 4 columns (8 bytes) per lane, cc_quad_swap
            const int e = e0 + 32 * hh + pp * 16 + cc_quad_col(t);
            cc_u32 x_lo = cc_pack(o[2 * pp][0] * inv_lo, o[2 * pp][1] * inv_lo);
            cc_u32 y_lo = cc_pack(o[2 * pp + 1][0] * inv_lo, o[2 * pp + 1][1] * inv_lo);
            cc_u32 x_hi = cc_pack(o[2 * pp][2] * inv_hi, o[2 * pp][3] * inv_hi);
            cc_u32 y_hi = cc_pack(o[2 * pp + 1][2] * inv_hi, o[2 * pp + 1][3] * inv_hi);
            cc_quad_swap(x_lo, y_lo);
            cc_quad_swap(x_hi, y_hi);
            if (32 * hh + pp * 16 >= m_cols) continue;  // columns past m (warp-uniform)
            if (i_lo < n) *(uint2*)(out + (head_row0 + i_lo) * mw + e) = make_uint2(x_lo, y_lo);
            if (i_hi < n) *(uint2*)(out + (head_row0 + i_hi) * mw + e) = make_uint2(x_hi, y_hi);
        }
        if (blockIdx.z == 0 && hh == 0 && t == 0) {
            if (i_lo < n) den_out[head_row0 + i_lo] = den_lo;
            if (i_hi < n) den_out[head_row0 + i_hi] = den_hi;
        }
        if (chunk + 1 == end) break;  // the segment's last state is not needed

        cc_seg_state_step<false>(run, s_z + ((chunk - first + 1) & 1) * CC_D, z_cur, s_zmax, s_vt, s_kt,
                                 chunk_decay);
        cc_seg_fetch<true, false>(raw, q, k, v, head_row0, tok0 + CC_L, n, e0, dw, mw, m_cols);
    }
}
// Pass 1 of the segmented forward: the sum of each segment s < NC/BS − 1 (the last one's is
// never read), ΔS_s = Σ_{c∈s} λ^{L(BS−1−c')} ΔS_c and z likewise, from zero, into slot s + 1
// of the segment states (fp32, CC_STATE_STRIDE's layout) for cc_seg_scan. cc_forward_seg's
// warp mapping and state step (cc_seg_state_step), without its outputs: per chunk k̃ (φ,
// weighted, transposed) and the v slice staged between two barriers, the step. All segments at once
// (one CTA per (segment, b·h, M/64 slice), each a chain of BS chunks), where cc_forward_h's
// walk is a chain over every chunk. grid (NC/BS − 1, B·H, M/64), CC_SEG_THREADS; dynamic shared
// CC_SEG_SUMS_SMEM (28.7 KB at D = 128). Limits: D ≤ 128; the file's.
#define CC_SEG_SUMS_SMEM (CC_D * CC_LDT * 2 + CC_TILE * CC_LDT * 2 + 2 * CC_D * 4)
extern "C" __global__ void __launch_bounds__(CC_SEG_THREADS, 2)
cc_seg_sums(const la_storage_t* __restrict__ k, const la_storage_t* __restrict__ v, float* __restrict__ states,
            int seg_chunks, int n, int num_chunks, float log2_decay, float chunk_decay, int map, int d, int m) {
    extern __shared__ __align__(16) unsigned char cc_smem[];
    cc_u16* s_kt = (cc_u16*)cc_smem;                  // [D][LDT]     λ^{L−1−j} k̃_j, transposed
    cc_u16* s_vt = s_kt + CC_D * CC_LDT;              // [64 e][LDT]  v slice, transposed
    float* s_z = (float*)(s_vt + CC_TILE * CC_LDT);   // [2][D] z, by chunk parity
    __shared__ float s_w[CC_L], s_zmax[CC_SEG_THREADS / 32];

    const int seg = blockIdx.x, bh = blockIdx.y, e0 = blockIdx.z * CC_TILE;
    const int num_segments = (num_chunks + seg_chunks - 1) / seg_chunks;
    const int first = seg * seg_chunks, end = first + seg_chunks;  // whole: seg < segments − 1
    const int dw = cc_width<CC_D>(d), mw = cc_width<CC_M>(m);
    const int m_cols = cc_slice_cols<CC_M>(mw, e0);
    const la_index_t head_row0 = (la_index_t)bh * n;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int rg = warp & 3, hh = warp >> 2, row0 = 16 * rg, dc0 = hh * (CC_D / 2);
    for (int j = threadIdx.x; j < CC_L; j += CC_SEG_THREADS) s_w[j] = cc_pow(log2_decay, (float)(CC_L - 1 - j));
    for (int f = threadIdx.x; f < CC_D; f += CC_SEG_THREADS) s_z[f] = 0.0f;
    float run[CC_SEG_NT][4];
#pragma unroll
    for (int nt = 0; nt < CC_SEG_NT; ++nt) run[nt][0] = run[nt][1] = run[nt][2] = run[nt][3] = 0.0f;
    for (int chunk = first; chunk < end; ++chunk) {
        const int tok0 = chunk * CC_L;
        cc_seg_raw raw;
        cc_seg_fetch<false, true>(raw, nullptr, k, v, head_row0, tok0, n, e0, dw, mw, m_cols);
        __syncthreads();  // the previous chunk's reads of the tiles and of z are done; s_w, s_z
        // v first: its registers are then free during k's (held through them, ptxas spilled).
        cc_walk_put<false, false, false>(s_vt, nullptr, raw.v, tok0, n, m_cols, LA_MAP_IDENTITY, nullptr,
                                         nullptr, nullptr);
#pragma unroll
        for (int h = 0; h < CC_DT; ++h)
            cc_walk_put<false, true, false>(s_kt + h * CC_TILE * CC_LDT, nullptr, raw.k[h], tok0, n,
                                            cc_slice_cols<CC_D>(dw, h * CC_TILE), map, s_w, nullptr, nullptr);
        __syncthreads();  // the tiles
        cc_seg_state_step<true>(run, s_z + ((chunk - first + 1) & 1) * CC_D,
                                s_z + ((chunk - first) & 1) * CC_D, s_zmax, s_vt, s_kt, chunk_decay);
    }
    float* dst = states + ((la_index_t)bh * num_segments + seg + 1) * CC_STATE_STRIDE;
#pragma unroll
    for (int nt = 0; nt < CC_SEG_NT; ++nt) {
        float* p = dst + (la_index_t)(e0 + row0 + g) * CC_D + dc0 + 8 * nt + 2 * t;
        *(float2*)p = make_float2(run[nt][0], run[nt][1]);
        *(float2*)(p + 8 * CC_D) = make_float2(run[nt][2], run[nt][3]);
    }
    __syncthreads();  // the last chunk's z
    if (blockIdx.z == 0) {  // z is the same in every slice: slice 0 writes it
        const float* z = s_z + ((end - first) & 1) * CC_D;
        for (int f = threadIdx.x; f < CC_D; f += CC_SEG_THREADS) dst[(la_index_t)CC_D * CC_M + f] = z[f];
    }
}
#endif  // CC_D <= 128

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
