// causal_recurrent.cu — causal linear attention, recurrent form, forward and backward.
//
// Math (SPEC §2, §4, §6), per (batch, head), q̃ = φ(q), k̃ = φ(k), decay λ (1 = none):
//   S_i = λ S_{i-1} + k̃_i v_iᵀ (C×M),  z_i = λ z_{i-1} + k̃_i (C)
//   O_i = q̃_iᵀ S_i / (q̃_iᵀ z_i + ε)            (LA_NORMALISED = 0: O_i = q̃_iᵀ S_i)
// Backward, G_i = ∂L/∂O_i, den_i = q̃_iᵀ z_i + ε saved by the forward:
//   gn_i = G_i / den_i,  gd_i = −(G_i·O_i) / den_i                  (cr_backward_prep)
//   with O_i in fp32: for 16-bit storage the forward scan runs again (cr_backward_go) and
//   writes G_i·O_i per 32-column block instead of O; z·gd and r cancel against S·gn and R·v,
//   so the stored O's 16-bit rounding was the largest error of bf16 ∂q (3.2e-3 → 1.66e-3,
//   the floor of storing ∂q in bf16, at N = 1000). fp32 storage reads O itself.
//   ∂q̃_i = S_i gn_i + z_i gd_i            forward scan, S_i and z_i recomputed (cr_backward_dq)
//   R_j = λ R_{j+1} + q̃_j gn_jᵀ,  r_j = λ r_{j+1} + q̃_j gd_j          reverse scans
//   ∂k̃_j = R_j v_j + r_j                                              (cr_backward_dk)
//   ∂v_j = R_jᵀ k̃_j                                                   (cr_backward_dv)
//   then ∂q = ∂q̃ ⊙ φ'(q), ∂k = ∂k̃ ⊙ φ'(k) (la_phi_grad; identity after a φ stage).
// The naive "stored states" backward: cr_forward_stored also writes every S_i (N·C·M fp32)
// and z_i (N·C), and cr_backward_dq_from_states reads them instead of recomputing, and takes
// gd from them too (G_i·O_i = q̃_i·(S_i G_i)/den_i in fp32, no pre-pass); ∂k̃, ∂v still need
// the reverse scans, which no amount of stored forward state replaces.
//
// One scan kernel body (cr_scan) serves all five scans. Each keeps a state X (A×B, fp32, in
// registers) and, per token, does X = λX + x_a x_bᵀ and emits y_b = Σ_a X[a][b] w_a:
//   role      A  B   x_a  x_b        w_a  order    extra per column b
//   forward   C  M   k̃    v          q̃    forward  den = q̃ᵀz + ε (z warp)
//   go        C  M   k̃    v          q̃    forward  den (z warp); emits Σ_b G_b·O_b, not O
//   dv        C  M   q̃    gn         k̃    reverse  —
//   dq        M  C   v    k̃          gn   forward  z_b · gd  (z_b = λz_b + k̃_b)
//   dk        M  C   gn   q̃          v    reverse  r_b       (r_b = λr_b + q̃_b gd)
// Every sum y_b runs over the rows A, which one block holds whole, so no pass needs atomics:
// ∂k̃ (a sum over M) is its own pass with the state transposed (M rows, C columns) rather
// than a sum of partial results over M-slices. The cost: the reverse scan runs twice
// (dk and dv), each O(N·C·M), instead of once with fp32 atomics on ∂k̃.
//
// Grid / block: grid (ceil(B/32), B·H): block x owns columns [32x, 32x+32) of B (the value
// dim M for forward/dv, the feature dim C for dq/dk), so small B·H still gives B/32 blocks
// per head. 256 "main" threads = 8 warps; warp w owns rows [w·ROWS, (w+1)·ROWS) of the
// state, lane l owns column l, ROWS = CR_A_MAX/8 fp32 registers. The forward and go scans
// (normalised) add a 9th warp that carries z (lane l owns rows l, l+32, ...) and produces
// den. The go scan's warps each reduce one token's G·O over the block's 32 columns (a warp
// sum) into go[token · gridDim.x + block x]: ⌈M/32⌉ fp32 per token, summed by
// cr_backward_prep.
// Tokens stream in tiles of CR_TILE: while a tile is computed from shared memory, the next
// one is already being loaded into registers (prefetch); the per-token partial sums of the
// 8 warps go to shared memory and are reduced once per tile (2 barriers per tile).
//
// Limits: CR_A_MAX (the class of the A dim: 32, 64, 128 or 256) ≥ A; any B; any N ≥ 1
// (ragged last tile zero-padded: zero x_a/x_b leave a state untouched in the reverse scan
// and only decay it after the last real token in the forward scan); B·H ≤ 65535 (grid y).
// Shared memory (static, no opt-in): 22.2 KiB (A = 32) to 36.3 KiB (A = 128, tile 16); A = 256
// uses a tile of 8 tokens to stay at 26.1 KiB. Registers: ≤ 168 per thread, no spills.
//
// Defines: LA_STORAGE, LA_MAP, LA_NORMALISED (prelude); CR_A_MAX; CR_QK_F32 = 1 when Q and
// K are φ(Q), φ(K) written in fp32 by the φ stage (then ∂q̃, ∂k̃ are written in fp32 too).
// FAVOR+ features come shifted; the forward then takes per-token ε_i = ε·exp(q_log_scale_i +
// k_log_scale_head) (null pointers otherwise); the backward needs the saved den_i, and the
// same scales for cr_backward_go (its den, hence its O, must be the forward's).

#ifndef CR_A_MAX
#define CR_A_MAX 64
#endif
#ifndef CR_QK_F32
#define CR_QK_F32 0
#endif

#if CR_QK_F32
typedef float cr_qk_t;
#else
typedef la_storage_t cr_qk_t;
#endif

#define CR_ROLE_FORWARD 0
#define CR_ROLE_DV 1
#define CR_ROLE_DQ 2
#define CR_ROLE_DK 3
#define CR_ROLE_GO 4  // the forward scan again, in the backward: G·O partials from fp32 O

constexpr int CR_GROUPS = 8;    // row groups = main warps
constexpr int CR_COLS = 32;     // columns of B per block = lanes
constexpr int CR_MAIN_THREADS = CR_GROUPS * CR_COLS;
constexpr int CR_ROWS = CR_A_MAX / CR_GROUPS;
constexpr int CR_TILE = CR_A_MAX >= 256 ? 8 : 16;
constexpr int CR_Z_ROWS = CR_A_MAX / 32;
constexpr int CR_LOADS_A = CR_TILE * CR_A_MAX / CR_MAIN_THREADS;
constexpr int CR_LOADS_B = CR_TILE * CR_COLS / CR_MAIN_THREADS;
constexpr int CR_MAX_THREADS = CR_MAIN_THREADS + 32;

static_assert(CR_A_MAX == 32 || CR_A_MAX == 64 || CR_A_MAX == 128 || CR_A_MAX == 256,
              "CR_A_MAX must be a head-dim class");
static_assert(CR_ROWS % 4 == 0, "rows per thread are read as float4");
static_assert(CR_LOADS_A * CR_MAIN_THREADS == CR_TILE * CR_A_MAX, "tile loads must divide");
static_assert(CR_LOADS_B * CR_MAIN_THREADS == CR_TILE * CR_COLS, "tile loads must divide");

__device__ __forceinline__ cr_qk_t cr_qk_from_float(float x) {
#if CR_QK_F32
    return x;
#else
    return la_from_float(x);
#endif
}

template <bool C, typename A, typename B>
struct cr_pick {
    typedef A type;
};
template <typename A, typename B>
struct cr_pick<false, A, B> {
    typedef B type;
};

template <int ROLE, bool STORE>
__device__ __forceinline__ void cr_scan(
    const cr_qk_t* __restrict__ q, const cr_qk_t* __restrict__ k,
    const la_storage_t* __restrict__ v, const la_storage_t* __restrict__ g,
    const float* __restrict__ den_in, const float* __restrict__ gd_in,
    la_storage_t* __restrict__ out_v, cr_qk_t* __restrict__ out_qk,
    float* __restrict__ den_out, float* __restrict__ states, float* __restrict__ z_states,
    float* __restrict__ go_out, const float* __restrict__ q_log_scale,
    const float* __restrict__ k_log_scale, int n, int c_dim, int m_dim, float decay, float eps) {
    constexpr bool FWD = ROLE == CR_ROLE_FORWARD || ROLE == CR_ROLE_GO;
    constexpr bool A_IS_C = FWD || ROLE == CR_ROLE_DV;
    constexpr bool REVERSE = ROLE == CR_ROLE_DV || ROLE == CR_ROLE_DK;
    constexpr bool Z_WARP = FWD && LA_NORMALISED;
    constexpr bool NEEDS_DEN = !FWD;
    constexpr bool COLUMN_EXTRA = (ROLE == CR_ROLE_DQ || ROLE == CR_ROLE_DK) && LA_NORMALISED;
    typedef typename cr_pick<A_IS_C, cr_qk_t, la_storage_t>::type a_t;
    typedef typename cr_pick<A_IS_C, la_storage_t, cr_qk_t>::type b_t;

    __shared__ __align__(16) float xa_s[CR_TILE][CR_A_MAX];
    __shared__ __align__(16) float wa_s[CR_TILE][CR_A_MAX];
    __shared__ float xb_s[CR_TILE][CR_COLS];
    __shared__ float part_s[CR_GROUPS][CR_TILE][CR_COLS];
    __shared__ float extra_s[CR_TILE][CR_COLS];
    __shared__ float den_s[CR_TILE];
    // Per-token 1/den (forward: ε_i) and gd, double-buffered: the next tile's are written while the
    // reduction of this tile still reads them.
    __shared__ float inv_den_s[2][CR_TILE];
    __shared__ float gd_s[2][CR_TILE];

    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const bool main_thread = tid < CR_MAIN_THREADS;
    const int bh = blockIdx.y;
    const int b0 = blockIdx.x * CR_COLS;
    const int a_dim = A_IS_C ? c_dim : m_dim;
    const int b_dim = A_IS_C ? m_dim : c_dim;
    const la_index_t head_tok = (la_index_t)bh * n;
    const la_index_t a_head = head_tok * a_dim;
    const la_index_t b_head = head_tok * b_dim;
    const int tiles = (n + CR_TILE - 1) / CR_TILE;
    // FAVOR+ features arrive shifted by exp(−shift): ε_i = ε·exp(q_log_scale_i + k_log_scale)
    // keeps O equal to the unshifted result (see feature_map.rs). Null for other maps.
    const bool scaled_eps = FWD && q_log_scale != nullptr;
    const float k_log = scaled_eps ? k_log_scale[bh] : 0.0f;

    const a_t* __restrict__ xa_src;
    const a_t* __restrict__ wa_src;
    const b_t* __restrict__ xb_src;
    if constexpr (FWD) {
        xa_src = k; wa_src = q; xb_src = v;
    } else if constexpr (ROLE == CR_ROLE_DV) {
        xa_src = q; wa_src = k; xb_src = g;
    } else if constexpr (ROLE == CR_ROLE_DQ) {
        xa_src = v; wa_src = g; xb_src = k;
    } else {
        xa_src = g; wa_src = v; xb_src = q;
    }

    // ---- tile loading: global → registers (prefetch), registers → shared (stash) ----
    a_t xa_raw[CR_LOADS_A];
    a_t wa_raw[CR_LOADS_A];
    b_t xb_raw[CR_LOADS_B];
    float den_raw = 1.0f, gd_raw = 0.0f;

    auto prefetch = [&](int tile) {
        const int t0 = tile * CR_TILE;
#pragma unroll
        for (int r = 0; r < CR_LOADS_A; ++r) {
            const int e = tid + r * CR_MAIN_THREADS;
            const int t = e / CR_A_MAX;
            const int a = e % CR_A_MAX;
            const bool ok = t0 + t < n && a < a_dim;
            const la_index_t idx = a_head + (la_index_t)(t0 + t) * a_dim + a;
            xa_raw[r] = ok ? xa_src[idx] : a_t(0);
            wa_raw[r] = ok ? wa_src[idx] : a_t(0);
        }
#pragma unroll
        for (int r = 0; r < CR_LOADS_B; ++r) {
            const int e = tid + r * CR_MAIN_THREADS;
            const int t = e / CR_COLS;
            const int b = b0 + e % CR_COLS;
            const bool ok = t0 + t < n && b < b_dim;
            xb_raw[r] = ok ? xb_src[b_head + (la_index_t)(t0 + t) * b_dim + b] : b_t(0);
        }
        if (NEEDS_DEN && tid < CR_TILE) {
            const bool ok = t0 + tid < n;
            den_raw = (ok && LA_NORMALISED) ? den_in[head_tok + t0 + tid] : 1.0f;
            gd_raw = (COLUMN_EXTRA && ok) ? gd_in[head_tok + t0 + tid] : 0.0f;  // dv: no gd
        }
        if (scaled_eps && tid < CR_TILE) {
            den_raw = t0 + tid < n ? q_log_scale[head_tok + t0 + tid] : 0.0f;
        }
    };

    auto stash = [&](int tile, int parity) {
        const int t0 = tile * CR_TILE;
#pragma unroll
        for (int r = 0; r < CR_LOADS_A; ++r) {
            const int e = tid + r * CR_MAIN_THREADS;
            const int t = e / CR_A_MAX;
            const int a = e % CR_A_MAX;
            const bool ok = t0 + t < n && a < a_dim;
            float xa = la_widen(xa_raw[r]);
            float wa = la_widen(wa_raw[r]);
            if constexpr (A_IS_C) {
                xa = la_phi(xa);
                wa = la_phi(wa);
            }
            // Padding must be 0, and φ(0) is 1 for elu+1.
            xa_s[t][a] = ok ? xa : 0.0f;
            wa_s[t][a] = ok ? wa : 0.0f;
        }
#pragma unroll
        for (int r = 0; r < CR_LOADS_B; ++r) {
            const int e = tid + r * CR_MAIN_THREADS;
            const int t = e / CR_COLS;
            const int col = e % CR_COLS;
            const bool ok = t0 + t < n && b0 + col < b_dim;
            float xb = la_widen(xb_raw[r]);
            if constexpr (!A_IS_C) xb = la_phi(xb);
            xb_s[t][col] = ok ? xb : 0.0f;
        }
        if (NEEDS_DEN && tid < CR_TILE) {
            const bool ok = t0 + tid < n;
            // Padding tokens: gn = 0 and gd = 0, so they add nothing to any state.
            inv_den_s[parity][tid] = ok ? 1.0f / den_raw : 0.0f;
            gd_s[parity][tid] = ok ? gd_raw : 0.0f;
        }
        if (Z_WARP && tid < CR_TILE) {
            inv_den_s[parity][tid] = scaled_eps ? eps * expf(den_raw + k_log) : eps;
        }
    };

    float state[CR_ROWS];
#pragma unroll
    for (int j = 0; j < CR_ROWS; ++j) state[j] = 0.0f;
    float z_state[CR_Z_ROWS];
#pragma unroll
    for (int j = 0; j < CR_Z_ROWS; ++j) z_state[j] = 0.0f;
    float column_extra = 0.0f;  // z_b (dq) or r_b (dk) of this lane's column, warp 0 only
    const int row0 = warp * CR_ROWS;

    if (main_thread) {
        prefetch(REVERSE ? tiles - 1 : 0);
        stash(REVERSE ? tiles - 1 : 0, 0);
    }
    __syncthreads();

    for (int it = 0; it < tiles; ++it) {
        const int tile = REVERSE ? tiles - 1 - it : it;
        const int t0 = tile * CR_TILE;
        const int parity = it & 1;
        if (main_thread && it + 1 < tiles) prefetch(REVERSE ? tile - 1 : tile + 1);

        // ---- compute: the sequential part, one token after the other ----
        if (main_thread) {
#pragma unroll 1
            for (int tt = 0; tt < CR_TILE; ++tt) {
                const int t = REVERSE ? CR_TILE - 1 - tt : tt;
                const float xb_plain = xb_s[t][lane];
                float xb = xb_plain;
                if constexpr (ROLE == CR_ROLE_DV || ROLE == CR_ROLE_DK) xb *= inv_den_s[parity][t];
                const float4* xa4 = reinterpret_cast<const float4*>(&xa_s[t][row0]);
                const float4* wa4 = reinterpret_cast<const float4*>(&wa_s[t][row0]);
                // Four accumulators: a single one would chain every FMA of the token.
                float acc0 = 0.0f, acc1 = 0.0f, acc2 = 0.0f, acc3 = 0.0f;
#pragma unroll
                for (int j4 = 0; j4 < CR_ROWS / 4; ++j4) {
                    const float4 xa = xa4[j4];
                    const float4 wa = wa4[j4];
                    state[4 * j4 + 0] = fmaf(xa.x, xb, decay * state[4 * j4 + 0]);
                    state[4 * j4 + 1] = fmaf(xa.y, xb, decay * state[4 * j4 + 1]);
                    state[4 * j4 + 2] = fmaf(xa.z, xb, decay * state[4 * j4 + 2]);
                    state[4 * j4 + 3] = fmaf(xa.w, xb, decay * state[4 * j4 + 3]);
                    acc0 = fmaf(state[4 * j4 + 0], wa.x, acc0);
                    acc1 = fmaf(state[4 * j4 + 1], wa.y, acc1);
                    acc2 = fmaf(state[4 * j4 + 2], wa.z, acc2);
                    acc3 = fmaf(state[4 * j4 + 3], wa.w, acc3);
                }
                part_s[warp][t][lane] = (acc0 + acc1) + (acc2 + acc3);
                if constexpr (STORE) {
                    const int i = t0 + t;
                    const int m = b0 + lane;
                    if (i < n && m < m_dim) {
                        float* row = states + ((head_tok + i) * c_dim + row0) * m_dim + m;
                        const int rows_here = min(CR_ROWS, c_dim - row0);
#pragma unroll
                        for (int j = 0; j < CR_ROWS; ++j) {
                            if (j < rows_here) *row = state[j];
                            row += m_dim;
                        }
                    }
                }
                if constexpr (COLUMN_EXTRA) {
                    if (warp == 0) {
                        if constexpr (ROLE == CR_ROLE_DQ) {
                            column_extra = fmaf(decay, column_extra, xb_plain);
                            extra_s[t][lane] = column_extra * gd_s[parity][t];
                        } else {
                            column_extra = fmaf(decay, column_extra, xb_plain * gd_s[parity][t]);
                            extra_s[t][lane] = column_extra;
                        }
                    }
                }
            }
        } else if constexpr (Z_WARP) {
            // z warp: z_i = λ z_{i-1} + k̃_i over all C rows, den_i = q̃_iᵀ z_i + ε.
#pragma unroll 1
            for (int t = 0; t < CR_TILE; ++t) {
                float partial = 0.0f;
#pragma unroll
                for (int j = 0; j < CR_Z_ROWS; ++j) {
                    const int c = j * 32 + lane;
                    z_state[j] = fmaf(decay, z_state[j], xa_s[t][c]);
                    partial = fmaf(z_state[j], wa_s[t][c], partial);
                }
                if constexpr (STORE) {
                    const int i = t0 + t;
                    if (blockIdx.x == 0 && i < n) {
#pragma unroll
                        for (int j = 0; j < CR_Z_ROWS; ++j) {
                            const int c = j * 32 + lane;
                            if (c < c_dim) z_states[(head_tok + i) * c_dim + c] = z_state[j];
                        }
                    }
                }
                partial = la_warp_sum(partial);
                if (lane == 0) den_s[t] = partial + inv_den_s[parity][t];
            }
        }
        __syncthreads();

        // ---- reduce the 8 warps' partial sums, finish and store this tile ----
        if (main_thread) {
#pragma unroll
            for (int r = 0; r < CR_LOADS_B; ++r) {
                const int o = tid + r * CR_MAIN_THREADS;
                const int t = o / CR_COLS;
                const int col = o % CR_COLS;
                const int i = t0 + t;
                const int b = b0 + col;
                if constexpr (ROLE == CR_ROLE_GO) {
                    // t (so i) is warp-uniform: o / 32 with o = tid + r·256. The warp sums
                    // G_i[b]·O_i[b] over its 32 columns, O_i = acc/den in fp32 (never
                    // rounded), into go_out[token · gridDim.x + blockIdx.x].
                    float part = 0.0f;
                    if (i < n && b < b_dim) {
                        float acc = 0.0f;
#pragma unroll
                        for (int w = 0; w < CR_GROUPS; ++w) acc += part_s[w][t][col];
                        part = la_load(g, (head_tok + i) * m_dim + b) * (acc / den_s[t]);
                    }
                    part = la_warp_sum(part);
                    if (col == 0 && i < n) go_out[(head_tok + i) * gridDim.x + blockIdx.x] = part;
                } else if (i < n && b < b_dim) {
                    float acc = 0.0f;
#pragma unroll
                    for (int w = 0; w < CR_GROUPS; ++w) acc += part_s[w][t][col];
                    const la_index_t tok = head_tok + i;
                    if constexpr (ROLE == CR_ROLE_FORWARD) {
                        if constexpr (LA_NORMALISED) {
                            acc = acc / den_s[t];
                            if (blockIdx.x == 0 && col == 0) den_out[tok] = den_s[t];
                        }
                        la_store(out_v, tok * m_dim + b, acc);
                    } else if constexpr (ROLE == CR_ROLE_DV) {
                        la_store(out_v, tok * m_dim + b, acc);
                    } else {
                        if constexpr (ROLE == CR_ROLE_DQ) acc *= inv_den_s[parity][t];
                        if constexpr (COLUMN_EXTRA) acc += extra_s[t][col];
                        const cr_qk_t* raw = ROLE == CR_ROLE_DQ ? q : k;
                        acc *= la_phi_grad(la_widen(raw[tok * c_dim + b]));
                        out_qk[tok * c_dim + b] = cr_qk_from_float(acc);
                    }
                }
            }
            if (it + 1 < tiles) stash(REVERSE ? tile - 1 : tile + 1, parity ^ 1);
        }
        __syncthreads();
    }
}

// The forward scan (role "forward" of the header's table): O_i = q̃_iᵀS_i / den_i and den_i =
// q̃_iᵀz_i + ε_i (saved for the backward; LA_NORMALISED = 0: O_i = q̃_iᵀS_i, no den). Grid
// (⌈M/32⌉, B·H), 288 threads (8 main warps + the z warp). Limits: the file's.
extern "C" __global__ void __launch_bounds__(CR_MAX_THREADS, 1)
cr_forward(const cr_qk_t* __restrict__ q, const cr_qk_t* __restrict__ k,
           const la_storage_t* __restrict__ v, la_storage_t* __restrict__ out,
           float* __restrict__ den_out, const float* __restrict__ q_log_scale,
           const float* __restrict__ k_log_scale, int n, int c_dim, int m_dim, float decay,
           float eps) {
    cr_scan<CR_ROLE_FORWARD, false>(q, k, v, nullptr, nullptr, nullptr, out, nullptr, den_out,
                                    nullptr, nullptr, nullptr, q_log_scale, k_log_scale, n,
                                    c_dim, m_dim, decay, eps);
}

// Backward pre-pass for 16-bit storage: the forward scan again (same grid, same z warp),
// writing no O and no den but go[token · ⌈M/32⌉ + block x] = Σ over the block's 32 columns
// of G_i·O_i with O_i in fp32, for cr_backward_prep's gd (the stored 16-bit O is rounded,
// and gd's z·gd and r terms cancel against the S·gn terms: that rounding was the largest
// error of bf16 dQ). q_log_scale, k_log_scale as cr_forward (FAVOR+), so O is the forward's.
// Grid, block and limits as cr_forward.
extern "C" __global__ void __launch_bounds__(CR_MAX_THREADS, 1)
cr_backward_go(const cr_qk_t* __restrict__ q, const cr_qk_t* __restrict__ k,
               const la_storage_t* __restrict__ v, const la_storage_t* __restrict__ g,
               float* __restrict__ go, const float* __restrict__ q_log_scale,
               const float* __restrict__ k_log_scale, int n, int c_dim, int m_dim, float decay,
               float eps) {
    cr_scan<CR_ROLE_GO, false>(q, k, v, g, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                               nullptr, go, q_log_scale, k_log_scale, n, c_dim, m_dim, decay,
                               eps);
}

// The forward of the stored-states backward: also writes S_i to states[bh][i][c][m] and z_i
// to z_states[bh][i][c] (fp32; O(N·C·M) on purpose). Grid, block and limits as cr_forward.
extern "C" __global__ void __launch_bounds__(CR_MAX_THREADS, 1)
cr_forward_stored(const cr_qk_t* __restrict__ q, const cr_qk_t* __restrict__ k,
                  const la_storage_t* __restrict__ v, la_storage_t* __restrict__ out,
                  float* __restrict__ den_out, float* __restrict__ states,
                  float* __restrict__ z_states, const float* __restrict__ q_log_scale,
                  const float* __restrict__ k_log_scale, int n, int c_dim, int m_dim,
                  float decay, float eps) {
    cr_scan<CR_ROLE_FORWARD, true>(q, k, v, nullptr, nullptr, nullptr, out, nullptr, den_out,
                                   states, z_states, nullptr, q_log_scale, k_log_scale, n,
                                   c_dim, m_dim, decay, eps);
}

// cr_backward_dq and cr_backward_dk take one parameter list (the host launches both alike);
// `out` is ∂q̃ or ∂k̃ (⊙ φ').
#define CR_BACKWARD_QK_ENTRY(name, ROLE)                                                         \
    extern "C" __global__ void __launch_bounds__(CR_MAIN_THREADS, 1)                             \
    name(const cr_qk_t* __restrict__ q, const cr_qk_t* __restrict__ k,                           \
         const la_storage_t* __restrict__ v, const la_storage_t* __restrict__ g,                 \
         const float* __restrict__ den, const float* __restrict__ gd, cr_qk_t* __restrict__ out, \
         int n, int c_dim, int m_dim, float decay) {                                             \
        cr_scan<ROLE, false>(q, k, v, g, den, gd, nullptr, out, nullptr, nullptr, nullptr,       \
                             nullptr, nullptr, nullptr, n, c_dim, m_dim, decay, 0.0f);           \
    }

// ∂q̃_i = S_i gn_i + z_i gd_i, S_i and z_i recomputed by a forward scan (role "dq"), then ⊙
// φ'(q). Grid (⌈C/32⌉, B·H), 256 threads. Limits: the file's.
CR_BACKWARD_QK_ENTRY(cr_backward_dq, CR_ROLE_DQ)

// ∂k̃_j = R_j v_j + r_j by a reverse scan (role "dk"), then ⊙ φ'(k). Grid (⌈C/32⌉, B·H),
// 256 threads. Limits: the file's.
CR_BACKWARD_QK_ENTRY(cr_backward_dk, CR_ROLE_DK)

// ∂v_j = R_jᵀ k̃_j by a reverse scan (role "dv"). Grid (⌈M/32⌉, B·H), 256 threads. Limits:
// the file's.
extern "C" __global__ void __launch_bounds__(CR_MAIN_THREADS, 1)
cr_backward_dv(const cr_qk_t* __restrict__ q, const cr_qk_t* __restrict__ k,
               const la_storage_t* __restrict__ g, const float* __restrict__ den,
               la_storage_t* __restrict__ dv, int n, int c_dim, int m_dim, float decay) {
    cr_scan<CR_ROLE_DV, false>(q, k, nullptr, g, den, nullptr, dv, nullptr, nullptr, nullptr,
                               nullptr, nullptr, nullptr, nullptr, n, c_dim, m_dim, decay, 0.0f);
}

// gd_i = −(G_i·O_i) / den_i. A warp owns a chunk of 32 tokens, lane l token l of it (warps
// grid-stride over chunks), so den and gd move as whole coalesced rows. G·O is the sum of
// `slices` partials go[token · slices + s] from cr_backward_go (fp32 O, 16-bit storage): the
// chunk's 32·slices partials are contiguous, read lane-consecutive into shared memory and
// summed there per token. With slices = 0 it is read from `out` (fp32 storage: O is exact
// there), the warp walking its chunk one token at a time along the (contiguous) row.
// Limits: slices ≤ CR_PREP_MAX_SLICES (M ≤ 256); more falls back to strided reads. The
// launch gives a block (8 warps) per 256 tokens (Rust per_token_launch), grid-stride beyond.
#define CR_PREP_MAX_SLICES 8
// 8 blocks: ≤ 32 registers, full occupancy (the fp32-storage loop would otherwise take 40).
extern "C" __global__ void __launch_bounds__(256, 8)
cr_backward_prep(const la_storage_t* __restrict__ g, const la_storage_t* __restrict__ out,
                 const float* __restrict__ go, int slices, const float* __restrict__ den,
                 float* __restrict__ gd, la_index_t tokens, int m_dim) {
    // Per warp 32·slices partials plus one pad word per 32: reading token l's run at
    // j = l·slices + s, the padded index j + j/32 hits 32 distinct banks for slices a power
    // of two (others: stride-odd slices need no pad and skip it; slices = 6 has 2-way).
    __shared__ float part[256 / LA_WARP][LA_WARP * CR_PREP_MAX_SLICES + CR_PREP_MAX_SLICES];
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const la_index_t warps_per_block = blockDim.x >> 5;
    const la_index_t chunks = (tokens + LA_WARP - 1) / LA_WARP;
    const bool pad = (slices & 1) == 0;
    for (la_index_t chunk = blockIdx.x * warps_per_block + warp; chunk < chunks;
         chunk += (la_index_t)gridDim.x * warps_per_block) {
        const la_index_t tok0 = chunk * LA_WARP;
        const int count = (int)min((la_index_t)LA_WARP, tokens - tok0);
        const la_index_t tok = tok0 + lane;
        float dot = 0.0f;
        if (slices > CR_PREP_MAX_SLICES) {
            if (lane < count)
                for (int s = 0; s < slices; ++s) dot += go[tok * slices + s];
        } else if (slices > 0) {
            const int len = count * slices;
            const float* src = go + tok0 * slices;
            for (int e = lane; e < len; e += LA_WARP)
                part[warp][pad ? e + e / LA_WARP : e] = src[e];
            __syncwarp();
            if (lane < count) {
                for (int s = 0; s < slices; ++s) {
                    const int j = lane * slices + s;
                    dot += part[warp][pad ? j + j / LA_WARP : j];
                }
            }
            __syncwarp();  // the next chunk overwrites part[warp]
        } else {
            for (int t = 0; t < count; ++t) {
                const la_index_t row = (tok0 + t) * m_dim;
                float d = 0.0f;
                for (int m = lane; m < m_dim; m += 32)
                    d = fmaf(la_load(g, row + m), la_load(out, row + m), d);
                d = la_warp_sum(d);
                if (lane == t) dot = d;
            }
        }
        if (lane < count) gd[tok] = -dot / den[tok];
    }
}

// Stored-states ∂q̃_i = S_i gn_i + z_i gd_i, read from the states the forward wrote: no scan,
// one block per token (grid (N, B·H)), warp w takes rows c ≡ w (mod 8), lanes walk m. gd
// comes from the same states, in fp32: with y = S_i gn_i, G_i·O_i = Σ_c q̃_i[c] y_c, so
// gd_i = −(q̃_i·y)/den_i needs neither the 16-bit stored O nor a pre-pass; the block writes
// it to gd[token] for the ∂K scan (normalised maps; no cr_backward_prep on this path).
// Block 256 threads. Limits: C, M ≤ 256 (shared rows), N ≤ 2^31 − 1 (grid.x), B·H ≤ 65535.
extern "C" __global__ void __launch_bounds__(256)
cr_backward_dq_from_states(const cr_qk_t* __restrict__ q, const la_storage_t* __restrict__ g,
                           const float* __restrict__ den, float* __restrict__ gd,
                           const float* __restrict__ states, const float* __restrict__ z_states,
                           cr_qk_t* __restrict__ dq, int n, int c_dim, int m_dim) {
    __shared__ float gn_s[256];
    __shared__ float y_s[256];
    __shared__ float scratch[32];
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const la_index_t tok = (la_index_t)blockIdx.y * n + blockIdx.x;
    const float inv_den = LA_NORMALISED ? 1.0f / den[tok] : 1.0f;
    for (int m = threadIdx.x; m < m_dim && m < 256; m += blockDim.x)
        gn_s[m] = la_load(g, tok * m_dim + m) * inv_den;
    __syncthreads();
    float q_dot_y = 0.0f;  // lane 0: Σ over this warp's rows c of q̃_c y_c
    for (int c = warp; c < c_dim; c += blockDim.x >> 5) {
        const float* row = states + (tok * c_dim + c) * m_dim;
        float acc = 0.0f;
        for (int m = lane; m < m_dim && m < 256; m += 32) acc = fmaf(row[m], gn_s[m], acc);
        acc = la_warp_sum(acc);
        if (lane == 0) {
            y_s[c] = acc;
            if (LA_NORMALISED) q_dot_y = fmaf(la_phi(la_widen(q[tok * c_dim + c])), acc, q_dot_y);
        }
    }
    float gd_tok = 0.0f;
    if (LA_NORMALISED) {
        gd_tok = -la_block_sum(q_dot_y, scratch) * inv_den;  // has barriers: y_s visible
        if (threadIdx.x == 0) gd[tok] = gd_tok;
    } else {
        __syncthreads();
    }
    for (int c = threadIdx.x; c < c_dim; c += blockDim.x) {
        float acc = y_s[c];
        if (LA_NORMALISED) acc = fmaf(z_states[tok * c_dim + c], gd_tok, acc);
        acc *= la_phi_grad(la_widen(q[tok * c_dim + c]));
        dq[tok * c_dim + c] = cr_qk_from_float(acc);
    }
}
