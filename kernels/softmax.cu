// softmax.cu — the row-wise kernels of naive softmax attention (crates/linattn-softmax).
//
// Math (SPEC §1). Per (batch, head) the Rust side computes with cuBLAS, in row-major N×N
// buffers of the storage type (fp32 accumulate):
//   forward   S = Q Kᵀ                 (unscaled: the scale s = 1/√D is applied here in fp32)
//             P = softmax_row(s·S + mask)          <- la_softmax_forward_rows, in place
//             O = P V
//   backward  dV = Pᵀ dO,  dP = dO Vᵀ
//             dS = s · P ⊙ (dP − rowsum(P ⊙ dP))  <- la_softmax_backward_rows, in place on dP
//             dQ = dS K,  dK = dSᵀ Q
// rowsum(P ⊙ dP) equals rowsum(dO ⊙ O); the kernel forms it from the row it already reads.
// The causal mask keeps key j ≤ query i: masked entries are written as exact zeros, so the
// following full N×N GEMMs (the naive baseline does not skip the upper triangle) add nothing.
//
// Mapping. One block per row of the [B·H·N, N] matrix: blockIdx.x = (b·H + h)·N + i, so the
// query index is blockIdx.x mod N. Threads stride over the row's columns. Forward: one pass
// keeps a per-thread online (max, Σexp) pair, combined by block reductions (max first, then
// each thread rescales its sum to the block max); a second pass writes exp(x − max)/Σ.
// Backward: one pass for rowsum(P ⊙ dP), one pass writing dS. All math in fp32; the storage
// type (LA_STORAGE, see prelude.cuh) is only what is loaded and stored.
//
// Limits. Any N ≥ 1 (columns are strided, rows never cached), N ≤ 2^31 − 1 (int), and
// B·H·N ≤ 2^31 − 1 rows (grid.x); row offsets are 64-bit. blockDim.x must be a multiple of
// 32 and at most 1024 (the block reductions use ≤ 32 warps of scratch). Every row has at
// least its diagonal visible, so its max is finite for finite scores; an fp16 score that
// overflowed to ±inf makes the row NaN, which the harness reports as non-finite output.

#define LA_SOFTMAX_MAX_WARPS 32

// Keys visible to query `query` of a sequence of `n` positions.
__device__ __forceinline__ int la_softmax_visible(int query, int n, int causal) {
    return causal ? query + 1 : n;
}

extern "C" __global__ void la_softmax_forward_rows(la_storage_t* __restrict__ scores,
                                                   int n, int causal, float scale) {
    __shared__ float scratch[LA_SOFTMAX_MAX_WARPS];
    const la_index_t row = blockIdx.x;
    const int query = (int)(row % n);
    const int visible = la_softmax_visible(query, n, causal);
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

extern "C" __global__ void la_softmax_backward_rows(const la_storage_t* __restrict__ probs,
                                                    la_storage_t* __restrict__ grad,
                                                    int n, int causal, float scale) {
    __shared__ float scratch[LA_SOFTMAX_MAX_WARPS];
    const la_index_t row = blockIdx.x;
    const int query = (int)(row % n);
    const int visible = la_softmax_visible(query, n, causal);
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
