// mufu_probe.cu — one approximate function over an input array, for the simulator's MUFU
// tables (crates/linattn-ptxsim/src/exec/mufu_table.rs, `linattn mufu`, issue #23).
//
// ---- math ----
//   out[i] = bits of OP(input[i]), OP the PTX instruction named by `op`, forced by inline PTX
//   (NVVM does not replace or reassociate an asm statement):
//     0  ex2.approx.ftz.f32     (SASS: MUFU.EX2 alone)
//     1  ex2.approx.f32         (SASS: x < -126 goes through MUFU.EX2(x/2) squared)
//     2  rsqrt.approx.ftz.f32   (SASS: MUFU.RSQ alone)
//     3  rsqrt.approx.f32       (SASS: subnormal inputs scaled around MUFU.RSQ)
//     4  rcp.approx.ftz.f32     (SASS: MUFU.RCP alone)
//   The numbering is MufuForm's order (mufu_table.rs: `probe_code`). An unknown op writes the
//   input back unchanged, which no verification accepts as a result.
//
// ---- grid / block ----
//   1-D, any shape: a grid-stride loop over i < n, one element per thread per pass, loads
//   and stores coalesced. Every element is independent.
//
// ---- limits ----
//   n ≥ 0 and n ≤ 2^31 − 1; `input` and `out` hold n 32-bit words each and do not overlap.
//   The results are the device's own bits: NaN payloads included, nothing is canonicalised.

__device__ __forceinline__ unsigned mp_eval(int op, unsigned bits) {
    const float x = __uint_as_float(bits);
    float r;
    switch (op) {
        case 0: asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x)); break;
        case 1: asm("ex2.approx.f32 %0, %1;" : "=f"(r) : "f"(x)); break;
        case 2: asm("rsqrt.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x)); break;
        case 3: asm("rsqrt.approx.f32 %0, %1;" : "=f"(r) : "f"(x)); break;
        case 4: asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x)); break;
        default: r = x; break;
    }
    return __float_as_uint(r);
}

extern "C" __global__ void mp_eval_all(const unsigned* __restrict__ input, unsigned* __restrict__ out,
                                       int n, int op) {
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        out[i] = mp_eval(op, input[i]);
    }
}
