// noncausal.cu — non-causal linear attention (SPEC §2) with the memory-efficient backward
// (SPEC §4, full sums), per head, Q̃ = φ(Q), K̃ = φ(K) (C features), weights w_j = λ^{N−1−j}:
//
//   forward   S = Σ_j w_j K̃_jᵀ V_j  (C×M),   z = Σ_j w_j K̃_j  (C)
//             O_i = Q̃_i S / (Q̃_i·z + ε_i)     (no division for identity / efficient)
//   backward  den_i = Q̃_i·z + ε_i, gn_i = G_i/den_i, gd_i = −(G_i·O_i)/den_i
//             R = Σ_i Q̃_iᵀ gn_i (C×M),  r = Σ_i Q̃_i gd_i (C)
//             ∂Q̃_i = S gn_i + gd_i z,  ∂K̃_j = w_j (R V_j + r),  ∂V_j = w_j Rᵀ K̃_j
//             then ∂Q = ∂Q̃ ⊙ φ'(Q) for fused maps (or feature_map.cu's VJP on fp32 ∂Q̃).
//   ε_i = ε·exp(q_log_scale_i + k_log_scale_head) when FAVOR+'s stabiliser shifted the
//   features (see feature_map.cu), else ε. Extra memory: the C·M+C state per head (S,z and
//   R,r), split partials of the same size, and two fp32 scalars per row in the backward.
//
// Kernels (all fp32 arithmetic; Q, K, V, O, gradients in the storage type LA_STORAGE):
//   nc_accumulate          Σ over a split of rows of w·Aᵀ⊗B and Σ v·A. Grid (C-tiles ×
//                          M-tiles, splits, heads), 256 threads; a block owns a 64×64 tile of
//                          the C×M output and walks its rows 16 at a time through shared
//                          memory, each thread accumulating a 4×4 register tile. Long N is
//                          split over blocks (grid.y) into fp32 partials, summed by nc_reduce
//                          (deterministic, no atomics). With one split the partial is the
//                          state itself.
//   nc_reduce              sums the partials per head.
//   nc_rowgemm             row-parallel products with the state: a block owns 64 rows × 64
//                          output columns, steps over the inner dim 16 at a time (X and state
//                          tiles both read with lanes along contiguous memory, the transposed
//                          state too); the mode picks the operands and the epilogue (output,
//                          ∂Q, ∂K, ∂V; see below).
//   nc_backward_row_terms  1/den_i and gd_i, one warp per row.
// Operands A/X are read with a kind: 0 storage, 1 storage through the fused map φ (LA_MAP),
// 2 fp32 (features from the φ stage, or fp32 workspaces).
// Layouts: rows [heads, N, dim] row-major; a state is [heads, C·M + C] (matrix, then vector).
// Limits: any C, M ≥ 1 (tiles are bounds-checked; the Rust side restricts D, M to 16..256);
// N·dim per head < 2^62; grid.y ≤ 65535 output tiles / splits.

#define NC_TILE 64
#define NC_STEP 16
#define NC_THREADS 256
// Two resident blocks per SM at least: ptxas may then use up to 128 registers a thread, which
// the 4×4 accumulator tiles need without spilling.
#define NC_MIN_BLOCKS 2

#define NC_KIND_STORAGE 0
#define NC_KIND_MAPPED 1
#define NC_KIND_F32 2

#define NC_MODE_OUTPUT 0
#define NC_MODE_GRAD_Q 1
#define NC_MODE_GRAD_K 2
#define NC_MODE_GRAD_V 3

__device__ __forceinline__ float nc_fetch(const void* p, int kind, la_index_t i) {
    if (kind == NC_KIND_F32) return ((const float*)p)[i];
    const float v = la_load((const la_storage_t*)p, i);
    return kind == NC_KIND_MAPPED ? la_phi(v) : v;
}

// λ^{N−1−j} as exp2 of a product: log2_decay = log2 λ (0 without decay).
__device__ __forceinline__ float nc_decay(int n, int j, float log2_decay) {
    return log2_decay == 0.0f ? 1.0f : exp2f((float)(n - 1 - j) * log2_decay);
}

// partial[(head·splits + split)·(c·m + c) + ...] = Σ_{rows of split} bw_j A_jᵀ ⊗ B_j, and
// Σ vw_j A_j. bw_j = b_row_scale[j] if given, else λ^{N−1−j}; vw_j = v_row_scale[j] if given,
// else bw_j. Grid (⌈C/64⌉·⌈M/64⌉, splits, heads), 256 threads: a block owns a 64×64 tile of
// the C×M output (its first M-tile also the C vector) and walks its split's rows 16 at a
// time; thread (ty, tx) the 4×4 outputs (ty + 16i, tx + 16j). Limits: splits, heads ≤ 65535.
extern "C" __global__ void __launch_bounds__(NC_THREADS, NC_MIN_BLOCKS)
nc_accumulate(const void* __restrict__ a, int a_kind, const la_storage_t* __restrict__ b,
              const float* __restrict__ b_row_scale, const float* __restrict__ v_row_scale,
              float* __restrict__ partial, int n, int c, int m, int rows_per_split,
              float log2_decay) {
    __shared__ float as[NC_STEP][NC_TILE];
    __shared__ float bs[NC_STEP][NC_TILE];
    __shared__ float vs[NC_STEP];
    const int c_tiles = (c + NC_TILE - 1) / NC_TILE;
    const int c0 = (blockIdx.x % c_tiles) * NC_TILE;
    const int m_tile = blockIdx.x / c_tiles;
    const int m0 = m_tile * NC_TILE;
    const int split = blockIdx.y;
    const int splits = gridDim.y;
    const la_index_t head = blockIdx.z;
    const int row_begin = split * rows_per_split;
    const int row_end = min(n, row_begin + rows_per_split);
    const int tid = threadIdx.x;
    const int ty = tid / 16, tx = tid % 16;
    const bool owns_vector = m_tile == 0 && tid < NC_TILE;

    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;
    float vacc = 0.0f;

    for (int r0 = row_begin; r0 < row_end; r0 += NC_STEP) {
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            const int e = tid + NC_THREADS * q;
            const int rr = e / NC_TILE, cc = e % NC_TILE;
            const int row = r0 + rr;
            const bool row_ok = row < row_end;
            const la_index_t row_at = head * n + row;
            as[rr][cc] = row_ok && c0 + cc < c ? nc_fetch(a, a_kind, row_at * c + c0 + cc) : 0.0f;
            float bv = 0.0f;
            if (row_ok && m0 + cc < m) {
                const float w = b_row_scale ? b_row_scale[row_at] : nc_decay(n, row, log2_decay);
                bv = la_load(b, row_at * m + m0 + cc) * w;
            }
            bs[rr][cc] = bv;
        }
        if (tid < NC_STEP) {
            const int row = r0 + tid;
            float v = 0.0f;
            if (row < row_end) {
                const la_index_t row_at = head * n + row;
                v = v_row_scale   ? v_row_scale[row_at]
                    : b_row_scale ? b_row_scale[row_at]
                                  : nc_decay(n, row, log2_decay);
            }
            vs[tid] = v;
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < NC_STEP; ++k) {
            float xa[4], yb[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) xa[i] = as[k][ty + 16 * i];
#pragma unroll
            for (int j = 0; j < 4; ++j) yb[j] = bs[k][tx + 16 * j];
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(xa[i], yb[j], acc[i][j]);
        }
        if (owns_vector) {
#pragma unroll
            for (int k = 0; k < NC_STEP; ++k) vacc = fmaf(as[k][tid], vs[k], vacc);
        }
        __syncthreads();
    }

    const la_index_t state_len = (la_index_t)c * m + c;
    float* out = partial + (head * splits + split) * state_len;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int cc = c0 + ty + 16 * i;
        if (cc >= c) continue;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int mm = m0 + tx + 16 * j;
            if (mm < m) out[(la_index_t)cc * m + mm] = acc[i][j];
        }
    }
    if (owns_vector && c0 + tid < c) out[(la_index_t)c * m + c0 + tid] = vacc;
}

// state[head][e] = Σ_split partial[head][split][e], splits in order (deterministic). A thread
// per element, grid-stride over heads·state_len (any 1-D grid). Limits: heads·state_len < 2^63.
extern "C" __global__ void
nc_reduce(const float* __restrict__ partial, float* __restrict__ state, int splits,
          long long state_len, long long heads) {
    const long long total = heads * state_len;
    for (long long at = (long long)blockIdx.x * blockDim.x + threadIdx.x; at < total;
         at += (long long)gridDim.x * blockDim.x) {
        const long long head = at / state_len, e = at % state_len;
        const float* src = partial + head * splits * state_len + e;
        float sum = 0.0f;
        for (int s = 0; s < splits; ++s) sum += src[(long long)s * state_len];
        state[at] = sum;
    }
}

// ε_i of row row_at (see the header): ε, or ε·exp(q_log_scale_i + k_log_scale_head).
__device__ __forceinline__ float nc_eps(float eps, const float* q_log_scale, const float* k_log_scale,
                                        la_index_t head, la_index_t row_at) {
    if (!q_log_scale && !k_log_scale) return eps;
    const float log = (q_log_scale ? q_log_scale[row_at] : 0.0f) +
                      (k_log_scale ? k_log_scale[head] : 0.0f);
    return eps * expf(log);
}

// inv_den_i = 1/(Q̃_i·z + ε_i), gd_i = −(G_i·O_i)·inv_den_i for the backward. o is fp32 when
// o_f32 (the backward's full-precision recomputation), else storage. One warp per row, lanes
// strided over C and M (any block of whole warps, 1-D grid). Limits: rows < 2^63.
extern "C" __global__ void
nc_backward_row_terms(const void* __restrict__ q, int q_kind, const float* __restrict__ state,
                      const la_storage_t* __restrict__ g, const void* __restrict__ o, int o_f32,
                      const float* __restrict__ q_log_scale, const float* __restrict__ k_log_scale,
                      float eps, float* __restrict__ inv_den, float* __restrict__ gd, long long rows,
                      int n, int c, int m) {
    const long long row_at = (long long)blockIdx.x * (blockDim.x / LA_WARP) + threadIdx.x / LA_WARP;
    const int lane = threadIdx.x % LA_WARP;
    if (row_at >= rows) return;
    const la_index_t head = row_at / n;
    const float* z = state + head * ((la_index_t)c * m + c) + (la_index_t)c * m;
    float den = 0.0f;
    for (int k = lane; k < c; k += LA_WARP) den += nc_fetch(q, q_kind, row_at * c + k) * z[k];
    float go = 0.0f;
    for (int k = lane; k < m; k += LA_WARP) {
        const la_index_t at = row_at * m + k;
        const float ov = o_f32 ? ((const float*)o)[at] : la_load((const la_storage_t*)o, at);
        go += la_load(g, at) * ov;
    }
    den = la_warp_sum(den) + nc_eps(eps, q_log_scale, k_log_scale, head, row_at);
    go = la_warp_sum(go);
    if (lane == 0) {
        const float inv = 1.0f / den;
        inv_den[row_at] = inv;
        gd[row_at] = -go * inv;
    }
}

// Row-parallel products with a state (S,z or R,r) of each head; grid (row tiles, column
// tiles, heads), 256 threads. Per mode (X rows, state product, epilogue, output):
//   OUTPUT  X = Q̃ [N×C], S [C×M]:  O = acc / (Q̃·z + ε_i)  (÷ only when normalised)
//   GRAD_Q  X = G [N×M], Sᵀ:       ∂Q̃ = acc·inv_den + gd·z (normalised) or acc
//   GRAD_K  X = V [N×M], Rᵀ:       ∂K̃ = w_j (acc + r) (normalised) or w_j acc
//   GRAD_V  X = K̃ [N×C], R [C×M]:  ∂V = w_j acc
// GRAD_Q/GRAD_K then multiply by φ'(pre) when pre (the raw Q or K) is given (fused maps).
// out is fp32 when out_f32 (∂Q̃, ∂K̃ for the φ-stage VJP; O recomputed in fp32), else storage.
// Thread (ty, tx) owns outputs (ty + 16i, tx + 16j) of the block's 64 rows × 64 columns.
// Limits: the file's (output tiles ≤ 65535: grid.y, heads ≤ 65535: grid.z).
extern "C" __global__ void __launch_bounds__(NC_THREADS, NC_MIN_BLOCKS)
nc_rowgemm(int mode, const void* __restrict__ x, int x_kind, const float* __restrict__ state, int c,
           int m, void* __restrict__ out, int out_f32, const la_storage_t* __restrict__ pre,
           const float* __restrict__ inv_den, const float* __restrict__ gd,
           const float* __restrict__ q_log_scale, const float* __restrict__ k_log_scale, float eps,
           int normalised, int n, float log2_decay) {
    __shared__ float xs[NC_STEP][NC_TILE + 1];
    // +1 pad: the transposed Y fill below writes down columns of ys (see there).
    __shared__ float ys[NC_STEP][NC_TILE + 1];
    __shared__ float zs[NC_STEP];
    __shared__ float row_dot[NC_TILE];
    const bool transposed = mode == NC_MODE_GRAD_Q || mode == NC_MODE_GRAD_K;
    const int inner = transposed ? m : c;  // X's width
    const int width = transposed ? c : m;  // output width
    const la_index_t head = blockIdx.z;
    const int r0 = blockIdx.x * NC_TILE;
    const int p0 = blockIdx.y * NC_TILE;
    const la_index_t state_len = (la_index_t)c * m + c;
    const float* s = state + head * state_len;
    const float* vec = s + (la_index_t)c * m;
    const int tid = threadIdx.x;
    const int ty = tid / 16, tx = tid % 16;
    const bool needs_row_dot = mode == NC_MODE_OUTPUT && normalised;

    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;
    float dot = 0.0f;
    // Y-tile element of thread tid in fill step q (0..3): row y_k + y_dk·q, column
    // y_c + y_dc·(q mod 2 + 4·⌊q/2⌋). Transposed: warp w, lane l → inner l mod 16, columns
    // w + 16·⌊l/16⌋ + {0, 8, 32, 40}; else inner ⌊tid/64⌋ + 4q, column tid mod 64.
    const int y_k = transposed ? tid % LA_WARP % NC_STEP : tid / NC_TILE;
    const int y_c =
        transposed ? tid / LA_WARP + 16 * (tid % LA_WARP / NC_STEP) : tid % NC_TILE;
    const int y_dk = transposed ? 0 : NC_THREADS / NC_TILE;
    const int y_dc = transposed ? 8 : 0;

    for (int k0 = 0; k0 < inner; k0 += NC_STEP) {
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            const int e = tid + NC_THREADS * q;
            // X tile: 64 rows × 16 inner, read along the inner dim (coalesced), stored
            // transposed so the product reads a row of xs per k.
            const int rr = e / NC_STEP, kk = e % NC_STEP;
            const int row = r0 + rr, k = k0 + kk;
            xs[kk][rr] = row < n && k < inner
                             ? nc_fetch(x, x_kind, (head * n + row) * inner + k)
                             : 0.0f;
            // Y tile: 16 inner × 64 output columns, lanes along the state's rows (coalesced).
            // S [C×M]: a warp reads 32 columns of one inner row. Sᵀ / Rᵀ: an output column
            // is a state row, so a warp reads 16 inner of two rows 16 columns apart: 64
            // contiguous bytes each, and banks (yk + cc) mod 32 of the padded ys all differ.
            const int yk = y_k + y_dk * q;
            const int cc = y_c + y_dc * (q % 2 + 4 * (q / 2));
            const int kk2 = k0 + yk, col = p0 + cc;
            float y = 0.0f;
            if (kk2 < inner && col < width)
                y = transposed ? s[(la_index_t)col * m + kk2] : s[(la_index_t)kk2 * m + col];
            ys[yk][cc] = y;
        }
        if (needs_row_dot && tid < NC_STEP) zs[tid] = k0 + tid < inner ? vec[k0 + tid] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < NC_STEP; ++k) {
            float xa[4], yb[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) xa[i] = xs[k][ty + 16 * i];
#pragma unroll
            for (int j = 0; j < 4; ++j) yb[j] = ys[k][tx + 16 * j];
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(xa[i], yb[j], acc[i][j]);
        }
        if (needs_row_dot && tid < NC_TILE) {
#pragma unroll
            for (int k = 0; k < NC_STEP; ++k) dot = fmaf(xs[k][tid], zs[k], dot);
        }
        __syncthreads();
    }
    if (needs_row_dot && tid < NC_TILE) row_dot[tid] = dot;
    __syncthreads();

#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int rr = ty + 16 * i;
        const int row = r0 + rr;
        if (row >= n) continue;
        const la_index_t row_at = head * n + row;
        float row_scale = 1.0f, row_shift = 0.0f;
        if (mode == NC_MODE_OUTPUT && normalised) {
            row_scale = 1.0f / (row_dot[rr] + nc_eps(eps, q_log_scale, k_log_scale, head, row_at));
        } else if (mode == NC_MODE_GRAD_Q && normalised) {
            row_scale = inv_den[row_at];
            row_shift = gd[row_at];
        } else if (mode == NC_MODE_GRAD_K || mode == NC_MODE_GRAD_V) {
            row_scale = nc_decay(n, row, log2_decay);
        }
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int col = p0 + tx + 16 * j;
            if (col >= width) continue;
            float v = acc[i][j];
            if (mode == NC_MODE_GRAD_Q) {
                v = v * row_scale + (normalised ? row_shift * vec[col] : 0.0f);
            } else if (mode == NC_MODE_GRAD_K) {
                v = row_scale * (v + (normalised ? vec[col] : 0.0f));
            } else {
                v *= row_scale;
            }
            const la_index_t at = row_at * width + col;
            if (pre && (mode == NC_MODE_GRAD_Q || mode == NC_MODE_GRAD_K))
                v *= la_phi_grad(la_load(pre, at));
            if (out_f32)
                ((float*)out)[at] = v;
            else
                la_store((la_storage_t*)out, at, v);
        }
    }
}
