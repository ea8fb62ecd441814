// latency_probe.cu — microbenchmarks of dependent-issue latency, for the performance model's
// constants (crates/linattn-ptxsim/src/arch.rs, `Latencies`).
//
// ---- what each entry measures ----
//   Every probe times `steps` links of one dependency chain with %clock64 (SM cycles) and
//   writes out[0] = cycles of the timed loop, out[1] = a value that depends on every link
//   (so no link is dead code); out[2] is never written (see lp_settle_u). Cycles per link =
//   out[0] / steps (the lab divides; a link of lp_conversion is two conversions, of a group
//   probe one group). Timed loops are unrolled ×16 (×4 for groups) so loop control adds
//   little to a link. Chains are inline PTX `asm volatile`, so NVVM keeps them as written
//   and in order with the clock reads.
//     lp_alu           fma.rn.f32 d, d, a, b                       (class "alu")
//     lp_conversion    cvt.rn.f16.f32 then cvt.f32.f16            (class "conversion", ×2)
//     lp_sfu           ex2.approx.ftz.f32 d, d                     (class "sfu")
//     lp_shfl          shfl.sync.bfly.b32 d, d, 1                  (class "shfl")
//     lp_mma           mma.sync m16n8k16 f32.f16.f16.f32, D = A·B + D (class "mma")
//     lp_shared_chase  ld.shared.u32 p, [p] around a ring          (class "shared_load")
//     lp_barrier       bar.sync 0, four warps                      (class "barrier")
//     lp_global_chase  ld.global{.cg}.u64 p, [p] around a host-built ring of addresses:
//                      L2 hits (warm = 1 walks the ring once untimed first) or, over a
//                      footprint far beyond L2 after an L2 flush, DRAM (+ any TLB misses
//                      the ring's stride causes)                  (classes "l2_hit", "dram")
//     lp_scan_group4   the loop of cc_scan, the chunk-state scan the H100 ran on 2026-11-25
//                      (since replaced by cc_forward_h; the launches are kept in
//                      bench-results/h100/2026-11-25/trace-n4096), for one warp: per link, 4 coalesced
//                      loads `stride` floats apart, then the carry stored in place of each
//                      and fma'd with it, as the scan does (the next link's loads issue after
//                      those stores). lp_load_group4 / lp_load_group1: 4 / 1 such loads with
//                      no stores, the next link's addresses waiting for the carry. Together
//                      they tell whether a group costs one DRAM latency (the model's
//                      assumption) or more, and whether the stores are why.
//
// ---- grid / block ----
//   One CTA of one warp (lp_barrier: 4 warps); lane 0 (thread 0) writes `out`. Nothing
//   else runs, so a link's time is its latency, not contention.
//
// ---- limits ----
//   steps ≥ 1. lp_shared_chase: ring of LP_RING words in static shared memory. lp_global_chase:
//   `ring` holds 64-bit device addresses, each the next element (built by the host).
//   group probes: buf holds (steps · G · stride + 32) floats. On the PTX simulator
//   %clock64 is its warp issue clock (the latency model), so the probes read back the
//   model's own constants there: a check of the clock model, not a measurement.

#define LP_RING 1024

__device__ __forceinline__ unsigned long long lp_clock() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(t)::"memory");
    return t;
}

// One instruction that needs the chain's last result: the end clock read issues after it, so
// the last link's latency is inside the timed interval (in-order issue, here and on the
// simulator).
// A compare of that result and a store it guards (never taken: no probe's value is the
// sentinel) are what neither NVVM nor ptxas may drop; lp_clock's "memory" clobber keeps the
// end clock read after them.
#define LP_SENTINEL 0x7fc0dead7fc0deadull
__device__ __forceinline__ void lp_settle_u(unsigned long long* out, unsigned long long x) {
    if (x == LP_SENTINEL) out[2] = x;
}
__device__ __forceinline__ void lp_settle_f(unsigned long long* out, float x) {
    lp_settle_u(out, __float_as_uint(x));
}

__device__ __forceinline__ void lp_write(unsigned long long* out, unsigned long long cycles,
                                         unsigned long long sink) {
    if (threadIdx.x == 0) {
        out[0] = cycles;
        out[1] = sink;
    }
}

extern "C" __global__ void lp_alu(unsigned long long* out, int steps) {
    float x = (float)threadIdx.x;
    const float a = 0.999f, b = 0.5f;
    const unsigned long long t0 = lp_clock();
#pragma unroll 16
    for (int s = 0; s < steps; ++s) {
        asm volatile("fma.rn.f32 %0, %0, %1, %2;" : "+f"(x) : "f"(a), "f"(b));
    }
    lp_settle_f(out, x);
    const unsigned long long t1 = lp_clock();
    lp_write(out, t1 - t0, __float_as_uint(x));
}

extern "C" __global__ void lp_conversion(unsigned long long* out, int steps) {
    float x = 1.0f + (float)threadIdx.x;
    const unsigned long long t0 = lp_clock();
#pragma unroll 16
    for (int s = 0; s < steps; ++s) {
        unsigned short h;
        asm volatile("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x));
        asm volatile("cvt.f32.f16 %0, %1;" : "=f"(x) : "h"(h));
    }
    lp_settle_f(out, x);
    const unsigned long long t1 = lp_clock();
    lp_write(out, t1 - t0, __float_as_uint(x));
}

extern "C" __global__ void lp_sfu(unsigned long long* out, int steps) {
    // ex2 of a value in (0, 1] stays in [1, 2]; subtracting 1 (one more link) is avoided by
    // letting it grow: the latency does not depend on the operand.
    float x = -1.0f - (float)threadIdx.x;
    const unsigned long long t0 = lp_clock();
#pragma unroll 16
    for (int s = 0; s < steps; ++s) {
        asm volatile("ex2.approx.ftz.f32 %0, %0;" : "+f"(x));
    }
    lp_settle_f(out, x);
    const unsigned long long t1 = lp_clock();
    lp_write(out, t1 - t0, __float_as_uint(x));
}

extern "C" __global__ void lp_shfl(unsigned long long* out, int steps) {
    unsigned x = threadIdx.x;
    const unsigned long long t0 = lp_clock();
#pragma unroll 16
    for (int s = 0; s < steps; ++s) {
        asm volatile("shfl.sync.bfly.b32 %0, %0, 1, 31, -1;" : "+r"(x));
    }
    lp_settle_u(out, x);
    const unsigned long long t1 = lp_clock();
    lp_write(out, t1 - t0, x);
}

extern "C" __global__ void lp_mma(unsigned long long* out, int steps) {
    // A = B = small f16 values (0x2c00 = 0.0625 twice per register); D accumulates.
    const unsigned a = 0x2c002c00u, b = 0x2c002c00u;
    float d0 = 0.f, d1 = 0.f, d2 = 0.f, d3 = 0.f;
    const unsigned long long t0 = lp_clock();
#pragma unroll 16
    for (int s = 0; s < steps; ++s) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
            "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
            : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
            : "r"(a), "r"(a), "r"(a), "r"(a), "r"(b), "r"(b));
    }
    lp_settle_f(out, d0);
    const unsigned long long t1 = lp_clock();
    lp_write(out, t1 - t0, __float_as_uint(d0 + d1 + d2 + d3));
}

extern "C" __global__ void lp_shared_chase(unsigned long long* out, int steps) {
    __shared__ unsigned ring[LP_RING];
    // Each word holds the shared-window address of the word 33 further on (mod LP_RING): a
    // new bank every link; one lane chases, the others wait at the final write.
    const unsigned base = (unsigned)__cvta_generic_to_shared(ring);
    for (int i = threadIdx.x; i < LP_RING; i += blockDim.x) {
        ring[i] = base + 4u * ((i + 33) % LP_RING);
    }
    __syncthreads();
    unsigned p = base;
    const unsigned long long t0 = lp_clock();
#pragma unroll 16
    for (int s = 0; s < steps; ++s) {
        asm volatile("ld.shared.u32 %0, [%0];" : "+r"(p));
    }
    lp_settle_u(out, p);
    const unsigned long long t1 = lp_clock();
    lp_write(out, t1 - t0, p);
}

extern "C" __global__ void lp_barrier(unsigned long long* out, int steps) {
    const unsigned long long t0 = lp_clock();
#pragma unroll 16
    for (int s = 0; s < steps; ++s) {
        asm volatile("bar.sync 0;");
    }
    const unsigned long long t1 = lp_clock();
    lp_write(out, t1 - t0, steps);
}

extern "C" __global__ void lp_global_chase(const unsigned long long* __restrict__ ring,
                                           unsigned long long* out, int steps, int cache_global,
                                           int warm) {
    unsigned long long p = (unsigned long long)ring;
    if (warm) {
        for (int s = 0; s < steps; ++s) {
            asm volatile("ld.global.cg.u64 %0, [%0];" : "+l"(p));
        }
        lp_settle_u(out, p);
        p = (unsigned long long)ring;
    }
    const unsigned long long t0 = lp_clock();
    if (cache_global) {
#pragma unroll 16
        for (int s = 0; s < steps; ++s) {
            asm volatile("ld.global.cg.u64 %0, [%0];" : "+l"(p));
        }
    } else {
#pragma unroll 16
        for (int s = 0; s < steps; ++s) {
            asm volatile("ld.global.u64 %0, [%0];" : "+l"(p));
        }
    }
    lp_settle_u(out, p);
    const unsigned long long t1 = lp_clock();
    lp_write(out, t1 - t0, p);
}

// One link of cc_scan's loop (G loads, then, with STORE, the carry stored in place of each
// and fma'd with it), or without STORE the same loads with the next link's addresses
// waiting for the carry (a zero NVVM cannot fold). G is a template parameter so x[] stays in
// registers.
template <int G, bool STORE>
__device__ __forceinline__ void lp_groups_body(float* __restrict__ buf, unsigned long long* out,
                                               int steps, long long stride, float decay) {
    float* p = buf + threadIdx.x;
    float carry = 0.0f;
    const unsigned long long t0 = lp_clock();
#pragma unroll 4
    for (int s = 0; s < steps; ++s) {
        float x[G];
#pragma unroll
        for (int u = 0; u < G; ++u) {
            asm volatile("ld.global.f32 %0, [%1];" : "=f"(x[u]) : "l"(p + u * stride));
        }
#pragma unroll
        for (int u = 0; u < G; ++u) {
            if (STORE) {
                asm volatile("st.global.f32 [%0], %1;" ::"l"(p + u * stride), "f"(carry));
            }
            asm volatile("fma.rn.f32 %0, %0, %1, %2;" : "+f"(carry) : "f"(decay), "f"(x[u]));
        }
        long long next = (long long)G * stride;
        if (!STORE) {
            int zero;
            asm volatile("and.b32 %0, %1, 0;" : "=r"(zero) : "r"(__float_as_int(carry)));
            next += zero;
        }
        p += next;
    }
    lp_settle_f(out, carry);
    const unsigned long long t1 = lp_clock();
    lp_write(out, t1 - t0, __float_as_uint(carry));
}

extern "C" __global__ void lp_scan_group4(float* __restrict__ buf, unsigned long long* out,
                                          int steps, long long stride, float decay) {
    lp_groups_body<4, true>(buf, out, steps, stride, decay);
}

extern "C" __global__ void lp_load_group4(float* __restrict__ buf, unsigned long long* out,
                                          int steps, long long stride, float decay) {
    lp_groups_body<4, false>(buf, out, steps, stride, decay);
}

extern "C" __global__ void lp_load_group1(float* __restrict__ buf, unsigned long long* out,
                                          int steps, long long stride, float decay) {
    lp_groups_body<1, false>(buf, out, steps, stride, decay);
}
