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
// batched step runs B·H heads at once. Per token, every global load the token needs is issued
// before any is used — thread i's element of q, k (i < D) and v (i < M), z[i] (i < C), and the
// first DEC_UNROLL rows of S it owns — so their latencies overlap (one DRAM round trip, not
// five). q, k are staged raw in shared memory, φ is applied there (fp32), v too. Thread i < C
// owns z[i] (and the partial q̃ᵀz, block-summed into den). S: for each 32-column slice of M,
// lane l owns column l of the slice and warp w owns rows w, w+8, ...; it reads them DEC_UNROLL
// rows at a time (loads first, then the updates: DEC_UNROLL loads in flight per thread, what
// keeps HBM busy when B·H is large), updates them and sums q̃_a S[a][l] over its rows into
// partial[w][column]; after one barrier each thread < M sums its column's 8 partials and
// writes o. Each S and z element is read and written by the same thread at every token (the
// early loads included): no atomics, no races.
//
// Layout: q, k [B·H, seq_stride, D], v, out [B·H, seq_stride, M]; the launch reads and writes
// tokens 0..n of each head's row (n ≤ seq_stride). A prefill passes seq_stride = n; a decoder
// streaming a staged [B·H, T, ·] buffer passes seq_stride = T and pointers advanced to its
// token, so one launch per token reads the staged buffers in place.
//
// Limits: C ≤ DEC_MAX_DIM, D ≤ DEC_MAX_DIM and M ≤ DEC_MAX_DIM (256 = DEC_THREADS: one
// element of q, k, v, z per thread; the shared staging arrays); any number of tokens per
// launch; B·H ≤ 2³¹−1 blocks (grid x). Shared memory: 6·1 KiB + 8 KiB (partial) + 128 B,
// static.
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
// Rows of S a thread loads together (its loads in flight at once).
#define DEC_UNROLL 8
static_assert(DEC_MAX_DIM <= DEC_THREADS, "one element of q, k, v and z per thread");

// φ of one row x (D fp32 elements, shared) into f (C elements, shared). Every thread touches only the
// indices i ≡ tid (mod DEC_THREADS) of x and f, so the block reductions are the only
// exchanges; they end with a barrier, and the caller syncs before f is read.
__device__ __forceinline__ void dec_features(const float* x, float* f, int d, int c,
                                             const float* __restrict__ favor_w, float* xs,
                                             float* scratch) {
#if DEC_ROW_MAP == DEC_ROW_FAVOR
    // φ = exp(W x' − ‖x'‖²/2)/√R, x' = x·D^{-1/4}, W: R×D fp32 (R = C). Unshifted, like the
    // f64 oracle: a stream has no max over all keys to subtract.
    const float scale = rsqrtf(sqrtf((float)d));
    float sq = 0.0f;
    for (int i = threadIdx.x; i < d; i += DEC_THREADS) {
        const float xi = x[i] * scale;
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
    for (int i = threadIdx.x; i < d; i += DEC_THREADS) mx = fmaxf(mx, x[i]);
    mx = la_block_max(mx, scratch);
    float total = 0.0f;
    for (int i = threadIdx.x; i < d; i += DEC_THREADS) {
        const float e = expf(x[i] - mx);
        f[i] = e;
        total += e;
    }
    const float inv = 1.0f / la_block_sum(total, scratch);
    for (int i = threadIdx.x; i < d; i += DEC_THREADS) f[i] *= inv;
#elif DEC_ROW_MAP == DEC_ROW_ONE_PLUS_COS
    // φ = [1, x/‖x‖] (C = D + 1); a zero row has no direction: x̂ = 0, as in the oracle.
    float sq = 0.0f;
    for (int i = threadIdx.x; i < d; i += DEC_THREADS) {
        const float xi = x[i];
        sq += xi * xi;
    }
    const float norm = sqrtf(la_block_sum(sq, scratch));
    const float inv = norm > 0.0f ? 1.0f / norm : 0.0f;
    for (int i = threadIdx.x; i < d; i += DEC_THREADS) f[i + 1] = x[i] * inv;
    if (threadIdx.x == 0) f[0] = 1.0f;
#else
    for (int i = threadIdx.x; i < d; i += DEC_THREADS) f[i] = la_phi(x[i]);
#endif
}

// DEC_UNROLL rows a0, a0 + DEC_WARPS, ... of S at column col (zero where outside C×M).
__device__ __forceinline__ void dec_load_rows(float (&sv)[DEC_UNROLL], const float* sh, int a0,
                                              int col, int c, int m) {
#pragma unroll
    for (int u = 0; u < DEC_UNROLL; ++u) {
        const int a = a0 + u * DEC_WARPS;
        sv[u] = (col < m && a < c) ? sh[(la_index_t)a * m + col] : 0.0f;
    }
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
    __shared__ float qr[DEC_MAX_DIM];  // q, k of the token, fp32, before φ
    __shared__ float kr[DEC_MAX_DIM];
    __shared__ float qf[DEC_MAX_DIM];
    __shared__ float xs[DEC_MAX_DIM];  // x' of FAVOR+
    __shared__ float kf[DEC_MAX_DIM];
    __shared__ float vs[DEC_MAX_DIM];
    __shared__ float partial[DEC_WARPS][DEC_MAX_DIM];
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
        // Every load of the token first (see the header); S and z are this thread's own.
        const float q_in = tid < d ? la_load(q, qk_row + tid) : 0.0f;
        const float k_in = tid < d ? la_load(k, qk_row + tid) : 0.0f;
        const float v_in = tid < m ? la_load(v, v_row + tid) : 0.0f;
        const float z_old = tid < c ? zh[tid] : 0.0f;
        float first[DEC_UNROLL];
        dec_load_rows(first, sh, warp, lane, c, m);
        if (tid < d) {
            qr[tid] = q_in;
            kr[tid] = k_in;
        }
        if (tid < m) vs[tid] = v_in;
#if DEC_ROW_MAP != DEC_ROW_NONE
        // A row map reads every element of the row; an elementwise one only its own.
        __syncthreads();
#endif
        dec_features(qr, qf, d, c, favor_w, xs, scratch);
        dec_features(kr, kf, d, c, favor_w, xs, scratch);
        __syncthreads();

        float qz = 0.0f;
        if (tid < c) {
            const float zi = decay * z_old + kf[tid];
            zh[tid] = zi;
            qz = qf[tid] * zi;
        }
        // Every thread gets den; the block sum ends with a barrier.
        const float den = la_block_sum(qz, scratch) + eps;

        for (int col0 = 0; col0 < m; col0 += LA_WARP) {
            const int col = col0 + lane;
            const float vc = col < m ? vs[col] : 0.0f;
            float acc = 0.0f;
            for (int a0 = warp; a0 < c; a0 += DEC_WARPS * DEC_UNROLL) {
                float sv[DEC_UNROLL];
                if (col0 == 0 && a0 == warp) {
#pragma unroll
                    for (int u = 0; u < DEC_UNROLL; ++u) sv[u] = first[u];
                } else {
                    dec_load_rows(sv, sh, a0, col, c, m);
                }
#pragma unroll
                for (int u = 0; u < DEC_UNROLL; ++u) {
                    const int a = a0 + u * DEC_WARPS;
                    if (col < m && a < c) {
                        const float next = decay * sv[u] + kf[a] * vc;
                        sh[(la_index_t)a * m + col] = next;
                        acc += qf[a] * next;
                    }
                }
            }
            if (col < m) partial[warp][col] = acc;
        }
        __syncthreads();
        for (int col = tid; col < m; col += DEC_THREADS) {
            float num = 0.0f;
#pragma unroll
            for (int w = 0; w < DEC_WARPS; ++w) num += partial[w][col];
#if LA_NORMALISED
            num /= den;
#endif
            la_store(out, v_row + col, num);
        }
        // No barrier here: the next token may write qr, kr, vs (and qf, kf for an
        // elementwise map) before its first barrier, and every read of them happened before
        // the barrier above; partial, xs and scratch are written only after a barrier of the
        // next token, which waits for these reads of partial.
    }
}
