/* hfq_: GPTQ (4- and 8-bit) and AWQ 4-bit linears (hfq.h): unpacked to
 * f32, or (4 bits) kept as their codes for the int4 kernels
 * (hfq_set_packed_q4). */
#include "hfq_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* prefix + part ("qweight", ...) of dtype name with shape [r, c]. */
static int part(const hfq *q, const st_set *st, const char *prefix, const char *what, const char *dt,
                int64_t r, int64_t c, int optional, const st_tensor **out, inf_err *err)
{
    char name[256];
    snprintf(name, sizeof name, "%s.%s", prefix, what);
    const st_tensor *t = st_find(st, name);
    *out = t;
    if (!t) {
        if (optional)
            return INF_OK;
        return inf_fail(err, INF_ERR_FORMAT, "%s: %s checkpoint without tensor '%s'", q->path,
                        hfq_method(q), name);
    }
    int shape_ok = c ? t->ndim == 2 && t->shape[0] == r && t->shape[1] == c
                     : t->ndim == 1 && t->shape[0] == r;
    if (strcmp(t->dtype_name, dt) || !shape_ok)
        return inf_fail(err, INF_ERR_FORMAT, "%s: tensor '%s' must be %s [%lld%s%lld%s]", t->file,
                        name, dt, (long long)r, c ? ", " : "", (long long)c, "");
    return INF_OK;
}

/* Where one linear's codes, scales and zeros are (hfq_codes_src's ctx). */
typedef struct gq_src {
    int awq, zero_plus1;
    int bits, pf; /* GPTQ: 4 or 8 bits, pf = 32 / bits values per int32 */
    int64_t G;    /* groups */
    int64_t N;
    const st_tensor *qw, *qz, *sc;
    int slot[8]; /* AWQ: output 8j + o is in nibble slot[o] */
} gq_src;

static int gq_code(const void *ctx, int64_t n, int64_t k)
{
    const gq_src *s = ctx;
    if (s->awq)
        return (int)(hfq__u32(s->qw, (size_t)(k * (s->N / 8) + n / 8)) >> (4 * s->slot[n % 8]) & 15);
    uint32_t w = hfq__u32(s->qw, (size_t)((k / s->pf) * s->N + n));
    return (int)(w >> (s->bits * (k % s->pf)) & ((1u << s->bits) - 1));
}

/* hfq_codes_src's rows (4 bits), outputs n0 .. n0 + m - 1 together so that
 * each word (and the cache line the next outputs' words share) is read
 * once. GPTQ's word holds inputs k0 .. k0 + 7 at bits 4j: already two a
 * byte, low first, as rows writes them. */
static void gq_rows(const void *ctx, int64_t n0, int m, int64_t K, uint8_t *u)
{
    const gq_src *s = ctx;
    const int64_t H = K / 2;
    for (int64_t k = 0; s->awq && k < K; k += 2)
        for (int i = 0; i < m; i++) {
            int64_t n = n0 + i;
            const int sh = 4 * s->slot[n % 8];
            uint32_t a = hfq__u32(s->qw, (size_t)(k * (s->N / 8) + n / 8)) >> sh & 15,
                     b = hfq__u32(s->qw, (size_t)((k + 1) * (s->N / 8) + n / 8)) >> sh & 15;
            u[i * H + k / 2] = (uint8_t)(a | b << 4);
        }
    for (int64_t k0 = 0; !s->awq && k0 < K; k0 += 8)
        for (int i = 0; i < m; i++) {
            uint32_t w = hfq__u32(s->qw, (size_t)((k0 / 8) * s->N + n0 + i));
            for (int64_t j = 0; j < 4 && k0 + 2 * j < K; j++)
                u[i * H + k0 / 2 + j] = (uint8_t)(w >> (8 * j));
        }
}

static uint16_t gq_scale(const void *ctx, int64_t n, int64_t g)
{
    const gq_src *s = ctx;
    return hfq__u16(s->sc, (size_t)(g * s->N + n));
}

static int gq_zero(const void *ctx, int64_t n, int64_t g)
{
    const gq_src *s = ctx;
    uint32_t v = hfq__u32(s->qz, (size_t)(g * (s->N / s->pf) + n / s->pf));
    if (s->awq)
        return (int)(v >> (4 * s->slot[n % 8]) & 15);
    return (int)(v >> (s->bits * (n % s->pf)) & ((1u << s->bits) - 1)) + s->zero_plus1;
}

/* W[n][k] = scale * (q - zero) in f32, exact: an f16 times a small integer
 * (hfq__convert's fn: src a gq_src, aux the group of each input). Each
 * group's scales and zeros are read once into tables, and the outputs go
 * 16 rows at a time so that each row's f32 is written in order. */
static void gq_convert(const void *src, const void *aux, int arg, const model_tensor *o,
                       void *dst)
{
    (void)arg;
    const gq_src *s = src;
    const int32_t *grp = aux;
    float *w = dst;
    const int64_t N = o->rows, K = o->cols, G = s->G;
    float *sf = malloc(sizeof *sf * (size_t)(G * N));
    int *zf = malloc(sizeof *zf * (size_t)(G * N));
    for (int64_t i = 0; sf && zf && i < G * N; i++) {
        sf[i] = inf_f16_to_f32(gq_scale(s, i % N, i / N));
        zf[i] = gq_zero(s, i % N, i / N);
    }
    enum { TN = 16, TK = 64 }; /* a tile of 16 rows x 64 inputs, built here then copied
                                  row by row: stores 8 KB apart alias in L1 */
    float tile[TN][TK];
    for (int64_t n0 = 0; n0 < N; n0 += TN) {
        int64_t n1 = n0 + TN < N ? n0 + TN : N;
        for (int64_t k0 = 0; k0 < K; k0 += TK) {
            int64_t k1 = k0 + TK < K ? k0 + TK : K;
            for (int64_t k = k0; k < k1; k++) {
                int64_t g = grp[k];
                /* GPTQ's word row and shift of input k, once for the rows */
                int64_t kw = k / s->pf;
                int shift = s->bits * (int)(k % s->pf);
                unsigned mask = (1u << s->bits) - 1;
                for (int64_t n = n0; n < n1; n++) {
                    float sc = sf && zf ? sf[g * N + n] : inf_f16_to_f32(gq_scale(s, n, g));
                    int z = sf && zf ? zf[g * N + n] : gq_zero(s, n, g);
                    int c = s->awq ? gq_code(s, n, k)
                                   : (int)(hfq__u32(s->qw, (size_t)(kw * N + n)) >> shift & mask);
                    tile[n - n0][k - k0] = sc * (float)(c - z);
                }
            }
            for (int64_t n = n0; n < n1; n++)
                memcpy(w + (size_t)n * (size_t)K + (size_t)k0, tile[n - n0],
                       sizeof(float) * (size_t)(k1 - k0));
        }
    }
    free(sf);
    free(zf);
}

/* The linear as f32 (hfq__convert: at once, or deferred with its own copy of
 * where the codes are). */
static int gq_f32(hfq *q, const gq_src *s, const int32_t *grp, int64_t K, model_tensor *out,
                  inf_err *err)
{
    gq_src *ks = hfq__keep_bytes(q, sizeof *ks);
    int32_t *kg = hfq__keep_bytes(q, sizeof *kg * (size_t)K);
    if (!ks || !kg)
        return inf_fail(err, INF_ERR_NOMEM, "%s: out of memory for %s", q->path, s->qw->name);
    *ks = *s;
    memcpy(kg, grp, sizeof *kg * (size_t)K);
    q->n_requant += q->packed_q4;
    hfq__out(out, s->N, K, s->qw->name);
    out->dtype = INF_F32;
    return hfq__convert(q, out, gq_convert, ks, kg, 0, err);
}

int hfq__gptq_bind(hfq *q, const st_set *st, const char *name, int64_t rows, int64_t cols,
                   model_tensor *out, inf_err *err)
{
    const st_tensor *stored = st_find(st, name);
    if (stored)
        return inf_fail(err, INF_ERR_UNSUPPORTED, "%s: tensor '%s' has dtype %s; weights must be "
                        "F32, F16 or BF16 (or packed %s parts)", stored->file, name,
                        stored->dtype_name, hfq_method(q));
    size_t len = strlen(name);
    char prefix[256];
    if (len < 7 || len - 7 >= sizeof prefix || strcmp(name + len - 7, ".weight"))
        return inf_fail(err, INF_ERR_FORMAT, "%s: missing tensor '%s'", q->path, name);
    memcpy(prefix, name, len - 7);
    prefix[len - 7] = 0;
    const int64_t N = rows, K = cols;
    int64_t gs = q->group > 0 ? q->group : K, G = (K + gs - 1) / gs;
    const int pf = 32 / q->bits; /* values per int32: 8 of 4 bits, 4 of 8 */
    if (K % pf || N % pf)
        return inf_fail(err, INF_ERR_FORMAT, "%s: %s is %lld x %lld; packed %d-bit needs both "
                        "multiples of %d", q->path, prefix, (long long)N, (long long)K, q->bits,
                        pf);
    const st_tensor *qw, *qz, *sc, *gi = NULL;
    int awq = q->kind == HFQ_AWQ, rc;
    if ((rc = part(q, st, prefix, "qweight", "I32", awq ? K : K / pf, awq ? N / pf : N, 0, &qw,
                   err)) ||
        (rc = part(q, st, prefix, "qzeros", "I32", G, N / pf, 0, &qz, err)) ||
        (rc = part(q, st, prefix, "scales", "F16", G, N, 0, &sc, err)) ||
        (!awq && (rc = part(q, st, prefix, "g_idx", "I32", K, 0, 1, &gi, err))))
        return rc;
    int32_t *grp = malloc(sizeof *grp * (size_t)K);
    if (!grp)
        return inf_fail(err, INF_ERR_NOMEM, "%s: out of memory for %s", q->path, prefix);
    for (int64_t k = 0; k < K; k++) {
        grp[k] = (int32_t)(k / gs);
        if (gi) {
            int32_t v = (int32_t)hfq__u32(gi, (size_t)k);
            if (v < 0 || v >= G) {
                free(grp);
                return inf_fail(err, INF_ERR_FORMAT, "%s: %s.g_idx[%lld] is %d, outside 0..%lld",
                                gi->file, prefix, (long long)k, v, (long long)G - 1);
            }
            grp[k] = v;
        }
    }
    static const int awq_order[8] = {0, 2, 4, 6, 1, 3, 5, 7};
    gq_src src = {.awq = awq, .bits = q->bits, .pf = pf, .G = G, .N = N, .qw = qw, .qz = qz,
                  .sc = sc, .zero_plus1 = q->zero_plus1};
    for (int i = 0; i < 8; i++)
        src.slot[awq_order[i]] = i;
    /* the int4 kernels take the codes as stored when every 32 inputs share
     * a group once sorted by group (desc_act: the activations are gathered
     * into that order) */
    const hfq_codes_src cs = {.ctx = &src, .rows = gq_rows, .scale = gq_scale, .zero = gq_zero};
    int bound = 0;
    if (q->packed_q4 && q->bits == 4)
        rc = hfq__bind_codes(q, N, K, G, grp, &cs, qw->name, out, &bound, err);
    if (!rc && !bound)
        rc = gq_f32(q, &src, grp, K, out, err);
    free(grp);
    return rc;
}
