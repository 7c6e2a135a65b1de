/* cuda__ checks: every CUDA runtime, cuBLAS and NCCL call goes through one of
 * these, which turn a failure into an inf_err naming the call, the file and
 * the line, and return the error code (never exit). Codes: out of memory is
 * INF_ERR_NOMEM, no driver or device INF_ERR_UNSUPPORTED, anything else
 * INF_ERR_IO (the device failed the work). */
#ifndef INFERD_CUDA_CHECK_H
#define INFERD_CUDA_CHECK_H

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include "engine/common.h"

/* 0 when the call succeeded; else the code, with err filled in. */
int cuda__rt(inf_err *err, cudaError_t e, const char *call, const char *file, int line);
int cuda__blas(inf_err *err, cublasStatus_t s, const char *call, const char *file, int line);
int cuda__nccl(inf_err *err, ncclResult_t r, const char *call, const char *file, int line);

/* For `if ((rc = CUDA_RC(err, cudaMalloc(...)))) goto fail;` */
#define CUDA_RC(err, call) cuda__rt((err), (call), #call, __FILE__, __LINE__)
#define CUBLAS_RC(err, call) cuda__blas((err), (call), #call, __FILE__, __LINE__)
#define NCCL_RC(err, call) cuda__nccl((err), (call), #call, __FILE__, __LINE__)

#endif
