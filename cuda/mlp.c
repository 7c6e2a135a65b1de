#include "cuda/mlp.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/check.h"
#include "cuda/kern.h"

#define MLP_EPS 1e-6f

typedef struct dstage {
    uint16_t *emb, *proj, *head; /* bf16 on the device                    */
    float *ln_w, *ln_b;
} dstage;

typedef struct cuda_mlp {
    int dev, V, E, I, np, rows, lds;
    float sw, ew;
    cudaStream_t st;
    cublasHandle_t blas;
    dstage *stage;               /* [np]; tied stages share allocations    */
    void **allocs;               /* every device allocation, for destroy   */
    int n_allocs;
    uint16_t *s;                 /* [rows][lds] the state, bf16 (lds = max(E, I)) */
    float *t, *logits;           /* [rows][I], [rows][V]                   */
    int32_t *tok;                /* [rows]                                 */
    uint16_t *hs;                /* [rows][lds] host: stage 0's input, bf16 */
} cuda_mlp;

static void mlp_destroy(void *user)
{
    cuda_mlp *c = user;
    if (!c)
        return;
    cudaSetDevice(c->dev);
    for (int i = 0; i < c->n_allocs; i++)
        cudaFree(c->allocs[i]);
    if (c->blas)
        cublasDestroy(c->blas);
    if (c->st)
        cudaStreamDestroy(c->st);
    free(c->allocs);
    free(c->stage);
    free(c->hs);
    free(c);
}

static int dalloc(cuda_mlp *c, size_t bytes, void **p, inf_err *err)
{
    int rc = CUDA_RC(err, cudaMalloc(p, bytes));
    if (!rc)
        c->allocs[c->n_allocs++] = *p;
    return rc;
}

/* n f32 values to the device as bf16 (round to nearest even) or as f32. */
static int upload(cuda_mlp *c, const float *src, size_t n, int bf16, void **dst, inf_err *err)
{
    int rc = dalloc(c, n * (bf16 ? 2 : 4), dst, err);
    if (rc || !bf16)
        return rc ? rc : CUDA_RC(err, cudaMemcpy(*dst, src, n * 4, cudaMemcpyHostToDevice));
    uint16_t *h = malloc(n * 2);
    if (!h)
        return inf_fail(err, INF_ERR_NOMEM, "cuda_mlp: out of host memory for %zu values", n);
    for (size_t i = 0; i < n; i++)
        h[i] = inf_f32_to_bf16(src[i]);
    rc = CUDA_RC(err, cudaMemcpy(*dst, h, n * 2, cudaMemcpyHostToDevice));
    free(h);
    return rc;
}

/* Stage i's device arrays: shared with an earlier stage whose host arrays
 * are the same (tie_weights), else uploaded. */
static int upload_stage(cuda_mlp *c, const spec_mlp_weights *w, int i, inf_err *err)
{
    const spec_mlp_stage_w *h = &w->stage[i];
    dstage *d = &c->stage[i];
    size_t V = (size_t)c->V, I = (size_t)c->I, in = i == 0 ? (size_t)c->E : I;
    int rc = INF_OK;
    int same = -1, same_proj = -1;
    for (int j = 0; j < i; j++) {
        if (w->stage[j].emb == h->emb && w->stage[j].head == h->head &&
            w->stage[j].ln_w == h->ln_w && w->stage[j].ln_b == h->ln_b)
            same = j;
        if (w->stage[j].proj == h->proj)
            same_proj = j;
    }
    if (same >= 0) {
        d->emb = c->stage[same].emb, d->head = c->stage[same].head;
        d->ln_w = c->stage[same].ln_w, d->ln_b = c->stage[same].ln_b;
    } else if (!(rc = upload(c, h->emb, V * I, 1, (void **)&d->emb, err)) &&
               !(rc = upload(c, h->head, V * I, 1, (void **)&d->head, err)) &&
               !(rc = upload(c, h->ln_w, I, 0, (void **)&d->ln_w, err))) {
        rc = upload(c, h->ln_b, I, 0, (void **)&d->ln_b, err);
    }
    if (rc)
        return rc;
    if (same_proj >= 0) {
        d->proj = c->stage[same_proj].proj;
        return INF_OK;
    }
    return upload(c, h->proj, I * in, 1, (void **)&d->proj, err);
}

/* y [n][N] f32 = x [n][K] (row stride ldx, bf16) . w [N][K]^T (bf16). */
static int gemm(cuda_mlp *c, const uint16_t *x, int ldx, const uint16_t *w, int N, int K,
                float *y, int n, inf_err *err)
{
    const float one = 1.0f, zero = 0.0f;
    return CUBLAS_RC(err, cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, N, n, K, &one, w,
                                       CUDA_R_16BF, K, x, CUDA_R_16BF, ldx, &zero, y,
                                       CUDA_R_32F, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

static int mlp_stage(void *user, int i, int n, const float *s0, const int32_t *tok,
                     float *logits, inf_err *err)
{
    cuda_mlp *c = user;
    if (n < 1)
        return INF_OK;
    if (n > c->rows || i < 0 || i >= c->np)
        return inf_fail(err, INF_ERR_INVALID, "cuda_mlp: stage %d of %d rows (at most %d "
                        "stages, %d rows)", i, n, c->np, c->rows);
    const dstage *d = &c->stage[i];
    int rc = CUDA_RC(err, cudaSetDevice(c->dev));
    if (!rc && i == 0) {
        for (size_t r = 0; r < (size_t)n; r++)
            for (size_t k = 0; k < (size_t)c->E; k++)
                c->hs[r * c->lds + k] = inf_f32_to_bf16(s0[r * c->E + k]);
        rc = CUDA_RC(err, cudaMemcpyAsync(c->s, c->hs, (size_t)n * c->lds * 2,
                                          cudaMemcpyHostToDevice, c->st));
    }
    if (!rc)
        rc = CUDA_RC(err, cudaMemcpyAsync(c->tok, tok, (size_t)n * 4, cudaMemcpyHostToDevice,
                                          c->st));
    if (!rc)
        rc = gemm(c, c->s, c->lds, d->proj, c->I, i == 0 ? c->E : c->I, c->t, n, err);
    if (!rc)
        rc = CUDA_RC(err, cuda_k_mlp_mix(c->t, c->tok, d->emb, d->ln_w, d->ln_b, c->sw, c->ew,
                                         c->I, MLP_EPS, n, c->s, c->lds, c->st));
    if (!rc)
        rc = gemm(c, c->s, c->lds, d->head, c->V, c->I, c->logits, n, err);
    if (!rc)
        rc = CUDA_RC(err, cudaMemcpyAsync(logits, c->logits, (size_t)n * c->V * 4,
                                          cudaMemcpyDeviceToHost, c->st));
    if (!rc)
        rc = CUDA_RC(err, cudaStreamSynchronize(c->st));
    return rc;
}

int cuda_mlp_create(int device, const spec_mlp_weights *w, int max_rows, spec_mlp_device *out,
                    inf_err *err)
{
    memset(out, 0, sizeof *out);
    cuda_mlp *c = calloc(1, sizeof *c);
    if (!c)
        return inf_fail(err, INF_ERR_NOMEM, "cuda_mlp: out of memory");
    c->dev = device, c->V = w->vocab, c->E = w->emb_dim, c->I = w->inner, c->np = w->n_predict;
    c->rows = max_rows > 0 ? max_rows : 1;
    c->lds = c->E > c->I ? c->E : c->I;
    c->sw = (float)w->sw, c->ew = (float)w->ew;
    c->stage = calloc((size_t)c->np, sizeof *c->stage);
    c->allocs = calloc((size_t)c->np * 5 + 4, sizeof *c->allocs);
    c->hs = calloc((size_t)c->rows * c->lds, sizeof *c->hs);
    int rc = !c->stage || !c->allocs || !c->hs
                 ? inf_fail(err, INF_ERR_NOMEM, "cuda_mlp: out of memory")
                 : INF_OK;
    if (!rc && !(rc = CUDA_RC(err, cudaSetDevice(device))) &&
        !(rc = CUDA_RC(err, cudaStreamCreateWithFlags(&c->st, cudaStreamNonBlocking))) &&
        !(rc = CUBLAS_RC(err, cublasCreate(&c->blas))))
        rc = CUBLAS_RC(err, cublasSetStream(c->blas, c->st));
    for (int i = 0; i < c->np && !rc; i++)
        rc = upload_stage(c, w, i, err);
    size_t R = (size_t)c->rows;
    if (!rc && !(rc = dalloc(c, R * c->lds * 2, (void **)&c->s, err)) &&
        !(rc = dalloc(c, R * c->I * 4, (void **)&c->t, err)) &&
        !(rc = dalloc(c, R * c->V * 4, (void **)&c->logits, err)))
        rc = dalloc(c, R * 4, (void **)&c->tok, err);
    if (rc) {
        mlp_destroy(c);
        return rc;
    }
    *out = (spec_mlp_device){.user = c, .stage = mlp_stage, .destroy = mlp_destroy};
    return INF_OK;
}
