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

/* hfq_describe's lines for linears that go through f32 (q->desc): [0]
 * nothing asked, [1] requantized to int8, [2] to int4; every scheme but
 * compressed-tensors int8 has them. */
static void describe_f32(hfq *q, const char *bnb_type)
{
    static const char *const how[3] = {
        "dequantized to f32 at load; activations not quantized)",
        "dequantized to f32, then requantized to int8; activations int8 per token)",
        "dequantized to f32, then requantized to int4; activations int8 per token)"};
    char head[120];
    switch (q->kind) {
    case HFQ_GPTQ:
    case HFQ_AWQ:
        snprintf(head, sizeof head, "%s %d-bit (", hfq_method(q), q->bits);
        break;
    case HFQ_CT_PACK:
        snprintf(head, sizeof head, "compressed-tensors W%dA16 (", q->pack.bits);
        break;
    case HFQ_CT_FP8:
        snprintf(head, sizeof head, "compressed-tensors FP8 (");
        break;
    case HFQ_FP8M:
        if (q->fp8_block[0])
            snprintf(head, sizeof head, "fp8 (E4M3 weights, a scale per %dx%d block: ",
                     q->fp8_block[0], q->fp8_block[1]);
        else
            snprintf(head, sizeof head, "fp8 (E4M3 weights, a scale per tensor: ");
        break;
    case HFQ_BNB: /* the config's type; each linear's own state says its */
        if (q->bits == 8)
            snprintf(head, sizeof head, "bitsandbytes 8-bit LLM.int8 (int8 rows with a scale "
                     "each: ");
        else
            snprintf(head, sizeof head, "bitsandbytes 4-bit %s (", bnb_type ? bnb_type : "fp4");
        break;
    default: /* compressed-tensors int8: always as stored */
        return;
    }
    for (int i = 0; i < 3; i++)
        snprintf(q->desc[i], sizeof q->desc[i], "%s%s", head, how[i]);
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
    int fp8m = method && !strcmp(method, "fp8"), block[2] = {0, 0};
    int bnb = method && !strcmp(method, "bitsandbytes"), bnb_bits = 4;
    if (!cJSON_IsObject(qc) || !method)
        rc = inf_fail(err, INF_ERR_FORMAT, "%s: quantization_config has no quant_method",
                      config_path);
    else if (ct)
        rc = hfq__ct_open(qc, config_path, &ct_kind, &pack, err);
    else if (fp8m)
        rc = hfq__fp8_open(qc, config_path, block, err);
    else if (bnb)
        rc = hfq__bnb_open(qc, config_path, &bnb_bits, err);
    else if (strcmp(method, "gptq") && strcmp(method, "awq"))
        rc = inf_fail(err, INF_ERR_UNSUPPORTED, "%s: quantization_config quant_method '%s' is "
                      "not supported (gptq, awq, compressed-tensors, fp8, bitsandbytes)",
                      config_path, method);
    else if (bits != 4 && !(bits == 8 && !strcmp(method, "gptq")))
        rc = inf_fail(err, INF_ERR_UNSUPPORTED, "%s: %s with %d bits is not supported (%s)",
                      config_path, method, bits, strcmp(method, "gptq") ? "4" : "4, 8");
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
        q->kind = ct     ? ct_kind
                  : fp8m ? HFQ_FP8M
                  : bnb  ? HFQ_BNB
                  : strcmp(method, "gptq") ? HFQ_AWQ
                                           : HFQ_GPTQ;
        q->fp8_block[0] = block[0];
        q->fp8_block[1] = block[1];
        q->group = group;
        q->bits = bnb ? bnb_bits : bits;
        q->zero_plus1 = q->kind == HFQ_GPTQ && !(fmt && !strcmp(fmt, "gptq_v2"));
        q->pack = pack;
        snprintf(q->path, sizeof q->path, "%s", config_path);
        describe_f32(q, hfq__jstr(qc, "bnb_4bit_quant_type"));
        *out = q;
    }
    cJSON_Delete(root);
    return rc;
}

void hfq_free(hfq *q)
{
    if (!q)
        return;
    bufs_free(&q->bufs);
    free(q);
}

const char *hfq_method(const hfq *q)
{
    return q->kind == HFQ_GPTQ  ? "gptq"
           : q->kind == HFQ_AWQ ? "awq"
           : q->kind == HFQ_FP8M ? "fp8"
           : q->kind == HFQ_BNB ? "bitsandbytes"
                                : "compressed-tensors";
}

/* What the linears of the schemes whose integers can run as stored became
 * when asked to (--quantization int4, or int8 for W8A16): [0] as stored;
 * [1] they did not fit and were requantized; [2] as stored, some with their
 * inputs sorted by group (desc_act, actorder; absent for the schemes
 * without a g_idx). */
enum { RUN_STORED, RUN_REQUANT, RUN_PERM };
#define AS_STORED "codes, scales and zeros as stored; activations int8 per token"
#define AS_SORTED "codes, scales and zeros as stored, inputs sorted by group; activations " \
                  "int8 per token, gathered into that order"
static const char *const as_run[][3] = {
    [HFQ_GPTQ] = {"gptq 4-bit (" AS_STORED ")",
                  "gptq 4-bit (groups not whole 32s of inputs: dequantized to f32, then "
                  "requantized to int4)",
                  "gptq 4-bit (" AS_SORTED ")"},
    [HFQ_AWQ] = {"awq 4-bit (" AS_STORED ")",
                 "awq 4-bit (groups not whole 32s of inputs: dequantized to f32, then "
                 "requantized to int4)"},
    [HFQ_CT_PACK] = {"compressed-tensors W4A16 (" AS_STORED ")",
                     "compressed-tensors W4A16 (not storable as int4 codes: dequantized to f32, "
                     "then requantized to int4)",
                     "compressed-tensors W4A16 (" AS_SORTED ")"},
    [HFQ_CT_PACK + 1] = {"compressed-tensors W8A16 (int8 weights and scales as stored; "
                         "activations int8 per token)",
                         "compressed-tensors W8A16 (not storable as int8 rows: dequantized to "
                         "f32, then requantized to int8)"},
};

const char *hfq_describe(const hfq *q)
{
    if (q->kind == HFQ_CT_INT8)
        return "compressed-tensors int8";
    if (q->kind == HFQ_CT_INT8S)
        return "compressed-tensors int8 (static input scales)";
    int w8 = q->kind == HFQ_CT_PACK && q->pack.bits == 8;
    int can = (q->kind == HFQ_GPTQ && q->bits == 4) || q->kind == HFQ_AWQ ||
              q->kind == HFQ_CT_PACK; /* integers the kernels can take as stored */
    if (!can || !(w8 ? q->packed_q8 : q->packed_q4)) /* through f32 */
        return q->desc[q->packed_q4 ? 2 : q->packed_q8 ? 1 : 0];
    const char *const *row = as_run[q->kind + w8];
    if (q->n_requant)
        return row[RUN_REQUANT];
    return q->n_perm && row[RUN_PERM] ? row[RUN_PERM] : row[RUN_STORED];
}

int hfq_is_int8(const hfq *q)
{
    return q && (q->kind == HFQ_CT_INT8 || q->kind == HFQ_CT_INT8S);
}

void *hfq__keep_bytes(hfq *q, size_t n)
{
    return bufs_keep(&q->bufs, n, 0);
}

void hfq_drop_codes_at(hfq *q, const void *const *at, int n)
{
    if (q)
        bufs_drop_at(&q->bufs, at, n);
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

void hfq_set_packed_q8(hfq *q, int on)
{
    if (q)
        q->packed_q8 = on;
}

void hfq_set_defer(hfq *q,
                   int (*defer)(void *ctx, model_tensor *out, int layer, model_convert_fn fn,
                                const void *src, const void *aux, int arg, inf_err *err),
                   void *ctx)
{
    if (q) {
        q->defer = defer;
        q->defer_ctx = ctx;
    }
}

/* N of a name "model.layers.N.<...>", else -1. */
static int layer_of(const char *name)
{
    int l = -1, n = 0;
    return sscanf(name, "model.layers.%d.%n", &l, &n) == 1 && n > 0 && l >= 0 ? l : -1;
}

int hfq__convert(hfq *q, model_tensor *out, model_convert_fn fn, const void *src, const void *aux,
                 int arg, inf_err *err)
{
    int layer = q->defer ? layer_of(out->name) : -1;
    if (layer >= 0)
        return q->defer(q->defer_ctx, out, layer, fn, src, aux, arg, err);
    void *d = hfq__keep_bytes(q, model_convert_bytes(out));
    if (!d)
        return inf_fail(err, INF_ERR_NOMEM, "%s: out of memory for %s", q->path, out->name);
    fn(src, aux, arg, out, d);
    model_convert_into(out, d);
    return INF_OK;
}

float hfq__float_at(const st_tensor *t, size_t i)
{
    if (t->dtype == INF_F32) {
        uint32_t u = hfq__u32(t, i);
        float f;
        memcpy(&f, &u, sizeof f);
        return f;
    }
    return t->dtype == INF_BF16 ? inf_bf16_to_f32(hfq__u16(t, i)) : inf_f16_to_f32(hfq__u16(t, i));
}

void hfq__out(model_tensor *out, int64_t rows, int64_t cols, const char *name)
{
    memset(out, 0, sizeof *out);
    out->dtype = INF_DTYPE_NONE;
    out->rows = rows;
    out->cols = cols;
    out->name = name;
}

/* The order a linear's K inputs run in as codes: stably sorted by group
 * (a counting sort). *fits 0 when some 32 consecutive ones span groups;
 * else *perm NULL when the order is 0..K-1, or one owned by q (the
 * previous call's when equal). */
static int order(hfq *q, const int32_t *grp, int64_t K, int64_t G, const int32_t **perm, int *fits,
                 inf_err *err)
{
    *perm = NULL;
    *fits = 0;
    int64_t *at = calloc((size_t)G + 1, sizeof *at);
    int32_t *p = malloc(sizeof *p * (size_t)(K ? K : 1));
    if (!at || !p) {
        free(at);
        free(p);
        return inf_fail(err, INF_ERR_NOMEM, "%s: out of memory", q->path);
    }
    for (int64_t k = 0; k < K; k++) /* where each group starts */
        at[grp[k] + 1]++;
    for (int64_t g = 0; g < G; g++)
        at[g + 1] += at[g];
    for (int64_t k = 0; k < K; k++)
        p[at[grp[k]]++] = (int32_t)k;
    free(at);
    int same = 1;
    *fits = 1;
    for (int64_t j = 0; j < K; j++) {
        same &= p[j] == j;
        *fits &= grp[p[j]] == grp[p[j - j % 32]];
    }
    if (*fits && !same && !(q->last_perm && q->last_perm_k == K &&
                            !memcmp(q->last_perm, p, sizeof *p * (size_t)K))) {
        int32_t *kept = hfq__keep_bytes(q, sizeof *p * (size_t)K);
        if (!kept) {
            free(p);
            return inf_fail(err, INF_ERR_NOMEM, "%s: out of memory", q->path);
        }
        memcpy(kept, p, sizeof *p * (size_t)K);
        q->last_perm = kept;
        q->last_perm_k = K;
    }
    if (*fits && !same) {
        *perm = q->last_perm;
        q->n_perm++;
    }
    free(p);
    return INF_OK;
}

int hfq__bind_codes(hfq *q, int64_t N, int64_t K, int64_t G, const int32_t *grp,
                    const hfq_codes_src *s, const char *name, model_tensor *out, int *bound,
                    inf_err *err)
{
    *bound = 0;
    if (K % 2) /* the codes go two a byte, as the int4 kernels take them */
        return INF_OK;
    const int32_t *perm;
    int fits, rc = order(q, grp, K, G, &perm, &fits, err);
    if (rc || !fits)
        return rc;
    const int64_t B = (K + 31) / 32, H = K / 2;
    uint8_t *u = bufs_keep(&q->bufs, (size_t)N * (size_t)H, 1);
    uint8_t *z = bufs_keep(&q->bufs, (size_t)(N * B), 1);
    uint16_t *d = bufs_keep(&q->bufs, (size_t)(N * B) * sizeof *d, 1);
    uint8_t *tile = perm ? malloc((size_t)H * HFQ_CODE_ROWS) : NULL;
    if (!u || !d || !z || (perm && !tile)) {
        free(tile);
        return inf_fail(err, INF_ERR_NOMEM, "%s: out of memory for %s", q->path, name);
    }
    for (int64_t n0 = 0; n0 < N; n0 += HFQ_CODE_ROWS) {
        const int m = N - n0 < HFQ_CODE_ROWS ? (int)(N - n0) : HFQ_CODE_ROWS;
        s->rows(s->ctx, n0, m, K, perm ? tile : u + n0 * H); /* in order: as they go */
        for (int i = 0; perm && i < m; i++) { /* else each row's inputs in perm's order */
            const uint8_t *pk = tile + (size_t)i * (size_t)H;
            uint8_t *un = u + (n0 + i) * H;
            for (int64_t j = 0; j < K; j += 2) {
                int32_t x = perm[j], y = perm[j + 1];
                un[j / 2] = (uint8_t)((pk[x / 2] >> 4 * (x % 2) & 15) |
                                      (pk[y / 2] >> 4 * (y % 2) & 15) << 4);
            }
        }
    }
    free(tile);
    for (int64_t n = 0; n < N; n++)
        for (int64_t b = 0; b < B; b++) { /* each 32's group: its first input's */
            int64_t g = grp[perm ? perm[32 * b] : 32 * b];
            d[n * B + b] = s->scale(s->ctx, n, g);
            z[n * B + b] = (uint8_t)s->zero(s->ctx, n, g);
        }
    hfq__out(out, N, K, name);
    out->q4 = u;
    out->q4_scale = d;
    out->q4_zero = z;
    out->q4_perm = perm;
    *bound = 1;
    return INF_OK;
}

int hfq_bind(hfq *q, const st_set *st, const char *name, int64_t rows, int64_t cols,
             model_tensor *out, inf_err *err)
{
    if (q->kind == HFQ_CT_INT8 || q->kind == HFQ_CT_INT8S)
        return hfq__ct_bind(q, st, name, rows, cols, out, err);
    if (q->kind == HFQ_CT_FP8)
        return hfq__fp8_bind(q, st, name, rows, cols, out, err);
    if (q->kind == HFQ_FP8M)
        return hfq__fp8m_bind(q, st, name, rows, cols, out, err);
    if (q->kind == HFQ_BNB)
        return hfq__bnb_bind(q, st, name, rows, cols, out, err);
    if (q->kind == HFQ_CT_PACK)
        return hfq__pack_bind(q, st, name, rows, cols, out, err);
    return hfq__gptq_bind(q, st, name, rows, cols, out, err);
}
