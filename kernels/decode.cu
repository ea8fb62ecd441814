// decode.cu — streaming decode of causal linear attention: the RNN step (SPEC §2, §6, §9).
//
// Math, per (batch, head), q̃ = φ(q_t), k̃ = φ(k_t), decay λ (1 = none), for each token t of
// the launch in order, starting from the carried state (S, z) of the tokens before:
//   S ← λ S + k̃ v_tᵀ (C×M, fp32),  z ← λ z + k̃ (C, fp32)
//   o_t = q̃ᵀ S / (q̃ᵀ z + ε)            (LA_NORMALISED = 0, the identity map: o_t = q̃ᵀ S)
// S and z live in global memory in fp32 whatever the storage of q, k, v, o (SPEC §9: sums
// over tokens overflow fp16); they are read and written back in place, so a launch of one
// token is a decode step and a launch of P tokens is a prefill that leaves the state after
// them. z carries every token since the start of the stream.
//
// Grid / block: grid (B·H), one block of DEC_THREADS = 256 threads (8 warps) per head, so a
// batched step runs B·H heads at once. Per token: the block stages q̃, k̃ (φ fused, fp32) and
// v in shared memory; thread i < C owns z[i] (and the partial q̃ᵀz, block-summed into den);
// for each 32-column slice of M, lane l owns column l of the slice and warp w owns rows
// w, w+8, ... of S: it updates them and sums q̃_a S[a][l] over its rows; the 8 partials are
// reduced through shared memory by warp 0, which writes o. Each S and z element is read and
// written by the same thread at every token: no atomics, no races.
//
// Maps: elementwise ones through LA_MAP (identity, elu+1, relu); DEC_ROW_MAP fuses the row
// maps softmax, 1+cos (block max/sum over the row, in fp32, SPEC §9) and FAVOR+ (the R×D
// projection W, fp32, read from global memory: thread r computes feature r).
//
// Layout: q, k [B·H, seq_stride, D], v, out [B·H, seq_stride, M]; the launch reads and writes
// tokens 0..n of each head's row (n ≤ seq_stride). A prefill passes seq_stride = n; a decoder
// streaming a staged [B·H, T, ·] buffer passes seq_stride = T and pointers advanced to its
// token, so one launch per token reads the staged buffers in place.
//
// Limits: C ≤ DEC_MAX_DIM, D ≤ DEC_MAX_DIM and M ≤ DEC_MAX_DIM (256: the shared staging
// arrays); any number of tokens per launch; B·H ≤ 2³¹−1 blocks (grid x). Shared memory:
// 4·1 KiB + 1.1 KiB, static.
//
// Defines: LA_STORAGE, LA_MAP, LA_NORMALISED (prelude); DEC_ROW_MAP.

#ifndef DEC_ROW_MAP
#define DEC_ROW_MAP 0
#endif
#define DEC_ROW_NONE 0         // φ elementwise, LA_MAP (identity, elu+1, relu)
#define DEC_ROW_SOFTMAX 1      // softmax over the features of a row
#define DEC_ROW_ONE_PLUS_COS 2 // [1, x/‖x‖]
#define DEC_ROW_FAVOR 3        // FAVOR+ positive random features

#define DEC_THREADS 256
#define DEC_WARPS (DEC_THREADS / LA_WARP)
#define DEC_MAX_DIM 256

// φ of one row x (D elements) into f (C elements, shared). Every thread touches only the
// indices i ≡ tid (mod DEC_THREADS) of x and f, so the block reductions are the only
// exchanges; they end with a barrier, and the caller syncs before f is read.
__device__ __forceinline__ void dec_features(const la_storage_t* __restrict__ x, float* f, int d,
                                             int c, const float* __restrict__ favor_w,
                                             float* xs, float* scratch) {
#if DEC_ROW_MAP == DEC_ROW_FAVOR
    // φ = exp(W x' − ‖x'‖²/2)/√R, x' = x·D^{-1/4}, W: R×D fp32 (R = C). Unshifted, like the
    // f64 oracle: a stream has no max over all keys to subtract.
    const float scale = rsqrtf(sqrtf((float)d));
    float sq = 0.0f;
    for (int i = threadIdx.x; i < d; i += DEC_THREADS) {
        const float xi = la_load(x, i) * scale;
        xs[i] = xi;
        sq += xi * xi;
    }
    // The block sum's barriers also publish xs to every thread.
    const float half = 0.5f * la_block_sum(sq, scratch);
    const float inv_sqrt_r = rsqrtf((float)c);
    for (int r = threadIdx.x; r < c; r += DEC_THREADS) {
        const float* __restrict__ wr = favor_w + (la_index_t)r * d;
        float dot = 0.0f;
        for (int i = 0; i < d; ++i) dot += wr[i] * xs[i];
        f[r] = expf(dot - half) * inv_sqrt_r;
    }
    // xs is rewritten by the next row.
    __syncthreads();
#elif DEC_ROW_MAP == DEC_ROW_SOFTMAX
    float mx = LA_NEG_INF;
    for (int i = threadIdx.x; i < d; i += DEC_THREADS) mx = fmaxf(mx, la_load(x, i));
    mx = la_block_max(mx, scratch);
    float total = 0.0f;
    for (int i = threadIdx.x; i < d; i += DEC_THREADS) {
        const float e = expf(la_load(x, i) - mx);
        f[i] = e;
        total += e;
    }
    const float inv = 1.0f / la_block_sum(total, scratch);
    for (int i = threadIdx.x; i < d; i += DEC_THREADS) f[i] *= inv;
#elif DEC_ROW_MAP == DEC_ROW_ONE_PLUS_COS
    // φ = [1, x/‖x‖] (C = D + 1); a zero row has no direction: x̂ = 0, as in the oracle.
    float sq = 0.0f;
    for (int i = threadIdx.x; i < d; i += DEC_THREADS) {
        const float xi = la_load(x, i);
        sq += xi * xi;
    }
    const float norm = sqrtf(la_block_sum(sq, scratch));
    const float inv = norm > 0.0f ? 1.0f / norm : 0.0f;
    for (int i = threadIdx.x; i < d; i += DEC_THREADS) f[i + 1] = la_load(x, i) * inv;
    if (threadIdx.x == 0) f[0] = 1.0f;
#else
    for (int i = threadIdx.x; i < d; i += DEC_THREADS) f[i] = la_phi(la_load(x, i));
#endif
}

// The RNN step over the launch's n tokens (see the header): S ← λS + k̃vᵀ, z ← λz + k̃,
// o_t = q̃ᵀS / (q̃ᵀz + ε), S and z updated in place. q, k: [B·H, seq_stride, D]; v, out:
// [B·H, seq_stride, M], tokens 0..n of each row; s: [B·H, C, M]; z: [B·H, C]; favor_w:
// [R, D] or null. Grid (B·H), block DEC_THREADS. Limits: C, D, M ≤ DEC_MAX_DIM, n ≤ seq_stride.
extern "C" __global__ void __launch_bounds__(DEC_THREADS)
dec_step(const la_storage_t* __restrict__ q, const la_storage_t* __restrict__ k,
         const la_storage_t* __restrict__ v, float* __restrict__ s, float* __restrict__ z,
         la_storage_t* __restrict__ out, const float* __restrict__ favor_w, int n,
         int seq_stride, int d, int c, int m, float decay, float eps) {
    __shared__ float qf[DEC_MAX_DIM];
    __shared__ float xs[DEC_MAX_DIM];  // x' of FAVOR+
    __shared__ float kf[DEC_MAX_DIM];
    __shared__ float vs[DEC_MAX_DIM];
    __shared__ float partial[DEC_WARPS][LA_WARP];
    __shared__ float scratch[LA_WARP];

    const la_index_t head = blockIdx.x;
    const int tid = threadIdx.x;
    const int lane = tid % LA_WARP;
    const int warp = tid / LA_WARP;
    float* __restrict__ sh = s + head * c * m;
    float* __restrict__ zh = z + head * c;

    for (int t = 0; t < n; ++t) {
        const la_index_t qk_row = (head * seq_stride + t) * d;
        const la_index_t v_row = (head * seq_stride + t) * m;
        for (int j = tid; j < m; j += DEC_THREADS) vs[j] = la_load(v, v_row + j);
        dec_features(q + qk_row, qf, d, c, favor_w, xs, scratch);
        dec_features(k + qk_row, kf, d, c, favor_w, xs, scratch);
        __syncthreads();

        float qz = 0.0f;
        for (int i = tid; i < c; i += DEC_THREADS) {
            const float zi = decay * zh[i] + kf[i];
            zh[i] = zi;
            qz += qf[i] * zi;
        }
        // Every thread gets den; the block sum ends with a barrier.
        const float den = la_block_sum(qz, scratch) + eps;

        for (int col0 = 0; col0 < m; col0 += LA_WARP) {
            const int col = col0 + lane;
            float acc = 0.0f;
            if (col < m) {
                const float vc = vs[col];
                for (int a = warp; a < c; a += DEC_WARPS) {
                    const la_index_t idx = (la_index_t)a * m + col;
                    const float sv = decay * sh[idx] + kf[a] * vc;
                    sh[idx] = sv;
                    acc += qf[a] * sv;
                }
            }
            partial[warp][lane] = acc;
            __syncthreads();
            if (warp == 0 && col < m) {
                float num = 0.0f;
#pragma unroll
                for (int w = 0; w < DEC_WARPS; ++w) num += partial[w][lane];
#if LA_NORMALISED
                num /= den;
#endif
                la_store(out, v_row + col, num);
            }
            // partial is rewritten by the next slice; qf, kf, vs by the next token.
            __syncthreads();
        }
    }
}
