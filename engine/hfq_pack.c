/* hfq_: compressed-tensors pack-quantized checkpoints (llm-compressor's
 * W4A16, W4A16_ASYM and W8A16 schemes, which vLLM runs as
 * CompressedTensorsWNA16): each linear's packed integers dequantized once at
 * load to f32, W[n][k] = scale[n][g] * (q[n][k] - zero[n][g]) with g the
 * group of input k, like GPTQ (hfq.h). Activations stay unquantized, as the
 * scheme says (weight-only). */
#include "hfq_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CT "compressed-tensors"
#define PQ " in a pack-quantized scheme"

/* 1 for actorder group (weight_g_idx stored), 0 for none or weight (the
 * weights were reordered only while calibrating), -1 for anything else;
 * *shown says which for messages. */
static int actorder(const cJSON *w, const char **shown)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(w, "actorder");
    *shown = cJSON_IsString(a) ? a->valuestring : cJSON_IsTrue(a) ? "true" : "<not a string>";
    if (!a || cJSON_IsNull(a) || cJSON_IsFalse(a))
        return 0;
    if (cJSON_IsTrue(a)) /* compressed-tensors reads true as group */
        return 1;
    if (!cJSON_IsString(a))
        return -1;
    if (!strcmp(a->valuestring, "group") || !strcmp(a->valuestring, "dynamic")) /* an alias */
        return 1;
    if (!strcmp(a->valuestring, "weight") || !strcmp(a->valuestring, "static"))
        return 0;
    return -1;
}

int hfq__pack_group(const cJSON *grp, const char *path, const char *g, hfq_pack *out, inf_err *err)
{
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(grp, "weights");
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(grp, "input_activations");
    if (!cJSON_IsObject(w))
        return inf_fail(err, INF_ERR_FORMAT, "%s: " CT " config_groups.%s.weights is not an object",
                        path, g);
    if (a && !cJSON_IsNull(a))
        return inf_fail(err, INF_ERR_UNSUPPORTED, "%s: " CT " config_groups.%s.input_activations "
                        "are not supported" PQ " (null: weight-only W4A16 / W8A16)", path, g);
    const char *type = hfq__jstr(w, "type");
    if (!type || strcmp(type, "int"))
        return inf_fail(err, INF_ERR_UNSUPPORTED, "%s: " CT " config_groups.%s.weights.type '%s' "
                        "is not supported" PQ " (int)", path, g, hfq__shown(w, "type"));
    int bits = hfq__jint(w, "num_bits", -1000);
    if (bits != 4 && bits != 8)
        return inf_fail(err, INF_ERR_UNSUPPORTED, "%s: " CT " config_groups.%s.weights.num_bits %d "
                        "is not supported" PQ " (4, 8)", path, g, bits);
    int sym = hfq__jbool(w, "symmetric", 1);
    if (sym < 0)
        return inf_fail(err, INF_ERR_FORMAT, "%s: " CT " config_groups.%s.weights.symmetric is "
                        "not a boolean", path, g);
    if (hfq__jbool(w, "dynamic", 0) != 0)
        return inf_fail(err, INF_ERR_UNSUPPORTED, "%s: " CT " config_groups.%s.weights.dynamic "
                        "must be false", path, g);
    int gs = hfq__jint(w, "group_size", 0);
    const cJSON *sv = cJSON_GetObjectItemCaseSensitive(w, "strategy");
    const char *strategy = hfq__jstr(w, "strategy");
    if (!sv || cJSON_IsNull(sv)) /* compressed-tensors infers it from group_size */
        strategy = gs > 0 ? "group" : gs == -1 ? "channel" : "tensor";
    if (!strategy || (strcmp(strategy, "channel") && strcmp(strategy, "group")))
        return inf_fail(err, INF_ERR_UNSUPPORTED, "%s: " CT " config_groups.%s.weights.strategy "
                        "'%s' is not supported" PQ " (channel, group)", path, g,
                        strategy ? strategy : hfq__shown(w, "strategy"));
    int group = !strcmp(strategy, "group");
    if (group && gs <= 0)
        return inf_fail(err, INF_ERR_FORMAT, "%s: " CT " config_groups.%s.weights.group_size must "
                        "be a positive integer with strategy group", path, g);
    if (!group && gs != 0 && gs != -1)
        return inf_fail(err, INF_ERR_FORMAT, "%s: " CT " config_groups.%s.weights.group_size must "
                        "be null or -1 with strategy channel", path, g);
    const char *shown;
    int act = actorder(w, &shown);
    if (act < 0)
        return inf_fail(err, INF_ERR_UNSUPPORTED, "%s: " CT " config_groups.%s.weights.actorder "
                        "'%s' is not supported (group, weight, null)", path, g, shown);
    if (act && !group)
        return inf_fail(err, INF_ERR_FORMAT, "%s: " CT " config_groups.%s.weights.actorder '%s' "
                        "needs strategy group", path, g, shown);
    out->bits = bits;
    out->group = group ? gs : 0;
    out->sym = sym;
    out->actorder = act;
    return INF_OK;
}

static int64_t le64(const st_tensor *t, size_t i)
{
    return (int64_t)((uint64_t)hfq__u32(t, 2 * i) | (uint64_t)hfq__u32(t, 2 * i + 1) << 32);
}

/* Field j (bits wide, from the low end) of a packed int32. */
static int field(uint32_t word, int j, int bits)
{
    return (int)(word >> (bits * j) & ((1u << bits) - 1));
}

/* One linear's parts, found and checked. */
typedef struct pack_parts {
    const st_tensor *packed, *scale, *zero, *gidx;
    char prefix[256]; /* "P." of "P.weight" */
} pack_parts;

static int want(const hfq *q, const st_tensor *t, const char *prefix, const char *part,
                inf_err *err)
{
    if (t)
        return INF_OK;
    return inf_fail(err, INF_ERR_FORMAT, "%s: " CT " checkpoint without tensor '%s%s'", q->path,
                    prefix, part);
}

static const st_tensor *find(const st_set *st, const pack_parts *p, const char *part)
{
    char name[300];
    snprintf(name, sizeof name, "%s%s", p->prefix, part);
    return st_find(st, name);
}

/* packed I32 [N, ceil(K/pf)], weight_shape [N, K], weight_scale [N, G]. */
static int check_parts(const hfq *q, const st_set *st, pack_parts *p, int64_t N, int64_t K,
                       int64_t G, inf_err *err)
{
    const int pf = 32 / q->pack.bits;
    const st_tensor *t = p->packed = find(st, p, "weight_packed");
    int rc = want(q, t, p->prefix, "weight_packed", err);
    if (rc)
        return rc;
    if (strcmp(t->dtype_name, "I32") || t->ndim != 2 || t->shape[0] != N ||
        t->shape[1] != (K + pf - 1) / pf)
        return inf_fail(err, INF_ERR_FORMAT, "%s: tensor '%s' must be I32 [%lld, %lld] (%d-bit "
                        "values of [%lld, %lld], %d per int32)", t->file, t->name, (long long)N,
                        (long long)((K + pf - 1) / pf), q->pack.bits, (long long)N, (long long)K,
                        pf);
    t = find(st, p, "weight_shape");
    if ((rc = want(q, t, p->prefix, "weight_shape", err)))
        return rc;
    int i64 = !strcmp(t->dtype_name, "I64");
    if ((!i64 && strcmp(t->dtype_name, "I32")) || t->ndim != 1 || t->shape[0] != 2)
        return inf_fail(err, INF_ERR_FORMAT, "%s: tensor '%s' must be I64 or I32 [2]", t->file,
                        t->name);
    int64_t r = i64 ? le64(t, 0) : (int32_t)hfq__u32(t, 0), c = i64 ? le64(t, 1) : (int32_t)hfq__u32(t, 1);
    if (r != N || c != K)
        return inf_fail(err, INF_ERR_FORMAT, "%s: tensor '%s' is [%lld, %lld]; config.json makes "
                        "this linear [%lld, %lld]", t->file, t->name, (long long)r, (long long)c,
                        (long long)N, (long long)K);
    t = p->scale = find(st, p, "weight_scale");
    if ((rc = want(q, t, p->prefix, "weight_scale", err)))
        return rc;
    if (t->dtype == INF_DTYPE_NONE || t->ndim != 2 || t->shape[0] != N || t->shape[1] != G)
        return inf_fail(err, INF_ERR_FORMAT, "%s: tensor '%s' must be F32, BF16 or F16 "
                        "[%lld, %lld]", t->file, t->name, (long long)N, (long long)G);
    return INF_OK;
}

/* The zero point of every row and group in stored (offset) form, zp[n * G +
 * g]: packed I32 [ceil(N/pf), G] along the rows (compressed-tensors 0.9.4
 * on), or I8 [N, G] as quantized (signed; earlier versions), or the offset
 * itself when the scheme is symmetric. */
static int zeros(const hfq *q, const st_set *st, pack_parts *p, int64_t N, int64_t G, int *zp,
                 inf_err *err)
{
    const int bits = q->pack.bits, pf = 32 / bits, off = 1 << (bits - 1);
    const st_tensor *t = p->zero = find(st, p, "weight_zero_point");
    if (q->pack.sym) {
        if (t) /* a symmetric file may carry all-zero points; any dtype's zero is zero bits */
            for (size_t i = 0; i < t->nbytes; i++)
                if (((const uint8_t *)t->data)[i])
                    return inf_fail(err, INF_ERR_FORMAT, "%s: tensor '%s' holds a nonzero zero "
                                    "point in a symmetric scheme", t->file, t->name);
        for (int64_t i = 0; i < N * G; i++)
            zp[i] = off;
        return INF_OK;
    }
    int rc = want(q, t, p->prefix, "weight_zero_point", err);
    if (rc)
        return rc;
    if (!strcmp(t->dtype_name, "I32") && t->ndim == 2 && t->shape[0] == (N + pf - 1) / pf &&
        t->shape[1] == G) {
        for (int64_t n = 0; n < N; n++)
            for (int64_t g = 0; g < G; g++)
                zp[n * G + g] = field(hfq__u32(t, (size_t)((n / pf) * G + g)), (int)(n % pf), bits);
        return INF_OK;
    }
    if (!strcmp(t->dtype_name, "I8") && t->ndim == 2 && t->shape[0] == N && t->shape[1] == G) {
        for (int64_t i = 0; i < N * G; i++) {
            int v = ((const int8_t *)t->data)[i];
            if (v < -off || v >= off)
                return inf_fail(err, INF_ERR_FORMAT, "%s: %s[%lld][%lld] is %d, outside %d..%d "
                                "(%d bits)", t->file, t->name, (long long)(i / G),
                                (long long)(i % G), v, -off, off - 1, bits);
            zp[i] = v + off;
        }
        return INF_OK;
    }
    return inf_fail(err, INF_ERR_FORMAT, "%s: tensor '%s' must be I32 [%lld, %lld] (packed along "
                    "the rows) or I8 [%lld, %lld]", t->file, t->name,
                    (long long)((N + pf - 1) / pf), (long long)G, (long long)N, (long long)G);
}

/* The group of every input, grp[k]: k / group, or weight_g_idx (actorder
 * group: any permutation, each group holding group_size inputs, as
 * compressed-tensors' dequantize assumes). A g_idx of all -1 is its
 * uncalibrated value, which it reads as k / group. */
static int groups(const hfq *q, const st_set *st, pack_parts *p, int64_t K, int64_t G, int32_t *grp,
                  inf_err *err)
{
    const int64_t gs = q->pack.group ? q->pack.group : K;
    for (int64_t k = 0; k < K; k++)
        grp[k] = (int32_t)(k / gs);
    const st_tensor *t = p->gidx = q->pack.group ? find(st, p, "weight_g_idx") : NULL;
    if (!t)
        return q->pack.actorder ? want(q, t, p->prefix, "weight_g_idx", err) : INF_OK;
    if (strcmp(t->dtype_name, "I32") || t->ndim != 1 || t->shape[0] != K)
        return inf_fail(err, INF_ERR_FORMAT, "%s: tensor '%s' must be I32 [%lld]", t->file, t->name,
                        (long long)K);
    int64_t unset = 0;
    for (int64_t k = 0; k < K; k++)
        unset += (int32_t)hfq__u32(t, (size_t)k) == -1;
    if (unset == K)
        return INF_OK;
    int64_t *count = calloc((size_t)G, sizeof *count);
    if (!count)
        return inf_fail(err, INF_ERR_NOMEM, "%s: out of memory for %s", q->path, t->name);
    int rc = INF_OK;
    for (int64_t k = 0; k < K && !rc; k++) {
        int32_t v = (int32_t)hfq__u32(t, (size_t)k);
        if (v < 0 || v >= G)
            rc = inf_fail(err, INF_ERR_FORMAT, "%s: %s[%lld] is %d, outside 0..%lld", t->file,
                          t->name, (long long)k, v, (long long)G - 1);
        else {
            grp[k] = v;
            count[v]++;
        }
    }
    for (int64_t g = 0; g < G && !rc; g++)
        if (count[g] != gs)
            rc = inf_fail(err, INF_ERR_FORMAT, "%s: %s puts %lld inputs in group %lld; each group "
                          "holds group_size %lld", t->file, t->name, (long long)count[g],
                          (long long)g, (long long)gs);
    free(count);
    return rc;
}

/* One linear's parts read: its scales, zeros (offset form) and groups. */
typedef struct pack_lin {
    int bits;
    const st_tensor *packed;
    const float *sc;
    const int *zp;
    const int32_t *grp;
    int64_t N, K, G;
} pack_lin;

/* W = scale * (q - zero): the integer difference exact, then one f32
 * multiply (exact for bf16 and f16 scales). hfq__convert's fn: src a pack_lin. */
static void pack_convert(const void *src, const void *aux, int arg, const model_tensor *o,
                         void *dst)
{
    (void)aux, (void)arg, (void)o;
    const pack_lin *l = src;
    const int bits = l->bits, pf = 32 / bits;
    const int64_t N = l->N, K = l->K, G = l->G, words = (K + pf - 1) / pf;
    float *w = dst;
    for (int64_t n = 0; n < N; n++)
        for (int64_t k = 0; k < K; k++) {
            int v = field(hfq__u32(l->packed, (size_t)(n * words + k / pf)), (int)(k % pf), bits);
            size_t s = (size_t)(n * G + l->grp[k]);
            w[(size_t)n * (size_t)K + (size_t)k] = l->sc[s] * (float)(v - l->zp[s]);
        }
}

/* The linear as f32 (hfq__convert: at once, or deferred with its own copy of
 * the scales, zeros and groups, owned by q). */
static int bind_f32(hfq *q, const pack_lin *l, model_tensor *out, inf_err *err)
{
    const size_t ng = (size_t)(l->N * l->G);
    pack_lin *kl = hfq__keep_bytes(q, sizeof *kl);
    float *sc = hfq__keep(q, ng);
    int *zp = hfq__keep_bytes(q, sizeof *zp * ng);
    int32_t *grp = hfq__keep_bytes(q, sizeof *grp * (size_t)l->K);
    if (!kl || !sc || !zp || !grp)
        return inf_fail(err, INF_ERR_NOMEM, "%s: out of memory for %s", q->path, l->packed->name);
    memcpy(sc, l->sc, sizeof *sc * ng);
    memcpy(zp, l->zp, sizeof *zp * ng);
    memcpy(grp, l->grp, sizeof *grp * (size_t)l->K);
    *kl = *l;
    kl->sc = sc, kl->zp = zp, kl->grp = grp;
    q->n_requant += q->packed_q4 || q->packed_q8;
    hfq__out(out, l->N, l->K, l->packed->name);
    out->dtype = INF_F32;
    return hfq__convert(q, out, pack_convert, kl, NULL, 0, err);
}

/* Whether the int4 kernels can take the codes as stored (hfq_set_packed_q4):
 * 4 bits, an even K and every scale exactly an f16 (hfq__bind_codes asks
 * for the order of the inputs). */
static int codes_fit(const hfq *q, const pack_lin *l)
{
    if (q->pack.bits != 4 || l->K % 2)
        return 0;
    for (int64_t i = 0; i < l->N * l->G; i++)
        if (inf_f16_to_f32(inf_f32_to_f16(l->sc[i])) != l->sc[i])
            return 0;
    return 1;
}

/* hfq_codes_src over a pack_lin: the stored values u = q + 8 and zeros
 * z = zero + 8, so scale * (u - z) are the same numbers. */
static void pl_rows(const void *ctx, int64_t n0, int m, int64_t K, uint8_t *u)
{
    const pack_lin *l = ctx;
    for (int i = 0; i < m; i++) /* a row's words are in order, inputs at bits 4j */
        for (int64_t k0 = 0; k0 < K; k0 += 8) {
            uint32_t w = hfq__u32(l->packed, (size_t)((n0 + i) * ((K + 7) / 8) + k0 / 8));
            for (int64_t j = 0; j < 4 && k0 + 2 * j < K; j++)
                u[i * (K / 2) + k0 / 2 + j] = (uint8_t)(w >> (8 * j));
        }
}

static uint16_t pl_scale(const void *ctx, int64_t n, int64_t g)
{
    const pack_lin *l = ctx;
    return inf_f32_to_f16(l->sc[n * l->G + g]);
}

static int pl_zero(const void *ctx, int64_t n, int64_t g)
{
    const pack_lin *l = ctx;
    return l->zp[n * l->G + g];
}

/* A W8A16 linear per channel and symmetric as the int8 kernels' rows
 * (model_tensor.q8): q = the stored value - 128 (hfq__convert's fn: src
 * the packed words), scale[n] as read, so W = scale * q exactly. */
static void q8_convert(const void *src, const void *aux, int arg, const model_tensor *o,
                       void *dst)
{
    (void)aux, (void)arg;
    const st_tensor *packed = src;
    const int64_t K = o->cols, words = (K + 3) / 4;
    int8_t *w = dst;
    for (int64_t n = 0; n < o->rows; n++)
        for (int64_t k = 0; k < K; k++)
            w[n * K + k] = (int8_t)(field(hfq__u32(packed, (size_t)(n * words + k / 4)),
                                          (int)(k % 4), 8) - 128);
}

/* The rows now, or deferred with the scales bound (hfq__convert). */
static int bind_q8(hfq *q, const pack_lin *l, const char *name, model_tensor *out,
                   inf_err *err)
{
    float *sc = hfq__keep(q, (size_t)l->N);
    if (!sc)
        return inf_fail(err, INF_ERR_NOMEM, "%s: out of memory for %s", q->path, name);
    memcpy(sc, l->sc, sizeof *sc * (size_t)l->N);
    hfq__out(out, l->N, l->K, l->packed->name);
    out->q8_scale = sc;
    return hfq__convert(q, out, q8_convert, l->packed, NULL, 0, err);
}

int hfq__pack_bind(hfq *q, const st_set *st, const char *name, int64_t rows, int64_t cols,
                   model_tensor *out, inf_err *err)
{
    const st_tensor *stored = st_find(st, name);
    if (stored)
        return inf_fail(err, INF_ERR_UNSUPPORTED, "%s: tensor '%s' has dtype %s; a " CT " "
                        "pack-quantized checkpoint's linears are P.weight_packed I32 (others F32, "
                        "F16 or BF16)", stored->file, name, stored->dtype_name);
    pack_parts p = {0};
    size_t len = strlen(name);
    if (len < 6 || len - 6 >= sizeof p.prefix || strcmp(name + len - 6, "weight"))
        return inf_fail(err, INF_ERR_FORMAT, "%s: missing tensor '%s'", q->path, name);
    memcpy(p.prefix, name, len - 6);
    const int64_t N = rows, K = cols, gs = q->pack.group ? q->pack.group : K;
    if (K % gs)
        return inf_fail(err, INF_ERR_UNSUPPORTED, "%s: %s has %lld inputs, not a multiple of "
                        "group_size %lld (compressed-tensors has no short last group)", q->path,
                        name, (long long)K, (long long)gs);
    const int64_t G = K / gs;
    int rc = check_parts(q, st, &p, N, K, G, err);
    if (rc)
        return rc;
    float *sc = malloc(sizeof *sc * (size_t)(N * G));
    int *zp = malloc(sizeof *zp * (size_t)(N * G));
    int32_t *grp = malloc(sizeof *grp * (size_t)K);
    if (!sc || !zp || !grp)
        rc = inf_fail(err, INF_ERR_NOMEM, "%s: out of memory for %s", q->path, name);
    for (int64_t i = 0; !rc && i < N * G; i++)
        if (!isfinite(sc[i] = hfq__float_at(p.scale, (size_t)i)))
            rc = inf_fail(err, INF_ERR_FORMAT, "%s: %s[%lld][%lld] is not finite", p.scale->file,
                          p.scale->name, (long long)(i / G), (long long)(i % G));
    if (!rc && !(rc = zeros(q, st, &p, N, G, zp, err)) &&
        !(rc = groups(q, st, &p, K, G, grp, err))) {
        pack_lin l = {.bits = q->pack.bits, .packed = p.packed, .sc = sc, .zp = zp, .grp = grp,
                      .N = N, .K = K, .G = G};
        const hfq_codes_src cs = {.ctx = &l, .rows = pl_rows, .scale = pl_scale, .zero = pl_zero};
        int bound = 0;
        if (q->packed_q4 && codes_fit(q, &l))
            rc = hfq__bind_codes(q, N, K, G, grp, &cs, p.packed->name, out, &bound, err);
        if (!rc && !bound) /* W8A16 per channel, symmetric: the int8 kernels' rows */
            rc = q->packed_q8 && q->pack.bits == 8 && G == 1 && q->pack.sym
                     ? bind_q8(q, &l, name, out, err)
                     : bind_f32(q, &l, out, err);
    }
    free(sc);
    free(zp);
    free(grp);
    return rc;
}
