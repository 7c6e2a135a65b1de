/* hfq_: GPTQ and AWQ 4-bit linears dequantized at load, and the method
 * dispatch (hfq.h); compressed-tensors is in hfq_ct.c, hfq_fp8.c and hfq_pack.c. */
#include "hfq_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cfgjson.h"

const char *hfq__jstr(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

int hfq__jint(const cJSON *o, const char *k, int def)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!v || cJSON_IsNull(v))
        return def;
    int i = 0;
    return cfgj_is_int(v, &i) ? i : -1000; /* never cast a double out of int's range */
}

int hfq_open(const char *config_path, hfq **out, inf_err *err)
{
    *out = NULL;
    char *buf;
    int rc = inf_read_file(config_path, (size_t)16 << 20, &buf, NULL, NULL, err);
    if (rc)
        return rc;
    cJSON *root = cJSON_Parse(buf);
    free(buf);
    const cJSON *qc = root ? cJSON_GetObjectItemCaseSensitive(root, "quantization_config") : NULL;
    if (!qc || cJSON_IsNull(qc)) {
        cJSON_Delete(root); /* not JSON at all is model_config_load's to say */
        return INF_OK;
    }
    const char *method = hfq__jstr(qc, "quant_method");
    int bits = hfq__jint(qc, "bits", hfq__jint(qc, "w_bit", 4));
    int group = hfq__jint(qc, "group_size", hfq__jint(qc, "q_group_size", 128));
    const char *fmt = hfq__jstr(qc, "checkpoint_format"), *ver = hfq__jstr(qc, "version");
    hfq *q = NULL;
    hfq_kind ct_kind = HFQ_CT_INT8;
    hfq_pack pack = {0};
    int ct = method && !strcmp(method, "compressed-tensors");
    if (!cJSON_IsObject(qc) || !method)
        rc = inf_fail(err, INF_ERR_FORMAT, "%s: quantization_config has no quant_method",
                      config_path);
    else if (ct)
        rc = hfq__ct_open(qc, config_path, &ct_kind, &pack, err);
    else if (strcmp(method, "gptq") && strcmp(method, "awq"))
        rc = inf_fail(err, INF_ERR_UNSUPPORTED, "%s: quantization_config quant_method '%s' is "
                      "not supported (gptq, awq, compressed-tensors)", config_path, method);
    else if (bits != 4)
        rc = inf_fail(err, INF_ERR_UNSUPPORTED, "%s: %s with %d bits is not supported (4)",
                      config_path, method, bits);
    else if (group == -1000 || group == 0 || group < -1)
        rc = inf_fail(err, INF_ERR_FORMAT, "%s: quantization_config group_size must be a "
                      "positive integer or -1", config_path);
    else if (!strcmp(method, "awq") && ver && strcmp(ver, "gemm") && strcmp(ver, "GEMM"))
        rc = inf_fail(err, INF_ERR_UNSUPPORTED, "%s: awq version '%s' is not supported (gemm)",
                      config_path, ver);
    else if (!strcmp(method, "gptq") && fmt && strcmp(fmt, "gptq") && strcmp(fmt, "gptq_v2"))
        rc = inf_fail(err, INF_ERR_UNSUPPORTED, "%s: gptq checkpoint_format '%s' is not "
                      "supported (gptq, gptq_v2)", config_path, fmt);
    if (!rc && !(q = calloc(1, sizeof *q)))
        rc = inf_fail(err, INF_ERR_NOMEM, "%s: out of memory", config_path);
    if (q) {
        q->kind = ct ? ct_kind : strcmp(method, "gptq") ? HFQ_AWQ : HFQ_GPTQ;
        q->group = group;
        q->zero_plus1 = q->kind == HFQ_GPTQ && !(fmt && !strcmp(fmt, "gptq_v2"));
        q->pack = pack;
        snprintf(q->path, sizeof q->path, "%s", config_path);
        *out = q;
    }
    cJSON_Delete(root);
    return rc;
}

void hfq_free(hfq *q)
{
    if (!q)
        return;
    for (int i = 0; i < q->n_bufs; i++)
        free(q->bufs[i]);
    free(q->bufs);
    free(q);
}

const char *hfq_method(const hfq *q)
{
    return q->kind == HFQ_GPTQ ? "gptq" : q->kind == HFQ_AWQ ? "awq" : "compressed-tensors";
}

const char *hfq_describe(const hfq *q)
{
    int gptq = q->kind == HFQ_GPTQ;
    switch (q->kind) {
    case HFQ_GPTQ:
    case HFQ_AWQ:
        if (q->packed_q4 && q->n_requant) /* desc_act, or groups across 32s */
            return gptq ? "gptq 4-bit (groups not whole 32s of inputs in order: dequantized to "
                          "f32, then requantized to int4)"
                        : "awq 4-bit (groups not whole 32s of inputs: dequantized to f32, then "
                          "requantized to int4)";
        if (q->packed_q4)
            return gptq ? "gptq 4-bit (codes, scales and zeros as stored; activations int8 per "
                          "token)"
                        : "awq 4-bit (codes, scales and zeros as stored; activations int8 per "
                          "token)";
        return gptq ? "gptq 4-bit (dequantized to f32 at load)"
                    : "awq 4-bit (dequantized to f32 at load)";
    case HFQ_CT_INT8S: return "compressed-tensors int8 (static input scales)";
    case HFQ_CT_FP8: return "compressed-tensors FP8 (dequantized to f32 at load; activations not "
                            "quantized)";
    case HFQ_CT_PACK:
        if (q->pack.bits == 4 && q->packed_q4 && !q->n_requant)
            return "compressed-tensors W4A16 (codes, scales and zeros as stored; activations "
                   "int8 per token)";
        if (q->pack.bits == 4 && q->packed_q4) /* actorder, groups across 32s, f32 scales */
            return "compressed-tensors W4A16 (not storable as int4 codes: dequantized to f32, "
                   "then requantized to int4)";
        return q->pack.bits == 8 ? "compressed-tensors W8A16 (dequantized to f32 at load)"
                                 : "compressed-tensors W4A16 (dequantized to f32 at load)";
    default: return "compressed-tensors int8";
    }
}

int hfq_is_int8(const hfq *q)
{
    return q && (q->kind == HFQ_CT_INT8 || q->kind == HFQ_CT_INT8S);
}

void *hfq__keep_bytes(hfq *q, size_t n)
{
    if (q->n_bufs == q->cap) {
        int cap = q->cap ? 2 * q->cap : 64;
        void **b = realloc(q->bufs, sizeof *b * (size_t)cap);
        if (!b)
            return NULL;
        q->bufs = b;
        q->cap = cap;
    }
    void *p = malloc(n ? n : 1);
    if (p)
        q->bufs[q->n_bufs++] = p;
    return p;
}

float *hfq__keep(hfq *q, size_t n)
{
    return hfq__keep_bytes(q, n * sizeof(float));
}

void hfq_set_packed_q4(hfq *q, int on)
{
    if (q)
        q->packed_q4 = on;
}

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

static uint32_t u32_at(const st_tensor *t, size_t i)
{
    const uint8_t *p = (const uint8_t *)t->data + 4 * i;
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static float f16_at(const st_tensor *t, size_t i)
{
    const uint8_t *p = (const uint8_t *)t->data + 2 * i;
    return inf_f16_to_f32((uint16_t)(p[0] | p[1] << 8));
}

/* Where one linear's codes and zeros are. */
typedef struct gq_src {
    int awq, zero_plus1;
    int64_t N;
    const st_tensor *qw, *qz;
    int slot[8]; /* AWQ: output 8j + o is in nibble slot[o] */
} gq_src;

static int gq_code(const gq_src *s, int64_t n, int64_t k)
{
    if (s->awq)
        return (int)(u32_at(s->qw, (size_t)(k * (s->N / 8) + n / 8)) >> (4 * s->slot[n % 8]) & 15);
    return (int)(u32_at(s->qw, (size_t)((k / 8) * s->N + n)) >> (4 * (k % 8)) & 15);
}

static int gq_zero(const gq_src *s, int64_t n, int64_t g)
{
    uint32_t v = u32_at(s->qz, (size_t)(g * (s->N / 8) + n / 8));
    if (s->awq)
        return (int)(v >> (4 * s->slot[n % 8]) & 15);
    return (int)(v >> (4 * (n % 8)) & 15) + s->zero_plus1;
}

/* W[n][k] = scale * (q - zero) in f32 (exact: an f16 times a small integer). */
static int gq_f32(hfq *q, const gq_src *s, const st_tensor *sc, const int64_t *grp,
                  const char *prefix, int64_t K, model_tensor *out, inf_err *err)
{
    const int64_t N = s->N;
    float *w = hfq__keep(q, (size_t)N * (size_t)K);
    if (!w)
        return inf_fail(err, INF_ERR_NOMEM, "%s: out of memory for %s", q->path, prefix);
    for (int64_t k = 0; k < K; k++)
        for (int64_t n = 0; n < N; n++)
            w[(size_t)n * (size_t)K + (size_t)k] = f16_at(sc, (size_t)(grp[k] * N + n)) *
                                                   (float)(gq_code(s, n, k) - gq_zero(s, n, grp[k]));
    q->n_requant += q->packed_q4;
    out->dtype = INF_F32;
    out->data = w;
    return INF_OK;
}

/* The codes as stored (model_tensor.q4): two per byte, and each 32 inputs'
 * scale and zero, which their group's are. */
static int gq_codes(hfq *q, const gq_src *s, const st_tensor *sc, const int64_t *grp,
                    const char *prefix, int64_t K, model_tensor *out, inf_err *err)
{
    const int64_t N = s->N, B = (K + 31) / 32;
    uint8_t *u = hfq__keep_bytes(q, (size_t)N * (size_t)(K / 2));
    uint16_t *d = hfq__keep_bytes(q, (size_t)N * (size_t)B * sizeof *d);
    uint8_t *z = hfq__keep_bytes(q, (size_t)N * (size_t)B);
    if (!u || !d || !z)
        return inf_fail(err, INF_ERR_NOMEM, "%s: out of memory for %s", q->path, prefix);
    for (int64_t n = 0; n < N; n++) {
        for (int64_t k = 0; k < K; k += 2)
            u[n * (K / 2) + k / 2] = (uint8_t)(gq_code(s, n, k) | gq_code(s, n, k + 1) << 4);
        for (int64_t b = 0; b < B; b++) {
            int64_t g = grp[32 * b];
            const uint8_t *p = (const uint8_t *)sc->data + 2 * (size_t)(g * N + n);
            d[n * B + b] = (uint16_t)(p[0] | p[1] << 8);
            z[n * B + b] = (uint8_t)gq_zero(s, n, g);
        }
    }
    out->dtype = INF_DTYPE_NONE;
    out->data = NULL;
    out->q4 = u;
    out->q4_scale = d;
    out->q4_zero = z;
    return INF_OK;
}

int hfq_bind(hfq *q, const st_set *st, const char *name, int64_t rows, int64_t cols,
             model_tensor *out, inf_err *err)
{
    if (q->kind == HFQ_CT_INT8 || q->kind == HFQ_CT_INT8S)
        return hfq__ct_bind(q, st, name, rows, cols, out, err);
    if (q->kind == HFQ_CT_FP8)
        return hfq__fp8_bind(q, st, name, rows, cols, out, err);
    if (q->kind == HFQ_CT_PACK)
        return hfq__pack_bind(q, st, name, rows, cols, out, err);
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
    if (K % 8 || N % 8)
        return inf_fail(err, INF_ERR_FORMAT, "%s: %s is %lld x %lld; packed 4-bit needs both "
                        "multiples of 8", q->path, prefix, (long long)N, (long long)K);
    const st_tensor *qw, *qz, *sc, *gi = NULL;
    int awq = q->kind == HFQ_AWQ, rc;
    if ((rc = part(q, st, prefix, "qweight", "I32", awq ? K : K / 8, awq ? N / 8 : N, 0, &qw, err)) ||
        (rc = part(q, st, prefix, "qzeros", "I32", G, N / 8, 0, &qz, err)) ||
        (rc = part(q, st, prefix, "scales", "F16", G, N, 0, &sc, err)) ||
        (!awq && (rc = part(q, st, prefix, "g_idx", "I32", K, 0, 1, &gi, err))))
        return rc;
    int64_t *grp = malloc(sizeof *grp * (size_t)K);
    if (!grp)
        return inf_fail(err, INF_ERR_NOMEM, "%s: out of memory for %s", q->path, prefix);
    int in_order = 1; /* each input's group is k / group_size */
    for (int64_t k = 0; k < K; k++) {
        grp[k] = k / gs;
        if (gi) {
            int32_t v = (int32_t)u32_at(gi, (size_t)k);
            if (v < 0 || v >= G) {
                free(grp);
                return inf_fail(err, INF_ERR_FORMAT, "%s: %s.g_idx[%lld] is %d, outside 0..%lld",
                                gi->file, prefix, (long long)k, v, (long long)G - 1);
            }
            in_order &= v == grp[k];
            grp[k] = v;
        }
    }
    static const int awq_order[8] = {0, 2, 4, 6, 1, 3, 5, 7};
    gq_src src = {.awq = awq, .N = N, .qw = qw, .qz = qz, .zero_plus1 = q->zero_plus1};
    for (int i = 0; i < 8; i++)
        src.slot[awq_order[i]] = i;
    /* the int4 kernels take the codes as stored when every 32 inputs share
     * a group: groups of whole 32s in order, or one per row */
    if (q->packed_q4 && in_order && (gs == K || gs % 32 == 0))
        rc = gq_codes(q, &src, sc, grp, prefix, K, out, err);
    else
        rc = gq_f32(q, &src, sc, grp, prefix, K, out, err);
    free(grp);
    if (rc)
        return rc;
    out->rows = N;
    out->cols = K;
    out->name = qw->name;
    return INF_OK;
}
