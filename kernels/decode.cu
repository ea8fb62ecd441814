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
// Limits: C ≤ DEC_MAX_DIM and M ≤ DEC_MAX_DIM (256: the shared staging arrays); any D = C
// (φ is elementwise: identity, elu+1, relu; other maps are not fused here); any number of
// tokens per launch; B·H ≤ 2³¹−1 blocks (grid x). Shared memory: 3·1 KiB + 1.1 KiB, static.
//
// Defines: LA_STORAGE, LA_MAP, LA_NORMALISED (prelude).

#define DEC_THREADS 256
#define DEC_WARPS (DEC_THREADS / LA_WARP)
#define DEC_MAX_DIM 256

// q, k: [B·H, n, C]; v, out: [B·H, n, M]; s: [B·H, C, M]; z: [B·H, C].
extern "C" __global__ void __launch_bounds__(DEC_THREADS)
dec_step(const la_storage_t* __restrict__ q, const la_storage_t* __restrict__ k,
         const la_storage_t* __restrict__ v, float* __restrict__ s, float* __restrict__ z,
         la_storage_t* __restrict__ out, int n, int c, int m, float decay, float eps) {
    __shared__ float qf[DEC_MAX_DIM];
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
        const la_index_t qk_row = (head * n + t) * c;
        const la_index_t v_row = (head * n + t) * m;
        for (int i = tid; i < c; i += DEC_THREADS) {
            qf[i] = la_phi(la_load(q, qk_row + i));
            kf[i] = la_phi(la_load(k, qk_row + i));
        }
        for (int j = tid; j < m; j += DEC_THREADS) vs[j] = la_load(v, v_row + j);
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
