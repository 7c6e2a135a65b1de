/* Error reporting for CUDA, cuBLAS and NCCL calls (cuda/check.h). */
#include "cuda/check.h"

int cuda__rt(inf_err *err, cudaError_t e, const char *call, const char *file, int line)
{
    if (e == cudaSuccess)
        return INF_OK;
    int code = INF_ERR_IO;
    if (e == cudaErrorMemoryAllocation)
        code = INF_ERR_NOMEM;
    else if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver)
        code = INF_ERR_UNSUPPORTED;
    return inf_fail(err, code, "cuda: %s failed at %s:%d: %s (%s)", call, file, line,
                    cudaGetErrorString(e), cudaGetErrorName(e));
}

int cuda__blas(inf_err *err, cublasStatus_t s, const char *call, const char *file, int line)
{
    if (s == CUBLAS_STATUS_SUCCESS)
        return INF_OK;
    int code = s == CUBLAS_STATUS_ALLOC_FAILED    ? INF_ERR_NOMEM
               : s == CUBLAS_STATUS_NOT_SUPPORTED ? INF_ERR_UNSUPPORTED
                                                  : INF_ERR_IO;
    return inf_fail(err, code, "cuda: %s failed at %s:%d: %s (%s)", call, file, line,
                    cublasGetStatusString(s), cublasGetStatusName(s));
}

int cuda__nccl(inf_err *err, ncclResult_t r, const char *call, const char *file, int line)
{
    if (r == ncclSuccess)
        return INF_OK;
    return inf_fail(err, INF_ERR_IO, "cuda: %s failed at %s:%d: %s (NCCL %d)", call, file,
                    line, ncclGetErrorString(r), (int)r);
}
