/* The fake CUDA runtime, cuBLAS and NCCL (cuda/fake/fake.h). Test-only: its
 * state is process-wide, as the libraries it replaces keep theirs. */
#include "cuda/fake/fake.h"

#include <cublas_v2.h>
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/common.h"

#define FAKE_TOTAL ((size_t)4 << 30)     /* device memory it claims    */
#define FAKE_CONTEXT ((size_t)256 << 20) /* "in use" before any alloc  */
#define FAKE_HDR 256                     /* size header; keeps 256-byte alignment */

typedef struct fake_op {
    fake_fn fn;
    void *args;
} fake_op;

typedef struct fake_graph {
    fake_op *ops;
    int n, cap;
} fake_graph;

typedef struct fake_ar { /* an all-reduce waiting for its group to end */
    const float *send;
    float *recv;
    size_t count;
} fake_ar;

static struct {
    size_t used;
    fake_graph *capturing;
    int group;
    fake_ar pending[64];
    int n_pending;
} fk;

static int fake_devices(void)
{
    const char *e = getenv("INFERD_FAKE_DEVICES");
    int n = e ? atoi(e) : 2;
    return n < 0 ? 0 : n;
}

static cudaError_t record(fake_graph *g, fake_fn fn, const void *args, size_t n)
{
    if (g->n == g->cap) {
        int cap = g->cap ? 2 * g->cap : 64;
        fake_op *ops = realloc(g->ops, (size_t)cap * sizeof *ops);
        if (!ops)
            return cudaErrorMemoryAllocation;
        g->ops = ops;
        g->cap = cap;
    }
    void *copy = malloc(n ? n : 1);
    if (!copy)
        return cudaErrorMemoryAllocation;
    memcpy(copy, args, n);
    g->ops[g->n].fn = fn;
    g->ops[g->n].args = copy;
    g->n++;
    return cudaSuccess;
}

cudaError_t fake_launch(fake_fn fn, const void *args, size_t n)
{
    if (fk.capturing)
        return record(fk.capturing, fn, args, n);
    fn(args);
    return cudaSuccess;
}

static void graph_free(fake_graph *g)
{
    if (!g)
        return;
    for (int i = 0; i < g->n; i++)
        free(g->ops[i].args);
    free(g->ops);
    free(g);
}

/* ---- runtime ------------------------------------------------------------------ */

const char *cudaGetErrorString(cudaError_t e)
{
    return e == cudaSuccess ? "no error" : e == cudaErrorMemoryAllocation ? "out of memory"
                                                                          : "fake error";
}

const char *cudaGetErrorName(cudaError_t e)
{
    return e == cudaSuccess ? "cudaSuccess" : e == cudaErrorMemoryAllocation
                                                  ? "cudaErrorMemoryAllocation"
                                                  : "cudaErrorFake";
}

cudaError_t cudaGetLastError(void) { return cudaSuccess; }

cudaError_t cudaGetDeviceCount(int *n)
{
    *n = fake_devices();
    return *n ? cudaSuccess : cudaErrorNoDevice;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int dev)
{
    if (dev < 0 || dev >= fake_devices())
        return cudaErrorInvalidDevice;
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "inferd fake device (host memory, reference kernels)");
    p->major = 9;
    p->minor = 0;
    p->totalGlobalMem = FAKE_TOTAL;
    /* an H100's; INFERD_FAKE_SMEM plays a smaller GPU (tests/test_cuda.c) */
    const char *smem = getenv("INFERD_FAKE_SMEM");
    p->sharedMemPerBlockOptin = smem ? (size_t)atol(smem) : 227 * 1024;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int dev)
{
    return dev >= 0 && dev < fake_devices() ? cudaSuccess : cudaErrorInvalidDevice;
}

cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }

cudaError_t cudaMalloc(void **p, size_t n)
{
    *p = NULL;
    if (fk.used + n > FAKE_TOTAL - FAKE_CONTEXT)
        return cudaErrorMemoryAllocation;
    size_t bytes = (n + 2 * FAKE_HDR - 1) / FAKE_HDR * FAKE_HDR;
    unsigned char *b = aligned_alloc(FAKE_HDR, bytes);
    if (!b)
        return cudaErrorMemoryAllocation;
    memset(b + FAKE_HDR, 0xa5, n); /* fresh device memory is garbage */
    memcpy(b, &n, sizeof n);
    fk.used += n;
    *p = b + FAKE_HDR;
    return cudaSuccess;
}

cudaError_t cudaFree(void *p)
{
    if (!p)
        return cudaSuccess;
    unsigned char *b = (unsigned char *)p - FAKE_HDR;
    size_t n;
    memcpy(&n, b, sizeof n);
    fk.used -= n;
    free(b);
    return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *free_, size_t *total)
{
    *total = FAKE_TOTAL;
    *free_ = FAKE_TOTAL - FAKE_CONTEXT - fk.used;
    return cudaSuccess;
}

cudaError_t cudaHostAlloc(void **p, size_t n, unsigned int flags)
{
    (void)flags;
    *p = malloc(n ? n : 1);
    return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaFreeHost(void *p)
{
    free(p);
    return cudaSuccess;
}

cudaError_t cudaMemset(void *p, int v, size_t n)
{
    memset(p, v, n);
    return cudaSuccess;
}

typedef struct set_args {
    void *p;
    int v;
    size_t n;
} set_args;

static void set_run(const void *p)
{
    const set_args *a = p;
    memset(a->p, a->v, a->n);
}

cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t st)
{
    (void)st;
    set_args a = {.p = p, .v = v, .n = n};
    return fake_launch(set_run, &a, sizeof a);
}

typedef struct copy_args {
    void *dst;
    const void *src;
    size_t n;
} copy_args;

static void copy_run(const void *p)
{
    const copy_args *a = p;
    memcpy(a->dst, a->src, a->n);
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind)
{
    (void)kind;
    memcpy(dst, src, n);
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
                            cudaStream_t st)
{
    (void)kind;
    (void)st;
    copy_args a = {.dst = dst, .src = src, .n = n};
    return fake_launch(copy_run, &a, sizeof a);
}

/* Streams and events: distinct non-null handles; all work is already done. */
static void *handle(void) { return malloc(1); }

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags)
{
    (void)flags;
    *s = handle();
    return *s ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    free(s);
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    (void)s;
    return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int flags)
{
    (void)flags;
    *e = handle();
    return *e ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    free(e);
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
    (void)e;
    (void)s;
    return fk.capturing ? cudaErrorStreamCaptureUnsupported : cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
    (void)e;
    return cudaSuccess;
}

/* ---- graphs ------------------------------------------------------------------- */

cudaError_t cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode mode)
{
    (void)s;
    (void)mode;
    if (fk.capturing)
        return cudaErrorIllegalState;
    fk.capturing = calloc(1, sizeof *fk.capturing);
    return fk.capturing ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g)
{
    (void)s;
    *g = (cudaGraph_t)fk.capturing;
    fk.capturing = NULL;
    return *g ? cudaSuccess : cudaErrorIllegalState;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph,
                                 unsigned long long flags)
{
    (void)flags;
    fake_graph *g = (fake_graph *)graph, *x = calloc(1, sizeof *x);
    if (!x || !(x->ops = malloc((size_t)(g->n ? g->n : 1) * sizeof *x->ops))) {
        free(x);
        return cudaErrorMemoryAllocation;
    }
    for (int i = 0; i < g->n; i++) { /* the exec takes the ops' arguments over */
        x->ops[i] = g->ops[i];
        g->ops[i].args = NULL;
    }
    x->n = x->cap = g->n;
    *exec = (cudaGraphExec_t)x;
    return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t g)
{
    graph_free((fake_graph *)g);
    return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t x)
{
    graph_free((fake_graph *)x);
    return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t x, cudaStream_t s)
{
    (void)s;
    const fake_graph *g = (const fake_graph *)x;
    for (int i = 0; i < g->n; i++)
        g->ops[i].fn(g->ops[i].args);
    return cudaSuccess;
}

/* ---- cuBLAS --------------------------------------------------------------------- */

cublasStatus_t cublasCreate_v2(cublasHandle_t *h)
{
    *h = handle();
    return *h ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t h)
{
    free(h);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t s)
{
    (void)h;
    (void)s;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t h, void *w, size_t n)
{
    (void)h;
    (void)w;
    (void)n;
    return CUBLAS_STATUS_SUCCESS;
}

const char *cublasGetStatusString(cublasStatus_t s)
{
    return s == CUBLAS_STATUS_SUCCESS ? "success" : "fake cuBLAS failure";
}

const char *cublasGetStatusName(cublasStatus_t s)
{
    return s == CUBLAS_STATUS_SUCCESS ? "CUBLAS_STATUS_SUCCESS" : "CUBLAS_STATUS_FAKE";
}

typedef struct gemm_args {
    int ta, tb, m, n, k, lda, ldb, ldc;
    float alpha, beta;
    const void *A, *B;
    cudaDataType at, bt;
    float *C;
} gemm_args;

static float elem(const void *p, cudaDataType t, size_t i)
{
    return t == CUDA_R_16BF ? inf_bf16_to_f32(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

/* Column-major C = alpha op(A) op(B) + beta C, accumulated in double. */
static void gemm_run(const void *p)
{
    const gemm_args *a = p;
    for (int j = 0; j < a->n; j++)
        for (int i = 0; i < a->m; i++) {
            double s = 0;
            for (int l = 0; l < a->k; l++) {
                size_t ai = a->ta ? (size_t)l + (size_t)i * a->lda : (size_t)i + (size_t)l * a->lda;
                size_t bi = a->tb ? (size_t)j + (size_t)l * a->ldb : (size_t)l + (size_t)j * a->ldb;
                s += (double)elem(a->A, a->at, ai) * elem(a->B, a->bt, bi);
            }
            float *c = a->C + (size_t)i + (size_t)j * a->ldc;
            *c = (float)(a->alpha * s + (a->beta != 0.0f ? a->beta * *c : 0.0));
        }
}

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t transa, cublasOperation_t transb,
                            int m, int n, int k, const void *alpha, const void *A,
                            cudaDataType Atype, int lda, const void *B, cudaDataType Btype,
                            int ldb, const void *beta, void *C, cudaDataType Ctype, int ldc,
                            cublasComputeType_t computeType, cublasGemmAlgo_t algo)
{
    (void)h;
    (void)algo;
    if (Ctype != CUDA_R_32F || computeType != CUBLAS_COMPUTE_32F ||
        (Atype != CUDA_R_16BF && Atype != CUDA_R_32F) ||
        (Btype != CUDA_R_16BF && Btype != CUDA_R_32F))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (m < 0 || n < 0 || k < 0 || lda < (transa == CUBLAS_OP_N ? m : k) ||
        ldb < (transb == CUBLAS_OP_N ? k : n) || ldc < m)
        return CUBLAS_STATUS_INVALID_VALUE;
    gemm_args a = {.ta = transa != CUBLAS_OP_N, .tb = transb != CUBLAS_OP_N, .m = m, .n = n,
                   .k = k, .lda = lda, .ldb = ldb, .ldc = ldc,
                   .alpha = *(const float *)alpha, .beta = *(const float *)beta, .A = A,
                   .B = B, .at = Atype, .bt = Btype, .C = C};
    return fake_launch(gemm_run, &a, sizeof a) == cudaSuccess ? CUBLAS_STATUS_SUCCESS
                                                              : CUBLAS_STATUS_ALLOC_FAILED;
}

/* ---- NCCL ------------------------------------------------------------------------- */

const char *ncclGetErrorString(ncclResult_t r)
{
    return r == ncclSuccess ? "no error" : "fake NCCL failure";
}

ncclResult_t ncclCommInitAll(ncclComm_t *comms, int n, const int *devs)
{
    (void)devs;
    for (int i = 0; i < n; i++)
        comms[i] = handle();
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t c)
{
    free(c);
    return ncclSuccess;
}

ncclResult_t ncclGroupStart(void)
{
    fk.group++;
    return ncclSuccess;
}

/* At the end of the outermost group, every pending buffer gets the sum of
 * all of them: the ranks' all-reduce. */
ncclResult_t ncclGroupEnd(void)
{
    if (fk.group < 1)
        return ncclInvalidUsage;
    if (--fk.group > 0 || fk.n_pending == 0)
        return ncclSuccess;
    size_t n = fk.pending[0].count;
    double *sum = calloc(n, sizeof *sum);
    if (!sum)
        return ncclSystemError;
    for (int r = 0; r < fk.n_pending; r++)
        for (size_t i = 0; i < n; i++)
            sum[i] += fk.pending[r].send[i];
    for (int r = 0; r < fk.n_pending; r++)
        for (size_t i = 0; i < n; i++)
            fk.pending[r].recv[i] = (float)sum[i];
    free(sum);
    fk.n_pending = 0;
    return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t t,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t st)
{
    (void)comm;
    (void)st;
    if (t != ncclFloat || op != ncclSum || fk.n_pending == 64 || fk.capturing ||
        (fk.n_pending > 0 && fk.pending[0].count != count))
        return ncclInvalidUsage;
    fake_ar a = {.send = send, .recv = recv, .count = count};
    fk.pending[fk.n_pending++] = a;
    if (fk.group == 0) { /* outside a group: a single rank */
        fk.group = 1;
        return ncclGroupEnd();
    }
    return ncclSuccess;
}
