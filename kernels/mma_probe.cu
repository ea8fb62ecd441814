// mma_probe.cu — how the tensor cores sum d = c + Σ_k a_k·b_k in
// mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32, on test vectors the host
// builds to tell accumulation models apart (crates/linattn-cuda/src/mma_probe.rs; which
// models, and why each vector, are described there).
//
// ---- layout (one tile = one mma) ----
//   a: tiles × 16 × 16 16-bit floats, row-major (row, k), two to a 32-bit word
//   b: tiles × 8 × 16 16-bit floats, Bᵀ row-major (n, k): column n of B, k contiguous
//   c: tiles × 16 × 8 f32, row-major;  d: the same shape, written
//   Words are loaded as the fragments of the PTX ISA ("Matrix Fragments for mma.m16n8k16
//   with floating point type"): lane = 4·g + t holds A at rows g, g+8 and k = 2t, 2t+1,
//   2t+8, 2t+9; B at n = g and the same k; C and D at rows g, g+8 and n = 2t, 2t+1.
//
// ---- grid / block ----
//   One warp (32 threads) per CTA, one tile per CTA: grid = tiles. The inputs are bit
//   patterns (no conversion on the device), the outputs raw f32 bits.
//
// ---- limits ----
//   tiles ≥ 1; the buffers hold `tiles` tiles each.

#define MP_TILE_A 128  // 32-bit words of A per tile
#define MP_TILE_B 64   // 32-bit words of Bᵀ per tile
#define MP_TILE_C 128  // floats of C (and D) per tile

// The fragments of one tile, the mma (F16 chooses the input type), D stored.
template <bool F16>
__device__ __forceinline__ void mp_tile(const unsigned* __restrict__ a,
                                        const unsigned* __restrict__ b,
                                        const float* __restrict__ c, float* __restrict__ d) {
    const int tile = blockIdx.x;
    const int lane = threadIdx.x;
    const int g = lane >> 2, t = lane & 3;
    const unsigned* ta = a + (long long)tile * MP_TILE_A;
    const unsigned* tb = b + (long long)tile * MP_TILE_B;
    const float* tc = c + (long long)tile * MP_TILE_C;
    float* td = d + (long long)tile * MP_TILE_C;
    // A row r, k pair (2t, 2t+1) is word r·8 + t; the pair at k + 8 is 4 words on.
    const unsigned a0 = ta[g * 8 + t], a1 = ta[(g + 8) * 8 + t];
    const unsigned a2 = ta[g * 8 + t + 4], a3 = ta[(g + 8) * 8 + t + 4];
    const unsigned b0 = tb[g * 8 + t], b1 = tb[g * 8 + t + 4];
    float d0 = tc[g * 8 + 2 * t], d1 = tc[g * 8 + 2 * t + 1];
    float d2 = tc[(g + 8) * 8 + 2 * t], d3 = tc[(g + 8) * 8 + 2 * t + 1];
    if (F16) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
            "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
            : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    } else {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
            "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
            : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    }
    td[g * 8 + 2 * t] = d0;
    td[g * 8 + 2 * t + 1] = d1;
    td[(g + 8) * 8 + 2 * t] = d2;
    td[(g + 8) * 8 + 2 * t + 1] = d3;
}

extern "C" __global__ void __launch_bounds__(32)
    mp_f16(const unsigned* __restrict__ a, const unsigned* __restrict__ b,
           const float* __restrict__ c, float* __restrict__ d, int tiles) {
    if ((int)blockIdx.x < tiles) mp_tile<true>(a, b, c, d);
}

extern "C" __global__ void __launch_bounds__(32)
    mp_bf16(const unsigned* __restrict__ a, const unsigned* __restrict__ b,
            const float* __restrict__ c, float* __restrict__ d, int tiles) {
    if ((int)blockIdx.x < tiles) mp_tile<false>(a, b, c, d);
}
