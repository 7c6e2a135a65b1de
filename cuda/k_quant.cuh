// What cuda/k_quant.cu and cuda/k_quant_mma.cu share (included by .cu files
// only): int4 unpacking, and the tensor-core kernels' launchers, which
// k_quant.cu's cuda_k_gemm_i8_with / _i4_with call for CUDA_QK_MMA after
// checking the arguments as for every kernel.
#ifndef INFERD_CUDA_K_QUANT_CUH
#define INFERD_CUDA_K_QUANT_CUH

#include <cuda_runtime.h>
#include <stdint.h>

// One Q4_0 group's 16 bytes as signed weights q = nibble - 8: lo holds
// k = 4j..4j+3 of the group (low nibbles of bytes 4j..4j+3), hi holds
// k = 16 + 4j.. (their high nibbles). __vsub4 subtracts per byte with
// wrap-around, so 0..15 - 8 becomes the signed bytes -8..7.
static __device__ __forceinline__ void unpack_q4(int4 v, int4 &lo, int4 &hi)
{
    const unsigned m = 0x0F0F0F0Fu, e = 0x08080808u;
    unsigned w[4] = {(unsigned)v.x, (unsigned)v.y, (unsigned)v.z, (unsigned)v.w};
    lo = make_int4((int)__vsub4(w[0] & m, e), (int)__vsub4(w[1] & m, e),
                   (int)__vsub4(w[2] & m, e), (int)__vsub4(w[3] & m, e));
    hi = make_int4((int)__vsub4((w[0] >> 4) & m, e), (int)__vsub4((w[1] >> 4) & m, e),
                   (int)__vsub4((w[2] >> 4) & m, e), (int)__vsub4((w[3] >> 4) & m, e));
}

cudaError_t cuda_k_quant__i8_mma(const int8_t *q, int ldq, const float *sx, const int8_t *w,
                                 int ldw, const float *sw, int N, int K, float *y, int ldy,
                                 int M, cudaStream_t st);
cudaError_t cuda_k_quant__i4_mma(const int8_t *q, int ldq, const float *sx, const uint8_t *w4,
                                 const uint16_t *d, int N, int G, float *y, int ldy, int M,
                                 cudaStream_t st);

#endif
