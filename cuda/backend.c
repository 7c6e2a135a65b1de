/* The decoder forward pass on NVIDIA GPUs over one flattened batch, as the
 * model description (engine/mdesc.h) says.
 *
 * One rank per GPU (tensor_parallel_size of them, 1 by default), all driven
 * from the caller's thread: every launch is asynchronous, so the thread
 * enqueues each phase on every rank in turn and NCCL's grouped all-reduce
 * joins them. With one rank the same code runs and the all-reduces vanish.
 *
 * A step: the host packs the batch's metadata into pinned memory
 * (cuda_plan_batch), one copy moves it to each rank, then the forward runs
 * eagerly, or, for a pure decode step, as the CUDA graph of its bucket; the
 * logits (or the sampled ids) come back through pinned memory. Steps are a
 * ring of two, so the engine may queue the next step before the current one
 * has finished (be_submit / be_wait). */
#include "cuda/backend.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/check.h"
#include "cuda/kern.h"
#include "cuda/plan.h"
#include "cuda/upload.h"

#define MIB(x) ((double)(x) / 1048576.0)

/* One rank's arenas as typed pointers: fixed once the arenas exist. */
typedef struct bufs {
    float *x, *qkv, *delta, *gu, *logits, *part, *gws;
    uint16_t *xn, *att, *act, *fin;
    int8_t *xq;   /* quantized GEMM input, and its scales sx (quant only) */
    float *sx;
    int32_t *tok, *pos, *slot, *seq, *table, *rows, *dec, *tiles, *ids;
    cuda_smp_row *smp;
} bufs;

typedef struct cuda_rank {
    int dev;
    cuda_shard sh;
    cuda_dims d;
    cuda_wlayout wl;
    cuda_alayout al;
    cudaStream_t st;
    cublasHandle_t blas;
    ncclComm_t comm;     /* NULL when tp == 1                            */
    cudaEvent_t done[2]; /* ring slot k's work on this rank has finished  */
    unsigned char *w;    /* weight arena (wl)                            */
    int q4_requant;      /* 4-bit code pieces int4 requantized (upload)  */
    int gemm_wg;         /* cuda_config.gemm_wgmma                       */
    unsigned char *a;    /* activation arena (al)                        */
    uint16_t *kv;        /* [L][K|V][num_blocks][KVl][block_size][hd]     */
    bufs b;              /* pointers into a (bufs_of)                     */
    const float *in_scale; /* [L][CUDA_W_COUNT] static input scales of a
                              compressed-tensors checkpoint, or NULL      */
} cuda_rank;

typedef struct cuda_be {
    be_backend base;
    const model *m;
    cuda_config cfg;
    int tp;
    cuda_rank *rk;         /* [tp]                                       */
    cuda_mlayout ml;       /* the same on every rank                     */
    size_t layer_kv;       /* bf16 elements of one layer's K (or V)      */
    size_t kv_bytes;       /* the whole cache of one rank                */
    size_t total_mem;
    char dev_name[256];
    float eps;
    unsigned feat;           /* mdesc_features of the model              */
    unsigned char *stage[2]; /* pinned per-step metadata (ml), per slot  */
    float *hlogits;          /* pinned [R][V]: one logits step at a time */
    int32_t *hids[2];        /* pinned [R] sampled ids, per slot          */
    uint16_t *hhid[2];       /* pinned [R][D] bf16 final hidden states, per
                                slot (the LM head's input, `fin`)          */
    int hid_slot[2];         /* slot k's step copied its hidden states     */
    cuda_step step[2];
    int head, n_inflight, logits_inflight;
    int prev_rows;           /* rows the newest step sampled; -1: none     */
    int buckets[CUDA_MAX_BUCKETS], nb;
    cudaGraphExec_t graph[CUDA_MAX_BUCKETS];
    int broken;              /* a device error: every later step fails     */
    char broken_msg[sizeof(((inf_err *)0)->msg)];
    float *in_scale;         /* [L][CUDA_W_COUNT]: see cuda_rank           */
} cuda_be;

cuda_config cuda_config_default(void)
{
    cuda_config c = {.device = 0, .gpu_memory_utilization = 0.9, .block_size = 16,
                     .max_tokens = 2048, .max_context = 0, .max_seqs = 256, .max_logits = 0,
                     .tensor_parallel_size = 1, .num_blocks = 0, .cuda_graphs = 1,
                     .batch_invariant = 1};
    return c;
}

cuda_config cuda_config_for(int block_size, int max_tokens, int max_context, int max_seqs)
{
    cuda_config c = cuda_config_default();
    c.block_size = block_size;
    c.max_tokens = max_tokens;
    c.max_context = max_context;
    c.max_seqs = max_seqs;
    return c;
}

int cuda_available(char *why, size_t len)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        snprintf(why, len, "no usable CUDA driver or device (%s: %s)", cudaGetErrorName(e),
                 cudaGetErrorString(e));
        cudaGetLastError(); /* not sticky: clear it */
        return 0;
    }
    if (n < 1) {
        snprintf(why, len, "no CUDA device is visible");
        return 0;
    }
    struct cudaDeviceProp p;
    if ((e = cudaGetDeviceProperties(&p, 0)) != cudaSuccess) {
        snprintf(why, len, "cannot query CUDA device 0 (%s)", cudaGetErrorString(e));
        cudaGetLastError();
        return 0;
    }
    if (p.major < 8) {
        snprintf(why, len, "CUDA device 0 (%s) has compute capability %d.%d; inferd's "
                 "kernels need 8.0 or newer", p.name, p.major, p.minor);
        return 0;
    }
    snprintf(why, len, "%s, %.1f GiB, sm_%d%d, %d device%s", p.name,
             (double)p.totalGlobalMem / (1 << 30), p.major, p.minor, n, n > 1 ? "s" : "");
    return 1;
}

/* ---- buffers ----------------------------------------------------------------- */

static bufs bufs_of(const cuda_be *be, const cuda_rank *r)
{
    unsigned char *a = r->a, *m = r->a + r->al.meta;
    const cuda_mlayout *ml = &be->ml;
    bufs b = {
        .x = (float *)(a + r->al.x), .qkv = (float *)(a + r->al.qkv),
        .delta = (float *)(a + r->al.delta), .gu = (float *)(a + r->al.gu),
        .logits = (float *)(a + r->al.logits), .part = (float *)(a + r->al.part),
        .gws = (float *)(a + r->al.gws),
        .xn = (uint16_t *)(a + r->al.xn), .att = (uint16_t *)(a + r->al.att),
        .act = (uint16_t *)(a + r->al.act), .fin = (uint16_t *)(a + r->al.fin),
        .xq = (int8_t *)(a + r->al.xq), .sx = (float *)(a + r->al.sx),
        .tok = (int32_t *)(m + ml->tokens), .pos = (int32_t *)(m + ml->positions),
        .slot = (int32_t *)(m + ml->slots), .seq = (int32_t *)(m + ml->tok_seq),
        .table = (int32_t *)(m + ml->table), .rows = (int32_t *)(m + ml->rows),
        .dec = (int32_t *)(m + ml->dec), .tiles = (int32_t *)(m + ml->tiles),
        .ids = (int32_t *)(a + r->al.ids), .smp = (cuda_smp_row *)(m + ml->smp),
    };
    return b;
}

static const uint16_t *wmat(const cuda_rank *r, int l, int which)
{
    return (const uint16_t *)(r->w + r->wl.layer0 + (size_t)l * r->wl.layer_stride +
                              r->wl.w[which]);
}

static const float *wnorm(const cuda_rank *r, int l, int ffn)
{
    return (const float *)(r->w + r->wl.layer0 + (size_t)l * r->wl.layer_stride +
                           (ffn ? r->wl.ffn_norm : r->wl.attn_norm));
}

/* Layer l's f32 vector at offset off inside the layer (wl.post_norm, ...). */
static const float *wvec(const cuda_rank *r, int l, size_t off)
{
    return (const float *)(r->w + r->wl.layer0 + (size_t)l * r->wl.layer_stride + off);
}

/* Layer l's RoPE: the global or the local tables, short and long. */
static cuda_rope layer_rope(const cuda_be *be, const cuda_rank *r, int l)
{
    const mdesc *md = &be->m->cfg.desc;
    int k = md->local[l], half = r->d.hd / 2;
    const md_rope *rp = &md->rope[k];
    const double *t = (const double *)(r->w + r->wl.rope) + (size_t)2 * k * half;
    cuda_rope c = {.inv_freq = t, .inv_long = rp->long_from != INT_MAX ? t + half : NULL,
                   .long_from = rp->long_from, .rot = md->rot_dim,
                   .attn_factor = rp->attn_factor};
    return c;
}

/* Gemma's norm of sublayer output delta [T][D] (which = 0 attention,
 * 1 MLP of layer l) before the residual add; nothing for other families. */
static int post_norm(cuda_be *be, cuda_rank *r, int l, int which, int T, inf_err *err)
{
    if (!r->d.sandwich)
        return INF_OK;
    return CUDA_RC(err, cuda_k_rmsnorm_f32(r->b.delta, wvec(r, l, r->wl.post_norm) + which * r->d.D,
                                           r->d.D, be->eps, T, r->st));
}

static int set_dev(const cuda_be *be, const cuda_rank *r, inf_err *err)
{
    return be->tp > 1 ? CUDA_RC(err, cudaSetDevice(r->dev)) : INF_OK;
}

/* ---- the forward pass -------------------------------------------------------- */

/* y[M][ldy] = x[M][ldx] . w[N][K]^T, bf16 in, f32 accumulate and out: our
 * batch-invariant kernel, or cuBLAS (column-major, so y^T = w . x^T with w
 * read transposed), which picks its kernels by M. */
static int gemm(cuda_rank *r, const uint16_t *x, int ldx, const uint16_t *w, int N, int K,
                float *y, int ldy, int M, inf_err *err)
{
    if (r->d.invariant) {
        /* the plan sized gws for the GEMMs it lists; one it missed must not
         * write past the arena (the fake device ignores ws, so only this says) */
        int splits = cuda_plan_gemm_splits(N, K);
        if (splits > 1 && (size_t)splits * M * N * sizeof(float) > r->al.total - r->al.gws)
            return inf_fail(err, INF_ERR_INVALID, "cuda: a %d x %d x %d GEMM in %d K ranges "
                            "does not fit the planned workspace", M, N, K, splits);
        if (r->gemm_wg && M > 64) /* cuda_config.gemm_wgmma: a measurement */
            return CUDA_RC(err, cuda_k_gemm_wg(0, x, ldx, w, N, K, y, ldy, M, splits, r->b.gws,
                                               r->st));
        return CUDA_RC(err, cuda_k_gemm(x, ldx, w, N, K, y, ldy, M, splits, r->b.gws, r->st));
    }
    const float one = 1.0f, zero = 0.0f;
    return CUBLAS_RC(err, cublasGemmEx(r->blas, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &one, w,
                                       CUDA_R_16BF, K, x, CUDA_R_16BF, ldx, &zero, y,
                                       CUDA_R_32F, ldy, CUBLAS_COMPUTE_32F,
                                       CUBLAS_GEMM_DEFAULT));
}

/* A checkpoint's static input scale of layer l's matrix `which`, or 0:
 * its activations are quantized per token. */
static float in_scale(const cuda_rank *r, int l, int which)
{
    return r->in_scale ? r->in_scale[(size_t)l * CUDA_W_COUNT + which] : 0.0f;
}

/* 1 when the kernel before layer l's matrix `which` quantizes its output
 * itself (cuda_k_add_rmsnorm_q, cuda_k_glu_q): a quantized layer whose
 * activations are quantized per token, its input that kernel's whole row
 * (K of width, as on one rank). */
static int fused_quant(const cuda_rank *r, int l, int which, int K)
{
    return r->d.quant && in_scale(r, l, which) == 0.0f && (int)r->wl.w_cols[which] == K;
}

/* The residual add and norm (gain) into xn, and with quantize, xn quantized
 * into xq and sx in the same launch. */
static int norm_in(cuda_be *be, cuda_rank *r, int quantize, const float *delta,
                   const float *gain, int T, inf_err *err)
{
    const bufs *b = &r->b;
    if (quantize)
        return CUDA_RC(err, cuda_k_add_rmsnorm_q(b->x, delta, gain, r->d.D, be->eps, T, b->xn,
                                                 b->xq, r->d.ldq, b->sx, r->st));
    return CUDA_RC(err, cuda_k_add_rmsnorm(b->x, delta, gain, r->d.D, be->eps, NULL, T, b->xn,
                                           r->st));
}

/* Layer l's matrix `which` (CUDA_W_*) applied to x [T][ldx] bf16: y [T][ldy]
 * f32. Quantized matrices take x quantized per row first (cuda/kern.h),
 * unless the norm that wrote x did (quantized: xq and sx already hold it). */
static int layer_gemm(cuda_rank *r, int l, int which, const uint16_t *x, int ldx, float *y,
                      int ldy, int T, int quantized, inf_err *err)
{
    const cuda_wlayout *wl = &r->wl;
    int N = (int)wl->w_rows[which], K = (int)wl->w_cols[which];
    if (!r->d.quant)
        return gemm(r, x, ldx, wmat(r, l, which), N, K, y, ldy, T, err);
    const unsigned char *lw = r->w + wl->layer0 + (size_t)l * wl->layer_stride;
    const bufs *b = &r->b;
    float s = in_scale(r, l, which);
    int rc = quantized ? INF_OK
             : CUDA_RC(err, s > 0.0f ? cuda_k_quant_rows_static(x, ldx, K, T, s, b->xq,
                                                                 r->d.ldq, b->sx, r->st)
                                     : cuda_k_quant_rows(x, ldx, K, T, b->xq, r->d.ldq, b->sx,
                                                         r->st));
    if (rc)
        return rc;
    if (r->d.quant == CUDA_QUANT_INT8)
        return CUDA_RC(err, cuda_k_gemm_i8(b->xq, r->d.ldq, b->sx,
                                           (const int8_t *)(lw + wl->w[which]),
                                           (int)wl->w_ld[which],
                                           (const float *)(lw + wl->w_scale[which]), N, K, y,
                                           ldy, T, r->st));
    return CUDA_RC(err, cuda_k_gemm_i4(b->xq, r->d.ldq, b->sx, lw + wl->w[which],
                                       (const uint16_t *)(lw + wl->w_scale[which]), N,
                                       (int)wl->w_ld[which], y, ldy, T, r->st));
}

/* Sums delta [T][D] over the ranks, in place (row-parallel O and down). */
static int allreduce(cuda_be *be, int T, inf_err *err)
{
    if (be->tp == 1)
        return INF_OK;
    int rc = NCCL_RC(err, ncclGroupStart());
    for (int i = 0; i < be->tp && !rc; i++) {
        cuda_rank *r = &be->rk[i];
        float *delta = r->b.delta;
        rc = NCCL_RC(err, ncclAllReduce(delta, delta, (size_t)T * r->d.D, ncclFloat, ncclSum,
                                        r->comm, r->st));
    }
    int rc2 = NCCL_RC(rc ? NULL : err, ncclGroupEnd());
    return rc ? rc : rc2;
}

static cuda_attn_args attn_args(const cuda_be *be, const cuda_rank *r, int l, const bufs *b,
                                const uint16_t *kc, const uint16_t *vc)
{
    const cuda_dims *d = &r->d;
    const mdesc *md = &be->m->cfg.desc;
    cuda_attn_args a = {
        .q = b->qkv, .ldq = d->qkv, .kc = kc, .vc = vc,
        .out = b->att, .ldo = d->Hl * d->hd,
        .positions = b->pos, .tok_seq = b->seq, .table = b->table, .MB = d->MB,
        .KVl = d->KVl, .G = d->G, .hd = d->hd, .block_size = d->block_size,
        .scale = be->feat & MD_F_ATTN_SCALE ? (float)md->attn_scale : 1.0f / sqrtf((float)d->hd),
        .softcap = (float)md->attn_softcap, .window = mdesc_window(md, l),
        .dec = b->dec, .chunk = d->chunk, .max_splits = d->max_splits, .part = b->part,
        .tiles = b->tiles,
    };
    return a;
}

/* Every token through the tensor-core tiles (batch-invariant), or decode
 * tokens split-K and the others in prefill tiles (cuda_plan_batch made the
 * lists to match). */
static cudaError_t attention(const cuda_dims *d, const cuda_attn_args *a, const cuda_step *s,
                             cudaStream_t st)
{
    if (d->attn_mma)
        return cuda_k_attn_tiles(a, s->n_tiles, s->n_dec, st);
    cudaError_t e = cuda_k_attn_decode(a, s->n_dec, st);
    return e != cudaSuccess ? e : cuda_k_attn_prefill(a, s->n_tiles, st);
}

/* (The previous layer's post-MLP norm,) norm, QKV, biases and QK-norm,
 * RoPE + KV write, attention, O projection (and its bias) into delta. */
static int attn_phase(cuda_be *be, cuda_rank *r, int l, const cuda_step *s, inf_err *err)
{
    const cuda_dims *d = &r->d;
    const bufs *b = &r->b;
    int T = s->T, rc;
    uint16_t *kc = r->kv + (size_t)(2 * l) * be->layer_kv, *vc = kc + be->layer_kv;
    cuda_rope rope = layer_rope(be, r, l);
    cuda_attn_args a = attn_args(be, r, l, b, kc, vc);
    const mdesc *md = &be->m->cfg.desc;
    const float *bias = d->bias ? wvec(r, l, r->wl.bias) : NULL;
    const float *qkg = d->qk_norm ? wvec(r, l, r->wl.qk_gain) : NULL;
    int fq = fused_quant(r, l, CUDA_W_QKV, d->D); /* the norm quantizes QKV's input */
    if ((l > 0 && (rc = post_norm(be, r, l - 1, 1, T, err))) ||
        (rc = norm_in(be, r, fq, l ? b->delta : NULL, wnorm(r, l, 0), T, err)) ||
        (rc = layer_gemm(r, l, CUDA_W_QKV, b->xn, d->D, b->qkv, d->qkv, T, fq, err)) ||
        (rc = CUDA_RC(err, cuda_k_qkv_prep(b->qkv, T, md->bias_qkv ? bias : NULL, qkg, d->Hl,
                                           d->KVl, d->hd, be->eps, r->st))) ||
        (rc = CUDA_RC(err, cuda_k_rope_kv(b->qkv, T, b->pos, b->slot, &rope, d->Hl, d->KVl,
                                          d->hd, kc, vc, d->block_size, r->st))) ||
        (rc = CUDA_RC(err, attention(d, &a, s, r->st))) ||
        (rc = layer_gemm(r, l, CUDA_W_O, b->att, d->Hl * d->hd, b->delta, d->D, T, 0, err)))
        return rc;
    /* o's bias (delta as rows of one "head" of width D): rank 0 only, so the
     * all-reduce over the ranks' partial products adds it once */
    if (!md->bias_o || r->sh.rank != 0)
        return INF_OK;
    return CUDA_RC(err, cuda_k_qkv_prep(b->delta, T, bias + d->qkv, NULL, 1, 0, d->D, be->eps,
                                        r->st));
}

/* Residual add + norm, gate|up, SwiGLU, down projection into delta. */
static int mlp_phase(cuda_be *be, cuda_rank *r, int l, const cuda_step *s, inf_err *err)
{
    const cuda_dims *d = &r->d;
    const bufs *b = &r->b;
    int T = s->T, rc;
    int gelu = be->m->cfg.desc.act == MD_ACT_GELU_TANH;
    int fn = fused_quant(r, l, CUDA_W_GU, d->D);    /* the norm quantizes gate|up's input */
    int fq = fused_quant(r, l, CUDA_W_DOWN, d->Fl); /* the activation quantizes down's input */
    if ((rc = post_norm(be, r, l, 0, T, err)) ||
        (rc = norm_in(be, r, fn, b->delta, wnorm(r, l, 1), T, err)) ||
        (rc = layer_gemm(r, l, CUDA_W_GU, b->xn, d->D, b->gu, 2 * d->Fl, T, fn, err)) ||
        (rc = CUDA_RC(err, fq     ? cuda_k_glu_q(b->gu, d->Fl, T, gelu, b->act, b->xq, r->d.ldq,
                                                 b->sx, r->st)
                           : gelu ? cuda_k_geglu(b->gu, d->Fl, T, b->act, r->st)
                                  : cuda_k_swiglu(b->gu, d->Fl, T, b->act, r->st))))
        return rc;
    return layer_gemm(r, l, CUDA_W_DOWN, b->act, d->Fl, b->delta, d->D, T, fq, err);
}

typedef int (*phase_fn)(cuda_be *be, cuda_rank *r, int l, const cuda_step *s, inf_err *err);

/* One phase of layer l on every rank, then the all-reduce that joins them. */
static int phase_all(cuda_be *be, phase_fn phase, int l, const cuda_step *s, inf_err *err)
{
    int rc;
    for (int i = 0; i < be->tp; i++)
        if ((rc = set_dev(be, &be->rk[i], err)) || (rc = phase(be, &be->rk[i], l, s, err)))
            return rc;
    return allreduce(be, s->T, err);
}

/* The whole forward of step s on every rank, up to the logits: what a CUDA
 * graph captures for a decode bucket, and what runs eagerly otherwise. */
static int enqueue(cuda_be *be, const cuda_step *s, inf_err *err)
{
    int rc;
    for (int i = 0; i < be->tp; i++) {
        cuda_rank *r = &be->rk[i];
        if ((rc = set_dev(be, r, err)) ||
            (rc = CUDA_RC(err, cuda_k_embed((const uint16_t *)(r->w + r->wl.embed), r->d.D,
                                            r->b.tok, r->b.ids, s->T, be->m->embed_scale,
                                            r->b.x, r->st))))
            return rc;
    }
    for (int l = 0; l < be->rk[0].d.L; l++)
        if ((rc = phase_all(be, attn_phase, l, s, err)) ||
            (rc = phase_all(be, mlp_phase, l, s, err)))
            return rc;
    if (s->n_rows == 0)
        return INF_OK;
    cuda_rank *r = &be->rk[0]; /* the lm_head rank */
    const cuda_dims *d = &r->d;
    const bufs *b = &r->b;
    float cap = (float)be->m->cfg.desc.logit_softcap;
    if ((rc = set_dev(be, r, err)) || (rc = post_norm(be, r, d->L - 1, 1, s->T, err)) ||
        (rc = CUDA_RC(err, cuda_k_add_rmsnorm(b->x, b->delta, (const float *)(r->w + r->wl.norm),
                                              d->D, be->eps, s->bucket ? NULL : b->rows,
                                              s->n_rows, b->fin, r->st))) ||
        (rc = gemm(r, b->fin, d->D, (const uint16_t *)(r->w + r->wl.lm_head), d->V, d->D,
                   b->logits, d->V, s->n_rows, err)))
        return rc;
    if (cap <= 0.0f) /* Gemma 2's final soft-cap */
        return INF_OK;
    return CUDA_RC(err, cuda_k_softcap(b->logits, (size_t)s->n_rows * d->V, cap, r->st));
}

/* Runs decode step s from bucket bi's graph. The bucket's first step runs
 * eagerly instead (which also lets cuBLAS do its lazy set-up outside any
 * capture, as PyTorch's warm-up before capture does), then the same work is
 * captured, not run, for the steps after it. */
static int graph_run(cuda_be *be, int bi, const cuda_step *s, inf_err *err)
{
    cuda_rank *r = &be->rk[0];
    if (be->graph[bi])
        return CUDA_RC(err, cudaGraphLaunch(be->graph[bi], r->st));
    int rc = enqueue(be, s, err);
    if (rc)
        return rc;
    cudaGraph_t g = NULL;
    if ((rc = CUDA_RC(err, cudaStreamBeginCapture(r->st, cudaStreamCaptureModeThreadLocal))))
        return rc;
    rc = enqueue(be, s, err);
    int rc2 = CUDA_RC(rc ? NULL : err, cudaStreamEndCapture(r->st, &g));
    if (!rc && !rc2)
        rc2 = CUDA_RC(err, cudaGraphInstantiate(&be->graph[bi], g, 0));
    if (g)
        cudaGraphDestroy(g);
    if (rc || rc2)
        be->graph[bi] = NULL;
    return rc ? rc : rc2;
}

/* ---- the ring of steps --------------------------------------------------------- */

static int broken(cuda_be *be, int rc, const inf_err *err)
{
    be->broken = 1;
    snprintf(be->broken_msg, sizeof be->broken_msg, "%s", err ? err->msg : "unknown");
    return rc;
}

/* be_batch_check, with placeholders for the rows the previous step
 * sampled, plus what only this backend limits. */
static int check_batch(cuda_be *be, const be_batch *b, inf_err *err)
{
    const cuda_dims *d = &be->rk[0].d;
    int n_ph = be->prev_rows > 0 ? be->prev_rows : 0;
    int rc = be_batch_check(&be->base, b, d->T, d->max_ctx, n_ph, err);
    if (rc)
        return rc;
    /* the sampled ids live on rank 0 only: other ranks cannot resolve a
     * placeholder (they would embed token 0) */
    for (int t = 0; be->tp > 1 && n_ph > 0 && t < b->n_tokens; t++)
        if (b->tokens[t] < 0)
            return inf_fail(err, INF_ERR_UNSUPPORTED,
                            "batch: placeholder tokens need tensor_parallel_size 1");
    if (b->n_seqs > d->S)
        return inf_fail(err, INF_ERR_INVALID, "batch: %d sequences (limit max_seqs %d)",
                        b->n_seqs, d->S);
    if (b->n_logits > d->R)
        return inf_fail(err, INF_ERR_INVALID, "batch: %d logit rows (limit max_logits %d)",
                        b->n_logits, d->R);
    return INF_OK;
}

static int cuda_submit(be_backend *base, const be_batch *b, const be_smp_row *smp, inf_err *err)
{
    cuda_be *be = (cuda_be *)base;
    if (be->broken)
        return inf_fail(err, INF_ERR_IO, "cuda: the device failed earlier and this backend "
                        "cannot run more steps (%s)", be->broken_msg);
    if (be->n_inflight == 2)
        return inf_fail(err, INF_ERR_INVALID, "cuda: two steps already in flight; be_wait "
                        "for one first");
    if (!smp && be->logits_inflight)
        return inf_fail(err, INF_ERR_INVALID, "cuda: a step returning logits is already in "
                        "flight; be_wait for it first");
    /* the current device is per thread: the engine's may not be the creator's */
    int rc = CUDA_RC(err, cudaSetDevice(be->rk[0].dev));
    if (rc || (rc = check_batch(be, b, err)))
        return rc;
    int k = be->head, bi = -1;
    if (be->nb > 0 && cuda_plan_is_decode(b))
        bi = cuda_plan_bucket(be->buckets, be->nb, b->n_tokens);
    cuda_step *s = &be->step[k];
    cuda_plan_batch(&be->rk[0].d, &be->ml, b, bi >= 0 ? be->buckets[bi] : 0, smp,
                    be->rk[0].a + be->rk[0].al.meta, be->stage[k], s);
    for (int i = 0; i < be->tp && !rc; i++) {
        cuda_rank *r = &be->rk[i];
        if (!(rc = set_dev(be, r, err)))
            rc = CUDA_RC(err, cudaMemcpyAsync(r->a + r->al.meta, be->stage[k], s->meta_bytes,
                                              cudaMemcpyHostToDevice, r->st));
        /* token masks: only rank 0 samples */
        if (!rc && i == 0 && s->mask_bytes)
            rc = CUDA_RC(err, cudaMemcpyAsync(r->a + r->al.meta + be->ml.masks,
                                              (char *)be->stage[k] + be->ml.masks,
                                              s->mask_bytes, cudaMemcpyHostToDevice, r->st));
    }
    if (!rc)
        rc = bi >= 0 ? graph_run(be, bi, s, err) : enqueue(be, s, err);
    cuda_rank *r0 = &be->rk[0];
    const bufs *b0 = &r0->b;
    if (!rc && s->n_out > 0 && !(rc = set_dev(be, r0, err))) {
        if (smp && !(rc = CUDA_RC(err, cuda_k_sample(b0->logits, r0->d.V, s->n_out, b0->smp,
                                                     b0->ids, r0->st))))
            rc = CUDA_RC(err, cudaMemcpyAsync(be->hids[k], b0->ids,
                                              (size_t)s->n_out * sizeof(int32_t),
                                              cudaMemcpyDeviceToHost, r0->st));
        else if (!smp)
            rc = CUDA_RC(err, cudaMemcpyAsync(be->hlogits, b0->logits,
                                              (size_t)s->n_out * r0->d.V * sizeof(float),
                                              cudaMemcpyDeviceToHost, r0->st));
        /* the final norm's rows are the hidden states (in a decode bucket
         * its first n_out rows: logit row i is token i there) */
        if (!rc && b->want_hidden)
            rc = CUDA_RC(err, cudaMemcpyAsync(be->hhid[k], b0->fin,
                                              (size_t)s->n_out * r0->d.D * sizeof(uint16_t),
                                              cudaMemcpyDeviceToHost, r0->st));
    }
    be->hid_slot[k] = !rc && b->want_hidden && s->n_out > 0;
    for (int i = 0; i < be->tp && !rc; i++)
        if (!(rc = set_dev(be, &be->rk[i], err)))
            rc = CUDA_RC(err, cudaEventRecord(be->rk[i].done[k], be->rk[i].st));
    if (rc) /* work may be half queued and the KV half written: stop here */
        return broken(be, rc, err);
    be->head ^= 1;
    be->n_inflight++;
    be->logits_inflight |= !smp;
    be->prev_rows = smp ? b->n_logits : -1;
    return INF_OK;
}

static int cuda_wait(be_backend *base, const be_out *out, inf_err *err)
{
    cuda_be *be = (cuda_be *)base;
    if (be->n_inflight == 0)
        return inf_fail(err, INF_ERR_INVALID, "cuda: no step in flight");
    int k = be->n_inflight == 2 ? be->head : be->head ^ 1, rc = 0;
    for (int i = 0; i < be->tp && !rc; i++) /* events need no current device */
        rc = CUDA_RC(err, cudaEventSynchronize(be->rk[i].done[k]));
    be->n_inflight--;
    const cuda_step *s = &be->step[k];
    if (!s->sample)
        be->logits_inflight = 0;
    if (rc)
        return broken(be, rc, err);
    if (s->sample && out->ids)
        memcpy(out->ids, be->hids[k], (size_t)s->n_out * sizeof(int32_t));
    if (!s->sample && out->logits)
        memcpy(out->logits, be->hlogits,
               (size_t)s->n_out * be->base.vocab_size * sizeof(float));
    if (be->hid_slot[k] && out->hidden)
        for (size_t i = 0, n = (size_t)s->n_out * be->base.hidden_size; i < n; i++)
            out->hidden[i] = inf_bf16_to_f32(be->hhid[k][i]);
    return INF_OK;
}

/* ---- creation ------------------------------------------------------------------ */

/* cudaMalloc with the out-of-memory message the operator needs. */
static int dev_alloc(cuda_rank *r, void **p, size_t bytes, const char *what, inf_err *err)
{
    cudaError_t e = cudaMalloc(p, bytes);
    if (e == cudaSuccess)
        return INF_OK;
    *p = NULL;
    cudaGetLastError();
    size_t fr = 0, tot = 0;
    cudaMemGetInfo(&fr, &tot);
    if (e == cudaErrorMemoryAllocation)
        return inf_fail(err, INF_ERR_NOMEM,
                        "cuda: out of memory on device %d allocating the %s (%.1f MiB); "
                        "%.1f MiB of %.1f MiB are free", r->dev, what, MIB(bytes), MIB(fr),
                        MIB(tot));
    return CUDA_RC(err, e);
}

static void cuda_destroy(be_backend *base)
{
    cuda_be *be = (cuda_be *)base;
    if (!be)
        return;
    for (int i = 0; i < be->nb; i++)
        if (be->graph[i])
            cudaGraphExecDestroy(be->graph[i]);
    for (int i = 0; be->rk && i < be->tp; i++) {
        cuda_rank *r = &be->rk[i];
        cudaSetDevice(r->dev);
        if (r->st)
            cudaStreamSynchronize(r->st);
        if (r->comm)
            ncclCommDestroy(r->comm);
        if (r->blas)
            cublasDestroy(r->blas);
        for (int k = 0; k < 2; k++)
            if (r->done[k])
                cudaEventDestroy(r->done[k]);
        if (r->st)
            cudaStreamDestroy(r->st);
        cudaFree(r->w);
        cudaFree(r->a);
        cudaFree(r->kv);
    }
    for (int k = 0; k < 2; k++) {
        cudaFreeHost(be->stage[k]);
        cudaFreeHost(be->hids[k]);
        cudaFreeHost(be->hhid[k]);
    }
    free(be->in_scale);
    cudaFreeHost(be->hlogits);
    cudaGetLastError();
    free(be->rk);
    free(be);
}

static const be_ops cuda_ops = {.name = "cuda", .submit = cuda_submit, .wait = cuda_wait,
                                .destroy = cuda_destroy};

/* A compressed-tensors W8A8 checkpoint's static input scales, per layer and
 * device matrix: vLLM's rule (and the CPU's) for linears fused on one
 * input, the largest of theirs (q, k, v; gate, up). */
static int static_scales(cuda_be *be, inf_err *err)
{
    const model *m = be->m;
    int L = m->cfg.n_layers;
    be->in_scale = calloc((size_t)L * CUDA_W_COUNT, sizeof *be->in_scale);
    if (!be->in_scale)
        return inf_fail(err, INF_ERR_NOMEM, "cuda: out of memory");
    for (int l = 0; l < L; l++) {
        const model_layer *ly = &m->layers[l];
        const model_tensor *of[CUDA_W_COUNT][3] = {{&ly->wq, &ly->wk, &ly->wv},
                                                   {&ly->wo, NULL, NULL},
                                                   {&ly->w_gate, &ly->w_up, NULL},
                                                   {&ly->w_down, NULL, NULL}};
        for (int w = 0; w < CUDA_W_COUNT; w++) {
            float s = 0.0f;
            for (int j = 0; j < 3 && of[w][j]; j++)
                s = of[w][j]->q8_in_scale > s ? of[w][j]->q8_in_scale : s;
            be->in_scale[(size_t)l * CUDA_W_COUNT + w] = s;
        }
    }
    for (int i = 0; i < be->tp; i++)
        be->rk[i].in_scale = be->in_scale;
    return INF_OK;
}

/* Stream, cuBLAS, weights and activations of one rank. */
static int rank_init(cuda_be *be, cuda_rank *r, inf_err *err)
{
    int rc;
    if ((rc = CUDA_RC(err, cudaSetDevice(r->dev))) || (rc = CUDA_RC(err, cudaFree(NULL))))
        return rc;
    r->gemm_wg = be->cfg.gemm_wgmma && r->d.invariant; /* before the upload: refused early */
    if (r->gemm_wg && cuda_k_gemm_wg_setup() != cudaSuccess) {
        cudaGetLastError();
        return inf_fail(err, INF_ERR_UNSUPPORTED, "cuda: gemm_wgmma needs a device of compute "
                        "capability 9.0 (Hopper's wgmma)");
    }
    if ((rc = CUDA_RC(err, cudaStreamCreateWithFlags(&r->st, cudaStreamNonBlocking))) ||
        (rc = CUDA_RC(err, cudaEventCreateWithFlags(&r->done[0], cudaEventDisableTiming))) ||
        (rc = CUDA_RC(err, cudaEventCreateWithFlags(&r->done[1], cudaEventDisableTiming))) ||
        (rc = CUBLAS_RC(err, cublasCreate(&r->blas))) ||
        (rc = CUBLAS_RC(err, cublasSetStream(r->blas, r->st))) ||
        (rc = dev_alloc(r, (void **)&r->w, r->wl.total, "weights", err)) ||
        (rc = cuda_upload(be->m, &be->cfg, &r->sh, &r->d, &r->wl, r->w, r->st, &r->q4_requant,
                           err)) ||
        (rc = dev_alloc(r, (void **)&r->a, r->al.total, "activation buffers", err)) ||
        /* on our stream: a non-blocking stream does not wait for cudaMemset's */
        (rc = CUDA_RC(err, cudaMemsetAsync(r->a, 0, r->al.total, r->st))) ||
        (rc = CUBLAS_RC(err, cublasSetWorkspace(r->blas, r->a + r->al.ws, CUDA_BLAS_WORKSPACE))))
        return rc;
    r->b = bufs_of(be, r);
    if ((rc = CUDA_RC(err, cuda_k_attn_setup(r->d.hd))))
        return rc;
    return r->d.invariant ? CUDA_RC(err, cuda_k_gemm_setup()) : INF_OK; /* else cuBLAS */
}

/* Blocks every rank has room for; then the caches themselves. */
static int kv_init(cuda_be *be, inf_err *err)
{
    int blocks = 0, rc;
    for (int i = 0; i < be->tp; i++) {
        cuda_rank *r = &be->rk[i];
        size_t fr = 0, tot = 0;
        if ((rc = CUDA_RC(err, cudaSetDevice(r->dev))) ||
            (rc = CUDA_RC(err, cudaMemGetInfo(&fr, &tot))))
            return rc;
        cuda_kv_in in = {.total = tot, .free = fr, .util = be->cfg.gpu_memory_utilization,
                         .block_bytes = cuda_plan_kv_block_bytes(&r->d) +
                                        be->cfg.extra_block_bytes,
                         .reserve = CUDA_RESERVE + be->cfg.reserve_bytes,
                         .weights = r->wl.total, .acts = r->al.total,
                         .block_size = r->d.block_size, .max_ctx = r->d.max_ctx,
                         .num_blocks = be->cfg.num_blocks};
        int n;
        if ((rc = cuda_plan_kv(&in, &n, err)))
            return rc;
        blocks = i == 0 || n < blocks ? n : blocks;
        be->total_mem = tot;
    }
    const cuda_dims *d = &be->rk[0].d; /* every rank holds as many KV heads */
    be->layer_kv = (size_t)blocks * d->KVl * d->block_size * d->hd;
    be->kv_bytes = (size_t)blocks * cuda_plan_kv_block_bytes(d);
    for (int i = 0; i < be->tp; i++) {
        cuda_rank *r = &be->rk[i];
        if ((rc = CUDA_RC(err, cudaSetDevice(r->dev))) ||
            (rc = dev_alloc(r, (void **)&r->kv, be->kv_bytes, "KV cache", err)) ||
            (rc = CUDA_RC(err, cudaMemsetAsync(r->kv, 0, be->kv_bytes, r->st))) ||
            (rc = CUDA_RC(err, cudaStreamSynchronize(r->st))))
            return rc;
    }
    be->base.num_blocks = blocks;
    return INF_OK;
}

/* Rank `rank`'s shard, dims and weight layout for m under cfg: the host-side
 * plan both cuda_backend_create and cuda_backend_footprint start from. */
static int plan_rank(const model *m, const cuda_config *cfg, int rank, cuda_shard *sh,
                     cuda_dims *d, cuda_wlayout *wl, inf_err *err)
{
    const model_config *c = &m->cfg;
    cuda_limits lim = {.max_tokens = cfg->max_tokens, .max_seqs = cfg->max_seqs,
                       .max_ctx = cfg->max_context > 0 ? cfg->max_context : model_context(c),
                       .block_size = cfg->block_size, .max_logits = cfg->max_logits,
                       .num_blocks = cfg->num_blocks, .invariant = cfg->batch_invariant,
                       .quant = cfg->quant};
    if (lim.quant < CUDA_QUANT_NONE || lim.quant > CUDA_QUANT_INT4)
        return inf_fail(err, INF_ERR_INVALID, "cuda: unknown quantization %d", lim.quant);
    if (m->codes_dropped) /* another backend packed them and the model let them go */
        return inf_fail(err, INF_ERR_INVALID, "cuda: the model's 4-bit codes were released "
                        "after a backend packed them (model_drop_layer_codes)");
    if (model_has_q4(m) && lim.quant != CUDA_QUANT_INT4) /* the upload reads them for int4 */
        return inf_fail(err, INF_ERR_UNSUPPORTED, "cuda: linears bound as 4-bit codes (GPTQ, "
                        "AWQ, GGUF Q4_0) run with --quantization int4; load them dequantized "
                        "otherwise");
    if (model_is_w8a8(m)) { /* a compressed-tensors int8 checkpoint runs as stored */
        if (lim.quant == CUDA_QUANT_INT4)
            return inf_fail(err, INF_ERR_UNSUPPORTED, "cuda: a compressed-tensors int8 "
                            "checkpoint runs with --quantization int8 (or none), not int4");
        lim.quant = CUDA_QUANT_INT8;
    }
    /* every setting of the description has its kernels here (docs/cuda.md says
     * which have not run on a GPU) */
    int rc = mdesc_require(&c->desc, MD_F_ALL, "cuda", err);
    if (!rc)
        rc = cuda_plan_shard(c, cfg->tensor_parallel_size, rank, sh, err);
    if (!rc)
        rc = cuda_plan_dims(c, sh, &lim, d, err);
    if (!rc)
        cuda_plan_weights(d, m->lm_head.data == m->embed.data, wl);
    return rc;
}

int cuda_backend_footprint(const model *m, const cuda_config *cfg, size_t *fixed,
                           size_t *per_block, inf_err *err)
{
    cuda_shard sh;
    cuda_dims d;
    cuda_wlayout wl;
    cuda_mlayout ml;
    cuda_alayout al;
    int rc = plan_rank(m, cfg, 0, &sh, &d, &wl, err);
    if (rc)
        return rc;
    cuda_plan_meta(&d, &ml);
    cuda_plan_acts(&d, &ml, &al);
    if (fixed)
        *fixed = wl.total + al.total;
    *per_block = cuda_plan_kv_block_bytes(&d);
    return INF_OK;
}

/* What needs the devices; sizes and shapes are cuda_plan_dims's. */
static int check_config(const cuda_config *cfg, int *n_dev, inf_err *err)
{
    char why[256];
    if (!cuda_available(why, sizeof why))
        return inf_fail(err, INF_ERR_UNSUPPORTED, "cuda: %s", why);
    int rc = CUDA_RC(err, cudaGetDeviceCount(n_dev));
    if (rc)
        return rc;
    int tp = cfg->tensor_parallel_size;
    if (tp < 1 || cfg->device < 0 || cfg->device + tp > *n_dev)
        return inf_fail(err, INF_ERR_INVALID, "cuda: devices %d..%d requested (device %d, "
                        "tensor_parallel_size %d), %d visible", cfg->device,
                        cfg->device + tp - 1, cfg->device, tp, *n_dev);
    for (int d = cfg->device; cfg->batch_invariant && d < cfg->device + tp; d++) {
        struct cudaDeviceProp p;
        if ((rc = CUDA_RC(err, cudaGetDeviceProperties(&p, d))))
            return rc;
        if (p.sharedMemPerBlockOptin < cuda_k_gemm_smem()) /* e.g. sm_86, sm_89 */
            return inf_fail(err, INF_ERR_UNSUPPORTED, "cuda: device %d (%s) allows %zu bytes of "
                            "shared memory per block; the batch-invariant GEMM needs %zu "
                            "(sm_80 and sm_90 GPUs have room)", d, p.name,
                            (size_t)p.sharedMemPerBlockOptin, cuda_k_gemm_smem());
    }
    return INF_OK;
}

int cuda_backend_create(const model *m, const cuda_config *cfg, be_backend **out, inf_err *err)
{
    *out = NULL;
    const model_config *c = &m->cfg;
    int n_dev = 0, rc = check_config(cfg, &n_dev, err);
    if (rc)
        return rc;
    if (model_has_lazy(m) && !cfg->layer_need)
        return inf_fail(err, INF_ERR_INVALID, "cuda: the model's layer matrices are converted "
                        "one layer at a time (lazy layers): that needs cuda_config.layer_need");
    cuda_be *be = calloc(1, sizeof *be);
    if (!be)
        return inf_fail(err, INF_ERR_NOMEM, "cuda: out of memory");
    be->base.ops = &cuda_ops;
    be->base.vocab_size = c->vocab_size;
    be->base.block_size = cfg->block_size;
    be->base.hidden_size = c->hidden_size;
    be->base.max_inflight = 2;
    be->base.device_sampling = 1;
    be->m = m;
    be->cfg = *cfg;
    be->tp = cfg->tensor_parallel_size;
    be->base.placeholders = be->tp == 1; /* the sampled ids are on rank 0 only */
    be->eps = (float)c->rms_norm_eps;
    be->feat = mdesc_features(&c->desc);
    be->prev_rows = -1;
    be->rk = calloc((size_t)be->tp, sizeof *be->rk);
    if (!be->rk) {
        rc = inf_fail(err, INF_ERR_NOMEM, "cuda: out of memory");
        goto fail;
    }
    for (int i = 0; i < be->tp && !rc; i++) {
        cuda_rank *r = &be->rk[i];
        r->dev = cfg->device + i;
        rc = plan_rank(m, cfg, i, &r->sh, &r->d, &r->wl, err);
    }
    if (!rc && model_is_w8a8(m) && m->layers[0].wq.q8_in_scale > 0)
        rc = static_scales(be, err);
    if (!rc) /* T, S, R and MB: the same on every rank */
        cuda_plan_meta(&be->rk[0].d, &be->ml);
    for (int i = 0; i < be->tp && !rc; i++)
        cuda_plan_acts(&be->rk[i].d, &be->ml, &be->rk[i].al);
    for (int i = 0; i < be->tp && !rc; i++)
        rc = rank_init(be, &be->rk[i], err);
    if (!rc)
        rc = kv_init(be, err);
    if (!rc && be->tp > 1) {
        ncclComm_t comms[64];
        int devs[64];
        if (be->tp > 64) {
            rc = inf_fail(err, INF_ERR_UNSUPPORTED, "cuda: tensor_parallel_size %d (at most 64)",
                          be->tp);
            goto fail;
        }
        for (int i = 0; i < be->tp; i++)
            devs[i] = be->rk[i].dev;
        if (!(rc = NCCL_RC(err, ncclCommInitAll(comms, be->tp, devs))))
            for (int i = 0; i < be->tp; i++)
                be->rk[i].comm = comms[i];
    }
    const cuda_dims *d = &be->rk[0].d;
    if (!rc)
        rc = CUDA_RC(err, cudaSetDevice(be->rk[0].dev));
    for (int k = 0; k < 2 && !rc; k++)
        if (!(rc = CUDA_RC(err, cudaHostAlloc((void **)&be->stage[k], be->ml.total,
                                              cudaHostAllocPortable))))
            if (!(rc = CUDA_RC(err, cudaHostAlloc((void **)&be->hids[k],
                                                  (size_t)d->R * sizeof(int32_t),
                                                  cudaHostAllocPortable))))
                rc = CUDA_RC(err, cudaHostAlloc((void **)&be->hhid[k],
                                                (size_t)d->R * d->D * sizeof(uint16_t),
                                                cudaHostAllocPortable));
    if (!rc)
        rc = CUDA_RC(err, cudaHostAlloc((void **)&be->hlogits,
                                        (size_t)d->R * d->V * sizeof(float),
                                        cudaHostAllocPortable));
    if (rc)
        goto fail;
    struct cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, be->rk[0].dev) == cudaSuccess)
        snprintf(be->dev_name, sizeof be->dev_name, "%s", p.name);
    /* multi-GPU capture from one thread is not attempted: tp > 1 runs eagerly */
    if (cfg->cuda_graphs && be->tp == 1)
        be->nb = cuda_plan_buckets(d->S, be->buckets, CUDA_MAX_BUCKETS);
    *out = &be->base;
    return INF_OK;
fail:
    cuda_destroy(&be->base);
    return rc;
}

void cuda_backend_info(const be_backend *base, cuda_info *o)
{
    const cuda_be *be = (const cuda_be *)base;
    memset(o, 0, sizeof *o);
    snprintf(o->device, sizeof o->device, "%s", be->dev_name);
    o->tp = be->tp;
    o->total = be->total_mem;
    o->weights = be->rk[0].wl.total;
    o->acts = be->rk[0].al.total;
    o->kv = be->kv_bytes;
    o->num_blocks = be->base.num_blocks;
    o->n_buckets = be->nb;
    o->q4_requant = be->rk[0].q4_requant;
}
