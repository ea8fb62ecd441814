// feature_map.cu — the φ stage for feature maps that are not elementwise (SPEC §5), and its
// vector-Jacobian products. Forms run these first and then their core with the identity
// map on the fp32 features; elementwise maps (elu+1, relu, identity) are fused in the cores.
//
// Inputs x are [rows, D] in the storage type (rows = B·H·N); features φ are fp32 [rows, C].
// Gradients g = ∂L/∂φ are fp32 [rows, C]; ∂L/∂x is written in the storage type.
//
//   softmax (rows):  φ_c = exp(x_c − max x) / Σ exp(x − max x)          C = D
//                    ∂x = φ ⊙ (g − g·φ)
//   efficient keys:  the same softmax, but over N for each (head, column)  C = D
//   1+cos:           φ = [1, x/‖x‖] (x̂ = 0 for a zero row)                 C = D + 1
//                    ∂x = (g₁.. − x̂ (x̂·g₁..)) / ‖x‖  (0 for a zero row)
//   FAVOR+:          x' = x·D^{-1/4}, u_r = W_r·x' − ‖x'‖²/2, φ_r = exp(u_r − m)/√R
//                    C = R; m = row max of u for queries, the head's max for keys (the f32
//                    stabiliser of the CPU fast path). The caller scales ε by e^{−m_q − m_k},
//                    so the shifts cancel in O and are constants for the gradient:
//                    ∂x'_t = Σ_r g_r φ_r (W_rt − x'_t), ∂x = D^{-1/4} ∂x'.
//
// Mapping: row-wise kernels use one warp per row, 8 rows per 256-thread block; a lane holds
// elements t = lane + 32·j, j < LA_DK_MAX/32, in registers. Column softmax: a block of
// 32×8 threads owns 32 columns of one head and strides over N (coalesced along the columns).
// FAVOR+ stages x' (exponents: lanes own features r) or g⊙φ (VJP: lanes own inputs t) in
// shared memory per warp; W is fp32 [R, D] row-major.
// Limits: D ≤ LA_DK_MAX ≤ 256 (class define), R ≤ 256 (FM_FAVOR_MAX_R), rows < 2^62.
// Kernels: fm_<map>_<rows|cols> compute φ, fm_backward_<map>_<rows|cols> its VJP, FAVOR+ in
// the passes fm_favor_exponents, fm_favor_head_max (keys), fm_favor_exp.

#ifndef LA_DK_MAX
#define LA_DK_MAX 256
#endif
#define FM_PER_LANE (LA_DK_MAX / LA_WARP)
#define FM_ROWS_PER_BLOCK 8
#define FM_FAVOR_MAX_R 256

// ---- one warp per row ------------------------------------------------------------------------

// The row of this warp: one warp per row, FM_ROWS_PER_BLOCK rows per 256-thread block.
__device__ __forceinline__ long long fm_warp_row() {
    return (long long)blockIdx.x * FM_ROWS_PER_BLOCK + threadIdx.x / LA_WARP;
}

// ---- softmax over the feature axis (softmax map; efficient attention's queries) ----------

// φ_c = exp(x_c − max x) / Σ exp(x − max x) per row; x [rows, d] storage, phi [rows, d] fp32.
// One warp per row (grid ⌈rows/8⌉, block 256). Limits: d ≤ LA_DK_MAX.
extern "C" __global__ void
fm_softmax_rows(const la_storage_t* __restrict__ x, float* __restrict__ phi, long long rows, int d) {
    const long long row = fm_warp_row();
    const int lane = threadIdx.x % LA_WARP;
    if (row >= rows) return;
    const la_index_t base = row * d;
    float v[FM_PER_LANE];
    float best = LA_NEG_INF;
#pragma unroll
    for (int j = 0; j < FM_PER_LANE; ++j) {
        const int t = lane + j * LA_WARP;
        v[j] = t < d ? la_load(x, base + t) : LA_NEG_INF;
        best = fmaxf(best, v[j]);
    }
    best = la_warp_max(best);
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < FM_PER_LANE; ++j) {
        const int t = lane + j * LA_WARP;
        v[j] = t < d ? expf(v[j] - best) : 0.0f;
        sum += v[j];
    }
    const float inv = 1.0f / la_warp_sum(sum);
#pragma unroll
    for (int j = 0; j < FM_PER_LANE; ++j) {
        const int t = lane + j * LA_WARP;
        if (t < d) phi[base + t] = v[j] * inv;
    }
}

// VJP of fm_softmax_rows: ∂x = φ ⊙ (g − g·φ) per row; phi, g [rows, d] fp32, dx storage.
// One warp per row (grid ⌈rows/8⌉, block 256). Limits: d ≤ LA_DK_MAX.
extern "C" __global__ void
fm_backward_softmax_rows(const float* __restrict__ phi, const float* __restrict__ g,
                         la_storage_t* __restrict__ dx, long long rows, int d) {
    const long long row = fm_warp_row();
    const int lane = threadIdx.x % LA_WARP;
    if (row >= rows) return;
    const la_index_t base = row * d;
    float p[FM_PER_LANE], gg[FM_PER_LANE];
    float dot = 0.0f;
#pragma unroll
    for (int j = 0; j < FM_PER_LANE; ++j) {
        const int t = lane + j * LA_WARP;
        p[j] = t < d ? phi[base + t] : 0.0f;
        gg[j] = t < d ? g[base + t] : 0.0f;
        dot += p[j] * gg[j];
    }
    dot = la_warp_sum(dot);
#pragma unroll
    for (int j = 0; j < FM_PER_LANE; ++j) {
        const int t = lane + j * LA_WARP;
        if (t < d) la_store(dx, base + t, p[j] * (gg[j] - dot));
    }
}

// ---- softmax over N per (head, column): efficient attention's keys -----------------------

// φ[i][c] = exp(x[i][c] − max_i x[·][c]) / Σ_i exp(x[i][c] − max) over the n rows of each
// head; x [heads, n, d] storage, phi fp32. Grid (⌈d/32⌉, heads), block (32, 8): lane x owns
// column 32·blockIdx.x + x, the 8 rows of threads stride over n (coalesced along columns) and
// combine through shared memory. Limits: heads ≤ 65535 (grid.y), blockDim.y ≤ 8.
extern "C" __global__ void
fm_softmax_cols(const la_storage_t* __restrict__ x, float* __restrict__ phi, int n, int d) {
    __shared__ float scratch[8][LA_WARP];
    const int col = blockIdx.x * LA_WARP + threadIdx.x;
    const la_index_t head = (la_index_t)blockIdx.y * n * d;
    const bool live = col < d;
    float best = LA_NEG_INF;
    for (int i = threadIdx.y; i < n; i += blockDim.y)
        if (live) best = fmaxf(best, la_load(x, head + (la_index_t)i * d + col));
    scratch[threadIdx.y][threadIdx.x] = best;
    __syncthreads();
    best = LA_NEG_INF;
    for (int y = 0; y < (int)blockDim.y; ++y) best = fmaxf(best, scratch[y][threadIdx.x]);
    __syncthreads();
    float sum = 0.0f;
    for (int i = threadIdx.y; i < n; i += blockDim.y)
        if (live) sum += expf(la_load(x, head + (la_index_t)i * d + col) - best);
    scratch[threadIdx.y][threadIdx.x] = sum;
    __syncthreads();
    sum = 0.0f;
    for (int y = 0; y < (int)blockDim.y; ++y) sum += scratch[y][threadIdx.x];
    const float inv = 1.0f / sum;
    for (int i = threadIdx.y; i < n; i += blockDim.y) {
        if (!live) continue;
        const la_index_t at = head + (la_index_t)i * d + col;
        phi[at] = expf(la_load(x, at) - best) * inv;
    }
}

// VJP of fm_softmax_cols: ∂x[·][c] = φ[·][c] ⊙ (g[·][c] − Σ_i g[i][c] φ[i][c]) per head and
// column; phi, g fp32, dx storage. Grid, block and limits as fm_softmax_cols.
extern "C" __global__ void
fm_backward_softmax_cols(const float* __restrict__ phi, const float* __restrict__ g,
                         la_storage_t* __restrict__ dx, int n, int d) {
    __shared__ float scratch[8][LA_WARP];
    const int col = blockIdx.x * LA_WARP + threadIdx.x;
    const la_index_t head = (la_index_t)blockIdx.y * n * d;
    const bool live = col < d;
    float dot = 0.0f;
    for (int i = threadIdx.y; i < n; i += blockDim.y) {
        if (!live) continue;
        const la_index_t at = head + (la_index_t)i * d + col;
        dot += g[at] * phi[at];
    }
    scratch[threadIdx.y][threadIdx.x] = dot;
    __syncthreads();
    dot = 0.0f;
    for (int y = 0; y < (int)blockDim.y; ++y) dot += scratch[y][threadIdx.x];
    for (int i = threadIdx.y; i < n; i += blockDim.y) {
        if (!live) continue;
        const la_index_t at = head + (la_index_t)i * d + col;
        la_store(dx, at, phi[at] * (g[at] - dot));
    }
}

// ---- 1+cos: φ = [1, x̂] --------------------------------------------------------------------

// φ = [1, x/‖x‖] per row (x̂ = 0 for a zero row); x [rows, d] storage, phi [rows, d + 1] fp32.
// One warp per row (grid ⌈rows/8⌉, block 256). Limits: d ≤ LA_DK_MAX.
extern "C" __global__ void
fm_cos_rows(const la_storage_t* __restrict__ x, float* __restrict__ phi, long long rows, int d) {
    const long long row = fm_warp_row();
    const int lane = threadIdx.x % LA_WARP;
    if (row >= rows) return;
    const la_index_t in = row * d;
    const la_index_t out = row * (d + 1);
    float v[FM_PER_LANE];
    float sq = 0.0f;
#pragma unroll
    for (int j = 0; j < FM_PER_LANE; ++j) {
        const int t = lane + j * LA_WARP;
        v[j] = t < d ? la_load(x, in + t) : 0.0f;
        sq += v[j] * v[j];
    }
    sq = la_warp_sum(sq);
    const float inv = sq > 0.0f ? rsqrtf(sq) : 0.0f;
    if (lane == 0) phi[out] = 1.0f;
#pragma unroll
    for (int j = 0; j < FM_PER_LANE; ++j) {
        const int t = lane + j * LA_WARP;
        if (t < d) phi[out + 1 + t] = v[j] * inv;
    }
}

// VJP of fm_cos_rows: ∂x = (g₁.. − x̂ (x̂·g₁..)) / ‖x‖ (0 for a zero row; g₀ of the constant
// feature drops out); x storage, g [rows, d + 1] fp32, dx storage. One warp per row (grid
// ⌈rows/8⌉, block 256). Limits: d ≤ LA_DK_MAX.
extern "C" __global__ void
fm_backward_cos_rows(const la_storage_t* __restrict__ x, const float* __restrict__ g,
                     la_storage_t* __restrict__ dx, long long rows, int d) {
    const long long row = fm_warp_row();
    const int lane = threadIdx.x % LA_WARP;
    if (row >= rows) return;
    const la_index_t in = row * d;
    const la_index_t feat = row * (d + 1) + 1;
    float v[FM_PER_LANE], gg[FM_PER_LANE];
    float sq = 0.0f, dot = 0.0f;
#pragma unroll
    for (int j = 0; j < FM_PER_LANE; ++j) {
        const int t = lane + j * LA_WARP;
        v[j] = t < d ? la_load(x, in + t) : 0.0f;
        gg[j] = t < d ? g[feat + t] : 0.0f;
        sq += v[j] * v[j];
        dot += v[j] * gg[j];
    }
    sq = la_warp_sum(sq);
    dot = la_warp_sum(dot);
    // x̂·g = (x·g)/‖x‖, so ∂x = (g − x (x·g)/‖x‖²) / ‖x‖.
    const float inv_norm = sq > 0.0f ? rsqrtf(sq) : 0.0f;
    const float inv_sq = inv_norm * inv_norm;
#pragma unroll
    for (int j = 0; j < FM_PER_LANE; ++j) {
        const int t = lane + j * LA_WARP;
        if (t < d) la_store(dx, in + t, (gg[j] - v[j] * dot * inv_sq) * inv_norm);
    }
}

// ---- FAVOR+ --------------------------------------------------------------------------------

// Pass 1: u = W x' − ‖x'‖²/2 (x' = x·scale, scale = D^{-1/4}) into phi (fp32 [rows, R]) and
// each row's max into row_max. One warp per row (grid ⌈rows/8⌉, block 256): x' staged in
// shared memory per warp, lane f computes features f, f + 32, ... Limits: d ≤ LA_DK_MAX.
extern "C" __global__ void
fm_favor_exponents(const la_storage_t* __restrict__ x, const float* __restrict__ w,
                   float* __restrict__ phi, float* __restrict__ row_max, long long rows, int d,
                   int r, float scale) {
    __shared__ float xs[FM_ROWS_PER_BLOCK][LA_DK_MAX];
    const int warp = threadIdx.x / LA_WARP;
    const int lane = threadIdx.x % LA_WARP;
    const long long row = fm_warp_row();
    if (row >= rows) return;  // whole warps leave together; no block barrier below
    const la_index_t in = row * d;
    float sq = 0.0f;
    for (int t = lane; t < d; t += LA_WARP) {
        const float v = la_load(x, in + t) * scale;
        xs[warp][t] = v;
        sq += v * v;
    }
    sq = la_warp_sum(sq);  // the shuffles also order the shared writes within the warp
    __syncwarp();
    float best = LA_NEG_INF;
    for (int f = lane; f < r; f += LA_WARP) {
        const float* wr = w + (la_index_t)f * d;
        float dot = 0.0f;
        for (int t = 0; t < d; ++t) dot = fmaf(wr[t], xs[warp][t], dot);
        const float u = dot - 0.5f * sq;
        phi[row * r + f] = u;
        best = fmaxf(best, u);
    }
    best = la_warp_max(best);
    if (lane == 0) row_max[row] = best;
}

// Keys: head_max[h] = max over the head's n rows of row_max. Grid (heads), block 256 (any
// multiple of 32 up to 1024), threads stride over the rows. Limits: heads ≤ 2^31 − 1.
extern "C" __global__ void
fm_favor_head_max(const float* __restrict__ row_max, float* __restrict__ head_max, int n) {
    __shared__ float scratch[LA_WARP];
    const float* mine = row_max + (la_index_t)blockIdx.x * n;
    float best = LA_NEG_INF;
    for (int i = threadIdx.x; i < n; i += blockDim.x) best = fmaxf(best, mine[i]);
    best = la_block_max(best, scratch);
    if (threadIdx.x == 0) head_max[blockIdx.x] = best;
}

// Pass 2: φ = exp(u − shift)/√R in place; shift = row_max[row] (queries, per_row = 1) or
// head_max[row / n] (keys, per_row = 0). log_scale = −shift per row (queries) or per head
// (keys; every row of a head writes the same value): the ε scale the core uses. One thread
// per element of phi (grid ⌈rows·R/256⌉, block 256). Limits: rows·R < 2^63.
extern "C" __global__ void
fm_favor_exp(float* __restrict__ phi, const float* __restrict__ shift, float* __restrict__ log_scale,
             long long rows, int n, int r, int per_row) {
    const long long at = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (at >= rows * r) return;
    const long long row = at / r;
    const float m = per_row ? shift[row] : shift[row / n];
    phi[at] = expf(phi[at] - m) * rsqrtf((float)r);
    if (at % r == 0) log_scale[per_row ? row : row / n] = -m;
}

// VJP of FAVOR+ (shifts held constant): ∂x_t = scale·(Σ_f W_ft t_f − x'_t Σ_f t_f),
// t_f = g_f φ_f. One warp per row (grid ⌈rows/8⌉, block 256): t staged in shared memory per
// warp, lane t computes inputs t, t + 32, ... Limits: d ≤ LA_DK_MAX, R ≤ FM_FAVOR_MAX_R.
extern "C" __global__ void
fm_backward_favor(const la_storage_t* __restrict__ x, const float* __restrict__ w,
                  const float* __restrict__ phi, const float* __restrict__ g,
                  la_storage_t* __restrict__ dx, long long rows, int d, int r, float scale) {
    __shared__ float ts[FM_ROWS_PER_BLOCK][FM_FAVOR_MAX_R];
    const int warp = threadIdx.x / LA_WARP;
    const int lane = threadIdx.x % LA_WARP;
    const long long row = fm_warp_row();
    if (row >= rows) return;
    float total = 0.0f;
    for (int f = lane; f < r; f += LA_WARP) {
        const float t = g[row * r + f] * phi[row * r + f];
        ts[warp][f] = t;
        total += t;
    }
    total = la_warp_sum(total);
    __syncwarp();
    const la_index_t in = row * d;
    for (int t = lane; t < d; t += LA_WARP) {
        float acc = 0.0f;
        for (int f = 0; f < r; ++f) acc = fmaf(w[(la_index_t)f * d + t], ts[warp][f], acc);
        const float xp = la_load(x, in + t) * scale;
        la_store(dx, in + t, scale * (acc - xp * total));
    }
}
