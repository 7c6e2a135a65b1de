/* hfq_: bitsandbytes checkpoints (quant_method bitsandbytes: load_in_4bit,
 * the "-bnb-4bit" models transformers and Unsloth save, and load_in_8bit,
 * LLM.int8), each linear dequantized to f32 like the other formats (hfq.h).
 *
 * A linear P.weight [N, K] is stored as P.weight U8 [ceil(N*K/2), 1], the
 * row-major codes two to a byte, the first in the high nibble;
 * P.weight.quant_map F32 [16] (the NF4 or FP4 values); P.weight.absmax F32
 * [B], B = ceil(N*K / blocksize), or with double quantization U8 [B] beside
 * P.weight.nested_absmax F32 [ceil(B / nested_blocksize)] and
 * P.weight.nested_quant_map F32 [256]; and P.weight.quant_state.
 * bitsandbytes__nf4 (or __fp4), a U8 tensor holding JSON: quant_type,
 * blocksize, dtype, shape and, nested, nested_blocksize, nested_dtype and
 * nested_offset. Block b's scale is absmax[b], or nested
 * nested_quant_map[absmax[b]] * nested_absmax[b / nested_blocksize] +
 * nested_offset (f32), and element i is quant_map[code_i] * scale[i /
 * blocksize] in f32 rounded to dtype, as bitsandbytes' CUDA dequantize
 * writes it.
 *
 * LLM.int8 stores P.weight I8 [N, K] row-major, P.SCB F32 [N] (each row's
 * absmax) and P.weight_format U8, one value: 0 for "row" (1 to 3 are the
 * tiled col32 / col_turing / col_ampere layouts of old bitsandbytes,
 * refused). W[n][k] = f32(q * SCB[n]) * f32(1/127), the two f32 products of
 * bitsandbytes' int8_vectorwise_dequant. */
#include "hfq_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BNB "bitsandbytes"

int hfq__bnb_open(const cJSON *qc, const char *path, int *bits, inf_err *err)
{
    int b8 = hfq__jbool(qc, "load_in_8bit", 0), b4 = hfq__jbool(qc, "load_in_4bit", 0);
    if (b8 < 0 || b4 < 0 || b8 + b4 != 1)
        return inf_fail(err, INF_ERR_FORMAT, "%s: " BNB " quantization_config needs exactly one "
                        "of load_in_4bit and load_in_8bit true", path);
    *bits = b8 ? 8 : 4;
    if (b8 && hfq__jbool(qc, "llm_int8_has_fp16_weight", 0) == 1)
        return inf_fail(err, INF_ERR_UNSUPPORTED, "%s: " BNB " llm_int8_has_fp16_weight true "
                        "(weights kept in f16 for training) is not supported", path);
    if (b8)
        return INF_OK;
    const char *st = hfq__jstr(qc, "bnb_4bit_quant_storage");
    if (st && strcmp(st, "uint8"))
        return inf_fail(err, INF_ERR_UNSUPPORTED, "%s: " BNB " bnb_4bit_quant_storage '%s' is not "
                        "supported (uint8)", path, st);
    return INF_OK;
}

/* What one linear's quant_state JSON and tensors say, checked. */
typedef struct bnb_lin {
    const st_tensor *w;
    float map[16];
    const float *scale; /* [blocks], dequantized, kept by q */
    int64_t bs;         /* blocksize */
    int dtype;          /* INF_BF16, INF_F16 or INF_F32: what elements round to */
} bnb_lin;

/* hfq__convert's fn: src a bnb_lin. */
static void bnb_convert(const void *src, const void *aux, int arg, const model_tensor *o,
                        void *dst)
{
    (void)aux, (void)arg;
    const bnb_lin *l = src;
    const uint8_t *p = l->w->data;
    float *d = dst;
    size_t n = (size_t)o->rows * (size_t)o->cols, bs = (size_t)l->bs;
    for (size_t i0 = 0; i0 < n; i0 += bs) { /* one block's scale at a time */
        size_t i1 = i0 + bs < n ? i0 + bs : n;
        float sc = l->scale[i0 / bs];
        for (size_t i = i0; i < i1; i++) {
            unsigned c = i % 2 ? p[i / 2] & 15 : p[i / 2] >> 4;
            d[i] = l->map[c] * sc;
        }
        for (size_t i = i0; l->dtype != INF_F32 && i < i1; i++) /* rounded to the dtype */
            d[i] = l->dtype == INF_BF16 ? inf_bf16_to_f32(inf_f32_to_bf16(d[i]))
                                        : inf_f16_to_f32(inf_f32_to_f16(d[i]));
    }
}

/* P.weight.<part> (name "P.weight"), or NULL. */
static const st_tensor *part(const st_set *st, const char *name, const char *what)
{
    char pn[320];
    snprintf(pn, sizeof pn, "%s.%s", name, what);
    return st_find(st, pn);
}

static int64_t numel(const st_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->shape[i];
    return n;
}

/* t (P.weight.<what>, required): n finite F32 values. */
static int f32s(const hfq *q, const st_tensor *t, const char *name, const char *what, int64_t n,
                inf_err *err)
{
    if (!t)
        return inf_fail(err, INF_ERR_FORMAT, "%s: " BNB " checkpoint without tensor '%s.%s'",
                        q->path, name, what);
    if (strcmp(t->dtype_name, "F32") || numel(t) != n)
        return inf_fail(err, INF_ERR_FORMAT, "%s: tensor '%s' must be F32 of %lld values",
                        t->file, t->name, (long long)n);
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(hfq__float_at(t, (size_t)i)))
            return inf_fail(err, INF_ERR_FORMAT, "%s: %s[%lld] is not finite", t->file, t->name,
                            (long long)i);
    return INF_OK;
}

/* A positive integer key of the quant_state JSON js, else 0. */
static int64_t jpos(const cJSON *js, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(js, k);
    return cJSON_IsNumber(v) && v->valuedouble >= 1 && v->valuedouble <= (double)(1 << 30) &&
                   v->valuedouble == (double)(int64_t)v->valuedouble
               ? (int64_t)v->valuedouble
               : 0;
}

/* The quant_state JSON of linear name: quant_type, blocksize, dtype and
 * shape checked into l; *nested the nested fields' presence, with their
 * blocksize and offset. */
static int read_state(const hfq *q, const st_set *st, const char *name, int64_t rows,
                      int64_t cols, bnb_lin *l, int64_t *nbs, float *offset, inf_err *err)
{
    const char *type = "nf4";
    const st_tensor *t = part(st, name, "quant_state.bitsandbytes__nf4");
    if (!t && (t = part(st, name, "quant_state.bitsandbytes__fp4")))
        type = "fp4";
    if (!t)
        return inf_fail(err, INF_ERR_FORMAT, "%s: " BNB " checkpoint without tensor "
                        "'%s.quant_state.bitsandbytes__nf4' (or __fp4)", q->path, name);
    if (strcmp(t->dtype_name, "U8") || t->ndim != 1)
        return inf_fail(err, INF_ERR_FORMAT, "%s: tensor '%s' must be U8 [n] (JSON)", t->file,
                        t->name);
    cJSON *js = cJSON_ParseWithLength(t->data, t->nbytes);
    int rc = INF_OK;
    const char *qt = js ? hfq__jstr(js, "quant_type") : NULL, *dt = js ? hfq__jstr(js, "dtype") : NULL;
    const cJSON *sh = js ? cJSON_GetObjectItemCaseSensitive(js, "shape") : NULL;
    l->bs = js ? jpos(js, "blocksize") : 0;
    l->dtype = !dt                       ? -1
               : !strcmp(dt, "bfloat16") ? INF_BF16
               : !strcmp(dt, "float16")  ? INF_F16
               : !strcmp(dt, "float32")  ? INF_F32
                                         : -1;
    int shaped = cJSON_IsArray(sh) && cJSON_GetArraySize(sh) == 2 &&
                 cJSON_IsNumber(cJSON_GetArrayItem(sh, 0)) &&
                 cJSON_IsNumber(cJSON_GetArrayItem(sh, 1)) &&
                 cJSON_GetArrayItem(sh, 0)->valuedouble == (double)rows &&
                 cJSON_GetArrayItem(sh, 1)->valuedouble == (double)cols;
    *nbs = 0;
    if (!cJSON_IsObject(js))
        rc = inf_fail(err, INF_ERR_FORMAT, "%s: tensor '%s' is not a JSON object", t->file,
                      t->name);
    else if (!qt || strcmp(qt, type))
        rc = inf_fail(err, INF_ERR_FORMAT, "%s: %s says quant_type '%s' (expected '%s')", t->file,
                      t->name, qt ? qt : "<absent>", type);
    else if (!l->bs)
        rc = inf_fail(err, INF_ERR_FORMAT, "%s: %s's blocksize must be a positive integer",
                      t->file, t->name);
    else if (l->dtype < 0)
        rc = inf_fail(err, INF_ERR_UNSUPPORTED, "%s: %s's dtype '%s' is not supported "
                      "(bfloat16, float16, float32)", t->file, t->name, dt ? dt : "<absent>");
    else if (!shaped)
        rc = inf_fail(err, INF_ERR_FORMAT, "%s: %s's shape must be [%lld, %lld]", t->file,
                      t->name, (long long)rows, (long long)cols);
    else if (cJSON_GetObjectItemCaseSensitive(js, "nested_blocksize")) {
        const cJSON *off = cJSON_GetObjectItemCaseSensitive(js, "nested_offset");
        const char *nd = hfq__jstr(js, "nested_dtype");
        *nbs = jpos(js, "nested_blocksize");
        *offset = cJSON_IsNumber(off) ? (float)off->valuedouble : NAN;
        if (!*nbs || !isfinite(*offset) || (nd && strcmp(nd, "float32")))
            rc = inf_fail(err, INF_ERR_FORMAT, "%s: %s's nested_blocksize (a positive integer), "
                          "nested_offset (a finite number) or nested_dtype (float32) is out of "
                          "line", t->file, t->name);
    }
    cJSON_Delete(js);
    return rc;
}

/* One LLM.int8 linear: its codes and SCB widened to f32 (kept by q). */
typedef struct bnb8_lin {
    const st_tensor *w;
    const float *scb;
} bnb8_lin;

/* hfq__convert's fn: src a bnb8_lin. */
static void bnb8_convert(const void *src, const void *aux, int arg, const model_tensor *o,
                         void *dst)
{
    (void)aux, (void)arg;
    const bnb8_lin *l = src;
    const int8_t *p = l->w->data;
    const float inv127 = 1.0f / 127.0f; /* bitsandbytes' 7.874015718698502e-3 in f32 */
    float *d = dst;
    for (int64_t n = 0; n < o->rows; n++) {
        const float s = l->scb[n];
        for (int64_t k = 0; k < o->cols; k++) {
            float v = (float)p[n * o->cols + k] * s; /* rounded here, as torch does */
            d[n * o->cols + k] = v * inv127;
        }
    }
}

/* P.<leaf> beside P.weight (name), or NULL. */
static const st_tensor *sibling(const st_set *st, const char *name, const char *leaf)
{
    char pn[320];
    size_t n = strlen(name), l = strlen(leaf);
    if (n < 7 || strcmp(name + n - 7, ".weight") || n - 6 + l >= sizeof pn)
        return NULL;
    memcpy(pn, name, n - 6); /* "P." */
    memcpy(pn + n - 6, leaf, l + 1);
    return st_find(st, pn);
}

static int bind8(hfq *q, const st_set *st, const st_tensor *w, int64_t rows, int64_t cols,
                 model_tensor *out, inf_err *err)
{
    const char *name = w->name;
    if (strcmp(w->dtype_name, "I8") || w->ndim != 2 || w->shape[0] != rows || w->shape[1] != cols)
        return inf_fail(err, INF_ERR_FORMAT, "%s: tensor '%s' must be I8 [%lld, %lld] (a " BNB
                        " 8-bit linear)", w->file, name, (long long)rows, (long long)cols);
    const st_tensor *scb = sibling(st, name, "SCB"), *fmt = sibling(st, name, "weight_format");
    if (!scb)
        return inf_fail(err, INF_ERR_FORMAT, "%s: " BNB " 8-bit checkpoint without the SCB "
                        "tensor beside '%s'", q->path, name);
    if ((strcmp(scb->dtype_name, "F32") && strcmp(scb->dtype_name, "F16") &&
         strcmp(scb->dtype_name, "BF16")) || numel(scb) != rows)
        return inf_fail(err, INF_ERR_FORMAT, "%s: tensor '%s' must be F32, F16 or BF16 of %lld "
                        "values (a scale per row)", scb->file, scb->name, (long long)rows);
    if (fmt && (strcmp(fmt->dtype_name, "U8") || numel(fmt) != 1))
        return inf_fail(err, INF_ERR_FORMAT, "%s: tensor '%s' must be one U8", fmt->file,
                        fmt->name);
    if (fmt && *(const uint8_t *)fmt->data != 0)
        return inf_fail(err, INF_ERR_UNSUPPORTED, "%s: %s is %u: only the row layout (0) is "
                        "supported, not old bitsandbytes' tiled GPU layouts", fmt->file,
                        fmt->name, *(const uint8_t *)fmt->data);
    float *s = hfq__keep(q, (size_t)rows);
    bnb8_lin *l = s ? hfq__keep_bytes(q, sizeof *l) : NULL;
    if (!l)
        return inf_fail(err, INF_ERR_NOMEM, "%s: out of memory for %s", q->path, name);
    for (int64_t n = 0; n < rows; n++)
        if (!isfinite(s[n] = hfq__float_at(scb, (size_t)n)))
            return inf_fail(err, INF_ERR_FORMAT, "%s: %s[%lld] is not finite", scb->file,
                            scb->name, (long long)n);
    l->w = w;
    l->scb = s;
    hfq__out(out, rows, cols, name);
    out->dtype = INF_F32;
    return hfq__convert(q, out, bnb8_convert, l, NULL, 0, err);
}

int hfq__bnb_bind(hfq *q, const st_set *st, const char *name, int64_t rows, int64_t cols,
                  model_tensor *out, inf_err *err)
{
    const st_tensor *w = st_find(st, name);
    if (!w)
        return inf_fail(err, INF_ERR_FORMAT, "%s: missing tensor '%s'", q->path, name);
    if (q->bits == 8)
        return bind8(q, st, w, rows, cols, out, err);
    const int64_t n = rows * cols;
    if (strcmp(w->dtype_name, "U8") || numel(w) != (n + 1) / 2)
        return inf_fail(err, INF_ERR_UNSUPPORTED, "%s: tensor '%s' is %s of %lld values; a "
                        BNB " 4-bit linear [%lld, %lld] is U8 of %lld (two codes a byte)",
                        w->file, name, w->dtype_name, (long long)numel(w), (long long)rows,
                        (long long)cols, (long long)((n + 1) / 2));
    bnb_lin l = {.w = w};
    int64_t nbs = 0;
    float offset = 0;
    int rc = read_state(q, st, name, rows, cols, &l, &nbs, &offset, err);
    const st_tensor *map = part(st, name, "quant_map"), *am = part(st, name, "absmax");
    const int64_t B = (n + l.bs - 1) / (l.bs ? l.bs : 1);
    if (rc || (rc = f32s(q, map, name, "quant_map", 16, err)))
        return rc;
    for (int i = 0; i < 16; i++)
        l.map[i] = hfq__float_at(map, (size_t)i);
    const st_tensor *nam = part(st, name, "nested_absmax"), *nmap = part(st, name, "nested_quant_map");
    if (!nbs)
        rc = f32s(q, am, name, "absmax", B, err);
    else if (!am || strcmp(am->dtype_name, "U8") || numel(am) != B)
        rc = inf_fail(err, INF_ERR_FORMAT, "%s: tensor '%s.absmax' must be U8 of %lld values "
                      "(double quantization)", am ? am->file : q->path, name, (long long)B);
    else if (!(rc = f32s(q, nam, name, "nested_absmax", (B + nbs - 1) / nbs, err)))
        rc = f32s(q, nmap, name, "nested_quant_map", 256, err);
    float *sc = rc ? NULL : hfq__keep(q, (size_t)B);
    if (!rc && !sc)
        rc = inf_fail(err, INF_ERR_NOMEM, "%s: out of memory for %s", q->path, name);
    for (int64_t b = 0; !rc && b < B; b++) {
        sc[b] = nbs ? hfq__float_at(nmap, ((const uint8_t *)am->data)[b]) *
                              hfq__float_at(nam, (size_t)(b / nbs)) + offset
                    : hfq__float_at(am, (size_t)b);
        if (!isfinite(sc[b]))
            rc = inf_fail(err, INF_ERR_FORMAT, "%s: %s's scale of block %lld is not finite",
                          q->path, name, (long long)b);
    }
    bnb_lin *kl = rc ? NULL : hfq__keep_bytes(q, sizeof *kl);
    if (!rc && !kl)
        rc = inf_fail(err, INF_ERR_NOMEM, "%s: out of memory for %s", q->path, name);
    if (rc)
        return rc;
    l.scale = sc;
    *kl = l;
    hfq__out(out, rows, cols, w->name);
    out->dtype = INF_F32;
    return hfq__convert(q, out, bnb_convert, kl, NULL, 0, err);
}
