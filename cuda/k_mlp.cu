// The MLP speculator's per-stage state update on the device (cuda/mlp.c
// runs the GEMMs around it through cuBLAS).
#include "cuda/dev.cuh"
#include "cuda/kern.h"

// One block per row: v = t * sw + emb[tok] * ew, its RMS over I (a block
// sum: a fixed order for a given I), then the layer norm's weight and bias
// and the exact GELU, written as bf16. v is recomputed in the second pass
// rather than kept: I is the speculator's width, a few thousand at most.
static __global__ void k_mlp_mix(const float *t, const int32_t *tok, const uint16_t *emb,
                                 const float *ln_w, const float *ln_b, float sw, float ew,
                                 int I, float eps, uint16_t *s, int lds)
{
    __shared__ float red[32];
    const float *tr = t + (size_t)blockIdx.x * I;
    const uint16_t *er = emb + (size_t)tok[blockIdx.x] * I;
    float ss = 0.0f;
    for (int j = threadIdx.x; j < I; j += blockDim.x) {
        float v = __fadd_rn(__fmul_rn(tr[j], sw), __fmul_rn(bf2f(er[j]), ew));
        ss = __fmaf_rn(v, v, ss);
    }
    ss = block_sum(ss, red);
    float inv = 1.0f / sqrtf(ss / (float)I + eps);
    uint16_t *sr = s + (size_t)blockIdx.x * lds;
    for (int j = threadIdx.x; j < I; j += blockDim.x) {
        float v = __fadd_rn(__fmul_rn(tr[j], sw), __fmul_rn(bf2f(er[j]), ew));
        float y = __fadd_rn(__fmul_rn(__fmul_rn(v, inv), ln_w[j]), ln_b[j]);
        sr[j] = f2bf(0.5f * y * (1.0f + erff(y * 0.7071067811865476f)));
    }
}

extern "C" cudaError_t cuda_k_mlp_mix(const float *t, const int32_t *tok, const uint16_t *emb,
                                      const float *ln_w, const float *ln_b, float sw, float ew,
                                      int I, float eps, int n, uint16_t *s, int lds,
                                      cudaStream_t st)
{
    if (n > 0 && I > 0)
        k_mlp_mix<<<n, 256, 0, st>>>(t, tok, emb, ln_w, ln_b, sw, ew, I, eps, s, lds);
    return cudaGetLastError();
}
