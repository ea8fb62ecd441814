// prelude.cuh — shared by every linattn kernel. The runtime (crates/linattn-cuda/src/runtime.rs)
// compiles `prelude.cuh + "#line 1 <kernel>.cu" + <kernel>.cu` as ONE NVRTC program, so kernels
// never #include this file. Header-free on purpose: no cuda_fp16.h / cuda_bf16.h (NVRTC 13.0
// does not bundle them); fp16/bf16 conversions are inline PTX `cvt`, which needs sm_53+/sm_80+.
//
// Compile-time configuration (NVRTC -D defines, set by the Rust side):
//   LA_STORAGE   0 = fp32, 1 = fp16, 2 = bf16 storage of Q, K, V, O and gradients in global
//                memory. Arithmetic is always fp32 (SPEC §9): load widens, store narrows (RN).
//   LA_MAP       elementwise feature map fused into kernels: 0 identity, 1 elu+1, 2 relu.
//                Non-elementwise maps (softmax, 1+cos, FAVOR+, efficient) run as a separate φ
//                stage (feature_map.cu) and the core then uses LA_MAP 0 on φ(Q), φ(K).
//   LA_DK_MAX    head-dim class of D (or C) and M: 32, 64, 128 or 256; kernels size per-thread
//   LA_DV_MAX    register/shared arrays by the class and loop to the runtime dim (≤ class).
//
// Everything here is prefixed `la_` so kernels may add their own helpers without clashes.

#ifndef LA_PRELUDE_CUH
#define LA_PRELUDE_CUH

#ifndef LA_STORAGE
#define LA_STORAGE 0
#endif
#ifndef LA_MAP
#define LA_MAP 0
#endif

#define LA_STORAGE_F32 0
#define LA_STORAGE_F16 1
#define LA_STORAGE_BF16 2

#define LA_MAP_IDENTITY 0
#define LA_MAP_ELU_PLUS_ONE 1
#define LA_MAP_RELU 2

#define LA_FULL_MASK 0xffffffffu
#define LA_WARP 32
// No math.h under NVRTC: spell -inf as its bit pattern.
#define LA_NEG_INF __int_as_float(0xff800000)

// Element offsets into [B,H,N,D] tensors exceed 2^31 at long N: index in 64 bits.
typedef long long la_index_t;

// ---- storage type and conversions ---------------------------------------------------------
// fp16 and bf16 are kept as raw 16-bit patterns; only their conversion differs.
#if LA_STORAGE == LA_STORAGE_F32
typedef float la_storage_t;
#else
typedef unsigned short la_storage_t;
#endif

__device__ __forceinline__ float la_half_to_float(unsigned short bits) {
    float out;
    asm("cvt.f32.f16 %0, %1;" : "=f"(out) : "h"(bits));
    return out;
}

__device__ __forceinline__ unsigned short la_float_to_half(float x) {
    unsigned short bits;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(bits) : "f"(x));
    return bits;
}

// bf16 is the top half of an fp32: widening is exact as a shift.
__device__ __forceinline__ float la_bf16_to_float(unsigned short bits) {
    return __uint_as_float(((unsigned int)bits) << 16);
}

// Round-to-nearest-even narrowing (PTX cvt.rn.bf16.f32, sm_80+), NaN preserved.
__device__ __forceinline__ unsigned short la_float_to_bf16(float x) {
    unsigned short bits;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(bits) : "f"(x));
    return bits;
}

__device__ __forceinline__ float la_to_float(la_storage_t v) {
#if LA_STORAGE == LA_STORAGE_F32
    return v;
#elif LA_STORAGE == LA_STORAGE_F16
    return la_half_to_float(v);
#else
    return la_bf16_to_float(v);
#endif
}

__device__ __forceinline__ la_storage_t la_from_float(float x) {
#if LA_STORAGE == LA_STORAGE_F32
    return x;
#elif LA_STORAGE == LA_STORAGE_F16
    return la_float_to_half(x);
#else
    return la_float_to_bf16(x);
#endif
}

// Widening of either element type kernels read: fp32 (φ-stage features, workspaces) or the
// storage type.
__device__ __forceinline__ float la_widen(float x) { return x; }
#if LA_STORAGE != LA_STORAGE_F32
__device__ __forceinline__ float la_widen(unsigned short x) { return la_to_float(x); }
#endif

__device__ __forceinline__ float la_load(const la_storage_t* __restrict__ p, la_index_t i) {
    return la_to_float(p[i]);
}

__device__ __forceinline__ void la_store(la_storage_t* __restrict__ p, la_index_t i, float x) {
    p[i] = la_from_float(x);
}

// ---- fused elementwise feature maps (SPEC §5) ---------------------------------------------
// la_phi_of_map(map, x) = φ(x), la_phi_grad_of_map(map, x) = φ'(x), the derivative at the
// *pre-map* input x, for a map code (LA_MAP_*) known at run time (causal_chunked.cu takes it
// as a kernel argument); la_phi, la_phi_grad are the same at the compile-time LA_MAP, where
// the branches fold away. All fp32 (SPEC §9).
__device__ __forceinline__ float la_phi_of_map(int map, float x) {
    if (map == LA_MAP_ELU_PLUS_ONE) return x > 0.0f ? x + 1.0f : expf(x);
    if (map == LA_MAP_RELU) return fmaxf(x, 0.0f);
    return x;
}

__device__ __forceinline__ float la_phi_grad_of_map(int map, float x) {
    if (map == LA_MAP_ELU_PLUS_ONE) return x > 0.0f ? 1.0f : expf(x);
    if (map == LA_MAP_RELU) return x > 0.0f ? 1.0f : 0.0f;
    return 1.0f;
}

__device__ __forceinline__ float la_phi(float x) { return la_phi_of_map(LA_MAP, x); }

__device__ __forceinline__ float la_phi_grad(float x) { return la_phi_grad_of_map(LA_MAP, x); }

// Whether O is divided by φ(q)ᵀz + ε. Identity is un-normalised (SPEC §7); kernels that run
// after a φ stage receive LA_NORMALISED from the runtime (efficient attention: 0).
#ifndef LA_NORMALISED
#if LA_MAP == LA_MAP_IDENTITY
#define LA_NORMALISED 0
#else
#define LA_NORMALISED 1
#endif
#endif

// ---- warp / block reductions --------------------------------------------------------------
// MAX: the max, else the sum. Every lane of the warp gets the result.
template <bool MAX>
__device__ __forceinline__ float la_warp_reduce(float x) {
#pragma unroll
    for (int offset = LA_WARP / 2; offset > 0; offset >>= 1) {
        const float other = __shfl_xor_sync(LA_FULL_MASK, x, offset);
        x = MAX ? fmaxf(x, other) : x + other;
    }
    return x;
}

__device__ __forceinline__ float la_warp_sum(float x) { return la_warp_reduce<false>(x); }

__device__ __forceinline__ float la_warp_max(float x) { return la_warp_reduce<true>(x); }

// The same over the whole block; every thread gets the result. `scratch` holds ≥ 32 floats of
// shared memory; blockDim.x must be a multiple of 32. Ends with a barrier, so the scratch
// may be reused right after.
template <bool MAX>
__device__ __forceinline__ float la_block_reduce(float x, float* scratch) {
    const int lane = threadIdx.x % LA_WARP;
    const int warp = threadIdx.x / LA_WARP;
    const int warps = blockDim.x / LA_WARP;
    x = la_warp_reduce<MAX>(x);
    if (lane == 0) scratch[warp] = x;
    __syncthreads();
    float total = lane < warps ? scratch[lane] : (MAX ? LA_NEG_INF : 0.0f);
    total = la_warp_reduce<MAX>(total);
    __syncthreads();
    return total;
}

__device__ __forceinline__ float la_block_sum(float x, float* scratch) { return la_block_reduce<false>(x, scratch); }

__device__ __forceinline__ float la_block_max(float x, float* scratch) { return la_block_reduce<true>(x, scratch); }

#endif  // LA_PRELUDE_CUH
