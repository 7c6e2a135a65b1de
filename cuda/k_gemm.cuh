// Between cuda/k_gemm.cu and cuda/k_gemm_wg.cu (included by .cu files only).
#ifndef INFERD_CUDA_K_GEMM_CUH
#define INFERD_CUDA_K_GEMM_CUH

#include <cuda_runtime_api.h>

// y[m][n] = part[0][m][n] + part[1][m][n] + ... (splits of them, [M][N]
// each), in that order: the K ranges' sum of the batch-invariant GEMMs.
cudaError_t cuda_k_gemm_sum(const float *part, int splits, int M, int N, float *y, int ldy,
                            cudaStream_t st);

#endif
