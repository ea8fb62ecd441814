// softmax.cu — the kernels of naive softmax attention (crates/linattn-softmax): a batched
// tiled GEMM and the row-wise masked softmax and its backward.
//
// Math (SPEC §1). Per (batch, head), in row-major buffers of the storage type (fp32
// accumulate), the Rust side runs:
//   forward   S = Q Kᵀ                 (unscaled: the scale s = 1/√D is applied here in fp32)
//             P = softmax_row(s·S + mask)          <- sm_forward_rows, in place
//             O = P V
//   backward  dV = Pᵀ dO,  dP = dO Vᵀ
//             dS = s · P ⊙ (dP − rowsum(P ⊙ dP))  <- sm_backward_rows, in place on dP
//             dQ = dS K,  dK = dSᵀ Q
// The five products are strided-batched GEMMs planned by crates/linattn-softmax/src/
// gemm_plan.rs (RowMajorGemm): on a GPU by cuBLAS (default) or by sm_gemm below, on
// the PTX simulator by sm_gemm.
// rowsum(P ⊙ dP) equals rowsum(dO ⊙ O); the kernel forms it from the row it already reads.
// The causal mask keeps key j ≤ query i: masked entries are written as exact zeros, so the
// following full N×N GEMMs (the naive baseline does not skip the upper triangle) add nothing.

#define SM_GEMM_TILE 64
#define SM_GEMM_K 16
#define SM_GEMM_THREADS 256
#define SM_GEMM_SUB (SM_GEMM_TILE / 16)

// Stages tile[p][x] = X[p0 + p][x0 + x] for p < 16, x < 64 (0 where x0 + x ≥ extent or
// p0 + p ≥ k) of an operand X = op(A) (x = i) or op(B) (x = j), in memory as [k][extent] with
// leading dim ld (`x_contiguous`: A transposed, B as it is) or as [extent][k]. The fast thread
// index runs along the contiguous dimension (coalesced loads); 4 elements per thread.
__device__ __forceinline__ void sm_stage(float (*tile)[SM_GEMM_TILE + 1], const la_storage_t* __restrict__ src,
                                         la_index_t ld, bool x_contiguous, int x0, int extent, int p0,
                                         int k) {
    const int t = threadIdx.x;
#pragma unroll
    for (int r = 0; r < 4; ++r) {
        int x, p;
        if (x_contiguous) {
            x = t % SM_GEMM_TILE;
            p = t / SM_GEMM_TILE + 4 * r;
        } else {
            p = t % SM_GEMM_K;
            x = t / SM_GEMM_K + 16 * r;
        }
        const int gx = x0 + x;
        const int gp = p0 + p;
        float v = 0.0f;
        if (gx < extent && gp < k) {
            v = x_contiguous ? la_load(src, (la_index_t)gp * ld + gx) : la_load(src, (la_index_t)gx * ld + gp);
        }
        tile[p][x] = v;
    }
}

// ---- sm_gemm -------------------------------------------------------------------------------
// Math. For every batch index z < batches, with A_z = a + z·stride_a (likewise B_z, C_z):
//   C_z[m×n] = op(A_z)·op(B_z),   op(A) m×k, op(B) k×n, all buffers row-major and contiguous:
//   A_z is m×k (lda = k), or k×m (lda = m) read transposed when a_transposed;
//   B_z is k×n (ldb = n), or n×k (ldb = k) read transposed when b_transposed;
//   C_z is m×n (ldc = n), overwritten (β = 0, never read).
// Products and sums in fp32 (fmaf, k ascending in steps of 16), loads widen from LA_STORAGE,
// the store rounds once to LA_STORAGE (RN).
//
// Mapping. One block of 256 threads per 64×64 tile of C: blockIdx.x = tile_row·tiles_n +
// tile_col with tiles_n = ⌈n/64⌉; blockIdx.y is the first batch index, the block then steps
// by gridDim.y (so any number of batches fits the 65535 limit of grid.y). Thread t = 16·ty + tx
// owns C[row0 + ty + 16i][col0 + tx + 16j], i, j < 4 (16 accumulators): a warp's 32 threads
// read 16 consecutive columns of the B tile (conflict-free) and 2 rows of the A tile
// (broadcasts). Per k step of 16 the block stages op(A)[64×16] and op(B)[16×64] in shared
// memory as fp32 ([16][65], the +1 staggers the banks of the transposed stores); each thread
// loads 4 elements of each, with consecutive threads on consecutive addresses of global memory
// whichever way the operand is stored. Elements outside m, n or k are staged as 0 and outputs
// outside m×n are not stored, so any m, n, k ≥ 1 work.
//
// Limits. 1 ≤ m, n, k ≤ 2^31 − 1; ⌈m/64⌉·⌈n/64⌉ ≤ 2^31 − 1 blocks (grid.x); offsets are 64-bit
// (batch strides, row·ld). blockDim.x must be exactly SM_GEMM_THREADS = 256 (the kernel
// returns without touching memory otherwise). 8320 bytes of static shared memory.
extern "C" __global__ void __launch_bounds__(SM_GEMM_THREADS)
sm_gemm(const la_storage_t* __restrict__ a, const la_storage_t* __restrict__ b,
        la_storage_t* __restrict__ c, int m, int n, int k, int a_transposed, int b_transposed,
        la_index_t stride_a, la_index_t stride_b, la_index_t stride_c, int batches) {
    __shared__ float a_tile[SM_GEMM_K][SM_GEMM_TILE + 1];  // [p][i] of op(A)
    __shared__ float b_tile[SM_GEMM_K][SM_GEMM_TILE + 1];  // [p][j] of op(B)
    if (blockDim.x != SM_GEMM_THREADS) return;
    const int t = threadIdx.x;
    const int tx = t % 16;
    const int ty = t / 16;
    const int tiles_n = (n + SM_GEMM_TILE - 1) / SM_GEMM_TILE;
    const int row0 = (int)(blockIdx.x / tiles_n) * SM_GEMM_TILE;
    const int col0 = (int)(blockIdx.x % tiles_n) * SM_GEMM_TILE;
    const la_index_t lda = a_transposed ? m : k;
    const la_index_t ldb = b_transposed ? k : n;

    for (int z = blockIdx.y; z < batches; z += gridDim.y) {
        const la_storage_t* __restrict__ az = a + (la_index_t)z * stride_a;
        const la_storage_t* __restrict__ bz = b + (la_index_t)z * stride_b;
        la_storage_t* __restrict__ cz = c + (la_index_t)z * stride_c;

        float acc[SM_GEMM_SUB][SM_GEMM_SUB];
#pragma unroll
        for (int i = 0; i < SM_GEMM_SUB; ++i)
#pragma unroll
            for (int j = 0; j < SM_GEMM_SUB; ++j) acc[i][j] = 0.0f;

        for (int p0 = 0; p0 < k; p0 += SM_GEMM_K) {
            // Stage op(A)[row0.., p0..] and op(B)[p0.., col0..].
            sm_stage(a_tile, az, lda, a_transposed, row0, m, p0, k);
            sm_stage(b_tile, bz, ldb, !b_transposed, col0, n, p0, k);
            __syncthreads();
#pragma unroll
            for (int p = 0; p < SM_GEMM_K; ++p) {
                float av[SM_GEMM_SUB];
                float bv[SM_GEMM_SUB];
#pragma unroll
                for (int i = 0; i < SM_GEMM_SUB; ++i) av[i] = a_tile[p][ty + 16 * i];
#pragma unroll
                for (int j = 0; j < SM_GEMM_SUB; ++j) bv[j] = b_tile[p][tx + 16 * j];
#pragma unroll
                for (int i = 0; i < SM_GEMM_SUB; ++i)
#pragma unroll
                    for (int j = 0; j < SM_GEMM_SUB; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
            }
            // The next step (or batch) overwrites the tiles.
            __syncthreads();
        }

#pragma unroll
        for (int i = 0; i < SM_GEMM_SUB; ++i) {
            const int gi = row0 + ty + 16 * i;
            if (gi >= m) continue;
#pragma unroll
            for (int j = 0; j < SM_GEMM_SUB; ++j) {
                const int gj = col0 + tx + 16 * j;
                if (gj < n) la_store(cz, (la_index_t)gi * n + gj, acc[i][j]);
            }
        }
    }
}

// ---- the row kernels ------------------------------------------------------------------------
// Mapping. One block per row of the [B·H·N, N] matrix: blockIdx.x = (b·H + h)·N + i, so the
// query index is blockIdx.x mod N. Threads stride over the row's columns. Forward: one pass
// keeps a per-thread online (max, Σexp) pair, combined by block reductions (max first, then
// each thread rescales its sum to the block max); a second pass writes exp(x − max)/Σ.
// Backward: one pass for rowsum(P ⊙ dP), one pass writing dS. All math in fp32; the storage
// type (LA_STORAGE, see prelude.cuh) is only what is loaded and stored. Both write every
// column of their row (masked ones as 0), so their outputs need no zero-fill.
//
// Limits. Any N ≥ 1 (columns are strided, rows never cached), N ≤ 2^31 − 1 (int), and
// B·H·N ≤ 2^31 − 1 rows (grid.x); row offsets are 64-bit. blockDim.x must be a multiple of
// 32 and at most 1024 (the block reductions use ≤ 32 warps of scratch). Every row has at
// least its diagonal visible, so its max is finite for finite scores; an fp16 score that
// overflowed to ±inf makes the row NaN, which the harness reports as non-finite output.

#define SM_MAX_WARPS 32

// Keys visible to query `query` of a sequence of `n` positions.
__device__ __forceinline__ int sm_visible(int query, int n, int causal) {
    return causal ? query + 1 : n;
}

// Forward, in place on one row of S: P = softmax(s·S + mask) (see the mapping and limits above).
extern "C" __global__ void
sm_forward_rows(la_storage_t* __restrict__ scores, int n, int causal, float scale) {
    __shared__ float scratch[SM_MAX_WARPS];
    const la_index_t row = blockIdx.x;
    const int query = (int)(row % n);
    const int visible = sm_visible(query, n, causal);
    la_storage_t* __restrict__ p = scores + row * (la_index_t)n;

    // Online max and sum of exp over this thread's columns.
    float local_max = LA_NEG_INF;
    float local_sum = 0.0f;
    for (int j = threadIdx.x; j < visible; j += blockDim.x) {
        const float x = scale * la_load(p, j);
        if (x > local_max) {
            // exp(−inf) = 0 covers the first element (local_sum is 0 then anyway).
            local_sum = local_sum * expf(local_max - x) + 1.0f;
            local_max = x;
        } else {
            local_sum += expf(x - local_max);
        }
    }
    const float row_max = la_block_max(local_max, scratch);
    // Threads that saw no column hold (−inf, 0): their rescaled sum is 0·0 = 0, not NaN,
    // because row_max is finite.
    const float rescaled = local_sum == 0.0f ? 0.0f : local_sum * expf(local_max - row_max);
    const float row_sum = la_block_sum(rescaled, scratch);
    const float inv_sum = 1.0f / row_sum;

    for (int j = threadIdx.x; j < n; j += blockDim.x) {
        const float prob = j < visible ? expf(scale * la_load(p, j) - row_max) * inv_sum : 0.0f;
        la_store(p, j, prob);
    }
}

// Backward, in place on one row of dP: dS = s · P ⊙ (dP − rowsum(P ⊙ dP)) (mapping and limits
// above).
extern "C" __global__ void
sm_backward_rows(const la_storage_t* __restrict__ probs, la_storage_t* __restrict__ grad, int n,
                 int causal, float scale) {
    __shared__ float scratch[SM_MAX_WARPS];
    const la_index_t row = blockIdx.x;
    const int query = (int)(row % n);
    const int visible = sm_visible(query, n, causal);
    const la_index_t offset = row * (la_index_t)n;
    const la_storage_t* __restrict__ p = probs + offset;
    la_storage_t* __restrict__ g = grad + offset;

    float local = 0.0f;
    for (int j = threadIdx.x; j < visible; j += blockDim.x) {
        local += la_load(p, j) * la_load(g, j);
    }
    const float delta = la_block_sum(local, scratch);

    for (int j = threadIdx.x; j < n; j += blockDim.x) {
        const float ds = j < visible ? scale * la_load(p, j) * (la_load(g, j) - delta) : 0.0f;
        la_store(g, j, ds);
    }
}
