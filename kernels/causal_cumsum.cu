// causal_cumsum.cu — causal linear attention, cumsum form (SPEC §3): parallel over N, with
// O(N·C·M) memory on purpose.
//
// Math, per (batch, head), q̃ = φ(q), k̃ = φ(k), decay λ (1 = none):
//   U_i = k̃_i v_iᵀ (C×M, fp32, materialised for every i)     cs_outer   (also u_i = k̃_i)
//   S_i = λ S_{i-1} + U_i, z_i = λ z_{i-1} + k̃_i   (prefix sums over i, in place)
//   O_i = q̃_iᵀ S_i / (q̃_iᵀ z_i + ε)                        cs_contract (den_i saved)
// The backward is the recurrent form's memory-efficient one (causal_recurrent.cu), fed the
// den_i this forward saves: recomputing is cheaper than reading N·C·M states back.
//
// The prefix sum is a three-phase blockwise scan over N, element-parallel over the C·M (or
// C) entries of a token: chunks of L tokens (L ≈ √N, chosen on the host)
//   1. cs_scan_local: every (head, chunk, entry) scans its chunk sequentially (in place);
//   2. cs_scan_carry: every (head, entry) walks the chunk ends in order and makes each one
//      final: end_k += λ^{len_k} · end_{k-1} (N/L sequential steps);
//   3. cs_scan_fix:   every non-final token i of chunk k ≥ 1 adds λ^{i−start_k+1} · end_{k-1}.
//   Phases 1 and 3 are O(N·E) fully parallel, phase 2 is O(N/L·E) with parallelism E·B·H.
//   For λ = 1 every power is exactly 1 (powf(1, n) = 1).
//
// Grid / block mapping: 256 threads. cs_outer: a block per token row (grid-stride over
// B·H·N rows), threads over the C·M entries. Scans: grid (ceil(E/256), chunks, B·H), a
// thread per entry (consecutive threads, consecutive addresses). cs_contract: a block per
// token (grid (N, B·H)); warp w takes rows c ≡ w (mod 8) of S_i, lane l the columns
// l, l+32, ... (≤ 8 per lane); the 8 partial rows are reduced in shared memory.
//
// Limits: C ≤ 256, M ≤ 256, B·H ≤ 65535, chunks ≤ 65535; indices are 64-bit.
// Defines: LA_STORAGE, LA_MAP, LA_NORMALISED (prelude); CS_QK_F32 = 1 when Q, K are the
// fp32 φ(Q), φ(K) of the φ stage.

#ifndef CS_QK_F32
#define CS_QK_F32 0
#endif

#if CS_QK_F32
typedef float cs_qk_t;
#else
typedef la_storage_t cs_qk_t;
#endif

constexpr int CS_THREADS = 256;
constexpr int CS_MAX_DIM = 256;
constexpr int CS_COLS_PER_LANE = CS_MAX_DIM / 32;

// U[row][c][m] = φ(k[row][c]) · v[row][m] and u[row][c] = φ(k[row][c]) (normalised maps).
// A block per token row, grid-stride over the B·H·N rows; threads over the C·M entries.
// Limits: C, M ≤ CS_MAX_DIM.
extern "C" __global__ void __launch_bounds__(CS_THREADS)
cs_outer(const cs_qk_t* __restrict__ k, const la_storage_t* __restrict__ v,
         float* __restrict__ u, float* __restrict__ z_u, la_index_t rows, int c_dim,
         int m_dim) {
    __shared__ float k_s[CS_MAX_DIM];
    __shared__ float v_s[CS_MAX_DIM];
    const int entries = c_dim * m_dim;
    for (la_index_t row = blockIdx.x; row < rows; row += gridDim.x) {
        for (int c = threadIdx.x; c < c_dim && c < CS_MAX_DIM; c += blockDim.x) {
            const float kc = la_phi(la_widen(k[row * c_dim + c]));
            k_s[c] = kc;
            if (LA_NORMALISED) z_u[row * c_dim + c] = kc;
        }
        for (int m = threadIdx.x; m < m_dim && m < CS_MAX_DIM; m += blockDim.x)
            v_s[m] = la_load(v, row * m_dim + m);
        __syncthreads();
        float* out = u + row * entries;
        for (int e = threadIdx.x; e < entries; e += blockDim.x) {
            const int c = e / m_dim;
            const int m = e - c * m_dim;
            out[e] = k_s[c] * v_s[m];
        }
        __syncthreads();  // k_s, v_s are rewritten for the next row
    }
}

// Phase 1: inclusive decayed scan inside each chunk of `chunk` tokens, x_i ← λ x_{i−1} + x_i
// per entry (in place). Grid (⌈entries/256⌉, chunks, B·H), a thread per entry. Limits: chunks,
// B·H ≤ 65535.
extern "C" __global__ void __launch_bounds__(CS_THREADS)
cs_scan_local(float* __restrict__ x, int entries, int n, int chunk, float decay) {
    const int e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= entries) return;
    const int start = blockIdx.y * chunk;
    const int end = min(start + chunk, n);
    float* base = x + ((la_index_t)blockIdx.z * n) * entries + e;
    float running = 0.0f;
    for (int i = start; i < end; ++i) {
        const la_index_t at = (la_index_t)i * entries;
        running = fmaf(decay, running, base[at]);
        base[at] = running;
    }
}

// Phase 2: chunk ends made final, in order: end_k += λ^{len_k} · end_{k−1}. Grid
// (⌈entries/256⌉, B·H), a thread per entry walking the ⌈n/chunk⌉ ends. Limits: B·H ≤ 65535.
extern "C" __global__ void __launch_bounds__(CS_THREADS)
cs_scan_carry(float* __restrict__ x, int entries, int n, int chunk, float decay) {
    const int e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= entries) return;
    float* base = x + ((la_index_t)blockIdx.y * n) * entries + e;
    const int chunks = (n + chunk - 1) / chunk;
    float previous_end = base[(la_index_t)(min(chunk, n) - 1) * entries];
    for (int kc = 1; kc < chunks; ++kc) {
        const int start = kc * chunk;
        const int end = min(start + chunk, n);
        const la_index_t at = (la_index_t)(end - 1) * entries;
        const float final_end = fmaf(powf(decay, (float)(end - start)), previous_end, base[at]);
        base[at] = final_end;
        previous_end = final_end;
    }
}

// Phase 3: the carry of the previous chunk's (final) end into every other token: x_i +=
// λ^{i−start_k+1} · end_{k−1} for the non-final tokens of chunk k ≥ 1. Grid (⌈entries/256⌉,
// chunks, B·H), a thread per entry. Limits: chunks, B·H ≤ 65535.
extern "C" __global__ void __launch_bounds__(CS_THREADS)
cs_scan_fix(float* __restrict__ x, int entries, int n, int chunk, float decay) {
    const int e = blockIdx.x * blockDim.x + threadIdx.x;
    const int kc = blockIdx.y;
    if (e >= entries || kc == 0) return;
    const int start = kc * chunk;
    const int end = min(start + chunk, n);
    float* base = x + ((la_index_t)blockIdx.z * n) * entries + e;
    const float carry = base[(la_index_t)(start - 1) * entries];
    float power = decay;
    for (int i = start; i < end - 1; ++i) {
        const la_index_t at = (la_index_t)i * entries;
        base[at] = fmaf(power, carry, base[at]);
        power *= decay;
    }
}

// O_i = q̃_iᵀ S_i / (q̃_iᵀ z_i + ε_i), den_i saved (LA_NORMALISED = 0: O_i = q̃_iᵀ S_i).
// One block per token, grid (N, B·H): warp w takes rows c ≡ w (mod 8) of S_i, lane l columns
// l, l + 32, ...; the 8 partial rows are summed in shared memory. Limits: C, M ≤ CS_MAX_DIM,
// B·H ≤ 65535.
extern "C" __global__ void __launch_bounds__(CS_THREADS)
cs_contract(const cs_qk_t* __restrict__ q, const float* __restrict__ s,
            const float* __restrict__ z, la_storage_t* __restrict__ out,
            float* __restrict__ den_out, const float* __restrict__ q_log_scale,
            const float* __restrict__ k_log_scale, int n, int c_dim, int m_dim, float eps) {
    __shared__ float q_s[CS_MAX_DIM];
    __shared__ float part_s[CS_THREADS / 32][CS_MAX_DIM];
    __shared__ float scratch[32];
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int warps = CS_THREADS / 32;
    const la_index_t tok = (la_index_t)blockIdx.y * n + blockIdx.x;
    float den_term = 0.0f;
    for (int c = threadIdx.x; c < c_dim && c < CS_MAX_DIM; c += blockDim.x) {
        const float qc = la_phi(la_widen(q[tok * c_dim + c]));
        q_s[c] = qc;
        if (LA_NORMALISED) den_term = fmaf(qc, z[tok * c_dim + c], den_term);
    }
    __syncthreads();
    float acc[CS_COLS_PER_LANE];
#pragma unroll
    for (int r = 0; r < CS_COLS_PER_LANE; ++r) acc[r] = 0.0f;
    for (int c = warp; c < c_dim && c < CS_MAX_DIM; c += warps) {
        const float* row = s + (tok * c_dim + c) * m_dim;
        const float qc = q_s[c];
#pragma unroll
        for (int r = 0; r < CS_COLS_PER_LANE; ++r) {
            const int m = lane + 32 * r;
            if (m < m_dim) acc[r] = fmaf(qc, row[m], acc[r]);
        }
    }
#pragma unroll
    for (int r = 0; r < CS_COLS_PER_LANE; ++r) part_s[warp][lane + 32 * r] = acc[r];
    float den = 1.0f;
    // FAVOR+'s shifted features: ε_i = ε·exp(q_log_scale_i + k_log_scale_head) (null otherwise).
    const float eps_tok =
        q_log_scale != nullptr ? eps * expf(q_log_scale[tok] + k_log_scale[blockIdx.y]) : eps;
    if (LA_NORMALISED) den = la_block_sum(den_term, scratch) + eps_tok;  // has barriers
    else __syncthreads();
    for (int m = threadIdx.x; m < m_dim && m < CS_MAX_DIM; m += blockDim.x) {
        float num = 0.0f;
#pragma unroll
        for (int w = 0; w < warps; ++w) num += part_s[w][m];
        la_store(out, tok * m_dim + m, num / den);
    }
    if (LA_NORMALISED && threadIdx.x == 0) den_out[tok] = den;
}
