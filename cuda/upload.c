/* The weight upload (cuda/upload.h): pinned double-buffered staging, the
 * host's conversion to bf16 or quantization, one copy per chunk. */
#include "cuda/upload.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda/backend.h"
#include "cuda/check.h"
#include "engine/qdef.h"

#define STAGE_BYTES ((size_t)16 << 20) /* upload staging, two halves */

/* Pinned double-buffered staging: the host converts the next chunk while
 * the previous one is copied. */
typedef struct uploader {
    unsigned char *buf[2];
    cudaEvent_t ev[2];
    int k;
    cudaStream_t st;
} uploader;

static int up_begin(uploader *u, inf_err *err)
{
    int rc = CUDA_RC(err, cudaEventSynchronize(u->ev[u->k]));
    return rc;
}

static int up_end(uploader *u, void *dst, size_t bytes, inf_err *err)
{
    int rc = CUDA_RC(err, cudaMemcpyAsync(dst, u->buf[u->k], bytes, cudaMemcpyHostToDevice,
                                          u->st));
    if (!rc)
        rc = CUDA_RC(err, cudaEventRecord(u->ev[u->k], u->st));
    u->k ^= 1;
    return rc;
}

/* Pieces stacked by rows into dst, as bf16, a chunk of rows at a time. */
static int up_pieces(uploader *u, unsigned char *dst, const cuda_piece *p, int n, inf_err *err)
{
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        size_t row = (size_t)p[i].nc * 2;
        int64_t step = (int64_t)(STAGE_BYTES / row);
        if (step < 1)
            return inf_fail(err, INF_ERR_UNSUPPORTED, "cuda: a row of %s is wider than the "
                            "upload staging buffer", p[i].w->name);
        for (int64_t r0 = 0; r0 < p[i].nr && !rc; r0 += step) {
            int64_t nr = p[i].nr - r0 < step ? p[i].nr - r0 : step;
            if ((rc = up_begin(u, err)))
                break;
            cuda_plan_pack(&p[i], r0, nr, (uint16_t *)u->buf[u->k]);
            rc = up_end(u, dst, (size_t)nr * row, err);
            dst += (size_t)nr * row;
        }
    }
    return rc;
}

/* bytes of host memory to dst through the staging buffers. */
static int up_host(uploader *u, unsigned char *dst, const void *src, size_t bytes, inf_err *err)
{
    int rc = 0;
    for (size_t o = 0; o < bytes && !rc; o += STAGE_BYTES) {
        size_t n = bytes - o < STAGE_BYTES ? bytes - o : STAGE_BYTES;
        if (!(rc = up_begin(u, err))) {
            memcpy(u->buf[u->k], (const char *)src + o, n);
            rc = up_end(u, dst + o, n, err);
        }
    }
    return rc;
}

/* Row r of piece p as f32 (its columns c0..c0+nc) into f. */
static void piece_row_f32(const cuda_piece *p, int64_t r, float *f)
{
    const model_tensor *t = p->w;
    size_t es = inf_dtype_size(t->dtype);
    cuda_plan_to_f32((const char *)t->data + ((size_t)(p->r0 + r) * t->cols + p->c0) * es,
                     t->dtype, (size_t)p->nc, f);
}

/* Group g's 32 codes (q + 8, 8 past the row) in the GPU's int4 byte order
 * (cuda/kern.h: k and k + 16 share a byte). */
static void q4_put(unsigned char *out, int g, const uint8_t u[QDEF_Q4_GROUP])
{
    for (int i = 0; i < 16; i++)
        out[(size_t)g * 16 + i] = (uint8_t)(u[i] | u[i + 16] << 4);
}

/* The K values in f as ld groups of int4 by engine/qdef's rules, as the CPU
 * backend quantizes. */
static void q4_quantize(const float *f, int K, int ld, unsigned char *out, uint16_t *s16)
{
    for (int g = 0; g < ld; g++) {
        uint8_t u[QDEF_Q4_GROUP];
        int k0 = g * QDEF_Q4_GROUP;
        qdef_q4_group(f + k0, K - k0 < QDEF_Q4_GROUP ? K - k0 : QDEF_Q4_GROUP, u, &s16[g]);
        q4_put(out, g, u);
    }
}

/* 1 when the GPU's int4 holds piece p of a matrix bound as 4-bit codes as
 * stored: every group whole and symmetric (zero 8: a GGUF Q4_0 file, GPTQ
 * with sym), its inputs in order (not desc_act's sorted ones). */
static int q4_as_stored(const cuda_piece *p, int ld)
{
    const model_tensor *t = p->w;
    int64_t B = (t->cols + QDEF_Q4_GROUP - 1) / QDEF_Q4_GROUP, b0 = p->c0 / QDEF_Q4_GROUP;
    if (t->q4_perm || p->c0 % QDEF_Q4_GROUP || p->nc != (int64_t)ld * QDEF_Q4_GROUP)
        return 0;
    for (int64_t n = p->r0; n < p->r0 + p->nr; n++)
        for (int g = 0; g < ld; g++)
            if (t->q4_zero[n * B + b0 + g] != 8)
                return 0;
    return 1;
}

/* Row n of a matrix bound as 4-bit codes (GPTQ, AWQ, a GGUF Q4_0 file),
 * its columns c0..c0+K: as stored (q4_as_stored), the same integers and
 * scales the CPU's int4 runs; else through f32, scale * (u - zero) as the
 * loader would dequantize it (exact: an f16 times a small integer),
 * requantized. */
static void q4_row(const model_tensor *t, int64_t n, int64_t c0, int K, int ld, int stored,
                   float *f, unsigned char *out, uint16_t *s16)
{
    int64_t B = (t->cols + QDEF_Q4_GROUP - 1) / QDEF_Q4_GROUP, b0 = c0 / QDEF_Q4_GROUP;
    const uint16_t *sc = t->q4_scale + n * B;
    const uint8_t *z = t->q4_zero + n * B, *codes = t->q4 + n * (t->cols / 2);
    uint8_t u[QDEF_Q4_GROUP];
    if (stored) {
        for (int g = 0; g < ld; g++) {
            qdef_q4_codes(codes, t->cols, b0 + g, 8, u);
            q4_put(out, g, u);
            s16[g] = sc[b0 + g];
        }
        return;
    }
    for (int64_t b = 0; b < B; b++) { /* code j of group b stands for input perm[j] */
        qdef_q4_codes(codes, t->cols, b, 8, u);
        for (int i = 0; i < QDEF_Q4_GROUP && b * QDEF_Q4_GROUP + i < t->cols; i++) {
            int64_t j = b * QDEF_Q4_GROUP + i, in = t->q4_perm ? t->q4_perm[j] : j;
            if (in >= c0 && in < c0 + K)
                f[in - c0] = inf_f16_to_f32(sc[b]) * (float)(u[i] - z[b]);
        }
    }
    q4_quantize(f, K, ld, out, s16);
}

/* One row of a quantized matrix: int8 (ld bytes, zeros past K, its scale
 * in s[0]) or int4 (ld groups of 16 bytes, their f16 scales in s16), by
 * engine/qdef's rules, as the CPU backend quantizes; a compressed-tensors
 * int8 row, or 4-bit codes the GPU's int4 holds, as stored. */
static void quant_row(const cuda_piece *p, int64_t r, int quant, int ld, int stored, float *f,
                      unsigned char *out, float *s, uint16_t *s16)
{
    const model_tensor *t = p->w;
    int K = (int)p->nc;
    if (quant == CUDA_QUANT_INT8) {
        memset(out, 0, (size_t)ld);
        if (t->q8) {
            memcpy(out, t->q8 + (size_t)(p->r0 + r) * t->cols + p->c0, (size_t)K);
            *s = t->q8_scale[p->r0 + r];
        } else {
            piece_row_f32(p, r, f);
            *s = qdef_i8(f, K, (int8_t *)out);
        }
        return;
    }
    if (t->q4) {
        q4_row(t, p->r0 + r, p->c0, K, ld, stored, f, out, s16);
        return;
    }
    piece_row_f32(p, r, f);
    q4_quantize(f, K, ld, out, s16);
}

/* Host threads that quantize one staging chunk: engine/qdef.c is scalar,
 * so one thread would hold up the start of a large model (not timed: no
 * GPU was lent to measure the upload). */
#define QUANT_THREADS 16

/* Rows [r0, r0 + nr) of piece p into out (row bytes each), their scales into
 * sc from row index done on: a contiguous slice of the rows per thread. */
typedef struct qchunk {
    const cuda_piece *p;
    int64_t r0, nr;
    int quant, ld, nt, stored;
    size_t row, sb, done;
    float *f; /* [nt][nc] one widened row per thread */
    unsigned char *out, *sc;
} qchunk;

typedef struct qpart {
    const qchunk *c;
    int t;
} qpart;

static void *qchunk_run(void *arg)
{
    const qpart *q = arg;
    const qchunk *c = q->c;
    float *f = c->f + (size_t)q->t * (size_t)c->p->nc;
    for (int64_t r = c->nr * q->t / c->nt; r < c->nr * (q->t + 1) / c->nt; r++) {
        size_t i = c->done + (size_t)r;
        quant_row(c->p, c->r0 + r, c->quant, c->ld, c->stored, f, c->out + (size_t)r * c->row,
                  (float *)c->sc + i, (uint16_t *)(c->sc + i * c->sb));
    }
    return NULL;
}

/* Every slice of c: on threads where they start, the rest on this one. */
static void qchunk_all(const qchunk *c)
{
    pthread_t th[QUANT_THREADS];
    qpart part[QUANT_THREADS];
    int up[QUANT_THREADS] = {0};
    for (int t = 0; t < c->nt; t++) {
        part[t] = (qpart){.c = c, .t = t};
        up[t] = t > 0 && pthread_create(&th[t], NULL, qchunk_run, &part[t]) == 0;
    }
    for (int t = 0; t < c->nt; t++)
        if (!up[t])
            qchunk_run(&part[t]);
    for (int t = 1; t < c->nt; t++)
        if (up[t])
            pthread_join(th[t], NULL);
}

/* Matrix `which` of a layer, quantized on the host a chunk of rows at a
 * time (qchunk_all): weights to lw + wl->w[which], scales (kept on the host until the
 * end) to lw + wl->w_scale[which]. Pieces bound as 4-bit codes that int4
 * requantizes are counted in *requant. */
static int up_quant(uploader *u, unsigned char *lw, const cuda_wlayout *wl, int which, int quant,
                    const cuda_piece *p, int n, int *requant, inf_err *err)
{
    size_t N = wl->w_rows[which], ld = wl->w_ld[which];
    size_t row = quant == CUDA_QUANT_INT8 ? ld : ld * 16, sb = quant == CUDA_QUANT_INT8 ? 4 : ld * 2;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int nt = cores < 1 ? 1 : cores > QUANT_THREADS ? QUANT_THREADS : (int)cores;
    float *f = malloc((size_t)nt * wl->w_cols[which] * sizeof(float));
    unsigned char *sc = malloc(N * sb);
    int rc = f && sc ? INF_OK : inf_fail(err, INF_ERR_NOMEM, "cuda: out of memory quantizing");
    unsigned char *dst = lw + wl->w[which];
    size_t done = 0;
    int64_t step = (int64_t)(STAGE_BYTES / row);
    for (int i = 0; i < n && !rc; i++) {
        int codes = quant == CUDA_QUANT_INT4 && p[i].w->q4;
        int stored = codes && q4_as_stored(&p[i], (int)ld);
        *requant += codes && !stored;
        for (int64_t r0 = 0; r0 < p[i].nr && !rc; r0 += step) {
            int64_t nr = p[i].nr - r0 < step ? p[i].nr - r0 : step;
            if ((rc = up_begin(u, err)))
                break;
            qchunk c = {.p = &p[i], .r0 = r0, .nr = nr, .quant = quant, .ld = (int)ld,
                        .nt = nr < nt ? (int)nr : nt, .stored = stored, .row = row, .sb = sb,
                        .done = done, .f = f, .out = u->buf[u->k], .sc = sc};
            qchunk_all(&c);
            done += (size_t)nr;
            rc = up_end(u, dst, (size_t)nr * row, err);
            dst += (size_t)nr * row;
        }
    }
    if (!rc) /* through the staging buffers, so sc may go at once */
        rc = up_host(u, lw + wl->w_scale[which], sc, N * sb, err);
    free(f);
    free(sc);
    return rc;
}

/* A 1-D weight as f32; a norm gain (gain) gets Gemma's 1 + w folded in. */
static int up_f32(uploader *u, unsigned char *dst, const model_tensor *t, const mdesc *md,
                  int gain, inf_err *err)
{
    int rc = up_begin(u, err);
    if (rc)
        return rc;
    size_t n = (size_t)(t->rows * t->cols);
    float *f = (float *)u->buf[u->k];
    cuda_plan_to_f32(t->data, t->dtype, n, f);
    for (size_t i = 0; gain && md->norm == MD_NORM_RMS_1P && i < n; i++)
        f[i] = 1.0f + f[i];
    return up_end(u, dst, n * sizeof(float), err);
}

/* Layer l's q|k|v and o biases as one f32 vector, this rank's slices
 * (cuda_plan_bias_pieces; zeros where absent, and o's off rank 0). */
static int up_bias(uploader *u, unsigned char *dst, const model_layer *ly, const model_config *c,
                   const cuda_shard *sh, const cuda_dims *d, inf_err *err)
{
    int rc = up_begin(u, err);
    if (rc)
        return rc;
    float *f = (float *)u->buf[u->k];
    size_t n = (size_t)d->qkv + d->D;
    memset(f, 0, n * sizeof *f);
    cuda_bias_piece p[4];
    cuda_plan_bias_pieces(ly, c, sh, p);
    for (int i = 0; i < 4; i++)
        if (p[i].t)
            cuda_plan_to_f32((const char *)p[i].t->data +
                                 (size_t)p[i].src0 * inf_dtype_size(p[i].t->dtype),
                             p[i].t->dtype, (size_t)p[i].n, f + p[i].dst0);
    return up_end(u, dst, n * sizeof(float), err);
}

int cuda_upload(const model *m, const cuda_config *cfg, const cuda_shard *sh,
                const cuda_dims *d, const cuda_wlayout *wl, unsigned char *w, cudaStream_t st,
                int *q4_requant, inf_err *err)
{
    const model_config *c = &m->cfg;
    uploader u = {.st = st};
    int rc = 0;
    for (int i = 0; i < 2 && !rc; i++)
        if (!(rc = CUDA_RC(err, cudaHostAlloc((void **)&u.buf[i], STAGE_BYTES,
                                              cudaHostAllocPortable))))
            rc = CUDA_RC(err, cudaEventCreateWithFlags(&u.ev[i], cudaEventDisableTiming));
    cuda_piece p[3];
    if (!rc) {
        p[0] = (cuda_piece){.w = &m->embed, .r0 = 0, .nr = c->vocab_size, .c0 = 0,
                            .nc = c->hidden_size};
        rc = up_pieces(&u, w + wl->embed, p, 1, err);
    }
    if (!rc && d->lm_head && wl->lm_head != wl->embed) {
        p[0].w = &m->lm_head;
        rc = up_pieces(&u, w + wl->lm_head, p, 1, err);
    }
    const mdesc *md = &c->desc;
    if (!rc)
        rc = up_f32(&u, w + wl->norm, &m->norm, md, 1, err);
    if (!rc && !(rc = up_begin(&u, err))) { /* the description's frequencies, as computed */
        size_t half = (size_t)c->head_dim / 2, n = (size_t)md->rot_dim / 2;
        double *f = (double *)u.buf[u.k];
        memset(f, 0, 4 * half * sizeof *f);
        for (int k = 0; k < 2; k++) {
            memcpy(f + 2 * k * half, md->rope[k].inv_freq, n * sizeof *f);
            memcpy(f + (2 * k + 1) * half, md->rope[k].inv_freq_long, n * sizeof *f);
        }
        rc = up_end(&u, w + wl->rope, 4 * half * sizeof(double), err);
    }
    for (int l = 0; l < c->n_layers && !rc; l++) {
        unsigned char *lw = w + wl->layer0 + (size_t)l * wl->layer_stride;
        const model_layer *ly = &m->layers[l];
        if ((rc = up_f32(&u, lw + wl->attn_norm, &ly->attn_norm, md, 1, err)) ||
            (rc = up_f32(&u, lw + wl->ffn_norm, &ly->ffn_norm, md, 1, err)) ||
            (d->sandwich &&
             ((rc = up_f32(&u, lw + wl->post_norm, &ly->post_attn_norm, md, 1, err)) ||
              (rc = up_f32(&u, lw + wl->post_norm + (size_t)c->hidden_size * sizeof(float),
                           &ly->post_ffn_norm, md, 1, err)))) ||
            (d->qk_norm &&
             ((rc = up_f32(&u, lw + wl->qk_gain, &ly->q_norm, md, 1, err)) ||
              (rc = up_f32(&u, lw + wl->qk_gain + (size_t)c->head_dim * sizeof(float),
                           &ly->k_norm, md, 1, err)))) ||
            (d->bias && (rc = up_bias(&u, lw + wl->bias, ly, c, sh, d, err))))
            break;
        if (cfg->layer_need && (rc = cfg->layer_need(cfg->layer_ctx, l, err)))
            break;
        for (int w = 0; w < CUDA_W_COUNT && !rc; w++) {
            int n = cuda_plan_pieces(&m->layers[l], c, sh, w, p);
            rc = d->quant ? up_quant(&u, lw, wl, w, d->quant, p, n, q4_requant, err)
                            : up_pieces(&u, lw + wl->w[w], p, n, err);
        }
        /* the staging buffers hold what is still in flight: the model's
         * copy is no longer read */
        if (!rc && cfg->layer_packed)
            cfg->layer_packed(cfg->layer_ctx, l);
    }
    int rc2 = CUDA_RC(rc ? NULL : err, cudaStreamSynchronize(st));
    for (int i = 0; i < 2; i++) {
        if (u.ev[i])
            cudaEventDestroy(u.ev[i]);
        if (u.buf[i])
            cudaFreeHost(u.buf[i]);
    }
    return rc ? rc : rc2;
}
