// The gated activations of one element, shared by cuda/k_elem.cu's
// cuda_k_swiglu / cuda_k_geglu and cuda/k_quant_rows.cu's fused kernel that
// quantizes their output, so the arithmetic is written once and their bits
// agree. Included by .cu files only.
#ifndef INFERD_CUDA_K_ACT_CUH
#define INFERD_CUDA_K_ACT_CUH

#include "cuda/dev.cuh"

// bf16(g / (1 + exp(-g)) * u): SwiGLU
static __device__ __forceinline__ uint16_t swiglu_of(float g, float u)
{
    return f2bf(__fmul_rn(g / __fadd_rn(1.0f, expf(-g)), u));
}

// bf16(0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))) * u): Gemma's GeGLU
static __device__ __forceinline__ uint16_t geglu_of(float g, float u)
{
    float cube = __fmul_rn(__fmul_rn(g, g), g);
    float inner = __fmul_rn(0.7978845608028654f, __fadd_rn(g, __fmul_rn(0.044715f, cube)));
    float a = __fmul_rn(__fmul_rn(0.5f, g), __fadd_rn(1.0f, tanhf(inner)));
    return f2bf(__fmul_rn(a, u));
}

#endif
