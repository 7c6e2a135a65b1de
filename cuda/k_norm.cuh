// One row's residual add and RMSNorm, shared by the kernels that normalize a
// row (cuda/k_elem.cu's cuda_k_add_rmsnorm, cuda/k_quant_rows.cu's fused
// norm and quantization), so the arithmetic is written once and their bits
// agree. Included by .cu files only; a block per row.
#ifndef INFERD_CUDA_K_NORM_CUH
#define INFERD_CUDA_K_NORM_CUH

#include "cuda/dev.cuh"

// xr += dr (when dr; written back unless keep, where the output adds it
// again), then the row's 1 / sqrt(mean(x^2) + eps). red: 32 floats of
// shared scratch.
static __device__ __forceinline__ float rms_row(float *xr, const float *dr, int keep, int D,
                                                float eps, float *red)
{
    float ss = 0.0f;
    for (int j = threadIdx.x; j < D; j += blockDim.x) {
        float v = xr[j];
        if (dr) {
            v = __fadd_rn(v, dr[j]);
            if (!keep)
                xr[j] = v; // each thread rereads only what it wrote
        }
        ss = __fmaf_rn(v, v, ss);
    }
    ss = block_sum(ss, red);
    return 1.0f / sqrtf(ss / (float)D + eps);
}

// Element j of the normalized row, as bf16.
static __device__ __forceinline__ uint16_t rms_out(const float *xr, const float *dr, int keep,
                                                   const float *gain, int j, float inv)
{
    float v = keep ? __fadd_rn(xr[j], dr[j]) : xr[j];
    return f2bf(__fmul_rn(__fmul_rn(v, inv), gain[j]));
}

#endif
